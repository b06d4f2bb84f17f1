"""LUF on arm64 (Documentation/mm/luf.rst, "arm64: one owed flush of
everything", and H9).

arm64's LUF stage issues no TLBI; the flush it owes is one TLBI VMALLE1IS.
And arm64 requires break-before-make, so rule R8 flushes before any PTE is
made valid in an mm with lazy work pending: every refault of a lazily
unmapped page, every migration's remap, every contiguous-range install.

On patched-arm64 the hazard modes an arm64 guest can run (all but
anon-move: lab/arches.py's refused_luf_modes; those that demote or compact boot
`virt` through UEFI for its node 1) must pass with lazy trials, and R8 must
have flushed.
On debug-arm64 (KASAN, lockdep, the LUF checker) the same modes pass with no
splat; with R8 switched off (disable_rules bit 5) the checker must catch an
entry made valid over a lazy one under an ordinary workload, the debugger of
guest/ptrace-poke; and a COW must fail only when both its own rule and R8
are off: on arm64 R8 alone already protects the reader of anon-write and
of the series' selftest's cow; reuse fails with R1 off, the page freed
before the owed flush.  The series' selftest of LUF's rules passes on
patched-arm64.

The stale-translation test, the series' selftest stale_tlb, runs here too:
clean on patched-arm64, caught on broken-arm64 (patches/testing/ on top: no
TLBI for read-only PTEs).

Opt-in like every arm64 guest (`make test-arm64`, or pytest --arm64, after
`python3 -m lab build patched-arm64 debug-arm64 broken-arm64`).
"""

import pytest

from lab import build, luf_hazards, vm
from stale_reads import (RULE_FLUSHES, command, ktap_exits, luf_selftest_report, poke, run_clean,
                         run_luf_selftest, run_static_selftest, run_to_violation,
                         violations)

pytestmark = [pytest.mark.vm, pytest.mark.arm64]

TRIALS = 50
# disable_rules bits: 0 R1, 1 R3, 5 R8 (enum luf_rule)
R1, R3, R8, R9 = 1 << 0, 1 << 1, 1 << 5, 1 << 6
GROUPS = [pytest.param(g, id="-".join(g)) for g in luf_hazards.arm64_groups()]


def lazy_and_clean(results, trials):
    """Every mode passed with lazy trials; the R8 flushes of their runs."""
    bbm = 0
    for mode, rec in results.items():
        assert rec["trials"] == trials and rec["violations"] == 0, (mode, rec)
        counters = rec["counters"]
        bbm += counters.get("nr_tlb_flush_luf_bbm", 0)
        if mode in luf_hazards.REFUSED_MODES:
            assert rec["checks"]["refused_trials"] == trials, rec
            continue
        pages = trials * rec["pages_per_trial"]
        assert rec["checks"]["luf_folios"] >= pages, (mode, rec["checks"])
    return bbm


@pytest.mark.parametrize("modes", GROUPS)
def test_every_mode_passes_on_arm64_with_lazy_trials(modes):
    results = run_clean(build.built("patched-arm64"), "luf-hazards", modes,
                        f"--trials {TRIALS}", luf_hazards.shape(modes))
    bbm = lazy_and_clean(results, TRIALS)
    if set(modes) <= set(luf_hazards.BELOW_MODES):
        # the read-back fills the evicted index and R9 flushes there, before
        # the reader faults the page in again: R8 finds nothing pending
        for mode, rec in results.items():
            flushes = sum(rec["counters"].get(n, 0) for n in RULE_FLUSHES[mode])
            assert flushes >= TRIALS // 2, (mode, rec)
        return
    # each mode's reader faults its pages in again after the take-away:
    # R8 flushed before those entries were made valid, or, where the fault
    # or the mode's read-back filled an evicted page-cache index, R9 did
    fill = sum(r["counters"].get("nr_tlb_flush_luf_fill", 0) for r in results.values())
    assert bbm + fill > 0, results


@pytest.mark.parametrize("modes", GROUPS)
def test_every_mode_passes_on_debug_arm64_without_warnings(modes):
    """run_clean() fails on any splat, a checker warning included."""
    results = run_clean(build.built("debug-arm64"), "luf-hazards", modes,
                        "--trials 20", luf_hazards.shape(modes))
    lazy_and_clean(results, 20)


def test_anon_write_fails_only_without_its_rule_and_r8():
    """anon-write's write fault swaps the page in: R9 flushes there (patch
    27), before R3 would; with R3 and R9 off, R8 still flushes before the
    copy is mapped; with the three off the reader keeps the old bytes."""
    kernel = build.built("debug-arm64")
    shape = luf_hazards.shape(["anon-write"])
    results = run_clean(kernel, "luf-hazards", ["anon-write"],
                        f"--trials 20 --disable-rules {R3 | R9}", shape)
    assert results["anon-write"]["counters"].get("nr_tlb_flush_luf_bbm", 0) > 0, results
    output = run_to_violation(kernel, command("luf-hazards", ["anon-write"],
                                              f"--trials 20 --disable-rules {R3 | R8 | R9}"),
                              shape)
    seen = violations(output)
    assert seen and all(v["kind"] == "old" for v in seen), output[-2000:]


