"""`lab check-series`: checkpatch --strict on every patch of the series,
its reStructuredText files read by docutils, and its cover letter.

The series itself is checked here, with the checkpatch.pl of the patched
tree `make test` has just built; so is a patch written badly on purpose,
so the check is seen to fail.  Building every patch with the options on
and off (`--builds`) takes too long for CI and is run by hand before
export (README, "Working on the series").
"""

import re
import subprocess

import pytest

from lab import cover_letter, paths, series_check, tree
from lab.errors import LabError

# Its trailing blanks, which checkpatch must find, are written \x20: an editor
# that strips trailing whitespace would take them away unseen.
BAD = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: unflush developers <unflush@example.org>
Date: Sun, 22 Nov 2026 08:00:00 +0000
Subject: [PATCH] mm: a badly written patch

Signed-off-by: unflush developers <unflush@example.org>
---
 mm/memory.c | 1 +
 1 file changed, 1 insertion(+)

diff --git a/mm/memory.c b/mm/memory.c
--- a/mm/memory.c
+++ b/mm/memory.c
@@ -92,6 +92,7 @@
 #include "pgalloc-track.h"
 #include "internal.h"
 #include "swap.h"
+int  unflush_bad_style=1;\x20
\x20
 #if defined(LAST_CPUPID_NOT_IN_PAGE_FLAGS) && !defined(CONFIG_COMPILE_TEST)
 #warning Unfortunate NUMA and NUMA Balancing config, growing page-frame for last_cpupid.
"""


@pytest.fixture(scope="module")
def src():
    return tree.ensure_patched()


@pytest.mark.needs_kernel
@pytest.mark.parametrize("patch", tree.series_files(), ids=lambda p: p.name[:40])
def test_every_patch_of_the_series_is_checkpatch_strict_clean(src, patch):
    ok, summary = series_check.checkpatch(patch, src)
    assert ok, summary


@pytest.mark.needs_kernel
def test_a_badly_written_patch_is_refused(src, tmp_path):
    bad = tmp_path / "0001-bad.patch"
    bad.write_text(BAD)
    ok, summary = series_check.checkpatch(bad, src)
    assert not ok
    assert "ERROR:" in summary and "trailing whitespace" in summary.lower()


WIDE = """\
diff --git a/Documentation/mm/x.rst b/Documentation/mm/x.rst
--- a/Documentation/mm/x.rst
+++ b/Documentation/mm/x.rst
@@ -1,2 +1,7 @@
 context
+a line of prose that somebody inserted into a paragraph without wrapping it again
+| a table row, which cannot be wrapped, even when it is quite as wide as this one is |
+See https://lore.kernel.org/linux-mm/a-long-message-id-that-cannot-be-wrapped@example/
+======== ================================================================================
diff --git a/mm/Kconfig b/mm/Kconfig
--- a/mm/Kconfig
+++ b/mm/Kconfig
@@ -1,1 +1,3 @@
+\t  help text indented by a tab: 80 columns wide when the tab counts as 8.
+\t  help text indented by a tab: 81 columns wide, when the tab counts as 8.
diff --git a/mm/rmap.c b/mm/rmap.c
--- a/mm/rmap.c
+++ b/mm/rmap.c
@@ -1,1 +1,2 @@
+\tpr_warn("code is checkpatch's to judge, up to 100 columns, and not this check\n");
"""


def test_every_patch_of_the_series_wraps_its_prose_at_80_columns():
    for patch in tree.series_files():
        assert series_check.wide_prose_lines(patch.read_text()) == [], patch.name


def test_a_prose_line_wider_than_80_columns_is_refused():
    # the unwrapped paragraph line and the Kconfig line one column too wide;
    # not the table, the link, the rst border, the 80-column line or the code
    assert series_check.wide_prose_lines(WIDE) == [
        ("Documentation/mm/x.rst:+1", 81), ("mm/Kconfig:+2", 81)]


# A mistake patch 0014 once had: a continuation line indented
# one space less than its list item's text.
BAD_RST = """\
Title
=====

- *uprobes*: the PTE is replaced with ``ptep_clear_flush()``
 , flushing (mm, addr) in the probed mm.
- *KSM*: the merged contents are identical.

.. toctree::
   :maxdepth: 1

   other
