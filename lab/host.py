"""`lab bench --host`: the suite on this machine's running kernel, in every
configuration its switches allow.

On a kernel with the series' switches (/sys/kernel/mm/tlb_batching/), every
experiment runs as the kernel is booted with every switch at 1 (configuration
`host`) and once with each switch at 0 (`host/<switch>=0`), interleaved: in
each round, each experiment runs in every configuration before the next
experiment, so slow drift of the machine hits every configuration alike.  The
order of the configurations rotates by one each round, so that none always
runs first after another experiment.  A kernel without the switches runs
`host` alone, as a stock kernel can.

The switches this module writes, and the settings the programs change (they
put them back themselves, but not if they are killed), are recorded before
the run and put back after it: also on Ctrl-C, SIGTERM and any failure.

UNFLUSH_HOST_ROOT moves the root of /sys and /proc that this module reads
and writes (the tests point it at a fake tree); the programs themselves
always use the real ones.
"""

import contextlib
import os
import shutil
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab import bench_script, datadisk, guest_output, paths, suite, tree
from lab.errors import LabError
from lab.progress import say

# The series' switches, in the order their configurations run.
SWITCHES = ("zap_ptes", "anon_unmap", "unmap_flush", "hvo_flush", "luf")
# What the programs change through setting_write() (guest/lib/cleanup.c):
# checked after the run, and put back if a killed program left one changed.
WATCHED = ("proc/sys/vm/nr_hugepages", "proc/sys/vm/hugetlb_optimize_vmemmap",
           "proc/sys/kernel/numa_balancing", "sys/kernel/mm/numa/demotion_enabled",
           "sys/kernel/mm/transparent_hugepage/enabled",
           "sys/kernel/mm/transparent_hugepage/defrag",
           "sys/kernel/mm/transparent_hugepage/hugepages-*/enabled")
PERF_EVENTS = ("dTLB-load-misses", "dTLB-store-misses", "iTLB-load-misses")
# the as-booted configuration; it is the report's baseline (see meta())
BASE = "host"


def root():
    return Path(os.environ.get("UNFLUSH_HOST_ROOT", "/"))


def switch_dir():
    return root() / "sys/kernel/mm/tlb_batching"


def _value(text):
    """A setting as written back: the [chosen] word of a THP file, else
    the text itself."""
    if "[" in text:
        return text.split("[", 1)[1].split("]", 1)[0]
    return text.strip()


class Settings:
    """Writes sysfs and /proc/sys files, and puts back at exit each one's
    value from before its first write, and each watched file's value from
    when it was watched if it changed; also when leaving by an exception."""

    def __init__(self):
        self.saved = {}

    def watch(self, path):
        if path not in self.saved:
            self.saved[path] = _value(path.read_text())

    def set(self, path, value, always=False):
        """Write @value to @path unless it holds it already (or @always)."""
        try:
            self.watch(path)
            if always or _value(path.read_text()) != value:
                path.write_text(value + "\n")
        except OSError as e:
            raise LabError(f"cannot write {value} to {path} ({e.strerror or e}): "
                           "the run needs to set it; boot a kernel whose switch "
                           "files root can write, or a stock kernel") from e

    def restore(self):
        """Put back what changed; the files that could not be, with why."""
        failed = []
        for path, value in reversed(self.saved.items()):
            try:
                if _value(path.read_text()) != value:
                    path.write_text(value + "\n")
            except OSError as e:
                failed.append(f"{path} = {value} ({e.strerror or e})")
        return failed

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        failed = self.restore()
        if not failed:
            return
        message = "could not put back " + ", ".join(failed) + ": write them by hand"
        if exc is None:
            raise LabError(message)
        say(f"bench: {message}")   # the exception that stopped the run goes on


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM and SIGHUP stop the run like Ctrl-C, so that the settings
    are put back on those too."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    old = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def check_machine(experiments):
    """Refuse, with what to do, a machine the programs cannot run on."""
    if os.geteuid() != 0:
        raise LabError("bench --host must run as root (it sets sysctls, switches and "
                       "memory cgroups): run `sudo python3 -m lab bench --host`",
                       exit_code=2)
    in_memcg = [e.id for e in experiments if e.memcg]
    if not in_memcg:
        return
    controllers = _read(root() / "sys/fs/cgroup/cgroup.controllers")
    if controllers is None or "memory" not in controllers.split():
        where = ("there is no cgroup.controllers" if controllers is None
                 else "its memory controller is bound to cgroup v1")
        one = len(in_memcg) == 1
        raise LabError(f"{_listed(in_memcg)} {'runs' if one else 'run'} in a memory cgroup, "
                       f"which needs cgroup v2 at /sys/fs/cgroup ({where}): boot with "
                       "systemd.unified_cgroup_hierarchy=1, or leave "
                       f"{'it' if one else 'them'} out with -e", exit_code=2)


