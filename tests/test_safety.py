"""The safety suite: its parsers and verdicts on canned output (fast), then
the quick suite itself on the built kernels (marked vm, minutes).

The canned outputs are cut from real guest runs of vanilla 6.12.117.
"""

import json
import os
import pathlib
import shutil
import subprocess

import pytest

from lab import build, luf_hazards, safety, safety_build, tree
from lab.errors import LabError
from lab import safety_parse as parse
from stale_reads import assert_luf_selftest_flushed, luf_selftest_section

# run_vmtests.sh -t mmap, as the guest prints it between the suite's markers
MMAP = """\
SAFETY-CATEGORY-BEGIN mmap 1795326017
# -----------------------
# running ./map_fixed_noreplace
# -----------------------
# TAP version 13
# 1..9
# # mmap() @ 0x7ff83e95a000-0x7ff83e95f000 p=0x7ff83e95a000 result=Success
# ok 1 mmap() 5*PAGE_SIZE at base
# ok 2 mmap() 3*PAGE_SIZE at base+PAGE_SIZE
# ok 9 Base Address unmap() successful
# # Totals: pass:9 fail:0 xfail:0 xpass:0 skip:0 error:0
# [PASS]
ok 1 map_fixed_noreplace
# SKIP ./on-fault-limit
# -----------------
# running ./map_populate
# -----------------
# TAP version 13
# 1..2
# Bail out! [FAIL]	main:102	socketpair():Function not implemented
# # Planned tests != run tests (2 != 0)
# # Totals: pass:0 fail:0 xfail:0 xpass:0 skip:0 error:0
# [FAIL]
not ok 2 map_populate # exit=1
# SUMMARY: PASS=1 SKIP=0 FAIL=1
1..2
SAFETY-CATEGORY-END mmap 1 1795326019
"""

# cow.c prints the same result text for every variant: the [RUN] line names it
COW = """\
SAFETY-CATEGORY-BEGIN cow 1795326400
# running ./cow
# TAP version 13
# # [INFO] detected PMD size: 2048 KiB
# 1..4
# # [RUN] Basic COW after fork() ... with base page
# ok 1 No leak from parent into child
# # [RUN] Basic COW after fork() ... with swapped out base page
# ok 2 # SKIP MADV_PAGEOUT did not work, is swap enabled?
# # [RUN] Basic COW after fork() ... with THP
# ok 3 No leak from parent into child
# # [RUN] Basic COW after fork() ... with swapped-out THP
# not ok 4 No leak from parent into child
# Bail out! 1 out of 4 tests failed
# # Totals: pass:2 fail:1 xfail:0 xpass:0 skip:1 error:0
# [FAIL]
not ok 1 cow # exit=1
SAFETY-CATEGORY-END cow 1 1795326500
"""

# kselftest_harness (migration.c) and a program that skips as a whole
MIGRATION = """\
SAFETY-CATEGORY-BEGIN migration 1795326600
# running ./migration
# TAP version 13
# 1..2
# # Starting 2 tests from 1 test cases.
# #  RUN           migration.private_anon ...
# #            OK  migration.private_anon
# ok 1 migration.private_anon
# #  RUN           migration.shared_anon ...
# #      SKIP      Not enough threads or NUMA nodes available
# ok 2 migration.shared_anon # SKIP Not enough threads or NUMA nodes available
# # PASSED: 2 / 2 tests passed.
# [PASS]
ok 1 migration
# running ./ksm_tests -N -m 1
# 1..0 # SKIP At least 2 NUMA nodes must be available
# [SKIP]
ok 2 ksm_tests -N -m 1 # SKIP
SAFETY-CATEGORY-END migration 4 1795326700
"""

# the suite's watchdog killed a hung category in the middle of a program
HUNG = """\
SAFETY-CATEGORY-BEGIN userfaultfd 1795327000
# running ./uffd-unit-tests
# TAP version 13
# ok 1 register-ioctls
SAFETY-WATCHDOG userfaultfd 600
SAFETY-CATEGORY-END userfaultfd 137 1795327600
"""

STRESS = """\
SAFETY-VMSTAT swap before pswpout 100
SAFETY-VMSTAT swap before pgsteal_direct 5
SAFETY-STRESS-BEGIN swap 1795328000
stress-ng: info:  [200] dispatching hogs: 2 vm, 1 mmap
stress-ng: fail:  [203] vm: detected 3 bit errors while stressing memory
stress-ng: info:  [200] unsuccessful run completed in 40.02s
SAFETY-STRESS-END swap 2 1795328041
SAFETY-VMSTAT swap after pswpout 90100
SAFETY-VMSTAT swap after pgsteal_direct 70005
SAFETY-YAML-BEGIN swap
---
system-info:
      stress-ng-version: 0.15.06
      cpus: 2

metrics:
    - stressor: vm
      bogo-ops: 76636
      bogo-ops-per-second-real-time: 25435.058052

    - stressor: mmap
      bogo-ops: 15
      wall-clock-time: 3.009197

...
SAFETY-YAML-END swap
SAFETY-STRESS-BEGIN tiering 1795328041
stress-ng: info:  [125] numa: no NUMA nodes found, skipping test
SAFETY-STRESS-END tiering 0 1795328081
SAFETY-YAML-BEGIN tiering
metrics:
    - stressor: numa
      bogo-ops: 12
SAFETY-YAML-END tiering
"""


