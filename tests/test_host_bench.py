"""`bench --host` on a fake machine: a /sys and /proc tree in tmp_path and a
program runner that returns canned results, so no VM, no kernel and no root."""

import argparse
import json
import os
import re
import signal
from pathlib import Path

import pytest

from lab import bench, datadisk, host, suite
from lab.errors import LabError

CONFIGS = ["host", "host/zap_ptes=0", "host/anon_unmap=0", "host/unmap_flush=0",
           "host/hvo_flush=0", "host/luf=0"]
THP = "sys/kernel/mm/transparent_hugepage/enabled"
PERF_STATE = host.perf_state


def files(root, tree):
    for name, text in tree.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A root directory that looks like a patched kernel's, with luf
    booted at 0; the runner is FakeRunner's."""
    root = tmp_path / "root"
    files(root, {f"sys/kernel/mm/tlb_batching/{s}": "1\n" for s in host.SWITCHES})
    files(root, {
        "sys/kernel/mm/tlb_batching/luf": "0\n",
        "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
        "proc/sys/vm/nr_hugepages": "0\n",
        "proc/sys/kernel/osrelease": "6.12.117-unflush\n",
        THP: "always [madvise] never\n",
        "proc/cpuinfo": "processor\t: 0\nmodel name\t: Fake CPU 9000\n\n"
                        "processor\t: 1\nmodel name\t: Fake CPU 9000\n",
        "sys/devices/system/cpu/online": "0-3\n",
        "sys/devices/system/node/node0/cpulist": "0-3\n",
        "sys/devices/system/node/node0/meminfo": "Node 0 MemTotal:  8000 kB\n",
        "sys/devices/system/node/node1/cpulist": "\n",
        "sys/devices/system/node/node1/meminfo": "Node 1 MemTotal:  4000 kB\n",
        "sys/devices/virtual/memory_tiering/memory_tier4/nodelist": "0\n",
        "sys/devices/virtual/memory_tiering/memory_tier22/nodelist": "1\n",
    })
    for cpu in range(4):
        files(root, {f"sys/devices/system/cpu/cpu{cpu}/topology/core_cpus_list":
                     f"{cpu // 2 * 2}-{cpu // 2 * 2 + 1}\n"})
    monkeypatch.setenv("UNFLUSH_HOST_ROOT", str(root))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(host, "program_env", lambda: {})
    monkeypatch.setattr(host, "perf_state", lambda: ([], "perf is not on PATH"))
    monkeypatch.setattr(datadisk, "host_files", lambda quick: tmp_path / "data")
    runner = FakeRunner(root)
    monkeypatch.setattr(host, "run_script", runner)
    return runner


class FakeRunner:
    """Stands for the programs: records which experiment ran in which
    configuration with which switch values, and prints a result for it.
    It leaves nr_hugepages and THP changed, as a killed program would."""

    def __init__(self, root):
        self.root, self.calls, self.fail_at, self.scripts = root, [], None, []

    def __call__(self, script, env):
        exp, config = re.search(r"UNFLUSH-BEGIN (\S+) (\S+)", script).groups()
        self.calls.append((exp, config, switch_values(self.root)))
        self.scripts.append(script)
        (self.root / "proc/sys/vm/nr_hugepages").write_text("64\n")
        (self.root / THP).write_text("always madvise [never]\n")
        if self.fail_at is not None and len(self.calls) == self.fail_at[0]:
            raise self.fail_at[1]
        perf = re.search(r"-o (\S+)", script)
        if perf:
            Path(perf.group(1)).write_text("# started\n\n123,,dTLB-load-misses,10,100.00,,\n"
                                           "<not supported>,,iTLB-load-misses,0,100.00,,\n")
        rec = {"experiment": exp, "rep": 0, "elapsed_s": 0.1 * len(self.calls),
               "tlb_shootdown_irqs": 3, "counters": {"nr_tlb_remote_flush": 2},
               "checks": {}, "missing": []}
        return (f"UNFLUSH-BEGIN {exp} {config}\nUNFLUSH-RESULT {json.dumps(rec)}\n"
                f"UNFLUSH-END {exp} {config} 0\n")


def switch_values(root):
    folder = root / "sys/kernel/mm/tlb_batching"
    if not folder.exists():
        return {}
    return {p.name: p.read_text().strip() for p in sorted(folder.iterdir())}


