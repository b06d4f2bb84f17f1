"""`lab check-series --stack-frames`: what the series' new vm events cost
the stack.

Every function that copies all vm events to its stack (an array of
NR_VM_EVENT_ITEMS longs) grows by 8 bytes an event the series adds.  The
largest such frame in the configurations the lab builds is virtio_balloon's
update_balloon_vm_stats().  This builds that one object with gcc's
-fstack-usage in config/matrix/all-on.config (every caller of LUF, the
balloon among them, on; over the matrix's base fragments) from the vanilla
and the patched tree, and writes the frames of the functions named in
FUNCTIONS to docs/results/stack-frames/ (results.json and README.md), the
record the cover letter and docs/luf/README.md cite.
"""

import json
import re
import subprocess

from lab import build, paths, series_configs, tree
from lab.errors import LabError
from lab.progress import say

OBJECT = "drivers/virtio/virtio_balloon.o"
FUNCTIONS = ("update_balloon_vm_stats",)
RECORD = paths.ROOT / "docs" / "results" / "stack-frames"
FRAGMENT = series_configs.MATRIX / "all-on.config"
# drivers/virtio/virtio_balloon.c:NNN:CC:name<TAB>bytes<TAB>static
SU_LINE = re.compile(r"^[^:]+:\d+:\d+:(\w+)\t(\d+)\t(\S+)$")


def parse_su(text):
    """{function: bytes} of a gcc .su file."""
    frames = {}
    for line in text.splitlines():
        m = SU_LINE.match(line.strip())
        if m:
            frames[m.group(1)] = int(m.group(2))
    return frames


def measure_tree(name, src, checked):
    """Build OBJECT with -fstack-usage in `src`: {function: bytes}."""
    out = src / ".o-stack-frames"
    frags = [paths.CONFIG / f for f in series_configs.BASE] + [FRAGMENT]
    say(f"check-series: stack frames of {OBJECT} on {name}")
    build.configure_dir(src, out, frags, checked=checked)
    su = out / OBJECT.replace(".o", ".su")
    # make would keep an object already built, and write no .su
    for stale in (su, out / OBJECT):
        stale.unlink(missing_ok=True)
    build.compile_dir(src, out, f"stack-frames-{name}", target=OBJECT,
                      make_args=("KCFLAGS=-fstack-usage",))
    if not su.exists():
        raise LabError(f"gcc wrote no {su.name} for {OBJECT} in {out}: is "
                       f"CONFIG_VIRTIO_BALLOON on in {FRAGMENT.name}?")
    frames = parse_su(su.read_text())
    missing = [f for f in FUNCTIONS if f not in frames]
    if missing:
        raise LabError(f"{su}: no frame for {', '.join(missing)}")
    return {f: frames[f] for f in FUNCTIONS}


def report(results):
    rows = [f"| `{f}()` | {results['vanilla'][f]:,} | {results['patched'][f]:,} | "
            f"{results['patched'][f] - results['vanilla'][f]:+,} |" for f in FUNCTIONS]
    return "\n".join([
        "# Stack frames the series' vm events grow, a record",
        "",
        f"gcc `-fstack-usage` of `{OBJECT}` in `config/matrix/{FRAGMENT.name}` over",
        "the matrix's base fragments, from the vanilla and the patched tree, in bytes.",
        "Reproduce with `python3 -m lab check-series --stack-frames`, which writes",
        "this file and `results.json`.",
        "",
        "| function | vanilla | patched | change |",
        "| --- | ---: | ---: | ---: |",
        *rows,
        "",
        f"Kernel: {results['base']}, the series' {results['patches']} patches; "
        f"{results['compiler']}.",
        "",
    ])


def run():
    vanilla, patched = tree.ensure_vanilla(), tree.ensure_patched()
    results = {
        # the series' options do not exist in vanilla: check none
        "vanilla": measure_tree("vanilla", vanilla, checked=[]),
        "patched": measure_tree("patched", patched, checked=[FRAGMENT]),
        "base": paths.PATCHES.joinpath("base-version").read_text().strip(),
        "patches": len(tree.series_files()),
        "compiler": subprocess.run(["gcc", "--version"], capture_output=True,
                                   text=True).stdout.splitlines()[0],
    }
    RECORD.mkdir(parents=True, exist_ok=True)
    (RECORD / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (RECORD / "README.md").write_text(report(results))
    for f in FUNCTIONS:
        say(f"check-series: {f}() {results['vanilla'][f]} bytes on vanilla, "
            f"{results['patched'][f]} on patched ({RECORD / 'README.md'})")
    return 0
