"""report.md and plots from results.json.

One table per experiment: a row per metric, a column per configuration
(vanilla, patched, patched/<switch>=0), each cell the median over the
repetitions with its min-max, then the ratio of each configuration to
vanilla (the run's baseline, see baseline()) and of each mechanism on to
off.  Counts come first, time last: counts are exact under emulation, time
is not (see the note the report opens with).
"""

import itertools
import statistics
from pathlib import Path

from lab import suite

# arm64 (lab/insnprof.py): the TLBI and DSB instructions of the window
COUNT_ORDER = ["tlb_shootdown_irqs", "tlbi/all", "dsb/all", "irq/CAL",
               "nr_tlb_remote_flush", "nr_tlb_remote_flush_received",
               "nr_tlb_local_flush_all", "nr_tlb_local_flush_one"]
# Workload evidence worth a row when it moved: did the pages really go where
# the experiment says (swap, another node, reclaimed)?
EVIDENCE_PREFIXES = ("nr_tlb_", "tlb_flush/", "insns/", "tlbi/", "dsb/", "pswp",
                     "pgmigrate_success", "pgdemote_", "pgpromote_success", "pgsteal_",
                     "thp_swpout", "thp_migration", "numa_pte_updates", "numa_hint_faults",
                     "numa_pages_migrated", "nr_memmap_pages", "thp_fault_",
                     "compact_stall", "compact_success", "compact_fail")
EVIDENCE_SUFFIXES = ("/swpout", "/anon_fault_alloc")
# Result fields that are rates or latencies (write_ops_per_s, per second of
# CPU time write_ops_per_cpu_s, alloc_lat_p99_ns, pages_per_s): measured in
# time, like elapsed_s, so their rows come last.
TIME_SUFFIXES = ("_per_s", "_per_cpu_s", "_ns")

EMULATION_NOTE = {
    "tcg": """\
Counts (interrupts, flushes, vmstat events) are exact. Times are guest times under
QEMU TCG, an emulator: they are comparable only between configurations of the same
run (interleaved boots), never with native figures, and they also move with how
each kernel's code happens to translate. A time ratio that the counts do not
explain is to be checked with `--icount` before it is believed. Each cell is the
median over the repetitions, with [min-max].""",
    "icount": """\
Counts (interrupts, flushes, vmstat events) are exact. Times are instruction counts
(QEMU `-icount shift=0`: one guest nanosecond per instruction, all vCPUs on one
host thread), repeatable to about 1 %; cross-CPU waiting shows up as instructions
run elsewhere, not as time. The vCPUs take turns, so a task's CPU time also grows
while other vCPUs run: a rate per CPU second beside a load is not the task's own
cost, nor is a latency percentile (an operation that spans the other vCPUs' turn
counts their instructions). The `insns/vcpu0_per_op` rows are the measured
task's own instructions per operation (it is pinned to vCPU 0, where little else
runs; `insns/all` adds the other vCPUs, busy threads included);
`insns/vcpu0_op_p50`, `_p99` are their median and 99th percentile where the
program marks each operation (luf-cost's allocations), and
`alloc_offcpu_*` rows are the time the guest really had the task off its CPU.
Each cell is the median over the repetitions, with [min-max].""",
    "host": """\
Native run on this machine's kernel: times are real. On a kernel with the series'
switches every experiment also runs with each switch at 0 in turn (`host/<switch>=0`),
its own mechanism's and the others': a switch whose mechanism the experiment does
not use is a control, whose on/off ratio should be 1 within the spread.""",
}


def metric_value(rep, name):
    """One number of a repetition; a name ending in / sums that family."""
    if name.endswith("/"):
        family = [v for k, v in rep.get("counters", {}).items() if k.startswith(name)]
        return sum(family) if family else None
    if name == "elapsed_s":
        return rep.get("elapsed_s")
    if name == "tlb_shootdown_irqs" or name.endswith(TIME_SUFFIXES):
        return rep.get(name)
    return rep.get("counters", {}).get(name)


def time_fields(rep):
    """A repetition's rate and latency fields."""
    return [k for k, v in rep.items() if k.endswith(TIME_SUFFIXES)
            and isinstance(v, (int, float)) and not isinstance(v, bool)]


