"""The whole benchmark suite in its quick form, on vanilla and patched.

A smoke test: every experiment runs and its set-up check holds (folio
sizes, swap reached, pages migrated, reclaim happened, hugetlb pages
allocated, llama.cpp's inferences under reclaim and demotion).  Speed is
the report's business, not a test's.

llama-tiering needs llama.cpp, built once per version: `make test` builds
it at idle priority beside the tests (564 s in docs/results/make-test-cold),
and the bench waits for that build if it gets there first.  Its
three quick boots take about 45 s each.
"""

import json
import subprocess
import sys

import pytest

from lab import paths, suite

pytestmark = pytest.mark.vm


# ro-reclaim is ro-reclaim-tiering's program without node 1, which the
# smoke run has in that experiment
SLOW = ("ro-reclaim",)


def test_quick_suite_runs_with_set_up_checks_holding(tmp_path):
    out = tmp_path / "results"
    chosen = [e for e in suite.EXPERIMENTS if e.id not in SLOW]
    picks = [arg for e in chosen for arg in ("-e", e.id)]
    proc = subprocess.run([sys.executable, "-m", "lab", "bench", "--quick", "--no-build",
                           "-o", str(out), *picks], cwd=paths.ROOT, stderr=subprocess.PIPE,
                          text=True)
    tail = "\n".join(proc.stderr.splitlines()[-15:])
    assert proc.returncode == 0, tail
    doc = json.loads((out / "results.json").read_text())
    assert doc["failures"] == []
    for exp in chosen:
        ids = [k for k in doc["experiments"] if suite.owner(k) is exp]
        assert ids, f"no result for {exp.id}"
        for key in ids:
            configs = doc["experiments"][key]
            assert {"vanilla", "patched"} <= set(configs), key
            for reps in configs.values():
                assert all(not r["missing"] for r in reps), key
    assert (out / "report.md").read_text().count("\n## ") >= len(chosen)
