"""Install what the lab needs on a fresh Debian 12 machine.

Debian packages: the kernel source and its build dependencies, QEMU, the
guest userland (busybox-static), stress-ng, the libraries the kernel's mm
selftests link against, an arm64 cross compiler with its static C library
and QEMU's arm64 emulator (the arm64 kernels, `vanilla-arm64` and
`patched-arm64`), what kbuild's bindeb-pkg runs (`lab package`). The arm64 guest's
busybox and bash, and the static libraries its mm selftests link, come from
Debian's arm64 archive (multiarch): they cannot all be installed beside the
host's own, so their packages are downloaded and unpacked into the lab's
cache (ARM64_PACKAGES, arm64_root()). Python packages: pytest (the test
runner), matplotlib (the report's plots), docutils (check-series reads the
series' .rst files) and ruff (the linter of pyproject.toml, which
tests/test_lint.py runs), pinned: a newer release may find what this one
does not. llama-tiering builds llama.cpp with cmake and writes its models
with PyPI's gguf package, which Debian does not have: pip installs it into
the lab's cache (lab/llama.py's gguf_dir()). Only what is missing, or at
another version than its pin, is installed.
"""

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lab import llama, paths
from lab.errors import LabError
from lab.progress import say

APT_PACKAGES = [
    "linux-source-6.12",
    # llama-tiering: llama.cpp's build, pip for its source and gguf
    "cmake", "python3-pip",
    # kernel build
    "build-essential", "bc", "flex", "bison", "libelf-dev", "libssl-dev",
    "dwarves", "ccache", "cpio", "xz-utils", "git", "rsync",
    # guest
    "qemu-system-x86", "busybox-static", "e2fsprogs",
    # safety suite: stress with verification, the kernel's mm selftests
    "stress-ng", "libnuma-dev", "libcap-dev", "liburing-dev",
    # real ps/pgrep/killall for the selftests' shell scripts (busybox's hang them)
    "procps", "psmisc",
    # mkfs.xfs: split_huge_page_test's page-cache THPs need an XFS
    "xfsprogs",
    # Debian's own configs, which config/distro.config is checked against
    "linux-config-6.12",
    # check-series --configs cross-builds the series for arm64, and so does
    # `lab build vanilla-arm64 patched-arm64`; make test checks that Kconfig
    # keeps those configurations' options
    "gcc-aarch64-linux-gnu",
    # the arm64 kernels: static guest programs, the `virt` machine; and
    # llama.cpp for the arm64 guest (C++)
    "libc6-dev-arm64-cross", "qemu-system-arm", "g++-aarch64-linux-gnu",
    # its UEFI firmware: the boot that brings ACPI (SRAT, HMAT) for --node1
    "qemu-efi-aarch64",
    # `lab package` (kbuild's bindeb-pkg): dpkg-buildpackage and the dh_*
    # tools its debian/rules runs; depmod, module signing and the zstd
    # bzImage of Debian's config
    "dpkg-dev", "debhelper", "kmod", "openssl", "zstd",
]
RUFF_VERSION = "0.17.5"
# module -> (PyPI requirement, Debian package for Debian's own python3, or
# None where Debian 12 has none: pip installs it there too)
PY_PACKAGES = {"pytest": ("pytest", "python3-pytest"),
               "matplotlib": ("matplotlib", "python3-matplotlib"),
               "docutils": ("docutils", "python3-docutils"),
               "ruff": (f"ruff=={RUFF_VERSION}", None)}


def missing_apt():
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Status}\n",
                           *APT_PACKAGES], capture_output=True, text=True)
    ok = {line.split()[0] for line in proc.stdout.splitlines()
          if line.endswith("install ok installed")}
    return [p for p in APT_PACKAGES if p not in ok]


def missing_python():
    return [module for module, (requirement, _) in PY_PACKAGES.items()
            if not _installed(module, requirement)]


def _installed(module, requirement):
    """@module imports, at the version @requirement pins if it pins one."""
    if importlib.util.find_spec(module) is None:
        return False
    name, _, version = requirement.partition("==")
    return not version or importlib.metadata.version(name) == version


def debian_python():
    """Debian's /usr/bin/python3 refuses pip installs (PEP 668): use apt."""
    return sys.prefix == "/usr"


def _run(cmd, what):
    say(f"lab: setup: {' '.join(cmd)}")
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise LabError(f"installing {what} failed: {tail[0]}")


# arm64 packages unpacked into arm64_root(), never installed (they could not
# sit beside the host's own): the guest's busybox and bash, both static,
# and the static libraries the mm selftests link (io_uring, capabilities,
# NUMA) when they are built static for the arm64 guest, which has no C
# library
ARM64_PACKAGES = ["busybox-static:arm64", "bash-static:arm64", "liburing-dev:arm64",
                  "libcap-dev:arm64", "libnuma-dev:arm64"]