def _listed(names):
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def find_switches(settings):
    """{switch: its value at start} of the series' switch files this kernel
    has; each is read and written (its own value back) once, so that a file
    the run could not set is refused before anything ran."""
    folder = switch_dir()
    if not folder.exists():
        return {}
    found = {}
    for name in SWITCHES:
        path = folder / name
        if not (path.exists() or path.is_symlink()):
            continue
        try:
            text = path.read_text().strip()
        except OSError as e:
            raise LabError(f"{path} exists but cannot be read ({e.strerror or e}): "
                           "is this kernel built from the series?", exit_code=2) from e
        if text not in ("0", "1"):
            raise LabError(f"{path} reads {text[:20]!r}, not 0 or 1: this kernel's "
                           "switches are not the series'; boot one built from "
                           "patches/ or a stock kernel", exit_code=2)
        settings.set(path, text, always=True)
        found[name] = text
    if not found:
        raise LabError(f"{folder} exists but holds none of {', '.join(SWITCHES)}: "
                       "this kernel has another version of the series; boot one "
                       "built from patches/ or a stock kernel", exit_code=2)
    return found


def configurations(switches):
    """(name, {switch: value}) of every configuration: all switches on,
    then each one off."""
    on = {s: "1" for s in switches}
    return [(BASE, on)] + [(f"{BASE}/{s}=0", {**on, s: "0"}) for s in switches]


def rotated(configs, rnd):
    k = rnd % len(configs)
    return configs[k:] + configs[:k]


def _default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_script(script, env):
    """Run @script with sh; its output, stderr folded in.  The script runs in
    a process group of its own, out of the terminal's reach (stdin is
    /dev/null): on Ctrl-C (or any exception here) its programs get SIGINT,
    on which they put back their own settings, and are waited for (60 s at
    most, then killed), so that nothing is put back under them."""
    # SIGINT at its default: a shell started with it ignored (a background
    # job of a non-interactive shell, e.g. `nohup make bench &`) may not
    # trap it, and its programs would never put their settings back
    proc = subprocess.Popen(["sh", "-c", script], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            process_group=0, preexec_fn=_default_sigint)
    try:
        out, _ = proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.communicate(timeout=60)   # EOF: every program has exited
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        raise
    return out


def perf_state():
    """(events perf stat counts here, None) or ([], why not)."""
    if not shutil.which("perf"):
        return [], "perf is not on PATH: no dTLB/iTLB miss counts"
    with tempfile.NamedTemporaryFile(prefix="perf-", suffix=".csv") as f:
        proc = subprocess.run(["perf", "stat", "-x,", "-o", f.name, "-e",
                               ",".join(PERF_EVENTS), "--", "true"],
                              capture_output=True, text=True)
        counts = parse_perf(Path(f.name).read_text())
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return [], f"perf stat cannot count here ({why}): no dTLB/iTLB miss counts"
    events = [e for e in PERF_EVENTS if counts.get(e) is not None]
    if not events:
        return [], "perf stat: this machine counts none of " + ", ".join(PERF_EVENTS)
    return events, None


