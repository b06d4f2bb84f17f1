"""The lab's Python is clean for the linter pyproject.toml configures.

ruff, at the version lab/deps.py pins (`make setup` installs it), checks
every Python file of the repository that git does not ignore; and a file
with a bug of each kind the configuration selects is seen to fail, so the
configuration is the one in force.
"""

import importlib.metadata
import subprocess
import sys

import pytest

from lab import deps, paths

# one finding of each selected set: F401 F821 E711 W605 B006 PLE0101
BUGGY = r'''import os


class Pattern:
    def __init__(self, items=[]):
        self.digits = "\d+"
        if items == None:
            return undefined
'''


def ruff(*args, **kwargs):
    try:
        version = importlib.metadata.version("ruff")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("ruff is not installed: run `make setup`")
    if version != deps.RUFF_VERSION:
        pytest.fail(f"ruff {version} is installed, lab/deps.py pins "
                    f"{deps.RUFF_VERSION}: run `make setup`")
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache",
                           "--output-format", "concise", *args], cwd=paths.ROOT,
                          capture_output=True, text=True, **kwargs)


def test_the_python_of_the_repository_is_lint_clean():
    proc = ruff(".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_file_with_bugs_is_refused():
    # as if it were in lab/: the repository's configuration applies
    proc = ruff("--stdin-filename", "lab/buggy.py", "-", input=BUGGY)
    assert proc.returncode == 1, proc.stderr
    for rule in ("F401", "F821", "E711", "W605", "B006", "PLE0101"):
        assert rule in proc.stdout, f"{rule} not reported:\n{proc.stdout}"