def arm64_root():
    return paths.cache_dir() / "arm64-root"


def arm64_busybox():
    """The arm64 guest's busybox (setup() unpacks it)."""
    return arm64_root() / "bin" / "busybox"


def arm64_bash():
    return arm64_root() / "bin" / "bash-static"


def arm64_libdir():
    return arm64_root() / "usr" / "lib" / "aarch64-linux-gnu"


def missing_arm64_packages():
    stamp = arm64_root() / ".packages"
    have = stamp.read_text().split() if stamp.is_file() else []
    return [p for p in ARM64_PACKAGES if p not in have]


def _foreign_arm64(sudo):
    """dpkg knows arm64 as a foreign architecture (apt then lists its
    packages); True if it had to be added."""
    proc = subprocess.run(["dpkg", "--print-foreign-architectures"],
                          capture_output=True, text=True)
    if "arm64" in proc.stdout.split():
        return False
    _run(sudo + ["dpkg", "--add-architecture", "arm64"], "the arm64 architecture")
    return True


def install_arm64_packages(sudo, updated):
    """apt-get download ARM64_PACKAGES, unpack them all into arm64_root()
    (made anew beside it, then moved in place).  `updated`: the package
    lists were just refreshed."""
    if _foreign_arm64(sudo) or not updated:
        _run(sudo + ["apt-get", "update", "-qq"], "the package lists")
    root = arm64_root()
    with tempfile.TemporaryDirectory() as tmp:
        # apt-get download writes into its working directory, as the
        # unprivileged _apt user when it can: a world-writable one
        os.chmod(tmp, 0o777)
        proc = subprocess.run(["apt-get", "download", "-qq", *ARM64_PACKAGES],
                              cwd=tmp, capture_output=True, text=True)
        debs = sorted(Path(tmp).glob("*_arm64.deb"))
        if proc.returncode != 0 or len(debs) != len(ARM64_PACKAGES):
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise LabError(f"downloading {' '.join(ARM64_PACKAGES)} failed: {tail}")
        new = root.with_name(root.name + ".tmp")
        shutil.rmtree(new, ignore_errors=True)
        # dpkg-deb -x makes its target but not the folders above it, and
        # on a fresh machine nothing has made the cache yet
        new.parent.mkdir(parents=True, exist_ok=True)
        for deb in debs:
            _run(["dpkg-deb", "-x", str(deb), str(new)], deb.name)
        (new / ".packages").write_text("\n".join(ARM64_PACKAGES) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    new.rename(root)


def setup():
    if not shutil.which("dpkg-query"):
        raise LabError("this is not a Debian system: install the packages listed in "
                       "lab/deps.py by hand")
    apt = missing_apt()
    py = missing_python()
    pip_args = []
    if debian_python():
        apt += [PY_PACKAGES[m][1] for m in py if PY_PACKAGES[m][1]]
        py = [m for m in py if not PY_PACKAGES[m][1]]
        if py:
            # Debian 12 packages no ruff: pip puts it in /usr/local, beside
            # Debian's own packages, not over them (a single binary, no
            # dependencies), which PEP 668 makes pip ask to be told
            apt += [] if importlib.util.find_spec("pip") else ["python3-pip"]
            pip_args = ["--break-system-packages"]
    arm64 = missing_arm64_packages()
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    if (apt or arm64) and sudo and not shutil.which("sudo"):
        raise LabError(f"need root to install {' '.join(apt + arm64)}: run "
                       f"`make setup` as root")
    if apt:
        _run(sudo + ["apt-get", "update", "-qq"], "the package lists")
        _run(sudo + ["apt-get", "install", "-y", "-qq", *apt], " ".join(apt))
    if arm64:
        install_arm64_packages(sudo, updated=bool(apt))
    if py:
        pip = [PY_PACKAGES[m][0] for m in py]
        _run([sys.executable, "-m", "pip", "install", "-q", *pip_args, *pip], " ".join(pip))
    gguf = []
    if not llama.gguf_dir().is_dir():
        gguf = [f"gguf=={llama.GGUF_VERSION}"]
        tmp = llama.gguf_dir().with_name(llama.gguf_dir().name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        # --target: Debian's python3 refuses installs into itself (PEP 668)
        _run([sys.executable, "-m", "pip", "install", "-q", "--target", str(tmp), *gguf],
             gguf[0])
        tmp.rename(llama.gguf_dir())
    done = apt + arm64 + py + gguf
    say("lab: setup: all dependencies present" if not done
        else f"lab: setup: installed {' '.join(done)}")
