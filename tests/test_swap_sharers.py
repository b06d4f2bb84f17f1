"""Batched swap-out of folios shared by more processes than a swap count holds.

guest/anon-swap-sharers.c shares 64K folios with 80 children (81 mappings;
a swap map entry counts 62 before it needs a continuation page), the first
10 and the last 10 of which unmap page 0 of every folio, so that the entries
of one folio reach SWAP_MAP_MAX at different times whichever way the rmap
walk goes.  Reclaim swaps them out, every process reads its data back and
exits, and swapoff must then finish: a swap count that leaked would keep it
waiting for a mapping that is gone.

On the patched kernel the switch is tried on and off in one boot: on, every
mapping is unmapped by the batched path, whose swap_duplicate_nr() must
refuse a range with an entry at SWAP_MAP_MAX before raising any count; off,
one PTE at a time as in vanilla.  Vanilla must pass too (the program tests
the kernel, not the series), and so must the debug kernel.  On the `broken`
kernel, whose patches/testing/0003 takes out that refusal, the entries
raised before the one that needs a continuation are raised twice, and
swapoff must not finish.
"""

import pytest

from lab import build, vm
from lab.errors import LabError
from stale_reads import runs

pytestmark = pytest.mark.vm

SWITCH = "/sys/kernel/mm/tlb_batching/anon_unmap"
PROGRAM = "anon-swap-sharers --reps 1"
LEAK = "a swap count leaked"


def shape():
    return vm.VMShape(cpus=2, mem="1G", zram="64M", timeout=900)


def results(output):
    """Each run by the label echoed before it: the exit status of its KTAP
    test, anon-swap-sharers, its UNFLUSH-RESULT and its own lines."""
    return runs(output, "anon-swap-sharers")


def passed(runs, label):
    run = runs.get(label, {})
    assert run.get("exit") == 0 and run.get("result"), \
        f"{label}: exit {run.get('exit')}: {run.get('errors')}"
    checks = run["result"]["checks"]
    # every mapping of every page became a swap entry: 16 pages of each
    # folio in 61 processes, 15 in the 20 uneven ones
    uneven = 2 * checks["uneven"]
    want = checks["folios"] * (16 * (checks["sharers"] + 1 - uneven) + 15 * uneven)
    assert checks["swap_entries_mapped"] == want, checks
    assert checks["swapoff_finished"] == 1, checks
    return run["result"]


@pytest.fixture(scope="module")
def patched_run():
    lines = []
    for value in (1, 0):
        lines += [f"echo {value} > {SWITCH}", f"echo RUN anon_unmap={value}",
                  PROGRAM]
    lines.append(f"echo 1 > {SWITCH}")
    return vm.run(build.built("patched"), "\n".join(lines) + "\n", shape(),
                  quiet=True).output


def test_shared_beyond_swap_map_max_on_patched(patched_run):
    runs = results(patched_run)
    on = passed(runs, "anon_unmap=1")["counters"]
    off = passed(runs, "anon_unmap=0")["counters"]
    checks = runs["anon_unmap=1"]["result"]["checks"]
    # on: every mapping went through the batched path, including the
    # range of each folio that swap_duplicate_nr() refused when its entries
    # reached SWAP_MAP_MAX and raised entry by entry; off: none did
    assert on["nr_tlb_anon_unmap_ptes_batched"] >= checks["swap_entries_mapped"], on
    assert on["nr_tlb_anon_unmap_batches_failed"] == 0, on
    assert off["nr_tlb_anon_unmap_ptes_batched"] == 0, off
    assert off["nr_tlb_anon_unmap_ptes_single"] >= checks["swap_entries_mapped"], off


@pytest.mark.parametrize("variant", ["vanilla", "debug"])
def test_shared_beyond_swap_map_max(variant):
    """vanilla: the test holds for the kernel without the series; debug:
    the series under DEBUG_VM, lockdep and KASAN, switch at its default."""
    output = vm.run(build.built(variant),
                    f"echo RUN {variant}\n{PROGRAM}\n",
                    shape(), quiet=True).output
    passed(results(output), variant)


def test_raise_without_refusal_is_caught():
    """patches/testing/0003: a range with an entry at SWAP_MAP_MAX is raised
    up to that entry, then refused, then raised again entry by entry."""
    kernel = build.built("broken")
    logdir = vm.new_logdir(kernel)
    command = f"echo RUN broken\n{PROGRAM}\n"
    try:
        output = vm.run(kernel, command, shape(), logdir=logdir, quiet=True,
                        allow_splats=True).output
    except LabError:
        output = (logdir / "output.log").read_text(errors="replace")
    run = results(output).get("broken", {})
    assert run.get("exit") == 1, output[-3000:]
    assert any(LEAK in e for e in run.get("errors", [])), output[-3000:]
