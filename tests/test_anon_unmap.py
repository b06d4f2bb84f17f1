"""Batched unmap of anonymous large folios at swap-out (seed 002).

guest/anon-unmap-rollback.c swaps out 64K folios whose pages carry
different soft-dirty and uffd-wp states and checks every page's PTE in
/proc/self/pagemap and its data: (a) a pinned folio that try_to_unmap()
fails to unmap must stay mapped exactly as it was, which on the batched
path means every PTE the batch had cleared is put back with its own bits;
(b) with swap full, and (c) a normal pageout, every page must keep its own
bits.  It runs with the anon_unmap switch on and off in one boot: on, the
work goes through the batched path (and part a rolls two batches back); off,
through the one-at-a-time path; the outcome must be the same.  On the
`broken` kernel, whose patches/testing/0002 takes the rollback out, the
series' selftest of the same checks, swapout_rollback (patch 23), must fail
its pinned test; and its sharers test too, which patches/testing/0003
breaks (tests/test_swap_sharers.py).

On arm64 (opt-in, `--arm64`) the batch clears a contpte block whole, with
get_and_clear_full_ptes(), and a failed one writes its PTEs back one by
one: the same runs on patched-arm64 and broken-arm64, less the soft-dirty
and uffd-wp bits, which arm64 6.12 does not have; presence, PFNs,
exclusive bits and data are checked as on x86; swapout_rollback, built
static, must pass on patched-arm64 and fail its pinned and sharers tests on
broken-arm64.
"""

import pytest

from lab import arches, build, vm
from stale_reads import ktap_exits, run_static_selftest, runs

pytestmark = pytest.mark.vm

SWITCH = "/sys/kernel/mm/tlb_batching/anon_unmap"
PROGRAM = "anon-unmap-rollback"
PINNED_FOLIOS = 2      # part a pins one page in each of two 64K folios
SAME = ("a_pages", "a_swapped_to_full_zram", "c_pages", "c_swapped", "b_pages")
# the program's arguments on each kernel: arm64 6.12 has neither bit
ARGS = {"patched": "", "patched-arm64": "--uffd-wp 0 --soft-dirty 0"}


def on(variant):
    """A parameter of the tests: @variant, opt-in if it is arm64's."""
    marks = [pytest.mark.arm64] if arches.ARCHES[build.arch(variant)].cross else []
    return pytest.param(variant, marks=marks, id=variant)


def script(args=""):
    lines = []
    for value in (1, 0):
        lines += [f"echo {value} > {SWITCH}",
                  f"echo RUN {value} $(cat {SWITCH})",
                  f"{PROGRAM} --reps 1 {args}"]
    lines.append(f"echo 1 > {SWITCH}")
    return "\n".join(lines) + "\n"


def parse(output):
    """Each run by the switch's value: the exit status of its KTAP test,
    its UNFLUSH-RESULT and its own lines."""
    out = {}
    for label, run in runs(output, PROGRAM).items():
        value, seen = label.split()
        assert value == seen, f"wrote {value}, switch reads {seen}"
        out[int(value)] = run
    return out


def finished(runs, value):
    """The run with the switch at @value passed and reported; else why not."""
    run = runs.get(value, {})
    assert run.get("exit") == 0 and run.get("result"), \
        f"anon_unmap={value}: exit {run.get('exit')}: {run.get('errors')}"
    return run["result"]


def shape():
    # a small zram, so that part b fills it quickly
    return vm.VMShape(cpus=2, mem="1G", zram="64M", timeout=900)


@pytest.fixture(scope="module", params=[on("patched"), on("patched-arm64")])
def guest_run(request):
    variant = request.param
    return vm.run(build.built(variant), script(ARGS[variant]), shape(), quiet=True)


def test_pages_keep_their_state_with_the_switch_on_and_off(guest_run):
    runs = parse(guest_run.output)
    on, off = finished(runs, 1)["checks"], finished(runs, 0)["checks"]
    # the program checked every page itself; the outcome is the same either way
    assert {k: on[k] for k in SAME} == {k: off[k] for k in SAME}, (on, off)
    # part a: every page reached swap (so zram refused it and the folio
    # stayed in the swap cache); part c: every page swapped
    assert on["a_swapped_to_full_zram"] == on["a_pages"], on
    assert on["c_swapped"] == on["c_pages"], on
    # part b had teeth: swap was too full for all of it
    assert on["b_swapped"] < on["b_pages"] and off["b_swapped"] < off["b_pages"]


