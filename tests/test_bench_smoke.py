"""The whole benchmark suite in its quick form, on vanilla and patched.

A smoke test: every experiment runs and its set-up check holds (folio
sizes, swap reached, pages migrated, reclaim happened, hugetlb pages
allocated).  Speed is the report's business, not a test's.

llama-tiering is left out: its cold llama.cpp build and three quick boots
take longer than CI's budget leaves; its own tests cover the models and
its arguments, and `python3 -m lab bench --quick -e llama-tiering` runs it.
"""

import json
import subprocess
import sys

import pytest

from lab import paths, suite

pytestmark = pytest.mark.vm


# llama-tiering needs its own long run; ro-reclaim is ro-reclaim-tiering's
# program without node 1, which the smoke run has in that experiment
SLOW = ("llama-tiering", "ro-reclaim")


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
