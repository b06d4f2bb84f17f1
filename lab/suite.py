"""The experiments of the five seeds, as guest commands grouped by VM shape.

An experiment is one guest program run with fixed arguments.  Experiments
that want the same machine (memory, swap, NUMA nodes, vCPUs) form a group;
one boot runs one repetition of every experiment of a group, so a bench of R
repetitions on K kernels is R x K boots per group, interleaved by kernel.

`switch` names the run-time switch of the patched kernel that turns the
experiment's mechanism off; a second boot of the patched kernel runs the
experiment with that switch at 0 (configuration `patched/<switch>=0`).
"""

from dataclasses import dataclass, field

from lab import arches, vm
from lab.errors import LabError

FOLIO_SIZES = ["4K", "16K", "32K", "64K", "128K", "256K", "512K", "1024K"]
MODEL_FILES = "/data/model0,/data/model1,/data/model2"
LLAMA_MODELS = "/data/model0.gguf,/data/model1.gguf,/data/model2.gguf"
# ext2 on a zram device of its own at /scratch: the data disk is read-only
SCRATCH = "unflush.scratch=512M"
# pages a second for luf-cost's paced load: half the slowest rate vanilla's
# load reached flat out in a full make bench (9,114 pages a second)
PACED_LOAD_RATE = 4000


@dataclass
class Experiment:
    id: str            # what results.json calls it, e.g. munmap-folio-size/64K
    command: str       # guest command line; --reps 1 and --quick are added
    group: str
    switch: str | None = None
    seed: str = ""
    # runs in a memory cgroup of its own (guest/lib/memcg.c), so it needs
    # cgroup v2 with the memory controller: a VM always has it, a host may not
    memcg: bool = False


@dataclass
class Group:
    name: str
    shape: vm.VMShape
    quick_shape: vm.VMShape
    needs_data_disk: bool = False
    data_disk: str = "models"   # which one: lab/datadisk.py's, or "llama" (lab/llama.py)
    experiments: list = field(default_factory=list)


GROUPS = {
    # Anonymous memory: munmap by folio size, pageout, the swap loop.
    "anon": Group("anon", vm.VMShape(cpus=2, mem="3G", zram="2G", timeout=3600),
                  vm.VMShape(cpus=2, mem="1G", zram="512M", timeout=900)),
    # Two nodes: migration between them, and reclaim/demotion of file pages;
    # /scratch (guest/init.sh) is a writable disk filesystem for luf-cost.
    "numa": Group("numa", vm.VMShape(cpus=2, mem="2G", node1="2G", zram="1G",
                                     append=SCRATCH, timeout=3600),
                  vm.VMShape(cpus=2, mem="1G", node1="1G", zram="512M",
                             append=SCRATCH, timeout=900),
                  needs_data_disk=True),
    # What LUF costs other work (luf-cost): the numa machine with a third
    # vCPU, so that the measured work has CPU 0 to itself and the load
    # (--threads 2) CPUs 1-2.  Under --icount its CPU time still includes
    # the load's instructions (docs/insn-profile.md); vCPU 0's instruction
    # count does not.
    "luf-cost": Group("luf-cost", vm.VMShape(cpus=3, mem="2G", node1="2G", zram="1G",
                                             append=SCRATCH, timeout=3600),
                      vm.VMShape(cpus=3, mem="1G", node1="1G", zram="512M",
                                 append=SCRATCH, timeout=900),
                      needs_data_disk=True),
    # Reclaim of read-only file pages alone, without a node to demote to:
    # ro-reclaim-tiering's load on a machine both architectures have.
    "reclaim": Group("reclaim", vm.VMShape(cpus=2, mem="2G", timeout=3600),
                     vm.VMShape(cpus=2, mem="1G", timeout=900),
                     needs_data_disk=True),
    # Seed 001's own workload: llama.cpp's llama-simple runs 4 threads (its
    # default, not settable), so 4 vCPUs; only page cache, no swap.
    "llama": Group("llama", vm.VMShape(cpus=4, mem="2G", node1="2G", timeout=3600),
                   vm.VMShape(cpus=4, mem="1G", node1="1G", timeout=900),
                   needs_data_disk=True, data_disk="llama"),
    # hugetlb vmemmap optimisation: its flushes go to every CPU.
    "hugetlb": Group("hugetlb", vm.VMShape(cpus=4, mem="3G", timeout=1800),
                     vm.VMShape(cpus=4, mem="1G", timeout=600)),
}


