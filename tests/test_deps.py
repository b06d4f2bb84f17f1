"""lab setup on a fresh machine: what it unpacks lands where the lab looks."""

import subprocess
from pathlib import Path

from lab import deps


def tiny_deb(where: Path, name: str) -> Path:
    """A real .deb of one file, /bin/<name>, for dpkg-deb -x to unpack."""
    root = where / name
    (root / "DEBIAN").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin" / name).write_text("#!/bin/sh\n")
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1\nArchitecture: arm64\n"
        "Maintainer: nobody <nobody@example.org>\nDescription: a test\n")
    deb = where / f"{name}_1_arm64.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)],
                   check=True, capture_output=True)
    return deb


def test_arm64_packages_unpack_into_a_cache_that_does_not_exist_yet(
        tmp_path, monkeypatch):
    """On a new machine nothing has made ~/.cache/unflush before setup
    unpacks the arm64 guest's packages into it; dpkg-deb -x makes only
    its last folder, so setup must make the ones above."""
    cache = tmp_path / "home" / ".cache" / "unflush"
    monkeypatch.setenv("UNFLUSH_CACHE", str(cache))
    debs = [tiny_deb(tmp_path, p.split(":")[0]) for p in deps.ARM64_PACKAGES]
    real_run = subprocess.run

    def apt_get_download(cmd, cwd=None, **kw):
        if cmd[:2] == ["apt-get", "download"]:
            for deb in debs:
                (Path(cwd) / deb.name).write_bytes(deb.read_bytes())
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return real_run(cmd, cwd=cwd, **kw)

    monkeypatch.setattr(deps, "_foreign_arm64", lambda sudo: False)
    monkeypatch.setattr(deps.subprocess, "run", apt_get_download)
    deps.install_arm64_packages([], updated=True)

    assert deps.arm64_bash().parent.is_dir()
    assert (deps.arm64_root() / "bin" / "busybox-static").is_file()
    assert deps.missing_arm64_packages() == []
