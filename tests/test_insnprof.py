"""The instruction profiler: its plugin builds and loads, its files are read
right, and bad use of `run --insn-profile` is one clear error."""

import json
import subprocess
import sys

import pytest

from lab import insnprof, paths, vm
from tests.test_cli import lab, one_line_error

SYSTEM_MAP = """\
ffffffff81000000 T _stext
ffffffff81001000 T clear_page_erms
ffffffff81001100 t do_anonymous_page
ffffffff81002000 D some_data
"""


def test_plugin_compiles_and_exports_its_entry_points(tmp_path, monkeypatch):
    monkeypatch.setenv("UNFLUSH_WORK", str(tmp_path))
    so = insnprof.plugin()
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)],
                          capture_output=True, text=True, check=True).stdout
    assert "qemu_plugin_install" in syms and "qemu_plugin_version" in syms
    # nothing else leaks out of the shared object
    assert len([ln for ln in syms.splitlines() if " T " in ln or " D " in ln]) == 2


def test_qemu_loads_the_plugin(tmp_path, monkeypatch):
    """QEMU itself accepts it (API version, symbols): no guest needed."""
    monkeypatch.setenv("UNFLUSH_WORK", str(tmp_path))
    so = insnprof.plugin()
    proc = subprocess.run([vm.QEMU, "-nodefaults", "-display", "none", "-accel", "tcg",
                           "-icount", "shift=0", "-plugin", f"{so},out={tmp_path}/w",
                           "-machine", "none", "-monitor", "stdio"],
                          input="quit\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_windows_are_read_by_vcpu_and_function(tmp_path):
    (tmp_path / "System.map").write_text(SYSTEM_MAP)
    (tmp_path / "window.1").write_text("ffffffff81001010 4 0 8\n")
    (tmp_path / "window.0").write_text(
        "401000 5 500 0\n"                     # user space, vCPU0
        "ffffffff81001010 4 40 4\n"            # inside clear_page_erms
        "ffffffff81001104 3 30 0\n"            # a static function
        "ffffffff81001200 2 2 0\n")            # same function, another block
    syms = insnprof.Symbols(tmp_path / "System.map")
    files = insnprof.windows(tmp_path)
    assert [p.name for p in files] == ["window.0", "window.1"]
    rows = insnprof.read_window(files[0])
    assert insnprof.vcpu_totals(rows) == [572, 4]
    funcs = insnprof.by_function(rows, syms, 0)
    assert funcs == {"(user space)": 500, "clear_page_erms": 40, "do_anonymous_page": 32}
    assert insnprof.by_function(rows, syms, 1) == {"clear_page_erms": 4}
    text = insnprof.report(tmp_path, tmp_path / "System.map", vcpu=0, top=2)
    assert "window.0: instructions per vCPU 572, 4" in text
    assert "do_anonymous_page" not in text      # third of three, --top 2


def test_no_windows_is_a_clear_error(tmp_path):
    with pytest.raises(insnprof.LabError, match="no window.N files"):
        insnprof.windows(tmp_path)


def test_run_insn_profile_uses_icount_and_the_plugin(tmp_path):
    proc = lab("run", "--insn-profile", str(tmp_path / "p"), "--dry-run", "--", "true")
    if proc.returncode != 0 and "not built" in proc.stderr:
        pytest.skip("no vanilla kernel built")
    assert proc.returncode == 0, proc.stderr
    assert "-icount shift=0" in proc.stdout
    assert f"insnprof.so,out={tmp_path}/p/window" in proc.stdout


def test_run_insn_profile_refuses_kvm_and_old_windows(tmp_path):
    one_line_error(lab("run", "--insn-profile", str(tmp_path), "--accel", "kvm",
                       "--dry-run", "--", "true"), "--icount", "TCG")
    (tmp_path / "window.0").write_text("")
    one_line_error(lab("run", "--insn-profile", str(tmp_path), "--dry-run", "--",
                       "true"), "already holds window files")


@pytest.mark.vm
def test_bench_icount_gives_each_allocation_its_instructions(tmp_path):
    """End to end: luf-cost marks each allocation, the plugin counts what
    vCPU 0 ran for it, and the result carries the distribution.  64K of
    anonymous memory is 16 page faults and a munmap() of them: tens of
    thousands of instructions, never none."""
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "lab", "bench", "--no-build", "--quick",
                           "--icount", "-r", "1", "-k", "vanilla",
                           "-e", "luf-cost/alloc-latency/paced", "-o", str(out)],
                          cwd=paths.ROOT, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 0, "\n".join(proc.stderr.splitlines()[-15:])
    doc = json.loads((out / "results.json").read_text())
    (rep,) = doc["experiments"]["luf-cost/alloc-latency/paced"]["vanilla"]
    c = rep["counters"]
    assert 10_000 < c["insns/vcpu0_op_p50"] <= c["insns/vcpu0_op_p90"]
    assert c["insns/vcpu0_op_p90"] <= c["insns/vcpu0_op_p99"] <= c["insns/vcpu0_op_max"]
    # each op's count starts at its own op_begin(): a count that ran on from
    # op to op would put the median far above the phase's mean per op
    assert c["insns/vcpu0_op_p50"] <= c["insns/vcpu0_per_op"] * 2
