"""LUF's hazard rules (Documentation/mm/luf.rst): the series' selftest,
luf_hazards in tools/testing/selftests/mm, and guest/luf-hazards.c for the
hazards the selftest leaves to the lab.

Under LUF, reclaim unmaps a clean, read-only-mapped folio of a file nobody
has open for writing without a TLB flush: the reader's CPU keeps a stale
read-only translation to the old page, which is held until a flush.  Each
test of the selftest and each mode of the program takes a page away lazily
and then makes a fresh translation give other bytes; the reader must see
the change.  The selftest: a COW write (cow), a write through
/proc/self/mem into a read-only mapping (force), a write through a file
opened for writing, buffered or direct (write, dio), a truncation, a new
mapping at the address (remap).  The program: a write to the file's blocks
through the block device under its filesystem (bdev), or reuse of the page
(reuse).  bdev-closed writes the blocks before the take-away, while the
page is cached, and closes the device: a correct kernel refuses to make the
page lazy (a device written since its mount), so its trials are refused,
not lazy, and the reader must see the new bytes all the same.  demote is
reuse with the page taken by reclaim's demotion to a lower memory tier (its
guest has a CPU-less node 1): an asynchronous migration, whose lazy source
page migrate_folio_done() holds.  anon-write, anon-force, anon-reuse and
anon-move do the same to anonymous pages, swapped out (their guest has zram
swap): a write after the page became the writer's own (do_swap_page() maps
it writable), a write through /proc/self/mem to a page of a read-only
mapping, reuse, and the swap entry moved away with UFFDIO_MOVE (the address
must then read zeroes); anon-demote is demote for anonymous pages (node 1
and zram both).  compact is reuse with the page taken by compaction of node
1, whose other pages are locked: a migration whose lazy source compaction
releases itself when it ends (patch 0016).

The safety suite runs the selftest on vanilla (it skips: no LUF) and
patched (tests/test_safety.py); here every mode of the program must pass on
patched, with lazy take-aways; on the debug kernel (CONFIG_DEBUG_LUF) with
the rule of a mode or a test switched off (/sys/kernel/debug/luf/
disable_rules) it must fail, so that it is seen to have teeth: every one
does (in its first trials) except truncate and remap, which are flushed by
something their bit does not switch off (STILL_FLUSHED).  The debug checker
must also warn on its own when the rules in CHECKER_WARNS are off, and stay
silent, with everything passing, when all rules are on.  R6 is checked
alone through dio: a direct write passes R4 (the open) and then R6 (the
page-cache invalidation before the write), so with R4 off the reader must
still be right, flushed by R6.
"""

import pytest

from lab import build, luf_hazards, vm
from lab.errors import LabError
from stale_reads import (RULE_FLUSHES, assert_luf_selftest_flushed, command, exits,
                         ktap_exits, luf_selftest_report, records, run_clean,
                         run_luf_selftest, run_to_violation, runs, violations)

pytestmark = pytest.mark.vm

MODES = luf_hazards.MODES
SELFTEST = luf_hazards.SELFTEST_TESTS
TRIALS = 200       # per mode or test, lazy and undisturbed

# disable_rules bits (debug kernels): 0 R1, 1 R3, 2 R4, 3 R5 (userfaultfd
# only), 4 R6, 5 R8 (arm64), 6 R9
R1, R3, R4, R5, R6 = (1 << bit for bit in range(5))
R9 = 1 << 6
# Every test and mode of a file page that reads the evicted index again
# (cow's and force's fault, write's buffered write, the bdev modes'
# read-back, dio's check), and of an anonymous page that is swapped in
# again (anon-write's and anon-force's write faults), meets R9's flush
# there too: their test switches it off with their own rule
RULES = {"cow": R3 | R9, "force": R3 | R9, "write": R4 | R9, "dio": R4 | R6 | R9,
         "truncate": R4 | R6, "remap": R5,
         "bdev": R4 | R9, "bdev-closed": R4 | R9, "reuse": R1, "demote": R1,
         "anon-write": R3 | R9, "anon-force": R3 | R9, "anon-reuse": R1, "anon-move": R5,
         "anon-demote": R1, "compact": R1, "swap-below": R9,
         **{m: R9 for m in luf_hazards.BELOW_MODES}}

# What the reader sees when the mode's rule is missing: the page's bytes from
# before the take-away; in the reuse modes the page it had lost, reused:
# the canary, or zeroes (foreign) if the reader looked between the
# allocator's clearing of the page and the canary's fill (seen in CI with
# demote's one page per trial).
KIND = {"bdev": ("old",), "bdev-closed": ("old",),
        **{m: ("old",) for m in luf_hazards.BELOW_MODES},
        "reuse": ("canary", "foreign"), "demote": ("canary", "foreign"),
        "anon-write": ("old",), "anon-force": ("old",), "swap-below": ("old",),
        "anon-reuse": ("canary", "foreign"), "anon-move": ("old",),
        "anon-demote": ("canary", "foreign"), "compact": ("canary", "foreign")}

