"""Kernel source trees: pristine Debian 6.12 as a git commit, our series on top.

build/vanilla  git repository; its only commit is the untarred Debian source,
               tagged `vanilla`.  Never modified after creation.
build/patched  a worktree of the same repository on branch `unflush`: the
               vanilla commit plus patches/ applied with `git am`.
build/broken   generated worktrees: patched + patches/testing/ (a kernel
build/arm64-*  broken on purpose); vanilla, patched or broken +
               patches/arm64-lab/ (what the arm64 kernels need to boot the
               lab's machine, vanilla's too).

Developers edit and commit in build/patched and run `lab export` to write the
commits back to patches/.  A stamp file remembers which series (by hash) and
which HEAD the tree was made from, so the tree is only re-made when patches/
changed, and never when it holds commits that were not exported yet.
"""

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from lab import cover_letter, paths
from lab.errors import LabError
from lab.progress import Progress, say

DEB_PACKAGE = "linux-source-6.12"
BRANCH = "unflush"
BASE_TAG = "vanilla"
IDENTITY = ["-c", "user.name=unflush lab", "-c", "user.email=unflush@example.org"]


def vanilla_dir() -> Path:
    return paths.work_dir() / "vanilla"


def patched_dir() -> Path:
    return paths.work_dir() / "patched"


def broken_dir() -> Path:
    return paths.work_dir() / "broken"


def git(tree, *args, check=True, env=None):
    """Run git in `tree`, with `env` added to the environment; on failure
    raise with git's own first error line."""
    proc = subprocess.run(["git", "-C", str(tree), *IDENTITY, *args],
                          capture_output=True, text=True,
                          env={**os.environ, **env} if env else None)
    if check and proc.returncode != 0:
        raise LabError(f"git {' '.join(args[:2])} failed in {tree}: "
                       f"{first_error(proc.stderr or proc.stdout)}")
    return proc


def first_error(text):
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith(("error:", "fatal:")):
            return ln
    return lines[0] if lines else "(no output)"


# --- the series --------------------------------------------------------------

def series_files():
    """Patch files in the order of patches/series."""
    order = paths.PATCHES / "series"
    if not order.exists():
        return []
    files = []
    for line in order.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        path = paths.PATCHES / name
        if not path.is_file():
            raise LabError(f"patches/series names {name}, which is not in "
                           f"patches/: restore it or remove the line")
        files.append(path)
    return files


