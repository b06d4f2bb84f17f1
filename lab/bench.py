"""`lab bench`: run the suite on each kernel, interleaved, and write the results.

For every repetition round, every group of experiments boots each kernel in
turn (vanilla, patched, patched with switches off, vanilla, ...), so slow
drift of a shared machine hits every configuration alike.  A kernel with the
series' switches boots twice per group: once as it is, once with each
experiment's mechanism switched off while that experiment runs.  Every boot
thus runs the same programs in the same order, so no configuration inherits
more history (free lists, swap, page cache) than another.  In each boot a
small shell script runs the group's experiments one after another,
bracketing each with markers (lab/bench_script.py).

results/<timestamp>/results.json is written only when every boot finished;
an experiment whose set-up check failed is listed under "failures" and makes
the command exit non-zero.  The format is documented in docs/results.md.
`--host` runs the same programs on this machine's kernel instead, in every
configuration of its switches (lab/host.py).
"""

import json
import shutil
import socket
import tempfile
import time
from pathlib import Path

from lab import (bench_script, build, datadisk, host, insnprof, llama, paths, report,
                 suite, tree, vm)
from lab.errors import LabError
from lab.progress import say

SWITCH_DIR = "/sys/kernel/mm/tlb_batching"
# the guest's data disk by its name in suite.Group, for a size and an
# architecture (only llama-simple's disk differs by architecture)
DATA_DISKS = {"models": lambda quick, arch: datadisk.ensure(quick),
              "llama": llama.data_disk}
FORMAT_VERSION = 1


def guest_script(experiments, kernel_name, quick, switches_off=False,
                 switch_dir=SWITCH_DIR):
    """The shell script one boot runs: each experiment once, bracketed.

    With `switches_off`, each experiment that has a switch runs with it at 0
    (configuration `<kernel>/<switch>=0`) and the switch goes back to 1 after
    it; one without a switch runs as it is, so the boot's history is the same
    as the other configurations'."""
    lines = []
    flags = " --reps 1" + (" --quick" if quick else "")
    for exp in experiments:
        if not (switches_off and exp.switch):
            lines += bench_script.bracket(exp.id, kernel_name, exp.command + flags)
            continue
        knob = f"{switch_dir}/{exp.switch}"
        config = f"{kernel_name}/{exp.switch}=0"
        lines.append(f"if [ -w {knob} ]; then")
        lines.append(f"  echo 0 > {knob}")
        lines += ["  " + ln for ln in bench_script.bracket(exp.id, config, exp.command + flags)]
        lines.append(f"  echo 1 > {knob}")
        lines.append("fi")
    return "\n".join(lines) + "\n"


def boots(kernels, experiments):
    """(kernel, switches_off) for each boot of one group in one round: every
    kernel as it is, then once more with switches off where the kernel has
    the series' switches and the group an experiment that has one."""
    out = []
    for kernel in kernels:
        out.append((kernel, False))
        if has_switches(kernel) and any(e.switch for e in experiments):
            out.append((kernel, True))
    return out


def has_switches(kernel):
    return kernel != "host" and build.VARIANTS[kernel][0] != "vanilla"


def baseline(kernels):
    """What the report compares the other kernels with: the first kernel
    without the series (vanilla, or vanilla-distro for patched-distro)."""
    return next((k for k in kernels if not has_switches(k)), "vanilla")


def check_comparable(kernels):
    """Refuse a run whose report would credit the series with a difference
    in configuration: every kernel with the series must be built like the
    baseline (patched like vanilla, patched-distro like vanilla-distro)."""
    base = baseline(kernels)
    if base not in kernels:
        return
    how = build.built_like
    for k in kernels:
        if has_switches(k) and how(k) != how(base):
            twin = build.unpatched_twin(k)
            raise LabError(f"{k} is built from {how(k)} but the baseline {base} from "
                           f"{how(base)}, so the report would mix the two: compare "
                           f"{k} with {twin} (-k {twin},{k})", exit_code=2)


def main(args):
    if args.list:
        for e in suite.EXPERIMENTS:
            print(f"{e.id:32} seed {e.seed}  group {e.group:8} {e.command}")
        return 0
    experiments = suite.select(args.experiment)
    if (args.model or args.llama) and not args.host:
        raise LabError("--model and --llama are for --host runs: the VM runs the "
                       "lab's own models", exit_code=2)
    if not args.host:
        experiments = for_arm64(experiments, args.kernels, bool(args.experiment))
    reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    if reps < 1:
        raise LabError("--reps must be at least 1", exit_code=2)
    out = Path(args.out) if args.out else paths.results_dir() / time.strftime("%Y%m%d-%H%M%S")
    if args.host:
        results, failures, meta = host.run(experiments, reps, args.quick,
                                           host.llama_args(experiments, args))
    else:
        results, failures, meta = run_vms(args, experiments, reps)
    doc = {
        "format": FORMAT_VERSION,
        "meta": meta,
        "experiments": results,
        "failures": failures,
    }
    found = [suite.owner(k, experiments) for k in results]
    missing = [e.id for e in experiments if e not in found]
    if missing and not failures:
        raise LabError(f"no results for {', '.join(missing)}: the guest programs "
                       f"printed nothing (see build/runs/)")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    report.write(out, doc)
    # results/latest names the newest run of results/; a directory given
    # with -o (a committed record, say) gets no link beside it
    if not failures and not args.out:
        latest = out.parent / "latest"
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        latest.symlink_to(out.name)
    say(f"bench: wrote {out}/report.md and results.json")
    for f in failures:
        say(f"bench: FAILED {f['experiment']} on {f['configuration']} "
            f"(round {f['round'] + 1}): {f['message']}")
    return 1 if failures else 0


