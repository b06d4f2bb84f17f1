"""Bad input to the lab's command line: one clear line, non-zero exit."""

import json
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


def test_kernels_built_differently_are_not_compared():
    one_line_error(lab("bench", "--no-build", "-k", "vanilla,patched-distro"),
                   "patched-distro is built from", "-k vanilla-distro,patched-distro")


def test_unknown_command_shows_usage():
    proc = lab("frobnicate")
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr


def test_report_of_a_directory_without_results(tmp_path):
    proc = lab("report", str(tmp_path))
    one_line_error(proc, "results.json", "bench")
    assert proc.returncode == 2
    assert not (tmp_path / "report.md").exists()


def test_report_of_results_that_are_not_a_bench(tmp_path):
    (tmp_path / "results.json").write_text('{"meta": {}}\n')
    one_line_error(lab("report", str(tmp_path)), "not a bench's results", "experiments")
    (tmp_path / "results.json").write_text("{half")
    one_line_error(lab("report", str(tmp_path)), "not JSON")
    assert not (tmp_path / "report.md").exists()


def test_report_rewritten_from_results(tmp_path):
    rep = {"experiment": "swap-loop", "elapsed_s": 1.0, "tlb_shootdown_irqs": 0,
           "counters": {}, "checks": {}, "missing": []}
    doc = {"meta": {"date": "d", "host": "h", "mode": "tcg", "quick": True, "reps": 2,
                    "kernels": {"vanilla": {"release": "6.12.117"}}, "series": []},
           "experiments": {"swap-loop": {"vanilla": [rep, rep], "patched": [rep, rep]}},
           "failures": []}
    (tmp_path / "results.json").write_text(json.dumps(doc))
    proc = lab("report", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "1 cost in 1 experiment: 0 worse, 0 better, 1 within the spread." in \
        (tmp_path / "report.md").read_text()
