"""arm64 as a platform of the lab: vanilla-arm64 and patched-arm64.

Without a VM: both variants keep their config/ options through olddefconfig
(cross-configured, no build), the `virt` command line has the shape asked
for, what arm64 cannot have yet is refused in one line, and the runner reads
the virtio console as it reads x86's second serial port.

Marked `arm64` (opt-in, conftest.py: `python3 -m pytest --arm64
tests/test_arm64.py`, after `python3 -m lab build vanilla-arm64
patched-arm64`): each kernel boots once, runs guest programs and reports.
On patched-arm64 the series' switches must be there, less the one arm64
cannot have (hvo_flush: no HVO on arm64 in 6.12), and the series' nr_tlb_*
counters by source (CONFIG_DEBUG_TLBFLUSH, which 6.12 defines for x86 only
and the series for every architecture), without x86's shootdown counters;
vanilla-arm64 has no nr_tlb_* at all.  Neither has a TLB row in
/proc/interrupts, and the tlb:tlb_flush tracepoint exists but only x86
fires it.  What does count on both is the
swap-out of anonymous large folios (pswpout, mthp/64kB/swpout), which goes
through the series' batched unmap with anon_unmap on (its counters move)
and around it with anon_unmap off: both must swap every folio out whole;
and the TLBIs the lab's plugin counts in the measured phase
(lab/insnprof.py): one per page and one range TLBI per folio (the contpte
unfold) on vanilla-arm64 and with anon_unmap off, one range TLBI per folio
and none by page with it on.
"""

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lab import (arches, bench, build, datadisk, initramfs, insnprof, package, paths, report,
                 safety, suite, vm)
from lab.errors import LabError

ARM64 = ("vanilla-arm64", "patched-arm64")
# the quick categories' programs that passed on vanilla-arm64 (25: docs/safety.md,
# "The arm64 kernels"), less a margin for the intermittent ones
ARM64_MIN_PASSED = 20
FAKE = Path(__file__).with_name("fake_qemu.py")


@pytest.mark.needs_kernel
@pytest.mark.parametrize("variant", ARM64)
def test_arm64_variant_keeps_its_options(variant, tmp_path):
    src = build.ensure_source(variant)
    make_args, _ = build.cross_tools(variant)
    # check_config() raises if Kconfig dropped an option a fragment asks for
    build.configure_dir(src, tmp_path / "o", build.fragments(variant), make_args)
    config = build.wanted_options([tmp_path / "o" / ".config"])
    assert config["CONFIG_ARM64"] == "y"
    assert config.get("CONFIG_TLB_BATCHING_SWITCHES", "n") == (
        "y" if variant == "patched-arm64" else "n")
    assert config.get("CONFIG_LUF", "n") == (
        "y" if variant == "patched-arm64" else "n")
    # the per-source counters: only the series defines the option on arm64
    assert config.get("CONFIG_DEBUG_TLBFLUSH", "n") == (
        "y" if variant == "patched-arm64" else "n")
    # the UEFI boot of a machine with node 1 runs the Image's EFI stub
    assert config["CONFIG_EFI_STUB"] == "y" and config["CONFIG_ACPI_HMAT"] == "y"


def arm64_kernel(tmp_path):
    return build.Kernel("vanilla-arm64", tmp_path / "Image", "6.12.117", tmp_path,
                        "arm64")


def test_virt_command_line():
    shape = vm.VMShape(cpus=12, mem="1G", zram="256M", data_disk=Path("/d.ext2"),
                       append="unflush.scratch=64M")
    cmd = vm.qemu_command_arm64("Image", "initrd", shape, "c.log", "o.log", "tcg")
    joined = " ".join(cmd)
    assert cmd[0] == arches.ARCHES["arm64"].qemu
    assert "-machine virt,gic-version=3" in joined      # GICv2 stops at 8 CPUs
    assert "-smp 12" in joined and "-m 1024M" in joined
    assert "tcg,thread=multi" in joined and "-cpu max" in joined
    assert "file=/d.ext2,if=virtio,format=raw,readonly=on" in joined
    append = cmd[cmd.index("-append") + 1].split()
    for arg in ("console=ttyAMA0", "unflush.out=hvc0", "unflush.zram=256M",
                "unflush.data=1", "unflush.scratch=64M"):
        assert arg in append
    assert "-chardev file,id=out,path=o.log" in joined
    assert "virtconsole,chardev=out" in joined
    icount = vm.qemu_command_arm64("Image", "i", vm.VMShape(icount=True), "c", "o", "tcg")
    assert "tcg,thread=single" in icount and "shift=0" in icount


