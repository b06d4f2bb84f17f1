"""The series' cover letter, patches/0000-cover-letter.patch.

linux-mm reads a series from its cover letter ("[PATCH 00/NN]"): what the
series is for, how it was measured, what is left to do.  The subject and
that text are written by hand and live only in this file.  The shortlog and
the diffstat under them are git's, and `lab export` writes them again from
the patched tree each time, so that they always describe the patches beside
them.  `git am` stops at a mail without a diff, so patches/series does not
list the cover letter and the lab never applies it.
"""

import re
import tempfile
import textwrap
from pathlib import Path

from lab import paths

NAME = "0000-cover-letter.patch"
SUBJECT_HOLE = "*** SUBJECT HERE ***"
BLURB_HOLE = "*** BLURB HERE ***"
_SUBJECT = re.compile(r"\[PATCH 0+/(\d+)\] ?(.*)")
_SHORTLOG = re.compile(r"\S.* \((\d+)\):")


def path():
    return paths.PATCHES / NAME


def _header(text):
    """A mail's header lines, each continuation joined to its line."""
    head = text.partition("\n\n")[0]
    return re.sub(r"\n[ \t]+", " ", head).splitlines()


def patch_subject(text):
    """The commit subject of a format-patch file, without "[PATCH n/m]"."""
    for line in _header(text):
        if line.startswith("Subject: "):
            return re.sub(r"^\[[^\]]*\] ?", "", line[len("Subject: "):])
    return None


def parse(text):
    """The parts of a cover letter: (subject, blurb, number of patches,
    the subjects its shortlog lists).  Any part not found is None."""
    body = text.partition("\n\n")[2]
    subject, count = None, None
    for line in _header(text):
        if line.startswith("Subject: "):
            m = _SUBJECT.match(line[len("Subject: "):])
            if m:
                count, subject = int(m.group(1)), m.group(2)
    lines = body.splitlines()
    for start in range(len(lines)):
        listed = _shortlog(lines, start)
        if listed is not None and len(listed) == count:
            return subject, "\n".join(lines[:start]).strip("\n"), count, listed
    return subject, None, count, None


def _shortlog(lines, start):
    """The subjects of git's shortlog beginning at @lines[start]: one group
    per author ("Name (N):", its N subjects indented, a blank line after),
    or None if no group begins there."""
    listed, i = [], start
    while i < len(lines) and (m := _SHORTLOG.fullmatch(lines[i])):
        group, i = [], i + 1
        while i < len(lines) and lines[i].strip():
            if lines[i].startswith("    ") and group:  # git wraps a long subject
                group[-1] += " " + lines[i].strip()
            else:
                group.append(lines[i].strip())
            i += 1
        if len(group) != int(m.group(1)):
            return None
        listed += group
        i += 1  # the blank line after the group
    return listed if listed else None


def read():
    """(subject, blurb) of the cover letter in patches/, or None."""
    if not path().is_file():
        return None
    subject, blurb, _, _ = parse(path().read_text())
    if subject is None or blurb is None:
        return None
    return subject, blurb


def _fold(line):
    """An email header line folded as git folds it, at 78 columns."""
    return "\n".join(textwrap.wrap(line, width=78, subsequent_indent=" ",
                                   break_long_words=False,
                                   break_on_hyphens=False))


def write(tree, rev_range, git, kept):
    """Write patches/0000-cover-letter.patch for @rev_range of @tree.

    @kept is read()'s (subject, blurb) from before the export, or None for
    git's template, whose "*** ... ***" holes check-series refuses.  Sender
    and date are the last commit's author and date, so that exporting an
    unchanged tree gives the same bytes.
    """
    ident = git(tree, "log", "-1", "--format=%an%n%ae%n%ad", "--date=raw",
                "HEAD").stdout.splitlines()
    env = {"GIT_COMMITTER_NAME": ident[0], "GIT_COMMITTER_EMAIL": ident[1],
           "GIT_COMMITTER_DATE": ident[2]}
    with tempfile.TemporaryDirectory() as tmp:
        git(tree, "format-patch", "--no-signature", "--zero-commit",
            "--cover-letter", "-o", tmp, rev_range, env=env)
        text = (Path(tmp) / NAME).read_text()
    if kept:
        subject, blurb = kept
        text = re.sub(r"^Subject: (\[PATCH [^\]]*\]) \*\*\* SUBJECT HERE \*\*\*$",
                      lambda m: _fold(f"Subject: {m.group(1)} {subject}"),
                      text, count=1, flags=re.M)
        text = text.replace(BLURB_HOLE, blurb, 1)
    path().write_text(text)


def problems(text, subjects, base=None):
    """What is wrong with a cover letter for a series whose commits have
    @subjects, in order, tested on the Debian package version @base (an
    empty list: nothing)."""
    subject, blurb, count, listed = parse(text)
    found = []
    if subject is None:
        found.append("no \"Subject: [PATCH 00/NN]\" line")
    elif SUBJECT_HOLE in subject:
        found.append("the subject is still git's placeholder")
    if blurb is None:
        found.append("no shortlog of the series")
    elif BLURB_HOLE in blurb or not blurb.strip():
        found.append("the text is still git's placeholder")
    else:
        long = [n for n, line in enumerate(blurb.splitlines(), 1) if len(line) > 72]
        if long:
            found.append(f"{len(long)} lines of its text are longer than 72 "
                         f"columns (the first is its line {long[0]})")
        if base and base not in blurb:
            found.append(f"its text does not name the base it was tested on, "
                         f"{base} (patches/base-version)")
    if count is not None and count != len(subjects):
        found.append(f"it announces {count} patches, the series has {len(subjects)}")
    if listed is not None and listed != subjects:
        found.append("its shortlog is not the series' subjects: `make export` "
                     "writes it again")
    return found


def check(files, base):
    """problems() of the cover letter in patches/ for the patch files
    @files, in order, tested on @base."""
    if not path().is_file():
        return ["missing"]
    subjects = [patch_subject(f.read_text()) for f in files]
    return problems(path().read_text(), subjects, base)