def test_switch_moves_swap_out_between_the_paths(guest_run):
    runs = parse(guest_run.output)
    c_on = finished(runs, 1)["counters"]
    c_off = finished(runs, 0)["counters"]
    names = ["nr_tlb_anon_unmap_batches", "nr_tlb_anon_unmap_ptes_batched",
             "nr_tlb_anon_unmap_ptes_single", "nr_tlb_anon_unmap_batches_failed"]
    summary = {k: (c_on.get(k), c_off.get(k)) for k in names}

    # on: the 64K folios went through the batched path, and part a's two
    # pinned folios were each cleared as a batch and rolled back
    assert c_on["nr_tlb_anon_unmap_batches"] > 0, summary
    assert c_on["nr_tlb_anon_unmap_ptes_batched"] >= 2 * c_on["nr_tlb_anon_unmap_batches"], summary
    assert c_on["nr_tlb_anon_unmap_batches_failed"] >= PINNED_FOLIOS, summary
    # off: nothing batched, everything one at a time
    assert c_off["nr_tlb_anon_unmap_batches"] == 0, summary
    assert c_off["nr_tlb_anon_unmap_ptes_batched"] == 0, summary
    assert c_off["nr_tlb_anon_unmap_batches_failed"] == 0, summary
    assert c_off["nr_tlb_anon_unmap_ptes_single"] > c_on["nr_tlb_anon_unmap_ptes_single"], summary
    assert c_off["nr_tlb_anon_unmap_ptes_single"] >= c_on["nr_tlb_anon_unmap_ptes_batched"], summary


# The series' own test of the rollback, swapout_rollback in
# tools/testing/selftests/mm (the safety suite runs it with run_vmtests.sh
# and shows it passing on vanilla and patched), built static, so that the
# same program runs in the arm64 guest, which has no C library.  On arm64
# the batch clears a contpte block whole and puts it back page by page;
# soft-dirty and uffd-wp bits are not checked there, arm64 has neither.
PINNED = "a pinned folio that fails to unmap is put back"
PAGEOUT = "a folio swapped out keeps each page's bits"
SHARERS = "a folio shared past a swap count's limit leaks no count"


def run_selftest(variant):
    return run_static_selftest(variant, "swapout_rollback",
                               "mount -t debugfs none /sys/kernel/debug\n"
                               "/selftests/swapout_rollback\n"
                               "grep anon_unmap_batches_failed /proc/vmstat\n", shape())


def failed_batches(output):
    line = [ln for ln in output.splitlines()
            if ln.startswith("nr_tlb_anon_unmap_batches_failed ")]
    return int(line[0].split()[1]) if line else None


@pytest.mark.arm64
def test_the_series_selftest_passes_on_patched_arm64():
    output = run_selftest("patched-arm64")
    assert ktap_exits(output) == {PINNED: 0, PAGEOUT: 0, SHARERS: 0}, output[-3000:]
    # both pinned folios went through the batched path and were put back
    assert failed_batches(output) >= PINNED_FOLIOS, output[-3000:]


@pytest.mark.parametrize("variant", [on("broken"), on("broken-arm64")])
def test_the_series_selftest_catches_the_broken_kernel(variant):
    """patches/testing/0002 takes the rollback out: the pinned folios lose
    their PTEs, in a batch that failed, and a normal pageout still passes;
    0003 raises part of a range of swap counts twice: the folios shared
    past a swap count's limit leak counts, and swapoff does not finish."""
    output = run_selftest(variant)
    assert ktap_exits(output) == {PINNED: 1, PAGEOUT: 0, SHARERS: 1}, output[-3000:]
    assert "its PTE was lost" in output, output[-3000:]
    assert "a swap count leaked" in output, output[-3000:]
    # the PTEs were lost by a batch that failed, not on another path
    assert failed_batches(output) >= PINNED_FOLIOS, output[-3000:]