def by_name(tests):
    return {t.name: t for t in tests}


# --- parsers -------------------------------------------------------------------

def test_runner_results_with_reasons():
    tests = by_name(parse.parse_vmtests(MMAP))
    assert tests["map_fixed_noreplace"].status == "pass"
    assert len(tests["map_fixed_noreplace"].subtests) == 3
    fail = tests["map_populate"]
    assert fail.status == "fail" and fail.category == "mmap"
    assert "exit 1" in fail.reason and "socketpair" in fail.reason
    # printed by the runner in every category; it belongs to mlock only
    assert "on-fault-limit" not in tests


def test_bare_skip_of_the_runner_is_kept_in_its_category():
    out = MMAP.replace("BEGIN mmap", "BEGIN mlock")
    tests = by_name(parse.parse_vmtests(out))
    assert tests["on-fault-limit"].status == "skip"
    assert "sudo" in tests["on-fault-limit"].reason


def test_subtests_are_named_by_their_run_line():
    (cow,) = parse.parse_vmtests(COW)
    assert cow.status == "fail"
    names = [s.name for s in cow.subtests]
    assert names[0] == ("cow: Basic COW after fork() ... with base page: "
                        "No leak from parent into child")
    assert len(set(names)) == 4
    skipped = cow.subtests[1]
    assert (skipped.status, skipped.reason) == (
        "skip", "MADV_PAGEOUT did not work, is swap enabled?")
    assert cow.subtests[3].status == "fail"
    assert "with swapped-out THP" in cow.reason


def test_harness_output_and_whole_program_skip():
    tests = by_name(parse.parse_vmtests(MIGRATION))
    mig = tests["migration"]
    assert [s.status for s in mig.subtests] == ["pass", "skip"]
    assert mig.subtests[0].name == "migration: migration.private_anon"
    assert mig.subtests[1].reason == "Not enough threads or NUMA nodes available"
    ksm = tests["ksm_tests -N -m 1"]
    assert (ksm.status, ksm.reason) == ("skip", "At least 2 NUMA nodes must be available")


def test_a_test_cut_short_by_the_watchdog_fails():
    (t,) = parse.parse_vmtests(HUNG)
    assert t.name == "uffd-unit-tests" and t.status == "fail"
    assert "watchdog after 600 s" in t.reason


def test_stress_metrics_failures_and_vmstat():
    swap, tiering = parse.parse_stress(STRESS)
    assert swap.ops == {"vm": 76636, "mmap": 15}
    assert swap.exit == 2 and swap.seconds == 41
    assert swap.failures == ["vm: detected 3 bit errors while stressing memory"]
    assert swap.verification_errors == 1
    assert swap.vmstat == {"pswpout": 90000, "pgsteal_direct": 70000}
    assert tiering.ops == {"numa": 12} and tiering.verification_errors == 0
    assert tiering.skipped == ["numa: no NUMA nodes found, skipping test"]


def test_counters_a_kernel_lacks_are_not_reported_as_zero():
    """nr_tlb_luf_folios is absent on vanilla, nr_tlb_remote_flush on the
    -distro kernels: the summary leaves them out, and keeps a counter that
    is there but did not move."""
    out = ("SAFETY-VMSTAT swap before pswpout 5\nSAFETY-VMSTAT swap before nr_tlb_luf_folios 7\n"
           "SAFETY-STRESS-BEGIN swap 1\nSAFETY-STRESS-END swap 0 2\n"
           "SAFETY-VMSTAT swap after pswpout 9\nSAFETY-VMSTAT swap after nr_tlb_luf_folios 7\n")
    entry = safety.summarize(kernel_run("patched-distro", stress=out))
    assert entry["stress"]["vmstat"] == {"pswpout": 4, "nr_tlb_luf_folios": 0}
    assert entry["stress"]["phases"]["swap"]["vmstat"] == entry["stress"]["vmstat"]
    assert "nr_tlb_remote_flush" not in safety.table("patched-distro", entry)


def test_a_stressor_that_finished_no_bogo_op_is_noted():
    idle = STRESS.replace("bogo-ops: 15", "bogo-ops: 0")
    table = safety.table("patched", safety.summarize(kernel_run("patched", MMAP, idle)))
    assert "note mmap: no bogo op finished in 41 s" in table
    assert "note vm" not in table and "note numa" not in table


def test_stress_that_never_finished_counts_as_an_error():
    (phase,) = parse.parse_stress("SAFETY-STRESS-BEGIN swap 100\nstress-ng: info: x\n")
    assert phase.exit is None and phase.verification_errors == 1


# --- verdicts ---------------------------------------------------------------------

def kernel_run(variant, output="", stress="", splats=()):
    kr = safety.KernelRun(variant, "6.12.117")
    kr.tests = parse.parse_vmtests(output)
    kr.counters = parse.parse_counters(output)
    kr.phases = parse.parse_stress(stress)
    kr.splats = list(splats)
    kr.seconds = {"selftests": 1.0}
    return kr


