"""Reading what the safety suite's guest printed, and judging it.

Three kinds of output, all plain text on the guest's output port:

  - run_vmtests.sh, the mm selftests' runner.  One TAP line per program it
    runs (`ok 3 cow`, `ok 4 ksm_tests -N -m 1 # SKIP`, `not ok 5 mremap_test
    # exit=1`), preceded by the program's own output prefixed with "# ",
    which is itself kselftest TAP (`ok 12 name`, `ok 13 # SKIP reason`).
    The suite runs the runner once per category, between its own markers
    `SAFETY-CATEGORY-BEGIN <category> <time>` and
    `SAFETY-CATEGORY-END <category> <exit> <time>`, and stamps the time
    (`SAFETY-T <time>`) before each program's start and result lines.
  - stress-ng: its log lines (`stress-ng: fail: [pid] vm: ...`) and its
    --yaml metrics, between `SAFETY-STRESS-BEGIN <phase> <time>` and
    `SAFETY-STRESS-END <phase> <exit> <time>` and `SAFETY-YAML-BEGIN/END`.
  - /proc/vmstat before and after each stress phase, one
    `SAFETY-VMSTAT <phase> before|after <name> <value>` line per counter;
    and the counters of unmapping and TLB shootdowns before and after each
    selftest category, `SAFETY-COUNTER <category> before|after <name>
    <value>`.
"""

import re
from dataclasses import dataclass, field

from lab.guest_output import KTAP_EXIT, RESULT, VIOLATION, ktap_result, records, tagged

CATEGORY_BEGIN = re.compile(r"^SAFETY-CATEGORY-BEGIN (\S+) (\d+)$")
CATEGORY_END = re.compile(r"^SAFETY-CATEGORY-END (\S+) (\d+) (\d+)$")
WATCHDOG = re.compile(r"^SAFETY-WATCHDOG (\S+) (\d+)$")
STAMP = re.compile(r"^SAFETY-T (\d+)$")
RUNNING = re.compile(r"^# running (.*)$")
# run_vmtests.sh's own result line: the program's pretty name, then a directive
TOP_RESULT = re.compile(r"^(ok|not ok) (\d+) (.*?)(?: # (SKIP|exit=(\d+)))?$")
# the runner's bare "# SKIP ./prog": a program it would not even start.  It
# prints it whatever categories were asked for: keep it in its own only.
TOP_SKIP = re.compile(r"^# SKIP (\S+)$")
TOP_SKIP_CATEGORY = {"on-fault-limit": "mlock"}
PLAN_SKIP = re.compile(r"^1\.\.0 # SKIP\s*(.*)$")
RUN_LINE = re.compile(r"^#\s+(?:\[RUN\]\s*|RUN\s+)(.*?)(?:\s*\.\.\.)?$")

STRESS_BEGIN = re.compile(r"^SAFETY-STRESS-BEGIN (\S+) (\d+)$")
STRESS_END = re.compile(r"^SAFETY-STRESS-END (\S+) (\d+) (\d+)$")
STRESS_FAIL = re.compile(r"^stress-ng: fail:\s+\[\d+\] (\S+?):? (.*)$")
STRESS_ERROR = re.compile(r"^stress-ng: error:\s+\[\d+\] (.*)$")
STRESS_SKIP = re.compile(r"^stress-ng: (?:info|warn):\s+\[\d+\] (\S+?): (.*skipping.*)$",
                         re.I)
YAML_BEGIN = re.compile(r"^SAFETY-YAML-BEGIN (\S+)$")
YAML_END = re.compile(r"^SAFETY-YAML-END (\S+)$")
VMSTAT = re.compile(r"^SAFETY-VMSTAT (\S+) (before|after) (\S+) (\d+)$")
COUNTER = re.compile(r"^SAFETY-COUNTER (\S+) (before|after) (\S+) (\d+)$")

# stress-ng's exit statuses (its manual, EXIT STATUS)
STRESS_EXIT = {0: "success", 1: "error in options or harness", 2: "a stressor failed",
               3: "a stressor lacked resources", 4: "a stressor is not implemented",
               5: "a stressor was killed by an unexpected signal",
               6: "a stressor exited unexpectedly", 7: "bogo-op metrics untrustworthy"}
STRESS_EXIT_FAILED = {2, 5, 6}


@dataclass
class Test:
    """One program run by run_vmtests.sh, or one TAP result inside it."""
    name: str
    status: str                      # pass | fail | skip
    reason: str = ""                 # why it was skipped or failed
    category: str = ""
    subtests: list = field(default_factory=list)
    seconds: int | None = None       # guest wall time, when stamped
    key: str = ""                    # what the comparison matches on

    def __post_init__(self):
        self.key = self.key or self.name


