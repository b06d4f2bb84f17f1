"""`python3 -m lab package` refuses what it cannot build, in one line, before
it builds anything: an unknown config or architecture, missing
tools, too little disk, no Debian config."""

import json
import subprocess
import sys

import pytest

from lab import host, package, paths
from lab.errors import LabError


def lab(*args):
    return subprocess.run([sys.executable, "-m", "lab", *args], cwd=paths.ROOT,
                          capture_output=True, text=True)


def one_line_error(proc, *words):
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("lab:")]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_unknown_config_is_refused():
    one_line_error(lab("package", "--config", "fedora"), "unknown package config",
                   "lab, debian")


def test_unknown_architecture_and_debian_on_arm64_are_refused():
    one_line_error(lab("package", "--arch", "riscv64"), "unknown package architecture",
                   "amd64, arm64")
    one_line_error(lab("package", "--config", "debian", "--arch", "arm64"),
                   "Debian's amd64", "--config lab")


def test_missing_tools_are_named_with_their_packages():
    have = {"make", "gcc", "dpkg-deb", "bc", "flex", "bison", "cpio", "openssl"}
    with pytest.raises(LabError) as e:
        package.check_tools("lab", which=lambda prog: prog in have or None)
    msg = str(e.value)
    assert "\n" not in msg and "make setup" in msg
    for prog, pkg in [("dpkg-buildpackage", "dpkg-dev"), ("dh_testdir", "debhelper"),
                      ("rsync", "rsync")]:
        assert f"{prog} ({pkg})" in msg
    assert "gcc" not in msg


def test_debian_config_also_needs_zstd():
    with pytest.raises(LabError) as e:
        package.check_tools("debian", which=lambda prog: prog != "zstd" or None)
    assert "zstd (zstd)" in str(e.value)
    package.check_tools("lab", which=lambda prog: prog != "zstd" or None)


def test_all_tools_present_passes():
    package.check_tools("debian", which=lambda prog: f"/usr/bin/{prog}")


@pytest.mark.parametrize("config", package.CONFIGS)
def test_too_little_disk_is_refused_with_the_need(config, tmp_path):
    need = package.DISK_GIB[config] * 2**30
    with pytest.raises(LabError) as e:
        package.check_disk(config, tmp_path / "not" / "made", free_bytes=need - 1)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"{package.DISK_GIB[config]} GiB free in {tmp_path}" in msg
    package.check_disk(config, tmp_path, free_bytes=need)


def test_missing_debian_config_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(package, "DEBIAN_CONFIG", tmp_path / "config.amd64_none_amd64.xz")
    with pytest.raises(LabError) as e:
        package.check_debian_config()
    assert "linux-config-6.12" in str(e.value) and "make setup" in str(e.value)


def test_lab_package_without_a_patched_tree_says_what_to_do():
    """A fresh clone (conftest: empty work folder, no kernel source): the
    lab package fails on the missing source in one line, not a traceback."""
    proc = lab("package", "--config", "lab")
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("lab:")]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_only_the_files_this_build_listed_are_taken(tmp_path):
    """bindeb-pkg writes into the kernel tree, where another configuration's
    package build may be writing too: debian/files says which are ours."""
    (tmp_path / "debian").mkdir()
    (tmp_path / "debian" / "files").write_text(
        "linux-image-6.12.117-unflush-lab_6.12.117-7_amd64.deb kernel optional\n"
        "linux-libc-dev_6.12.117-7_amd64.deb devel optional\n"
        "linux-upstream_6.12.117-7_amd64.buildinfo kernel optional\n")
    assert package.made_files(tmp_path) == [
        "linux-image-6.12.117-unflush-lab_6.12.117-7_amd64.deb",
        "linux-libc-dev_6.12.117-7_amd64.deb",
        "linux-upstream_6.12.117-7_amd64.buildinfo",
        "linux-upstream_6.12.117-7_amd64.changes"]


def test_no_build_without_boot_is_refused():
    one_line_error(lab("package", "--no-build"), "--no-build builds nothing", "--boot")


def test_booting_a_folder_without_one_image_package_is_refused(tmp_path):
    one_line_error(lab("package", "--no-build", "--boot", "--out", str(tmp_path)),
                   "0 linux-image packages for amd64", "python3 -m lab package")
    for name in ("linux-image-6.12.1-a_1_amd64.deb", "linux-image-6.12.1-b_1_amd64.deb"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(LabError, match="2 linux-image packages"):
        package.image_package(tmp_path)
    (tmp_path / "linux-image-6.12.1-b_1_amd64.deb").unlink()
    (tmp_path / "linux-image-6.12.1-a-dbg_1_amd64.deb").write_bytes(b"")
    assert package.image_package(tmp_path).name == "linux-image-6.12.1-a_1_amd64.deb"


def booted(**changed):
    seen = {"exit_code": 0, "release": "6.12.1-unflush", "uname": "6.12.1-unflush",
            "switches": list(host.SWITCHES),
            "counters": ["nr_tlb_remote_flush", "nr_tlb_luf_folios"]}
    return {**seen, **changed}


def test_a_boot_is_judged_by_its_release_switches_and_counters():
    assert package.check_boot(booted()) == []
    assert package.check_boot(booted(exit_code=1)) == ["the guest exited 1"]
    assert package.check_boot(booted(uname="6.12.1-amd64")) == [
        "it ran as '6.12.1-amd64', not 6.12.1-unflush"]
    assert package.check_boot(booted(switches=["luf"], counters=[])) == [
        "no switch zap_ptes, anon_unmap, unmap_flush, hvo_flush in "
        "/sys/kernel/mm/tlb_batching", "no nr_tlb_luf_folios in /proc/vmstat"]
    # arm64 has no HVO in 6.12, so no hvo_flush
    arm64 = [s for s in host.SWITCHES if s != "hvo_flush"]
    assert package.check_boot(booted(switches=arm64), "arm64") == []
    assert package.check_boot(booted(switches=arm64)) != []


def test_the_record_keeps_the_build_when_a_boot_is_added(tmp_path):
    package.write_record(tmp_path, config="debian", seconds=7)
    package.write_record(tmp_path, boot={"ok": True})
    record = json.loads((tmp_path / package.RECORD).read_text())
    assert record == {"format": 1, "config": "debian", "seconds": 7, "boot": {"ok": True}}
