"""Bad input to the lab's command line: one clear line, non-zero exit."""

import subprocess
import sys

from lab import paths


def lab(*args, env=None):
    return subprocess.run([sys.executable, "-m", "lab", *args], cwd=paths.ROOT,
                          capture_output=True, text=True, env=env)


def one_line_error(proc, *words):
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("lab:")]
    assert proc.returncode != 0
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_unknown_variant():
    one_line_error(lab("build", "nonesuch"), "unknown kernel variant", "vanilla")


def test_run_without_command():
    proc = lab("run")
    one_line_error(proc, "give the guest command")
    assert proc.returncode == 2


def test_bad_memory_size():
    one_line_error(lab("run", "--mem", "lots", "--dry-run", "--", "true"),
                   "--mem", "size like")


def test_bad_cpu_count():
    one_line_error(lab("run", "--cpus", "0", "--dry-run", "--", "true"), "--cpus")


def test_unknown_experiment():
    one_line_error(lab("bench", "--host", "-e", "no-such-experiment"),
                   "unknown experiment", "--list")


def test_unknown_command_shows_usage():
    proc = lab("frobnicate")
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr
