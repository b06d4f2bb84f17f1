"""The safety suite: `python3 -m lab safety [--soak] [--kernels ...]`.

A kernel that defers TLB flushes must lose nothing and leak nothing.  For
each kernel the suite boots a guest per part (four for luf-hazards):

  selftests  the kernel's own mm selftests (tools/testing/selftests/mm of
             build/patched, built on the host) through their runner,
             run_vmtests.sh, one category at a time, with hugetlb pages,
             zram swap and a second NUMA node so that the tests of reclaim,
             migration, THP, hugetlb, COW, userfaultfd and KSM run instead of
             skipping; the series' stale_tlb among them, a reader against
             reclaim, migration and swap-out that refill the pages it lost
             with a canary (docs/stale-tlb.md);
  stress     Debian's stress-ng memory stressors with --verify, in phases
             that push pages through swap (a memory cgroup), demotion to the
             slower node and NUMA balancing, with THP and mTHP on, and one
             phase run from a disk filesystem, whose clean read-only-mapped
             text and data reclaim takes away (what LUF unmaps lazily);
  luf-hazards  guest/luf-hazards, every mode, on the kernels that have LUF:
             pages taken away lazily, then changed under a fresh translation
             (one boot per group of modes, lab/luf_hazards.py); with the
             modes below the filesystem, the hunt: below-random with many
             seeds, each a stack of loop, partitions and device mapper.

It then compares patched with vanilla and debug with vanilla-debug (the
unpatched kernel built the same way), prints one table per kernel and
writes results/tests/<time>/summary.json (results/tests/latest points at the
newest).  The run fails if a test that passes on the baseline fails on the
kernel compared with it, if stress-ng reports any verification error, if any kernel prints a
splat, or if a guest dies.  With --reference needed (make test's run) a
baseline that runs beside its kernel is a reference only: after that
kernel, it runs the series' own selftests and the categories the kernel
failed in, which is what the comparison needs, and nothing else.
docs/safety.md says what is run and why.
"""

import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass, field

from lab import arches, build, luf_hazards, paths, safety_build, vm
from lab import safety_parse as parse
from lab.errors import LabError
from lab.progress import say

KERNELS = ("vanilla", "patched", "debug", "vanilla-debug", "vanilla-distro",
           "patched-distro", "vanilla-arm64", "patched-arm64")
# KASAN, lockdep and DEBUG_VM make the debug kernel this much slower (TCG);
# the -distro kernels' vCPUs share one host thread (one_tcg_thread()).
SLOWDOWN = {"vanilla": 1, "patched": 1, "broken": 1, "debug": 4, "vanilla-debug": 4,
            "vanilla-distro": 2, "patched-distro": 2, "vanilla-arm64": 3,
            "patched-arm64": 3}
# Each kernel is compared with the unpatched kernel built the same way: under
# KASAN and lockdep a selftest can time out, or lose a race it wins at full
# speed, whatever the series does.  The baselines are compared with nothing.
BASELINE = {k: build.unpatched_twin(k) for k in KERNELS
            if build.VARIANTS[k][0] != "vanilla"}
# The kernels built from the series, which have LUF: luf-hazards needs it.
LUF_KERNELS = ("patched", "debug", "patched-distro")
PARTS = ("selftests", "stress", "luf-hazards")
# A part only asked for by name (--only): the hunt alone, which the
# luf-hazards part runs with the modes below the filesystem.
HUNT_PART = "storage-hunt"


# --- what is run ----------------------------------------------------------------

@dataclass
class Category:
    """A run_vmtests.sh category and how long the guest lets it run."""
    name: str
    watchdog: int            # seconds on vanilla under TCG, before SLOWDOWN
    covers: str = ""


# Watchdogs: several times what the category took on vanilla under TCG with
# 2 vCPUs on a loaded 2-core host (docs/safety.md has the measurements).
# thp took up to 227 s on vanilla, and 1,490 s on vanilla-debug (7 times
# that, more than SLOWDOWN's 4), mostly split_huge_page_test on XFS.
CATEGORIES = [
    Category("mmap", 60, "mmap(MAP_FIXED_NOREPLACE), MAP_POPULATE"),
    Category("gup_test", 120, "get/pin_user_pages, long-term pins vs COW"),
    Category("compaction", 180, "compaction: migrating unevictable pages"),
    Category("mlock", 60, "mlock, mlock2, MLOCK_ONFAULT"),
    Category("process_mrelease", 60, "reaping a dying process's memory"),
    Category("mremap", 120, "mremap moves of PTEs/PMDs, MREMAP_DONTUNMAP"),
    Category("madv_populate", 60, "MADV_POPULATE_READ/WRITE"),
    Category("memfd_secret", 60, "secretmem: pages out of the direct map"),
    Category("ksm", 300, "KSM merging, unmerging, zero pages"),
    Category("ksm_numa", 120, "KSM across two NUMA nodes"),
    Category("soft_dirty", 60, "soft-dirty write protection (clear_refs)"),
    Category("pagemap", 120, "PAGEMAP_SCAN and async uffd-wp"),
    Category("cow", 300, "COW of base pages, THP, mTHP, hugetlb, with swap and pins"),
    Category("thp", 600, "khugepaged collapse, THP split, transhuge-stress"),
    Category("migration", 240, "move_pages(), migration entries under racing access"),
    Category("mkdirty", 60, "PTE/PMD dirtying in read-only VMAs"),
    Category("stale_tlb", 120, "the series' selftest: reads through TLB entries that "
             "reclaim, swap-out or migration should have flushed"),
    # skips where there is no LUF (vanilla); its trials need /scratch
    Category("luf_hazards", 180, "the series' selftest: a page LUF unmapped "
             "without a flush is changed (COW, a write, O_DIRECT, truncation, a new "
             "mapping) and a CPU with the old translation must see it"),
    # 17 s on patched; a leaked swap count makes its swapoff wait 20 s more
    Category("swapout_rollback", 120, "the series' selftest: a failed batched swap-out "
             "puts every PTE back with its own bits, a folio shared past a swap "
             "count's limit leaks no count"),
    # slow under TCG: soak only
    Category("hugetlb", 1200, "hugetlb fault/madvise/mremap/shm/vmemmap, reservations"),
    Category("userfaultfd", 2400, "uffd missing/wp/minor faults, uffd-stress"),
    # not memory-management paths the series touches: soak only
    Category("hugevm", 120, "very large virtual address spaces"),
    Category("pkey", 120, "memory protection keys"),
    Category("mdwe", 60, "prctl(PR_SET_MDWE)"),
    Category("vmalloc", 60, "vmalloc smoke test (needs CONFIG_TEST_VMALLOC=m)"),
    Category("hmm", 60, "HMM smoke test (needs CONFIG_TEST_HMM=m)"),
]
# Quick: what fits ~7 min per kernel with the stress phases.  `ksm` (about a
# minute: ksm_tests -H and ksm_functional_tests) waits for the soak; ksm_numa's
# two merge tests stay.
QUICK_CATEGORIES = ["mmap", "gup_test", "compaction", "mlock", "process_mrelease",
                    "mremap", "madv_populate", "memfd_secret", "ksm_numa",
                    "soft_dirty", "pagemap", "cow", "thp", "migration", "mkdirty",
                    "stale_tlb", "luf_hazards", "swapout_rollback"]
SOAK_CATEGORIES = [c.name for c in CATEGORIES]


@dataclass
class StressPhase:
    """One stress-ng run: its stressors and the conditions around it."""
    name: str
    args: str                # stressors and their options
    memcg: str | None = None  # the limit of the cgroup it runs in
    memcg_knob: str = "max"   # which limit: memory.max, or memory.high
    what: str = ""
    on_disk: bool = False    # stress-ng runs from /scratch (guest/safety/disk.sh)


def stress_phases(soak):
    """Each phase runs its stressors together for `seconds`."""
    seconds = 600 if soak else 30
    vm_methods = ("all", "flip", "walk-1d", "incdec", "move-inv") if soak else ("all",)
    # one vm bogo op is a pass of a method over the whole region: under TCG
    # 96 MiB with every method can take longer than the quick phase
    vm_bytes = "96M" if soak else "64M"
    phases = []
    for method in vm_methods:
        phases.append(StressPhase(
            f"swap-{method}",
            f"--vm 2 --vm-bytes {vm_bytes} --vm-method {method} --mmap 1 --mmap-bytes 48M "
            f"--madvise 1 --rmap 1 --mremap 1 --mremap-bytes 16M --pageswap 1 "
            f"--bigheap 1 --timeout {seconds if method == 'all' else seconds // 4}",
            memcg="192M",
            what="anonymous and shmem pages through a 192 MiB memory cgroup into "
                 "zram swap: reclaim unmaps, swap-in, mTHP swap-out"))
    # stress-ng's numa stressor checks --timeout only between bogo ops, and
    # one op (mbind, migrate_pages and move_pages over its buffer) took 73 s
    # under TCG, stretching a 30 s phase to 159 s: soak only, where phases
    # are 600 s.  Demotion, promotion and migration happen without it.
    numa = "--numa 1 " if soak else ""
    phases.append(StressPhase(
        "tiering",
        f"--vm 2 --vm-bytes 320M --vm-method all {numa}--mmaphuge 1 --mmaphuge-mmaps 32 "
        f"--userfaultfd 1 --shm 1 --msync 1 --tlb-shootdown 1 --timeout {seconds}",
        what="node 0 under pressure: demotion to the CPU-less node 1, promotion "
             "back (numa_balancing=2), move_pages/mbind migration, TLB shootdowns"))
    # Everything above runs from the initramfs and tmpfs, whose pages LUF
    # never unmaps lazily (no backing device).  Here stress-ng itself and its
    # libraries are read from an ext2 filesystem: every worker maps their
    # text and read-only data, the small cgroup makes reclaim take those
    # clean pages away while they are mapped, and forks, dlopen()s and COW writes
    # to private file pages fault them back: an ordinary workload on the
    # paths LUF's rules guard.
    #
    # memory.high, not memory.max: reclaim and throttling, no OOM killer.
    # Under an 80 MiB memory.max, mmapfork's children (oom_score_adj -1000,
    # their size taken from the machine's free memory) invoked the memcg OOM
    # killer ~10 times a phase, on vanilla as on patched; when it picked a
    # fork instance, stress-ng 0.15 found that instance's checksum never
    # written and reported "corrupted bogo-ops counter, N vs 0", a
    # verification failure that was an OOM kill (1 phase in 6 on patched,
    # 1 in 8 on vanilla).
    #
    # The hdd stressor writes and reads back a file on the same ext2 with
    # O_DIRECT: a direct write invalidates the page cache over its range
    # (kiocb_invalidate_pages(), where LUF's rule R6 and its checker look)
    # while the lazy unmaps above are pending.  Sequential, because zram's
    # logical blocks are 4 KiB and hdd aligns random offsets to 512 bytes
    # only (EINVAL).
    #
    # vm's two workers take 32 MiB each.  With 96 MiB each, beside hdd,
    # memory.high throttled them so hard that they finished no pass of their
    # methods in the quick phase (0 bogo ops, on every kernel), so --verify
    # checked little of their memory.  At 32 MiB they finish passes (not on
    # the slower debug kernels), and the cgroup still reclaims the text of
    # the other workers: patched unmapped 955 and 802 folios lazily in two
    # quick runs, against 873 with 96 MiB.
    phases.append(StressPhase(
        "disk",
        f"--vm 2 --vm-bytes 32M --vm-method all --fork 2 --mmapfork 1 --dynlib 1 "
        f"--hdd 1 --hdd-bytes 16M --hdd-opts direct,wr-seq,rd-seq "
        f"--temp-path {DISK_DIR} --timeout {seconds}",
        memcg="80M", memcg_knob="high", on_disk=True,
        what="stress-ng's own text and data on ext2 (zram) reclaimed from a "
             "80 MiB memory cgroup while mapped: lazy unmaps under LUF; "
             "direct I/O to a file there"))
    if soak:
        phases.append(churn_phase(seconds))
    return phases


def churn_phase(seconds):
    """The disk phase's reclaim of mapped text from ext2, beside stressors
    that change mappings and write into them by other paths than a store:
    ptrace, userfaultfd fills, io_uring, mremap, MAP_FIXED over live
    mappings, mprotect, madvise (MADV_MERGEABLE among its advice), and
    /proc reads.  None of them knows about LUF; on the debug kernel its
    checker looks at every lazily unmapped address they reach.  Their
    files stay in the working directory, tmpfs: stress-ng 0.15's io-uring
    fails every statx of its file with --temp-path (ENOENT, on any
    kernel)."""
    return StressPhase(
        "churn",
        f"--fork 2 --dynlib 1 --ptrace 1 --userfaultfd 1 --io-uring 1 "
        f"--mremap 1 --mremap-bytes 8M --mmapfixed 1 --mmapaddr 1 --mprotect 1 "
        f"--madvise 1 --procfs 1 --timeout {seconds}",
        memcg="80M", memcg_knob="high", on_disk=True,
        what="the disk phase's reclaim of mapped text, beside ptrace, "
             "userfaultfd, io_uring, mremap, MAP_FIXED, mprotect and madvise churn")


SELFTEST_SCRATCH = "64M"


def selftest_shape(soak, variant):
    # 3 vCPUs: migration's tests want two threads besides the main one
    # (numa_num_task_cpus() - 1 >= 2) and skip with fewer.  unflush.scratch:
    # an ext2 on zram for $TMPDIR, where stale_tlb makes the file whose
    # clean page cache reclaim drops (on the initramfs it would go to swap)
    return vm.VMShape(cpus=3, mem="2G", node1="1G", zram="1G",
                      append=f"unflush.scratch={SELFTEST_SCRATCH}",
                      timeout=_budget(selftest_categories(soak), variant) + 120)


def stress_shape(soak, variant):
    total = sum(_phase_seconds(p) for p in stress_phases(soak))
    # unflush.scratch: the ext2 on zram the disk phase runs from
    return vm.VMShape(cpus=2, mem="1G", node1="512M", zram="1G",
                      append=f"unflush.scratch={DISK_SIZE}",
                      timeout=total * 2 * SLOWDOWN[variant] + 180)


def luf_trials(soak):
    return 3000 if soak else 100


def hunt_length(soak):
    return "soak" if soak else "quick"


def luf_shape(modes, soak, variant):
    # a trial takes under 0.1 s on patched under TCG, and each of the
    # hunt's stacks about a second to make; the rest is margin
    trials = len(modes) * luf_trials(soak)
    if luf_hazards.RANDOM_MODE in modes:
        seeds, each = luf_hazards.HUNT[hunt_length(soak)]
        trials += seeds * (each + 10)
    return luf_hazards.shape(modes, timeout=trials * 0.5 * SLOWDOWN[variant] + 300,
                             scratch="512M" if soak else luf_hazards.SCRATCH)


def luf_script(modes, soak):
    """Each mode's trials; with below-random, the hunt's runs too (many
    seeds, a stack each), counted in that mode's trials."""
    script = "".join(f"luf-hazards {m} --trials {luf_trials(soak)}\n" for m in modes)
    if luf_hazards.RANDOM_MODE in modes:
        script += luf_hazards.hunt_script(hunt_length(soak))
    return script


def selftest_categories(soak):
    names = SOAK_CATEGORIES if soak else QUICK_CATEGORIES
    return [c for c in CATEGORIES if c.name in names]


def _budget(categories, variant):
    return sum(c.watchdog for c in categories) * SLOWDOWN[variant]


def _phase_seconds(phase):
    return int(phase.args.rsplit("--timeout ", 1)[1].split()[0])


# --- guest scripts ----------------------------------------------------------------

# The guests' shell: guest/safety/ (env.sh, selftests.sh and the tr shim it
# installs, stress.sh, disk.sh).  Each script is those files in order, and
# the lines that run the categories or the phases.
SHELL_DIR = paths.GUEST_SRC / "safety"


def guest_shell(name):
    """The text of guest/safety/@name."""
    return (SHELL_DIR / name).read_text()


def install(path, text):
    """Lines of a guest script that write @text to the executable @path."""
    return f"cat >{path} <<'EOF'\n{text}EOF\nchmod +x {path}\n"


# The disk phase's filesystem (guest/init.sh makes an ext2 on zram there).
DISK_SIZE = "256M"
DISK_DIR = "/scratch/stress"        # disk.sh copies stress-ng here; hdd's file too
DISK_STRESS_NG = f"{DISK_DIR}/run"
LUF_DISABLE_RULES = "/sys/kernel/debug/luf/disable_rules"

def selftest_script(categories, variant):
    lines = [guest_shell("env.sh"), install("/safety/bin/tr", guest_shell("tr")),
             guest_shell("selftests.sh")]
    lines += [f"run_category {c.name} {c.watchdog * SLOWDOWN[variant]}"
              for c in categories]
    return "\n".join(lines) + "\n"


def stress_script(phases, disable_rules=None):
    """The stress guest's script.  `disable_rules`: a mask for the debug
    kernel's /sys/kernel/debug/luf/disable_rules, to run the phases with
    LUF rules off and see whether its checker notices."""
    lines = [guest_shell("env.sh"), guest_shell("stress.sh")]
    if any(p.on_disk for p in phases):
        lines.append(f"disk_dir={DISK_DIR}\n" + guest_shell("disk.sh"))
    if disable_rules is not None:
        lines.append(f"echo {int(disable_rules)} >{LUF_DISABLE_RULES} || "
                     f"echo 'SAFETY-ERROR cannot write {LUF_DISABLE_RULES}: "
                     f"not a CONFIG_DEBUG_LUF kernel'")
    lines += [f"run_phase {p.name} {f'{p.memcg_knob}={p.memcg}' if p.memcg else '-'} "
              f"{DISK_STRESS_NG if p.on_disk else 'stress-ng'} {p.args}"
              for p in phases]
    return "\n".join(lines) + "\n"


# --- running one kernel -------------------------------------------------------------

@dataclass
class KernelRun:
    variant: str
    release: str = ""
    tests: list = field(default_factory=list)
    counters: dict = field(default_factory=dict)  # by category: parse_counters()
    phases: list = field(default_factory=list)
    splats: list = field(default_factory=list)
    errors: list = field(default_factory=list)   # guests that died or hung
    env: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)
    reruns: list | None = None  # runs of the categories that regressed, one per boot
    luf: dict | None = None     # luf-hazards by mode, from parse.parse_trials()


def one_tcg_thread(kernel, shape):
    """`shape`, with its vCPUs in one host thread (-icount) if the kernel has
    jump labels: multi-threaded TCG can run the int3 of a static key being
    flipped (vm.check_jump_labels()), and the suite flips several.  It
    costs speed, and boots are more alike: a race a test loses may be lost
    again on retry (docs/safety.md, "The distro kernels")."""
    if vm.built_option(kernel, "CONFIG_JUMP_LABEL") == "y":
        return dataclasses.replace(shape, icount=True)
    return shape


def run_guest(kernel, what, script, shape, outdir, kr, layer):
    """Boot once, with `layer` (the selftests' initramfs archive) unpacked;
    keep the output even if the guest dies, splats included."""
    logdir = vm.new_logdir(kernel)
    start = time.monotonic()
    output = ""
    try:
        result = vm.run(kernel, script, one_tcg_thread(kernel, shape), logdir=logdir,
                        allow_splats=True, layers=(layer,))
        output = result.output
        kr.splats += [f"{what}: {s}" for s in result.splats]
    except LabError as e:
        kr.errors.append(f"{what}: {e}")
        output = _read(logdir / "output.log")
        kr.splats += [f"{what}: {s}" for s in vm.find_splats(_read(logdir / "console.log"))]
    kr.seconds[what] = round(time.monotonic() - start, 1)
    kr.env += [ln for ln in output.splitlines() if ln.startswith("SAFETY-ENV")]
    kr.errors += guest_errors(output)
    (outdir / f"{kernel.variant}-{what}.log").write_text(output)
    if (logdir / "console.log").exists():
        shutil.copy(logdir / "console.log", outdir / f"{kernel.variant}-{what}.console.log")
    return output


