"""The Debian package of the lab's patched kernel (`python3 -m lab package`):
its control fields and files, its config the patched build's, and the
packaged vmlinuz booted in QEMU with the series' switches and counters.

`make test` has built the patched kernel; the package re-links a copy of
its object tree (lab/package.py), a minute or two."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lab import build, host, package, paths

pytestmark = pytest.mark.vm

# Counters only the series adds to /proc/vmstat (one a mechanism: its
# switch's test in test_switches.py says what each counts), and one of
# DEBUG_TLBFLUSH's, which the lab's config has on.
SERIES_COUNTERS = ("nr_tlb_zap_ptes_batched", "nr_tlb_anon_unmap_ptes_batched",
                   "nr_tlb_reclaim_ptes_batched",
                   "nr_tlb_migrate_ptes_batched", "nr_tlb_hvo_folios_batched",
                   "nr_tlb_luf_folios", "nr_tlb_remote_flush")


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    out = tmp_path_factory.mktemp("deb")
    proc = subprocess.run([sys.executable, "-m", "lab", "package", "--config", "lab",
                           "--out", str(out)], cwd=paths.ROOT, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed = [line for line in proc.stdout.splitlines() if line.endswith(".deb")]
    assert listed, proc.stdout
    return out, listed


@pytest.fixture(scope="module")
def image_deb(packages):
    out, _ = packages
    release = build.built("patched").release.removesuffix("-patched") \
        + package.LOCALVERSIONS["lab"]
    debs = list(out.glob(f"linux-image-{release}_*_amd64.deb"))
    assert len(debs) == 1, sorted(p.name for p in out.iterdir())
    return debs[0], release


def dpkg_deb(*args):
    return subprocess.run(["dpkg-deb", *args], capture_output=True, text=True,
                          check=True).stdout


def test_make_deb_prints_the_packages_it_wrote(packages):
    out, listed = packages
    assert sorted(listed) == sorted(str(p) for p in out.glob("*.deb"))


def test_image_package_control_fields(image_deb):
    deb, release = image_deb
    fields = dict(re.findall(r"^ (\w[\w-]*): (.*)$", dpkg_deb("-I", str(deb)), re.M))
    assert fields["Package"] == f"linux-image-{release}"
    assert fields["Architecture"] == "amd64"
    # the package's version starts with the kernel's, as kbuild makes it
    assert fields["Version"].startswith(release.split("-")[0] + "-"), fields["Version"]


def test_image_package_holds_kernel_map_and_config(image_deb):
    deb, release = image_deb
    names = {line.split()[-1] for line in dpkg_deb("-c", str(deb)).splitlines()}
    for path in (f"./boot/vmlinuz-{release}", f"./boot/System.map-{release}",
                 f"./boot/config-{release}"):
        assert path in names, sorted(names)


@pytest.fixture(scope="module")
def unpacked(image_deb, tmp_path_factory):
    deb, release = image_deb
    root = tmp_path_factory.mktemp("root")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root, release


def test_packaged_config_is_the_patched_builds(unpacked):
    root, release = unpacked
    packaged = (root / "boot" / f"config-{release}").read_text()
    assert packaged == (build.built("patched").objdir / ".config").read_text()


@pytest.fixture(scope="module")
def booted(image_deb, tmp_path_factory):
    """The packaged vmlinuz booted with the lab's initramfs (package.boot(),
    what `package --boot` runs)."""
    deb, release = image_deb
    seen = package.boot(deb, tmp_path_factory.mktemp("boot"))
    assert seen["exit_code"] == 0, seen["output"]
    return seen, release


def test_packaged_kernel_runs_as_its_release(booted):
    seen, release = booted
    assert seen["uname"] == release, seen["output"]


def test_packaged_kernel_has_the_series_switches(booted):
    seen, _ = booted
    assert set(seen["switches"]) >= set(host.SWITCHES), seen["output"]


def test_packaged_kernel_has_the_series_counters(booted):
    seen, _ = booted
    missing = [c for c in SERIES_COUNTERS if c not in seen["counters"]]
    assert not missing, sorted(seen["counters"])
    assert package.check_boot(seen) == []


def test_make_deb_records_its_build(packages):
    out, listed = packages
    record = json.loads((out / package.RECORD).read_text())
    assert record["config"] == "lab" and record["steps"] > 0, record
    assert record["cpu_seconds"] > 0 and record["seconds"] > 0, record
    assert sorted(record["packages"]) == sorted(Path(p).name for p in listed)
    assert all(p["bytes"] > 0 and p["installed_kib"] > 0
               for p in record["packages"].values()), record
