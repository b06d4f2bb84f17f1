"""The run-time switches of the series, /sys/kernel/mm/tlb_batching/.

Each switch must move the work of its mechanism from the batched path to
the one-at-a-time path, as the per-source counters show, and change nothing
else: guest/batching-check.c checks every page it reads back against the
data it wrote, and the digest of all it read must be the same either way.
"""


import pytest

from lab import build, guest_output, vm

pytestmark = pytest.mark.vm

SWITCH_DIR = "/sys/kernel/mm/tlb_batching"

# switch -> batching-check mode, the counter of work done batched (must be
# > 0 with the switch on and 0 off), the counter of work done one at a time
# (must grow when off), and flush counters that must grow when off.
CASES = {
    "zap": ("zap_ptes", "nr_tlb_zap_ptes_batched", "nr_tlb_zap_ptes_single", []),
    "reclaim": ("unmap_flush", "nr_tlb_reclaim_ptes_batched",
                "nr_tlb_flush_reclaim_immediate", ["nr_tlb_remote_flush"]),
    "migrate": ("unmap_flush", "nr_tlb_migrate_ptes_batched",
                "nr_tlb_flush_migrate_immediate", ["nr_tlb_remote_flush"]),
    "hvo": ("hvo_flush", "nr_tlb_hvo_folios_batched", "nr_tlb_hvo_folios_single",
            ["nr_tlb_flush_hvo_range"]),
}


def script():
    lines = ["set -e", f"ls {SWITCH_DIR} | tr '\\n' ' ' | sed 's/^/SWITCHES /'; echo",
             # a value that is not a boolean is refused and changes nothing
             f"if echo 2 > {SWITCH_DIR}/zap_ptes; then echo BAD-VALUE-TAKEN; fi",
             f"echo ZAP-AFTER-BAD $(cat {SWITCH_DIR}/zap_ptes)"]
    for mode, (switch, *_rest) in CASES.items():
        for value in (1, 0):
            lines += [f"echo {value} > {SWITCH_DIR}/{switch}",
                      f"echo RUN {mode} {value} $(cat {SWITCH_DIR}/{switch})",
                      f"batching-check {mode} --quick --reps 1"]
        lines.append(f"echo 1 > {SWITCH_DIR}/{switch}")
    return "\n".join(lines) + "\n"


def parse(output):
    runs, current = {}, None
    for line in output.splitlines():
        if line.startswith("RUN "):
            _, mode, value, seen = line.split()
            assert value == seen, f"{mode}: wrote {value}, switch reads {seen}"
            current = (mode, int(value))
        elif current and (t := guest_output.tagged(line, (guest_output.RESULT,))):
            runs[current] = t[1]
    return runs


@pytest.fixture(scope="module")
def guest_run():
    shape = vm.VMShape(cpus=2, mem="1G", node1="512M", zram="256M", timeout=900)
    return vm.run(build.built("patched"), script(), shape, quiet=True)


def test_switch_files_and_bad_values(guest_run):
    out = guest_run.output
    (listing,) = [ln for ln in out.splitlines() if ln.startswith("SWITCHES ")]
    assert set(listing.split()[1:]) >= {"zap_ptes", "hvo_flush", "unmap_flush"}
    assert "BAD-VALUE-TAKEN" not in out
    assert "ZAP-AFTER-BAD 1" in out


@pytest.mark.parametrize("mode", list(CASES))
def test_switch_moves_work_to_the_single_path_and_changes_no_data(guest_run, mode):
    switch, batched, single, flushes = CASES[mode]
    runs = parse(guest_run.output)
    assert (mode, 1) in runs and (mode, 0) in runs, guest_run.output[-2000:]
    on, off = runs[(mode, 1)], runs[(mode, 0)]
    c_on, c_off = on["counters"], off["counters"]
    summary = {k: (c_on.get(k), c_off.get(k)) for k in [batched, single, *flushes]}

    # the data: every page was checked by the program; the same either way
    assert on["checks"]["pages_checked"] > 0
    assert on["checks"]["digest"] == off["checks"]["digest"]
    assert on["checks"]["pages_checked"] == off["checks"]["pages_checked"]

    # the work: batched with the switch on, one at a time with it off
    assert c_on[batched] > 0, summary
    assert c_off[batched] == 0, summary
    assert c_off[single] > c_on[single], summary
    for name in flushes:
        assert c_off[name] > c_on[name], summary