def guest_errors(output):
    """What a guest script said went wrong in its set-up (SAFETY-ERROR)."""
    return [ln.split(" ", 1)[1] for ln in output.splitlines()
            if ln.startswith("SAFETY-ERROR ")]


def _read(path):
    try:
        return path.read_text(errors="replace").replace("\r\n", "\n")
    except FileNotFoundError:
        return ""


def parts_on(variant, parts):
    """The parts of @parts that run on @variant's architecture."""
    runs = arches.ARCHES[build.arch(variant)].safety_parts
    return parts if runs is None else tuple(p for p in parts if p in runs)


def run_kernel(variant, soak, layer, outdir, parts=PARTS, categories=None):
    """Boot `variant` for each of `parts`; `categories`: the selftest
    categories to run, if not all of the mode's."""
    kernel = build.built(variant)
    kr = KernelRun(variant, kernel.release)
    parts = parts_on(variant, parts)
    if "selftests" in parts:
        cats = selftest_categories(soak) if categories is None else categories
        out = run_guest(kernel, "selftests", selftest_script(cats, variant),
                        selftest_shape(soak, variant), outdir, kr, layer)
        kr.tests = parse.parse_vmtests(out)
        kr.counters = parse.parse_counters(out)
    if "stress" in parts:
        out = run_guest(kernel, "stress", stress_script(stress_phases(soak)),
                        stress_shape(soak, variant), outdir, kr, layer)
        kr.phases = parse.parse_stress(out)
    if "luf-hazards" in parts and variant in LUF_KERNELS:
        kr.luf = {}
        for modes in luf_hazards.groups():
            out = run_guest(kernel, f"luf-hazards-{modes[0]}", luf_script(modes, soak),
                            luf_shape(modes, soak, variant), outdir, kr, layer)
            kr.luf.update(parse.parse_trials(out, "luf-hazards", modes))
    if HUNT_PART in parts and variant in LUF_KERNELS:
        hunt = (luf_hazards.RANDOM_MODE,)
        out = run_guest(kernel, HUNT_PART, luf_hazards.hunt_script(hunt_length(soak)),
                        luf_shape(hunt, soak, variant), outdir, kr, layer)
        kr.luf = parse.parse_trials(out, "luf-hazards", hunt)
        # what each seed drew and did: the hunt's record, apart from the
        # guest's log (counters of every run)
        runs = parse.parse_hunt(out, f"luf-hazards/{luf_hazards.RANDOM_MODE}")
        (outdir / f"{variant}-{HUNT_PART}.json").write_text(
            json.dumps({"stacks": len({r["stack"] for r in runs}), "runs": runs},
                       indent=1) + "\n")
    return kr


def run_selftests_alone(variant, names, icount=False):
    """Boot `variant` once for the selftest categories `names`: (parsed
    tests, the guest's output, guest errors).  For tests of one category
    on a kernel the quick suite does not run (the broken ones).  `icount`:
    all vCPUs in one host thread, as the suite boots kernels with jump
    labels (one_tcg_thread())."""
    kernel = build.built(variant)
    mm, _ = safety_build.build_selftests()
    kr = KernelRun(variant, kernel.release)
    cats = [c for c in CATEGORIES if c.name in names]
    shape = dataclasses.replace(selftest_shape(False, variant),
                                timeout=_budget(cats, variant) + 120,
                                icount=icount)
    out = run_guest(kernel, "selftests", selftest_script(cats, variant), shape,
                    vm.new_logdir(kernel), kr, safety_build.layer(mm))
    return parse.parse_vmtests(out), out, kr.errors


def run_stress_alone(variant, phases, disable_rules=None):
    """Boot `variant` once for some of the stress phases, with the LUF rules
    in the mask `disable_rules` off (debug kernels): (parsed phases, splats,
    console log, guest errors).  For tests of the LUF checker."""
    kernel = build.built(variant)
    mm, _ = safety_build.build_selftests()
    kr = KernelRun(variant, kernel.release)
    outdir = vm.new_logdir(kernel)
    out = run_guest(kernel, "stress", stress_script(phases, disable_rules),
                    stress_shape(False, variant), outdir, kr, safety_build.layer(mm))
    console = _read(outdir / f"{variant}-stress.console.log")
    return parse.parse_stress(out), kr.splats, console, kr.errors


# How many more boots a lost test gets before it counts as a regression.
# Upstream tests can be intermittent on vanilla too.  Before the smart scan
# was turned off (guest/safety/selftests.sh), ksm_tests -N -m 1 failed about one run
# in seven on either kernel.  With a single retry the suite then failed on
# it about once in 45 runs (CI saw it); three retries make that about one
# in 300.  They stay for the next such test.
RERUN_TRIES = 3


