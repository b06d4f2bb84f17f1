"""Instruction profiles of marked windows: `lab run --insn-profile DIR`.

Under -icount a guest's time is an instruction count, but not its own: one
host thread runs the vCPUs in turn, so a task's CPU time also grows while
the other vCPUs execute.  To say what a piece of work itself costs, the
lab's QEMU plugin (lab/plugin/insnprof.c) counts the instructions each vCPU
runs, per translation block, between the window markers a guest program
executes (guest/lib/unflush.h), and writes DIR/window.N for each window.
`python3 -m lab insn-profile DIR --kernel K` prints them by kernel function.

On arm64 the plugin also counts the TLBI and DSB instructions each vCPU ran
in each window, by kind (DIR/window.N.tlbi), in either TCG mode: arm64 has
no shootdown interrupt, and those instructions are what its flushes cost.
"""

import bisect
import collections
import json
import subprocess
from pathlib import Path

from lab import build, guest_output, paths
from lab.errors import LabError

SOURCE = Path(__file__).parent / "plugin" / "insnprof.c"
# user space is the lower half of the address space on x86-64 and on arm64
USER_TOP = 1 << 63


def plugin():
    """The plugin's shared object, compiled when its source is newer."""
    out = paths.work_dir() / "plugin" / "insnprof.so"
    if out.exists() and out.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-pthread",
                           "-fvisibility=hidden",
                           "-o", str(out), str(SOURCE)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise LabError(f"cannot compile {SOURCE}: {proc.stderr.strip()[-300:]}")
    return out


def windows(folder):
    """DIR/window.N files in window order."""
    found = [p for p in Path(folder).glob("window.*") if p.suffix[1:].isdigit()]
    if not found:
        raise LabError(f"no window.N files in {folder}: did the guest program open "
                       "and close a window (guest/lib/unflush.h), under "
                       "`lab run --insn-profile`?", exit_code=2)
    return sorted(found, key=lambda p: int(p.suffix[1:]))


def read_window(path):
    """[(block address, instructions, [count per vCPU])]"""
    rows = []
    for line in Path(path).read_text().splitlines():
        fields = line.split()
        rows.append((int(fields[0], 16), int(fields[1]), [int(f) for f in fields[2:]]))
    return rows


class Symbols:
    """Kernel text symbols of a System.map, to name an address."""

    def __init__(self, system_map):
        syms = []
        for line in Path(system_map).read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[1] in "tTwW":
                syms.append((int(fields[0], 16), fields[2]))
        syms.sort()
        self.addrs = [a for a, _ in syms]
        self.names = [n for _, n in syms]

    def name(self, addr):
        if addr < USER_TOP:
            return "(user space)"
        i = bisect.bisect_right(self.addrs, addr) - 1
        return self.names[i] if i >= 0 else "(unknown)"


def by_function(rows, symbols, vcpu):
    """Instructions of one vCPU in one window, per function."""
    out = collections.Counter()
    for addr, _, counts in rows:
        if vcpu < len(counts) and counts[vcpu]:
            out[symbols.name(addr)] += counts[vcpu]
    return out


def read_ops(window_path, vcpu):
    """The instructions of each op the guest marked (op_begin(), op_end()) on
    @vcpu in a window, from its window.N.ops; [] if it marked none."""
    path = Path(f"{window_path}.ops")
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        v, insns = line.split()
        if int(v) == vcpu:
            out.append(int(insns))
    return out


