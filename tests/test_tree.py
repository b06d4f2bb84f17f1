"""Kernel trees from a tarball, the series applied with git am, exported back.

These use a tiny stand-in for the Debian tarball, so they run in seconds.
"""

import subprocess
import tarfile

import pytest

from lab import build, cover_letter, paths, tree
from lab.errors import LabError

PATCH_OK = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Test <test@example.org>
Date: Mon, 1 Jan 2024 00:00:00 +0000
Subject: [PATCH 1/2] mm: say hello

---
 mm/hello.c | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/mm/hello.c b/mm/hello.c
--- a/mm/hello.c
+++ b/mm/hello.c
@@ -1 +1 @@
-int hello;
+int hello = 1;
--
2.39.5
"""

PATCH_BAD = PATCH_OK.replace("[PATCH 1/2] mm: say hello", "[PATCH 2/2] mm: conflict") \
    .replace("-int hello;\n+int hello = 1;", "-int goodbye;\n+int goodbye = 2;")


@pytest.fixture
def lab_env(tmp_path, monkeypatch):
    src = tmp_path / "src" / "linux-source-6.12"
    (src / "mm").mkdir(parents=True)
    (src / "Makefile").write_text("VERSION = 6\n")
    (src / "mm" / "hello.c").write_text("int hello;\n")
    # a file the kernel's .gitignore would hide must still be in the tree
    (src / ".gitignore").write_text("*.o\n")
    (src / "mm" / "shipped.o").write_text("shipped\n")
    tarball = tmp_path / "linux-source-6.12.tar.xz"
    with tarfile.open(tarball, "w:xz") as tar:
        tar.add(src, arcname="linux-source-6.12")
    patches = tmp_path / "patches"
    patches.mkdir()
    monkeypatch.setenv("UNFLUSH_KERNEL_TARBALL", str(tarball))
    monkeypatch.setenv("UNFLUSH_WORK", str(tmp_path / "work"))
    monkeypatch.setattr(paths, "PATCHES", patches)
    return patches


def write_series(patches, **files):
    for name, text in files.items():
        (patches / name).write_text(text)
    (patches / "series").write_text("".join(n + "\n" for n in files))


def test_missing_kernel_source(lab_env, monkeypatch, tmp_path):
    monkeypatch.setenv("UNFLUSH_KERNEL_TARBALL", str(tmp_path / "absent.tar.xz"))
    with pytest.raises(LabError, match="kernel source not found.*make setup"):
        tree.ensure_vanilla()


def test_vanilla_is_pristine_commit_with_ignored_files(lab_env):
    t = tree.ensure_vanilla()
    files = tree.git(t, "ls-files").stdout.split()
    assert "mm/shipped.o" in files
    assert tree.git(t, "rev-list", "--count", "vanilla").stdout.strip() == "1"


def test_series_applies_as_commits(lab_env):
    write_series(lab_env, **{"0001-hello.patch": PATCH_OK})
    t = tree.ensure_patched()
    assert (t / "mm" / "hello.c").read_text() == "int hello = 1;\n"
    log = tree.git(t, "log", "--format=%s", "vanilla..HEAD").stdout.split("\n")
    assert log[0] == "mm: say hello"
    assert (tree.vanilla_dir() / "mm" / "hello.c").read_text() == "int hello;\n"


def test_patch_that_does_not_apply_names_the_patch(lab_env):
    write_series(lab_env, **{"0001-hello.patch": PATCH_OK,
                             "0002-conflict.patch": PATCH_BAD})
    with pytest.raises(LabError) as err:
        tree.ensure_patched()
    msg = str(err.value)
    assert "0002-conflict.patch does not apply" in msg
    assert "mm/hello.c" in msg  # git's reason names the file


def test_series_naming_a_missing_file(lab_env):
    (lab_env / "series").write_text("0001-gone.patch\n")
    with pytest.raises(LabError, match="0001-gone.patch.*not in patches"):
        tree.ensure_patched()


def test_export_round_trip_and_unexported_commits(lab_env):
    t = tree.ensure_patched()
    (t / "mm" / "hello.c").write_text("int hello = 3;\n")
    tree.git(t, "commit", "-qam", "mm: three")
    with pytest.raises(LabError, match="not in patches"):
        tree.ensure_patched()
    names = tree.export()
    assert names == ["0001-mm-three.patch"]
    assert (lab_env / "series").read_text() == "0001-mm-three.patch\n"
    assert tree.ensure_patched() == t  # up to date: nothing re-applied
    # a fresh tree from the exported series has the same content
    tree.ensure_patched(force=True)
    subprocess.run(["git", "-C", str(t), "diff", "--exit-code", "HEAD"], check=True)
    assert (t / "mm" / "hello.c").read_text() == "int hello = 3;\n"


def test_export_keeps_the_cover_letter_text_and_renews_its_shortlog(lab_env):
    t = tree.ensure_patched()
    (t / "mm" / "hello.c").write_text("int hello = 3;\n")
    tree.git(t, "commit", "-qam", "mm: three")
    (t / "mm" / "hello.c").write_text("int hello = 4;\n")
    tree.git(t, "commit", "-qam", "mm: four")
    tree.export()
    cover = lab_env / cover_letter.NAME
    # a first export writes git's template, which check-series refuses
    assert "*** SUBJECT HERE ***" in cover.read_text()
    assert cover_letter.problems(cover.read_text(), ["mm: three", "mm: four"])
    assert cover.name not in (lab_env / "series").read_text()

    text = cover.read_text().replace("*** SUBJECT HERE ***", "mm: count to four")
    cover.write_text(text.replace("*** BLURB HERE ***", "Why.\n\nHow."))
    tree.git(t, "commit", "-q", "--amend", "-m", "mm: four, renamed")
    tree.export()
    subject, blurb, count, listed = cover_letter.parse(cover.read_text())
    assert (subject, blurb, count) == ("mm: count to four", "Why.\n\nHow.", 2)
    assert listed == ["mm: three", "mm: four, renamed"]
    assert cover_letter.problems(cover.read_text(), ["mm: three", "mm: four, renamed"]) == []
    # exporting an unchanged tree writes the same bytes
    before = cover.read_bytes()
    tree.export()
    assert cover.read_bytes() == before


def test_export_keeps_the_cover_letter_of_a_series_by_two_authors(lab_env):
    """A commit by another author splits git's shortlog in two groups: the
    cover letter's text must still be found and kept, export after
    export."""
    t = tree.ensure_patched()
    (t / "mm" / "hello.c").write_text("int hello = 3;\n")
    tree.git(t, "commit", "-qam", "mm: three")
    tree.export()
    cover = lab_env / cover_letter.NAME
    text = cover.read_text().replace("*** SUBJECT HERE ***", "mm: count")
    cover.write_text(text.replace("*** BLURB HERE ***", "Why."))
    (t / "mm" / "hello.c").write_text("int hello = 4;\n")
    tree.git(t, "-c", "user.name=Someone Else", "commit", "-qam", "mm: four")
    tree.export()
    tree.export()
    subject, blurb, count, listed = cover_letter.parse(cover.read_text())
    assert (subject, blurb, count) == ("mm: count", "Why.", 2)
    assert listed == ["mm: four", "mm: three"] or listed == ["mm: three", "mm: four"]


def test_uncommitted_changes_are_not_discarded(lab_env):
    t = tree.ensure_patched()
    write_series(lab_env, **{"0001-hello.patch": PATCH_OK})
    (t / "mm" / "hello.c").write_text("int hello = 9;\n")
    with pytest.raises(LabError, match="uncommitted changes"):
        tree.ensure_patched()


def fake_image(variant, release):
    out = build.objdir(variant)
    (out / "arch" / "x86" / "boot").mkdir(parents=True)
    (out / "arch" / "x86" / "boot" / "bzImage").write_bytes(b"")
    (out / "include" / "config").mkdir(parents=True)
    (out / "include" / "config" / "kernel.release").write_text(release + "\n")
    return out


def test_an_image_older_than_its_tree_is_refused(lab_env):
    write_series(lab_env, **{"0001-hello.patch": PATCH_OK})
    tree.ensure_patched()
    out = fake_image("patched", "6.12.117-patched")
    # no record of its sources: built before the lab kept one
    with pytest.raises(LabError, match="older sources.*lab build patched"):
        build.built("patched")
    (out / build.SOURCE_STAMP).write_text(build.source_id("patched"))
    assert build.built("patched").release == "6.12.117-patched"
    # the tree moves on (a new commit, as from new patches): the image is stale
    tree.git(tree.patched_dir(), "commit", "-q", "--allow-empty", "-m", "mm: more")
    with pytest.raises(LabError, match="older sources"):
        build.built("patched")
