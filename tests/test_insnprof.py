"""The instruction profiler: its plugin builds and loads, its files are read
right, and bad use of `run --insn-profile` is one clear error."""

import json
import subprocess
import sys

import pytest

from lab import arches, insnprof, paths
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
    proc = subprocess.run([arches.ARCHES[arches.HOST].qemu, "-nodefaults", "-display", "none",
                           "-accel", "tcg", "-icount", "shift=0",
                           "-plugin", f"{so},out={tmp_path}/w", "-machine", "none",
                           "-monitor", "stdio"],
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


@pytest.mark.needs_kernel      # --dry-run names the built vanilla kernel
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


# --- arm64: TLBIs and DSBs, decoded by the plugin itself ---

HARNESS = paths.ROOT / "tests" / "plugin_harness.c"


def assemble(tmp_path, name, lines):
    """The raw words of @lines assembled by binutils' aarch64 assembler, the
    encodings' authority here (the plugin decodes them by hand)."""
    src, obj, out = (tmp_path / f"{name}.{x}" for x in ("s", "o", "bin"))
    src.write_text("\n".join(lines) + "\n")
    subprocess.run(["aarch64-linux-gnu-as", "-march=armv8.4-a", "-o", str(obj), str(src)],
                   check=True)
    subprocess.run(["aarch64-linux-gnu-objcopy", "-O", "binary", str(obj), str(out)],
                   check=True)
    return out


@pytest.fixture
def harness(tmp_path):
    """The plugin's source played without QEMU (tests/plugin_harness.c)."""
    exe = tmp_path / "harness"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-pthread", "-o", str(exe),
                    str(HARNESS)], check=True)
    return exe


OPEN, CLOSE = "movz xzr, #0x4631", "movz xzr, #0x4630"
FLUSHES = ["tlbi vale1is, x0", "tlbi rvale1is, x1", "tlbi vmalle1is",
           "tlbi aside1is, x2", "tlbi vae1, x3", "tlbi rvaae1, x3", "tlbi vaale1os, x4",
           "tlbi ipas2e1is, x4", "dsb ish", "dsb ishst", "dsb sy",
           # not DSBs, though DSB-shaped: speculative store bypass barriers
           "ssbb", "pssbb", "dmb ish", "isb", "nop"]


def test_plugin_counts_arm64_tlbis_and_dsbs_by_kind_and_vcpu(tmp_path, harness):
    runs = [("open", [OPEN], 0),
            ("flushes", FLUSHES, 1),
            ("one", ["tlbi vale1is, x5", "dsb ish"], 0),
            ("close", [CLOSE], 0),
            # after the window: counted in none
            ("after", ["tlbi vale1is, x5", "dsb ish"], 0)]
    args = [f"run={assemble(tmp_path, name, lines)}@{vcpu}" for name, lines, vcpu in runs]
    out = tmp_path / "w"
    out.mkdir()
    subprocess.run([str(harness), f"out={out}/window", "arch=arm64", "insns=0", *args],
                   check=True)
    kinds = insnprof.read_kinds(out / "window.0")
    assert {k: v[:2] for k, v in kinds.items()} == {
        "tlbi/vale1is": [1, 1], "tlbi/rvale1is": [0, 1], "tlbi/vmalle1is": [0, 1],
        "tlbi/aside1is": [0, 1], "tlbi/vae1": [0, 1], "tlbi/rvaae1": [0, 1],
        "tlbi/vaale1os": [0, 1], "tlbi/other": [0, 1],
        "dsb/ish": [1, 1], "dsb/ishst": [0, 1], "dsb/sy": [0, 1]}
    assert not any(v[2:] != [0] * 6 for v in kinds.values())
    assert (out / "window.0").read_text() == ""          # insns=0: no blocks
    assert sorted(p.name for p in out.iterdir()) == ["window.0", "window.0.tlbi"]


def test_plugin_reads_no_arm64_markers_in_an_x86_guest(tmp_path, harness):
    """Four bytes of x86 code can look like an arm64 marker: only arch=arm64
    decodes them, so no window opens."""
    words = assemble(tmp_path, "flushes", [OPEN, *FLUSHES, CLOSE])
    out = tmp_path / "w"
    out.mkdir()
    subprocess.run([str(harness), f"out={out}/window", f"run={words}@0"], check=True)
    assert list(out.iterdir()) == []                     # no marker it knows either


def test_plugin_counts_instructions_too_under_icount(tmp_path, harness):
    words = assemble(tmp_path, "flushes", [OPEN, "tlbi vale1is, x0", "dsb ish", CLOSE])
    out = tmp_path / "w"
    out.mkdir()
    subprocess.run([str(harness), f"out={out}/window", "arch=arm64", f"run={words}@1"],
                   check=True)
    # the block is counted at its entry, before the marker opened the window
    assert (out / "window.0").read_text() == ""
    subprocess.run([str(harness), f"out={out}/again", "arch=arm64",
                    f"run={assemble(tmp_path, 'open', [OPEN])}@1", f"run={words}@1"],
                   check=True)
    assert insnprof.read_window(out / "again.0") == [
        (0xffff800080010000, 4, [0, 4, 0, 0, 0, 0, 0, 0])]
    assert insnprof.read_kinds(out / "again.0")["dsb/ish"][:2] == [0, 1]


def test_arm64_windows_become_counters_without_insns(tmp_path):
    (tmp_path / "window.0").write_text("")
    (tmp_path / "window.0.tlbi").write_text("tlbi vale1is 5 2 0\ntlbi rvale1is 1 0 0\n"
                                            "dsb ish 3 1 0\n")
    (tmp_path / "window.1").write_text("")
    (tmp_path / "window.1.tlbi").write_text("")           # a phase that flushed nothing
    out = ('UNFLUSH-WINDOW 7.0\nUNFLUSH-RESULT {"window":"7.0","ops":2}\n'
           'UNFLUSH-WINDOW 7.1\nUNFLUSH-RESULT {"window":"7.1"}\n')
    text, why = insnprof.annotate(out, tmp_path, insns=False)
    assert why is None
    first, second = [json.loads(ln[15:])["counters"] for ln in text.splitlines()
                     if ln.startswith("UNFLUSH-RESULT")]
    assert first == {"tlbi/vale1is": 7, "tlbi/rvale1is": 1, "tlbi/all": 8,
                     "tlbi/vcpu0": 6, "tlbi/vcpu1": 2, "dsb/ish": 4, "dsb/all": 4,
                     "dsb/vcpu0": 3, "dsb/vcpu1": 1}
    assert second == {"tlbi/all": 0, "dsb/all": 0}        # measured: none
    # an x86 window (no .tlbi) gets no tlbi/ counters, only instructions
    (tmp_path / "window.0.tlbi").unlink()
    (tmp_path / "window.1.tlbi").unlink()
    text, _ = insnprof.annotate(out, tmp_path)
    assert not any("tlbi/" in ln for ln in text.splitlines())
