"""Debian packages of the series' kernel: `python3 -m lab package` (`make deb`).

kbuild's `bindeb-pkg` makes linux-image-<release> (vmlinuz, System.map and
config under /boot), linux-libc-dev and, for a kernel with modules,
linux-headers-<release>.  Two configurations:

  lab     the patched kernel's own .config (`lab build patched`): the
          package CI boots.  Its object tree is copied from the patched
          build's and only re-linked, because the package's LOCALVERSION
          differs from the lab's `-patched`.  The lab's config has no
          modules, so there is no linux-headers package.  With --arch
          arm64, the same from patched-arm64, cross-built
          (dpkg-buildpackage -aarm64 needs no arm64 library), less the
          lab's own change (patches/arm64-lab/).
  debian  Debian's amd64 config for 6.12 (package linux-config-6.12) plus
          config/series.config and config/package-debian.config: what a
          Debian 12 machine would install beside its stock kernel.  A cold
          build of a distribution's config: hours on 2 cores.

Each builds in its own object tree next to the patched build's
(build/patched/.o-package-<config>, -arm64 added for arm64), so the lab's
own kernels are never touched, and kbuild's paths stay those ccache has
seen.
"""

import lzma
import shutil
import subprocess
import time
from pathlib import Path

from lab import build, paths, tree
from lab.errors import LabError
from lab.progress import say

# config -> the LOCALVERSION that sets the package apart from Debian's own
# kernels (6.12.x+deb12-amd64) and from each other
LOCALVERSIONS = {"lab": "-unflush-lab", "debian": "-unflush"}
CONFIGS = tuple(LOCALVERSIONS)
DEBIAN_CONFIG = Path("/usr/src/linux-config-6.12/config.amd64_none_amd64.xz")

# Free space each needs in the work folder, GiB: the lab's copied object
# tree is 0.25 GiB; a distribution's object tree with its modules and
# packages is several GiB even without debug info.
DISK_GIB = {"lab": 2, "debian": 25}

# The estimate printed up front (README.md, "On your own machine").
ESTIMATES = {
    "lab": "about 2 minutes from a built patched kernel (measured: a copy, a "
           "re-link and the packaging), plus the patched build when it is stale",
    "debian": "hours on 2 cores: Debian's config builds the whole kernel and "
              "thousands of modules (later builds reuse ccache)",
}

# program -> Debian package, all in lab/deps.py's list
TOOLS = {"make": "make", "gcc": "gcc", "dpkg-buildpackage": "dpkg-dev",
         "dpkg-deb": "dpkg", "dh_testdir": "debhelper", "rsync": "rsync",
         "bc": "bc", "flex": "flex", "bison": "bison", "cpio": "cpio",
         "openssl": "openssl"}
# and for Debian's config, whose bzImage is zstd-compressed
DEBIAN_TOOLS = {"zstd": "zstd"}


# Debian architecture -> the lab kernel whose build the lab package re-links
LAB_VARIANTS = {"amd64": "patched", "arm64": "patched-arm64"}


def check_args(config, arch):
    if config not in CONFIGS:
        raise LabError(f"unknown package config {config!r}: choose from "
                       f"{', '.join(CONFIGS)}", exit_code=2)
    if arch not in LAB_VARIANTS:
        raise LabError(f"unknown package architecture {arch!r}: choose from "
                       f"{', '.join(LAB_VARIANTS)}", exit_code=2)
    if config == "debian" and arch != "amd64":
        raise LabError(f"the debian config is Debian's amd64 one: for {arch}, "
                       f"package the lab config (--config lab)", exit_code=2)


def check_tools(config, which=shutil.which):
    tools = {**TOOLS, **(DEBIAN_TOOLS if config == "debian" else {})}
    missing = [f"{prog} ({pkg})" for prog, pkg in tools.items() if not which(prog)]
    if missing:
        raise LabError(f"packaging needs {', '.join(missing)}: run `make setup`",
                       exit_code=2)


def check_disk(config, where, free_bytes=None):
    """Refuse before building when `where` has less free space than needed."""
    while not where.exists():
        where = where.parent
    free = shutil.disk_usage(where).free if free_bytes is None else free_bytes
    need = DISK_GIB[config]
    if free < need * 2**30:
        raise LabError(f"the {config} package needs {need} GiB free in {where}, "
                       f"which has {free / 2**30:.1f} GiB: free some space",
                       exit_code=2)


def check_debian_config():
    if not DEBIAN_CONFIG.is_file():
        raise LabError(f"no Debian config {DEBIAN_CONFIG}: run `make setup` "
                       f"(it installs linux-config-6.12)", exit_code=2)


def _suffix(arch):
    return "" if arch == "amd64" else f"-{arch}"


