"""What the safety suite runs in the guest, made on the host.

The kernel's mm selftests are built from build/patched (the tree the series
applies to, so a test the series adds is run on every kernel), out of the
source tree:

  build/selftests/khdr   `make headers` of build/patched (the uapi headers)
  build/selftests/mm     the test programs (OUTPUT=), plus the runner's scripts

They are ordinary dynamically linked Debian programs, and so are bash (the
runner, run_vmtests.sh, is a bash script), Debian's stress-ng, and ps, pgrep
and killall (procps, psmisc), which the runner's scripts need.  The guest
is a busybox initramfs with no C library, so `layer()` packs the programs,
their shared libraries (the closure `ldd` reports) and the dynamic loader into
one more initramfs archive, at the paths the loader searches by default.  It
is cached by content, like the base image.
"""

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from lab import arches, deps, initramfs, paths, tree
from lab.errors import LabError
from lab.progress import Progress

SELFTESTS = Path("tools/testing/selftests/mm")
STRESS_NG = Path("/usr/bin/stress-ng")
BASH = Path("/bin/bash")
DLOPENED = Path("/lib/x86_64-linux-gnu/libgcc_s.so.1")
# charge_reserved_hugetlb.sh runs `ps PID`, `pgrep -f` and `killall --wait`,
# which busybox's applets do not understand (the script then waits forever):
# procps's and psmisc's, ahead of busybox in the guest's PATH
TOOLS = [Path("/usr/bin/ps"), Path("/usr/bin/pgrep"), Path("/usr/bin/killall"),
         # run_vmtests.sh makes an XFS for split_huge_page_test's page-cache THPs
         Path("/usr/sbin/mkfs.xfs")]
GUEST_MM = "safety/mm"          # where the selftests live in the guest
GUEST_BIN = "safety/bin"        # stress-ng
# Debian 6.12's khugepaged.c uses KSFT_SKIP without including the header
# that defines it (the series' last patch fixes that; vanilla's does not
# have it).  Defining it the same way (4) on the command line lets vanilla's
# build without touching the source; the other programs, and the series'
# khugepaged.c, see an identical, hence harmless, redefinition.
EXTRA_CFLAGS = "-DKSFT_SKIP=4"
LDD_LINE = re.compile(r"^\s*(?:(\S+) => )?(/\S+) \(0x[0-9a-f]+\)$")


def out_dir():
    return paths.work_dir() / "selftests"


def _make(args, log):
    proc = subprocess.run(["make", *args], stdout=log, stderr=subprocess.STDOUT,
                          text=True)
    return proc.returncode


def _patched_selftests():
    src = tree.patched_dir()
    if not (src / SELFTESTS / "run_vmtests.sh").exists():
        raise LabError(f"{src / SELFTESTS} not found: run `python3 -m lab tree`")
    return src


def _make_selftests(src, base, make_args, cflags, what, name=None):
    """`make headers` of @src into @base/khdr, then its mm selftests into
    @base/mm: all of them with `make -k` (a program that does not compile
    is reported, name -> first error line, and the others are still built
    and run; returns (directory, failures)), or only @name (returns its
    path).  The log is @base/build.log."""
    khdr, mm = base / "khdr", base / "mm"
    mm.mkdir(parents=True, exist_ok=True)
    log_path = base / "build.log"
    prog = Progress(what)
    with open(log_path, "w") as log:
        prog.update("make headers", force=True)
        if _make(["-C", str(src), f"O={khdr}", *make_args, "headers"], log):
            raise LabError(f"`make headers` of {src} failed (log: {log_path})")
        prog.update(f"make {name or '-k'} (selftests/mm)", force=True)
        rc = _make(["-C", str(src / SELFTESTS), *([str(mm / name)] if name else ["-k"]),
                    f"-j{os.cpu_count() or 2}", *make_args, f"OUTPUT={mm}",
                    f"KHDR_INCLUDES=-isystem {khdr}/usr/include",
                    f"EXTRA_CFLAGS={cflags}"], log)
    if name:
        if rc:
            raise LabError(f"the {name} selftest did not build (log: {log_path})")
        prog.done(str(mm / name))
        return mm / name
    failures = build_failures(log_path.read_text(errors="replace"), mm)
    # the runner and the scripts it calls, next to the programs as it expects
    for script in (src / SELFTESTS).glob("*.sh"):
        shutil.copy2(script, mm / script.name)
    prog.done(f"{len(programs(mm))} programs in {mm}"
              + (f", {len(failures)} did not build: {', '.join(failures)}"
                 if failures else ""))
    return mm, failures


def build_selftests():
    """Build the mm selftests on the host; returns (directory, build failures)."""
    return _make_selftests(_patched_selftests(), out_dir(), [], EXTRA_CFLAGS,
                           "safety: mm selftests")


def build_failures(log_text, mm):
    """name -> first compiler error, for each program make could not build."""
    failures = {}
    for m in re.finditer(r"^make: \*\*\* \[.*?: (\S+)\] Error \d+$", log_text, re.M):
        name = Path(m.group(1)).name
        if (mm / name).exists():
            continue
        err = re.search(rf"^{re.escape(name)}\.c:\d+:\d+: error: (.*)$", log_text, re.M)
        failures[name] = err.group(1) if err else "see build/selftests/build.log"
    return failures