def test_node1_boots_through_uefi_with_hmat():
    """A CPU-less node 1 in a lower tier needs ACPI's SRAT and HMAT, which
    arm64 takes only from UEFI: the firmware in pflash, its variable store
    written to a throw-away overlay, node 1 far slower than node 0."""
    shape = vm.VMShape(cpus=2, mem="1G", node1="512M")
    cmd = vm.qemu_command_arm64("Image", "initrd", shape, "c.log", "o.log", "tcg")
    joined = " ".join(cmd)
    assert "-machine virt,gic-version=3,hmat=on" in joined
    assert f"readonly=on,file={vm.AAVMF}/AAVMF_CODE.fd" in joined
    assert f"snapshot=on,file={vm.AAVMF}/AAVMF_VARS.fd" in joined
    assert "-m 1536M" in joined and "node,nodeid=1,memdev=m1,initiator=0" in joined
    assert "hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-latency," \
        "latency=200" in joined
    plain = " ".join(vm.qemu_command_arm64("Image", "i", vm.VMShape(), "c", "o", "tcg"))
    assert "pflash" not in plain and "hmat" not in plain


@pytest.mark.parametrize("shape, message, aavmf", [
    (vm.VMShape(node1="1G"), "arm64: --node1 boots through UEFI and .*AAVMF_CODE.fd "
     "is missing: run `make setup`", "/nonexistent"),
    (vm.VMShape(accel="kvm"), "arm64: no KVM", None),
])
def test_what_arm64_cannot_have_is_refused(tmp_path, monkeypatch, shape, message, aavmf):
    if aavmf:
        monkeypatch.setattr(vm, "AAVMF", Path(aavmf))
    with pytest.raises(LabError, match=message):
        vm.run(arm64_kernel(tmp_path), "true", shape, logdir=tmp_path / "log",
               quiet=True)


def test_arm64_counts_tlbis_in_either_mode_instructions_under_icount():
    """The plugin's arm64 counts need no single thread; its instruction
    counts do, and x86's profile is instructions only."""
    for icount, args in ((False, "arch=arm64,insns=0"), (True, "arch=arm64")):
        shape = vm.VMShape(icount=icount, insn_profile=Path("/p"))
        cmd = vm.qemu_command_arm64("Image", "i", shape, "c", "o", "tcg")
        plugin = cmd[cmd.index("-plugin") + 1]
        assert plugin.endswith(f"insnprof.so,out=/p/window,{args}"), plugin
        assert ("-icount" in cmd) == icount
    assert "-plugin" not in vm.qemu_command_arm64("Image", "i", vm.VMShape(), "c", "o",
                                                  "tcg")
    with pytest.raises(LabError, match="add --icount"):
        vm.check_insn_profile(vm.VMShape(insn_profile=Path("/p")))


def test_bench_leaves_out_what_arm64_cannot_run():
    """The whole suite on arm64 is the experiments it can run; one asked for
    by name that it cannot is refused in one line; x86 runs are untouched."""
    every = suite.select(None)
    kept = bench.for_arm64(every, "vanilla-arm64,patched-arm64", chosen=False)
    ids = {e.id for e in kept}
    # node 1 comes from the UEFI boot: what needs it runs
    assert {"pageout-mthp/64K", "pageout-mthp/4K", "swap-loop",
            "munmap-folio-size/64K", "migrate-loop", "ro-reclaim-tiering",
            "compact-ro", "luf-cost/write", "llama-tiering"} <= ids
    assert not any(e.id.startswith("hugetlb-hvo") for e in kept)
    assert bench.for_arm64(every, "vanilla,patched", chosen=False) == every
    with pytest.raises(LabError, match="no hugetlb vmemmap optimisation"):
        bench.for_arm64(suite.select(["hugetlb-hvo"]), "vanilla-arm64", chosen=True)
    bench.check_comparable(list(ARM64))
    with pytest.raises(LabError, match="compare patched-arm64 with vanilla-arm64"):
        bench.check_comparable(["vanilla", "patched-arm64"])