# Tests that their rule's bit cannot make fail; strict, so that one that
# starts failing is looked at.  Measured on the debug kernel, 200 trials
# each, no violation: truncate and remap zap the reader's mapping
# (unmap_mapping_range(), the munmap of MAP_FIXED), and zap_pte_range()'s
# flush_tlb_batched_pending() flushes an mm with deferred (lazy too)
# unmaps: 6.12's own flush, which no bit switches off
# (Documentation/mm/luf.rst, H4 and H7).
STILL_FLUSHED = {
    "truncate": "with R4 and R6 off, truncation still zaps the reader's "
                "mapping, and zap_pte_range() flushes its mm (R5, 6.12's "
                "flush_tlb_batched_pending(), not switchable)",
    "remap": "disable_rules bit 3 switches off R5's userfaultfd checks only; "
             "MAP_FIXED's zap flushes the mm (6.12's "
             "flush_tlb_batched_pending(), not switchable)",
}


shape = luf_hazards.shape
# the modes that share a guest (one boot each), named by their modes
GROUPS = [pytest.param(g, id="-".join(g)) for g in luf_hazards.groups()]


@pytest.mark.parametrize("modes", GROUPS)
def test_every_mode_passes_with_lazy_trials(modes):
    results = run_clean(build.built("patched"), "luf-hazards", modes,
                        f"--trials {TRIALS}", shape(modes))
    for mode, rec in results.items():
        checks, counters = rec["checks"], rec["counters"]
        pages = TRIALS * rec["pages_per_trial"]
        assert rec["trials"] == TRIALS, rec
        assert rec["violations"] == 0 and rec["bad_reads"] == 0, rec
        assert rec["disable_rules"] == 0, rec
        if mode in luf_hazards.REFUSED_MODES:
            # the device had a writer since its mount: no page of its files
            # was made lazy, each refused for its file
            assert checks["refused_trials"] == TRIALS, checks
            assert checks["lazy_trials"] == 0, checks
            assert counters["nr_tlb_luf_fallback_file"] >= pages, counters
            continue
        # the trials were lazy: every page of every counted trial was taken
        # away without a flush
        assert counters["nr_tlb_luf_folios"] >= pages, counters
        assert checks["luf_folios"] >= pages, checks
        assert checks["taken_pages"] >= pages, checks
        # the reader was right because the rule flushed, in most trials
        # (the rest: a release by the timer or the cap came first)
        for name in RULE_FLUSHES.get(mode, ()):
            assert name in counters, (mode, name)
        if mode in RULE_FLUSHES:
            flushes = sum(counters[n] for n in RULE_FLUSHES[mode])
            assert flushes >= TRIALS // 2, (mode, counters)
        if mode in ("reuse", "demote", "anon-reuse", "anon-demote", "compact"):
            # the canary got the released pages
            assert checks["reused_pages"] >= 0.9 * pages, checks
        if mode in ("demote", "anon-demote"):
            # every counted trial's page was demoted, a migration (reclaim
            # alone frees, and the PTE would be gone): in demote found on
            # node 1, still mapped; in anon-demote counted by
            # pgmigrate_success, as its copy may be swapped out at once
            assert checks["demoted_pages"] >= pages, checks
            assert counters["pgdemote_direct"] >= pages, counters
            assert counters["pgmigrate_success"] >= pages, counters
        if mode == "compact":
            # every counted trial's page was moved within node 1 and
            # mapped again: compaction migrated it
            assert checks["compacted_pages"] >= pages, checks
            assert counters["pgmigrate_success"] >= pages, counters


@pytest.mark.debug_kernel
@pytest.mark.parametrize("mode", MODES)
def test_mode_fails_without_its_rule(mode):
    """With its rule off, the mode must see the reader read through the
    stale translation.  The debug checker may warn (allowed), and the kernel
    may not survive reuse without R1: the violation line is printed the
    moment it is seen, so a dead guest still counts."""
    cmd = command("luf-hazards", [mode],
                  f"--trials {TRIALS} --disable-rules {RULES[mode]}")
    output = run_to_violation(build.built("debug"), cmd, shape([mode]))
    seen = violations(output)
    assert seen, output[-3000:]
    assert all(v["experiment"] == f"luf-hazards/{mode}" for v in seen), seen
    assert any(v["kind"] in KIND[mode] for v in seen), seen
    results = records(output, "UNFLUSH-RESULT")
    if results:  # the guest lived to report: it stopped at the first bad trial
        (rec,) = results
        assert rec["violations"] > 0 and rec["disable_rules"] == RULES[mode], rec
        assert rec["checks"]["luf_folios"] >= rec["pages_per_trial"], rec
        assert exits(output) == {mode: 1}, output[-3000:]