def metrics_of(configs):
    """The rows of one experiment's table, counts first, time last."""
    seen, timed = set(), set()
    for reps in configs.values():
        for rep in reps:
            seen.update(k for k, v in rep.get("counters", {}).items() if v)
            # arm64 counts them as TLBIs and DSBs: it has no such interrupt
            if rep.get("tlb_shootdown_irqs") is not None:
                seen.add("tlb_shootdown_irqs")
            # a count of none is a measured zero here
            seen.update(k for k in ("tlbi/all", "dsb/all") if k in rep.get("counters", {}))
            timed.update(time_fields(rep))
    rows = [m for m in COUNT_ORDER if m in seen]
    rows += sorted(m for m in seen if m not in rows and
                   (m.startswith(EVIDENCE_PREFIXES) or m.endswith(EVIDENCE_SUFFIXES)))
    return rows + sorted(timed) + ["elapsed_s"]


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def fmt(x, name):
    if name == "elapsed_s":
        return f"{x:.4g}"
    if 0 < abs(x) < 1:      # llama-tiering's tokens a second: 0.04, not 0.0
        return f"{x:.3g}"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


def cell(s, name):
    if s is None:
        return "n/a"
    med, lo, hi = s
    if lo == hi:
        return fmt(med, name)
    return f"{fmt(med, name)} [{fmt(lo, name)}-{fmt(hi, name)}]"


def baseline(doc):
    """The kernel every other one is compared with: vanilla, or the
    unpatched kernel of the run's other configuration (`bench -k
    vanilla-distro,patched-distro`).  Runs from before it was recorded
    compared with vanilla."""
    return doc["meta"].get("baseline", "vanilla")


def config_order(configs, base="vanilla"):
    """The baseline, the kernels, then their switch-off runs."""
    return sorted(configs, key=lambda c: (c != base, "/" in c, c))


def switch_offs(order):
    """(kernel, switch, switch-off configuration) for each
    `kernel/<switch>=0` in @order whose kernel is there too."""
    out = []
    for c in order:
        kernel, _, switch = c.partition("/")
        if switch.endswith("=0") and kernel in order:
            out.append((kernel, switch[:-2], c))
    return out


def ratios(order, base="vanilla"):
    """(numerator, denominator, heading) of the ratio columns: every
    configuration against the baseline, and each kernel with a mechanism on
    against the same kernel with it switched off (`patched/zap_ptes=0`),
    which is the before/after the mechanism's seed reported."""
    out = []
    if base in order:
        # the baseline's own switch-off runs (a host run's `host/luf=0`)
        # have their on/off column below, which says the same
        out += [(c, base, f"{c}/{base}") for c in order
                if c != base and c.partition("/")[0] != base]
    out += [(kernel, off, f"{switch} on/off") for kernel, switch, off in switch_offs(order)]
    return out


