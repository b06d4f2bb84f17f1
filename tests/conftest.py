"""Shared fixtures, and the layers of the suite.

Three layers, by what a test needs (their markers are declared in
pyproject.toml):
- `fast` (given here to every test marked neither of the two below): host
  logic only, no kernel source, no kernel build, no VM; the whole layer
  runs in seconds and is the first thing `make test` runs
  (`python3 -m pytest -m fast tests`).  Each fast test sees an empty work
  folder and no kernel tarball, as in a fresh clone before any build: one
  that reaches for either fails, and belongs in a layer below.
- `needs_kernel`: needs the kernel but boots none: unpacks the Debian
  kernel source, configures it or runs its scripts (olddefconfig,
  checkpatch.pl), or reads a built kernel; `make test` runs these after
  its builds.
- `vm`: boots real kernels; `make test` builds them first.  A test that
  needs a kernel that is not built fails (it does not skip): a suite that
  quietly skips its integration tests proves nothing.
"""

import pytest

from lab import build


@pytest.fixture(params=["vanilla", "patched"])
def kernel(request):
    return build.built(request.param)


def pytest_addoption(parser):
    parser.addoption("--arm64", action="store_true",
                     help="also run the tests marked arm64, which boot the arm64 "
                          "kernels (`python3 -m lab build` them first: "
                          "`make test-arm64` does)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mark_fast(items)
    skip_arm64(config, items)
    debug_kernel_last(items)


def mark_fast(items):
    """Before -m selects (tryfirst), so that `-m fast` sees the marker."""
    for item in items:
        if not any(item.get_closest_marker(m) for m in ("vm", "needs_kernel")):
            item.add_marker(pytest.mark.fast)


@pytest.fixture(autouse=True)
def fresh_clone_for_fast_tests(request, tmp_path_factory, monkeypatch):
    """A fast test runs as in a fresh clone before any build: the lab's work
    folder is empty (no built kernel, no unpacked tree) and the kernel
    tarball is missing, so a test that needs either fails (or, if written
    to, skips) instead of quietly unpacking the kernel: mark it needs_kernel.
    A test that sets its own (test_tree.py's stand-in tarball) still can."""
    if request.node.get_closest_marker("fast"):
        monkeypatch.setenv("UNFLUSH_WORK", str(tmp_path_factory.mktemp("work")))
        monkeypatch.setenv("UNFLUSH_KERNEL_TARBALL",
                           "/nonexistent/fast-tests-have-no-kernel-source.tar.xz")


def debug_kernel_last(items):
    """The tests that boot the debug kernel run after all others (a stable
    sort: each group keeps its order): `make test` builds that kernel at
    idle priority beside the other tests, and build.built() waits for the
    build if a test gets there first."""
    items.sort(key=lambda item: item.get_closest_marker("debug_kernel") is not None)


def skip_arm64(config, items):
    """The arm64 guests run when asked for, with --arm64 or a -m expression
    that names arm64: `make test` asks for its quick form once its arm64
    kernels are built, `make test-arm64` for all of them (Makefile)."""
    expr = config.getoption("markexpr") or ""
    if config.getoption("--arm64") or ("arm64" in expr and "not arm64" not in expr):
        return
    skip = pytest.mark.skip(reason="arm64 guest: opt in with --arm64 (after "
                                   "building its kernels: `make test-arm64`)")
    for item in items:
        # the marker itself: "arm64" in item.keywords would also match a
        # parameter named arm64 (check-series' matrix configuration)
        if item.get_closest_marker("arm64"):
            item.add_marker(skip)
