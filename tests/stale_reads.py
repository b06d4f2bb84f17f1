"""What the stale-translation tests share (test_stale_tlb.py, test_luf.py),
and the debugger workload of the LUF checker's tests (test_luf_checker.py,
test_arm64_luf.py).

Their guest programs (guest/stale-tlb.c, guest/luf-hazards.c) print each
violation the moment the reader sees it, `UNFLUSH-VIOLATION {json}`, then one
`UNFLUSH-RESULT {json}` per mode; a kernel broken on purpose may corrupt
memory and die before the result.  Each then reports the mode as a KTAP
test, <program>/<mode> (guest/lib/ktap.h).
"""

import json

from lab import safety_parse, vm
from lab.errors import LabError

def command(program, modes, args):
    # every mode runs even if one fails
    return "; ".join(f"{program} {m} {args}" for m in modes)


def exits(output):
    """Each mode's exit status, from its KTAP result (kselftest's: 0 pass,
    1 fail, 4 skip)."""
    out = {}
    for ln in output.splitlines():
        if (r := safety_parse.ktap_result(ln)) and "/" in r[1]:
            out[r[1].split("/", 1)[1]] = safety_parse.KTAP_EXIT[r[2]]
    return out


def records(output, tag):
    return [json.loads(ln.split(" ", 1)[1]) for ln in output.splitlines()
            if ln.startswith(tag + " ")]


def violations(output):
    return records(output, "UNFLUSH-VIOLATION")


def run_to_violation(kernel, cmd, shape):
    """Run `cmd` on a kernel that is expected to fail it: its output, also
    when the guest died (splats allowed) after printing a violation."""
    logdir = vm.new_logdir(kernel)
    try:
        return vm.run(kernel, cmd, shape, logdir=logdir, quiet=True,
                      allow_splats=True).output
    except LabError as err:
        output = (logdir / "output.log").read_text(errors="replace")
        assert violations(output), f"guest died before any violation: {err}"
        return output


def run_clean(kernel, program, modes, args, shape):
    """Run every mode of `program` on a kernel that must pass them: no
    violation, every exit status 0.  Their UNFLUSH-RESULT records, by mode."""
    run = vm.run(kernel, command(program, modes, args), shape, quiet=True)
    tail = run.output[-3000:]
    assert violations(run.output) == [], tail
    assert exits(run.output) == {m: 0 for m in modes}, tail
    results = {r["experiment"]: r for r in records(run.output, "UNFLUSH-RESULT")}
    return {m: results[f"{program}/{m}"] for m in modes}


def poke(kernel, disable_rules, timeout):
    """guest/ptrace-poke for 60 s on @kernel (a debug kernel) with the LUF
    rules in the mask @disable_rules off: (its run, the nr_tlb_luf_folios
    and LUF flush counters after it, the kernel console).  Splats are
    allowed only with a rule off, where the checker is meant to warn."""
    logdir = vm.new_logdir(kernel)
    cmd = ("mount -t debugfs none /sys/kernel/debug 2>/dev/null; "
           f"echo {disable_rules} >/sys/kernel/debug/luf/disable_rules && "
           "ptrace-poke --seconds 60; echo POKE-EXIT $?; "
           "grep -E '^nr_tlb_(luf_folios|flush_luf_mm|flush_luf_bbm) ' /proc/vmstat")
    shape = vm.VMShape(cpus=2, mem="1G", append="unflush.scratch=64M", timeout=timeout)
    run = vm.run(kernel, cmd, shape, logdir=logdir, quiet=True,
                 allow_splats=bool(disable_rules))
    counters = {ln.split()[0]: int(ln.split()[1]) for ln in run.output.splitlines()
                if ln.startswith("nr_tlb_")}
    return run, counters, (logdir / "console.log").read_text(errors="replace")