def bench_args(out, *exps, reps=2, model=None, llama=None):
    return argparse.Namespace(list=False, experiment=list(exps), reps=reps, quick=True,
                              out=str(out), host=True, kernels="vanilla,patched",
                              icount=False, no_build=True, model=model, llama=llama)


def expected_values(config):
    """Every switch at 1 but the one the configuration names."""
    off = config.partition("/")[2].removesuffix("=0")
    return {s: "0" if s == off else "1" for s in host.SWITCHES}


def test_every_configuration_interleaved_round_by_round(machine, tmp_path):
    out = tmp_path / "out"
    assert bench.main(bench_args(out, "swap-loop", "compact-ro")) == 0
    rotated = CONFIGS[1:] + CONFIGS[:1]
    assert [(e, c) for e, c, _ in machine.calls] == (
        [("swap-loop", c) for c in CONFIGS] + [("compact-ro", c) for c in CONFIGS]
        + [("swap-loop", c) for c in rotated] + [("compact-ro", c) for c in rotated])
    for _, config, values in machine.calls:
        assert values == expected_values(config), config
    # compact-ro's files are the host's copies, not the VM's /data
    assert f"--file {tmp_path / 'data'}/model0" in machine.scripts[6]
    doc = json.loads((out / "results.json").read_text())
    for exp in ("swap-loop", "compact-ro"):
        assert sorted(doc["experiments"][exp]) == sorted(CONFIGS)
        for config, reps in doc["experiments"][exp].items():
            assert [r["round"] for r in reps] == [0, 1], (exp, config)
    meta = doc["meta"]
    assert meta["mode"] == "host" and meta["baseline"] == "host"
    assert meta["configurations"] == CONFIGS
    assert meta["switches"]["luf"] == "0" and meta["switches"]["zap_ptes"] == "1"
    report = (out / "report.md").read_text()
    assert "| luf on/off |" in report and "host/luf=0/host" not in report
    assert "interleaved by configuration: host, host/zap_ptes=0" in report
    assert "Fake CPU 9000, 4 CPUs (2 cores), 2 NUMA nodes" in report


def test_switches_and_settings_put_back_after_the_run(machine, tmp_path):
    root = Path(os.environ["UNFLUSH_HOST_ROOT"])
    before = switch_values(root)
    assert bench.main(bench_args(tmp_path / "out", "swap-loop", reps=1)) == 0
    assert switch_values(root) == before
    assert before["luf"] == "0"
    assert (root / "proc/sys/vm/nr_hugepages").read_text().strip() == "0"
    assert (root / THP).read_text().strip() == "madvise"


def test_latest_names_the_newest_run_of_results_only(machine, tmp_path, monkeypatch):
    """results/latest points at the newest run written under results/; a
    directory given with -o, a committed record say, gets nothing beside it."""
    assert bench.main(bench_args(tmp_path / "record", "swap-loop", reps=1)) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if "record" in p.name or
                  p.name == "latest") == ["record"]
    monkeypatch.setattr(bench.paths, "results_dir", lambda: tmp_path / "results")
    args = bench_args(tmp_path / "unused", "swap-loop", reps=1)
    args.out = None
    assert bench.main(args) == 0
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.name != "latest"]
    assert os.readlink(tmp_path / "results" / "latest") == run.name


@pytest.mark.parametrize("stop", [RuntimeError("program runner broke"), KeyboardInterrupt()])
def test_switches_put_back_when_the_run_stops(machine, tmp_path, stop):
    root = Path(os.environ["UNFLUSH_HOST_ROOT"])
    before = switch_values(root)
    machine.fail_at = (3, stop)     # swap-loop on host/anon_unmap=0
    with pytest.raises(type(stop)):
        bench.main(bench_args(tmp_path / "out", "swap-loop"))
    assert machine.calls[-1][2]["anon_unmap"] == "0"
    assert switch_values(root) == before
    assert (root / "proc/sys/vm/nr_hugepages").read_text().strip() == "0"
    assert (root / THP).read_text().strip() == "madvise"
    assert not (tmp_path / "out" / "results.json").exists()