def confirm_regressions(kr, baseline, soak, layer, outdir):
    """Run the categories in which `kr` lost a test its baseline passed
    again on `kr`, each try in a fresh boot, until every lost test has
    passed once or RERUN_TRIES boots have run.  A result that passes on a
    retry is reported as such (not hidden: an intermittent failure can be an
    intermittent stale entry) but does not fail the run; one that never
    passes does."""
    failed, _ = parse.regressions(baseline.tests, kr.tests)
    names = parse.regressed_categories(baseline.tests, kr.tests)
    if not names:
        return
    kernel = build.built(kr.variant)
    cats = [c for c in CATEGORIES if c.name in names]
    kr.reruns = []
    for n in range(1, RERUN_TRIES + 1):
        say(f"safety: {kr.variant} lost tests in {', '.join(names)}: "
            f"running them again ({n}/{RERUN_TRIES})")
        out = run_guest(kernel, f"rerun{n}", selftest_script(cats, kr.variant),
                        selftest_shape(soak, kr.variant), outdir, kr, layer)
        kr.reruns.append(parse.parse_vmtests(out))
        still, _ = parse.confirm(failed, kr.reruns)
        if not still:
            return


# --- judging and reporting --------------------------------------------------------

# What the stress phases made the kernel do.  Memory-cgroup reclaim counts
# only in pgsteal_anon/file; pgsteal_kswapd/direct are global reclaim.
UNMAP_COUNTERS = ("pswpout", "pswpin", "pgsteal_anon", "pgsteal_file", "pgsteal_kswapd",
                  "pgsteal_direct", "pgdemote_kswapd", "pgdemote_direct",
                  "pgpromote_success", "pgmigrate_success", "thp_swpout",
                  "thp_split_page", "nr_tlb_remote_flush", "nr_tlb_remote_flush_received",
                  "nr_tlb_luf_folios", "nr_tlb_flush_luf_mm", "nr_tlb_flush_luf_special")


def _present(vmstat):
    """The UNMAP_COUNTERS this kernel has: no 0 for a counter it lacks
    (nr_tlb_luf_* on vanilla, nr_tlb_remote_flush without DEBUG_TLBFLUSH)."""
    return {k: vmstat[k] for k in UNMAP_COUNTERS if k in vmstat}


def summarize(kr, baseline=None):
    """One kernel's entry of summary.json."""
    host = build.arch(kr.variant) == arches.HOST
    not_run = ("not run: not one of the parts asked for" if host
               else "not run on arm64: tests/test_arm64_luf.py runs it")
    flat = parse.flatten(kr.tests)
    subs = [s for t in kr.tests for s in t.subtests]
    vmstat = {}
    for phase in kr.phases:
        for k, v in phase.vmstat.items():
            vmstat[k] = vmstat.get(k, 0) + v
    entry = {
        "release": kr.release,
        "selftests": {
            "passed": [t.name for t in kr.tests if t.status == "pass"],
            "failed": [t.name for t in kr.tests if t.status == "fail"],
            "skipped": [{"name": t.name, "reason": t.reason}
                        for t in kr.tests if t.status == "skip"],
            "failure_reasons": {t.name: t.reason for t in kr.tests if t.status == "fail"},
            "categories": sorted({t.category for t in kr.tests if t.category}),
            # guest seconds of each category's programs, from the stamps
            "category_seconds": category_seconds(kr.tests),
            # what each category moved: unmapping, swap, TLB shootdowns
            "counters": kr.counters,
            "subtests": {
                "passed": sum(s.status == "pass" for s in subs),
                "failed": [s.name for s in subs if s.status == "fail"],
                "skipped": [{"name": s.name, "reason": s.reason}
                            for s in subs if s.status == "skip"],
            },
        },
        "stress": {
            "ops": sum(sum(p.ops.values()) for p in kr.phases),
            "errors": sum(p.verification_errors for p in kr.phases),
            "phases": {p.name: {"exit": p.exit,
                                "exit_meaning": parse.STRESS_EXIT.get(
                                    p.exit, "did not finish"),
                                "seconds": p.seconds, "ops": p.ops,
                                "failures": p.failures, "errors": p.errors,
                                "skipped": p.skipped,
                                "vmstat": _present(p.vmstat)}
                       for p in kr.phases},
            "vmstat": _present(vmstat),
        },
        "luf_hazards": trials_entry(
            kr.luf, not_run if kr.variant in LUF_KERNELS or not host
            else "not run: no LUF in this kernel"),
        "splats": kr.splats,
        "guest_errors": kr.errors,
        "environment": kr.env,
        "seconds": kr.seconds,
    }
    problems = []
    if baseline is not None and baseline is not kr:
        base = parse.flatten(baseline.tests)
        failed, skipped = parse.regressions(baseline.tests, kr.tests)
        flaky = []
        if kr.reruns is not None:
            failed, flaky = parse.confirm(failed, kr.reruns)

        def named(keys):
            return [flat[k].name if k in flat else base[k].name for k in keys]
        entry["regressions"] = {"baseline": baseline.variant, "failed": named(failed),
                                "skipped": named(skipped),
                                "failed_then_passed_on_rerun": named(flaky)}
        problems += [f"passes on {baseline.variant}, fails here: {n}"
                     + (f" ({flat[k].reason})" if k in flat and flat[k].reason else
                        " (missing from the output)" if k not in flat else "")
                     for k, n in zip(failed, named(failed), strict=True)]
    if entry["stress"]["errors"]:
        for p in kr.phases:
            problems += [f"stress {p.name}: {f}" for f in p.failures]
            if p.verification_errors and not p.failures:
                problems.append(f"stress {p.name}: stress-ng "
                                f"{parse.STRESS_EXIT.get(p.exit, 'did not finish')}")
    for mode, m in (kr.luf or {}).items():
        if m["violations"]:
            problems.append(f"luf-hazards {mode}: {m['violations']} reads through a "
                            f"stale translation, e.g. {m['first']}")
        elif m["exit"] != 0:
            problems.append(f"luf-hazards {mode}: exit {m['exit']}: {m['message']}")
    problems += [f"splat: {s}" for s in kr.splats]
    problems += [f"guest: {e}" for e in kr.errors]
    if kr.tests == [] and not kr.errors and "selftests" in kr.seconds:
        problems.append("the selftests reported no result at all")
    entry["ok"] = not problems
    entry["problems"] = problems
    return entry