def _experiments():
    out = []
    for shape in ("single", "threads"):
        sfx = "" if shape == "single" else "/threads"
        for size in FOLIO_SIZES:
            out.append(Experiment(f"munmap-folio-size/{size}{sfx}",
                                  f"munmap-folio-size --size {size} --shape {shape}",
                                  "anon", "zap_ptes", "000"))
        for size in ("64K", "4K"):
            out.append(Experiment(f"pageout-mthp/{size}{sfx}",
                                  f"pageout-mthp --size {size} --shape {shape}",
                                  "anon", "anon_unmap", "002"))
        out.append(Experiment(f"swap-loop{sfx}", f"swap-loop --shape {shape}",
                              "anon", "unmap_flush", "004"))
    out.append(Experiment("migrate-loop", "migrate-loop --shape threads", "numa",
                          "unmap_flush", "004"))
    out.append(Experiment("migrate-loop/single", "migrate-loop --shape single", "numa",
                          "unmap_flush", "004"))
    out.append(Experiment("ro-reclaim-tiering", f"ro-reclaim-tiering --files {MODEL_FILES}",
                          "numa", "luf", "001", memcg=True))
    # ... without tiering: reclaim alone takes the pages
    out.append(Experiment("ro-reclaim", f"ro-reclaim-tiering --files {MODEL_FILES}",
                          "reclaim", "luf", "001", memcg=True))
    # LUF in compaction: node 1 compacted around a read-only mapped file
    out.append(Experiment("compact-ro", "compact-ro --file /data/model0",
                          "numa", "luf", "001"))
    # ... and a process's THP faults compacting it, 2M at a time (order 9)
    out.append(Experiment("compact-ro/thp", "compact-ro --file /data/model0 --thp 256M",
                          "numa", "luf", "001"))
    # what LUF costs other work while ro-reclaim-tiering's load runs
    for what in ("write", "fault", "alloc-latency"):
        out.append(Experiment(f"luf-cost/{what}",
                              f"luf-cost {what} --threads 2 --files {MODEL_FILES}",
                              "luf-cost", "luf", "001", memcg=True))
    # ... and the same work beside that load held to a rate every
    # configuration reaches: flat out, LUF's load runs about twice as fast,
    # so the flat-out phases compare work beside twice the reclaim (and,
    # on a 2-core host, beside vCPUs that take more of it); paced, every
    # configuration faces the same reclaim
    for what in ("write", "fault", "alloc-latency"):
        out.append(Experiment(f"luf-cost/{what}/paced",
                              f"luf-cost {what} --threads 2 --load-rate {PACED_LOAD_RATE} "
                              f"--files {MODEL_FILES}", "luf-cost", "luf", "001",
                              memcg=True))
    # the real thing: three llama.cpp inferences over mmapped GGUF models
    out.append(Experiment("llama-tiering", f"llama-tiering --llama /data/llama-simple "
                          f"--models {LLAMA_MODELS}", "llama", "luf", "001",
                          memcg=True))
    for hvo in (0, 1):
        out.append(Experiment(f"hugetlb-hvo/hvo={hvo}",
                              f"hugetlb-hvo --hvo {hvo}", "hugetlb",
                              "hvo_flush" if hvo else None, "003"))
    return out


EXPERIMENTS = _experiments()

def refusal(experiment, arch):
    """Why @experiment cannot run on a kernel of @arch, or None if it can."""
    return arches.ARCHES[arch].refused_groups.get(experiment.group)


def select(patterns):
    """The experiment a pattern names exactly, else those whose id starts
    with it (all if no pattern): `pageout-mthp/64K` is that one experiment,
    `pageout-mthp` all four."""
    if not patterns:
        return list(EXPERIMENTS)
    chosen = []
    for pat in patterns:
        hits = ([e for e in EXPERIMENTS if e.id == pat] or
                [e for e in EXPERIMENTS if e.id.startswith(pat)])
        if not hits:
            raise LabError(f"unknown experiment {pat!r}: `python3 -m lab bench --list` "
                           f"shows them", exit_code=2)
        chosen += [e for e in hits if e not in chosen]
    return chosen



def owner(key, experiments=None):
    """The experiment a results key belongs to, or None: the one with the
    longest id that is the key or the key less its phase, so that
    `luf-cost/write/paced/tmpfs` is luf-cost/write/paced's and not
    luf-cost/write's."""
    hits = [e for e in (EXPERIMENTS if experiments is None else experiments)
            if key == e.id or key.startswith(e.id + "/")]
    return max(hits, key=lambda e: len(e.id), default=None)


def paced_twin(key):
    """The results key of the same measurement beside a load held to
    PACED_LOAD_RATE (`luf-cost/write/tmpfs` -> `luf-cost/write/paced/tmpfs`),
    or None if the key's experiment has no paced twin."""
    exp = owner(key)
    if exp is None or not any(e.id == exp.id + "/paced" for e in EXPERIMENTS):
        return None
    return exp.id + "/paced" + key[len(exp.id):]


def result_key(experiment, record):
    """results.json's id for a record: the suite's id, plus a phase if any
    (hugetlb-hvo reports an alloc and a free phase per repetition)."""
    phase = record.get("phase")
    return f"{experiment.id}/{phase}" if phase else experiment.id