def test_a_test_failing_only_on_patched_fails_the_suite():
    vanilla = kernel_run("vanilla", COW.replace("not ok 4", "ok 4")
                         .replace("not ok 1 cow # exit=1", "ok 1 cow"))
    patched = kernel_run("patched", COW)
    assert safety.summarize(vanilla, vanilla)["ok"]
    entry = safety.summarize(patched, vanilla)
    assert not entry["ok"]
    assert entry["regressions"]["failed"] == [
        "cow", "cow: Basic COW after fork() ... with swapped-out THP: "
               "No leak from parent into child"]
    assert any(p.startswith("passes on vanilla, fails here: cow")
               for p in entry["problems"])


def test_subtests_are_matched_by_number_not_by_their_measurements():
    out = ("SAFETY-CATEGORY-BEGIN pagemap 1\n# running ./pagemap_ioctl\n"
           "# ok 1 transact_test Extra pages {} (0.0%), extra thread faults {}.\n"
           "ok 1 pagemap_ioctl\nSAFETY-CATEGORY-END pagemap 0 2\n")
    vanilla = kernel_run("vanilla", out.format(8, 62))
    patched = kernel_run("patched", out.format(0, 17))
    assert safety.summarize(patched, vanilla)["ok"]


def test_a_mktemp_path_in_the_command_does_not_rename_the_test():
    out = ("SAFETY-CATEGORY-BEGIN thp 1\n# running ./split_huge_page_test /tmp/xfs_dir_{0}\n"
           "# ok 1 Split huge pages in pagecache\n"
           "ok 1 split_huge_page_test /tmp/xfs_dir_{0}\nSAFETY-CATEGORY-END thp 0 2\n")
    vanilla = kernel_run("vanilla", out.format("iktS5e"))
    patched = kernel_run("patched", out.format("R2cMuC"))
    assert [t.name for t in patched.tests] == ["split_huge_page_test /tmp/xfs_dir_XXXXXX"]
    assert parse.regressed_categories(vanilla.tests, patched.tests) == []
    assert safety.summarize(patched, vanilla)["ok"]


def test_a_failure_that_passes_when_run_again_is_reported_not_failed():
    good = COW.replace("not ok 4", "ok 4").replace("not ok 1 cow # exit=1", "ok 1 cow")
    vanilla, patched = kernel_run("vanilla", good), kernel_run("patched", COW)
    assert parse.regressed_categories(vanilla.tests, patched.tests) == ["cow"]
    patched.reruns = [parse.parse_vmtests(COW), parse.parse_vmtests(good)]
    entry = safety.summarize(patched, vanilla)
    assert entry["ok"] and entry["regressions"]["failed"] == []
    assert len(entry["regressions"]["failed_then_passed_on_rerun"]) == 2
    assert "FLAKY cow" in safety.table("patched", entry)
    patched.reruns = [parse.parse_vmtests(COW)] * safety.RERUN_TRIES  # never passes
    assert not safety.summarize(patched, vanilla)["ok"]


def test_failing_on_both_kernels_is_reported_but_not_a_regression():
    vanilla, patched = kernel_run("vanilla", MMAP), kernel_run("patched", MMAP)
    entry = safety.summarize(patched, vanilla)
    assert entry["ok"]
    assert entry["selftests"]["failed"] == ["map_populate"]
    assert entry["selftests"]["passed"] == ["map_fixed_noreplace"]


def test_skips_carry_reasons_in_the_summary():
    entry = safety.summarize(kernel_run("vanilla", MIGRATION))
    assert entry["selftests"]["skipped"] == [
        {"name": "ksm_tests -N -m 1", "reason": "At least 2 NUMA nodes must be available"}]
    assert entry["selftests"]["subtests"]["skipped"][0]["reason"]


def test_summary_gives_each_categorys_guest_seconds():
    out = ("SAFETY-CATEGORY-BEGIN cow 100\nSAFETY-T 100\n# running ./cow\n"
           "SAFETY-T 130\nok 1 cow\nSAFETY-T 131\n# running ./cow -x\n"
           "SAFETY-T 133\nok 2 cow -x\nSAFETY-CATEGORY-END cow 0 133\n"
           "SAFETY-CATEGORY-BEGIN mmap 140\nSAFETY-T 140\n# running ./map_fixed\n"
           "SAFETY-T 141\nok 3 map_fixed\nSAFETY-CATEGORY-END mmap 0 141\n")
    entry = safety.summarize(kernel_run("vanilla", out))
    assert entry["selftests"]["category_seconds"] == {"cow": 32, "mmap": 1}


def test_stress_errors_and_splats_fail_a_kernel():
    entry = safety.summarize(kernel_run("patched", MMAP, STRESS))
    assert entry["stress"]["errors"] == 1 and entry["stress"]["ops"] == 76636 + 15 + 12
    assert not entry["ok"]
    assert "stress swap: vm: detected 3 bit errors" in entry["problems"][0]
    splat = "selftests: [ 12.3] BUG: Bad page state in process cow"
    entry = safety.summarize(kernel_run("vanilla", MMAP, splats=[splat]))
    assert not entry["ok"] and f"splat: {splat}" in entry["problems"]
    assert splat in safety.table("vanilla", entry)