def category_seconds(tests):
    """Each category's guest seconds: the sum over its stamped programs."""
    out = {}
    for t in tests:
        if t.category and t.seconds is not None:
            out[t.category] = out.get(t.category, 0) + t.seconds
    return dict(sorted(out.items()))


def trials_entry(results, note):
    """luf-hazards' entry: totals and each mode; @note says
    why there are no results."""
    if results is None:
        return {"trials": 0, "violations": 0, "note": note}
    return {"trials": sum(m["trials"] for m in results.values()),
            "violations": sum(m["violations"] for m in results.values()),
            "modes": results}


def table(variant, entry):
    """The human summary of one kernel."""
    st, sr = entry["selftests"], entry["stress"]
    subs = st["subtests"]
    ran = len(st["passed"]) + len(st["failed"]) + len(st["skipped"])
    lines = [f"== {variant} ({entry['release']}): {'OK' if entry['ok'] else 'FAILED'}"
             + (" (a reference only: the series' selftests and the categories"
                " another kernel failed in)" if entry.get("reference_only") else ""),
             f"  selftests  {ran} run:"
             f" {len(st['passed'])} passed, {len(st['failed'])} failed,"
             f" {len(st['skipped'])} skipped"
             f"   (subtests: {subs['passed']} passed, {len(subs['failed'])} failed,"
             f" {len(subs['skipped'])} skipped)"]
    for name in st["failed"]:
        lines.append(f"    FAIL {name}: {st['failure_reasons'].get(name, '')}")
    for s in st["skipped"]:
        lines.append(f"    skip {s['name']}: {s['reason']}")
    reg = entry.get("regressions", {})
    for name in reg.get("failed_then_passed_on_rerun", []):
        lines.append(f"    FLAKY {name}: passes on {reg['baseline']}, failed here once, "
                     f"passed when run again")
    for name in reg.get("skipped", []):
        lines.append(f"    note {name}: passes on {reg['baseline']}, skipped here")
    if "stress" not in entry["seconds"]:
        lines.append("  stress     not run")
    else:
        lines.append(f"  stress     {sr['ops']} bogo ops, {sr['errors']} verification errors")
    for name, p in sr["phases"].items():
        ops = ", ".join(f"{k} {v}" for k, v in sorted(p["ops"].items()))
        lines.append(f"    {name}: exit {p['exit']} ({p['exit_meaning']}), "
                     f"{p['seconds']} s: {ops}")
        lines += [f"      skipped {s}" for s in p["skipped"]]
        # stress-ng verifies a stressor's work as it goes, but a stressor
        # that finished no bogo op in the phase checked little or nothing
        lines += [f"      note {k}: no bogo op finished in {p['seconds']} s, so "
                  f"--verify checked little of its work"
                  for k, v in sorted(p["ops"].items()) if v == 0 and p["exit"] is not None]
    if sr["vmstat"]:
        lines.append("    vmstat: " + ", ".join(f"{k} {v}" for k, v in sr["vmstat"].items()))
    part = entry["luf_hazards"]
    lines.append(f"  luf_hazards {part['trials']} trials, {part['violations']} violations"
                 + (f" ({part['note']})" if "note" in part else ""))
    for mode, m in part.get("modes", {}).items():
        lazy = (f", {m['luf_folios']} folios unmapped lazily"
                if "luf_folios" in m else "")
        if m.get("refused_trials"):
            lazy += f", {m['refused_trials']} trials refused laziness"
        lines.append(f"    {mode}: {m['trials']} trials, {m['violations']} violations"
                     f"{lazy}, exit {m['exit']}")
    lines.append(f"  splats     {len(entry['splats'])}")
    lines += [f"    {s}" for s in entry["splats"][:10]]
    for p in entry["problems"]:
        lines.append(f"  PROBLEM {p}")
    return "\n".join(lines)