def op_percentiles(insns):
    """p50, p90, p99 and max of per-op instruction counts, the same ranks
    as guest/luf-cost.c takes of its latencies (sorted[n * q / 100])."""
    s = sorted(insns)
    n = len(s)
    return {"p50": s[n // 2], "p90": s[n * 9 // 10], "p99": s[n * 99 // 100],
            "max": s[-1]}


def read_kinds(window_path):
    """{"tlbi/vale1is": [count per vCPU], "dsb/ish": [...]} of a window, from
    its window.N.tlbi (arm64; {} if none ran); None if the plugin wrote
    none (x86), which counts neither."""
    path = Path(f"{window_path}.tlbi")
    if not path.exists():
        return None
    out = {}
    for line in path.read_text().splitlines():
        what, kind, *counts = line.split()
        out[f"{what}/{kind}"] = [int(c) for c in counts]
    return out


def kind_counters(kinds):
    """A result's counters of an arm64 window: tlbi/<kind> and dsb/<kind>
    over all vCPUs, tlbi/all and dsb/all, and tlbi/vcpuV and dsb/vcpuV for
    every vCPU up to the last that ran any."""
    out = {}
    width = max((i + 1 for counts in kinds.values()
                 for i, c in enumerate(counts) if c), default=0)
    for what in ("tlbi", "dsb"):
        mine = {k: v for k, v in kinds.items() if k.startswith(what + "/")}
        for kind, counts in sorted(mine.items()):
            out[kind] = sum(counts)
        out[f"{what}/all"] = sum(sum(c) for c in mine.values())
        for v in range(width):
            out[f"{what}/vcpu{v}"] = sum(c[v] for c in mine.values() if v < len(c))
    return out


def vcpu_totals(rows):
    width = max((len(c) for _, _, c in rows), default=0)
    return [sum(c[v] for _, _, c in rows if v < len(c)) for v in range(width)]


def report(folder, system_map, vcpu=0, top=15):
    symbols = Symbols(system_map)
    lines = []
    for path in windows(folder):
        rows = read_window(path)
        totals = vcpu_totals(rows)
        while totals and not totals[-1]:
            totals.pop()
        lines.append(f"{path.name}: instructions per vCPU "
                     + ", ".join(f"{t:,}" for t in totals))
        funcs = by_function(rows, symbols, vcpu)
        for name, count in funcs.most_common(top):
            lines.append(f"  vCPU{vcpu} {count:>14,}  {name}")
    return "\n".join(lines)


def main(args):
    kernel = build.built(args.kernel)
    system_map = kernel.objdir / "System.map"
    if not system_map.exists():
        raise LabError(f"no System.map in {kernel.objdir}: rebuild {args.kernel}")
    print(report(args.dir, system_map, args.vcpu, args.top))
    return 0


def annotate(output, folder, vcpu=0, insns=True):
    """Add each window's instruction counts to the result it measured.

    A guest phase that opens a window prints `UNFLUSH-WINDOW <id>` and its
    result carries "window": "<id>" (guest/lib/snapshot.c); the plugin numbers
    windows per boot, in the order they close, which is the order of those
    lines since phases that hold a window never overlap.  A paired result
    gains counters insns/vcpuV (what vCPU V ran in the window), insns/all
    (every vCPU) and, over the result's `ops`, insns/vcpuV_per_op and
    insns/all_per_op; if the phase marked its ops (window.N.ops), also
    insns/vcpuV_op_p50, _p90, _p99 and _max.  An arm64 window's TLBIs and
    DSBs become counters too (kind_counters()).  Without @insns (arm64
    without -icount, where the plugin counts no instructions) only those.
    Returns the output unchanged, with a reason, if the windows and the
    lines do not pair up.
    """
    try:
        files = windows(folder)
    except LabError as e:
        return output, str(e)
    lines = output.splitlines()
    ids = guest_output.windows(output)
    if len(ids) != len(files):
        return output, (f"{len(files)} instruction windows for {len(ids)} phases that "
                        "opened one: not paired, no window counters")
    window_of = dict(zip(ids, files, strict=True))
    for i, line in enumerate(lines):
        if not (t := guest_output.tagged(line, (guest_output.RESULT,))):
            continue
        record = t[1]
        path = window_of.get(record.get("window"))
        if path is None:
            continue
        counters = record.setdefault("counters", {})
        kinds = read_kinds(path)
        if kinds is not None:
            counters.update(kind_counters(kinds))
        if insns:
            add_insns(counters, path, record.get("ops"), vcpu)
        lines[i] = guest_output.RESULT + " " + json.dumps(record, separators=(",", ":"))
    return "\n".join(lines) + "\n", None


def add_insns(counters, path, ops, vcpu):
    """A window's insns/ counters, into a result's @counters; @ops the
    operations the result counted, if any."""
    totals = vcpu_totals(read_window(path))
    counters[f"insns/vcpu{vcpu}"] = totals[vcpu] if vcpu < len(totals) else 0
    counters["insns/all"] = sum(totals)
    if ops:
        for key in (f"insns/vcpu{vcpu}", "insns/all"):
            counters[f"{key}_per_op"] = round(counters[key] / ops)
    marked = read_ops(path, vcpu)
    if marked:
        for rank, value in op_percentiles(marked).items():
            counters[f"insns/vcpu{vcpu}_op_{rank}"] = value
