"""Read-only files for the tiering experiment (seed 001's "model files").

Seed 001 streams through large read-only file mappings.  Clean page cache of
a disk filesystem is the closest match: reclaim can drop it without writing,
so every unmap is of a read-only, clean folio.  The lab makes an ext2 image
holding three such files, attached to the guest as a read-only virtio disk
and mounted at /data.  The contents are pseudo-random (not sparse, not
compressible by accident) and the same every time.
"""

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from lab import paths
from lab.errors import LabError
from lab.progress import Progress

FILES = 3
FILE_MIB = {False: 512, True: 96}   # full, quick


def _fill(path, mib):
    base = (hashlib.sha512(path.name.encode()).digest() * 64)[8:]  # 4 KiB - 8
    with open(path, "wb") as f:
        for i in range(mib):
            # each page starts with its own index: no two pages are alike
            f.write(b"".join((i * 256 + p).to_bytes(8, "little") + base
                             for p in range(256)))


def host_files(quick):
    """The same files as plain files on this machine (for --host runs)."""
    folder = paths.work_dir() / "data" / ("host-quick" if quick else "host")
    for i in range(FILES):
        f = folder / f"model{i}"
        if not f.exists() or f.stat().st_size != FILE_MIB[quick] << 20:
            folder.mkdir(parents=True, exist_ok=True)
            _fill(f, FILE_MIB[quick])
    return folder


def ensure(quick):
    """The image of the model files, made once per size."""
    mib = FILE_MIB[quick]

    def populate(folder):
        for i in range(FILES):
            _fill(Path(folder) / f"model{i}", mib)

    return image(f"models-{FILES}x{mib}M", populate, what=f"{FILES} x {mib} MiB")


def image(name, populate, what):
    """build/data/<name>.ext2, made once: populate(folder) writes the files."""
    image = paths.work_dir() / "data" / f"{name}.ext2"
    if image.exists():
        return image
    image.parent.mkdir(parents=True, exist_ok=True)
    prog = Progress("data disk")
    prog.update(f"writing {what}", force=True)
    with tempfile.TemporaryDirectory(dir=image.parent) as tmp:
        populate(tmp)
        size_mib = sum(f.stat().st_size for f in Path(tmp).iterdir()) // (1 << 20) + 64
        # a name of its own: two lab commands may make the image at once,
        # and the rename is atomic (a guest already using it keeps its copy)
        tmp_image = image.with_name(f"{image.name}.{os.getpid()}.tmp")
        proc = subprocess.run(["mke2fs", "-q", "-F", "-t", "ext2", "-d", tmp,
                               str(tmp_image), f"{size_mib}M"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise LabError(f"mke2fs failed making {image}: {proc.stderr.strip()}")
        tmp_image.rename(image)
    prog.done(str(image))
    return image
