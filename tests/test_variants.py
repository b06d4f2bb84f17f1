"""The kernel variants `make test` does not build keep their options.

vanilla-distro and patched-distro (config/distro.config) and vanilla-debug
are built by hand.  A fragment option that Kconfig drops for an unmet
dependency would only show when someone does; configuring them here,
without a build, shows it now.
"""

import lzma
from pathlib import Path

import pytest

from lab import build, paths
from lab.errors import LabError

BUILT_BY_HAND = ("vanilla-distro", "patched-distro", "vanilla-debug")


@pytest.mark.needs_kernel
@pytest.mark.parametrize("variant", BUILT_BY_HAND)
def test_variant_keeps_its_options_through_olddefconfig(variant, tmp_path):
    src = build.ensure_source(variant)
    # check_config() raises if Kconfig dropped an option a fragment asks for
    build.configure_dir(src, tmp_path / "o", build.fragments(variant))
    config = (tmp_path / "o" / ".config").read_text()
    assert ("CONFIG_JUMP_LABEL=y" in config) == variant.endswith("-distro")


DEBIAN_CONFIGS = Path("/usr/src/linux-config-6.12")


def test_distro_config_sets_what_debian_sets(tmp_path):
    """Each option of distro.config has the value Debian's amd64 configs
    (package linux-config-6.12) give it."""
    configs = sorted(DEBIAN_CONFIGS.glob("config.amd64_*.xz"))
    if not configs:
        pytest.skip(f"no Debian amd64 configs in {DEBIAN_CONFIGS} "
                    f"(apt-get install linux-config-6.12)")
    wanted = build.wanted_options([paths.CONFIG / "distro.config"])
    assert wanted
    for xz in configs:
        plain = tmp_path / xz.stem
        plain.write_bytes(lzma.decompress(xz.read_bytes()))
        debian = build.wanted_options([plain])
        for name, value in wanted.items():
            assert debian.get(name, "n") == value, f"{xz.name}: {name}"


def test_a_second_build_of_a_variant_waits_for_the_first(capsys):
    """Two makes in one build directory break each other: build_lock() makes
    the second wait, and say so, until the first lets go."""
    import subprocess
    import sys
    import time

    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from lab import build\n"
         "with build.build_lock('patched'):\n"
         "    print('held', flush=True)\n"
         "    time.sleep(1.5)\n"],
        stdout=subprocess.PIPE, text=True, cwd=paths.ROOT)
    assert holder.stdout.readline() == "held\n"
    start = time.monotonic()
    with build.build_lock("patched"):
        waited = time.monotonic() - start
    holder.wait()
    assert waited > 0.5
    assert "build patched: waiting for another build of it" in capsys.readouterr().err
    # another variant's build does not wait for it
    with build.build_lock("patched"), build.build_lock("vanilla"):
        pass


def test_built_waits_for_a_build_under_way(capsys):
    """`make test` builds the debug kernel beside the tests that boot it:
    built() waits for a build another process holds, and says so, and then
    judges what the build left (here nothing: not built)."""
    import subprocess
    import sys
    import time

    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import time\n"
         "from lab import build\n"
         "with build.build_lock('debug'):\n"
         "    print('held', flush=True)\n"
         "    time.sleep(1.5)\n"],
        stdout=subprocess.PIPE, text=True, cwd=paths.ROOT)
    assert holder.stdout.readline() == "held\n"
    start = time.monotonic()
    with pytest.raises(LabError, match="the debug kernel is not built"):
        build.built("debug")
    waited = time.monotonic() - start
    holder.wait()
    assert waited > 0.5
    assert "the debug kernel is being built: waiting" in capsys.readouterr().err
    # with no build under way it does not wait
    start = time.monotonic()
    with pytest.raises(LabError):
        build.built("debug")
    assert time.monotonic() - start < 0.5