def test_a_reference_runs_what_judging_the_other_kernel_needs():
    """vanilla beside patched: the series' selftests, each category patched
    failed a test in, and each that gave patched no result (its guest died
    before it); not the categories patched passed."""
    cats = safety.selftest_categories(False)
    died = ("SAFETY-CATEGORY-BEGIN mlock 1\nok 1 mlock2-tests\n"
            "SAFETY-CATEGORY-END mlock 0 2\n")
    patched = kernel_run("patched", MMAP + COW + MIGRATION + died)
    names = [c.name for c in safety.reference_categories([patched], cats)]
    assert set(names) == ({"mmap", "cow"} | set(safety.SERIES_CATEGORIES)
                          | {c.name for c in cats} - {"mmap", "cow", "migration", "mlock"})
    good = kernel_run("patched", "".join(
        f"SAFETY-CATEGORY-BEGIN {c.name} 1\nok 1 {c.name}-prog\n"
        f"SAFETY-CATEGORY-END {c.name} 0 2\n" for c in cats))
    assert [c.name for c in safety.reference_categories([good], cats)] == [
        c.name for c in cats if c.name in safety.SERIES_CATEGORIES]
    with pytest.raises(LabError, match="choose from whole, needed"):
        safety.run(["vanilla"], reference="some")


def test_summary_json_and_latest_link(tmp_path, monkeypatch):
    monkeypatch.setenv("UNFLUSH_RESULTS", str(tmp_path))
    first, second = safety.new_outdir(), safety.new_outdir()
    entry = safety.summarize(kernel_run("vanilla", MMAP))
    for outdir in (first, second):
        safety.write_results({"vanilla": entry}, "text", outdir)
    latest = tmp_path / "tests" / "latest"
    assert latest.resolve() == second.resolve()
    data = json.loads((latest / "summary.json").read_text())
    assert set(data["vanilla"]) >= {"selftests", "stress", "luf_hazards", "splats"}
    assert data["vanilla"]["luf_hazards"]["note"] == "not run: no LUF in this kernel"


def test_counters_of_a_category_are_what_it_moved():
    out = "\n".join([
        "SAFETY-COUNTER stale_tlb before nr_tlb_anon_unmap_batches 10",
        "SAFETY-COUNTER stale_tlb before nr_tlb_anon_unmap_ptes_single 3",
        "SAFETY-COUNTER stale_tlb before irq/TLB 7",
        "SAFETY-CATEGORY-BEGIN stale_tlb 100",
        "ok 1 stale_tlb",
        "SAFETY-CATEGORY-END stale_tlb 0 160",
        "SAFETY-COUNTER stale_tlb after nr_tlb_anon_unmap_batches 210",
        "SAFETY-COUNTER stale_tlb after nr_tlb_anon_unmap_ptes_single 3",
        "SAFETY-COUNTER stale_tlb after irq/TLB 1207",
        "SAFETY-COUNTER thp before thp_swpout 1",     # its guest died in it
    ])
    moved = {"stale_tlb": {"nr_tlb_anon_unmap_batches": 200,
                           "nr_tlb_anon_unmap_ptes_single": 0, "irq/TLB": 1200}}
    assert parse.parse_counters(out) == moved
    # the markers around the category are not test output
    assert [t.name for t in parse.parse_vmtests(out)] == ["stale_tlb"]
    # the summary is their record
    assert safety.summarize(kernel_run("patched", out))["selftests"]["counters"] == moved


def test_the_guests_counters_parse_on_this_machine(tmp_path):
    """The guest script's counters(), run here on the host's /proc, with a
    fake mTHP directory: every line it prints is a counter the parser takes."""
    script = safety.guest_shell("selftests.sh")
    body = script[script.index("counters() {"):script.index("# run_vmtests.sh once")]
    stats = tmp_path / "hugepages-32kB" / "stats"
    stats.mkdir(parents=True)
    (stats / "swpout").write_text("5\n")
    run = f"T={tmp_path}\n{body}counters stale_tlb before\ncounters stale_tlb after\n"
    proc = subprocess.run(["sh", "-c", run], text=True, capture_output=True, check=True)
    lines = proc.stdout.splitlines()
    assert lines and all(parse.COUNTER.match(ln) for ln in lines), proc.stdout
    moved = parse.parse_counters(proc.stdout)["stale_tlb"]
    assert moved["mthp/32kB/swpout"] == 0 and "pswpout" in moved
    if "TLB:" in pathlib.Path("/proc/interrupts").read_text():
        assert "irq/TLB" in moved