def table(exp_id, configs, base="vanilla"):
    order = config_order(configs, base)
    cols = ratios(order, base)
    head = ["metric", *order, *[h for _, _, h in cols]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in metrics_of(configs):
        stats = {c: summary([metric_value(r, name) for r in configs[c]]) for c in order}
        row = [name] + [cell(stats[c], name) for c in order]
        for num, den, _ in cols:
            a, b = stats.get(num), stats.get(den)
            row.append(f"{a[0] / b[0]:.3f}" if a and b and b[0] else "-")
        lines.append("| " + " | ".join(row) + " |")
    n = {c: len(configs[c]) for c in order}
    lines.append("")
    lines.append("repetitions: " + ", ".join(f"{c} {k}" for c, k in n.items()))
    return "\n".join(lines)


# Rates: more is better.  Every other cost is better lower.
HIGHER_IS_BETTER = ("_per_s", "_per_cpu_s")


def is_judged(name, mode):
    """Is @name a cost the spread section judges in a report of @mode?
    Under --icount only the task's own instructions per operation, their
    mean and, where the ops were marked, their median and 99th percentile:
    its guest time, rates and latencies also hold whatever the other vCPUs
    ran in their turns (EMULATION_NOTE).  Otherwise time, rates and
    latencies."""
    if mode == "icount":
        return name in ("insns/vcpu0_per_op", "insns/vcpu0_op_p50",
                        "insns/vcpu0_op_p99")
    return name == "elapsed_s" or name.endswith(TIME_SUFFIXES)


def against_spread(base, other, name):
    """'worse' or 'better' when the [min-max] of @other lies wholly on one
    side of @base's, else 'within': the run-to-run spread is the only
    yardstick a same-run comparison has."""
    _, lo, hi = base
    _, olo, ohi = other
    if name.endswith(HIGHER_IS_BETTER):
        lo, hi, olo, ohi = -hi, -lo, -ohi, -olo
    if olo > hi:
        return "worse"
    if ohi < lo:
        return "better"
    return "within"


def judge(base_reps, other_reps, name):
    """(summary of @name over @base_reps, over @other_reps, verdict), or None
    if either set of repetitions lacks it."""
    base = summary([metric_value(r, name) for r in base_reps])
    other = summary([metric_value(r, name) for r in other_reps])
    return (base, other, against_spread(base, other, name)) if base and other else None


def spread_verdicts(doc):
    """(experiment, kernel, metric, baseline's, kernel's, verdict) for every
    cost of every kernel (not its switch-off runs) measured beside the
    baseline, with at least two repetitions each: one run has no spread to
    judge by."""
    out, mode, ref = [], doc["meta"]["mode"], baseline(doc)
    for exp_id in sorted(doc["experiments"], key=suite_order):
        configs = doc["experiments"][exp_id]
        if len(configs.get(ref, [])) < 2:
            continue
        kernels = [c for c in config_order(configs, ref)
                   if c != ref and "/" not in c and len(configs[c]) >= 2]
        for name in (m for m in metrics_of(configs) if is_judged(m, mode)):
            for k in kernels:
                v = judge(configs[ref], configs[k], name)
                if v:
                    out.append((exp_id, k, name, *v))
    return out


def switch_verdicts(doc):
    """(experiment, kernel, switch, metric, off's, on's, verdict) for every
    cost of every kernel with its mechanism on against the same kernel with
    it switched off (`patched` against `patched/luf=0`), two repetitions
    each at least: the yardstick "within the spread of the switch off",
    which needs no vanilla in the run."""
    out, mode = [], doc["meta"]["mode"]
    for exp_id in sorted(doc["experiments"], key=suite_order):
        configs = doc["experiments"][exp_id]
        pairs = [(kernel, switch, off) for kernel, switch, off
                 in switch_offs(config_order(configs, baseline(doc)))
                 if len(configs[off]) >= 2 and len(configs[kernel]) >= 2]
        for name in (m for m in metrics_of(configs) if is_judged(m, mode)):
            for kernel, switch, off in pairs:
                v = judge(configs[off], configs[kernel], name)
                if v:
                    out.append((exp_id, kernel, switch, name, *v))
    return out


def baseline_halves(reps):
    """Every way to split the baseline's repetitions into two halves, each
    way once (the first repetition always in the first half, which is the
    smaller for an odd count): the same kernel against itself.  None below
    four repetitions, where a half has no spread."""
    if len(reps) < 4:
        return []
    half, rest = len(reps) // 2, range(1, len(reps))
    out = []
    for combo in itertools.combinations(rest, half - 1):
        first = {0, *combo}
        out.append(([r for i, r in enumerate(reps) if i in first],
                    [r for i, r in enumerate(reps) if i not in first]))
    return out


def self_spread(doc):
    """{(experiment, metric): (largest difference of medians, splits judged
    outside the spread, splits)} of the baseline against itself, for every
    judged cost of an experiment with four or more repetitions of it: how far
    apart the same kernel's halves land, and how often the spread_verdicts()
    yardstick calls that a difference."""
    out, mode = {}, doc["meta"]["mode"]
    for exp_id, configs in doc["experiments"].items():
        splits = baseline_halves(configs.get(baseline(doc), []))
        if not splits:
            continue
        for name in (m for m in metrics_of(configs) if is_judged(m, mode)):
            diffs, off = [], 0
            for a, b in splits:
                v = judge(a, b, name)
                if v:
                    diffs.append(abs(v[1][0] - v[0][0]))
                    off += v[2] != "within"
            if diffs:
                out[(exp_id, name)] = (max(diffs), off, len(diffs))
    return out


def plural(n, noun):
    return f"{n} {noun}" + ("" if n == 1 else "s")


def judged_what(doc):
    """What the spread section judges, in words, for the run's mode."""
    if doc["meta"]["mode"] == "icount":
        return ("the measured task's own instructions per operation "
                "(`insns/vcpu0_per_op`, and `insns/vcpu0_op_p50` and `_p99` where each "
                "operation is marked; its time, rates and latencies here also hold "
                "the other vCPUs' turns), whose spread is a few instructions, so that "
                "any instruction a kernel adds to a path shows")
    return "guest time, rates (where more is better) and latencies"


def tally(verdicts):
    """(worse, better, within) of verdicts whose last field is the verdict."""
    worse = [v for v in verdicts if v[-1] == "worse"]
    better = [v for v in verdicts if v[-1] == "better"]
    return worse, better, len(verdicts) - len(worse) - len(better)


def tally_text(verdicts):
    """'N costs in M experiments: a worse, b better, c within the spread.'"""
    worse, better, within = tally(verdicts)
    n_exp = len({v[0] for v in verdicts})
    return (f"{plural(len(verdicts), 'cost')} in {plural(n_exp, 'experiment')}: "
            f"{len(worse)} worse, {len(better)} better, {within} within the spread.")


def unequal_load_line(doc, rows):
    """Under a list of worse costs, the experiments among them whose load
    did not read at one rate (load_note()), where part of the cost is the
    load's; [] if none."""
    named = sorted({r[0] for r in rows if load_note(r[0], doc["experiments"][r[0]])},
                   key=suite_order)
    if not named:
        return []
    return [f"Not at equal load, so not all the kernel's (the note under each "
            f"table says why): {', '.join(named)}.", ""]


def kernel_lines(doc, verdicts):
    """Each kernel against the baseline, with its self-calibration."""
    ref = baseline(doc)
    worse, better, _ = tally(verdicts)
    lines = [f"Each kernel against {ref}, by the [min-max] of their repetitions: "
             f"worse when every repetition did worse than every one of {ref}'s, "
             f"better the other way round. Judged: {judged_what(doc)}. Counts are "
             f"not judged here: they are exact, and their change is what a "
             f"mechanism does. {tally_text(verdicts)}", ""]
    selfs = self_spread(doc)
    if selfs:
        off = sum(v[1] for v in selfs.values())
        n = sum(v[2] for v in selfs.values())
        lines += [f"The baseline against itself, to calibrate the yardstick: in "
                  f"{plural(len({e for e, _ in selfs}), 'experiment')}, {ref}'s "
                  f"repetitions split into two halves every way and judged the same "
                  f"way gave {off} of {plural(n, 'comparison')} outside the spread. "
                  f"The tables give, as \"{ref} vs itself\", the largest "
                  f"difference between the medians of two such halves, beside the "
                  f"kernel's difference from {ref}.", ""]
    for title, rows in (("Worse", worse), ("Better", better)):
        if not rows:
            continue
        head = f"| experiment | metric | kernel | {ref} | kernel's | kernel/{ref} |"
        lines += [f"{title}:", "",
                  head + (f" difference | {ref} vs itself |" if selfs else ""),
                  "|---|---|---|---|---|---|" + ("---|---|" if selfs else "")]
        for e, k, m, b, o, _ in rows:
            row = (f"| {e} | {m} | {k} | {cell(b, m)} | {cell(o, m)} | "
                   + (f"{o[0] / b[0]:.3f} |" if b[0] else "- |"))
            if selfs:
                own = selfs.get((e, m))
                row += (f" {fmt(o[0] - b[0], m)} | "
                        + (f"{fmt(own[0], m)} |" if own else "- |"))
            lines.append(row)
        lines.append("")
        if rows is worse:
            lines += unequal_load_line(doc, rows)
    return lines


def switch_lines(doc, verdicts):
    """Each mechanism on against the same kernel with it switched off."""
    worse, better, _ = tally(verdicts)
    lines = [f"Each mechanism on against its kernel with the switch at 0 "
             f"(`patched` against `patched/<switch>=0`), by the same rule and the same "
             f"costs: {tally_text(verdicts)}", ""]
    for title, rows in (("Worse with the switch on", worse),
                        ("Better with the switch on", better)):
        if not rows:
            continue
        lines += [f"{title}:", "",
                  "| experiment | metric | kernel | switch | off | on | on/off |",
                  "|---|---|---|---|---|---|---|"]
        for e, k, sw, m, off, on, _ in rows:
            lines.append(f"| {e} | {m} | {k} | {sw} | {cell(off, m)} | {cell(on, m)} | "
                         + (f"{on[0] / off[0]:.3f} |" if off[0] else "- |"))
        lines.append("")
        if rows is worse:
            lines += unequal_load_line(doc, rows)
    return lines


def spread_section(doc):
    """The report's verdict on regressions: costs outside the spread, of
    each kernel against the baseline and of each mechanism against itself
    switched off."""
    verdicts, switches, ref = spread_verdicts(doc), switch_verdicts(doc), baseline(doc)
    lines = ["## Outside the run-to-run spread", ""]
    if not verdicts and not switches:
        return lines + [f"Nothing to judge: a kernel and {ref}, or a kernel and its "
                        "switch-off run, need two repetitions each of the same "
                        "experiment (`-r 2` or more).", ""]
    if verdicts:
        lines += kernel_lines(doc, verdicts)
    elif any("/" not in c and c != ref for configs in doc["experiments"].values()
             for c in configs):
        lines += [f"No kernel against {ref}: it needs two repetitions of the "
                  f"same experiment beside them.", ""]
    if switches:
        lines += switch_lines(doc, switches)
    return lines


def change_cell(got, base, name, label=""):
    """A compare table's cell: @got's median [min-max] and its change in
    per cent from @base's median; "-" where the configuration did not run."""
    if got is None:
        return "-"
    change = f"{100 * (got[0] - base[0]) / base[0]:+.1f} %" if base[0] else "-"
    return f"{label}{cell(got, name)} ({change})"


def compare_section(doc):
    """Every judged cost of the run in one table, as mmtests' compare
    scripts and LKP print kernels side by side: a row per experiment and
    cost, a column per configuration, each the median [min-max] and its
    change from the baseline's median.  The last column is the largest
    difference between two halves of the baseline's own repetitions
    (self_spread()), the noise a change is read against."""
    ref, mode = baseline(doc), doc["meta"]["mode"]
    exps = {e: c for e, c in doc["experiments"].items() if ref in c}
    kernels = sorted({c for configs in exps.values() for c in configs
                      if c != ref and "/" not in c})
    if not kernels:
        return []
    selfs = self_spread(doc)
    head = ["experiment", "cost", ref]
    for k in kernels:
        head += [k, f"{k}, switch off"]
    lines = [f"## Against {ref}", "",
             f"Each cell: the median [min-max] of the repetitions, and its change from "
             f"{ref}'s median. \"switch off\": the kernel with the experiment's "
             f"switch at 0 (named in the cell). \"{ref} vs itself\": the largest "
             f"difference between the medians of two halves of {ref}'s repetitions "
             f"(four or more).", "",
             "| " + " | ".join(head + [f"{ref} vs itself"]) + " |",
             "|" + "---|" * (len(head) + 1)]
    for exp_id in sorted(exps, key=suite_order):
        configs = exps[exp_id]
        for name in (m for m in metrics_of(configs) if is_judged(m, mode)):
            stats = {c: summary([metric_value(r, name) for r in reps])
                     for c, reps in configs.items()}
            base = stats[ref]
            if base is None:
                continue
            offs = {kernel: (switch, off) for kernel, switch, off in switch_offs(list(configs))}
            row = [exp_id, name, cell(base, name)]
            for k in kernels:
                switch, off = offs.get(k, (None, None))
                row += [change_cell(stats.get(k), base, name),
                        change_cell(stats.get(off), base, name, f"{switch}=0: ")]
            own = selfs.get((exp_id, name))
            row.append(fmt(own[0], name) if own else "-")
            lines.append("| " + " | ".join(row) + " |")
    return lines + [""]


def suite_order(exp_id):
    """Experiments in the suite's order (by seed), phases after their parent."""
    known = suite.owner(exp_id)
    if known is None:
        return (len(suite.EXPERIMENTS), exp_id)
    return (suite.EXPERIMENTS.index(known), exp_id)


# A paced load (luf-cost --load-rate) that reached less than this share of
# its cap in some configuration did not give them all the same load; nor
# did an uncapped one whose slowest configuration read less than this share
# of what the fastest read.
PACED_SHARE = 0.9


def load_note(exp_id, configs, base="vanilla"):
    """A warning for an experiment run beside a load (`load_pages_per_s`)
    that did not read at the same rate in every configuration, else None.

    Capped (`load_rate`), the cap is there to give every configuration the
    same reclaim beside the measured work; where one falls short (a slower
    kernel, quick sizes, or the rate chosen for another mode), the
    comparison is not at equal load.  Uncapped, a kernel that reclaims more
    cheaply lets its load read more, and the measured work then runs beside
    more reclaim (and, under TCG, beside vCPUs that take more of the host):
    a difference in it is not all the kernel's cost, which the experiment's
    paced twin measures."""
    rates = {}
    for name in config_order(configs, base):
        got = [r["load_pages_per_s"] for r in configs[name] if "load_pages_per_s" in r]
        if got:
            rates[name] = summary(got)[0]
    if not rates:
        return None
    each = ", ".join(f"{n} {v:,.0f}" for n, v in rates.items())
    cap = max((r.get("load_rate") or 0 for reps in configs.values() for r in reps),
              default=0)
    if cap:
        short = [n for n, v in rates.items() if v < PACED_SHARE * cap]
        if not short:
            return None
        return (f"**Not at equal load:** the load was capped at {cap:,} pages a second, "
                f"but read (median pages a second) {each}; "
                f"{', '.join(short)} fell short of the cap, so the configurations "
                "did not face the same reclaim.")
    if min(rates.values()) >= PACED_SHARE * max(rates.values()):
        return None
    twin = suite.paced_twin(exp_id)
    return (f"**Not at equal load:** the load ran uncapped and read (median pages "
            f"a second) {each}, so the measured work ran beside different amounts "
            "of reclaim, and a difference in it is not all the kernel's"
            + (f"; `{twin}` compares them at one rate." if twin else "."))


def host_lines(meta):
    """What machine a host run ran on, and whether perf counted TLB misses."""
    box = meta.get("machine")
    if not box:
        return []
    tiers = box.get("memory_tiers") or {}
    lines = [f"- machine: {box['cpu_model']}, {box['cpus']} CPUs"
             + (f" ({box['cores']} cores)" if box.get("cores") else "")
             + f", {plural(len(box['numa_nodes']), 'NUMA node')}"
             + (", memory tiers " + "; ".join(f"{t}: nodes {n}" for t, n in tiers.items())
                if tiers else "")]
    perf = meta.get("perf_stat") or {}
    if perf.get("note"):
        lines.append(f"- {perf['note']}")
    elif perf.get("events"):
        lines.append(f"- perf stat counted {', '.join(perf['events'])} of each whole "
                     "program (`perf_stat` in results.json)")
    return lines


def arm64_lines(meta):
    """What an arm64 run counts in place of x86's shootdowns, and what
    decides those counts."""
    arm = meta.get("arm64")
    if not arm:
        return []
    kpti = "; ".join(f"{k} {v}" for k, v in sorted(arm["kpti"].items()))
    lines = [f"arm64 (QEMU `virt`, `-cpu {arm['cpu']}`; KPTI: {kpti}) has no shootdown "
             "interrupt, and vanilla no `nr_tlb_*` (the series' kernels count flushes "
             "by source there too): a flush there is broadcast TLBI "
             "instructions and the DSBs that wait for them. `tlbi/*` and `dsb/*` rows count "
             "them exactly, per kind and per vCPU, in each program's measured phase, by a "
             "QEMU plugin independent of the kernel (docs/insn-profile.md); "
             "`tlb_flush/` (the tlb:tlb_flush tracepoint, fired only by x86) is not "
             "there."]
    if arm.get("lab_patches"):
        lines.append("Every arm64 kernel here, vanilla's too, carries the lab's own "
                     f"change{'s' if len(arm['lab_patches']) > 1 else ''} "
                     f"(patches/arm64-lab/: {', '.join(arm['lab_patches'])}), not part "
                     "of the series: without it 6.12 finds no node 1 on the UEFI boot "
                     "of `virt`.")
    return lines + [""]


def write(out, doc):
    out = Path(out)
    meta = doc["meta"]
    parts = ["# unflush benchmark report", ""]
    # results.json keeps its keys sorted: the baseline first, as the run had it
    kernels = ", ".join(f"{k} `{meta['kernels'][k]['release']}`"
                        for k in config_order(meta["kernels"], baseline(doc)))
    reps = f"{meta['reps']} repetition" + ("s" if meta["reps"] != 1 else "")
    parts += [f"- date: {meta['date']}, host {meta['host']}, lab {meta.get('lab_commit')}",
              f"- kernels: {kernels}"]
    if meta.get("series_hash"):
        parts.append(f"- series: {meta['series_hash']} ({len(meta.get('series') or [])} "
                     f"patches) on Debian {meta.get('base_version')}")
    configs = meta.get("configurations") or []
    parts += [f"- mode: {meta['mode']}{' (quick sizes)' if meta['quick'] else ''}, {reps}"
              + (", interleaved by kernel" if len(meta["kernels"]) > 1 else "")
              + (f", interleaved by configuration: {', '.join(configs)}"
                 if len(configs) > 1 else "")]
    parts += host_lines(meta) + [""]
    if meta.get("vm_shapes"):
        parts.append("VM shapes: " + "; ".join(
            f"{g}: {s['cpus']} vCPUs, {s['mem']}"
            + (f" + node1 {s['node1']}" if s.get("node1") else "")
            + (f", zram {s['zram']}" if s.get("zram") else "")
            for g, s in meta["vm_shapes"].items()))
        parts.append("")
    parts += [EMULATION_NOTE[meta["mode"]], ""] + arm64_lines(meta)
    if doc["failures"]:
        parts += ["## FAILED", ""]
        parts += [f"- {f['experiment']} on {f['configuration']} (round {f['round'] + 1}, "
                  f"exit {f['exit']}): {f['message']}" for f in doc["failures"]]
        parts.append("")
    parts += compare_section(doc) + spread_section(doc)
    plots = make_plots(out, doc)
    for exp_id in sorted(doc["experiments"], key=suite_order):
        parts += [f"## {exp_id}", "",
                  table(exp_id, doc["experiments"][exp_id], baseline(doc)), ""]
        note = load_note(exp_id, doc["experiments"][exp_id], baseline(doc))
        if note:
            parts += [note, ""]
        for title, png in plots.get(exp_id.split("/")[0], []):
            parts += [f"![{title}]({png})", ""]
            plots.pop(exp_id.split("/")[0])
    (out / "report.md").write_text("\n".join(parts))


def make_plots(out, doc):
    """PNG plots where a reader would rather look than read."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    plots = {}
    exps = doc["experiments"]
    sizes = [k for k in exps if k.startswith("munmap-folio-size/") and k.count("/") == 1]
    if sizes:
        sizes.sort(key=lambda k: int(k.split("/")[1].rstrip("K")))
        configs = config_order({c: 1 for k in sizes for c in exps[k]}, baseline(doc))
        # arm64 fires no tlb:tlb_flush: its flushes are the TLBIs counted
        arm64 = any("tlbi/all" in r.get("counters", {})
                    for k in sizes for reps in exps[k].values() for r in reps)
        flushes = "tlbi/all" if arm64 else "tlb_flush/"
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for config in configs:
            for ax, name in zip(axes, ("elapsed_s", flushes), strict=True):
                ys = [summary([metric_value(r, name) for r in exps[k].get(config, [])])
                      for k in sizes]
                ax.plot([k.split("/")[1] for k in sizes],
                        [y[0] if y else float("nan") for y in ys], marker="o", label=config)
        axes[0].set_title("munmap() time (guest s, median)")
        axes[1].set_title("TLBI instructions during munmap() (all vCPUs)" if arm64 else
                          "TLB flushes during munmap() (tlb:tlb_flush, all reasons)")
        for ax in axes:
            ax.set_xlabel("folio size")
            ax.legend()
        fig.tight_layout()
        fig.savefig(out / "munmap-folio-size.png", dpi=90)
        plt.close(fig)
        plots["munmap-folio-size"] = [("munmap by folio size", "munmap-folio-size.png")]
    # seed 001's workload, imitated and real: shootdowns over time; a
    # kernel without the TLB interrupt (arm64) samples only its start
    for exp_id in ("ro-reclaim-tiering", "llama-tiering"):
        tiering = exps.get(exp_id, {})
        if not any(len(r.get("tlb_irq_series") or []) > 1
                   for reps in tiering.values() for r in reps):
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for i, config in enumerate(config_order(tiering, baseline(doc))):
            for j, rep in enumerate(tiering[config]):
                series = rep.get("tlb_irq_series") or []
                ax.plot([t for t, _ in series], [v for _, v in series], color=f"C{i}",
                        alpha=1.0 if j == 0 else 0.4, label=config if j == 0 else None)
        ax.set_title(f"{exp_id}: TLB shootdowns during the run")
        ax.set_xlabel("guest seconds")
        ax.set_ylabel("shootdown interrupts (cumulative)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / f"{exp_id}.png", dpi=90)
        plt.close(fig)
        plots[exp_id] = [("shootdowns over time", f"{exp_id}.png")]
    return plots
