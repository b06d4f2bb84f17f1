"""`lab check-series --configs`: the whole series built in the configurations
a build bot would try, beyond the one the lab's kernels use.

Each file of config/matrix/ is one configuration: tinyconfig, then
config/lab.config, series.config, series-debug.config and
matrix-base.config (the stack frame warning of a 64-bit configuration),
then that file, then olddefconfig.  Only the file's own options are checked
afterwards: they are what the configuration is about (and another
architecture drops lab.config's x86 options, rightly).  A line "# arch: NAME" in the file
builds it for another architecture with a cross compiler (lab/arches.py).

Each is `make vmlinux` of build/patched, the tree of the whole series, in
build/patched/.o-config-NAME: one level below the source like the lab's
own builds, so ccache serves every object they share.  A build must give no
warning, since the 0-day bot reports new warnings as it reports errors.  A
build that fails or warns is emptied (its log kept): make would otherwise
skip the objects that warned on the next run, and ccache replays their
warnings when they are compiled again.
"""

import re
import shutil
import time

from lab import arches, build, paths, tree
from lab.errors import LabError
from lab.progress import say

MATRIX = paths.CONFIG / "matrix"
BASE = ("lab.config", "series.config", "series-debug.config",
        "matrix-base.config")
ARCH_LINE = re.compile(r"^#\s*arch:\s*(\S+)\s*$", re.M)
# gcc, objtool and ld all say "warning:" after the file they are about
WARNING = re.compile(r"(^|: )warning: ", re.I)


def available():
    """Every configuration's name, sorted: config/matrix/NAME.config."""
    return sorted(p.stem for p in MATRIX.glob("*.config"))


def select(spec):
    """The names `spec` ("all", or NAME,NAME...) asks for, in matrix order."""
    names = available()
    if spec == "all":
        return names
    asked = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in asked if s not in names]
    if unknown or not asked:
        raise LabError(f"check-series --configs: unknown configuration "
                       f"{', '.join(unknown) or repr(spec)}: choose from "
                       f"{', '.join(names)} or all", exit_code=2)
    return [n for n in names if n in asked]


def select_buildable(spec):
    """select(spec), having checked that each can be built here: a bad name
    or a missing cross compiler is said before any build starts."""
    names = select(spec)
    for name in names:
        arch_of(MATRIX / f"{name}.config")
    return names


def arch_of(fragment):
    """(arch name, make's variables, compiler) of a matrix file; x86-64,
    the host's own, has no variables."""
    m = ARCH_LINE.search(fragment.read_text())
    if not m:
        return arches.HOST, (), arches.ARCHES[arches.HOST].compiler
    arch = arches.ARCHES.get(m.group(1))
    if not arch or not arch.cross:
        raise LabError(f"{fragment}: unknown arch {m.group(1)!r}: the lab can cross-build "
                       f"{', '.join(a.name for a in arches.ARCHES.values() if a.cross)}")
    if not shutil.which(arch.compiler):
        raise LabError(f"the {fragment.stem} configuration needs {arch.compiler}: "
                       f"`apt-get install {arch.package}`, or leave it out with "
                       f"--configs NAME,...", exit_code=2)
    return arch.name, arch.make_args, arch.compiler


def warnings_in(log_text):
    return [ln.strip() for ln in log_text.splitlines() if WARNING.search(ln)]


def empty_but_log(out):
    for child in out.iterdir():
        if child.name == "build.log":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def build_one(src, name, jobs=None):
    """Configure and build one matrix configuration; the number of seconds
    it took, or LabError naming what failed."""
    fragment = MATRIX / f"{name}.config"
    arch, make_args, compiler = arch_of(fragment)
    out = src / f".o-config-{name}"
    frags = [paths.CONFIG / f for f in BASE] + [fragment]
    start = time.monotonic()
    say(f"check-series: config {name} ({arch})")
    try:
        build.configure_dir(src, out, frags, make_args, checked=[fragment])
        build.compile_dir(src, out, f"config-{name}", jobs, target="vmlinux",
                          make_args=make_args, compiler=compiler)
    except LabError as err:
        if out.exists():
            empty_but_log(out)
        raise LabError(f"the series does not build in config/matrix/{name}.config "
                       f"({arch}): {err}") from None
    warned = warnings_in((out / "build.log").read_text())
    if warned:
        empty_but_log(out)
        raise LabError(f"the series builds in config/matrix/{name}.config ({arch}) "
                       f"with warnings ({len(warned)}), the first: {warned[0]} "
                       f"(full log: {out / 'build.log'})")
    return time.monotonic() - start


def build_all(names, jobs=None):
    """Build the configurations `names` (from select_buildable()); stop at
    the first failure."""
    src = tree.ensure_patched()
    for i, name in enumerate(names, 1):
        took = build_one(src, name, jobs)
        say(f"check-series: config {i}/{len(names)} {name}: ok, vmlinux with no "
            f"warning [{took:.0f}s]")
    return names
