"""`lab check-series`: what linux-mm asks of every patch before review.

For each patch of patches/series, in order (cover and rst: once, for the
series as a whole):

  checkpatch  scripts/checkpatch.pl --strict on the patch file (from the
              patched tree, so the script matches the kernel): no error,
              warning or check;
  cover       patches/0000-cover-letter.patch has a subject and text of
              its own, not git's placeholders, no line of that text over
              72 columns, the text names patches/base-version, and its
              "[PATCH 00/NN]" and shortlog are those of the series
              (lab/cover_letter.py);
  width       no line a patch adds to prose (Documentation/, Kconfig
              help) is wider than 80 columns, tabs at 8: checkpatch allows
              100 everywhere, reviewers of documentation expect 80; table
              rows and URLs aside, which cannot be wrapped;
  kconfig     every CONFIG_ symbol a patch's added lines name is defined
              by a Kconfig file of the tree at that patch: no patch refers
              to an option a later patch adds (--builds also runs the
              kernel's scripts/checkkconfigsymbols.py over the series);
  rst         every reStructuredText file the series adds or changes
              parses without a docutils warning, as `make htmldocs` would
              (Sphinx's own roles and directives aside, which plain
              docutils does not know);
  builds      (with --builds) the tree at that patch builds a bzImage with
              the options of config/series.config and of
              config/series-debug.config (the LUF checker, the KUnit
              test) on, and again with them all off, so that no patch
              depends on a later one and the series compiles out cleanly;
              with --arch arm64, an arm64 Image of each (config/arm64.config
              too, cross-built), where the options the architecture cannot
              have yet at that patch (LUF before arm64 supports it) fall
              away as Kconfig drops them;
  configs     (with --configs) the whole series builds, with no warning,
              in each configuration of config/matrix/: SMP, swap, THP,
              NUMA, migration or the counters off, everything that calls
              into LUF on, i386 and arm64 (lab/series_configs.py).

The builds run in build/series-check, a detached worktree moved from commit
to commit, with one object directory per setting one level below it: kbuild
then sees the same relative paths as in the lab's other trees and ccache
serves every object a patch does not touch.
"""

import io
import os
import re
import shutil
import subprocess
from pathlib import Path

from lab import arches, build, cover_letter, paths, series_configs, tree
from lab.errors import LabError
from lab.progress import say

TOTAL = re.compile(r"total: (\d+) errors, (\d+) warnings, (?:(\d+) checks, )?\d+ lines")


def checkpatch(patch, src):
    """(ok, summary line) of checkpatch --strict for one patch file."""
    script = src / "scripts" / "checkpatch.pl"
    # checkpatch runs python's spdxcheck: it needs python3-ply, and finds the
    # interpreter on PATH (the system one, where apt installed ply)
    env = dict(os.environ, PATH="/usr/bin:" + os.environ.get("PATH", ""))
    proc = subprocess.run(["perl", str(script), "--strict", "--no-color", str(patch)],
                          cwd=src, capture_output=True, text=True, env=env)
    out = proc.stdout + proc.stderr
    m = TOTAL.search(out)
    if not m:
        raise LabError(f"checkpatch gave no verdict for {patch.name}: "
                       f"{out.strip().splitlines()[-1:] or 'no output'}")
    problems = [ln for ln in out.splitlines()
                if ln.startswith(("ERROR:", "WARNING:", "CHECK:"))]
    ok = proc.returncode == 0 and not problems
    return ok, m.group(0) + ("" if ok else ": " + "; ".join(problems[:3]))


PROSE_WIDTH = 80
# files whose added lines are prose, wrapped by hand
PROSE_FILE = re.compile(r"^(Documentation/.*|(.*/)?Kconfig(\.\w+)?)$")
# rst table rows and borders, and links: wrapping would break them
UNWRAPPABLE = re.compile(r"^\s*([|+]|=+( +=+)*\s*$)|://")


