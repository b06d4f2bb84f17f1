"""Command line of the lab: `python3 -m lab <command> ...`.

  setup                 install the Debian and Python packages the lab needs
  tree [--force] [--arm64]
                        make build/vanilla and build/patched (series applied);
                        --arm64: the arm64 kernels' trees too
  export                write build/patched's commits back to patches/
  build [VARIANT...]    build kernels (vanilla and patched; `build --help`
                        lists the debug, broken, distro and arm64 variants)
  run [options] -- CMD  boot a kernel and run CMD in it
  bench [options]       run the benchmark suite and write a report
  report DIR            write DIR/report.md and plots again from DIR/results.json
  safety [options]      the safety suite: mm selftests, stress-ng --verify, splats
  insn-profile DIR      instructions per vCPU and kernel function of the windows
                        a `run --insn-profile DIR` recorded
  package [--config lab|debian]
                        Debian packages (linux-image-...) of the series' kernel
  check-series [--builds [--from N] [--arch A]] [--configs [NAME,...]] [--stack-frames]
                        checkpatch --strict each patch; build each (from patch
                        N on) with the series' options on and off; build the
                        whole series in each configuration of config/matrix/;
                        record the stack frames the series' vm events grow
"""

import argparse
import json
import sys
from pathlib import Path

from lab import build, datadisk, deps, tree, vm
from lab.errors import LabError


def add_shape_options(p):
    p.add_argument("--cpus", type=int, default=2, help="vCPUs (default 2)")
    p.add_argument("--mem", default="2G", help="memory of node 0 (default 2G)")
    p.add_argument("--node1", metavar="SIZE",
                   help="add a CPU-less, slower NUMA node 1 of SIZE (tiered memory)")
    p.add_argument("--zram", metavar="SIZE", help="zram swap device of SIZE")
    p.add_argument("--nvme", metavar="SIZE",
                   help="a blank NVMe disk, a plain and a zoned namespace of SIZE each "
                   "(luf-hazards nvme-passthrough, zone-reset)")
    p.add_argument("--append", default="", help="extra kernel command line")
    p.add_argument("--accel", default="auto", choices=["auto", "tcg", "kvm"],
                   help="auto: KVM only if a boot probe shows it runs a stock kernel")
    p.add_argument("--icount", action="store_true",
                   help="-icount shift=0: guest time counts instructions (one host thread)")
    p.add_argument("--timeout", type=float, default=600, help="seconds (default 600)")
    p.add_argument("--data-disk", nargs="?", const="quick", metavar="quick|full|IMAGE",
                   help="attach an ext2 image read-only at /data (default: the lab's "
                        "quick data disk of read-only files)")


def shape_from(args):
    disk = args.data_disk
    if disk in ("quick", "full"):
        disk = datadisk.ensure(quick=disk == "quick")
    return vm.VMShape(cpus=args.cpus, mem=args.mem, node1=args.node1, zram=args.zram,
                      nvme=args.nvme, append=args.append, accel=args.accel, icount=args.icount,
                      timeout=args.timeout, data_disk=disk)


def cmd_run(args):
    if not args.command:
        raise LabError("run: give the guest command after --, e.g. "
                       "`python3 -m lab run -- cat /proc/meminfo`", exit_code=2)
    shape = shape_from(args)
    if args.insn_profile:
        shape.insn_profile = Path(args.insn_profile).resolve()
        shape.icount = True
    shape.validate()            # bad options first, then a missing kernel
    if shape.insn_profile and list(shape.insn_profile.glob("window.*")):
        raise LabError(f"--insn-profile {args.insn_profile} already holds window "
                       "files: give an empty or new directory", exit_code=2)
    kernel = build.built(args.kernel)
    if shape.insn_profile:
        shape.insn_profile.mkdir(parents=True, exist_ok=True)
    command = " ".join(args.command)
    if args.counters:
        command = f"counters -- sh -c {json.dumps(command)}"
    result = vm.run(kernel, command, shape, logdir=args.logdir,
                    dry_run=args.dry_run)
    if result is None:
        return 0
    sys.stdout.write(result.output)
    return result.exit_code


def cmd_build(args):
    for variant in args.variants or ["vanilla", "patched"]:
        build.check_variant(variant)
    for variant in args.variants or ["vanilla", "patched"]:
        build.build(variant, jobs=args.jobs)
    return 0


def cmd_bench(args):
    from lab import bench  # imports matplotlib only when a report is made
    return bench.main(args)