"""


@pytest.mark.needs_kernel
def test_every_rst_file_of_the_series_parses_cleanly(src):
    names = series_check.series_rst(src)
    assert "Documentation/mm/luf.rst" in names
    for name in names:
        assert series_check.rst_problems((src / name).read_text(), name) == [], name


def test_a_badly_indented_rst_is_refused():
    problems = series_check.rst_problems(BAD_RST, "bad.rst")
    # the indentation is reported with its line; Sphinx's toctree is not
    assert problems and all(p.startswith("bad.rst:") for p in problems)
    assert any("unexpected unindent" in p for p in problems)
    assert not any("toctree" in p for p in problems)


def test_the_cover_letter_describes_the_series():
    files, base = tree.series_files(), tree.recorded_base_version()
    assert cover_letter.check(files, base) == []
    # a new base without the text saying so is refused
    assert any("base" in p for p in cover_letter.check(files, base + "+1"))


def test_a_cover_letter_out_of_step_with_the_series_is_refused():
    subjects = [cover_letter.patch_subject(p.read_text()) for p in tree.series_files()]
    text = cover_letter.path().read_text()
    problems = cover_letter.problems(text, subjects[:-1])
    assert any("announces" in p for p in problems)
    assert any("shortlog" in p for p in problems)
    template = re.sub(r"^Subject: .*(\n .*)*",
                      f"Subject: [PATCH 00/{len(subjects)}] {cover_letter.SUBJECT_HOLE}",
                      text, count=1, flags=re.M)
    assert any("placeholder" in p for p in cover_letter.problems(template, subjects))
    wide = text.replace("\n\n", "\n\n" + "x" * 73 + "\n", 2)
    assert any("longer than 72" in p for p in cover_letter.problems(wide, subjects))


def test_off_fragment_turns_every_series_option_off(tmp_path):
    frag = series_check.off_fragment(tmp_path)
    names = series_check.series_options()
    assert "CONFIG_TLB_BATCHING_SWITCHES" in names
    # the checker is built patch by patch too, not only in the debug kernel
    assert "CONFIG_DEBUG_LUF" in names
    assert frag.read_text().splitlines() == [f"# {n} is not set" for n in names]
    assert (paths.CONFIG / "series.config").exists()


def test_on_fragment_keeps_only_the_options_a_patch_defines(tmp_path):
    # A tree that defines the switches but not yet CONFIG_LUF, as at patch 1.
    src = tmp_path / "src"
    (src / "mm").mkdir(parents=True)
    (src / "mm" / "Kconfig").write_text(
        "config TLB_BATCHING_SWITCHES\n\tbool \"switches\"\n")
    tree.git(src.parent, "init", "-q", str(src))
    tree.git(src, "add", "mm/Kconfig")
    frag = series_check.on_fragment(src, tmp_path / "out")
    text = frag.read_text()
    assert "CONFIG_TLB_BATCHING_SWITCHES=y" in text.splitlines()
    assert "CONFIG_LUF" not in text
    assert series_check.defined_options(src, ["CONFIG_LUF"]) == []


@pytest.mark.needs_kernel
@pytest.mark.parametrize("builds, first, message", [
    (False, 3, "give it with --builds"),
    (True, 0, "the series has patches 1 to"),
    (True, len(tree.series_files()) + 1, "the series has patches 1 to"),
])
def test_a_bad_first_patch_is_refused_before_any_work(src, builds, first, message):
    # refused before checkpatch runs or anything is built
    with pytest.raises(LabError, match=message):
        series_check.run(builds=builds, first=first)


@pytest.mark.parametrize("builds, arch, message", [
    (False, "arm64", "give it with --builds"),
    (True, "riscv", "choose from x86-64, arm64"),
])
def test_a_bad_arch_is_refused_before_any_work(builds, arch, message):
    # refused before the tree is made: a fast test has no kernel source
    with pytest.raises(LabError, match=message):
        series_check.run(builds=builds, arch=arch)


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


def test_a_patch_naming_an_option_a_later_patch_adds_is_refused(tmp_path):
    """The first patch uses CONFIG_FOO_DEBUG, which only the second patch's
    Kconfig defines: the first is named; the second, and the base's own
    options, are not."""
    repo = tmp_path / "tree"
    (repo / "mm").mkdir(parents=True)
    (repo / "mm" / "Kconfig").write_text("config FOO\n\tbool \"foo\"\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    _git(repo, "tag", tree.BASE_TAG)
    patches = []
    for name, path, text in [
            ("0001-use.patch", "mm/foo.c",
             "#ifdef CONFIG_FOO_DEBUG\n#endif\n#if IS_ENABLED(CONFIG_FOO)\n#endif\n"),
            ("0002-define.patch", "mm/Kconfig",
             "config FOO\n\tbool \"foo\"\nconfig FOO_DEBUG\n\tbool \"debug\"\n")]:
        (repo / path).write_text(text)
        _git(repo, "add", path)
        _git(repo, "commit", "-qm", name)
        patch = tmp_path / name
        patch.write_text("".join(f"+{ln}\n" for ln in text.splitlines()))
        patches.append(patch)
    assert series_check.undefined_options(repo, patches) == [
        ("0001-use.patch", ["FOO_DEBUG"])]