# --- the mm selftests --------------------------------------------------------

def parse_vmtests(output):
    """The tests run_vmtests.sh ran, in order, with their TAP subtests.

    A program whose category was cut short (the guest-side watchdog killed
    the runner, or the runner died) before it reported is a failure.
    """
    tests, block, category, now = [], None, "", None
    for line in output.splitlines():
        line = line.rstrip("\r")
        if m := STAMP.match(line):
            now = int(m.group(1))
            continue
        if m := CATEGORY_BEGIN.match(line):
            category, block, now = m.group(1), None, int(m.group(2))
            continue
        if m := WATCHDOG.match(line):
            if block is not None:
                block["end"] = now
                tests.append(_finish(block, "fail", f"killed by the suite's watchdog "
                                     f"after {m.group(2)} s (category {category})"))
                block = None
            continue
        if m := CATEGORY_END.match(line):
            if block is not None:
                block["end"] = int(m.group(3))
                tests.append(_finish(block, "fail", f"the runner exited ({m.group(2)}) "
                                     f"before this test reported"))
            block = None
            continue
        if m := RUNNING.match(line):
            block = {"cmd": m.group(1), "lines": [], "category": category, "start": now}
            continue
        if m := TOP_RESULT.match(line):
            name = _pretty(m.group(3))
            if m.group(4) == "SKIP":
                status, why = "skip", ""
            elif m.group(1) == "ok":
                status, why = "pass", ""
            else:
                status, why = "fail", f"exit {m.group(5)}" if m.group(5) else ""
            block = block or {"cmd": name, "lines": [], "category": category,
                              "start": None}
            block["name"] = name
            block["end"] = now
            tests.append(_finish(block, status, why))
            block = None
            continue
        if line.startswith("#"):
            inner = line[2:] if line.startswith("# ") else line[1:]
            if block is not None:
                block["lines"].append(inner)
            elif (m := TOP_SKIP.match(line)) and category in (
                    "", TOP_SKIP_CATEGORY.get(_pretty(m.group(1)), category)):
                tests.append(Test(_pretty(m.group(1)), "skip",
                                  "run_vmtests.sh starts it only through sudo, "
                                  "which the guest does not have", category))
    return tests


# mktemp's random part of a path in a command line (run_vmtests.sh passes
# split_huge_page_test the XFS it mounted at /tmp/xfs_dir_XXXXXX): without
# it, the same test would have another name on every run
MKTEMP = re.compile(r"(/tmp/[\w.-]*?_)[A-Za-z0-9]{6}\b")


def _pretty(cmd):
    """run_vmtests.sh's pretty_name(): the command without ./ or bash ./,
    and with mktemp's XXXXXX put back."""
    return MKTEMP.sub(r"\1XXXXXX", re.sub(r"^(bash )?\./", "", cmd.strip()))


def _finish(block, status, why):
    name = block.get("name") or _pretty(block["cmd"])
    subtests, plan_skip = _subtests(name, block["lines"])
    test = Test(name, status, "", block["category"], subtests,
                key=f"{block['category']}/{name}" if block["category"] else name)
    if block.get("start") is not None and block.get("end") is not None:
        test.seconds = block["end"] - block["start"]
    if status == "skip":
        test.reason = (plan_skip or _last_skip(subtests) or _last_words(block["lines"])
                       or "exit 4 (KSFT_SKIP) with no reason printed")
    elif status == "fail":
        failed = [s.name for s in subtests if s.status == "fail"]
        detail = (f"{len(failed)} subtest(s) failed, first: {failed[0]}" if failed
                  else _last_words(block["lines"]))
        test.reason = "; ".join(x for x in (why, detail) if x)
    return test


def _subtests(parent, lines):
    """The TAP results a program printed, named after the `[RUN]` line before
    them when there is one (cow.c prints the same result text for hundreds
    of variants)."""
    out, seen, run, plan_skip = [], {}, None, ""
    for inner in lines:
        if m := PLAN_SKIP.match(inner):
            plan_skip = m.group(1).strip()
            continue
        if m := RUN_LINE.match(inner):
            run = m.group(1).strip()
            continue
        result = ktap_result(inner)
        if not result:
            continue
        number, desc, status, text = result
        if run and desc and desc not in run:
            label = f"{run}: {desc}"
        else:
            label = run or desc or f"#{number}"
        run = None
        name = f"{parent}: {label}"
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name} [{seen[name]}]"
        # matched by TAP number: some names carry measurements
        # ("transact_test Extra pages 8 (0.0%)"), the numbering is fixed
        out.append(Test(name, status, text if status != "pass" else "",
                        key=f"{parent} #{number}"))
    return out, plan_skip


