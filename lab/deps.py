"""Install what the lab needs on a fresh Debian 12 machine.

Debian packages: the kernel source and its build dependencies, QEMU, the
guest userland (busybox-static), stress-ng, the libraries the kernel's mm
selftests link against, and an arm64 cross compiler.  Python packages:
pytest (the test runner), matplotlib (the report's plots) and docutils
(check-series reads the series' .rst files).  Only what is missing is
installed.
"""

import importlib.util
import os
import shutil
import subprocess
import sys

from lab.errors import LabError
from lab.progress import say

APT_PACKAGES = [
    "linux-source-6.12",
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
    # check-series --configs cross-builds the series for arm64; make test
    # checks that Kconfig keeps that configuration's options
    "gcc-aarch64-linux-gnu",
]
# module -> (PyPI name, Debian package for Debian's own python3)
PY_PACKAGES = {"pytest": ("pytest", "python3-pytest"),
               "matplotlib": ("matplotlib", "python3-matplotlib"),
               "docutils": ("docutils", "python3-docutils")}


def missing_apt():
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Status}\n",
                           *APT_PACKAGES], capture_output=True, text=True)
    ok = {line.split()[0] for line in proc.stdout.splitlines()
          if line.endswith("install ok installed")}
    return [p for p in APT_PACKAGES if p not in ok]


def missing_python():
    return [module for module in PY_PACKAGES if importlib.util.find_spec(module) is None]


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


def setup():
    if not shutil.which("dpkg-query"):
        raise LabError("this is not a Debian system: install the packages listed in "
                       "lab/deps.py by hand")
    apt = missing_apt()
    py = missing_python()
    if debian_python():
        apt += [PY_PACKAGES[m][1] for m in py]
        py = []
    if apt:
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        if sudo and not shutil.which("sudo"):
            raise LabError(f"need root to install {' '.join(apt)}: run "
                           f"`apt-get install {' '.join(apt)}` as root")
        _run(sudo + ["apt-get", "update", "-qq"], "the package lists")
        _run(sudo + ["apt-get", "install", "-y", "-qq", *apt], " ".join(apt))
    if py:
        pip = [PY_PACKAGES[m][0] for m in py]
        _run([sys.executable, "-m", "pip", "install", "-q", *pip], " ".join(pip))
    say("lab: setup: all dependencies present" if not (apt or py)
        else f"lab: setup: installed {' '.join(apt + py)}")