def for_arm64(experiments, kernels, chosen):
    """@experiments less those an arm64 kernel among @kernels cannot run:
    left out with a word when the whole suite was asked for, refused when
    @chosen by name."""
    if not any(build.arch(k.strip()) == "arm64" for k in kernels.split(",")):
        return experiments
    refused = [(e, suite.refusal(e, "arm64")) for e in experiments
               if suite.refusal(e, "arm64")]
    if refused and chosen:
        e, why = refused[0]
        raise LabError(f"{e.id} does not run on arm64: {why}; leave it out (-e) or "
                       f"bench it on the x86 kernels", exit_code=2)
    for why in sorted({w for _, w in refused}):
        ids = [e.id for e, w in refused if w == why]
        say(f"bench: left out on arm64 ({why}): {', '.join(ids)}")
    return [e for e in experiments if not suite.refusal(e, "arm64")]


def run_vms(args, experiments, reps):
    """Every group of experiments in a boot of each kernel, @reps rounds:
    (results, failures, meta)."""
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    for k in kernels:
        build.check_variant(k)
    check_comparable(kernels)
    runner = VMRunner(kernels, args.quick, args.icount, args.no_build)
    results, failures = {}, []
    groups = [g for g in suite.GROUPS if any(e.group == g for e in experiments)]
    members = {g: [e for e in experiments if e.group == g] for g in groups}
    total = reps * sum(len(boots(kernels, members[g])) for g in groups)
    started, step = time.monotonic(), 0
    for rnd in range(reps):
        for group in groups:
            for kernel, off in boots(kernels, members[group]):
                step += 1
                n = len(members[group])
                count = f"{n} experiment" + ("s" if n != 1 else "")
                which = f"{kernel}, switches off" if off else kernel
                say(f"bench: [{step}/{total}] round {rnd + 1}/{reps}, {group} "
                    f"({count}) on {which} "
                    f"[{time.monotonic() - started:.0f}s]")
                text = runner.run(kernel, group, members[group], off)
                bench_script.parse_output(text, members[group], results, failures,
                             {"kernel": kernel, "round": rnd})
    return results, failures, runner.meta(reps, started)


class VMRunner:
    """Runs a group's script in a fresh boot of a lab kernel."""

    def __init__(self, kernels, quick, icount, no_build):
        self.quick, self.icount = quick, icount
        self.kernels = {k: build.built(k) if no_build else build.build(k) for k in kernels}
        self.shapes = {}
        # what the kernels were built from, taken now: patches/ and the lab
        # may change while a long bench runs
        self.identity = {"series_hash": tree.series_hash(),
                         "series": [p.name for p in tree.series_files()],
                         "base_version": tree.installed_base_version(),
                         "lab_commit": tree.lab_commit()}

    def shape(self, group_name, arch):
        group = suite.GROUPS[group_name]
        base = group.quick_shape if self.quick else group.shape
        shape = vm.VMShape(**{**base.__dict__, "icount": self.icount})
        if group.needs_data_disk:
            shape.data_disk = DATA_DISKS[group.data_disk](self.quick, arch)
        self.shapes[group_name] = shape.describe()
        return shape

    def run(self, kernel_name, group, experiments, switches_off=False):
        script = guest_script(experiments, kernel_name, self.quick, switches_off)
        shape = self.shape(group, self.kernels[kernel_name].arch)
        # every program's phases are windows (guest/lib/unflush.h): under
        # --icount each result gets its phase's instructions, and on arm64,
        # in either mode, its TLBIs and DSBs (lab/insnprof.py)
        arm64 = self.kernels[kernel_name].arch == "arm64"
        if self.icount or arm64:
            shape.insn_profile = Path(tempfile.mkdtemp(prefix="insns-",
                                                       dir=paths.work_dir()))
        try:
            result = vm.run(self.kernels[kernel_name], script, shape)
            if not shape.insn_profile:
                return result.output
            output, why = insnprof.annotate(result.output, shape.insn_profile,
                                            insns=self.icount)
        finally:
            # the windows are folded into the results, or useless without them
            if shape.insn_profile:
                shutil.rmtree(shape.insn_profile, ignore_errors=True)
        if why:
            say(f"bench: {group} on {kernel_name}: {why}")
        return output

    def meta(self, reps, started):
        return {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "mode": "icount" if self.icount else "tcg",
            "quick": self.quick,
            "reps": reps,
            "duration_s": round(time.monotonic() - started, 1),
            "kernels": {k: {"release": v.release, "variant": k}
                        for k, v in self.kernels.items()},
            "baseline": baseline(self.kernels),
            **arm64_meta(self.kernels.values()),
            **self.identity,
            "vm_shapes": self.shapes,
            "host": socket.gethostname(),
        }


def arm64_meta(kernels):
    """What decides an arm64 run's TLBI counts beside the kernel's code: the
    CPU model QEMU emulates (range TLBIs or not) and whether KPTI, which
    doubles every user TLBI (one per ASID of the pair), can be on; and the
    lab's own kernel change that every arm64 kernel carries, vanilla's
    too; {} for a run without arm64 kernels."""
    arm = [k for k in kernels if k.arch == "arm64"]
    if not arm:
        return {}
    return {"arm64": {"cpu": vm.ARM64_CPU,
                      "kpti": {k.variant: vm.kpti(k) for k in arm},
                      "lab_patches": [p.name for p in tree.arm64_lab_files()]}}