def test_stock_kernel_runs_one_configuration(machine, tmp_path, capsys):
    root = Path(os.environ["UNFLUSH_HOST_ROOT"])
    for p in (root / "sys/kernel/mm/tlb_batching").iterdir():
        p.unlink()
    (root / "sys/kernel/mm/tlb_batching").rmdir()
    assert bench.main(bench_args(tmp_path / "out", "swap-loop", reps=2)) == 0
    assert [(e, c) for e, c, _ in machine.calls] == [("swap-loop", "host")] * 2
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if "configuration" in ln] == [
        f"bench: {root}/sys/kernel/mm/tlb_batching is not there (a kernel without "
        "the series): one configuration, host"]


def test_only_the_switches_there_make_configurations(machine, tmp_path):
    root = Path(os.environ["UNFLUSH_HOST_ROOT"])
    for name in ("luf", "hvo_flush", "anon_unmap"):
        (root / "sys/kernel/mm/tlb_batching" / name).unlink()
    assert bench.main(bench_args(tmp_path / "out", "swap-loop", reps=1)) == 0
    assert [c for _, c, _ in machine.calls] == [
        "host", "host/zap_ptes=0", "host/unmap_flush=0"]


def refused(tmp_path, *words, experiment="swap-loop"):
    with pytest.raises(LabError) as err:
        bench.main(bench_args(tmp_path / "out", experiment))
    message = str(err.value)
    assert "\n" not in message
    for w in words:
        assert w in message
    return message