def parser():
    p = argparse.ArgumentParser(prog="python3 -m lab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.add_parser("setup", help="install the packages the lab needs")
    t = sub.add_parser("tree", help="make the vanilla and patched kernel trees")
    t.add_argument("--force", action="store_true",
                   help="re-make build/patched from patches/, discarding its commits")
    t.add_argument("--arm64", action="store_true",
                   help="also the arm64 kernels' trees: vanilla, patched and broken "
                        "with patches/arm64-lab/ (build/arm64-*)")
    sub.add_parser("export", help="write build/patched's commits to patches/")
    b = sub.add_parser("build", help="build kernels")
    b.add_argument("variants", nargs="*", metavar="VARIANT",
                   help=f"{', '.join(build.VARIANTS)} (default: vanilla patched)")
    b.add_argument("-j", "--jobs", type=int, help="parallel jobs (default: CPUs+1)")
    r = sub.add_parser("run", help="boot a kernel and run a command in it")
    r.add_argument("--kernel", default="vanilla", help="variant (default vanilla)")
    add_shape_options(r)
    r.add_argument("--counters", action="store_true",
                   help="wrap the command with the counters program (JSON deltas)")
    r.add_argument("--logdir", help="where to keep console and output logs")
    r.add_argument("--insn-profile", metavar="DIR",
                   help="count each vCPU's instructions per kernel function in the "
                        "windows guest programs mark (implies --icount; "
                        "`python3 -m lab insn-profile DIR` prints them)")
    r.add_argument("--dry-run", action="store_true", help="print the QEMU command only")
    r.add_argument("command", nargs=argparse.REMAINDER)
    from lab import bench_args
    bench_args.add(sub.add_parser("bench", help="run the benchmark suite"))
    rp = sub.add_parser("report", help="re-write a bench's report from its results.json")
    rp.add_argument("dir", help="a bench's results directory")
    from lab import safety
    safety.add_arguments(sub.add_parser("safety", help="run the safety suite"))
    ip = sub.add_parser("insn-profile", help="print the windows of run --insn-profile")
    ip.add_argument("dir", help="the directory given to run --insn-profile")
    ip.add_argument("--kernel", default="vanilla",
                    help="the variant that ran (its System.map names the functions)")
    ip.add_argument("--vcpu", type=int, default=0, help="whose functions (default 0)")
    ip.add_argument("--top", type=int, default=15, help="functions a window (default 15)")
    pk = sub.add_parser("package", help="Debian packages of the series' kernel "
                                        "(make deb)")
    pk.add_argument("--config", default="lab", metavar="lab|debian",
                    help="lab: the patched kernel's config, a re-link of its build "
                         "(default); debian: Debian's amd64 config plus the series', "
                         "hours on 2 cores")
    pk.add_argument("--arch", default="amd64", metavar="amd64|arm64",
                    help="amd64 (default), or arm64: the lab config only, cross-built "
                         "from patched-arm64")
    pk.add_argument("--out", metavar="DIR",
                    help="where the .deb files go (default build/deb/CONFIG)")
    pk.add_argument("-j", "--jobs", type=int, help="parallel jobs (default: CPUs+1)")
    pk.add_argument("--boot", action="store_true",
                    help="then boot the packaged kernel in QEMU and check the series' "
                         "switches and counters (recorded in DIR/package.json)")
    pk.add_argument("--no-build", action="store_true",
                    help="with --boot: boot the packages already in DIR")
    c = sub.add_parser("check-series", help="checkpatch and build every patch")
    c.add_argument("--builds", action="store_true",
                   help="also build the tree at every patch, series options on and off")
    c.add_argument("--from", dest="first", type=int, metavar="N",
                   help="with --builds: start at patch N (1 = the first), for a series "
                        "whose earlier patches were built before")
    c.add_argument("--arch", metavar="x86-64|arm64",
                   help="with --builds: the architecture to build each patch for "
                        "(default x86-64; arm64 is cross-built)")
    c.add_argument("--configs", nargs="?", const="all", metavar="NAME,...",
                   help="also build the whole series in each configuration of "
                        "config/matrix/ (or those named), with no warning allowed")
    c.add_argument("--stack-frames", action="store_true",
                   help="instead, build the object with the largest copy of all vm "
                        "events with -fstack-usage on vanilla and patched, and write "
                        "the record docs/results/stack-frames/")
    c.add_argument("-j", "--jobs", type=int, help="parallel jobs (default: CPUs+1)")
    return p


def cmd_report(out):
    """The report again, from results.json alone: after the lab's report
    changed, or to read an old run with today's verdicts."""
    from lab import report
    path = out / "results.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise LabError(f"no {path}: give the directory a `bench` wrote "
                       "(a bench that did not finish writes none)", exit_code=2) from None
    except ValueError as e:
        raise LabError(f"{path} is not JSON ({e}): nothing written", exit_code=2) from e
    missing = [k for k in ("meta", "experiments", "failures")
               if not isinstance(doc, dict) or k not in doc]
    if missing:
        raise LabError(f"{path} is not a bench's results (no {', '.join(missing)}): "
                       "nothing written", exit_code=2)
    report.write(out, doc)
    print(f"report: wrote {out}/report.md")
    return 0


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    if args.cmd == "run" and args.command[:1] == ["--"]:
        args.command = args.command[1:]
    try:
        if args.cmd == "setup":
            deps.setup()
            return 0
        if args.cmd == "tree":
            tree.ensure_vanilla()
            tree.ensure_patched(force=args.force)
            if args.arm64:
                for source in ("vanilla", "patched", "broken"):
                    tree.ensure_arm64(source)
            return 0
        if args.cmd == "export":
            tree.export()
            return 0
        if args.cmd == "build":
            return cmd_build(args)
        if args.cmd == "run":
            return cmd_run(args)
        if args.cmd == "bench":
            return cmd_bench(args)
        if args.cmd == "report":
            return cmd_report(Path(args.dir))
        if args.cmd == "insn-profile":
            from lab import insnprof
            return insnprof.main(args)
        if args.cmd == "package":
            from lab import package
            return package.main(args)
        if args.cmd == "check-series" and args.stack_frames:
            from lab import stack_frames
            return stack_frames.run()
        if args.cmd == "check-series":
            from lab import series_check
            return series_check.run(args.builds, args.jobs, args.first, args.configs,
                                    args.arch)
        if args.cmd == "safety":
            from lab import safety
            return safety.main(args)
        p.print_help()
        return 2
    except LabError as e:
        sys.stderr.write(f"lab: {e}\n")
        return e.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("lab: interrupted\n")
        return 130
