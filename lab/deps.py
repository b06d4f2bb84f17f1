"""Install what the lab needs on a fresh Debian 12 machine.

Debian packages: the kernel source and its build dependencies, QEMU, the
guest userland (busybox-static), stress-ng, the libraries the kernel's mm
selftests link against, an arm64 cross compiler with its static C library
and QEMU's arm64 emulator (the arm64 kernels, `vanilla-arm64` and
`patched-arm64`), what kbuild's bindeb-pkg runs (`lab package`).  The
arm64 guest's busybox-static comes from Debian's arm64 archive
(multiarch): it cannot be installed beside the host's busybox-static, so
its package is downloaded and unpacked into the lab's cache
(arm64_busybox()).  Python packages: pytest (the test runner),
matplotlib (the report's plots), docutils (check-series reads the series'
.rst files) and ruff (the linter of pyproject.toml, which tests/test_lint.py
runs), pinned: a newer release may find what this one does not.
llama-tiering builds llama.cpp with cmake and writes its models with PyPI's
gguf package, which Debian does not have: pip installs it into the lab's
cache (lab/llama.py's gguf_dir()).  Only what is missing, or at another
version than its pin, is installed.
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
    # the arm64 kernels: static guest programs, the `virt` machine
    "libc6-dev-arm64-cross", "qemu-system-arm",
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


ARM64_BUSYBOX_PACKAGE = "busybox-static:arm64"


def arm64_busybox():
    """Where the arm64 guest's busybox is unpacked (setup() puts it there)."""
    return paths.cache_dir() / "busybox-arm64" / "bin" / "busybox"


def missing_arm64_busybox():
    return not arm64_busybox().is_file()


def _foreign_arm64(sudo):
    """dpkg knows arm64 as a foreign architecture (apt then lists its
    packages); True if it had to be added."""
    proc = subprocess.run(["dpkg", "--print-foreign-architectures"],
                          capture_output=True, text=True)
    if "arm64" in proc.stdout.split():
        return False
    _run(sudo + ["dpkg", "--add-architecture", "arm64"], "the arm64 architecture")
    return True


def install_arm64_busybox(sudo, updated):
    """apt-get download busybox-static:arm64, unpack its /bin/busybox into
    arm64_busybox().  `updated`: the package lists were just refreshed."""
    if _foreign_arm64(sudo) or not updated:
        _run(sudo + ["apt-get", "update", "-qq"], "the package lists")
    dest = arm64_busybox()
    with tempfile.TemporaryDirectory() as tmp:
        # apt-get download writes into its working directory, as the
        # unprivileged _apt user when it can: a world-writable one
        os.chmod(tmp, 0o777)
        proc = subprocess.run(["apt-get", "download", "-qq", ARM64_BUSYBOX_PACKAGE],
                              cwd=tmp, capture_output=True, text=True)
        debs = list(Path(tmp).glob("busybox-static_*_arm64.deb"))
        if proc.returncode != 0 or not debs:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise LabError(f"downloading {ARM64_BUSYBOX_PACKAGE} failed: {tail}")
        unpacked = Path(tmp) / "root"
        _run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], ARM64_BUSYBOX_PACKAGE)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(unpacked / "bin" / "busybox", dest.with_suffix(".tmp"))
        dest.with_suffix(".tmp").rename(dest)


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
    busybox = [ARM64_BUSYBOX_PACKAGE] if missing_arm64_busybox() else []
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    if (apt or busybox) and sudo and not shutil.which("sudo"):
        raise LabError(f"need root to install {' '.join(apt + busybox)}: run "
                       f"`make setup` as root")
    if apt:
        _run(sudo + ["apt-get", "update", "-qq"], "the package lists")
        _run(sudo + ["apt-get", "install", "-y", "-qq", *apt], " ".join(apt))
    if busybox:
        install_arm64_busybox(sudo, updated=bool(apt))
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
    done = apt + busybox + py + gguf
    say("lab: setup: all dependencies present" if not done
        else f"lab: setup: installed {' '.join(done)}")