def objdir(config, arch="amd64"):
    return tree.patched_dir() / f".o-package-{config}{_suffix(arch)}"


def out_dir(config, arch="amd64"):
    return paths.work_dir() / "deb" / f"{config}{_suffix(arch)}"


def seed_from_patched(dest, variant="patched"):
    """The @variant build's object tree, copied: make then re-links what the
    other LOCALVERSION changes instead of compiling the kernel again.  A
    copy, not hard links: the compiler rewrites an object in place."""
    src = build.built(variant).objdir
    say(f"package: copying the patched build's objects {src} -> {dest}")
    proc = subprocess.run(["rsync", "-a", "--delete", f"{src}/", f"{dest}/"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise LabError(f"copying {src} failed: {proc.stderr.strip()[-200:]}")


def forget_lab_changes(dest):
    """The objects of the files patches/arm64-lab/ changes, removed from a
    copy of an arm64 build: make compiles them again from the series' own
    tree, so that a package carries none of the lab's change (the copied
    objects are newer than those sources, and would be kept)."""
    for patch in tree.arm64_lab_files():
        for line in patch.read_text().splitlines():
            if line.startswith("+++ b/") and line.endswith(".c"):
                (dest / line[len("+++ b/"):-2]).with_suffix(".o").unlink(missing_ok=True)


def configure_debian(dest):
    """Debian's amd64 config with the series' and the package's fragments."""
    check_debian_config()
    base = dest / "debian-amd64.config"
    dest.mkdir(parents=True, exist_ok=True)
    text = lzma.decompress(DEBIAN_CONFIG.read_bytes())
    if not base.exists() or base.read_bytes() != text:
        base.write_bytes(text)
    frags = [base, paths.CONFIG / "series.config", paths.CONFIG / "package-debian.config"]
    # merge_config.sh starts from tinyconfig in configure_dir(): Debian's
    # config is merged first, so it is the base the others change
    build.configure_dir(tree.patched_dir(), dest, frags,
                        checked=frags[1:])


def make_packages(config, jobs=None, out=None, arch="amd64"):
    """Build the packages of `config` for `arch`; the folder they are in."""
    where = objdir(config, arch)
    variant = LAB_VARIANTS[arch]
    if config == "lab":
        build.build(variant, jobs=jobs)
        seed_from_patched(where, variant)
        if arch != "amd64":
            forget_lab_changes(where)
    else:
        tree.ensure_patched()
        configure_debian(where)
    make_args, compiler = build.cross_tools(variant)
    if make_args:
        # dpkg checks the build dependencies for the host architecture
        # (libssl-dev:arm64), but kbuild builds its tools for this machine,
        # whose own are installed
        make_args = (*make_args, "DPKG_FLAGS=-d")
    src = tree.patched_dir()
    kernel = build.compile_dir(src, where, f"package {config}{_suffix(arch)}", jobs,
                               target="bindeb-pkg", localversion=LOCALVERSIONS[config],
                               make_args=make_args, compiler=compiler)
    out = Path(out) if out else out_dir(config, arch)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    made = made_files(where)
    if not any(name.startswith(f"linux-image-{kernel.release}_") for name in made):
        raise LabError(f"bindeb-pkg made no linux-image-{kernel.release} package "
                       f"(log: {where / 'build.log'})")
    # bindeb-pkg leaves what it made in the object tree's parent, the kernel
    # tree: the packages go to `out`, the upload's records away
    for name in made:
        if name.endswith(".deb"):
            shutil.move(str(src / name), out / name)
        else:
            (src / name).unlink(missing_ok=True)
    return out, kernel.release


def made_files(where):
    """The files bindeb-pkg made in `where`'s parent, as debian/files lists
    them (and the .changes beside them), so that another package build's
    files there are left alone."""
    listed = [line.split()[0] for line in
              (where / "debian" / "files").read_text().splitlines() if line.strip()]
    return listed + [n.removesuffix(".buildinfo") + ".changes"
                     for n in listed if n.endswith(".buildinfo")]


def main(args):
    check_args(args.config, args.arch)
    check_tools(args.config)
    if args.config == "debian":
        check_debian_config()
    check_disk(args.config, paths.work_dir())
    say(f"package: {args.config} config for {args.arch}, LOCALVERSION "
        f"{LOCALVERSIONS[args.config]}; expect {ESTIMATES[args.config]}")
    start = time.monotonic()
    out, release = make_packages(args.config, args.jobs, args.out, args.arch)
    minutes = (time.monotonic() - start) / 60
    say(f"package: {release} in {minutes:.1f} min")
    for deb in sorted(out.glob("*.deb")):
        print(deb)
    say(f"package: install with `sudo dpkg -i {out}/linux-image-{release}_*.deb`")
    return 0