def programs(mm):
    return sorted(p for p in mm.iterdir() if p.is_file() and p.stat().st_mode & 0o111
                  and p.suffix != ".sh")


def shared_libraries(binaries):
    """The shared libraries `binaries` load, with the dynamic loader: a list of
    (path in the guest, file on the host).  The guest path is the one ldd
    shows (what the loader asks for); the file is the symlink's target."""
    found = {}
    for binary in binaries:
        proc = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
        if proc.returncode != 0:
            if "not a dynamic executable" in proc.stdout + proc.stderr:
                continue
            raise LabError(f"ldd {binary} failed: {proc.stderr.strip()}")
        for line in proc.stdout.splitlines():
            if "not found" in line:
                raise LabError(f"{binary} needs a library this host lacks: "
                               f"{line.strip()}")
            m = LDD_LINE.match(line)
            if m:
                found[m.group(2)] = Path(m.group(2)).resolve()
    return sorted(found.items())


def layer(mm):
    """The initramfs archive with the selftests, bash, stress-ng and their
    libraries; rebuilt only when one of them changed."""
    if not STRESS_NG.exists():
        raise LabError(f"{STRESS_NG} not found: run `make setup` (installs stress-ng)")
    files = [(f"{GUEST_MM}/{p.name}", p) for p in sorted(mm.iterdir()) if p.is_file()]
    files.append((f"{GUEST_BIN}/stress-ng", STRESS_NG))
    files.append(("bin/bash", BASH))
    tools = [t for t in TOOLS if t.exists()]
    files += [(f"{GUEST_BIN}/{t.name}", t) for t in tools]
    binaries = [STRESS_NG, BASH, *tools, *programs(mm)]
    files += [(guest.lstrip("/"), host) for guest, host in shared_libraries(binaries)]
    # glibc loads libgcc_s with dlopen() to unwind threads in pthread_cancel()
    # (uffd-stress): ldd cannot see it
    files.append((DLOPENED.relative_to("/").as_posix(), DLOPENED.resolve()))
    return _cached_archive("safety", files)


def _cached_archive(prefix, files, dirs=()):
    """An initramfs archive of @files ((path in the guest, file on the
    host)), with the directories they are in and @dirs, named
    @prefix-<digest of the files>.cpio.gz: made only when no archive of
    that content exists, and the older ones of @prefix removed."""
    data = [(guest, host.read_bytes()) for guest, host in files]
    digest = hashlib.sha256()
    for guest, content in data:
        digest.update(guest.encode() + b"\0" + content)
    image = paths.work_dir() / "initramfs" / f"{prefix}-{digest.hexdigest()[:12]}.cpio.gz"
    if image.exists():
        return image
    dirs = sorted(set(dirs) | {str(Path(g).parents[i]) for g, _ in files
                               for i in range(len(Path(g).parents) - 1)})
    entries = [(d, None, 0o755) for d in dirs]
    entries += [(guest, content, 0o755) for guest, content in data]
    image.parent.mkdir(parents=True, exist_ok=True)
    for old in image.parent.glob(f"{prefix}-*.cpio.gz"):
        old.unlink()
    tmp = image.with_suffix(".tmp")
    tmp.write_bytes(initramfs.cpio(entries))
    tmp.rename(image)
    return image


# --- static selftests, for a guest without a C library ---------------------------

STATIC_DIR = "static"           # under out_dir(): <arch>/khdr, <arch>/mm


def build_static(arch, name=None):
    """Build the mm selftests of build/patched as static programs for @arch
    (a key of arches.ARCHES), all of them (returns the
    directory and the build failures, as build_selftests()) or only @name
    (returns its path).  A guest with no C library runs them as they are,
    where build_selftests()'s need layer()'s Debian userland: arm64's has
    none.  The selftests' own Makefile builds them (vm_util.c,
    thp_settings.c, the uapi headers of @arch), against the arm64 static
    libraries `make setup` unpacks (deps.ARM64_PACKAGES)."""
    src = _patched_selftests()
    cross = arches.ARCHES[arch].cross
    if cross and deps.missing_arm64_packages():
        raise LabError(f"{', '.join(deps.missing_arm64_packages())} not unpacked: "
                       f"run `make setup`")
    flags = f"{EXTRA_CFLAGS} -static"
    if cross:
        flags += f" -I{deps.arm64_root()}/usr/include -L{deps.arm64_libdir()}"
    return _make_selftests(src, out_dir() / STATIC_DIR / arch,
                           list(arches.ARCHES[arch].make_args), flags,
                           f"safety: mm selftests, static, {arch}", name)


def static_layer(names, arch):
    """An initramfs archive with the static selftests @names at
    /selftests/<name>, for vm.run(layers=)."""
    return _cached_archive(f"selftests-{arch}",
                           [(f"selftests/{n}", build_static(arch, n)) for n in names])


def arm64_layer(mm):
    """What layer() is to the x86 guest, for arm64's: the static selftests
    of build_static("arm64") and their scripts at /safety/mm, and a static
    bash for run_vmtests.sh.  No stress-ng: arm64 runs the selftests part
    of the safety suite only."""
    files = [(f"{GUEST_MM}/{p.name}", p) for p in sorted(mm.iterdir()) if p.is_file()]
    files.append(("bin/bash", deps.arm64_bash()))
    # the selftests' script writes its shims into GUEST_BIN
    return _cached_archive("arm64-safety", files, dirs=[GUEST_BIN])
