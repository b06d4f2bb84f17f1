"""What the stale-translation tests share (test_luf.py, test_arm64_luf.py,
the series' selftests), and the debugger workload of the LUF checker's
tests (test_luf_checker.py, test_arm64_luf.py).

Their guest program, guest/luf-hazards.c, prints each violation the moment
the reader sees it, `UNFLUSH-VIOLATION {json}`, then one `UNFLUSH-RESULT
{json}` per mode; a kernel broken on purpose may corrupt memory and die
before the result.  It then reports the mode as a KTAP test,
<program>/<mode> (guest/lib/ktap.h).

The lab's other guest programs that pass or fail report in KTAP too:
ktap_exits() reads each test's exit status from its result line, and
runs() each run's where one boot runs a program more than once.
"""

import re

from lab import build, guest_output, luf_hazards, safety_build, safety_parse, vm
from lab.guest_output import records
from lab.errors import LabError


def run_static_selftest(variant, name, script, shape, allow_splats=None, logdir=None):
    """Boot @variant with the series' selftest @name built static at
    /selftests/@name (the same program in the x86 and the arm64 guest, which
    has no C library), run @script and return the output; a kernel broken
    on purpose may splat (and the debug kernel, with @allow_splats, when a
    test switches its rules off).  The console log goes to @logdir if given."""
    layer = safety_build.static_layer([name], build.arch(variant))
    if allow_splats is None:
        allow_splats = variant.startswith("broken")
    return vm.run(build.built(variant), script, shape, layers=(layer,),
                  allow_splats=allow_splats, quiet=True, logdir=logdir).output


# --- the series' selftest of LUF's rules, luf_hazards ---------------------------

def luf_selftest_script(args, disable_rules=0):
    """A guest script that runs luf_hazards @args (e.g. `-m cow -t 50`) on
    /scratch, with the debug kernel's rules in the mask @disable_rules off."""
    lines = []
    if disable_rules:
        lines += ["mount -t debugfs none /sys/kernel/debug",
                  f"echo {disable_rules} >/sys/kernel/debug/luf/disable_rules"]
    lines.append(f"TMPDIR=/scratch /selftests/luf_hazards {args}")
    return "\n".join(lines) + "\n"


def run_luf_selftest(variant, args, disable_rules=0, logdir=None, timeout=900):
    """luf_hazards @args on @variant (static); its output.  Splats are
    allowed where rules are off, for the checker is meant to warn."""
    return run_static_selftest(variant, "luf_hazards",
                               luf_selftest_script(args, disable_rules),
                               luf_hazards.shape(luf_hazards.SELFTEST_TESTS, timeout=timeout),
                               allow_splats=bool(disable_rules), logdir=logdir)


# What luf_hazards says of each test before its result, under any number of
# KTAP prefixes (run_vmtests.sh adds one)
COUNTED = re.compile(r"^(?:# )+(\S+): (\d+) trials counted, (\d+) not lazy, "
                     r"(\d+) preempted$")
MOVED = re.compile(r"^(?:# )+(\S+): vmstat:((?: \S+ [+-]\d+)*)(?: nothing moved)?$")


def luf_selftest_report(output):
    """Each luf_hazards test's own report, by name: trials `counted` (a
    test that stopped at a violation says none) and the LUF counters it
    moved, `vmstat` {name: delta}."""
    out = {}
    for ln in output.splitlines():
        if m := COUNTED.match(ln):
            out.setdefault(m.group(1), {})["counted"] = int(m.group(2))
        elif m := MOVED.match(ln):
            words = m.group(2).split()
            out.setdefault(m.group(1), {})["vmstat"] = {
                words[i]: int(words[i + 1]) for i in range(0, len(words), 2)}
    return out


# The LUF counter of the flush each hazard's rule makes: the modes of
# guest/luf-hazards and the tests of luf_hazards (remap's is 6.12's
# flush_tlb_batched_pending(), which has none)
# (cow's and force's fault reads the evicted page in again first: R9)
RULE_FLUSHES = {"cow": ("nr_tlb_flush_luf_mm", "nr_tlb_flush_luf_fill"),
                "force": ("nr_tlb_flush_luf_mm", "nr_tlb_flush_luf_fill"),
                "write": ("nr_tlb_flush_luf_file",),
                "dio": ("nr_tlb_flush_luf_file", "nr_tlb_flush_luf_inval"),
                "truncate": ("nr_tlb_flush_luf_file", "nr_tlb_flush_luf_inval"),
                # the block device's new writer (R4 extended to devices)
                "bdev": ("nr_tlb_flush_luf_file",),
                # the page cache filled again from blocks changed below the
                # filesystem (R9); or, where the helper writes a block device
                # directly, R6's check of that device's page cache first,
                # when its mapping shares the test file's note (notes are a
                # hash table: 50 of 50 trials of dm-linear in one arm64 boot)
                **dict.fromkeys(luf_hazards.BELOW_MODES,
                                ("nr_tlb_flush_luf_fill", "nr_tlb_flush_luf_inval")),
                "reuse": ("nr_tlb_flush_luf_special",),
                "demote": ("nr_tlb_flush_luf_special",),
                # the write fault swaps the page in first: R9 there (patch 27)
                "anon-write": ("nr_tlb_flush_luf_mm", "nr_tlb_flush_luf_fill"),
                "anon-force": ("nr_tlb_flush_luf_mm", "nr_tlb_flush_luf_fill"),
                # the swap-in of a slot changed below the swap layer (R9)
                "swap-below": ("nr_tlb_flush_luf_fill",),
                "anon-reuse": ("nr_tlb_flush_luf_special",),
                "anon-demote": ("nr_tlb_flush_luf_special",),
                # compaction's own release, at its end
                "compact": ("nr_tlb_flush_luf_release",)}