def test_luf_hazards_results_by_mode_and_their_problems():
    out = "\n".join([
        "TAP version 13", "1..1",
        'UNFLUSH-RESULT {"experiment":"luf-hazards/reuse","trials":100,"violations":0,'
        '"checks":{"luf_folios":412}}',
        "ok 1 luf-hazards/reuse",
        "TAP version 13", "1..1",
        'UNFLUSH-RESULT {"experiment":"luf-hazards/bdev-closed","trials":100,'
        '"violations":0,"checks":{"luf_folios":0,"refused_trials":100}}',
        "ok 1 luf-hazards/bdev-closed",
        # another program's test of the same mode name is not this one's
        "ok 1 other-program/anon-write",
        "TAP version 13", "1..1",
        'UNFLUSH-VIOLATION {"experiment":"luf-hazards/anon-write","kind":"old","trial":3}',
        'UNFLUSH-RESULT {"experiment":"luf-hazards/anon-write","trials":3,"violations":1,'
        '"checks":{"luf_folios":12}}',
        "not ok 1 luf-hazards/anon-write",
        "TAP version 13", "1..1",
        "not ok 1 luf-hazards/bdev # /scratch is not a disk filesystem",   # no result
        "luf-hazards: /scratch is not a disk filesystem",
        "TAP version 13", "1..1",
        "ok 1 luf-hazards/demote # SKIP demote needs a CPU-less memory node",
    ])
    luf = parse.parse_trials(out, "luf-hazards",
                             ("reuse", "bdev-closed", "anon-write", "bdev", "anon-move", "demote"))
    assert luf["reuse"] == {"trials": 100, "violations": 0, "exit": 0, "message": "",
                            "first": "", "luf_folios": 412}
    assert luf["bdev-closed"]["refused_trials"] == 100
    assert luf["anon-write"]["violations"] == 1 and luf["anon-write"]["exit"] == 1
    assert luf["bdev"]["exit"] == 1 and "disk filesystem" in luf["bdev"]["message"]
    assert luf["anon-move"]["exit"] == -1        # never finished
    assert luf["demote"]["exit"] == 4 and "CPU-less" in luf["demote"]["message"]
    kr = kernel_run("patched", MMAP)
    kr.luf = luf
    entry = safety.summarize(kr)
    assert entry["luf_hazards"]["trials"] == 203
    assert not entry["ok"]
    assert any("luf-hazards anon-write: 1 reads" in p for p in entry["problems"])
    assert any("luf-hazards bdev: exit 1: /scratch" in p for p in entry["problems"])
    assert any("luf-hazards anon-move: exit -1" in p for p in entry["problems"])
    assert "    reuse: 100 trials, 0 violations, 412 folios unmapped lazily, exit 0" in \
        safety.table("patched", entry)


def test_a_hunt_is_counted_whole_and_a_failed_seed_is_kept():
    """The hunt runs below-random once a seed: the mode's trials and lazy
    folios are the runs' sums, and a seed that failed is not hidden by the
    seeds that passed after it."""
    def run(seed, trials, verdict):
        return [f"RUN seed-{seed}", "TAP version 13", "1..1",
                'UNFLUSH-RESULT {"experiment":"luf-hazards/below-random",'
                f'"trials":{trials},"violations":0,"seed":{seed},'
                f'"checks":{{"luf_folios":{trials}}}}}',
                f"{verdict} 1 luf-hazards/below-random"]
    out = "\n".join(run(1, 25, "ok") + run(2, 3, "not ok") + run(3, 25, "ok"))
    (luf,) = parse.parse_trials(out, "luf-hazards", ("below-random",)).values()
    assert luf["trials"] == 53 and luf["luf_folios"] == 53
    assert luf["exit"] == 1
    # the hunt's record: each seed's run
    runs = parse.parse_hunt(out, "luf-hazards/below-random")
    assert [(r["seed"], r["trials"]) for r in runs] == [(1, 25), (2, 3), (3, 25)]


@pytest.mark.parametrize("soak", [False, True])
def test_the_hunt_runs_each_seed_once_with_the_modes_below(soak):
    (below,) = [g for g in luf_hazards.groups() if luf_hazards.RANDOM_MODE in g]
    seeds, trials = luf_hazards.HUNT[safety.hunt_length(soak)]
    script = safety.luf_script(below, soak)
    runs = [ln for ln in script.splitlines() if "--seed" in ln]
    assert len(runs) == seeds
    assert len({ln.split("--seed ")[1].split()[0] for ln in runs}) == seeds
    assert all(f"--trials {trials}" in ln and ln.startswith("echo RUN seed-")
               for ln in runs)
    # the hunt's trials have their time in the guest's
    assert safety.luf_shape(below, soak, "debug").timeout > \
        safety.luf_shape(below[:-1], soak, "debug").timeout + seeds * trials


def test_luf_hazards_run_only_where_there_is_luf():
    assert set(safety.LUF_KERNELS) == {"patched", "debug", "patched-distro"}
    assert all(build.VARIANTS[k][0] == "patched" for k in safety.LUF_KERNELS)
    assert [m for g in luf_hazards.groups() for m in g] == list(luf_hazards.MODES)
    assert safety.luf_shape(("demote",), False, "patched").node1
    assert safety.luf_shape(("anon-write",), True, "debug").timeout > \
        safety.luf_shape(("anon-write",), False, "debug").timeout
    # reuse's 3000 trials need 99 MiB of file: the soak's /scratch is larger
    assert "unflush.scratch=512M" in safety.luf_shape(("reuse",), True, "patched").append
    assert "unflush.scratch=128M" in safety.luf_shape(("reuse",), False, "patched").append


# --- guest scripts and userland -------------------------------------------------------

@pytest.mark.parametrize("soak", [False, True])
def test_guest_scripts_are_valid_shell(soak):
    busybox = shutil.which("busybox") or "/bin/busybox"
    scripts = [safety.selftest_script(safety.selftest_categories(soak), "vanilla"),
               safety.stress_script(safety.stress_phases(soak)),
               *[safety.luf_script(g, soak) for g in luf_hazards.groups()]]
    for script in scripts:
        proc = subprocess.run([busybox, "sh", "-n"], input=script, text=True,
                              capture_output=True)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("run", ["record", pytest.param("quick_run", marks=pytest.mark.vm)])