def test_the_selftests_cow_fails_only_without_its_rule_and_r8():
    """The same for the series' selftest's cow, a file page's COW, whose
    fault reads the evicted page into the page cache again: R9 flushes
    there, before R8 would."""
    output = run_luf_selftest("debug-arm64", "-m cow -t 20", R3)
    assert ktap_exits(output) == {"cow": 0}, output[-3000:]
    moved = luf_selftest_report(output)["cow"]["vmstat"]
    assert moved.get("nr_tlb_flush_luf_bbm", 0) + moved.get("nr_tlb_flush_luf_fill", 0) > 0, \
        output[-3000:]
    output = run_luf_selftest("debug-arm64", "-m cow -t 20", R3 | R8 | R9)
    assert ktap_exits(output) == {"cow": 1}, output[-3000:]
    assert "after the change, the bytes from before it" in output, output[-3000:]


def test_reuse_fails_without_r1_on_arm64():
    """The owed TLBI VMALLE1IS is what stands between a held page and its
    reuse: with R1 off, the page is freed before it, and the reader sees
    it reused (the canary, or zeroes if it looked between the allocator's
    clearing and the fill)."""
    output = run_to_violation(build.built("debug-arm64"),
                              command("luf-hazards", ["reuse"],
                                      f"--trials 20 --disable-rules {R1}"),
                              luf_hazards.shape(["reuse"]))
    seen = violations(output)
    assert seen and all(v["kind"] in ("canary", "foreign") for v in seen), output[-2000:]


def test_checker_catches_r8_removed_under_a_debugger():
    kernel = build.built("debug-arm64")
    run, counters, _ = poke(kernel, 0, timeout=900)
    assert ktap_exits(run.output) == {"ptrace-poke": 0}, run.output[-3000:]
    assert counters["nr_tlb_luf_folios"] > 0 and counters["nr_tlb_flush_luf_bbm"] > 0, \
        counters
    _, _, console = poke(kernel, R8, timeout=900)
    assert "break-before-make broken, rule R8 missing" in console, console[-3000:]


# The stale-translation test, the series' selftest stale_tlb (patch 22,
# tools/testing/selftests/mm/stale_tlb.c), built static for arm64: file
# reclaim, anon swap-out of 4K pages and 32K folios, migration to node 1
# (which `virt` has when booted through UEFI).  Clean on patched-arm64,
# caught on broken-arm64, the series plus patches/testing/, whose reclaim,
# migration and swap-out issue no TLBI for read-only PTEs: a test that
# cannot fail proves nothing.
SELFTEST_TESTS = ["file reclaim", "anon swap-out", "anon 32K swap-out", "file migration"]


def run_selftest(variant):
    # unflush.scratch: an ext2 for $TMPDIR, where reclaim drops the file's
    # clean pages (on the initramfs they would go to swap)
    shape = vm.VMShape(cpus=2, mem="1G", node1="512M", zram="256M", timeout=600,
                       append="unflush.scratch=64M")
    return run_static_selftest(variant, "stale_tlb", "TMPDIR=/scratch /selftests/stale_tlb",
                               shape)


def test_the_series_selftest_passes_on_patched_arm64():
    output = run_selftest("patched-arm64")
    assert ktap_exits(output) == dict.fromkeys(SELFTEST_TESTS, 0), output[-3000:]


def test_the_series_selftest_catches_broken_arm64():
    output = run_selftest("broken-arm64")
    assert ktap_exits(output) == dict.fromkeys(SELFTEST_TESTS, 1), output[-3000:]
    assert "another process's canary" in output, output[-3000:]


# The series' selftest of LUF's rules (tools/testing/selftests/mm/
# luf_hazards.c), built static for arm64: every test passes on
# patched-arm64, each counting at least half its trials (lazy, the reader
# not preempted).  tests/test_luf.py shows it failing with the rules off.


def test_the_series_luf_selftest_passes_on_patched_arm64():
    output = run_luf_selftest("patched-arm64", "-t 30", timeout=600)
    assert ktap_exits(output) == dict.fromkeys(luf_hazards.SELFTEST_TESTS, 0), output[-3000:]
    # R8 flushed before the reader's refaults were mapped
    report = luf_selftest_report(output)
    assert sum(r["vmstat"].get("nr_tlb_flush_luf_bbm", 0) for r in report.values()) > 0, \
        report
