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

import json
import lzma
import resource
import shutil
import subprocess
import time
from pathlib import Path

from lab import arches, build, host, paths, tree, vm
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
    "lab": "a minute or less from a built patched kernel (a copy, a re-link and "
           "the packaging: 33 s in docs/results/make-test-cold), plus the patched "
           "build when it is stale",
    "debian": "about 4.4 CPU hours, 2 or more hours on 2 cores: Debian's config "
              "builds the whole kernel and thousands of modules (estimated "
              "from a measured part of one: docs/results/package-debian; later "
              "builds reuse ccache)",
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


# What a package build leaves beside its packages: how long it took and
# how big they are, and with --boot what the packaged kernel showed.
RECORD = "package.json"

# What --boot runs in the packaged kernel: its release, the series'
# switches and the series' counters.
BOOT_SCRIPT = ("echo UNAME $(uname -r)\n"
               "echo SWITCHES $(ls /sys/kernel/mm/tlb_batching)\n"
               "grep '^nr_tlb_' /proc/vmstat\n")


def build_steps(where):
    """The compile and link steps of the last build in `where` (its log)."""
    log = (where / "build.log").read_text(errors="replace")
    return sum(1 for line in log.splitlines() if build.BUILD_STEP.match(line))


def package_sizes(out):
    """Each .deb in `out`: its size and what it installs (Installed-Size)."""
    sizes = {}
    for deb in sorted(out.glob("*.deb")):
        field = subprocess.run(["dpkg-deb", "-f", str(deb), "Installed-Size"],
                               capture_output=True, text=True, check=True).stdout
        sizes[deb.name] = {"bytes": deb.stat().st_size,
                           "installed_kib": int(field.strip() or 0)}
    return sizes


def write_record(out, **fields):
    """Add `fields` to `out`'s record (a build's fields stay when --boot
    adds its own later)."""
    path = out / RECORD
    data = json.loads(path.read_text()) if path.is_file() else {"format": 1}
    data.update(fields)
    path.write_text(json.dumps(data, indent=2) + "\n")


def image_package(out, arch="amd64"):
    """The one linux-image package for `arch` in `out`."""
    debs = [d for d in sorted(out.glob(f"linux-image-*_{arch}.deb"))
            if "-dbg_" not in d.name]
    if len(debs) != 1:
        raise LabError(f"{out} holds {len(debs)} linux-image packages for {arch}, "
                       f"not one: build them with `python3 -m lab package`", exit_code=2)
    return debs[0]


def boot(deb, workdir, arch="amd64"):
    """Boot the kernel of image package `deb`, unpacked into `workdir`, with
    the lab's initramfs and BOOT_SCRIPT; what it showed.  vm.run reads the
    kernel's build options from objdir/.config: the package's own, so a
    kernel with jump labels (Debian's) runs its vCPUs in one thread."""
    root, objdir = workdir / "root", workdir / "config"
    objdir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    (image,) = (root / "boot").glob("vmlinuz-*")
    release = image.name.removeprefix("vmlinuz-")
    shutil.copy(root / "boot" / f"config-{release}", objdir / ".config")
    kernel = build.Kernel(f"package {release}", image, release, objdir,
                          arches.by_debian(arch).name)
    icount = vm.built_option(kernel, "CONFIG_JUMP_LABEL") == "y"
    shape = vm.VMShape(cpus=2, mem="1G", timeout=600, icount=icount)
    start = time.monotonic()
    result = vm.run(kernel, BOOT_SCRIPT, shape, logdir=workdir / "vm", quiet=True)
    lines = result.output.splitlines()
    uname = next((ln.split(None, 1)[1] for ln in lines if ln.startswith("UNAME ")), None)
    switches = next((ln.split()[1:] for ln in lines if ln.startswith("SWITCHES")), [])
    return {"package": deb.name, "release": release, "uname": uname,
            "exit_code": result.exit_code, "icount": icount,
            "seconds": round(time.monotonic() - start, 1),
            "switches": switches,
            "counters": [ln.split()[0] for ln in lines if ln.startswith("nr_tlb_")],
            "config": root / "boot" / f"config-{release}",
            "output": result.output}




def check_boot(seen, arch="amd64"):
    """What a booted package lacks of the series: empty when nothing."""
    wrong = []
    if seen["exit_code"] != 0:
        wrong.append(f"the guest exited {seen['exit_code']}")
    if seen["uname"] != seen["release"]:
        wrong.append(f"it ran as {seen['uname']!r}, not {seen['release']}")
    # the switches a series kernel of @arch (Debian's name) has
    switches = [s for s in host.SWITCHES if s not in arches.by_debian(arch).missing_switches]
    missing = [s for s in switches if s not in seen["switches"]]
    if missing:
        wrong.append(f"no switch {', '.join(missing)} in /sys/kernel/mm/tlb_batching")
    if "nr_tlb_luf_folios" not in seen["counters"]:
        wrong.append("no nr_tlb_luf_folios in /proc/vmstat")
    return wrong


def boot_and_record(out, arch):
    deb = image_package(out, arch)
    say(f"package: booting {deb.name} in QEMU")
    workdir = paths.work_dir() / "deb" / "boot"
    if workdir.exists():
        shutil.rmtree(workdir)
    seen = boot(deb, workdir, arch)
    wrong = check_boot(seen, arch)
    write_record(out, boot={k: v for k, v in seen.items()
                            if k not in ("config", "output")} | {"ok": not wrong})
    if wrong:
        raise LabError(f"the packaged kernel booted wrong: {'; '.join(wrong)} "
                       f"(its output: {workdir / 'vm' / 'output.log'})")
    say(f"package: {seen['uname']} booted with the switches "
        f"{' '.join(seen['switches'])} and {len(seen['counters'])} nr_tlb_ counters")


def main(args):
    check_args(args.config, args.arch)
    if args.no_build:
        if not args.boot:
            raise LabError("--no-build builds nothing: add --boot to boot the "
                           "packages already built", exit_code=2)
        out = Path(args.out) if args.out else out_dir(args.config, args.arch)
        boot_and_record(out, args.arch)
        return 0
    check_tools(args.config)
    if args.config == "debian":
        check_debian_config()
    check_disk(args.config, paths.work_dir())
    say(f"package: {args.config} config for {args.arch}, LOCALVERSION "
        f"{LOCALVERSIONS[args.config]}; expect {ESTIMATES[args.config]}")
    start = time.monotonic()
    out, release = make_packages(args.config, args.jobs, args.out, args.arch)
    seconds = time.monotonic() - start
    # the compilers' CPU time: what the build costs whatever else ran beside it
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    where = objdir(args.config, args.arch)
    machine = host.machine()
    write_record(out, config=args.config, arch=args.arch, release=release,
                 date=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                 seconds=round(seconds), cpu_seconds=round(used.ru_utime + used.ru_stime),
                 jobs=build.make_jobs(args.jobs),
                 steps=build_steps(where),
                 objects=sum(1 for _ in where.rglob("*.o")),
                 machine={k: machine[k] for k in ("cpu_model", "cpus")},
                 series_hash=tree.series_hash(),
                 base_version=tree.installed_base_version(),
                 lab_commit=tree.lab_commit(),
                 packages=package_sizes(out))
    say(f"package: {release} in {seconds / 60:.1f} min")
    for deb in sorted(out.glob("*.deb")):
        print(deb)
    if args.boot:
        boot_and_record(out, args.arch)
    say(f"package: install with `sudo dpkg -i {out}/linux-image-{release}_*.deb`")
    return 0