def wide_prose_lines(text):
    """("file:+N", width) of every line the patch `text` adds to a prose
    file wider than PROSE_WIDTH columns; N counts the lines the patch adds
    to that file."""
    wide = []
    name, added = None, 0
    for line in text.splitlines():
        if line.startswith("+++ "):
            path = line[4:].removeprefix("b/")
            name, added = (path if PROSE_FILE.match(path) else None), 0
        elif line.startswith("+") and name:
            added += 1
            body = line[1:]
            width = len(body.expandtabs(8))
            if width > PROSE_WIDTH and not UNWRAPPABLE.search(body):
                wide.append((f"{name}:+{added}", width))
    return wide


# docutils' report lines: "<file>:<line>: (LEVEL/n) message"
RST_REPORT = re.compile(r"^(\S+?):(\d+): \(\w+/\d\) (.*)$")
# Sphinx adds these (toctree, :ref:, :doc:, ...); make htmldocs resolves them
SPHINX_ONLY = re.compile(r'^Unknown (directive type|interpreted text role) "')


def rst_problems(text, name):
    """docutils' warnings and errors for one reStructuredText file, as
    "name:line: message", less what only Sphinx knows."""
    import docutils.core  # deps.PY_PACKAGES: lab setup installs it

    report = io.StringIO()
    docutils.core.publish_doctree(
        text, source_path=name,
        settings_overrides={"warning_stream": report, "report_level": 2,
                            "halt_level": 5})
    problems = []
    for line in report.getvalue().splitlines():
        m = RST_REPORT.match(line)
        if m and not SPHINX_ONLY.match(m.group(3)):
            problems.append(f"{m.group(1)}:{m.group(2)}: {m.group(3)}")
    return problems


def series_rst(src):
    """The .rst files the series adds or changes, as it leaves them."""
    out = tree.git(src, "diff", "--name-only", "--diff-filter=AM",
                   f"{tree.BASE_TAG}..HEAD", "--", "*.rst").stdout
    return out.split()


# the series' own options: the mechanisms, and the debug options only the
# debug kernel turns on (otherwise the checker would be built at its patch
# by no one)
SERIES_FRAGMENTS = ("series.config", "series-debug.config")


def series_options():
    """The CONFIG_ names the SERIES_FRAGMENTS set."""
    names = build.wanted_options([paths.CONFIG / f for f in SERIES_FRAGMENTS])
    return sorted(names)