def test_arm64_report_counts_tlbis_not_shootdowns(tmp_path):
    def rep(tlbi, dsb):
        return {"experiment": "pageout-mthp/64K", "elapsed_s": 1.0,
                "tlb_shootdown_irqs": None,
                "counters": {"tlbi/all": tlbi, "dsb/all": dsb, "tlb_flush/total": 0}}
    doc = {"meta": {"date": "d", "host": "h", "mode": "tcg", "quick": False, "reps": 1,
                    "kernels": {k: {"release": "6.12.117"} for k in ARM64},
                    "baseline": "vanilla-arm64",
                    "arm64": {"cpu": "max", "kpti": {"vanilla-arm64": "off (why)"}}},
           "experiments": {"pageout-mthp/64K": {"vanilla-arm64": [rep(100, 10)],
                                                "patched-arm64": [rep(50, 0)]}},
           "failures": []}
    report.write(tmp_path, doc)
    text = (tmp_path / "report.md").read_text()
    assert "`-cpu max`; KPTI: vanilla-arm64 off (why)" in text
    assert "| tlbi/all | 100 | 50 | 0.500 |" in text
    assert "| dsb/all | 10 | 0 | 0.000 |" in text
    # neither an interrupt arm64 does not have nor a tracepoint it does not fire
    assert "| tlb_shootdown_irqs |" not in text and "| tlb_flush/" not in text
    # nor a plot of shootdowns over time, whose samples are only the start
    for reps in doc["experiments"]["pageout-mthp/64K"].values():
        reps[0]["tlb_irq_series"] = [[0, 0]]
    doc["experiments"]["llama-tiering"] = doc["experiments"].pop("pageout-mthp/64K")
    report.write(tmp_path, doc)
    assert not (tmp_path / "llama-tiering.png").exists()
    assert "llama-tiering.png" not in (tmp_path / "report.md").read_text()


def test_runner_reads_the_virtio_console(tmp_path, monkeypatch):
    wrapper = tmp_path / "qemu"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setitem(arches.ARCHES, "arm64",
                        replace(arches.ARCHES["arm64"], qemu=str(wrapper)))
    archs = []
    monkeypatch.setattr(initramfs, "run_image",
                        lambda cmd, dest, layers=(), arch=None: archs.append(arch) or dest)
    monkeypatch.setenv("FAKE_QEMU_MODE", "ok")
    result = vm.run(arm64_kernel(tmp_path), "true", vm.VMShape(),
                    logdir=tmp_path / "log", quiet=True)
    assert (result.exit_code, result.output, result.accel) == (3, "hello\n", "tcg")
    assert archs == ["arm64"]
    monkeypatch.setenv("FAKE_QEMU_MODE", "splat")
    with pytest.raises(LabError, match="kernel splat.*WARNING"):
        vm.run(arm64_kernel(tmp_path), "true", vm.VMShape(), logdir=tmp_path / "log",
               quiet=True)


# --- in the guest ---

SWITCHES = "/sys/kernel/mm/tlb_batching"
PAGEOUT = "pageout-mthp --size 64K --quick --reps 1"


def result_of(run, name):
    recs = [r for r in run.records("UNFLUSH-RESULT") if r["experiment"].startswith(name)]
    assert len(recs) == 1, f"{len(recs)} results for {name}: {run.output[-2000:]}"
    return recs[0]


def guest_script(patched):
    """One boot: the machine's shape, a counted command, a guest program."""
    lines = [
        "uname -m",
        "echo cpus $(nproc)",
        "grep -c zram0 /proc/swaps",
        "mount | grep -c ' /scratch type ext2'",
        "ls /data/model* | wc -l",
        "counters -- sh -c 'echo 1 > /proc/sys/vm/drop_caches'",
        f"ls {SWITCHES} 2>/dev/null | sed 's/^/switch /'",
        "echo nr_tlb $(grep ^nr_tlb_ /proc/vmstat | grep -vc _luf_)",
        PAGEOUT,
    ]
    if patched:
        # the same swap-out with the series' batched anonymous unmap off
        lines += [f"echo 0 > {SWITCHES}/anon_unmap",
                  f"echo anon_unmap $(cat {SWITCHES}/anon_unmap)",
                  PAGEOUT,
                  f"echo 1 > {SWITCHES}/anon_unmap"]
    return "set -e\n" + "\n".join(lines)