def test_refuses_without_root(machine, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    refused(tmp_path, "must run as root", "sudo")
    assert machine.calls == []


@pytest.mark.parametrize("controllers", [None, "cpuset cpu io pids\n"])
def test_refuses_a_memcg_experiment_without_cgroup_v2_memory(machine, tmp_path,
                                                             controllers):
    path = Path(os.environ["UNFLUSH_HOST_ROOT"]) / "sys/fs/cgroup/cgroup.controllers"
    if controllers is None:
        path.unlink()
    else:
        path.write_text(controllers)
    why = "there is no cgroup.controllers" if controllers is None else "cgroup v1"
    refused(tmp_path, "ro-reclaim-tiering runs in a memory cgroup", "cgroup v2", why,
            "leave it out with -e", experiment="ro-reclaim-tiering")
    assert machine.calls == []


def test_the_memcg_refusal_names_several_experiments(machine, tmp_path):
    (Path(os.environ["UNFLUSH_HOST_ROOT"]) / "sys/fs/cgroup/cgroup.controllers").unlink()
    with pytest.raises(LabError) as err:
        bench.main(bench_args(tmp_path / "out", "luf-cost", "swap-loop"))
    assert "luf-cost/write, luf-cost/fault, luf-cost/alloc-latency and 3 more run " \
        "in a memory cgroup" in str(err.value)
    assert "leave them out with -e" in str(err.value)
    assert machine.calls == []


def test_runs_without_cgroup_v2_what_needs_no_memory_cgroup(machine, tmp_path):
    """A hybrid-cgroup host (memory on v1) still runs the experiments
    that make no memory cgroup."""
    root = Path(os.environ["UNFLUSH_HOST_ROOT"])
    (root / "sys/fs/cgroup/cgroup.controllers").unlink()
    bench.main(bench_args(tmp_path / "out", "swap-loop", reps=1))
    assert machine.calls
    assert (tmp_path / "out/report.md").is_file()


def test_memcg_marks_the_programs_that_make_a_memory_cgroup():
    """suite's memcg field against the sources: a program that calls
    memcg_create(), itself or through roload_start() (guest/lib/roload.c),
    is marked; one that calls neither is not."""
    guest = Path(__file__).resolve().parent.parent / "guest"
    roload = (guest / "lib/roload.c").read_text()
    start = roload[roload.index("struct roload *roload_start("):]
    assert "memcg_create(" in start[:start.index("\n}\n")]
    for exp in suite.EXPERIMENTS:
        text = (guest / f"{exp.command.split()[0]}.c").read_text()
        makes = "memcg_create(" in text or "roload_start(" in text
        assert exp.memcg == makes, exp.id


def test_refuses_a_switch_directory_without_switches(machine, tmp_path):
    root = Path(os.environ["UNFLUSH_HOST_ROOT"])
    for p in (root / "sys/kernel/mm/tlb_batching").iterdir():
        p.unlink()
    refused(tmp_path, "tlb_batching exists but holds none of zap_ptes")
    assert machine.calls == []


def test_refuses_switches_not_as_expected(machine, tmp_path, monkeypatch):
    root = Path(os.environ["UNFLUSH_HOST_ROOT"])
    folder = root / "sys/kernel/mm/tlb_batching"
    before = switch_values(root)
    (folder / "luf").write_text("maybe\n")
    refused(tmp_path, f"{folder}/luf reads 'maybe', not 0 or 1")
    (folder / "luf").write_text("0\n")
    (folder / "hvo_flush").unlink()
    (folder / "hvo_flush").mkdir()
    refused(tmp_path, f"{folder}/hvo_flush exists but cannot be read")
    (folder / "hvo_flush").rmdir()
    (folder / "hvo_flush").write_text("1\n")
    write = Path.write_text

    def read_only(path, text):
        if path.name == "unmap_flush":
            raise PermissionError(13, "Permission denied")
        return write(path, text)
    monkeypatch.setattr(Path, "write_text", read_only)
    refused(tmp_path, f"cannot write 1 to {folder}/unmap_flush (Permission denied)")
    assert machine.calls == []
    assert switch_values(root) == before


def test_perf_counts_each_program(machine, tmp_path, monkeypatch):
    monkeypatch.setattr(host, "perf_state",
                        lambda: (["dTLB-load-misses", "iTLB-load-misses"], None))
    out = tmp_path / "out"
    assert bench.main(bench_args(out, "swap-loop", reps=1)) == 0
    assert "perf stat -x, -o " in machine.scripts[0]
    assert "-e dTLB-load-misses,iTLB-load-misses -- swap-loop --shape single --reps 1" \
        in machine.scripts[0]
    doc = json.loads((out / "results.json").read_text())
    rep = doc["experiments"]["swap-loop"]["host/luf=0"][0]
    assert rep["perf_stat"] == {"dTLB-load-misses": 123, "iTLB-load-misses": None}
    assert doc["meta"]["perf_stat"]["events"] == ["dTLB-load-misses", "iTLB-load-misses"]


def test_perf_absent_is_said_once(machine, tmp_path, monkeypatch):
    monkeypatch.setattr(host.shutil, "which", lambda name: None)
    monkeypatch.setattr(host, "perf_state", PERF_STATE)    # the real one
    out = tmp_path / "out"
    assert bench.main(bench_args(out, "swap-loop", reps=1)) == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["perf_stat"]["note"].startswith("perf is not on PATH")
    assert "perf stat" not in machine.scripts[0]
    assert (out / "report.md").read_text().count("perf is not on PATH") == 1


def test_machine_meta_of_an_arm64_host(machine):
    root = Path(os.environ["UNFLUSH_HOST_ROOT"])
    files(root, {"proc/cpuinfo": "processor\t: 0\nCPU implementer\t: 0x41\n"
                                 "CPU part\t: 0xd0c\n",
                 "proc/device-tree/model": "Fake Board\0"})
    box = host.machine()
    assert box["cpu_model"] == "implementer 0x41 part 0xd0c (Fake Board)"
    assert box["cpus"] == 4 and box["cores"] == 2
    assert box["numa_nodes"] == {"node0": {"cpus": "0-3", "mem_kib": 8000},
                                 "node1": {"cpus": "", "mem_kib": 4000}}
    assert box["memory_tiers"] == {"memory_tier22": "1", "memory_tier4": "0"}
    assert box["kernel_release"] == "6.12.117-unflush"


def test_ctrl_c_waits_for_the_programs_to_clean_up(tmp_path):
    """A real shell: on Ctrl-C its programs get SIGINT, and run_script
    returns only once they have put back what they changed."""
    done, ready = tmp_path / "cleaned", tmp_path / "trapping"
    script = (f"trap 'sleep 0.3; echo yes > {done}; exit 3' INT\n"
              f": > {ready}\n"
              "while :; do sleep 0.05; done\n")

    def ctrl_c(signum, frame):
        # a shell not yet started as far as its trap dies of SIGINT
        # without cleaning up: Ctrl-C once it has said it is trapping
        if not ready.exists():
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            return
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGALRM, ctrl_c)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            host.run_script(script, dict(os.environ))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert done.read_text() == "yes\n"