def parse_perf(text):
    """{event: count or None} of a `perf stat -x,` output file."""
    out = {}
    for line in text.splitlines():
        fields = line.split(",")
        if line.startswith("#") or len(fields) < 3 or not fields[2]:
            continue
        out[fields[2]] = int(fields[0]) if fields[0].isdigit() else None
    return out


def machine():
    """What the host is: CPU model, CPUs and cores, NUMA nodes, memory
    tiers, kernel release."""
    r = root()
    info = _cpuinfo(r / "proc/cpuinfo")
    cpu = info.get("model name")
    if not cpu and "CPU implementer" in info:     # arm64 names no model
        cpu = f"implementer {info['CPU implementer']} part {info.get('CPU part', '?')}"
        dt = _read(r / "proc/device-tree/model")
        cpu += f" ({dt.rstrip(chr(0))})" if dt else ""
    cpus = _cpu_list(_read(r / "sys/devices/system/cpu/online") or "")
    cores = {_read(r / f"sys/devices/system/cpu/cpu{c}/topology/core_cpus_list")
             for c in cpus} - {None}
    nodes = {}
    for node in sorted((r / "sys/devices/system/node").glob("node[0-9]*")):
        mem = next((ln.split()[-2] for ln in (_read(node / "meminfo") or "").splitlines()
                    if "MemTotal:" in ln), None)
        nodes[node.name] = {"cpus": _read(node / "cpulist") or "",
                            "mem_kib": int(mem) if mem else None}
    tiers = {t.name: _read(t / "nodelist")
             for t in sorted((r / "sys/devices/virtual/memory_tiering").glob("memory_tier*"))}
    return {"cpu_model": cpu or "unknown",
            "cpus": len(cpus) or os.cpu_count(),
            "cores": len(cores) or None,
            "numa_nodes": nodes,
            "memory_tiers": tiers or None,
            "kernel_release": _read(r / "proc/sys/kernel/osrelease") or os.uname().release}