def _last_skip(subtests):
    reasons = [s.reason for s in subtests if s.status == "skip" and s.reason]
    return reasons[-1] if reasons else ""


NOISE = ("Totals:", "1..", "[PASS]", "[FAIL]", "[SKIP]", "Planned tests", "SUMMARY:",
         "TAP version")


def _last_words(lines):
    """Why a program stopped: its "Bail out!" line, else the last line it
    printed that says something."""
    for inner in reversed(lines):
        if inner.startswith("Bail out!"):
            return " ".join(inner[len("Bail out!"):].split())[:200]
    for inner in reversed(lines):
        text = inner.lstrip("# ").strip()
        if text and not set(text) <= set("-") and not text.startswith(NOISE):
            return text[:200]
    return ""


def flatten(tests):
    """Every result by key: the programs, then each program's subtests."""
    out = {}
    for t in tests:
        out[t.key] = t
        for s in t.subtests:
            out[s.key] = s
    return out


def regressions(baseline, other):
    """Results that passed on `baseline` and did not pass on `other`.

    Returns (failed, skipped): keys of results that fail (or are missing)
    on `other`, and of results `other` skipped.  A missing result counts as a
    failure: a kernel that makes a program die early loses its subtests.
    """
    base, new = flatten(baseline), flatten(other)
    failed, skipped = [], []
    for key, t in base.items():
        if t.status != "pass":
            continue
        got = new.get(key)
        if got is None or got.status == "fail":
            failed.append(key)
        elif got.status == "skip":
            skipped.append(key)
    return failed, skipped


def confirm(failed, reruns):
    """Split regressed keys by later runs of their categories (a list of
    parsed runs): (failed or missing in every one, passed in at least one)."""
    passed = set()
    for run in reruns:
        passed |= {k for k, t in flatten(run).items() if t.status == "pass"}
    flaky = [k for k in failed if k in passed]
    return [k for k in failed if k not in passed], flaky


def regressed_categories(baseline, other):
    """The categories holding a program that passed on `baseline` and not on
    `other`: what a confirming re-run has to repeat."""
    base = {t.key: t for t in baseline}
    new = {t.key: t for t in other}
    cats = []
    for key, t in base.items():
        if t.status == "pass" and (key not in new or new[key].status == "fail"):
            if t.category and t.category not in cats:
                cats.append(t.category)
    return cats


# --- stress-ng -----------------------------------------------------------------

@dataclass
class StressPhase:
    name: str
    exit: int | None = None          # None: stress-ng never finished
    seconds: int = 0
    ops: dict = field(default_factory=dict)        # stressor -> bogo ops
    failures: list = field(default_factory=list)   # stress-ng's "fail:" lines
    errors: list = field(default_factory=list)     # its "error:" lines
    skipped: list = field(default_factory=list)    # stressors that could not run
    vmstat: dict = field(default_factory=dict)     # counter -> delta

    @property
    def verification_errors(self):
        """Each "fail:" line is one failed check; a run that ended in a
        failure status without one still counts once."""
        n = len(self.failures)
        if not n and (self.exit is None or self.exit in STRESS_EXIT_FAILED):
            n = 1
        return n


def parse_stress(output):
    """The stress phases, in order, with ops, failures and vmstat deltas."""
    phases, current, yaml_for, yaml_lines = {}, None, None, []
    before, after = {}, {}
    for line in output.splitlines():
        line = line.rstrip("\r")
        if m := STRESS_BEGIN.match(line):
            current = phases.setdefault(m.group(1), StressPhase(m.group(1)))
            current.seconds = -int(m.group(2))
            continue
        if m := STRESS_END.match(line):
            phase = phases.setdefault(m.group(1), StressPhase(m.group(1)))
            phase.exit = int(m.group(2))
            phase.seconds += int(m.group(3))
            current = None
            continue
        if m := YAML_BEGIN.match(line):
            yaml_for, yaml_lines = m.group(1), []
            continue
        if m := YAML_END.match(line):
            if yaml_for in phases:
                phases[yaml_for].ops.update(parse_metrics_yaml("\n".join(yaml_lines)))
            yaml_for = None
            continue
        if yaml_for:
            yaml_lines.append(line)
            continue
        if m := VMSTAT.match(line):
            side = before if m.group(2) == "before" else after
            side.setdefault(m.group(1), {})[m.group(3)] = int(m.group(4))
            continue
        if current is not None:
            if m := STRESS_FAIL.match(line):
                current.failures.append(f"{m.group(1)}: {m.group(2)}".strip())
            elif m := STRESS_ERROR.match(line):
                current.errors.append(m.group(1).strip())
            elif m := STRESS_SKIP.match(line):
                current.skipped.append(f"{m.group(1)}: {m.group(2).strip()}")
    for name, phase in phases.items():
        if phase.exit is None:
            phase.seconds = 0
        b, a = before.get(name, {}), after.get(name, {})
        # zeroes kept: a counter that did not move is not one the kernel lacks
        phase.vmstat = {k: a[k] - b.get(k, 0) for k in a}
    return list(phases.values())


