"""`lab check-series --configs`: the configurations of config/matrix/.

Building them takes two hours on two cores, so it is run by hand before a
series is posted (README, "Working on the series").  What runs here is
what can go wrong without a build: a configuration whose options Kconfig
silently drops, a name or an architecture the lab does not know, a missing
cross compiler, and a build that warns being passed off as clean.
"""

import shutil

import pytest

from lab import build, paths, series_configs, stack_frames, tree
from lab.errors import LabError


@pytest.fixture(scope="module")
def src():
    return tree.ensure_patched()


def test_every_configuration_explains_itself_and_sets_options():
    names = series_configs.available()
    assert {"all-on", "arm64", "i386", "smp-off", "migration-off"} <= set(names)
    for name in names:
        text = (series_configs.MATRIX / f"{name}.config").read_text()
        assert text.startswith("#"), f"{name}: say what the configuration is for"
        assert build.wanted_options([series_configs.MATRIX / f"{name}.config"]), name


@pytest.mark.needs_kernel
@pytest.mark.parametrize("name", series_configs.available())
def test_each_configuration_keeps_its_options_through_olddefconfig(src, name, tmp_path):
    fragment = series_configs.MATRIX / f"{name}.config"
    try:
        arch, make_args, _ = series_configs.arch_of(fragment)
    except LabError as err:
        pytest.skip(str(err))  # no cross compiler: Kconfig asks it its version
    frags = [paths.CONFIG / f for f in series_configs.BASE] + [fragment]
    # check_config() raises if Kconfig dropped an option the file asks for
    build.configure_dir(src, tmp_path / "o", frags, make_args, checked=[fragment])
    config = (tmp_path / "o" / ".config").read_text()
    assert ("CONFIG_ARM64=y" in config) == (arch == "arm64")


def test_names_are_chosen_from_the_matrix():
    names = series_configs.available()
    assert series_configs.select("all") == names
    assert series_configs.select("smp-off, i386") == ["i386", "smp-off"]
    for bad in ("smp", "i386,nope", ","):
        with pytest.raises(LabError) as e:
            series_configs.select(bad)
        assert e.value.exit_code == 2 and "choose from" in str(e.value)


def test_a_missing_cross_compiler_names_its_package(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(LabError) as e:
        series_configs.arch_of(series_configs.MATRIX / "arm64.config")
    assert "apt-get install gcc-aarch64-linux-gnu" in str(e.value)
    assert series_configs.arch_of(series_configs.MATRIX / "i386.config")[0] == "x86-64"


def test_an_unknown_arch_is_refused(tmp_path):
    frag = tmp_path / "riscv.config"
    frag.write_text("# arch: riscv\nCONFIG_SMP=y\n")
    with pytest.raises(LabError, match="unknown arch 'riscv'"):
        series_configs.arch_of(frag)


def test_warnings_of_the_compiler_objtool_and_linker_are_found():
    log = "\n".join([
        "  CC      mm/warning_free.o",
        "../mm/rmap.c:12:5: warning: unused variable 'x' [-Wunused-variable]",
        "vmlinux.o: warning: objtool: luf_flush+0x1: call without frame pointer",
        "ld: warning: arch/x86/boot/x.o: missing .note.GNU-stack section",
        "WARNING: modpost: vmlinux: section mismatch in reference",
        "  LD      vmlinux",
    ])
    assert len(series_configs.warnings_in(log)) == 4


@pytest.mark.parametrize("log, why", [
    ("  CC mm/a.o\n../mm/a.c:1:1: warning: oops\n", r"with warnings \(1\)"),
    (None, "does not build"),
])
def test_a_build_that_warns_or_fails_is_refused_and_emptied(monkeypatch, tmp_path,
                                                             log, why):
    out = tmp_path / ".o-config-smp-off"

    def configure(src, out_, frags, make_args, checked):
        (out_ / "mm").mkdir(parents=True)
        (out_ / "mm" / "a.o").write_text("object")
        (out_ / ".config").write_text("CONFIG_SMP=n\n")

    def compile_(src, out_, name, jobs, target, make_args, compiler):
        (out_ / "build.log").write_text(log or "error: no\n")
        if log is None:
            raise LabError("kernel build of config-smp-off failed: error: no")

    monkeypatch.setattr(build, "configure_dir", configure)
    monkeypatch.setattr(build, "compile_dir", compile_)
    with pytest.raises(LabError, match=why):
        series_configs.build_one(tmp_path, "smp-off")
    # next time make compiles it all again, so the warning is seen again
    assert [p.name for p in out.iterdir()] == ["build.log"]


def test_a_clean_build_passes(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "configure_dir", lambda *a, **k: None)

    def compile_(src, out_, *a, **k):
        out_.mkdir(parents=True)
        (out_ / "build.log").write_text("  CC      mm/rmap.o\n  LD      vmlinux\n")

    monkeypatch.setattr(build, "compile_dir", compile_)
    assert series_configs.build_one(tmp_path, "smp-off") >= 0
    assert (tmp_path / ".o-config-smp-off" / "build.log").exists()


def test_stack_frames_reads_gcc_su_lines():
    su = ("drivers/virtio/virtio_balloon.c:350:13:update_balloon_vm_stats\t1184\tstatic\n"
          "drivers/virtio/virtio_balloon.c:90:12:tell_host\t48\tstatic\n"
          "not a frame line\n")
    assert stack_frames.parse_su(su) == {"update_balloon_vm_stats": 1184, "tell_host": 48}


def test_stack_frames_report_gives_the_change():
    results = {"vanilla": {"update_balloon_vm_stats": 936},
               "patched": {"update_balloon_vm_stats": 1184},
               "base": "6.12.118-1~deb12u1", "patches": 24, "compiler": "gcc 12.2.0"}
    text = stack_frames.report(results)
    assert "| `update_balloon_vm_stats()` | 936 | 1,184 | +248 |" in text
    assert "python3 -m lab check-series --stack-frames" in text
