"""The LUF checker (CONFIG_DEBUG_LUF) under ordinary workloads.

The checker must catch a LUF rule removed on purpose while ordinary
workloads run, without a test written for that rule.  The first workload
is the safety suite's `disk` stress phase (lab/safety.py): stress-ng run
from an ext2 filesystem inside a small memory cgroup, so that reclaim takes
its own text and read-only data away while its workers map them, and LUF
leaves those unmaps lazy.  Nothing in it knows about LUF.

On the debug kernel with every rule on, the phase must make lazy unmaps
(or the rest proves nothing) and print no warning.  With rule R1 off (bit 0
of /sys/kernel/debug/luf/disable_rules), reclaim frees the lazily unmapped
pages at once, and the checker must warn that they were freed before their
flush.

Only R1 is tested here, because this workload reaches no other hazard.  Run
with R3 off (bit 1): 224 folios unmapped lazily and no warning.  With every
rule on, two runs of the same phase counted 36 and 41 early flushes by R3
(nr_tlb_flush_luf_mm).  Those flushes come from R3's mm-wide trigger: a
writable PTE installed anywhere in an mm with a lazy unmap pending.  The
checker warns only when the writable PTE is at an address whose own lazy
unmap is still pending, and stress-ng never wrote to a private file page
that reclaim had just taken.  R4, R5 and R6 need writes to the file,
userfaultfd or truncation, which this workload does not do either.
tests/test_luf.py attacks every rule directly, and test_luf.py's
test_debug_checker_warns_without_the_rule shows the checker seeing R3 and
R4 broken under its workload.

The second workload is a debugger: guest/ptrace-poke, a program reading
its file mapping (PROT_READ, MAP_PRIVATE) in two threads inside a memory
cgroup half the file's size, and its parent poking words into it with
PTRACE_POKEDATA, as gdb does.  A poke into a page that reclaim has just
unmapped lazily copies the page (do_cow_fault()) and maps the copy
read-only; GUP writes the word into it.  R3 flushes before that write
(luf_mm_check() in follow_page_pte()), and R9 when the fault reads the
evicted page into the page cache again; with both off, the checker has no
hook there, and must find the copy's bytes differing from the old page's
when the lazy unmap is finally flushed.
"""

import pytest

from lab import build, safety
from stale_reads import ktap_exits, poke

pytestmark = [pytest.mark.vm, pytest.mark.debug_kernel]

R1 = 1 << 0


def disk_phase():
    (phase,) = [p for p in safety.stress_phases(False) if p.on_disk]
    return phase


def lazy_unmaps(phases):
    return sum(p.vmstat.get("nr_tlb_luf_folios", 0) for p in phases)


def test_disk_phase_is_lazy_and_clean_with_every_rule():
    phases, splats, console, errors = safety.run_stress_alone("debug", [disk_phase()])
    assert errors == [], errors
    assert [p.name for p in phases] == ["disk"], phases
    assert phases[0].verification_errors == 0, phases[0]
    assert lazy_unmaps(phases) > 0, phases[0].vmstat
    assert splats == [], splats


def test_checker_catches_r1_removed_under_stress_ng():
    phases, splats, console, errors = safety.run_stress_alone(
        "debug", [disk_phase()], disable_rules=R1)
    assert errors == [], errors
    assert lazy_unmaps(phases) > 0, [p.vmstat for p in phases]
    assert "freed before the flush of generation" in console, console[-3000:]


def test_debugger_pokes_are_clean_with_every_rule():
    run, counters, _ = poke(build.built("debug"), 0, timeout=600)
    assert ktap_exits(run.output) == {"ptrace-poke": 0}, run.output[-3000:]
    # reclaim took the target's mapped pages lazily, and R3 flushed for
    # pokes into them
    assert counters["nr_tlb_luf_folios"] > 0, counters
    assert counters["nr_tlb_flush_luf_mm"] > 0, counters


def test_checker_catches_r3_removed_under_a_debugger():
    # disable_rules bits 1 (R3) and 6 (R9)
    _, _, console = poke(build.built("debug"), 1 << 1 | 1 << 6, timeout=600)
    assert "a write that no rule flushed for" in console, console[-3000:]
