"""Where things live.  Every generated file is below build/ or results/."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATCHES = Path(os.environ.get("UNFLUSH_PATCHES", ROOT / "patches"))
CONFIG = ROOT / "config"
GUEST_SRC = ROOT / "guest"


def work_dir() -> Path:
    """Generated kernel trees, builds and images (git-ignored)."""
    return Path(os.environ.get("UNFLUSH_WORK", ROOT / "build"))


def results_dir() -> Path:
    return Path(os.environ.get("UNFLUSH_RESULTS", ROOT / "results"))


def cache_dir() -> Path:
    """Survives fresh clones on the same machine: ccache lives here."""
    default = Path.home() / ".cache" / "unflush"
    return Path(os.environ.get("UNFLUSH_CACHE", default))


def kernel_tarball() -> Path:
    return Path(os.environ.get("UNFLUSH_KERNEL_TARBALL",
                               "/usr/src/linux-source-6.12.tar.xz"))
