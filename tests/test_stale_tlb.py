"""The stale-translation test (guest/stale-tlb.c, docs/stale-tlb.md).

A reader thread alone on one vCPU keeps reading read-only pages while a
helper process takes them away (reclaim, migration, anon swap-out of 4K
pages and of 32K folios, the latter through the series' batched unmap and
its deferred range flush) and fills the freed pages with a canary.  On a
correct kernel the reader never sees anything but the pages' own data; on
the `broken` kernel
(patches/testing/: no TLB flush for read-only PTEs) it must see the canary.
A safety test that has never failed proves nothing, so both are asserted.
"""

import pytest

from lab import build, datadisk, safety, vm
from stale_reads import (command, exits, records, run_clean, run_to_violation,
                         violations)

pytestmark = pytest.mark.vm

MODES = safety.STALE_TLB_MODES
TRIALS = 300       # per mode and kernel; each took ~10 s of guest time under TCG


def shape():
    # node1: a target for migrate; zram: swap for anon; the data disk: the
    # clean, read-only page cache of seed 001's model files
    return vm.VMShape(cpus=2, mem="1G", node1="512M", zram="256M",
                      data_disk=datadisk.ensure(quick=True), timeout=420)


@pytest.mark.parametrize("variant", ["vanilla", "patched"])
def test_reader_never_sees_a_page_after_it_is_reused(variant):
    results = run_clean(build.built(variant), "stale-tlb", MODES,
                        f"--trials {TRIALS}", shape())
    for rec in results.values():
        checks = rec["checks"]
        assert rec["trials"] == TRIALS, rec
        assert rec["violations"] == 0 and rec["bad_reads"] == 0, rec
        # the test had teeth: every page was taken away in the counted
        # trials, and the canary process got (nearly) every freed page
        assert checks["taken_pages"] >= TRIALS * rec["pages_per_trial"], checks
        assert checks["reused_pages"] >= 0.9 * checks["taken_pages"], checks
        # each take-away shot the reader's CPU down
        assert rec["counters"]["irq/TLB/cpu%d" % rec["cpu_reader"]] >= TRIALS, rec
    folios_were_32k(variant, results["anon-32k"])


def folios_were_32k(variant, rec):
    """anon-32k tried what it says: 32K folios swapped out whole, and on
    the series through the batched unmap (one batch per folio)."""
    checks, counters = rec["checks"], rec["counters"]
    assert checks["large_trials"] >= 0.9 * checks["attempts"], checks
    # each trial swaps each folio out twice: once to set up, once to take
    # it away from the reader
    assert counters["mthp/32kB/swpout"] >= 2 * TRIALS, counters
    if variant != "vanilla":
        assert counters["nr_tlb_anon_unmap_batches"] >= 2 * TRIALS, counters
        assert counters["nr_tlb_anon_unmap_ptes_single"] == 0, counters


@pytest.mark.parametrize("mode", MODES)
def test_broken_kernel_is_caught(mode):
    """The kernel that skips the flush for read-only PTEs must be caught in
    every mode.  It may crash later (memory is corrupted): the violation
    line is printed the moment it is seen, so a dead guest still counts."""
    output = run_to_violation(build.built("broken"),
                              command("stale-tlb", [mode], f"--trials {TRIALS}"),
                              shape())
    seen = violations(output)
    assert seen, output[-3000:]
    assert all(v["experiment"] == f"stale-tlb/{mode}" for v in seen)
    # the reader saw the canary process's data in the page it had lost
    assert any(v["kind"] == "canary" for v in seen), seen
    results = records(output, "UNFLUSH-RESULT")
    if results:  # the guest lived to report: it stopped at the first bad trial
        (rec,) = results
        assert rec["violations"] > 0 and rec["trials"] >= 1, rec
        assert exits(output) == {mode: 1}, output[-3000:]
        if mode == "anon-32k":  # the flush skipped was a batch's
            assert rec["counters"]["nr_tlb_anon_unmap_batches"] >= 1, rec


def test_the_series_selftest_catches_the_broken_kernel():
    """The series' own test of the same property, stale_tlb in
    tools/testing/selftests/mm, run by run_vmtests.sh as the safety suite
    runs it (which shows it passing on vanilla and patched): on the broken
    kernel each of its four tests fails, and the reader saw another
    process's canary."""
    tests, output, errors = safety.run_selftests_alone("broken", ["stale_tlb"])
    assert not errors, errors
    (test,) = [t for t in tests if t.name == "stale_tlb"]
    assert test.status == "fail", output[-3000:]
    assert [s.status for s in test.subtests] == ["fail"] * 4, test.subtests
    assert "another process's canary" in output, output[-3000:]