def test_quick_mode_fits_its_budget(run, request):
    """A quick run ran the quick categories (a reference some of them) and
    took no more time than the suite gives it, times the kernel's SLOWDOWN:
    each category within its watchdog, the selftests guest within its
    timeout (the watchdogs' sum and time to boot), and the stress phases
    together within twice their --timeout, as the stress guest's timeout
    allows them.  On the recorded run (docs/results/safety-quick/), and on
    the quick run of make test (the fixture above: nothing more boots)."""
    record = pathlib.Path(__file__).parent.parent / "docs/results/safety-quick/summary.json"
    summary = (json.loads(record.read_text()) if run == "record"
               else request.getfixturevalue(run))
    watchdogs = {c.name: c.watchdog for c in safety.selftest_categories(False)}
    assert set(watchdogs) == set(safety.QUICK_CATEGORIES)
    phases = {p.name: safety._phase_seconds(p) for p in safety.stress_phases(False)}
    for variant, entry in summary.items():
        assert entry["mode"] == "quick", variant
        slowdown = safety.SLOWDOWN[variant]
        took = entry["selftests"]["category_seconds"]
        ran, quick = set(took), set(watchdogs)
        if entry["reference_only"]:
            assert ran <= quick, (variant, "not quick:", ran - quick)
        else:
            assert ran == quick, (variant, "not run:", quick - ran, "not quick:", ran - quick)
        over = {c: f"{s} s of {watchdogs[c] * slowdown}" for c, s in took.items()
                if s > watchdogs[c] * slowdown}
        assert not over, (variant, over)
        timeout = safety.selftest_shape(False, variant).timeout
        assert entry["seconds"]["selftests"] <= timeout, (variant, entry["seconds"], timeout)
        if "stress" not in entry["seconds"]:
            assert entry["reference_only"], variant   # a reference runs no stress-ng
            continue
        stressed = {name: p["seconds"] for name, p in entry["stress"]["phases"].items()}
        assert set(stressed) == set(phases), (variant, stressed)
        allowed = 2 * sum(phases.values()) * slowdown
        assert sum(stressed.values()) <= allowed, (variant, stressed, allowed)
        timeout = safety.stress_shape(False, variant).timeout
        assert entry["seconds"]["stress"] <= timeout, (variant, entry["seconds"], timeout)


def test_libraries_of_a_dynamic_program_include_the_loader():
    libs = dict(safety_build.shared_libraries([safety_build.BASH]))
    assert any(g.startswith("/lib64/ld-linux") for g in libs)
    assert any(g.endswith("/libc.so.6") for g in libs)
    assert all(host.is_file() for host in libs.values())


def test_build_failures_name_the_program_and_its_error(tmp_path):
    log = ("khugepaged.c:1195:24: error: 'KSFT_SKIP' undeclared (first use)\n"
           "make: *** [../lib.mk:222: /x/mm/khugepaged] Error 1\n"
           "make: *** [../lib.mk:222: /x/mm/cow] Error 1\n")
    (tmp_path / "cow").write_text("")   # built after all, by a later make
    assert safety_build.build_failures(log, tmp_path) == {
        "khugepaged": "'KSFT_SKIP' undeclared (first use)"}


def test_each_kernel_is_compared_with_its_own_baseline():
    runs = {k: object() for k in ("vanilla", "patched", "debug")}
    assert safety.baseline_of("patched", runs) is runs["vanilla"]
    assert safety.baseline_of("vanilla", runs) is None
    # debug is never held against the full-speed vanilla
    assert safety.baseline_of("debug", runs) is None
    runs["vanilla-debug"] = object()
    assert safety.baseline_of("debug", runs) is runs["vanilla-debug"]
    assert safety.baseline_of("vanilla-debug", runs) is None
    runs["vanilla-distro"] = object()
    assert safety.baseline_of("patched-distro", runs) is runs["vanilla-distro"]
    # every kernel the suite takes is a lab variant, and its baseline too
    for variant in safety.KERNELS:
        build.check_variant(variant)
        assert safety.SLOWDOWN[variant] >= 1
    assert set(safety.BASELINE.values()) <= set(safety.KERNELS)


def test_a_kernel_with_jump_labels_runs_on_one_tcg_thread(tmp_path):
    """Multi-threaded TCG can run the int3 of a static key being flipped:
    the -distro kernels' guests get -icount, whatever their shape; the
    lab's kernels keep one host thread per vCPU."""
    shape = safety.stress_shape(False, "patched-distro")
    kernel = build.Kernel("patched-distro", tmp_path / "bzImage", "6.12", tmp_path)
    (tmp_path / ".config").write_text("CONFIG_JUMP_LABEL=y\n")
    assert safety.one_tcg_thread(kernel, shape).icount
    assert safety.one_tcg_thread(kernel, shape).cpus == shape.cpus
    (tmp_path / ".config").write_text("# CONFIG_JUMP_LABEL is not set\n")
    assert safety.one_tcg_thread(kernel, shape) == shape


# --- the quick suite on the real kernels ------------------------------------------------

def built_kernels():
    """vanilla and patched; the debug pair too when both are built (a debug
    kernel alone has nothing to be compared with)."""
    kernels = ["vanilla", "patched"]
    try:
        build.built("vanilla-debug")
        build.built("debug")
        kernels += ["vanilla-debug", "debug"]
    except Exception:
        pass
    return kernels


