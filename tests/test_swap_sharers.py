"""Batched swap-out of folios shared by more processes than a swap count holds.

The series' selftest swapout_rollback (patch 23) has a test of it,
"sharers": 64 folios of 64K shared with 80 children (81 mappings; a swap
map entry counts 62 before it needs a continuation page), the first 10 and
the last 10 of which unmap page 0 of every folio, so that the entries of one
folio reach SWAP_MAP_MAX at different times whichever way the rmap walk goes.
A memory cgroup's memory.reclaim swaps them out, every process reads its
data back and exits, and swapoff must then finish: a swap count that leaked
would keep it waiting for a mapping that is gone.

Here it runs on the patched kernel with the switch on and off in one boot:
on, every mapping is unmapped by the batched path, whose
swap_duplicate_nr() must refuse a range with an entry at SWAP_MAP_MAX
before raising any count; off, one PTE at a time as in vanilla.  And on the
debug kernel (DEBUG_VM, lockdep, KASAN), the switch at its default.  The
safety suite runs it on vanilla (the test holds without the series), and
tests/test_anon_unmap.py shows it failing on `broken`, whose
patches/testing/0003 takes out that refusal.
"""

import pytest

from lab import vm
from stale_reads import ktap_exits, run_static_selftest

pytestmark = pytest.mark.vm

SWITCH = "/sys/kernel/mm/tlb_batching/anon_unmap"
SHARERS = "a folio shared past a swap count's limit leaks no count"
# every mapping of every page became a swap entry: 16 pages of each of the
# 64 folios in 61 processes, 15 in the 20 that unmapped page 0
MAPPINGS = 64 * (16 * 61 + 15 * 20)
COUNTERS = ("nr_tlb_anon_unmap_ptes_batched", "nr_tlb_anon_unmap_ptes_single",
            "nr_tlb_anon_unmap_batches_failed")
# the selftest's pinned test fails one batch in each of its two folios
PINNED_FOLIOS = 2


def shape():
    return vm.VMShape(cpus=2, mem="1G", zram="64M", timeout=900)


def script(values):
    """The selftest once per switch value, between two readings of the
    counters, each part after `RUN <value>`."""
    grep = "grep -E '^(" + "|".join(COUNTERS) + ") ' /proc/vmstat"
    lines = ["mount -t debugfs none /sys/kernel/debug"]
    for value in values:
        if value is not None:
            lines.append(f"echo {value} > {SWITCH}")
        lines += [f"echo RUN {value}", grep, "/selftests/swapout_rollback", grep]
    return "\n".join(lines) + "\n"


def parts(output):
    """Each part by its label: its subtests' exit statuses, the counters'
    deltas over it and its text."""
    out = {}
    for chunk in ("\n" + output).split("\nRUN ")[1:]:
        label, _, text = chunk.partition("\n")
        readings = [ln.split() for ln in text.splitlines() if ln.split(" ")[0] in COUNTERS]
        before = dict(readings[:len(COUNTERS)])
        after = dict(readings[len(COUNTERS):])
        delta = {k: int(after[k]) - int(v) for k, v in before.items() if k in after}
        out[label] = (ktap_exits(text), delta, text)
    return out


def run(variant, values):
    return parts(run_static_selftest(variant, "swapout_rollback", script(values), shape()))


def test_shared_beyond_swap_map_max_on_patched():
    runs = run("patched", (1, 0))
    for value in ("1", "0"):
        exits, _, text = runs[value]
        assert exits.get(SHARERS) == 0, f"anon_unmap={value}:\n{text[-3000:]}"
        assert f"{MAPPINGS} mappings became swap entries" in text, text[-3000:]
    on, off = runs["1"][1], runs["0"][1]
    # on: every mapping went through the batched path, including the range
    # of each folio that swap_duplicate_nr() refused when its entries
    # reached SWAP_MAP_MAX and raised entry by entry; off: none did
    assert on["nr_tlb_anon_unmap_ptes_batched"] >= MAPPINGS, on
    # ... and none of the sharers' batches failed: the only failed ones are
    # the pinned test's
    assert on["nr_tlb_anon_unmap_batches_failed"] == PINNED_FOLIOS, on
    assert off["nr_tlb_anon_unmap_ptes_batched"] == 0, off
    assert off["nr_tlb_anon_unmap_ptes_single"] >= MAPPINGS, off


@pytest.mark.debug_kernel
def test_shared_beyond_swap_map_max_on_debug():
    """The series under DEBUG_VM, lockdep and KASAN, switch at its default."""
    exits, _, text = run("debug", (None,))["None"]
    assert exits.get(SHARERS) == 0, text[-3000:]
    assert f"{MAPPINGS} mappings became swap entries" in text, text[-3000:]
