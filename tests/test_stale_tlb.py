"""The stale-translation test, the series' selftest stale_tlb
(tools/testing/selftests/mm/stale_tlb.c, patch 22; docs/stale-tlb.md).

A reader thread alone on one CPU keeps reading read-only pages while a
helper process takes them away (file reclaim, anon swap-out of 4K pages and
of 32K folios, the latter through the series' batched unmap and its
deferred range flush, file migration) and fills the freed pages with a
canary.  On a correct kernel the reader never sees anything but the pages'
own data: the safety suite runs the test on every kernel it compares
(tests/test_safety.py, with the counters that show each trial shot the
reader's CPU down).  On the `broken` kernel (patches/testing/: no TLB flush
for read-only PTEs) it must see the canary: a safety test that has never
failed proves nothing.
"""

import pytest

from lab import safety

pytestmark = pytest.mark.vm


@pytest.mark.parametrize("icount", [False, True], ids=["multi-threaded", "icount"])
def test_the_series_selftest_catches_the_broken_kernel(icount):
    """Run by run_vmtests.sh as the safety suite runs it: on the broken
    kernel each of its four tests fails, and the reader saw another
    process's canary.  Also with all vCPUs in one host thread (-icount), as
    the suite boots kernels with jump labels: taking turns must not keep
    the reader's CPU from using the translation it should have lost.  Each
    test's verdict and the trial it failed in are printed (pytest -rP)."""
    tests, output, errors = safety.run_selftests_alone("broken", ["stale_tlb"],
                                                       icount=icount)
    print("\n".join(line for line in output.splitlines()
                    if line.startswith(("# # the reader", "# not ok", "# ok"))))
    assert not errors, errors
    (test,) = [t for t in tests if t.name == "stale_tlb"]
    assert test.status == "fail", output[-3000:]
    assert [s.status for s in test.subtests] == ["fail"] * 4, test.subtests
    assert "another process's canary" in output, output[-3000:]
