"""Shared fixtures.

Tests marked `vm` boot real kernels; `make test` builds them first.  A test
that needs a kernel that is not built fails (it does not skip): a suite that
quietly skips its integration tests proves nothing.
"""

import pytest

from lab import build


@pytest.fixture(params=["vanilla", "patched"])
def kernel(request):
    return build.built(request.param)


def pytest_configure(config):
    config.addinivalue_line("markers", "vm: boots a kernel in QEMU")
    config.addinivalue_line("markers", "arm64: boots an arm64 kernel (opt-in: --arm64)")


def pytest_addoption(parser):
    parser.addoption("--arm64", action="store_true",
                     help="also run the tests marked arm64, which boot the arm64 "
                          "kernels (`python3 -m lab build vanilla-arm64 "
                          "patched-arm64` first)")


def pytest_collection_modifyitems(config, items):
    """The arm64 guests are not part of `make test`: their two kernels add
    about 40 minutes to a run from a cold ccache (README.md, "arm64").  They
    run when asked for, with --arm64 or a -m expression that names arm64."""
    expr = config.getoption("markexpr") or ""
    if config.getoption("--arm64") or ("arm64" in expr and "not arm64" not in expr):
        return
    skip = pytest.mark.skip(reason="arm64 guest: opt in with --arm64 (after "
                                   "`python3 -m lab build vanilla-arm64 patched-arm64`)")
    for item in items:
        # the marker itself: "arm64" in item.keywords would also match a
        # parameter named arm64 (check-series' matrix configuration)
        if item.get_closest_marker("arm64"):
            item.add_marker(skip)
