"""Every relative link of the README and of docs/ leads to a file that is there.

A Markdown link `[text](target)` or image `![alt](target)` in README.md or
in a Markdown file under docs/ whose target is a path (not an http(s) or
mailto address, not a bare `#anchor`) must name, without its `#fragment`,
a file or folder of the repository: one git tracks, or would track (new,
not ignored).  A target below build/ or results/, which git ignores, is a
link to a file that only the machine that ran the lab has.  Links inside
code (fenced blocks and `inline code`) are text, not links.
"""

import re
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from lab import paths

FENCE = re.compile(r"^ {0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) or ![alt](target), with an optional "title"; <target> too
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def links(text):
    """(line number, target) of each link of Markdown @text, outside code."""
    in_fence = None
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            if in_fence is None:
                in_fence = fence.group(1)
            elif fence.group(1) == in_fence:
                in_fence = None
            continue
        if in_fence:
            continue
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            yield number, m.group(1).strip("<>")


def repository_files(root):
    """The files git tracks or would track (untracked but not ignored),
    relative to @root."""
    proc = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached",
                           "--others", "--exclude-standard"],
                          capture_output=True, text=True, check=True)
    return {Path(p) for p in proc.stdout.split("\0") if p and (root / p).is_file()}


def with_folders(files):
    """@files and every folder that holds one."""
    return set(files) | {d for f in files for d in f.parents}


def dead_links(root, documents, present):
    """`document:line: target` of each relative link of @documents (paths
    relative to @root) that leads to nothing in @present."""
    dead = []
    for doc in documents:
        for number, target in links((root / doc).read_text()):
            if EXTERNAL.match(target) or target.startswith("#"):
                continue
            path = urllib.parse.unquote(target.split("#", 1)[0])
            resolved = (root / doc).parent / path
            try:
                relative = Path(resolved.resolve().relative_to(root.resolve()))
            except ValueError:
                relative = None  # leads out of the repository
            if relative is None or relative not in present:
                dead.append(f"{doc}:{number}: {target}")
    return dead


def test_no_dead_relative_link_in_the_readme_or_docs():
    files = repository_files(paths.ROOT)
    docs = sorted(f for f in files if f == Path("README.md")
                  or (f.parts[0] == "docs" and f.suffix == ".md"))
    assert Path("README.md") in docs and len(docs) > 10, docs
    dead = dead_links(paths.ROOT, docs, with_folders(files))
    assert not dead, "links to files that are not in the repository:\n" + "\n".join(dead)


SAMPLE = """\
# A page

See [the plan](plan.md), [its part](plan.md#part), [a folder](sub/) and
![a plot](missing.png), [gone](sub/gone.md#x), [out](../../etc/passwd),
[web](https://example.org/x.md), [mail](mailto:a@b), [here](#a-page),
[titled](plan.md "The plan"), [angled](<sub/page.md>).

`[code](not-a-link.md)` is text, and so is

```
[fenced](not-a-link-either.md)
```
"""


@pytest.fixture
def sample_repo(tmp_path):
    root = tmp_path / "repo"
    (root / "docs/sub").mkdir(parents=True)
    (root / "docs/page.md").write_text(SAMPLE)
    (root / "docs/plan.md").write_text("# plan\n")
    (root / "docs/sub/page.md").write_text("[back](../plan.md), [ignored](../../build/x.png)\n")
    (root / ".gitignore").write_text("/build/\n")
    (root / "build").mkdir()
    (root / "build/x.png").write_text("made by a run\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_the_checker_finds_each_kind_of_dead_link_and_only_those(sample_repo):
    present = with_folders(repository_files(sample_repo))
    docs = [Path("docs/page.md"), Path("docs/sub/page.md")]
    assert dead_links(sample_repo, docs, present) == [
        "docs/page.md:4: missing.png",
        "docs/page.md:4: sub/gone.md#x",
        "docs/page.md:4: ../../etc/passwd",
        "docs/sub/page.md:1: ../../build/x.png",  # there, but git ignores it
    ]