def assert_luf_selftest_flushed(output):
    """Every test of luf_hazards reported, with its counted trials lazy
    (nr_tlb_luf_folios moved by their pages) and its rule's flush made in
    most of them (the rest: a release by the timer or the cap came first)."""
    report = luf_selftest_report(output)
    assert set(report) == set(luf_hazards.SELFTEST_TESTS), report
    for test, rep in report.items():
        counted, moved = rep["counted"], rep["vmstat"]
        assert moved.get("nr_tlb_luf_folios", 0) >= counted * luf_hazards.SELFTEST_PAGES, \
            (test, rep)
        if test in RULE_FLUSHES:
            flushes = sum(moved.get(n, 0) for n in RULE_FLUSHES[test])
            assert flushes >= counted // 2, (test, rep)


def luf_selftest_section(output):
    """luf_hazards' lines in a run of run_vmtests.sh: from its `running`
    line to the next program's."""
    lines, inside = [], False
    for ln in output.splitlines():
        if m := safety_parse.RUNNING.match(ln):
            inside = m.group(1).strip().endswith("luf_hazards")
        elif inside:
            lines.append(ln)
    return "\n".join(lines)


def command(program, modes, args):
    # every mode runs even if one fails
    return "; ".join(f"{program} {m} {args}" for m in modes)


def ktap_exits(output):
    """Each KTAP test's exit status by its name, from its result line
    (kselftest's: 0 pass, 1 fail, 4 skip); a test with none (killed, or the
    guest died) is absent."""
    out = {}
    for ln in output.splitlines():
        if r := guest_output.ktap_result(ln):
            out[r[1]] = guest_output.KTAP_EXIT[r[2]]
    return out


def exits(output):
    """Each mode's exit status, of the KTAP tests named <program>/<mode>."""
    return {name.split("/", 1)[1]: status
            for name, status in ktap_exits(output).items() if "/" in name}


def runs(output, program):
    """Each run of @program by the label the script echoed before it
    (`RUN <label>`): its exit status (None if it has no KTAP result), its
    last UNFLUSH-RESULT (None if it reported none) and the lines it said
    on stderr, `<program>: ...`."""
    lines, label = {}, None
    for ln in output.splitlines():
        if ln.startswith("RUN "):
            label = ln.split(" ", 1)[1]
            lines[label] = []
        elif label is not None:
            lines[label].append(ln)
    out = {}
    for label, text in ((k, "\n".join(v)) for k, v in lines.items()):
        results = [r for r in records(text, "UNFLUSH-RESULT")
                   if r["experiment"] == program]
        out[label] = {"exit": ktap_exits(text).get(program),
                      "result": results[-1] if results else None,
                      "errors": [ln for ln in text.splitlines()
                                 if ln.startswith(program + ": ")]}
    return out


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
    rules in the mask @disable_rules off: (its run, whose KTAP test is
    ptrace-poke, the nr_tlb_luf_folios and LUF flush counters after it, the
    kernel console).  Splats are allowed only with a rule off, where the
    checker is meant to warn."""
    logdir = vm.new_logdir(kernel)
    cmd = ("mount -t debugfs none /sys/kernel/debug 2>/dev/null; "
           f"echo {disable_rules} >/sys/kernel/debug/luf/disable_rules && "
           "ptrace-poke --seconds 60; "
           "grep -E '^nr_tlb_(luf_folios|flush_luf_mm|flush_luf_bbm) ' /proc/vmstat")
    shape = vm.VMShape(cpus=2, mem="1G", append="unflush.scratch=64M", timeout=timeout)
    run = vm.run(kernel, cmd, shape, logdir=logdir, quiet=True,
                 allow_splats=bool(disable_rules))
    counters = {ln.split()[0]: int(ln.split()[1]) for ln in run.output.splitlines()
                if ln.startswith("nr_tlb_")}
    return run, counters, (logdir / "console.log").read_text(errors="replace")
