"""KUnit test of LUF's generations (patch 0015, mm/luf_kunit.c).

The debug kernel is built with CONFIG_KUNIT and CONFIG_LUF_KUNIT_TEST
(config/series-debug.config), so the suite runs once at boot and prints its
results in KTAP to the kernel log.  Every case must be there and pass: a
suite that did not run, or ran fewer cases, fails here too.  debug-arm64
runs it too (opt-in, like every arm64 guest).
"""

import re

import pytest

from lab import build, vm
from lab.guest_output import KTAP_RESULT

pytestmark = pytest.mark.vm

CASES = ("luf_test_note_only_grows", "luf_test_flush_advances_done",
         "luf_test_closed_generation_refused", "luf_test_publish_then_flush",
         "luf_test_flushed_gen_is_noop")
# a kernel log line's timestamp, and KTAP's indentation of a suite's cases
LOG_PREFIX = re.compile(r"^(\[[ \d.]+\] )?\s*")


def ktap_results(log):
    """{case or suite name: 'ok' / 'not ok'} from a KTAP kernel log, with
    the TAP result pattern the selftests' parser uses."""
    found = {}
    for line in log.splitlines():
        m = KTAP_RESULT.match(LOG_PREFIX.sub("", line, count=1))
        if m:
            found[m.group(3)] = m.group(1)
    return found


def test_ktap_parser_reads_cases_and_suite():
    log = ("[    1.0] KTAP version 1\n[    1.0]     ok 1 luf_test_a\n"
           "[    1.1]     not ok 2 luf_test_b\n[    1.2] not ok 1 luf\n")
    assert ktap_results(log) == {"luf_test_a": "ok", "luf_test_b": "not ok",
                                 "luf": "not ok"}


@pytest.mark.parametrize("variant", [
    pytest.param("debug", marks=pytest.mark.debug_kernel),
    pytest.param("debug-arm64", marks=pytest.mark.arm64)])
def test_luf_generations_kunit_passes_on_debug_kernel(variant):
    run = vm.run(build.built(variant), "dmesg", vm.VMShape(cpus=2, mem="1G",
                                                           timeout=600),
                 quiet=True)
    # dmesg has the KTAP lines (KERN_INFO: below the console's loglevel)
    results = ktap_results(run.output)
    tail = "\n".join(ln for ln in run.output.splitlines()
                     if "luf" in ln or "KTAP" in ln)[-3000:]
    assert results.get("luf") == "ok", tail
    assert {c: results.get(c) for c in CASES} == {c: "ok" for c in CASES}, tail
