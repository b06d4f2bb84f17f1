"""The QEMU runner: command line, and how it judges a guest (with a fake QEMU)."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lab import arches, build, initramfs, vm
from lab.errors import LabError

FAKE = Path(__file__).with_name("fake_qemu.py")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    wrapper = tmp_path / "qemu"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setitem(arches.ARCHES, arches.HOST,
                        replace(arches.ARCHES[arches.HOST], qemu=str(wrapper)))
    monkeypatch.setattr(initramfs, "run_image", lambda cmd, dest, layers=(): dest)
    kernel = build.Kernel("vanilla", tmp_path / "bzImage", "6.12.117", tmp_path)

    def run(mode, **shape):
        monkeypatch.setenv("FAKE_QEMU_MODE", mode)
        return vm.run(kernel, "true", vm.VMShape(accel="tcg", **shape),
                      logdir=tmp_path / "log", quiet=True)
    return run


def test_output_and_exit_status(fake):
    result = fake("ok")
    assert result.exit_code == 3
    assert result.output == "hello\n"
    assert (result.logdir / "console.log").exists()


def test_splat_fails_even_if_command_succeeds(fake):
    with pytest.raises(LabError, match="kernel splat.*WARNING: CPU: 1.*console log"):
        fake("splat")


def test_panic_is_a_clear_error(fake):
    with pytest.raises(LabError, match="died before the command finished.*Kernel panic"):
        fake("panic")


def test_oops_error_says_where_the_kernel_died(fake):
    with pytest.raises(LabError, match=r"died before the command finished: "
                       r"'\[ +9.013349\] Oops: int3.*' at can_migrate_task\+0xfd/0x4c0 "):
        fake("oops")


def test_hang_times_out(fake):
    with pytest.raises(LabError, match="timed out after 2 s"):
        fake("hang", timeout=2)


def test_guest_setup_failure(fake):
    with pytest.raises(LabError, match="set-up failed: swapon"):
        fake("setup-failed", zram="1G")


def test_numa_node_and_zram_on_the_command_line(tmp_path):
    shape = vm.VMShape(cpus=4, mem="2G", node1="1G", zram="512M")
    cmd = vm.qemu_command("bz", "initrd", shape, "c.log", "o.log", "tcg")
    joined = " ".join(cmd)
    assert "-m 3072M" in joined
    assert "node,nodeid=1,memdev=m1,initiator=0" in joined
    assert "hmat=on" in joined
    assert "target=1,hierarchy=memory,data-type=access-latency,latency=200" in joined
    assert "unflush.zram=512M" in cmd[cmd.index("-append") + 1]
    assert "thread=multi" in joined


def test_nvme_disk_only_when_asked_and_no_scsi_debug_disk_at_boot(tmp_path):
    log = str(tmp_path / "c.log")
    plain = vm.qemu_command("bz", "initrd", vm.VMShape(), log, "o.log", "tcg")
    assert "nvme,serial=unflush0,id=nvme0" not in plain
    assert not (tmp_path / vm.NVME_IMAGE).exists()
    cmd = vm.qemu_command("bz", "initrd", vm.VMShape(nvme="64M"), log, "o.log", "tcg")
    assert "nvme,serial=unflush0,id=nvme0" in cmd
    namespaces = [a for a in cmd if a.startswith("nvme-ns,")]
    assert len(namespaces) == 2 and "zoned=true" not in namespaces[0]
    assert "nsid=2,zoned=true" in namespaces[1]
    for image in (vm.NVME_IMAGE, vm.NVME_ZONED_IMAGE):
        assert (tmp_path / image).stat().st_size == 64 << 20
    for c in (plain, cmd):
        append = c[c.index("-append") + 1].split()
        assert {"scsi_debug.add_host=0", "scsi_debug.fake_rw=1"} <= set(append)
    with pytest.raises(LabError, match="--nvme"):
        vm.VMShape(nvme="lots").validate()


def test_icount_serialises_vcpus():
    cmd = vm.qemu_command("bz", "i", vm.VMShape(icount=True), "c", "o", "tcg")
    assert cmd[cmd.index("-icount") + 1] == "shift=0"
    assert "tcg,thread=single" in cmd


@pytest.mark.parametrize("config, args", [
    ("CONFIG_KASAN=y\nCONFIG_LUF=y\n", ["no5lvl"]),
    ("# CONFIG_KASAN is not set\nCONFIG_LUF=y\n", []),
    (None, []),
])
def test_kasan_kernels_boot_with_4_level_paging(tmp_path, config, args):
    if config is not None:
        (tmp_path / ".config").write_text(config)
    kernel = build.Kernel("debug", tmp_path / "bzImage", "6.12.117", tmp_path)
    assert vm.kernel_args(kernel) == args
    cmd = vm.qemu_command("bz", "i", vm.VMShape(), "c", "o", "tcg", vm.kernel_args(kernel))
    assert ("no5lvl" in cmd[cmd.index("-append") + 1].split()) == bool(args)


@pytest.mark.parametrize("shape, refused", [
    (vm.VMShape(), True),
    (vm.VMShape(icount=True), False),
    (vm.VMShape(cpus=1), False),
])
def test_jump_labels_need_one_tcg_thread(tmp_path, shape, refused):
    """A distro kernel under multi-threaded TCG is refused before it boots."""
    (tmp_path / ".config").write_text("CONFIG_JUMP_LABEL=y\n")
    kernel = build.Kernel("patched-distro", tmp_path / "bzImage", "6.12.117", tmp_path)
    if refused:
        with pytest.raises(LabError, match="patched-distro is built with jump labels.*"
                                           "add --icount"):
            vm.check_jump_labels(kernel, shape, "tcg")
    else:
        vm.check_jump_labels(kernel, shape, "tcg")
    (tmp_path / ".config").write_text("# CONFIG_JUMP_LABEL is not set\n")
    vm.check_jump_labels(kernel, vm.VMShape(), "tcg")


def test_splat_patterns():
    console = ("[ 1.0] ok\n[ 2.0] BUG: KASAN: use-after-free in foo\n"
               "[ 3.0] WARNING: possible circular locking dependency detected\n"
               "[ 4.0] Freeing unused kernel image memory\n")
    assert len(vm.find_splats(console)) == 2


def test_newc_archive_is_readable_by_cpio(tmp_path):
    import gzip
    import subprocess
    data = initramfs.cpio([("d", None, 0o755), ("d/f", b"abc", 0o644)])
    (tmp_path / "a.cpio").write_bytes(gzip.decompress(data))
    out = subprocess.run(["cpio", "-t", "-F", str(tmp_path / "a.cpio")],
                         capture_output=True, text=True)
    assert out.stdout.split() == ["d", "d/f"]


def test_progress_shows_the_last_line_that_says_something(tmp_path):
    out = tmp_path / "output.log"
    out.write_text("# ----------------------\n# running ./soft-dirty\n"
                   "# ----------------------\nUNFLUSH-RESULT {}\n\n")
    assert vm._last_line(out, vm.PROGRESS_SKIP) == "# running ./soft-dirty"