def series_hash():
    """Identifies the series: a patched build is keyed on it."""
    h = hashlib.sha256()
    for path in series_files():
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def installed_base_version():
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Version}", DEB_PACKAGE],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def lab_commit():
    """The lab's own commit (this repository's HEAD, abbreviated), which a
    record names beside the series it ran; None where git does not say."""
    proc = subprocess.run(["git", "-C", str(paths.ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return proc.stdout.strip() or None


def recorded_base_version():
    path = paths.PATCHES / "base-version"
    return path.read_text().strip() if path.exists() else None


def check_base_version():
    """Warn (not fail) when the installed source is not what we tested."""
    installed, recorded = installed_base_version(), recorded_base_version()
    if installed and recorded and installed != recorded:
        say(f"lab: warning: the series was tested on {DEB_PACKAGE} {recorded}, "
            f"this machine has {installed}; patches may not apply or behave "
            f"the same")


# --- trees ---------------------------------------------------------------------

def ensure_vanilla():
    """Create build/vanilla from the Debian tarball, once."""
    tree = vanilla_dir()
    if (tree / ".git").exists() and git(tree, "rev-parse", "-q", "--verify",
                                        BASE_TAG, check=False).returncode == 0:
        return tree
    tarball = paths.kernel_tarball()
    if not tarball.is_file():
        raise LabError(f"kernel source not found at {tarball}: run `make setup` "
                       f"(installs {DEB_PACKAGE}) or set UNFLUSH_KERNEL_TARBALL")
    check_base_version()
    if tree.exists():
        shutil.rmtree(tree)  # a half-made tree from an interrupted run
    tree.parent.mkdir(parents=True, exist_ok=True)
    prog = Progress("vanilla tree")
    prog.update(f"unpacking {tarball.name}", force=True)
    with tempfile.TemporaryDirectory(dir=tree.parent) as tmp:
        with tarfile.open(tarball) as tar:
            top = tar.next().name.split("/", 1)[0]
        subprocess.run(["tar", "-C", tmp, "-xf", str(tarball)], check=True)
        Path(tmp, top).rename(tree)
    prog.update("committing the pristine source", force=True)
    git(tree, "init", "-q", "-b", "master")
    # -f: the Debian tarball ships files the kernel's .gitignore would skip;
    # a worktree made from the commit must have every one of them.
    git(tree, "add", "-A", "-f")
    version = installed_base_version() or tarball.name
    git(tree, "commit", "-q", "-m", f"Linux 6.12 from Debian {DEB_PACKAGE} {version}")
    git(tree, "tag", BASE_TAG)
    # build directories live inside the trees (srctree=.. keeps compiler
    # paths identical between trees, so ccache shares objects)
    with open(tree / ".git" / "info" / "exclude", "a") as f:
        f.write("/.o-*/\n")
    prog.done("ready")
    return tree


def _stamp_path():
    return vanilla_dir() / ".git" / "unflush-series"


def _read_stamp():
    try:
        series, head = _stamp_path().read_text().split()
        return series, head
    except (FileNotFoundError, ValueError):
        return None, None


def _write_stamp(head):
    _stamp_path().write_text(f"{series_hash()} {head}\n")


def ensure_patched(force=False):
    """Make build/patched = vanilla + patches/, unless it already is."""
    ensure_vanilla()
    tree = patched_dir()
    if not (tree / ".git").exists():
        if tree.exists():
            shutil.rmtree(tree)
        git(vanilla_dir(), "worktree", "prune")
        git(vanilla_dir(), "worktree", "add", "-q", "-B", BRANCH, str(tree), BASE_TAG)
        _apply_series(tree)
        return tree
    head = git(tree, "rev-parse", "HEAD").stdout.strip()
    stamped_series, stamped_head = _read_stamp()
    if stamped_series == series_hash() and stamped_head == head:
        return tree
    if not force:
        if git(tree, "status", "--porcelain", "--untracked-files=no").stdout.strip():
            raise LabError(f"{tree} has uncommitted changes: commit them and run "
                           f"`python3 -m lab export`, or rerun with --force to "
                           f"discard them")
        if stamped_head and head != stamped_head:
            raise LabError(f"{tree} has commits that are not in patches/: run "
                           f"`python3 -m lab export` first, or rerun with --force "
                           f"to rebuild the tree from patches/")
    git(tree, "am", "--abort", check=False)
    git(tree, "reset", "-q", "--hard", BASE_TAG)
    _apply_series(tree)
    return tree


def _git_am(tree, patch):
    """Apply one patch; on failure leave no am in progress, return git's reason."""
    proc = git(tree, "am", "-q", "--whitespace=nowarn", str(patch), check=False)
    if proc.returncode == 0:
        return None
    git(tree, "am", "--abort", check=False)
    return first_error(proc.stdout + "\n" + proc.stderr)


def _apply_series(tree):
    files = series_files()
    check_base_version()
    prog = Progress("patched tree")
    for i, patch in enumerate(files, 1):
        prog.update(f"git am {i}/{len(files)} {patch.name}")
        reason = _git_am(tree, patch)
        if reason:
            git(tree, "reset", "-q", "--hard", BASE_TAG)
            _stamp_path().unlink(missing_ok=True)
            raise LabError(f"patch {patch.name} does not apply: {reason} "
                           f"(rebase it on {BASE_TAG} or drop it from patches/series)")
    head = git(tree, "rev-parse", "HEAD").stdout.strip()
    _write_stamp(head)
    prog.done(f"{len(files)} patches applied")


def export():
    """Write the patched tree's commits back to patches/ as format-patch files."""
    tree = patched_dir()
    if not (tree / ".git").exists():
        raise LabError(f"no patched tree at {tree}: run `python3 -m lab tree` first")
    if git(tree, "status", "--porcelain", "--untracked-files=no").stdout.strip():
        raise LabError(f"{tree} has uncommitted changes: commit them before exporting")
    # the cover letter's subject and text are the only hand-written part
    kept = cover_letter.read()
    if kept is None and cover_letter.path().is_file() and \
            cover_letter.SUBJECT_HOLE not in cover_letter.path().read_text():
        raise LabError(f"cannot find the subject and text of {cover_letter.path()} "
                       f"above git's shortlog: mend it, or remove it for git's "
                       f"template")
    for old in series_files():
        old.unlink()
    for stray in paths.PATCHES.glob("*.patch"):
        stray.unlink()
    paths.PATCHES.mkdir(exist_ok=True)
    # a fixed abbreviation of the index lines' hashes: git's own grows with
    # the tree's object count, and would rewrite every patch on export
    out = git(tree, "-c", "core.abbrev=9", "format-patch", "--no-signature",
              "--zero-commit", "-o", str(paths.PATCHES),
              f"{BASE_TAG}..HEAD").stdout.split()
    names = [Path(p).name for p in out]
    (paths.PATCHES / "series").write_text("".join(n + "\n" for n in names))
    if names:
        cover_letter.write(tree, f"{BASE_TAG}..HEAD", git, kept)
    version = installed_base_version()
    if version:
        (paths.PATCHES / "base-version").write_text(version + "\n")
    _write_stamp(git(tree, "rev-parse", "HEAD").stdout.strip())
    say(f"lab: exported {len(names)} patches to {paths.PATCHES}")
    if names and kept is None:
        say(f"lab: {cover_letter.NAME} is git's template: write its subject and "
            f"text there (check-series refuses the placeholders)")
    return names


# --- trees made from others: broken on purpose, and the arm64 lab's --------

def testing_files():
    """patches/testing/*.patch, in name order: kernels broken on purpose so
    that the safety tests can be shown to fail (docs/stale-tlb.md)."""
    return sorted((paths.PATCHES / "testing").glob("*.patch"))


def arm64_lab_files():
    """patches/arm64-lab/*.patch: what every arm64 kernel the lab boots needs
    on QEMU's `virt` machine and the series is not about (vanilla's too)."""
    return sorted((paths.PATCHES / "arm64-lab").glob("*.patch"))


def ensure_testing():
    """Make build/broken = build/patched's branch + patches/testing/."""
    ensure_patched()
    base = git(patched_dir(), "rev-parse", BRANCH).stdout.strip()
    return _ensure_derived("broken", base, testing_files())


def arm64_dir(source):
    """The arm64 lab's tree of `source` (vanilla, patched, broken)."""
    return paths.work_dir() / f"arm64-{source}"


def ensure_arm64(source):
    """Make build/arm64-<source> = that tree's commit + patches/arm64-lab/."""
    made = {"vanilla": ensure_vanilla, "patched": ensure_patched,
            "broken": ensure_testing}[source]()
    base = git(made, "rev-parse", "HEAD").stdout.strip()
    return _ensure_derived(f"arm64-{source}", base, arm64_lab_files())


def _ensure_derived(name, base, files):
    """Make build/<name> = commit `base` + `files` applied with git am.

    A generated tree, never edited by hand: it is re-made whenever the base
    or a patch changed, discarding anything in it.
    """
    if not files:
        raise LabError(f"no patches for build/{name}: patches/testing/ and "
                       f"patches/arm64-lab/ are part of the lab; restore them")
    h = hashlib.sha256(base.encode())
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    want = h.hexdigest()[:16]
    tree = paths.work_dir() / name
    stamp = vanilla_dir() / ".git" / f"unflush-{name}"
    if (tree / ".git").exists() and stamp.exists() and stamp.read_text().strip() == want:
        return tree
    if not (tree / ".git").exists():
        if tree.exists():
            shutil.rmtree(tree)
        git(vanilla_dir(), "worktree", "prune")
        git(vanilla_dir(), "worktree", "add", "-q", "-f", "-B", f"unflush-{name}",
            str(tree), base)
    else:
        git(tree, "am", "--abort", check=False)
        git(tree, "reset", "-q", "--hard", base)
    for patch in files:
        reason = _git_am(tree, patch)
        if reason:
            stamp.unlink(missing_ok=True)
            raise LabError(f"{patch.parent.name}/{patch.name} does not apply on "
                           f"{base[:12]}: {reason} (rebase it)")
    stamp.write_text(want + "\n")
    say(f"lab: build/{name} ready: {len(files)} patch(es) of "
        f"{files[0].parent.name}/ on {base[:12]}")
    return tree
