"""How long LUF holds lazily unmapped pages (guest/luf-bound.c).

Documentation/mm/luf.rst ("Release") says that held folios are released
(flushed, then freed) by a delayed work item a quarter second after they
were held, and that the work runs on an unbound workqueue, so that a task
busy on the CPU that held them, a SCHED_FIFO one included, does not delay
it: only real-time tasks on every CPU do.  luf-bound takes 64 pages of
clean page cache away lazily on the first CPU and at once spins a
SCHED_FIFO thread there for 1.5 s, while a monitor of higher priority on
the last CPU polls /proc/vmstat until the pages are released.  On patched
every trial must be lazy and released within 500 ms (the quarter second
plus slack for emulation), and not before the quarter second (so it was
the work item that released them, not some other flush).  With every CPU
hogged (--hog-all) the bound does not hold and the program must say so:
the proof that the measurement can fail.  Not every such trial is late:
the worker then runs in the turns the scheduler gives fair tasks among
real-time ones (real-time throttling, the fair server), which came at
several points a second; 26 of 70 trials were later than 500 ms (520 to
1206 ms), so 15 trials all on time would happen about once in 1000 runs.
"""

import pytest

from lab import build, vm
from stale_reads import exits, records

pytestmark = pytest.mark.vm

TRIALS = 10
HOG_ALL_TRIALS = 15
PAGES = 64           # luf-bound's default
BOUND_MS = 500       # luf-bound's default --bound-ms
HOLD_MS = 250        # LUF_HOLD_JIFFIES, HZ / 4

# one KTAP test each: luf-bound/hog-one, luf-bound/hog-all
COMMAND = (f"luf-bound --trials {TRIALS}; "
           f"luf-bound --trials {HOG_ALL_TRIALS} --hog-all")


def shape():
    # unflush.scratch: an ext2 at /scratch, clean page cache LUF takes
    return vm.VMShape(cpus=2, mem="1G", append="unflush.scratch=128M",
                      timeout=900)


@pytest.fixture(scope="module")
def guest_run():
    return vm.run(build.built("patched"), COMMAND, shape(), quiet=True)


def run_of(output, case):
    """(exit status of the KTAP test luf-bound/@case, its UNFLUSH-RESULT,
    luf-bound's own lines) of one run; @case hog-one or hog-all."""
    hog_all = case == "hog-all"
    status = exits(output)
    results = [r for r in records(output, "UNFLUSH-RESULT")
               if r["experiment"] == "luf-bound" and r["hog_all"] == hog_all]
    said = [ln for ln in output.splitlines() if ln.startswith("luf-bound: ")]
    assert case in status and len(results) == 1, output[-3000:]
    return status[case], results[0], said


def test_release_within_bound_with_the_holding_cpu_hogged(guest_run):
    status, r, said = run_of(guest_run.output, "hog-one")
    assert status == 0, (said, r)
    lat = r["latency_ms"]
    # every trial lazy, undisturbed, and its pages released within the bound
    assert r["trials"] == TRIALS and len(lat) == TRIALS, r
    assert r["disturbed"] == 0 and r["unreleased"] == 0, r
    assert r["checks"]["lazy_trials"] == TRIALS, r["checks"]
    assert r["checks"]["luf_folios"] >= TRIALS * PAGES, r["checks"]
    assert r["checks"]["held_rise_min"] > 0, r["checks"]
    assert r["checks"]["released_trials"] == TRIALS, r["checks"]
    assert r["counters"]["nr_tlb_flush_luf_release"] >= TRIALS, r["counters"]
    # not before the quarter second, give or take the ticks a busy host
    # makes the guest's jiffies lag behind its clock (239 ms was seen)
    assert all(HOLD_MS / 2 <= ms <= BOUND_MS for ms in lat), lat
    assert r["over_bound"] == 0 and r["latency_max_ms"] <= BOUND_MS, r
    # the hog really held its CPU for the whole trial, and the monitor kept
    # sampling: a gap as long as the bound would have hidden nothing, but
    # would not have measured anything either
    assert r["hog_ms"] == 1500 and r["hog_all"] == 0, r
    assert r["poll_gap_max_ms"] < BOUND_MS - HOLD_MS, r
    assert r["rt_runtime_us"] == 950000, r


def test_hogging_every_cpu_breaks_the_bound(guest_run):
    status, r, said = run_of(guest_run.output, "hog-all")
    assert status == 1, (said, r)
    assert r["trials"] == HOG_ALL_TRIALS and r["disturbed"] == 0, r
    assert r["checks"]["lazy_trials"] == HOG_ALL_TRIALS, r["checks"]
    # some trial over the bound, and the program said so
    assert r["over_bound"] >= 1 and r["latency_max_ms"] > BOUND_MS, r
    assert any("later than --bound-ms" in ln or "had not released" in ln
               for ln in said), said
