"""Boot each kernel and check the lab itself: counters move when they should,
the VM shapes are what was asked for, and a dying guest is a clear error."""

import pytest

from lab import build, vm
from lab.errors import LabError

pytestmark = pytest.mark.vm


def result_of(run, name):
    recs = [r for r in run.records("UNFLUSH-RESULT") if r["experiment"].startswith(name)]
    assert len(recs) == 1, f"{len(recs)} results for {name}"
    return recs[0]


def test_shootdowns_counted_only_when_another_cpu_is_stale(kernel):
    run = vm.run(kernel, "tlb-remote --reps 1 --remote && tlb-remote --reps 1 --local",
                 vm.VMShape(cpus=2, mem="1G", timeout=300), quiet=True)
    assert run.exit_code == 0, run.output[-2000:]
    remote, local = result_of(run, "tlb-remote/remote"), result_of(run, "tlb-remote/local")
    assert remote["tlb_shootdown_irqs"] > 0
    assert remote["counters"]["nr_tlb_remote_flush"] > 0
    assert remote["counters"]["tlb_flush/remote_send_ipi"] > 0
    assert local["tlb_shootdown_irqs"] == 0
    assert local["counters"]["nr_tlb_remote_flush"] == 0
    assert not remote["missing"] and not local["missing"]


def test_counters_wrap_any_command(kernel):
    run = vm.run(kernel, "counters -- sh -c 'echo 1 > /proc/sys/vm/drop_caches'",
                 vm.VMShape(mem="1G", timeout=300), quiet=True)
    assert run.exit_code == 0, run.output[-2000:]
    (rec,) = run.records("UNFLUSH-COUNTERS")
    assert rec["exit"] == 0
    for name in ("nr_tlb_remote_flush", "nr_tlb_local_flush_all", "pswpout",
                 "irq/TLB/cpu0", "irq/CAL", "tlb_flush/task_switch"):
        assert name in rec["counters"], name
    assert rec["missing"] == []


def test_tiered_memory_and_zram_shape(kernel):
    run = vm.run(kernel,
                 "cat /proc/swaps; cat /sys/devices/system/node/node1/cpulist;"
                 " grep MemTotal /sys/devices/system/node/node1/meminfo;"
                 " ls /sys/devices/virtual/memory_tiering/",
                 vm.VMShape(cpus=2, mem="1G", node1="512M", zram="256M", timeout=300),
                 quiet=True)
    assert run.exit_code == 0, run.output[-2000:]
    assert "/dev/zram0" in run.output
    node1_kb = int(run.output.split("MemTotal:")[1].split()[0])
    assert 400 * 1024 < node1_kb <= 512 * 1024
    tiers = [w for w in run.output.split() if w.startswith("memory_tier")]
    assert len(tiers) == 2, run.output[-2000:]  # HMAT put node 1 in a lower tier


def test_panicking_guest_is_a_clear_error():
    kernel = build.built("vanilla")
    with pytest.raises(LabError, match="died before the command finished.*panic"):
        vm.run(kernel, "echo c > /proc/sysrq-trigger",
               vm.VMShape(mem="512M", timeout=120), quiet=True)


def test_hanging_guest_times_out():
    kernel = build.built("vanilla")
    with pytest.raises(LabError, match="timed out after 20 s"):
        vm.run(kernel, "sleep 600", vm.VMShape(mem="512M", timeout=20), quiet=True)


def test_failing_command_returns_its_status():
    kernel = build.built("vanilla")
    run = vm.run(kernel, "echo out; exit 7", vm.VMShape(mem="512M", timeout=120),
                 quiet=True)
    assert (run.exit_code, run.output) == (7, "out\n")
