"""What the guest prints, read in one place: the lab's tagged lines and KTAP.

The lab's guest programs and guest/init.sh write plain lines to the guest's
output port.  Those that carry results are of two kinds:

  - tagged lines.  Records, `TAG {json}`: UNFLUSH-RESULT (one per repetition
    of an experiment, guest/lib/report.c), UNFLUSH-VIOLATION (a read of the
    wrong data, printed the moment the reader sees it, guest/lib/reader.c)
    and UNFLUSH-COUNTERS (guest/counters.c).  Words: UNFLUSH-WINDOW <id> (a
    phase opens an instruction window, guest/lib/snapshot.c),
    UNFLUSH-BEGIN <experiment> <configuration> and UNFLUSH-END <experiment>
    <configuration> <exit status> (a bench script's brackets,
    lab/bench_script.py), UNFLUSH-EXIT <status> and UNFLUSH-SETUP-FAILED
    <what> (guest/init.sh).
  - KTAP result lines, `ok 3 name # SKIP why`, of the kernel's selftests,
    KUnit and the lab's own programs (guest/lib/ktap.h).

The safety suite's own markers (SAFETY-*) are its script's, and
lab/safety_parse.py reads them.
"""

import json
import re

RESULT = "UNFLUSH-RESULT"
VIOLATION = "UNFLUSH-VIOLATION"
COUNTERS = "UNFLUSH-COUNTERS"
WINDOW = "UNFLUSH-WINDOW"
BEGIN = "UNFLUSH-BEGIN"
END = "UNFLUSH-END"
EXIT = re.compile(r"^UNFLUSH-EXIT (\d+)\s*$", re.M)
SETUP_FAILED = re.compile(r"^UNFLUSH-SETUP-FAILED (.*)$", re.M)
# the lab's lines: not a program's own words (a failure's context)
PREFIX = "UNFLUSH-"


def tagged(line, tags):
    """(tag, record, its JSON text) of a line `TAG {json}` whose tag is one
    of @tags, or None (another line, or JSON cut short: a guest that died
    in the middle of the line)."""
    tag, _, rest = line.partition(" ")
    if tag not in tags:
        return None
    try:
        return tag, json.loads(rest), rest
    except ValueError:
        return None


def records(output, tag):
    """The records of every whole `@tag {json}` line of @output, in order."""
    out = []
    for line in output.splitlines():
        if t := tagged(line, (tag,)):
            out.append(t[1])
    return out


def windows(output):
    """The ids of the instruction windows @output's phases opened, in order."""
    return [ln.split()[1] for ln in output.splitlines()
            if ln.startswith(WINDOW + " ") and len(ln.split()) == 2]


# KTAP: a result line ("ok 3 name # SKIP why"), and its directive
KTAP_RESULT = re.compile(r"^(ok|not ok) (\d+)\b ?(.*)$")
DIRECTIVE = re.compile(r"^(.*?)\s*#\s*(SKIP|XFAIL|XPASS|TODO|error)\b:?\s*(.*)$", re.I)
# the exit status kselftest gives each KTAP result (KSFT_PASS, _FAIL, _SKIP)
KTAP_EXIT = {"pass": 0, "fail": 1, "skip": 4}


def ktap_result(line):
    """One KTAP result line, "ok 3 name # SKIP why": (number, name, status,
    reason), status pass, fail or skip (XFAIL, XPASS and TODO pass); None
    for any other line."""
    m = KTAP_RESULT.match(line)
    if not m:
        return None
    rest = m.group(3)
    d = DIRECTIVE.match(rest)
    desc, directive, text = (d.group(1), d.group(2).upper(), d.group(3)) if d \
        else (rest.split(" # ")[0], "", rest.partition(" # ")[2].strip())
    if directive == "SKIP":
        status = "skip"
    elif directive in ("XFAIL", "XPASS", "TODO"):
        status = "pass"
    else:
        status = "pass" if m.group(1) == "ok" and directive != "ERROR" else "fail"
    return int(m.group(2)), desc.strip(), status, text.strip()