@pytest.mark.vm
@pytest.mark.arm64
@pytest.mark.parametrize("variant", ARM64)
def test_arm64_guest_runs_and_reports(variant, tmp_path):
    kernel = build.built(variant)
    patched = variant == "patched-arm64"
    shape = vm.VMShape(cpus=2, mem="1G", zram="256M", append="unflush.scratch=64M",
                       data_disk=datadisk.ensure(quick=True), timeout=600,
                       insn_profile=tmp_path)
    run = vm.run(kernel, guest_script(patched), shape, quiet=True)
    assert run.exit_code == 0, run.output[-2000:]
    run.output, why = insnprof.annotate(run.output, tmp_path, insns=False)
    assert why is None
    lines = run.output.splitlines()
    assert lines[:5] == ["aarch64", "cpus 2", "1", "1", str(datadisk.FILES)], lines[:5]

    (rec,) = run.records("UNFLUSH-COUNTERS")
    assert rec["exit"] == 0
    assert "pgfault" in rec["counters"]
    # arm64 has no TLB or CAL row in /proc/interrupts (its IPIs are IPI0..),
    # vanilla-arm64 no nr_tlb_* (CONFIG_DEBUG_TLBFLUSH is x86's in 6.12),
    # patched-arm64 the series' by source but not x86's shootdown counters:
    # the counters say so rather than report zeros
    assert not any(k.startswith("irq/") for k in rec["counters"])
    nr_tlb = {k for k in rec["counters"] if k.startswith("nr_tlb_")}
    assert ("nr_tlb_flush_mmu_gather" in nr_tlb) == patched, nr_tlb
    assert ("nr_tlb_luf_folios" in nr_tlb) == patched, nr_tlb
    assert not {"nr_tlb_remote_flush", "nr_tlb_local_flush_one"} & nr_tlb, nr_tlb
    assert ("nr_tlb 0" in lines) == (not patched), lines
    assert rec["missing"] == (["nr_tlb_* (CONFIG_DEBUG_TLBFLUSH)"] if not patched else []) + [
        "irq/TLB (/proc/interrupts)", "irq/CAL (/proc/interrupts)"]

    switches = {ln.split()[1] for ln in lines if ln.startswith("switch ")}
    assert switches == ({"zap_ptes", "unmap_flush", "anon_unmap", "luf"} if patched
                        else set())

    results = [r for r in run.records("UNFLUSH-RESULT")
               if r["experiment"].startswith("pageout-mthp/64K")]
    assert len(results) == (2 if patched else 1), run.output[-2000:]
    for r in results:
        # every 64K folio swapped out whole (pageout-mthp checks it, and
        # prints no result line otherwise): the counters that do exist moved
        assert r["counters"]["mthp/64kB/swpout"] == 32 * 1024 // 64
        assert r["counters"]["pswpout"] >= 32 * 1024 // 4
        # mm/rmap.c defines the tlb:tlb_flush tracepoint on every
        # architecture, but only x86 fires it: present, and never moves
        flushes = {k: v for k, v in r["counters"].items() if k.startswith("tlb_flush/")}
        assert flushes and not any(flushes.values()), flushes
        # what is counted instead, on the CPU that swapped out: per folio
        # one range TLBI, and the dsb that waits for them
        c = r["counters"]
        assert c["tlbi/rvale1is"] == 32 * 1024 // 64, c
        assert c["tlbi/vcpu0"] == c["tlbi/all"] and c["dsb/ish"] > 0, c
    # one pass page by page: a TLBI by VA per page, and the range TLBI is
    # the contpte unfold before the first page's clear
    assert results[-1]["counters"]["tlbi/vale1is"] == 32 * 1024 // 4
    if patched:
        assert "anon_unmap 0" in lines
        # the series' batch clears each contpte block whole and flushes
        # the folio with the range TLBI alone
        assert results[0]["counters"].get("tlbi/vale1is", 0) == 0, results[0]
        # the first run went through the batched anonymous unmap, one batch
        # per folio; the second, with it off, unmapped one PTE at a time
        on, off = (r["counters"] for r in results)
        assert on["nr_tlb_anon_unmap_batches"] == 32 * 1024 // 64, on
        assert on["nr_tlb_anon_unmap_ptes_batched"] == 32 * 1024 // 4, on
        assert off["nr_tlb_anon_unmap_batches"] == 0, off
        assert off["nr_tlb_anon_unmap_ptes_single"] >= 32 * 1024 // 4, off


