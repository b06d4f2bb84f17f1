"""guest/luf-hazards: its modes, and the machine each group of them needs.

Each mode takes pages away lazily (LUF) and then makes a fresh translation
give other bytes; the reader must see the change (tests/test_luf.py says
what each one does).  They are the hazards the series' selftest,
luf_hazards in tools/testing/selftests/mm (SELFTEST_TESTS), leaves to the
lab: those that write a mounted filesystem's device, or need swap, a
CPU-less node or a quiet machine.  The modes share a guest by what they
need, one boot per group; tests/test_luf.py and the safety suite's
luf-hazards part run them the same way, and the selftest in the guest of
the file modes.
"""

import time

from lab import arches, vm

MODES = ("bdev", "bdev-closed", "reuse", "demote", "anon-write", "anon-force",
         "anon-reuse", "anon-move", "swap-below", "anon-demote", "compact")
# the modes that change a file's blocks below its filesystem's device, each
# on a stack of its own: loop devices in /scratch (and a partition, device
# mapper or md over them), or scsi_debug's disk; a guest of their own,
# apart from the bdev modes, which mount /scratch again after every trial
BELOW_MODES = ("loop-backing", "partition", "loop-change-fd", "dm-linear",
               "dm-reload", "loop-offset", "md-raid1", "dm-crypt", "dm-snapshot",
               "dm-thin", "scsi-passthrough", "nvme-passthrough", "zone-reset",
               "below-random")
# the modes whose filesystem is on one of the guest's NVMe namespaces (a
# plain one, a zoned one), each of this size
NVME_MODES = ("nvme-passthrough", "zone-reset")
NVME = "64M"
MODES += BELOW_MODES
# The standing hunt: below-random draws a stack of loop, partitions and
# device mapper, and the routes that change its blocks, from its --seed;
# runs of it with many seeds, a few trials each, hunt across stacks.  By
# run length: seeds, trials each.
RANDOM_MODE = "below-random"
HUNT = {"quick": (16, 25), "soak": (200, 50)}
# the tests of the series' selftest of LUF's rules (luf_hazards.c), in order
SELFTEST_TESTS = ("cow", "force", "write", "dio", "truncate", "remap")
SELFTEST_PAGES = 4      # a trial's pages there (NR_PAGES)
# modes whose every trial a correct kernel refuses to make lazy (the
# device had a writer since its mount): they pass by refusing, with no
# folio unmapped lazily
REFUSED_MODES = ("bdev-closed",)
# modes that need a CPU-less node 1: in a lower memory tier to demote to,
# or, for compact, a node holding nothing else to compact; the others keep
# the guest they were measured in
NODE1_MODES = ("demote", "anon-demote", "compact")
# modes whose pages are anonymous and go to swap
SWAP_MODES = ("anon-write", "anon-force", "anon-reuse", "anon-move",
              "swap-below", "anon-demote")
# /scratch for runs of a few hundred trials a mode
SCRATCH = "128M"


def shape(modes, timeout=900, scratch=SCRATCH):
    """The guest for @modes.  unflush.scratch: an ext2 on zram at /scratch
    (guest/init.sh), a disk filesystem the program can write its files on;
    tmpfs has no clean page cache to drop.  Its files grow with the trials
    (remap's 3000 need 197 MiB), and zram allocates only what is written.
    node1: a CPU-less node that HMAT puts in a lower memory tier
    (lab/vm.py), for the modes that demote, and for compact.  zram: swap
    for the anonymous modes' pages.  nvme: a blank NVMe disk, with a plain
    and a zoned namespace, for the modes whose filesystem is on one."""
    node1 = "512M" if set(modes) & set(NODE1_MODES) else None
    zram = "256M" if set(modes) & set(SWAP_MODES) else None
    nvme = NVME if set(modes) & set(NVME_MODES) else None
    return vm.VMShape(cpus=2, mem="1G", node1=node1, zram=zram, nvme=nvme,
                      append=f"unflush.scratch={scratch}", timeout=timeout)


def arm64_groups():
    """groups() less the modes an arm64 guest cannot run."""
    refused = arches.ARCHES["arm64"].refused_luf_modes
    out = [tuple(m for m in g if m not in refused) for g in groups()]
    return [g for g in out if g]


def groups():
    """The modes that share a guest: the file modes, demote, the anonymous
    modes, anon-demote, compact (which locks half of node 1), the modes
    below the filesystem."""
    return [tuple(m for m in MODES
                  if m not in NODE1_MODES + SWAP_MODES + BELOW_MODES),
            ("demote",),
            tuple(m for m in SWAP_MODES if m not in NODE1_MODES),
            ("anon-demote",),
            ("compact",),
            BELOW_MODES]


def hunt_seeds(n):
    """@n seeds, new in every run of the hunt (it is one to go on finding
    stacks no run has tried), and each printed with its run's result."""
    base = int(time.time()) % 1_000_000 * 1000
    return [base + i for i in range(n)]


def hunt_script(length, disable_rules=None):
    """The guest's script for a hunt of @length (HUNT): each seed's run of
    below-random, labelled `RUN seed-<n>` (tests/stale_reads.runs())."""
    seeds, trials = HUNT[length]
    rules = f" --disable-rules {disable_rules}" if disable_rules else ""
    return "".join(f"echo RUN seed-{s}; luf-hazards {RANDOM_MODE} --seed {s} "
                   f"--trials {trials}{rules}\n" for s in hunt_seeds(seeds))
