"""Configure and build the lab's kernels.

Twelve variants, from config fragments in config/:

  vanilla        build/vanilla  tinyconfig + lab.config
  patched        build/patched  tinyconfig + lab.config + series.config
  debug          build/patched  tinyconfig + lab.config + series.config +
                                debug.config + series-debug.config
  vanilla-debug  build/vanilla  tinyconfig + lab.config + debug.config: what
                                debug is compared with (the debug options make
                                timing-bound selftests fail on their own)
  broken         build/broken   tinyconfig + lab.config + series.config; the series
                          plus patches/testing/, a kernel broken on purpose so
                          the safety tests can be shown to fail (docs/stale-tlb.md)
  vanilla-distro build/vanilla  vanilla and patched with distro.config: jump
  patched-distro build/patched  labels, no DEBUG_TLBFLUSH, what the series costs
                                in a distribution's kernel (bench -k
                                vanilla-distro,patched-distro --icount)
  vanilla-arm64  build/arm64-vanilla  arm64, cross-compiled: tinyconfig +
  patched-arm64  build/arm64-patched  lab.config + arm64.config (+ series.config);
                                booted on QEMU's `virt` machine (lab/vm.py,
                                lab/arches.py)
  debug-arm64    build/arm64-patched  debug's fragments, arm64.config second
  vanilla-debug-arm64                 vanilla-debug's fragments, arm64.config
                 build/arm64-vanilla  second
  broken-arm64   build/arm64-broken   broken's fragments, arm64.config second

The arm64 kernels' trees are vanilla, patched and broken plus
patches/arm64-lab/ (lab/tree.py): the lab's own change that lets `virt`'s
UEFI boot give a CPU-less node, for vanilla as for the series.

series.config holds the options only the series defines; vanilla's Kconfig
would drop them and check_config() would rightly complain.

Each build directory is `<tree>/.o-<variant>`: one level below its source, so
kbuild uses `srctree=..` and the compiler sees the same relative paths in both
trees.  That lets ccache share every object the series does not touch.
"""

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lab import arches, paths, tree
from lab.errors import LabError
from lab.progress import Progress, say

VARIANTS = {
    "vanilla": ("vanilla", ["lab.config"]),
    "patched": ("patched", ["lab.config", "series.config"]),
    "debug": ("patched", ["lab.config", "series.config", "debug.config",
                          "series-debug.config"]),
    "vanilla-debug": ("vanilla", ["lab.config", "debug.config"]),
    "broken": ("broken", ["lab.config", "series.config"]),
    "vanilla-distro": ("vanilla", ["lab.config", "distro.config"]),
    "patched-distro": ("patched", ["lab.config", "series.config", "distro.config"]),
    # arm64.config right after lab.config, whose x86 options it takes back:
    # the series' fragments then add what only the series defines there
    "vanilla-arm64": ("vanilla", ["lab.config", "arm64.config"]),
    "patched-arm64": ("patched", ["lab.config", "arm64.config", "series.config"]),
    "debug-arm64": ("patched", ["lab.config", "arm64.config", "series.config",
                                "debug.config", "series-debug.config"]),
    "vanilla-debug-arm64": ("vanilla", ["lab.config", "arm64.config", "debug.config"]),
    "broken-arm64": ("broken", ["lab.config", "arm64.config", "series.config"]),
}

# Variants of another architecture than the host's x86-64 (how each is
# cross-built: lab/arches.py)
ARCH_OF = {v: "arm64" for v in VARIANTS if v.endswith("-arm64")}

CONFIG_LINE = re.compile(r"^(CONFIG_\w+)=(.*)$|^# (CONFIG_\w+) is not set$")
BUILD_STEP = re.compile(r"^\s+(CC|AS|LD|AR|GEN|HOSTCC|OBJCOPY|VDSO\S*)\s+(\S+)")


@dataclass
class Kernel:
    variant: str
    image: Path
    release: str
    objdir: Path
    arch: str = arches.HOST


# The fragments that belong to the series rather than to how a kernel is built.
SERIES_FRAGMENTS = ("series.config", "series-debug.config")


def built_like(variant):
    """How `variant` is built apart from the series: its other fragments."""
    return "+".join(f for f in VARIANTS[variant][1] if f not in SERIES_FRAGMENTS)


def unpatched_twin(variant):
    """The kernel without the series that is built like `variant`: what the
    series' kernels are compared with (patched-distro -> vanilla-distro)."""
    return next(v for v in VARIANTS
                if VARIANTS[v][0] == "vanilla" and built_like(v) == built_like(variant))


def check_variant(variant):
    if variant not in VARIANTS:
        raise LabError(f"unknown kernel variant {variant!r}: choose from "
                       f"{', '.join(VARIANTS)}", exit_code=2)


def arch(variant):
    """The architecture `variant` is built for: a key of arches.ARCHES."""
    return ARCH_OF.get(variant, arches.HOST)