@pytest.mark.vm
@pytest.mark.arm64
def test_arm64_package_installs_and_boots(tmp_path):
    """`python3 -m lab package --arch arm64`: a linux-image package for arm64
    of patched-arm64's config, whose kernel boots on `virt` with LUF's
    switch and counters."""
    out = tmp_path / "deb"
    proc = subprocess.run([sys.executable, "-m", "lab", "package", "--arch", "arm64",
                           "--out", str(out)], cwd=paths.ROOT, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    release = (build.built("patched-arm64").release.removesuffix("-patched-arm64")
               + package.LOCALVERSIONS["lab"])
    (deb,) = out.glob(f"linux-image-{release}_*_arm64.deb")
    info = subprocess.run(["dpkg-deb", "-f", str(deb), "Architecture"],
                          capture_output=True, text=True, check=True).stdout
    assert info.strip() == "arm64"
    seen = package.boot(deb, tmp_path / "boot", "arm64")
    assert seen["config"].read_text() == \
        (build.built("patched-arm64").objdir / ".config").read_text()
    assert package.check_boot(seen, "arm64") == [], seen["output"]


@pytest.mark.vm
@pytest.mark.arm64
@pytest.mark.parametrize("variant", ARM64)
def test_arm64_node1_is_a_lower_tier_and_pages_migrate_to_it(variant):
    """Booted through UEFI, with the lab's change (patches/arm64-lab/), each
    arm64 kernel has a CPU-less node 1 that the HMAT puts in a lower memory
    tier; migrate-loop moves its pages there and back, and on patched-arm64
    the series' counters say the moves' flushes were batched."""
    shape = vm.VMShape(cpus=2, mem="1G", node1="512M", timeout=600)
    script = "\n".join([
        "echo has_cpu $(cat /sys/devices/system/node/has_cpu)",
        "echo has_memory $(cat /sys/devices/system/node/has_memory)",
        "for t in /sys/devices/virtual/memory_tiering/memory_tier*; do "
        "echo tier ${t##*memory_tier} $(cat $t/nodelist); done",
        "migrate-loop --quick --reps 1",
    ])
    run = vm.run(build.built(variant), script, shape, quiet=True)
    lines = run.output.splitlines()
    assert "has_cpu 0" in lines and "has_memory 0-1" in lines, run.output[-2000:]
    tiers = sorted((int(ln.split()[1]), ln.split()[2]) for ln in lines
                   if ln.startswith("tier "))
    assert [nodes for _, nodes in tiers] == ["0", "1"], tiers   # node 1 below node 0
    rec = result_of(run, "migrate-loop")
    c = rec["counters"]
    assert c["pgmigrate_success"] >= 64 * 1024 // 4, c
    if variant == "patched-arm64":
        assert c["nr_tlb_flush_migrate_batched"] > 0, c
        assert c["nr_tlb_migrate_ptes_batched"] >= 64 * 1024 // 4, c
    else:
        assert not any(k.startswith("nr_tlb_") for k in c), c


def test_the_arm64_guest_runs_only_the_selftests_part_of_the_safety_suite():
    assert safety.parts_on("patched-arm64", safety.PARTS) == ("selftests",)
    assert safety.parts_on("patched", safety.PARTS) == safety.PARTS
    assert safety.BASELINE["patched-arm64"] == "vanilla-arm64"


@pytest.mark.vm
@pytest.mark.arm64
def test_mm_selftests_pass_on_patched_arm64_as_on_vanilla_arm64():
    """The kernel's mm selftests, static for the arm64 guest (it has no C
    library), run by run_vmtests.sh under a static bash, quick categories:
    none that passes on vanilla-arm64 fails on patched-arm64 (after the
    safety suite's reruns), and the runs have teeth: they passed programs
    and subtests on both, the series' stale_tlb among them."""
    summary, text, _ = safety.run(list(ARM64), soak=False, parts=("selftests",))
    print(text)
    for variant in ARM64:
        st = summary[variant]["selftests"]
        assert st["build_failures"] == {}, st["build_failures"]
        assert "stale_tlb" in st["passed"], (variant, st["failed"])
        assert len(st["passed"]) >= ARM64_MIN_PASSED, (variant, st)
    assert summary["patched-arm64"]["regressions"]["failed"] == [], text
    assert summary["patched-arm64"]["ok"], summary["patched-arm64"]["problems"]