def _read(path):
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpuinfo(path):
    out = {}
    for line in (_read(path) or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return out


def _cpu_list(text):
    out = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def program_env():
    """The environment the programs run in: guest/'s programs, built for
    this machine, first on PATH."""
    from lab import initramfs
    initramfs.guest_programs()
    guest_bin = paths.work_dir() / "guest"
    return dict(os.environ, PATH=f"{guest_bin}:{os.environ['PATH']}")


def llama_args(experiments, args):
    """llama-tiering's arguments on this machine: the user's --model files
    (seed 001's own setting: no memory cgroup, the machine's DRAM is the
    limit) and llama-simple, --llama or the lab's build; None if the run
    has no llama-tiering.  Refuses missing files."""
    if not any(e.id == "llama-tiering" for e in experiments):
        return None
    models = args.model or []
    if not models:
        raise LabError("llama-tiering on the host needs your models: give --model PATH "
                       "three times (GGUF files larger together than the fast "
                       "node's memory), or leave it out with -e", exit_code=2)
    for m in models:
        if not Path(m).is_file():
            raise LabError(f"--model {m}: no such file", exit_code=2)
    if args.llama:
        binary = Path(args.llama)
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise LabError(f"--llama {binary}: not an executable llama-simple "
                           f"(llama.cpp's examples/simple)", exit_code=2)
    else:
        from lab import llama
        binary = llama.build()
    return (f"--llama {shlex.quote(str(Path(binary).resolve()))} --models "
            + shlex.quote(",".join(str(Path(m).resolve()) for m in models))
            + " --memcg-limit 0")


def script(exp, config, quick, data, perf, perf_out, llama=None):
    """One experiment in one configuration, bracketed like a boot's."""
    command = exp.command
    if exp.id == "llama-tiering":
        command = f"llama-tiering {llama}"
    command += " --reps 1" + (" --quick" if quick else "")
    if perf:
        command = f"perf stat -x, -o {perf_out} -e {','.join(perf)} -- {command}"
    text = "\n".join(bench_script.bracket(exp.id, config, command)) + "\n"
    return text.replace("/data/", f"{data}/") if data else text


def fold(text, exp, rnd, counts, results, failures):
    """One program's output into @results and @failures, each of its
    records with the program's perf @counts if any."""
    got = {}
    bench_script.parse_output(text, [exp], got, failures, {"kernel": BASE, "round": rnd})
    for key, by_config in got.items():
        for config, recs in by_config.items():
            for rec in recs:
                if counts:
                    rec["perf_stat"] = counts
            results.setdefault(key, {}).setdefault(config, []).extend(recs)


def run(experiments, reps, quick, llama=None):
    """Every experiment in every configuration, @reps rounds: (results,
    failures, meta) as a VM bench makes them.  @llama: llama_args()."""
    check_machine(experiments)
    env = program_env()
    needs_data = any(suite.GROUPS[e.group].needs_data_disk and
                     suite.GROUPS[e.group].data_disk == "models" for e in experiments)
    data = datadisk.host_files(quick) if needs_data else None
    perf, perf_note = perf_state()
    if perf_note:
        say(f"bench: {perf_note}")
    results, failures = {}, []
    started = time.monotonic()
    with Settings() as settings, terminate_as_interrupt(), \
            tempfile.TemporaryDirectory(prefix="perf-") as tmp:
        switches = find_switches(settings)
        for pattern in WATCHED:
            for path in sorted(root().glob(pattern)):
                with contextlib.suppress(OSError):
                    settings.watch(path)
        configs = configurations(switches)
        booted_off = [s for s, v in switches.items() if v == "0"]
        if booted_off:
            say(f"bench: {', '.join(booted_off)} booted at 0; configuration {BASE} "
                "sets every switch to 1, and the run puts them back at 0")
        if len(configs) == 1:
            say(f"bench: {switch_dir()} is not there (a kernel without the series): "
                f"one configuration, {BASE}")
        else:
            say(f"bench: {len(configs)} configurations, interleaved: "
                + ", ".join(name for name, _ in configs))
        total, step = reps * len(experiments) * len(configs), 0
        for rnd in range(reps):
            for exp in experiments:
                for name, values in rotated(configs, rnd):
                    step += 1
                    say(f"bench: [{step}/{total}] round {rnd + 1}/{reps}, {exp.id} on "
                        f"{name} [{time.monotonic() - started:.0f}s]")
                    for switch, value in values.items():
                        settings.set(switch_dir() / switch, value)
                    perf_out = Path(tmp) / "perf.csv"
                    perf_out.unlink(missing_ok=True)
                    text = run_script(script(exp, name, quick, data, perf, perf_out,
                                             llama), env)
                    sys.stderr.write("".join(ln + "\n" for ln in text.splitlines()
                                             if not ln.startswith(guest_output.PREFIX)))
                    counts = parse_perf(_read(perf_out) or "") if perf else None
                    fold(text, exp, rnd, counts, results, failures)
    box = machine()
    meta = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "mode": "host",
        "quick": quick,
        "reps": reps,
        "duration_s": round(time.monotonic() - started, 1),
        "kernels": {BASE: {"release": box["kernel_release"], "variant": BASE}},
        # The report compares every configuration with the baseline and each
        # `host/<switch>=0` with `host` (its "on/off" column): the kernel as
        # booted is both, since there is no unpatched kernel in a host run;
        # it is also the configuration every user of the machine runs.
        "baseline": BASE,
        "configurations": [name for name, _ in configs],
        "switches": switches,
        "machine": box,
        "perf_stat": {"events": perf, "note": perf_note,
                      "counts": "each whole program, set-up included"},
        "series_hash": None,
        "vm_shapes": None,
        "host": socket.gethostname(),
        "lab_commit": tree.lab_commit(),
    }
    return results, failures, meta