def write_results(summary, text, outdir):
    (outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (outdir / "summary.txt").write_text(text + "\n")
    latest = outdir.parent / "latest"
    tmp = outdir.parent / f".latest-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(outdir.name)
    os.replace(tmp, latest)


def new_outdir():
    base = paths.results_dir() / "tests"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    outdir, n = base / stamp, 1
    while outdir.exists():
        n += 1
        outdir = base / f"{stamp}-{n}"
    outdir.mkdir(parents=True)
    return outdir


def baseline_of(variant, runs):
    """The run `variant` is compared with, if its baseline ran too."""
    return runs.get(BASELINE.get(variant, ""))


# The series' own selftests: a baseline runs them even as a reference only,
# since they must pass on a kernel without the series too.
SERIES_CATEGORIES = ("stale_tlb", "luf_hazards", "swapout_rollback")
REFERENCES = ("whole", "needed")


def reference_categories(changed, categories):
    """The categories of @categories a baseline runs as a reference only:
    the series' own, and each in which a run of @changed (the kernels
    compared with it) failed a test or gave no result at all, which is
    all that judging those kernels needs of it."""
    names = set(SERIES_CATEGORIES)
    for kr in changed:
        names |= {t.category for t in kr.tests
                  if t.status == "fail" or any(s.status == "fail" for s in t.subtests)}
        names |= {c.name for c in categories} - {t.category for t in kr.tests}
    return [c for c in categories if c.name in names]


def run(kernels=("vanilla", "patched"), soak=False, parts=PARTS, reference="whole"):
    """Run the suite; returns (summary dict, text, results directory).

    reference="needed": a baseline that runs beside a kernel compared with
    it runs after that kernel, only the selftests that judging it needs
    (reference_categories()), and no other part; "whole": everything."""
    if reference not in REFERENCES:
        raise LabError(f"unknown reference {reference!r}: choose from "
                       f"{', '.join(REFERENCES)}", exit_code=2)
    for variant in kernels:
        if variant not in KERNELS:
            raise LabError(f"unknown kernel {variant!r}: choose from "
                           f"{', '.join(KERNELS)}", exit_code=2)
        build.built(variant)            # fails now, not after an hour
    # the selftests, and what runs them, for each architecture asked for
    layers, build_failures = {}, {}
    for arch in sorted({build.arch(v) for v in kernels}):
        if arch == arches.HOST:
            mm, build_failures[arch] = safety_build.build_selftests()
            layers[arch] = safety_build.layer(mm)
        else:
            mm, build_failures[arch] = safety_build.build_static(arch)
            layers[arch] = safety_build.arm64_layer(mm)
    outdir = new_outdir()
    say(f"safety: {'soak' if soak else 'quick'} run of {', '.join(kernels)}; "
        f"logs in {outdir}")
    references = ({BASELINE[v] for v in kernels if BASELINE.get(v) in kernels}
                  if reference == "needed" else set())
    runs = {}
    for variant in sorted(kernels, key=lambda v: v in references):
        categories, vparts = None, parts
        if variant in references:
            changed = [kr for v, kr in runs.items() if BASELINE.get(v) == variant]
            categories = reference_categories(changed, selftest_categories(soak))
            vparts = tuple(p for p in parts if p == "selftests")
            say(f"safety: {variant} as a reference only: "
                f"{', '.join(c.name for c in categories)}")
        runs[variant] = run_kernel(variant, soak, layers[build.arch(variant)], outdir,
                                   vparts, categories)
    runs = {v: runs[v] for v in kernels}
    for variant, kr in runs.items():
        if baseline_of(variant, runs) is not None:
            confirm_regressions(kr, baseline_of(variant, runs), soak,
                                layers[build.arch(variant)], outdir)
    summary = {}
    for variant, kr in runs.items():
        entry = summarize(kr, baseline_of(variant, runs))
        entry["mode"] = "soak" if soak else "quick"
        entry["reference_only"] = variant in references
        entry["selftests"]["build_failures"] = build_failures[build.arch(variant)]
        summary[variant] = entry
    text = "\n".join(table(v, e) for v, e in summary.items())
    write_results(summary, text, outdir)
    return summary, text, outdir


# --- command line -------------------------------------------------------------------

def add_arguments(p):
    p.add_argument("--soak", action="store_true",
                   help="every selftest category, long stress phases and 3000 "
                        "trials per mode of luf-hazards (hours under TCG) instead "
                        "of the quick subset")
    p.add_argument("-k", "--kernels", default="vanilla,patched",
                   help="comma-separated: vanilla, patched, debug, vanilla-debug, "
                        "vanilla-distro, patched-distro, vanilla-arm64, patched-arm64 "
                        "(default vanilla,patched); patched is compared with vanilla, "
                        "debug with vanilla-debug, patched-distro with vanilla-distro, "
                        "patched-arm64 with vanilla-arm64 (arm64: the selftests part "
                        "only)")
    p.add_argument("--only", choices=PARTS + (HUNT_PART,),
                   help=f"run one part of the suite; {HUNT_PART}: only the hunt "
                        "of the luf-hazards part, below-random with many seeds")
    p.add_argument("--reference", choices=REFERENCES, default="whole",
                   help="needed: a baseline run beside its kernel (vanilla beside "
                        "patched) runs only the series' selftests and the categories "
                        "that kernel failed in, and no other part, as make test "
                        "does; whole (the default): everything on every kernel")


def main(args):
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    parts = (args.only,) if args.only else PARTS
    summary, text, outdir = run(kernels, args.soak, parts, args.reference)
    print(text)
    bad = [k for k, e in summary.items() if not e["ok"]]
    say(f"safety: {'FAILED on ' + ', '.join(bad) if bad else 'passed'}; "
        f"{outdir / 'summary.json'}")
    return 1 if bad else 0