def teeth_param(test):
    if test in STILL_FLUSHED:
        return pytest.param(test, marks=pytest.mark.xfail(
            strict=True, reason=STILL_FLUSHED[test]))
    return test


@pytest.mark.debug_kernel
@pytest.mark.parametrize("test", [teeth_param(t) for t in SELFTEST])
def test_selftest_fails_without_its_rule(test):
    """The selftest's test, with its rule off on the debug kernel: the
    reader keeps the old bytes after the change (in truncate it reads where
    it must get SIGBUS), and the test fails at that trial."""
    output = run_luf_selftest("debug", f"-m {test} -t {TRIALS}", RULES[test])
    assert ktap_exits(output) == {test: 1}, output[-3000:]
    seen = "not SIGBUS" if test == "truncate" else "the bytes from before it"
    assert f"after the change, {seen}" in output, output[-3000:]


@pytest.mark.debug_kernel
def test_r6_alone_flushes_before_a_direct_write():
    """dio with R4 switched off: the open for writing no longer flushes, so
    only R6's check in invalidate_inode_pages2_range(), which the direct
    write calls before it writes, keeps the reader from the old bytes.  With
    R6 off too, test_selftest_fails_without_its_rule[dio] sees them, and
    test_debug_checker_warns_without_the_rule[dio] the checker's warning;
    here the run must be clean, so the checker stays silent."""
    output = run_luf_selftest("debug", f"-m dio -t {TRIALS}", R4)
    assert ktap_exits(output) == {"dio": 0}, output[-3000:]
    rep = luf_selftest_report(output)["dio"]
    moved = rep["vmstat"]
    assert rep["counted"] >= TRIALS // 2, rep
    assert moved["nr_tlb_luf_folios"] >= rep["counted"] * luf_hazards.SELFTEST_PAGES, rep
    # R4's flush never ran; R6's did, in most trials (the rest: a release
    # by the timer or the cap came first)
    assert "nr_tlb_flush_luf_file" not in moved, rep
    assert moved["nr_tlb_flush_luf_inval"] >= rep["counted"] // 2, rep


@pytest.mark.debug_kernel
def test_r9_alone_flushes_after_a_device_write():
    """bdev with R4 switched off: opening the device for writing no longer
    flushes nor refuses, and the blocks change below the filesystem, as they
    do by the routes no writer count sees (a loop device's backing file, a
    partition of the mounted disk).  R9 alone must keep the reader right:
    the read-back fills the evicted index, and the fill flushes first.
    With both off, test_mode_fails_without_its_rule[bdev] sees the old
    bytes; here the run must be clean, so the checker stays silent."""
    (rec,) = run_clean(build.built("debug"), "luf-hazards", ["bdev"],
                       f"--trials {TRIALS} --disable-rules {R4}",
                       shape(["bdev"])).values()
    counters = rec["counters"]
    assert rec["checks"]["lazy_trials"] >= TRIALS // 2, rec["checks"]
    assert counters["nr_tlb_flush_luf_file"] == 0, counters
    assert counters["nr_tlb_flush_luf_fill"] >= TRIALS // 2, counters


@pytest.mark.debug_kernel
def test_the_storage_hunt_passes_on_the_debug_kernel():
    """The standing hunt's quick form, on the debug kernel with every rule
    on: below-random once a seed (new seeds each run, in the result), each
    run a stack of loop devices, partitions and device mapper drawn from
    its seed and every route that stack has to change the file's blocks
    below the filesystem, before or after the take-away.  Every run must
    pass with lazy trials, R9 flushing (or R6, RULE_FLUSHES), and vm.run()
    fails on any splat, so
    the checker stays silent.  A failing seed is reproduced by running
    `luf-hazards below-random --seed N` alone."""
    seeds, trials = luf_hazards.HUNT["quick"]
    run = vm.run(build.built("debug"), luf_hazards.hunt_script("quick"),
                 shape([luf_hazards.RANDOM_MODE]), quiet=True)
    by_seed = runs(run.output, f"luf-hazards/{luf_hazards.RANDOM_MODE}")
    assert len(by_seed) == seeds, run.output[-3000:]
    for label, r in by_seed.items():
        rec = r["result"]
        assert r["exit"] == 0 and rec, (label, r)
        assert rec["trials"] == trials and rec["violations"] == 0, (label, rec)
        assert rec["checks"]["lazy_trials"] >= trials, (label, rec["checks"])
        flushes = sum(rec["counters"].get(n, 0)
                      for n in RULE_FLUSHES[luf_hazards.RANDOM_MODE])
        assert flushes >= trials // 2, (label, rec)
    # about 50 stacks can be drawn: the seeds drew several
    assert len({r["result"]["stack"] for r in by_seed.values()}) >= seeds // 4