def parse_metrics_yaml(text):
    """stressor -> bogo-ops from stress-ng's --yaml file.  Only the
    `metrics:` list is read, so a few lines of parsing replace a YAML
    library the host may not have."""
    ops, stressor, in_metrics = {}, None, False
    for line in text.splitlines():
        if not line.startswith(" ") and line.strip():
            in_metrics = line.strip() == "metrics:"
            continue
        if not in_metrics:
            continue
        key, _, value = line.strip().lstrip("- ").partition(":")
        value = value.strip().strip("'\"")
        if key == "stressor":
            stressor = value
        elif key == "bogo-ops" and stressor:
            ops[stressor] = ops.get(stressor, 0) + int(float(value))
    return ops


def parse_counters(output):
    """What each selftest category moved: {category: {counter: after -
    before}}, zeroes kept: a counter that did not move is not one the
    kernel lacks.  A category without its "after" lines (the guest died in
    it) is left out."""
    sides = {"before": {}, "after": {}}
    for line in output.splitlines():
        if m := COUNTER.match(line.rstrip("\r")):
            sides[m.group(2)].setdefault(m.group(1), {})[m.group(3)] = int(m.group(4))
    moved = {}
    for category, after in sides["after"].items():
        before = sides["before"].get(category, {})
        moved[category] = {k: v - before[k] for k, v in after.items() if k in before}
    return moved


# --- luf-hazards --------------------------------------------------------------

def parse_trials(output, program, modes):
    """Per mode of a guest program that runs trials against a reader
    (guest/luf-hazards): trials run, violations seen, exit status, the
    folios it saw unmapped lazily and the trials the kernel refused to make
    lazy.

    Each mode is a KTAP test, <program>/<mode>, whose result gives the
    exit status and its reason.  A violation line is printed the moment
    the reader sees the wrong data, so it counts even if the guest died
    before the program reported; a mode with no result did not finish
    (exit -1); of a mode run more than once, the first that did not pass
    is kept."""
    out = {m: {"trials": 0, "violations": 0, "exit": -1, "message": "", "first": ""}
           for m in modes}
    for line in output.splitlines():
        if t := tagged(line, (RESULT, VIOLATION)):
            tag, rec, rest = t
            mode = rec.get("experiment", "").removeprefix(program + "/")
            if mode not in out:
                continue
            if tag == RESULT:
                out[mode]["trials"] += rec.get("trials", 0)
                for key in ("luf_folios", "refused_trials"):
                    if key in rec.get("checks", {}):
                        out[mode][key] = out[mode].get(key, 0) + rec["checks"][key]
            else:
                out[mode]["violations"] += 1
                out[mode]["first"] = out[mode]["first"] or rest[:200]
        elif (r := ktap_result(line)) and r[1].startswith(program + "/"):
            mode = r[1].removeprefix(program + "/")
            # a mode run more than once (the hunt's seeds): the first
            # result that did not pass stays
            if mode in out and out[mode]["exit"] in (-1, 0):
                out[mode]["exit"] = KTAP_EXIT[r[2]]
                out[mode]["message"] = r[3]
    return out


def parse_hunt(output, experiment):
    """The hunt's runs of @experiment (luf-hazards/below-random), one a
    seed: what each drew and did, from its UNFLUSH-RESULT line."""
    runs = []
    for rec in records(output, RESULT):
        if rec.get("experiment") != experiment:
            continue
        checks, counters = rec.get("checks", {}), rec.get("counters", {})
        runs.append({"seed": rec.get("seed"), "stack": rec.get("stack"),
                     "trials": rec.get("trials", 0),
                     "violations": rec.get("violations", 0),
                     "lazy_trials": checks.get("lazy_trials", 0),
                     "before_trials": checks.get("before_trials", 0),
                     "route_trials": checks.get("route_trials", {}),
                     "fill_flushes": counters.get("nr_tlb_flush_luf_fill", 0)})
    return runs