# The parts make test needs from the suite: its luf-hazards guests run the
# same program on the same kernels as tests/test_luf.py, with fewer trials,
# so here they would add four boots and no check (their verdicts are tested
# on canned output above).
QUICK_PARTS = ("selftests", "stress")


@pytest.fixture(scope="module")
def quick():
    """The quick run: its summary, and the directory of each guest's log.
    The baselines are references only (safety.reference_categories()): a
    patched kernel that passes every selftest needs of vanilla only the
    series' own, which must pass there too."""
    summary, text, outdir = safety.run(built_kernels(), soak=False, parts=QUICK_PARTS,
                                       reference="needed")
    print(text)
    return summary, outdir


@pytest.fixture(scope="module")
def quick_run(quick):
    return quick[0]


@pytest.fixture(scope="module")
def quick_outdir(quick):
    return quick[1]


@pytest.mark.vm
def test_quick_suite_passes(quick_run):
    problems = {k: e["problems"] for k, e in quick_run.items() if e["problems"]}
    assert not problems, json.dumps(problems, indent=1)


@pytest.mark.vm
def test_no_test_fails_only_on_a_changed_kernel(quick_run):
    # the changed kernels are those with a baseline; vanilla-debug is one
    changed = [v for v in quick_run if v in safety.BASELINE]
    assert "patched" in changed
    for variant in changed:
        assert quick_run[variant]["regressions"]["failed"] == [], variant


def whole_runs(quick_run):
    """The kernels that ran every part and category of the quick suite: all
    but the references, and at least patched."""
    whole = {v: e for v, e in quick_run.items() if not e["reference_only"]}
    assert "patched" in whole, list(whole)
    return whole


@pytest.mark.vm
def test_stress_verified_data_and_did_work(quick_run):
    for variant, entry in whole_runs(quick_run).items():
        stress = entry["stress"]
        assert stress["errors"] == 0, (variant, stress["phases"])
        assert stress["ops"] > 0, variant
        # the memory cgroup really pushed pages out to zram
        assert stress["vmstat"]["pswpout"] > 0, (variant, stress["vmstat"])
        # on LUF kernels the disk phase ran LUF's lazy unmaps, not just
        # the flushing paths
        if variant in ("patched", "debug"):
            disk = stress["phases"]["disk"]["vmstat"]
            assert disk["nr_tlb_luf_folios"] > 0, (variant, disk)


@pytest.mark.vm
def test_no_splats(quick_run):
    for variant, entry in quick_run.items():
        assert entry["splats"] == [], variant
        assert entry["guest_errors"] == [], variant


# Measured on vanilla 6.12.117, quick mode (docs/safety.md): 26 programs and
# 1033 subtests passed (before migration's 6 ran); the series' kernels pass
# those and the series' own.  A set-up that silently skips them (no swap, no
# huge pages, no second node, no debugfs, no XFS) fails here; the margin is
# for ksm_tests -N -m 1, intermittent on vanilla.
MIN_PASSED = 25
MIN_SUBTESTS_PASSED = 1000


@pytest.mark.vm
def test_selftests_really_ran(quick_run):
    for variant, entry in whole_runs(quick_run).items():
        st = entry["selftests"]
        assert len(st["passed"]) >= MIN_PASSED, (variant, st)
        assert st["subtests"]["passed"] >= MIN_SUBTESTS_PASSED, variant
        for skipped in st["skipped"]:
            assert skipped["reason"], (variant, skipped)


@pytest.mark.vm
@pytest.mark.parametrize("name", ["stale_tlb", "swapout_rollback"])
def test_the_series_selftests_pass_everywhere(quick_run, name):
    """The series' selftests ran all their tests on every kernel, vanilla's
    included, and none skipped: stale_tlb had its pages taken away and
    reused in each of its four, swapout_rollback had its 64K folios in the
    swap cache and pinned (tests/test_stale_tlb.py and
    tests/test_anon_unmap.py show each failing on the broken kernel)."""
    for variant, entry in quick_run.items():
        st = entry["selftests"]
        assert name in st["passed"], (variant, st["failed"], st["skipped"])
        skipped = [s for s in st["subtests"]["skipped"] if s["name"].startswith(name)]
        assert skipped == [], (variant, skipped)


@pytest.mark.vm
def test_the_series_luf_selftest_runs_where_there_is_luf(quick_run, quick_outdir):
    """luf_hazards passed every test on the kernels with LUF, none skipped
    (each counted at least half its trials: lazy, the reader not
    preempted), and its rules flushed (its own lines of the counters each
    test moved); elsewhere it skipped whole, saying why (tests/test_luf.py
    shows each test failing on the debug kernel with its rule off)."""
    for variant, entry in quick_run.items():
        st = entry["selftests"]
        if variant in safety.LUF_KERNELS:
            assert "luf_hazards" in st["passed"], (variant, st["failed"], st["skipped"])
            skipped = [s for s in st["subtests"]["skipped"]
                       if s["name"].startswith("luf_hazards")]
            assert skipped == [], (variant, skipped)
            log = (quick_outdir / f"{variant}-selftests.log").read_text()
            assert_luf_selftest_flushed(luf_selftest_section(log))
        else:
            (skip,) = [s for s in st["skipped"] if s["name"] == "luf_hazards"]
            assert "no LUF" in skip["reason"], (variant, skip)