# The debug checker's warning when a mode's rule is missing: it must see the
# stale translation being observed on its own, without the test's reader.
# force and anon-force: GUP writes the new copy through a PTE that stays
# read-only, which the checker finds written in place when the generation
# retires.  bdev: its read-back fills the evicted index again, where the
# checker's fill hook sees the live record (R9).
CHECKER_WARNS = {"cow": "rule R3 missing", "write": "rule R4 or R6 missing",
                 "bdev": "rule R9 missing",
                 # a direct write dirties no folio: kiocb_invalidate_pages()'s
                 # check, not the one in __folio_mark_dirty()
                 "dio": "written directly while a CPU may still read",
                 "reuse": "freed before the flush of generation",
                 "demote": "freed before the flush of generation",
                 "force": "a write that no rule flushed for",
                 "anon-write": "rule R3 missing",
                 "anon-force": "a write that no rule flushed for",
                 "anon-move": "rule R5 missing",
                 # the swap-in's page differs from the stale one when its
                 # PTE is made present
                 "swap-below": "its swap slot changed below the swap layer (rule R9 missing)",
                 "anon-reuse": "freed before the flush of generation",
                 "anon-demote": "freed before the flush of generation",
                 "compact": "freed before the flush of generation",
                 # the read-back fills the evicted index (R9's own hook)
                 **{m: "rule R9 missing" for m in luf_hazards.BELOW_MODES}}


# The rules switched off for the checker's test.  reuse and demote leave R4
# and R6 off too: the per-file notes are a hash table (1,024 buckets in
# mm/luf.c), so a file some other code opens for writing in every trial
# (demote's memory.reclaim) may share the test file's bucket in one boot
# and flush its pages early, as a false positive: one clean-clone CI's boot
# showed 47 R4 flushes in 47 trials that wrote no file, and no warning.
# With them off, only R1 stands between the page and its reuse.
CHECKER_RULES = dict(RULES, reuse=R1 | R4 | R6, demote=R1 | R4 | R6)


@pytest.mark.debug_kernel
@pytest.mark.parametrize("mode", sorted(CHECKER_WARNS))
def test_debug_checker_warns_without_the_rule(mode):
    kernel = build.built("debug")
    logdir = vm.new_logdir(kernel)
    try:
        if mode in SELFTEST:
            run_luf_selftest("debug", f"-m {mode} -t 20", CHECKER_RULES[mode],
                             logdir=logdir)
        else:
            vm.run(kernel, command("luf-hazards", [mode],
                                   f"--trials 20 --disable-rules {CHECKER_RULES[mode]}"),
                   shape([mode]), logdir=logdir, quiet=True, allow_splats=True)
    except LabError:
        pass  # reuse without R1 may kill the guest; the console has the log
    console = (logdir / "console.log").read_text(errors="replace")
    assert CHECKER_WARNS[mode] in console, console[-3000:]


@pytest.mark.debug_kernel
@pytest.mark.parametrize("modes", GROUPS)
def test_every_mode_passes_on_the_debug_kernel_without_warnings(modes):
    """All rules on, DEBUG_VM, KASAN, lockdep and the LUF checker: every mode
    passes, and the run fails on any splat (a checker warning is one)."""
    results = run_clean(build.built("debug"), "luf-hazards", modes,
                        "--trials 50", shape(modes))
    for mode, rec in results.items():
        assert rec["trials"] == 50 and rec["violations"] == 0, (mode, rec)
        if mode in luf_hazards.REFUSED_MODES:
            assert rec["checks"]["refused_trials"] == 50, rec
            continue
        assert rec["checks"]["luf_folios"] >= 50 * rec["pages_per_trial"], rec


@pytest.mark.debug_kernel
def test_the_series_selftest_passes_on_the_debug_kernel():
    """luf_hazards, all rules on: every test passes with lazy trials and its
    rule's flush, and the run fails on any splat."""
    output = run_luf_selftest("debug", "-t 50")
    assert ktap_exits(output) == dict.fromkeys(SELFTEST, 0), output[-3000:]
    assert_luf_selftest_flushed(output)