def cross_tools(variant):
    """(make's variables, compiler) for `variant`; a missing cross compiler
    is said before anything is configured."""
    a = arches.ARCHES[arch(variant)]
    if not a.cross:
        return (), a.compiler
    if not shutil.which(a.compiler):
        raise LabError(f"the {variant} kernel needs {a.compiler}: run `make setup` "
                       f"(or `apt-get install {a.package}`)", exit_code=2)
    return a.make_args, a.compiler


def image_path(variant, out):
    """Where the bootable image of `variant` is in its build directory `out`."""
    return out / arches.ARCHES[arch(variant)].image


def source_tree(variant):
    check_variant(variant)
    source = VARIANTS[variant][0]
    if arch(variant) == "arm64":
        return tree.arm64_dir(source)
    return {"vanilla": tree.vanilla_dir, "patched": tree.patched_dir,
            "broken": tree.broken_dir}[source]()


def objdir(variant):
    return source_tree(variant) / f".o-{variant}"


def fragments(variant):
    return [paths.CONFIG / name for name in VARIANTS[variant][1]]


def wanted_options(frags):
    """CONFIG_X -> value ('n' for 'is not set') as the files set them:
    config/ fragments, or a build's .config."""
    wanted = {}
    for frag in frags:
        for line in frag.read_text().splitlines():
            m = CONFIG_LINE.match(line.strip())
            if m:
                wanted[m.group(1) or m.group(3)] = m.group(2) if m.group(1) else "n"
    return wanted


def _make(src, out, *targets, log=None, extra_env=None):
    cmd = ["make", "-C", str(src), f"O={out}", *targets]
    env = dict(os.environ, **(extra_env or {}))
    if log is None:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise LabError(f"`make {' '.join(targets)}` failed in {out}: "
                           f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
        return proc
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)


def configure(variant):
    if arch(variant) == arches.HOST:
        configure_dir(source_tree(variant), objdir(variant), fragments(variant))
        return
    make_args, _ = cross_tools(variant)
    configure_dir(source_tree(variant), objdir(variant), fragments(variant), make_args)


def fragments_digest(frags):
    return hashlib.sha256(b"".join(f.read_bytes() for f in frags)).hexdigest()


