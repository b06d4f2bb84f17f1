"""The guest's userland: an initramfs of busybox-static and our programs.

The base archive (busybox, guest/init.sh as /init, the static programs built
from guest/ into /unflush/bin) is made once per change of its inputs.  Each
run appends a second, tiny archive holding /run.sh, the command to run: the
kernel unpacks concatenated archives in order, so nothing big is rewritten per
run.

An arm64 guest (`arch="arm64"`) gets the same archive made of arm64 parts:
the busybox `make setup` unpacks from Debian's arm64 archive, the programs
cross-compiled into build/guest-arm64, the archive in build/initramfs-arm64.
"""

import gzip
import hashlib
import io
import shutil
import subprocess
from pathlib import Path

from lab import arches, deps, paths
from lab.errors import LabError

BUSYBOX = Path("/bin/busybox")


def _busybox(arch):
    return BUSYBOX if arch is None else deps.arm64_busybox()


def _suffix(arch):
    return arches.ARCHES[arch or arches.HOST].suffix


def _newc_entry(name, data=b"", mode=0o100644, ino=1):
    """One entry of a cpio 'newc' archive, the format the kernel unpacks."""
    name_bytes = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name_bytes), 0]
    header = b"070701" + b"".join(b"%08X" % f for f in fields)
    out = header + name_bytes
    out += b"\0" * (-len(out) % 4)
    out += data
    out += b"\0" * (-len(out) % 4)
    return out


def cpio(entries):
    """entries: list of (name, data or None for a directory, mode)."""
    buf = io.BytesIO()
    for ino, (name, data, mode) in enumerate(entries, 2):
        if data is None:
            buf.write(_newc_entry(name, b"", 0o040000 | mode, ino))
        else:
            buf.write(_newc_entry(name, data, 0o100000 | mode, ino))
    buf.write(_newc_entry("TRAILER!!!", ino=0, mode=0))
    return gzip.compress(buf.getvalue(), compresslevel=1, mtime=0)


def guest_programs(arch=None):
    """Build guest/ with its Makefile; return the built binaries.  `arch`:
    None for the host's, or a key of arches.ARCHES for a cross build."""
    out = paths.work_dir() / f"guest{_suffix(arch)}"
    if not (paths.GUEST_SRC / "Makefile").exists():
        return []
    make_args = list(arches.ARCHES[arch or arches.HOST].guest_make_args)
    proc = subprocess.run(["make", "-s", "-C", str(paths.GUEST_SRC), f"O={out}",
                           *make_args], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        err = next((ln for ln in lines if "error" in ln), lines[-1] if lines else "")
        raise LabError(f"building the guest programs failed: {err}")
    return sorted(p for p in out.iterdir() if p.is_file() and p.stat().st_mode & 0o111
                  and not p.name.endswith(".o"))


def base_image(arch=None):
    """The base archive, rebuilt when busybox, init or a program changed."""
    busybox = _busybox(arch)
    if not busybox.exists():
        what = "busybox-static" if arch is None else f"busybox-static:{arch}"
        raise LabError(f"{busybox} not found: run `make setup` (installs {what})")
    programs = guest_programs(arch)
    inputs = [busybox, paths.GUEST_SRC / "init.sh", *programs]
    digest = hashlib.sha256()
    for p in inputs:
        digest.update(p.name.encode() + p.read_bytes())
    image = (paths.work_dir() / f"initramfs{_suffix(arch)}"
             / f"base-{digest.hexdigest()[:12]}.cpio.gz")
    if image.exists():
        return image
    entries = [(d, None, 0o755) for d in ("bin", "sbin", "dev", "proc", "sys", "tmp",
                                          "run", "data", "unflush", "unflush/bin")]
    entries.append(("bin/busybox", busybox.read_bytes(), 0o755))
    entries.append(("init", (paths.GUEST_SRC / "init.sh").read_bytes(), 0o755))
    entries += [(f"unflush/bin/{p.name}", p.read_bytes(), 0o755) for p in programs]
    image.parent.mkdir(parents=True, exist_ok=True)
    for old in image.parent.glob("base-*.cpio.gz"):
        old.unlink()
    tmp = image.with_suffix(".tmp")
    tmp.write_bytes(cpio(entries))
    tmp.rename(image)
    return image


def run_image(command, dest, layers=(), arch=None):
    """base archive, then `layers` (gzipped cpio archives made with cpio(),
    e.g. the mm selftests), then an archive holding /run.sh; written to
    `dest`.  The kernel unpacks them in that order.  `arch` as for
    guest_programs()."""
    script = command.rstrip("\n") + "\n"
    with open(dest, "wb") as out:
        with open(base_image(arch), "rb") as base:
            shutil.copyfileobj(base, out)
        for layer in layers:
            with open(layer, "rb") as extra:
                shutil.copyfileobj(extra, out)
        out.write(cpio([("run.sh", script.encode(), 0o755)]))
    return dest