def off_fragment(out):
    """A fragment that turns every series option off, written into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    frag = out / "series-off.config"
    frag.write_text("".join(f"# {name} is not set\n" for name in series_options()))
    return frag


def defined_options(src, names):
    """Those of `names` that a Kconfig file of `src` defines."""
    bare = "|".join(re.escape(n.removeprefix("CONFIG_")) for n in names)
    out = tree.git(src, "grep", "-h", "-E", rf"^\s*(menu)?config ({bare})\s*$",
                   "--", "*Kconfig*", check=False).stdout
    found = {"CONFIG_" + line.split()[-1] for line in out.splitlines()}
    return [n for n in names if n in found]


def on_fragment(src, out):
    """The SERIES_FRAGMENTS, less what `src` does not define yet, written
    into `out`: a patch is built with the series options it has so far (the
    first has no CONFIG_LUF, and Kconfig would silently drop it)."""
    out.mkdir(parents=True, exist_ok=True)
    have = set(defined_options(src, series_options()))
    lines = [line for f in SERIES_FRAGMENTS
             for line in (paths.CONFIG / f).read_text().splitlines()]
    kept = []
    for line in lines:
        m = build.CONFIG_LINE.match(line.strip())
        if m and (m.group(1) or m.group(3)) not in have:
            continue
        kept.append(line)
    frag = out / "series-on.config"
    frag.write_text("\n".join(kept) + "\n")
    return frag


CONFIG_DEF = re.compile(r"^\s*(?:menu)?config\s+(\w+)\s*$", re.M)
CONFIG_REF = re.compile(r"\bCONFIG_(\w+)")


def kconfig_defined(src, commit):
    """The symbols a Kconfig file of `src` at `commit` defines."""
    proc = subprocess.run(["git", "grep", "-h", "-E", r"^\s*(menu)?config\s", commit,
                           "--", ":(glob)**/Kconfig*"],
                          cwd=src, capture_output=True, text=True)
    return set(CONFIG_DEF.findall(proc.stdout))


def kconfig_references(patch_text):
    """The CONFIG_ symbols the lines a patch adds name (IS_ENABLED's
    _MODULE twins counted as the option itself)."""
    refs = set()
    for ln in patch_text.splitlines():
        if ln.startswith("+") and not ln.startswith("+++"):
            refs |= {re.sub(r"_MODULE$", "", m) for m in CONFIG_REF.findall(ln)}
    return refs


def undefined_options(src, files):
    """(patch name, sorted symbols) for each patch that names an option no
    Kconfig file defines at that patch, though 6.12 or the series does
    (a symbol defined nowhere, e.g. in an example, is the checkpatch's
    and the reviewer's business, not an ordering mistake)."""
    shas = [sha for sha, _ in commits(src)]
    if len(shas) != len(files):
        raise LabError(f"build/patched has {len(shas)} commits and patches/series "
                       f"{len(files)} patches: run `python3 -m lab tree`")
    somewhere = kconfig_defined(src, shas[-1]) | kconfig_defined(src, tree.BASE_TAG)
    out = []
    for patch, sha in zip(files, shas, strict=True):
        refs = kconfig_references(patch.read_text()) & somewhere
        missing = sorted(refs - kconfig_defined(src, sha))
        if missing:
            out.append((patch.name, missing))
    return out


def checkkconfigsymbols(wt, src):
    """The kernel's scripts/checkkconfigsymbols.py over the whole series
    (--diff base..tip), in the detached worktree `wt`, which it resets from
    one commit to the other: the symbols the series leaves undefined."""
    tip = commits(src)[-1][0]
    tree.git(wt, "checkout", "-q", "--detach", tip)
    proc = subprocess.run(["python3", "scripts/checkkconfigsymbols.py", "--no-color",
                           "--diff", f"{tree.BASE_TAG}..{tip}"],
                          cwd=wt, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LabError("scripts/checkkconfigsymbols.py failed: "
                       + (proc.stderr.strip().splitlines() or ["no output"])[-1])
    return [ln for ln in proc.stdout.splitlines() if ln and not ln.startswith(
        ("Referencing files", "Similar symbols"))]


def worktree():
    """build/series-check, detached; made on first use."""
    wt = paths.work_dir() / "series-check"
    if not (wt / ".git").exists():
        if wt.exists():
            shutil.rmtree(wt)
        tree.git(tree.vanilla_dir(), "worktree", "prune")
        tree.git(tree.vanilla_dir(), "worktree", "add", "-q", "--detach", str(wt),
                 tree.BASE_TAG)
    return wt


def commits(src):
    """(sha, subject) of the commits of the patched tree `src` (made from
    patches/ by tree.ensure_patched()), oldest first."""
    log = tree.git(src, "log", "--reverse", "--format=%H %s",
                   f"{tree.BASE_TAG}..HEAD").stdout.splitlines()
    return [tuple(line.split(" ", 1)) for line in log]


def build_each(src, jobs=None, first=1, arch=arches.HOST):
    """Build every commit of `src` from the `first`-th on with the series
    options on and off, for `arch`; stop at the first failure with the
    patch's subject in the message."""
    wt = worktree()
    base = [paths.CONFIG / "lab.config"]
    make_args, compiler, target, suffix = (), "gcc", "bzImage", ""
    if arch != arches.HOST:
        make_args, compiler = build.cross_tools(f"patched-{arch}")
        base.append(paths.CONFIG / f"{arch}.config")
        target, suffix = Path(arches.ARCHES[arch].image).name, f"-{arch}"
    off = off_fragment(wt / f".o-off{suffix}")
    results = []
    for i, (sha, subject) in enumerate(commits(src), 1):
        if i < first:
            continue
        tree.git(wt, "checkout", "-q", "--detach", sha)
        # "on" depends on what the tree at this patch defines, "off" does not
        settings = {"on": base + [on_fragment(wt, wt / f".o-on{suffix}")],
                    "off": base + [off]}
        for name, frags in settings.items():
            out = wt / f".o-{name}{suffix}"
            say(f"check-series: {i} {subject[:60]} (options {name}, {arch})")
            # on another architecture only its own fragments must hold: the
            # series' options arrive there with the patch that supports them
            build.configure_dir(wt, out, frags, make_args,
                                checked=None if not suffix or name == "off" else base)
            try:
                build.compile_dir(wt, out, f"check-{name}{suffix}", jobs, target=target,
                                  make_args=make_args, compiler=compiler)
            except LabError as err:
                raise LabError(f"patch {i} ({subject}) does not build for {arch} with "
                               f"the series options {name}: {err}") from None
            results.append((i, subject, name))
    return results


def run(builds=False, jobs=None, first=None, configs=None, arch=None):
    if first is not None and not builds:
        raise LabError("check-series --from N chooses where the builds start: "
                       "give it with --builds", exit_code=2)
    if arch is not None and not builds:
        raise LabError("check-series --arch chooses what the builds are for: "
                       "give it with --builds", exit_code=2)
    arch = arch or arches.HOST
    if arch != arches.HOST:
        if arch not in arches.ARCHES:
            raise LabError(f"check-series --arch {arch}: choose from "
                           f"{', '.join(arches.ARCHES)}", exit_code=2)
        build.cross_tools(f"patched-{arch}")
    # bad names and missing compilers before the rest
    names = None if configs is None else series_configs.select_buildable(configs)
    first = 1 if first is None else first
    src = tree.ensure_patched()
    files = tree.series_files()
    if not files:
        raise LabError("patches/series is empty: nothing to check")
    if not 1 <= first <= len(files):
        raise LabError(f"check-series --from {first}: the series has patches 1 to "
                       f"{len(files)}; give one of those", exit_code=2)
    failed = []
    for i, patch in enumerate(files, 1):
        ok, summary = checkpatch(patch, src)
        say(f"check-series: checkpatch {i}/{len(files)} {patch.name}: "
            f"{'ok' if ok else 'FAILED'}, {summary}")
        wide = wide_prose_lines(patch.read_text())
        if wide:
            say(f"check-series: width {patch.name}: FAILED, {len(wide)} prose lines "
                f"over {PROSE_WIDTH} columns: "
                + ", ".join(f"{where} ({width})" for where, width in wide[:3]))
        if not ok or wide:
            failed.append(patch.name)
    for name, missing in undefined_options(src, files):
        say(f"check-series: kconfig {name}: FAILED, names {', '.join(missing)}, "
            f"which no Kconfig file defines at that patch")
        failed.append(name)
    wrong = cover_letter.check(files, tree.recorded_base_version())
    say(f"check-series: cover letter {cover_letter.NAME}: "
        f"{'ok' if not wrong else 'FAILED, ' + '; '.join(wrong)}")
    if wrong:
        failed.append(cover_letter.NAME)
    for name in series_rst(src):
        problems = rst_problems((src / name).read_text(), name)
        say(f"check-series: rst {name}: "
            f"{'ok' if not problems else 'FAILED, ' + '; '.join(problems[:3])}")
        if problems:
            failed.append(name)
    if builds:
        say("check-series: scripts/checkkconfigsymbols.py over the series "
            "(a few minutes)")
        undefined = checkkconfigsymbols(worktree(), src)
        say("check-series: checkkconfigsymbols: "
            + ("ok" if not undefined else "FAILED, undefined: " + ", ".join(undefined)))
        if undefined:
            failed.append("checkkconfigsymbols")
        done = build_each(src, jobs, first, arch)
        say(f"check-series: {len(done)} builds passed for {arch} "
            f"(patches {first} to {len(files)} x options on and off)")
    if names is not None:
        series_configs.build_all(names, jobs)
        say(f"check-series: the series builds in {len(names)} configuration"
            f"{'' if len(names) == 1 else 's'} of config/matrix/ with no warning: "
            f"{', '.join(names)}")
    if failed:
        raise LabError(f"checkpatch --strict, the width check, the Kconfig check, "
                       f"docutils or the cover letter check "
                       f"complains about {', '.join(failed)}: fix them in "
                       f"build/patched (the cover letter's text in patches/) "
                       f"and `make export`")
    return 0