def configure_dir(src, out, frags, make_args=(), checked=None):
    """tinyconfig + fragments in `out`, re-done only when a fragment changed.

    `make_args` (ARCH=, CROSS_COMPILE=) go to every make; `checked`, the
    fragments whose options must survive olddefconfig, defaults to all of
    them (another architecture drops lab.config's x86 options, rightly).
    """
    digest = fragments_digest(frags) + " ".join(make_args)
    stamp = out / ".unflush-config"
    if (out / ".config").exists() and stamp.exists() and stamp.read_text() == digest:
        return
    out.mkdir(parents=True, exist_ok=True)
    _make(src, out, *make_args, "tinyconfig")
    merge = src / "scripts" / "kconfig" / "merge_config.sh"
    # -m: only merge, so the script runs no make and needs no ARCH
    proc = subprocess.run([str(merge), "-m", "-O", str(out), str(out / ".config"),
                           *map(str, frags)], cwd=src, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LabError(f"merging config fragments in {out} failed: "
                       f"{proc.stderr.strip() or proc.stdout.strip()}")
    _make(src, out, *make_args, "olddefconfig")
    check_config(out / ".config", frags if checked is None else checked)
    stamp.write_text(digest)


def check_config(config, frags):
    """Every option a fragment asks for must survive olddefconfig.

    Kconfig silently drops an option whose dependencies are unmet; the
    experiments would then measure a kernel without, say, madvise().
    """
    have = wanted_options([config])
    for name, value in wanted_options(frags).items():
        if have.get(name, "n") != value:
            raise LabError(f"{name}={value} from config/ did not survive olddefconfig "
                           f"(got {have.get(name, 'n')}): a dependency is missing; "
                           f"add it to the fragment")


def ensure_source(variant):
    """Make `variant`'s source tree if it is missing or stale; its path."""
    check_variant(variant)
    source = VARIANTS[variant][0]
    if arch(variant) == "arm64":
        return tree.ensure_arm64(source)
    return {"vanilla": tree.ensure_vanilla, "patched": tree.ensure_patched,
            "broken": tree.ensure_testing}[source]()


def _lock_path(variant):
    return paths.work_dir() / "locks" / f"build-{variant}.lock"


@contextlib.contextmanager
def build_lock(variant):
    """Held while `variant` is built: two makes in one build directory
    compile the same objects at once and break each other (fixdep finds
    the other's .d file gone), so a second build of it waits, and says so."""
    path = _lock_path(variant)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"build {variant}: waiting for another build of it to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build(variant, jobs=None):
    """Build the bzImage of `variant` (arm64: its Image), incrementally,
    showing progress; one build of a variant at a time."""
    with build_lock(variant):
        return _build(variant, jobs)


def _build(variant, jobs):
    if arch(variant) != arches.HOST:
        cross_tools(variant)
    ensure_source(variant)
    configure(variant)
    if arch(variant) == arches.HOST:
        kernel = compile_dir(source_tree(variant), objdir(variant), variant, jobs)
    else:
        make_args, compiler = cross_tools(variant)
        target = arches.ARCHES[arch(variant)].image
        kernel = compile_dir(source_tree(variant), objdir(variant), variant, jobs,
                             target=Path(target).name, make_args=make_args,
                             compiler=compiler)
        kernel = Kernel(variant, image_path(variant, objdir(variant)), kernel.release,
                        kernel.objdir, arch(variant))
    (objdir(variant) / SOURCE_STAMP).write_text(source_id(variant))
    return kernel


# Next to each image: what it was built from (see built()).
SOURCE_STAMP = ".unflush-source"


def source_id(variant):
    """What a build of `variant` is made of: its tree's commit (patches/
    applied) and its config fragments."""
    head = tree.git(source_tree(variant), "rev-parse", "HEAD").stdout.strip()
    return f"{head} {fragments_digest(fragments(variant))[:16]}\n"


def make_jobs(jobs=None):
    """make's -j: `jobs`, or one more than the CPUs, so that a job waiting
    on its files leaves no CPU idle."""
    return jobs or (os.cpu_count() or 2) + 1


def compile_dir(src, out, name, jobs=None, target="bzImage", make_args=(),
                compiler="gcc", localversion=None):
    """make `target` (bzImage) in `out`, showing progress; `name` is the
    build's name in messages and, unless `localversion` is given, in
    `uname -r`.  `make_args` and `compiler` are for building another
    architecture."""
    jobs = make_jobs(jobs)
    ccache_dir = paths.cache_dir() / "ccache"
    env = {
        "CCACHE_DIR": str(ccache_dir),
        "CCACHE_MAXSIZE": "8G",
        # git checkouts give every file a fresh mtime; content is what counts
        "CCACHE_SLOPPINESS": "include_file_mtime,include_file_ctime,time_macros",
        "KBUILD_BUILD_USER": "unflush",
        "KBUILD_BUILD_HOST": "lab",
    }
    cc = [f"CC=ccache {compiler}"] if shutil.which("ccache") else [f"CC={compiler}"]
    log_path = out / "build.log"
    prog = Progress(f"build {name}")
    steps, last = 0, ""
    with open(log_path, "w") as log:
        # LOCALVERSION names the variant in `uname -r`; set, it also keeps
        # kbuild from appending "+" for a git tree.
        proc = _make(src, out, *make_args, *cc,
                     f"LOCALVERSION={localversion or '-' + name}", f"-j{jobs}",
                     target, log=log, extra_env=env)
        with open(log_path) as follow:
            while True:
                line = follow.readline()
                if not line:
                    if proc.poll() is not None:
                        break
                    prog.update(f"{steps} steps, {last}")
                    time.sleep(0.5)
                    continue
                m = BUILD_STEP.match(line)
                if m:
                    steps, last = steps + 1, m.group(2)
                    prog.update(f"{steps} steps, {last}")
    if proc.returncode != 0:
        excerpt, first = compiler_errors(log_path.read_text())
        for line in excerpt:
            say("  " + line)
        raise LabError(f"kernel build of {name} failed: {first} (full log: {log_path})")
    release = (out / "include" / "config" / "kernel.release").read_text().strip()
    prog.done(f"{release}, {steps} steps")
    image = out / "arch" / "x86" / "boot" / "bzImage" if target == "bzImage" else out / target
    return Kernel(name, image, release, out)


def compiler_errors(log_text):
    """The compiler's own error lines with a little context, and the first one."""
    lines = log_text.splitlines()
    idx = [i for i, ln in enumerate(lines) if re.search(r"\berror\b|Error \d", ln)]
    if not idx:
        return lines[-20:], (lines[-1] if lines else "no output")
    excerpt = []
    for i in idx[:8]:
        excerpt.extend(lines[max(0, i - 2):i + 3])
    first = next((lines[i] for i in idx if ": error:" in lines[i]), lines[idx[0]])
    return excerpt[:60], first.strip()


def wait_for_build(variant):
    """Return once no other process is building `variant`: `make test`
    builds the debug kernel beside the tests, and those that boot it wait
    here for that build instead of failing on a half-built kernel."""
    path = _lock_path(variant)
    if not path.exists():
        return
    with open(path) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"the {variant} kernel is being built: waiting for that build to finish")
            fcntl.flock(lock, fcntl.LOCK_SH)


def built(variant):
    """The kernel of a previous build, without building (after waiting for
    one under way)."""
    wait_for_build(variant)
    out = objdir(variant)
    image = image_path(variant, out)
    release_file = out / "include" / "config" / "kernel.release"
    if not image.exists() or not release_file.exists():
        raise LabError(f"the {variant} kernel is not built: run `python3 -m lab build "
                       f"{variant}`")
    # a tree regenerated from new patches (or a changed config fragment)
    # leaves the old image in place: booting it would test the old series
    stamp = out / SOURCE_STAMP
    if not stamp.exists() or stamp.read_text() != source_id(variant):
        raise LabError(f"the {variant} kernel was built from older sources than "
                       f"patches/ and config/ now give: run `python3 -m lab build "
                       f"{variant}`")
    return Kernel(variant, image, release_file.read_text().strip(), out, arch(variant))
