"""guest/lib/ktap.c, the KTAP lines of the guest programs that pass or
fail, built on the host with a small driver and read back by the lab's one
KTAP reader (lab/guest_output.py); and the exit statuses the VM tests read
from them (tests/stale_reads.py)."""

import shutil
import subprocess

import pytest

from lab import guest_output, paths
from stale_reads import exits, ktap_exits, runs

DRIVER = r"""
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ktap.h"

static void died(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ktap_died(fmt, ap);
	va_end(ap);
}

int main(int argc, char **argv)
{
	const char *how = argc > 1 ? argv[1] : "";

	ktap_plan(1);
	ktap_test("demo/%s", how);
	if (!strcmp(how, "skip"))
		ktap_skip_exit("needs %d NUMA nodes", 2);
	if (!strcmp(how, "died")) {
		if (fork() == 0) {	/* a helper's death is not the test's */
			died("helper");
			_exit(1);
		}
		died("no file to read");
		return 1;
	}
	ktap_result(!strcmp(how, "pass"));
	return ktap_status();
}
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    cc = shutil.which("gcc") or pytest.fail("gcc missing: run `make setup`")
    tmp = tmp_path_factory.mktemp("ktap")
    (tmp / "demo.c").write_text(DRIVER)
    lib = paths.GUEST_SRC / "lib"
    subprocess.run([cc, "-Wall", "-Wextra", "-Werror", f"-I{lib}", "-o", str(tmp / "demo"),
                    str(tmp / "demo.c"), str(lib / "ktap.c")], check=True)
    return tmp / "demo"


@pytest.mark.parametrize("how, status, exit_code, reason", [
    ("pass", "pass", 0, ""),
    ("fail", "fail", 1, ""),
    ("skip", "skip", 4, "needs 2 NUMA nodes"),
    ("died", "fail", 1, "no file to read"),
])
def test_each_verdict_is_one_ktap_line_and_its_exit_status(demo, how, status,
                                                           exit_code, reason):
    proc = subprocess.run([str(demo), how], capture_output=True, text=True)
    assert proc.returncode == exit_code, proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["TAP version 13", "1..1"], lines
    results = [r for r in map(guest_output.ktap_result, lines[2:]) if r]
    assert results == [(1, f"demo/{how}", status, reason)], lines
    assert guest_output.KTAP_EXIT[status] == exit_code


def test_exit_statuses_by_labelled_run():
    """A boot that runs a program once per setting of a switch
    (test_anon_unmap.py): each run's KTAP exit status, result and own
    lines, by the label echoed before it."""
    lost = "part a: page 3 is neither mapped nor swapped: its PTE was lost"
    out = "\n".join([
        "RUN 1 1", "TAP version 13", "1..1",
        'UNFLUSH-RESULT {"experiment":"anon-unmap-rollback","rep":0,"checks":{"a_pages":32}}',
        "ok 1 anon-unmap-rollback",
        "RUN 0 0", "TAP version 13", "1..1",
        f"not ok 1 anon-unmap-rollback # {lost}",
        f"anon-unmap-rollback: {lost}",
        "RUN old", "TAP version 13", "1..1",
        "ok 1 anon-unmap-rollback # SKIP this kernel has no 64K anonymous folios",
        "RUN killed", "TAP version 13", "1..1",
    ])
    by_run = runs(out, "anon-unmap-rollback")
    assert by_run["1 1"] == {
        "exit": 0, "errors": [],
        "result": {"experiment": "anon-unmap-rollback", "rep": 0, "checks": {"a_pages": 32}}}
    assert by_run["0 0"] == {"exit": 1, "result": None,
                             "errors": [f"anon-unmap-rollback: {lost}"]}
    assert by_run["old"]["exit"] == 4
    assert by_run["killed"] == {"exit": None, "result": None, "errors": []}
    # over the whole output, each name's last result
    assert ktap_exits(out) == {"anon-unmap-rollback": 4}


def test_a_check_that_died_is_not_ok_among_other_lines():
    """anon-unmap-rollback on the broken kernel (test_anon_unmap.py): the
    mismatch dies, its KTAP line not ok, exit 1; the counters grepped after
    it are no results."""
    lost = ("a (pinned), pageout of a pinned folio: page 8 is neither mapped nor "
            "swapped (pagemap 0): its PTE was lost")
    out = "\n".join([
        "TAP version 13", "1..1",
        f"not ok 1 anon-unmap-rollback # {lost}",
        f"anon-unmap-rollback: {lost}",
        "nr_tlb_anon_unmap_batches 6",
        "nr_tlb_anon_unmap_batches_failed 2",
    ])
    assert ktap_exits(out) == {"anon-unmap-rollback": 1}
    # labelled "RUN <written> <read back>", as test_anon_unmap.py's runs are
    by_run = runs("RUN 1 1\n" + out, "anon-unmap-rollback")
    assert by_run == {"1 1": {"exit": 1, "result": None,
                              "errors": [f"anon-unmap-rollback: {lost}"]}}


def test_cases_of_one_program_by_their_names():
    """luf-bound run twice in one boot (test_luf_bound.py), the second run
    failing as it must: each case's exit status by its name."""
    late = ("in 6 of 15 trials LUF released the pages later than --bound-ms 500 "
            "(p50 430 ms, max 1206 ms): every CPU was hogged, the case the bound excludes")
    out = "\n".join([
        "TAP version 13", "1..1",
        'UNFLUSH-RESULT {"experiment":"luf-bound","hog_all":0}',
        "ok 1 luf-bound/hog-one",
        "TAP version 13", "1..1",
        'UNFLUSH-RESULT {"experiment":"luf-bound","hog_all":1}',
        f"not ok 1 luf-bound/hog-all # {late}",
        f"luf-bound: {late}",
    ])
    assert exits(out) == {"hog-one": 0, "hog-all": 1}
    assert ktap_exits(out) == {"luf-bound/hog-one": 0, "luf-bound/hog-all": 1}
    # a kernel without LUF skips either case
    assert exits("ok 1 luf-bound/hog-one # SKIP this kernel has no LUF") == {"hog-one": 4}


def test_a_workload_is_one_test_of_its_program_name():
    """ptrace-poke, the debugger of the LUF checker's tests (stale_reads.poke()):
    one test named as the program, among the counters grepped after it, and
    no mode of a <program>/<mode> test."""
    out = "\n".join([
        "TAP version 13", "1..1",
        "ptrace-poke: 8192 pokes into 8192 pages of 8192 in 60 s",
        "ok 1 ptrace-poke",
        "nr_tlb_luf_folios 5120",
        "nr_tlb_flush_luf_mm 37",
    ])
    assert ktap_exits(out) == {"ptrace-poke": 0}
    assert exits(out) == {}
    died = "not ok 1 ptrace-poke # the word poked at 0x7f00 reads back 0x0, not 0xb0b0000000000001"
    assert ktap_exits(died) == {"ptrace-poke": 1}