# The trials of each of stale_tlb's four tests (TRIALS in
# tools/testing/selftests/mm/stale_tlb.c, patch 22), and the pages of each
# trial (NR_PAGES there).
STALE_TLB_TRIALS = 100
STALE_TLB_PAGES = 8


@pytest.mark.vm
def test_stale_tlb_took_pages_from_a_reader_that_had_them(quick_run):
    """What stale_tlb's own lines do not say, from the counters around its
    category: each of its trials (four tests) took pages from a reader
    whose CPU translated them, so each shot that CPU down at least once;
    its 32K test swapped out 32K folios whole, once to set up and once to
    take them away, in at least half its trials (the folios of as many came
    back whole, or it would have skipped), and on the series through the
    batched unmap, never a PTE of a large folio at a time.  On the kernels
    with LUF its file test attacked the lazy unmap, not the flush LUF falls
    back to for a file open for writing: no file folio fell back, and more
    folios were unmapped lazily than its anonymous tests can give (at most
    NR_PAGES + 1 a trial), so at least half of the file test's pages were.
    tests/test_stale_tlb.py shows the test failing on the broken kernel."""
    for variant, entry in quick_run.items():
        moved = entry["selftests"]["counters"]["stale_tlb"]
        assert moved["irq/TLB"] >= 4 * STALE_TLB_TRIALS, (variant, moved)
        assert moved["mthp/32kB/swpout"] >= STALE_TLB_TRIALS, (variant, moved)
        if build.VARIANTS[variant][0] == "patched":
            assert moved["nr_tlb_anon_unmap_batches"] >= STALE_TLB_TRIALS, (variant, moved)
            assert moved["nr_tlb_anon_unmap_ptes_single"] == 0, (variant, moved)
        if variant in safety.LUF_KERNELS:
            assert moved.get("nr_tlb_luf_fallback_file", 0) == 0, (variant, moved)
            anon_most = (STALE_TLB_PAGES + 1) * STALE_TLB_TRIALS
            file_least = STALE_TLB_PAGES * STALE_TLB_TRIALS // 2
            assert moved["nr_tlb_luf_folios"] >= anon_most + file_least, (variant, moved)


def test_tr_shim_draws_run_vmtests_rules(tmp_path):
    """run_vmtests.sh's `tr "[:graph:][:space:]" -` through the guest's
    busybox: every character becomes a dash, and other uses pass through."""
    assert shutil.which("busybox"), "busybox-static missing: run `python3 -m lab setup`"
    shim = tmp_path / "tr"
    shim.write_text(safety.guest_shell("tr"))
    def tr(text, *args):
        return subprocess.run(["sh", str(shim), *args], input=text,
                              capture_output=True, text=True).stdout
    assert tr("running ./soft-dirty", "[:graph:][:space:]", "-") == "-" * 20
    assert tr("a\nb\n", "\\n", " ") == "a b "
    script = safety.selftest_script(safety.selftest_categories(False), "vanilla")
    assert safety.install("/safety/bin/tr", safety.guest_shell("tr")) in script


def test_ksm_smart_scan_is_off_before_any_selftest_runs():
    """ksm_tests -N assumes every page is looked at in every scan; with the
    smart scan on it fails at random on both kernels (docs/safety.md)."""
    script = safety.selftest_script(safety.selftest_categories(False), "vanilla")
    off = script.index("echo 0 >/sys/kernel/mm/ksm/smart_scan")
    assert off < script.index("\nrun_category ")


def test_a_result_with_no_description_is_named_by_its_number():
    out = ("SAFETY-CATEGORY-BEGIN mremap 1\n# running ./mremap_test\n1..2\n"
           "# ok 1\n# ok 2 mremap expand\nok 1 mremap_test\n"
           "SAFETY-CATEGORY-END mremap 0 2\n")
    (t,) = parse.parse_vmtests(out)
    assert [s.name for s in t.subtests] == ["mremap_test: #1",
                                            "mremap_test: mremap expand"]


def kselftest_mm(src, out):
    """`make -C tools/testing/selftests TARGETS=mm` of @src, as a reviewer
    runs it, into @out: (exit code, the log)."""
    proc = subprocess.run(["make", "-C", str(src / "tools/testing/selftests"),
                           "TARGETS=mm", f"O={out}", f"-j{os.cpu_count() or 2}"],
                          capture_output=True, text=True, timeout=1200)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.needs_kernel
def test_the_series_selftests_build_with_the_selftests_own_makefile(tmp_path):
    """The series' tree builds every mm selftest with the kernel's own
    command, its three among them; 6.12.y's does not (khugepaged.c's
    KSFT_SKIP, which the series' last patch fixes), so the command is seen
    to fail where the fix is missing."""
    tree.ensure_patched()
    rc, log = kselftest_mm(tree.patched_dir(), tmp_path / "patched")
    assert rc == 0, log[-3000:]
    built = tmp_path / "patched" / "kselftest" / "mm"
    for name in ("stale_tlb", "swapout_rollback", "luf_hazards", "khugepaged"):
        assert (built / name).is_file(), sorted(p.name for p in built.iterdir())
    rc, log = kselftest_mm(tree.vanilla_dir(), tmp_path / "vanilla")
    assert rc != 0 and "KSFT_SKIP" in log, log[-3000:]
