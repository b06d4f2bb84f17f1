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
