"""The suite's bookkeeping: scripts, parsing, failures, the report."""

import json
from pathlib import Path

import pytest

from lab import bench, bench_script, build, insnprof, report, suite
from lab.errors import LabError


def written_report(folder, doc):
    """The report.md that report.write() makes of @doc in @folder."""
    report.write(folder, doc)
    return (Path(folder) / "report.md").read_text()


def rec(exp, elapsed, irqs, **counters):
    return "UNFLUSH-RESULT " + json.dumps({
        "experiment": exp, "shape": "single", "rep": 0, "elapsed_s": elapsed,
        "tlb_shootdown_irqs": irqs, "counters": counters, "checks": {}, "missing": []})


def test_switch_off_runs_in_a_boot_of_its_own():
    exps = suite.select(["munmap-folio-size/64K"])[:1]
    van = bench.guest_script(exps, "vanilla", quick=True)
    pat = bench.guest_script(exps, "patched", quick=True)
    off = bench.guest_script(exps, "patched", quick=True, switches_off=True)
    assert "zap_ptes" not in van and "zap_ptes" not in pat
    assert "UNFLUSH-BEGIN munmap-folio-size/64K patched\n" in pat
    assert "echo 0 > /sys/kernel/mm/tlb_batching/zap_ptes" in off
    assert "UNFLUSH-BEGIN munmap-folio-size/64K patched/zap_ptes=0" in off
    assert "UNFLUSH-BEGIN munmap-folio-size/64K patched\n" not in off
    assert "--reps 1 --quick" in van


def test_every_boot_runs_the_same_programs_in_the_same_order():
    """The configurations must not differ in what ran before the measured
    program: the off boot runs a program without a switch too."""
    exps = suite.select(["hugetlb-hvo"])
    assert [e.switch for e in exps] == [None, "hvo_flush"]
    def order(script):
        return [ln.split("UNFLUSH-BEGIN ")[1].split()[0]
                for ln in script.splitlines() if "UNFLUSH-BEGIN " in ln]
    van = bench.guest_script(exps, "vanilla", quick=False)
    off = bench.guest_script(exps, "patched", quick=False, switches_off=True)
    assert order(van) == order(off) == ["hugetlb-hvo/hvo=0", "hugetlb-hvo/hvo=1"]
    assert "UNFLUSH-BEGIN hugetlb-hvo/hvo=0 patched\n" in off
    assert bench.boots(["vanilla", "patched", "debug"], exps) == [
        ("vanilla", False), ("patched", False), ("patched", True),
        ("debug", False), ("debug", True)]
    assert bench.boots(["patched"], exps[:1]) == [("patched", False)]
    assert bench.boots(["host"], exps) == [("host", False)]


def test_parse_results_and_failures():
    exps = suite.select(["munmap-folio-size/64K", "pageout-mthp/64K"])
    exps = [e for e in exps if e.id in ("munmap-folio-size/64K", "pageout-mthp/64K")]
    out = "\n".join([
        "UNFLUSH-BEGIN munmap-folio-size/64K patched",
        rec("munmap-folio-size/64K", 0.5, 10, nr_tlb_remote_flush=4),
        "UNFLUSH-END munmap-folio-size/64K patched 0",
        "UNFLUSH-BEGIN pageout-mthp/64K patched",
        "UNFLUSH-WINDOW 7.0",
        "UNFLUSH-WINDOW 7.1",
        "pageout-mthp: note: tlb_flush tracepoint unavailable on this kernel, not counted",
        "pageout-mthp: no swap is configured; boot with --zram",
        "UNFLUSH-END pageout-mthp/64K patched 1",
    ])
    results, failures = {}, []
    bench_script.parse_output(out, exps, results, failures, {"kernel": "patched", "round": 0})
    (r,) = results["munmap-folio-size/64K"]["patched"]
    assert r["counters"]["nr_tlb_remote_flush"] == 4 and r["round"] == 0
    (f,) = failures
    assert f["experiment"] == "pageout-mthp/64K" and f["exit"] == 1
    # neither the profiler's window marks nor a note says why it failed
    assert f["message"] == "pageout-mthp: no swap is configured; boot with --zram"


def test_hugetlb_phases_are_separate_experiments():
    (exp,) = suite.select(["hugetlb-hvo/hvo=1"])
    assert suite.result_key(exp, {"phase": "alloc"}) == "hugetlb-hvo/hvo=1/alloc"


def test_report_medians_and_ratio(tmp_path):
    def reps(xs):
        return [json.loads(rec("x", t, i, nr_tlb_remote_flush=i)[15:]) for t, i in xs]
    doc = {"meta": {"date": "d", "host": "h", "mode": "tcg", "quick": True, "reps": 3,
                    "kernels": {"vanilla": {"release": "6.12.117"}}, "series": []},
           "experiments": {"swap-loop": {"vanilla": reps([(1.0, 10), (2.0, 20), (3.0, 30)]),
                                         "patched": reps([(1.0, 1), (1.0, 2), (1.0, 3)])}},
           "failures": []}
    text = written_report(tmp_path, doc)
    assert "| tlb_shootdown_irqs | 20 [10-30] | 2 [1-3] | 0.100 |" in text
    assert "| elapsed_s | 2 [1-3] | 1 | 0.500 |" in text


def test_report_names_the_baseline_kernel_first(tmp_path):
    """results.json is written with sorted keys, so a report written again
    from it reads the kernels in the alphabet's order, not the run's."""
    doc = {"meta": {"date": "d", "host": "h", "mode": "tcg", "quick": True, "reps": 1,
                    "baseline": "vanilla",
                    "kernels": {"patched": {"release": "6.12.118-patched"},
                                "vanilla": {"release": "6.12.118-vanilla"}},
                    "series": []},
           "experiments": {}, "failures": []}
    text = written_report(tmp_path, doc)
    assert ("- kernels: vanilla `6.12.118-vanilla`, patched `6.12.118-patched`"
            in text)


def test_report_has_switch_on_off_ratio(tmp_path):
    def reps(xs):
        return [json.loads(rec("x", t, i, nr_tlb_remote_flush=i)[15:]) for t, i in xs]
    doc = {"meta": {"date": "d", "host": "h", "mode": "tcg", "quick": True, "reps": 1,
                    "kernels": {"vanilla": {"release": "6.12.117"}}, "series": []},
           "experiments": {"swap-loop": {"vanilla": reps([(2.0, 40)]),
                                         "patched": reps([(1.0, 10)]),
                                         "patched/unmap_flush=0": reps([(2.0, 40)])}},
           "failures": []}
    text = written_report(tmp_path, doc)
    assert ("| metric | vanilla | patched | patched/unmap_flush=0 | patched/vanilla "
            "| patched/unmap_flush=0/vanilla | unmap_flush on/off |") in text
    assert "| tlb_shootdown_irqs | 40 | 10 | 40 | 0.250 | 1.000 | 0.250 |" in text


def test_select_exact_id_then_prefix():
    assert [e.id for e in suite.select(["pageout-mthp/64K"])] == ["pageout-mthp/64K"]
    assert {e.id for e in suite.select(["pageout-mthp"])} == {
        "pageout-mthp/64K", "pageout-mthp/4K", "pageout-mthp/64K/threads",
        "pageout-mthp/4K/threads"}


def test_report_rows_for_rates_and_latencies(tmp_path):
    def rep(p50, p99, rate):
        r = json.loads(rec("luf-cost/alloc-latency", 1.0, 3, nr_tlb_remote_flush=3)[15:])
        r.update(alloc_lat_p50_ns=p50, alloc_lat_p99_ns=p99, alloc_ops_per_s=rate,
                 alloc_ops_per_cpu_s=2 * rate, alloc_ops=5000, dir="/scratch")
        return r
    doc = {"meta": {"date": "d", "host": "h", "mode": "tcg", "quick": True, "reps": 1,
                    "kernels": {"patched": {"release": "6.12.117"}}, "series": []},
           "experiments": {"luf-cost/alloc-latency": {
               "patched": [rep(100, 900, 2000.0), rep(120, 1100, 1800.0)],
               "patched/luf=0": [rep(110, 1000, 1900.0)]}},
           "failures": []}
    rows = report.metrics_of(doc["experiments"]["luf-cost/alloc-latency"])
    assert rows[-5:] == ["alloc_lat_p50_ns", "alloc_lat_p99_ns", "alloc_ops_per_cpu_s",
                         "alloc_ops_per_s", "elapsed_s"]
    assert "alloc_ops" not in rows and "dir" not in rows
    text = written_report(tmp_path, doc)
    assert "| alloc_lat_p99_ns | 1000 [900-1100] | 1000 | 1.000 |" in text
    assert "| alloc_ops_per_s | 1900 [1800-2000] | 1900 | 1.000 |" in text


def test_luf_cost_runs_with_the_data_disk_and_scratch():
    exps = suite.select(["luf-cost"])
    assert [e.id for e in exps] == ["luf-cost/write", "luf-cost/fault",
                                    "luf-cost/alloc-latency", "luf-cost/write/paced",
                                    "luf-cost/fault/paced",
                                    "luf-cost/alloc-latency/paced"]
    # an exact id is the uncapped experiment alone; the paced ones cap the load
    assert [e.id for e in suite.select(["luf-cost/alloc-latency"])] == [
        "luf-cost/alloc-latency"]
    assert not any("--load-rate" in e.command for e in exps[:3])
    assert all(f"--load-rate {suite.PACED_LOAD_RATE}" in e.command for e in exps[3:])
    assert all(e.group == "luf-cost" and e.switch == "luf" and e.seed == "001"
               for e in exps)
    group = suite.GROUPS["luf-cost"]
    assert group.needs_data_disk
    # the measured work on CPU 0, the load's two threads on CPUs 1-2
    assert group.shape.cpus == group.quick_shape.cpus == 3
    assert all("--threads 2" in e.command for e in exps)
    assert "unflush.scratch=" in group.shape.append
    assert "unflush.scratch=" in group.quick_shape.append
    script = bench.guest_script(exps[:1], "patched", quick=True, switches_off=True)
    assert "UNFLUSH-BEGIN luf-cost/write patched/luf=0" in script
    assert "luf-cost write --threads 2 --files /data/model0" in script


def test_instruction_windows_pair_with_results(tmp_path):
    """A result gets the window its phase named, whatever the phases without
    a result (set-up) opened in between; a count that does not pair up is
    reported, not guessed."""
    (tmp_path / "window.0").write_text("401000 5 1000 7\nffffffff81000000 10 200 0\n")
    (tmp_path / "window.1").write_text("401000 5 99 99\n")    # set-up phase
    (tmp_path / "window.2").write_text("401000 5 50 0\n")
    out = ("UNFLUSH-BEGIN luf-cost/fault patched\n"
           "UNFLUSH-WINDOW 7.0\n"
           'UNFLUSH-RESULT {"experiment":"luf-cost/fault","window":"7.0","ops":100,'
           '"counters":{"a":1}}\n'
           "noise\n"
           "UNFLUSH-WINDOW 8.0\n"
           "UNFLUSH-WINDOW 8.1\n"
           'UNFLUSH-RESULT {"experiment":"luf-cost/fault","window":"8.1","ops":0}\n'
           'UNFLUSH-RESULT {"experiment":"luf-cost/fault"}\n'
           "UNFLUSH-END luf-cost/fault patched 0\n")
    text, why = insnprof.annotate(out, tmp_path)
    assert why is None
    recs = [json.loads(ln[15:]) for ln in text.splitlines() if ln.startswith("UNFLUSH-RESULT")]
    assert recs[0]["counters"] == {"a": 1, "insns/vcpu0": 1200, "insns/all": 1207,
                                   "insns/vcpu0_per_op": 12, "insns/all_per_op": 12}
    assert recs[1]["counters"] == {"insns/vcpu0": 50, "insns/all": 50}  # no ops, no ratio
    assert "counters" not in recs[2]                                     # had no window
    assert "noise" in text and text.startswith("UNFLUSH-BEGIN")
    (tmp_path / "window.3").write_text("401000 5 50 0\n")
    same, why = insnprof.annotate(out, tmp_path)
    assert same == out and "4 instruction windows for 3 phases" in why
    # and the report shows them with the counts
    rows = report.metrics_of({"patched": recs})
    assert "insns/vcpu0_per_op" in rows


def test_marked_ops_get_their_own_percentiles(tmp_path):
    """window.N.ops (the ops a phase marked) gives the measured vCPU's
    instructions per op a median and a tail; other vCPUs' ops are not its."""
    (tmp_path / "window.0").write_text("401000 5 1000 0\n")
    # 100 ops on vCPU 0: 1..100 instructions, and one on vCPU 1
    (tmp_path / "window.0.ops").write_text(
        "".join(f"0 {n}\n" for n in range(100, 0, -1)) + "1 999999\n")
    out = ("UNFLUSH-WINDOW 7.0\n"
           'UNFLUSH-RESULT {"experiment":"luf-cost/alloc-latency","window":"7.0",'
           '"ops":100}\n')
    text, why = insnprof.annotate(out, tmp_path)
    assert why is None                  # window.0.ops is not taken for a window
    counters = json.loads(text.splitlines()[1][15:])["counters"]
    assert {k: v for k, v in counters.items() if "_op_" in k} == {
        "insns/vcpu0_op_p50": 51, "insns/vcpu0_op_p90": 91,
        "insns/vcpu0_op_p99": 100, "insns/vcpu0_op_max": 100}
    # under --icount the median and the tail are the task's own costs
    assert report.is_judged("insns/vcpu0_op_p99", "icount")
    assert report.is_judged("insns/vcpu0_op_p50", "icount")
    assert not report.is_judged("insns/vcpu0_op_max", "icount")
    assert not report.is_judged("insns/vcpu0_op_p99", "tcg")


def test_spread_verdict_needs_ranges_apart():
    lower = "insns/vcpu0_per_op"
    assert report.against_spread((10, 9, 11), (12, 11.5, 13), lower) == "worse"
    assert report.against_spread((10, 9, 11), (11, 11, 13), lower) == "within"
    assert report.against_spread((10, 9, 11), (8, 7, 8.5), lower) == "better"
    # a rate: more is better
    assert report.against_spread((10, 9, 11), (8, 7, 8.5), "write_ops_per_s") == "worse"
    assert report.against_spread((10, 9, 11), (12, 12, 13), "write_ops_per_s") == "better"


def test_report_lists_costs_outside_the_spread(tmp_path):
    def reps(xs):
        return [json.loads(rec("x", t, 1, nr_tlb_remote_flush=i)[15:]) for t, i in xs]
    doc = {"meta": {"date": "d", "host": "h", "mode": "tcg", "quick": True, "reps": 2,
                    "kernels": {"vanilla": {"release": "6.12.117"}}, "series": []},
           "experiments": {
               # slower in every repetition, and a count that fell: only time is judged
               "swap-loop": {"vanilla": reps([(1.0, 10), (1.1, 10)]),
                             "patched": reps([(1.3, 1), (1.2, 1)]),
                             "patched/unmap_flush=0": reps([(9.0, 10), (9.0, 10)])},
               "migrate-loop": {"vanilla": reps([(1.0, 5), (2.0, 5)]),
                                "patched": reps([(1.5, 5), (2.5, 5)])},
               # one repetition of vanilla: no spread, not judged
               "pageout-mthp/4K": {"vanilla": reps([(1.0, 1)]),
                                   "patched": reps([(5.0, 1), (5.0, 1)])}},
           "failures": []}
    verdicts = report.spread_verdicts(doc)
    assert [(e, k, m, v) for e, k, m, _, _, v in verdicts] == [
        ("swap-loop", "patched", "elapsed_s", "worse"),
        ("migrate-loop", "patched", "elapsed_s", "within")]
    text = written_report(tmp_path, doc)
    assert "2 costs in 2 experiments: 1 worse, 0 better, 1 within the spread." in text
    assert "| swap-loop | elapsed_s | patched | 1.05 [1-1.1] | 1.25 [1.2-1.3] | 1.190 |" in text
    assert "Better:" not in text


def test_report_judges_each_mechanism_against_itself_switched_off(tmp_path):
    """LUF's targets are "within the spread of LUF switched off": patched
    is judged against patched/luf=0 too, even in a run without vanilla."""
    def reps(ts):
        return [json.loads(rec("x", t, 1)[15:]) for t in ts]
    doc = {"meta": {"date": "d", "host": "h", "mode": "tcg", "quick": True, "reps": 2,
                    "kernels": {"patched": {"release": "6.12.117"}}, "series": []},
           "experiments": {
               "luf-cost/write": {"patched": reps([2.0, 2.1]),
                                  "patched/luf=0": reps([1.0, 1.1])},
               "swap-loop": {"patched": reps([1.0, 1.1]),
                             "patched/unmap_flush=0": reps([1.05, 1.2])},
               # one repetition switched off: no spread, not judged
               "migrate-loop": {"patched": reps([1.0, 1.1]),
                                "patched/unmap_flush=0": reps([9.0])}},
           "failures": []}
    assert report.spread_verdicts(doc) == []
    assert [(e, k, sw, m, v) for e, k, sw, m, _, _, v in report.switch_verdicts(doc)] == [
        ("swap-loop", "patched", "unmap_flush", "elapsed_s", "within"),
        ("luf-cost/write", "patched", "luf", "elapsed_s", "worse")]
    text = written_report(tmp_path, doc)
    assert "No kernel against vanilla" in text
    assert "2 costs in 2 experiments: 1 worse, 0 better, 1 within the spread." in text
    assert "| luf-cost/write | elapsed_s | patched | luf | 1.05 [1-1.1] | 2.05 [2-2.1] " \
           "| 1.952 |" in text


def test_a_phase_belongs_to_the_longest_id_that_names_it():
    """luf-cost/write/paced/tmpfs is the paced experiment's phase, though
    luf-cost/write is a prefix of it too."""
    assert suite.owner("luf-cost/write/paced/tmpfs").id == "luf-cost/write/paced"
    assert suite.owner("luf-cost/write/tmpfs").id == "luf-cost/write"
    assert suite.owner("luf-cost/alloc-latency").id == "luf-cost/alloc-latency"
    assert suite.owner("hugetlb-hvo/hvo=1/free").id == "hugetlb-hvo/hvo=1"
    assert suite.owner("no-such-thing") is None
    ids = ["luf-cost/write/tmpfs", "luf-cost/write/paced/tmpfs", "luf-cost/write/cpu"]
    assert sorted(ids, key=report.suite_order) == [
        "luf-cost/write/cpu", "luf-cost/write/tmpfs", "luf-cost/write/paced/tmpfs"]


def test_report_says_when_there_is_no_spread(tmp_path):
    def reps(xs):
        return [json.loads(rec("x", t, 1)[15:]) for t in xs]
    doc = {"meta": {"date": "d", "host": "h", "mode": "tcg", "quick": True, "reps": 1,
                    "kernels": {"vanilla": {"release": "6.12.117"}}, "series": []},
           "experiments": {"swap-loop": {"vanilla": reps([1.0]), "patched": reps([2.0])}},
           "failures": []}
    assert "Nothing to judge" in written_report(tmp_path, doc)


def icount_reps(own, elapsed=None):
    """Repetitions of an --icount run: vCPU 0's instructions per operation
    from @own, guest seconds from @elapsed (1.0 each if not given)."""
    out = []
    for o, t in zip(own, elapsed or [1.0] * len(own), strict=True):
        r = json.loads(rec("x", t, 0)[15:])
        r["counters"]["insns/vcpu0_per_op"] = o
        out.append(r)
    return out


def test_spread_under_icount_judges_own_instructions_only():
    """Beside busy vCPUs a task's guest time under --icount holds their
    turns: only insns/vcpu0_per_op is the task's own cost."""
    doc = {"meta": {"mode": "icount"},
           "experiments": {"luf-cost/write": {
               "vanilla": icount_reps([100, 101], [1.0, 1.1]),
               "patched": icount_reps([100, 102], [2.0, 2.1])}}}
    assert [(m, v) for _, _, m, _, _, v in report.spread_verdicts(doc)] == [
        ("insns/vcpu0_per_op", "within")]


def test_vanilla_against_itself_calibrates_the_yardstick(tmp_path):
    """With four or more repetitions, vanilla's halves are judged against
    each other: how far apart one kernel lands, beside a kernel's cost."""
    doc = {"meta": {"date": "d", "host": "h", "mode": "icount", "quick": True,
                    "reps": 4, "kernels": {"vanilla": {"release": "6.12.117"}},
                    "series": []},
           "experiments": {
               # halves {100,101} {103,104} are apart in one split of three
               "swap-loop": {"vanilla": icount_reps([100, 103, 104, 101]),
                             "patched": icount_reps([140, 141, 139, 140])},
               # three repetitions: no halves with a spread
               "migrate-loop": {"vanilla": icount_reps([50, 50, 50]),
                                "patched": icount_reps([60, 60, 60])}},
           "failures": []}
    name = "insns/vcpu0_per_op"
    assert report.baseline_halves(icount_reps([1, 2, 3])) == []
    assert len(report.baseline_halves(icount_reps([1, 2, 3, 4, 5, 6]))) == 10
    # splits {100,103}|{104,101}, {100,104}|{103,101}, {100,101}|{103,104}
    assert report.self_spread(doc) == {("swap-loop", name): (3, 1, 3)}
    text = written_report(tmp_path, doc)
    assert "in 1 experiment, vanilla's repetitions split" in text
    assert "gave 1 of 3 comparisons outside the spread" in text
    assert "| swap-loop | insns/vcpu0_per_op | patched | 102 [100-104] | 140 [139-141] " \
           "| 1.373 | 38 | 3 |" in text
    assert "| migrate-loop | insns/vcpu0_per_op | patched | 50 | 60 | 1.200 | 10 | - |" in text


def test_report_compares_every_cost_with_the_baseline_in_one_table(tmp_path):
    """The compare table: a row per experiment and judged cost, the
    baseline's median [min-max], each kernel's with its change in per cent,
    the kernel with its switch off, and the baseline against itself."""
    doc = {"meta": {"date": "d", "host": "h", "mode": "icount", "quick": True,
                    "reps": 4, "kernels": {"vanilla": {"release": "6.12.117"}},
                    "series": []},
           "experiments": {
               "swap-loop": {"vanilla": icount_reps([100, 103, 104, 101]),
                             "patched": icount_reps([140, 141, 139, 140]),
                             "patched/unmap_flush=0": icount_reps([100, 100, 100, 100])},
               "migrate-loop": {"vanilla": icount_reps([50, 50, 50]),
                                "patched": icount_reps([60, 60, 60])}},
           "failures": []}
    text = written_report(tmp_path, doc)
    assert "| experiment | cost | vanilla | patched | patched, switch off | " \
           "vanilla vs itself |" in text
    assert "| swap-loop | insns/vcpu0_per_op | 102 [100-104] | 140 [139-141] (+37.3 %) " \
           "| unmap_flush=0: 100 (-2.0 %) | 3 |" in text
    assert "| migrate-loop | insns/vcpu0_per_op | 50 | 60 (+20.0 %) | - | - |" in text
    # counts and guest time are not costs under --icount
    assert "| swap-loop | elapsed_s |" not in text.split("## Outside")[0]
    # a run of one kernel has nothing to set beside it
    doc["experiments"] = {"swap-loop": {"vanilla": icount_reps([1, 2])}}
    assert "## Against vanilla" not in written_report(tmp_path, doc)


def test_series_kernels_are_compared_with_a_baseline_built_alike():
    """The report credits the series with every difference from the
    baseline, so a kernel built another way (jump labels, KASAN) must be
    refused beside it, and each series kernel has a baseline built alike."""
    for ok in (["vanilla", "patched"], ["vanilla-distro", "patched-distro"],
               ["vanilla-debug", "debug"], ["vanilla", "broken"],
               ["vanilla", "vanilla-distro"], ["patched-distro"]):
        bench.check_comparable(ok)
    for bad, twin in ((["vanilla", "patched-distro"], "vanilla-distro"),
                      (["vanilla", "debug"], "vanilla-debug"),
                      (["vanilla-distro", "patched"], "vanilla")):
        with pytest.raises(LabError, match=f"compare {bad[1]} with {twin} "):
            bench.check_comparable(bad)
    for k in build.VARIANTS:            # a twin to name, whatever the kernel
        try:
            bench.check_comparable(["vanilla", k])
        except LabError:
            pass


def test_report_compares_with_the_runs_baseline(tmp_path):
    """`-k vanilla-distro,patched-distro`: the distro kernels are judged
    against each other, not against a vanilla that was not in the run."""
    assert bench.baseline(["vanilla-distro", "patched-distro"]) == "vanilla-distro"
    assert bench.baseline(["patched-distro", "vanilla-distro"]) == "vanilla-distro"
    assert bench.baseline(["patched"]) == "vanilla"
    doc = {"meta": {"date": "d", "host": "h", "mode": "icount", "quick": True,
                    "reps": 2, "kernels": {"vanilla-distro": {"release": "a"},
                                           "patched-distro": {"release": "b"}},
                    "baseline": "vanilla-distro", "series": []},
           "experiments": {"swap-loop": {
               "patched-distro/unmap_flush=0": icount_reps([90, 91]),
               "patched-distro": icount_reps([110, 111]),
               "vanilla-distro": icount_reps([100, 101])}},
           "failures": []}
    assert [(k, v) for _, k, _, _, _, v in report.spread_verdicts(doc)] == [
        ("patched-distro", "worse")]
    text = written_report(tmp_path, doc)
    assert "Each kernel against vanilla-distro, by" in text
    assert ("| metric | vanilla-distro | patched-distro | patched-distro/unmap_flush=0 "
            "| patched-distro/vanilla-distro | patched-distro/unmap_flush=0/vanilla-distro "
            "| unmap_flush on/off |") in text


def test_report_says_when_a_load_was_not_at_one_rate():
    """A capped load that one configuration could not reach gives them
    different reclaim, and so does an uncapped one that read faster on one
    kernel: the report says so (naming the paced twin where there is one),
    and is quiet when all read alike or there was no load."""
    def reps(rate, cap=4000):
        return [{"load_rate": cap, "load_pages_per_s": rate + d} for d in (-5, 0, 5)]
    paced = "luf-cost/alloc-latency/paced"
    short = report.load_note(paced, {"vanilla": reps(1441), "patched": reps(3951)})
    assert "capped at 4,000" in short and "vanilla 1,441" in short
    assert "vanilla fell short" in short
    assert report.load_note(paced, {"vanilla": reps(3950), "patched": reps(4001)}) is None
    assert report.load_note(paced, {"vanilla": [{"elapsed_s": 1.0}]}) is None
    uncapped = report.load_note("luf-cost/fault/cow", {"vanilla": reps(1418, cap=0),
                                                      "patched": reps(15490, cap=0)})
    assert "ran uncapped" in uncapped and "patched 15,490" in uncapped
    assert "`luf-cost/fault/paced/cow` compares them at one rate" in uncapped
    assert report.load_note("luf-cost/fault/cow", {"vanilla": reps(15000, cap=0),
                                                   "patched": reps(15400, cap=0)}) is None
    assert report.load_note("swap-loop", {"vanilla": [{"elapsed_s": 1.0}]}) is None
    no_twin = report.load_note("other/exp", {"vanilla": reps(1000, cap=0),
                                             "patched": reps(2000, cap=0)})
    assert no_twin.endswith("not all the kernel's.")


def test_worse_costs_beside_unequal_loads_are_named_in_the_verdict(tmp_path):
    """A cost listed worse in an experiment whose load read faster on one
    kernel is named as not at equal load under the list, where a reader of
    the verdicts looks, not only under the experiment's table."""
    def reps(own, rate):
        out = icount_reps(own)
        for r in out:
            r["load_pages_per_s"] = rate
        return out
    doc = {"meta": {"date": "d", "host": "h", "mode": "icount", "quick": False,
                    "reps": 2, "kernels": {"vanilla": {"release": "a"},
                                           "patched": {"release": "b"}},
                    "baseline": "vanilla", "series": []},
           "experiments": {
               "luf-cost/fault/cow": {"vanilla": reps([100, 101], 1400),
                                      "patched": reps([110, 111], 15000)},
               "swap-loop": {"vanilla": icount_reps([100, 101]),
                             "patched": icount_reps([110, 111])}},
           "failures": []}
    text = written_report(tmp_path, doc)
    assert ("Not at equal load, so not all the kernel's (the note under each "
            "table says why): luf-cost/fault/cow.") in text
    assert "`luf-cost/fault/paced/cow` compares them at one rate" in text
    doc["experiments"]["luf-cost/fault/cow"]["patched"] = reps([110, 111], 1400)
    assert "Not at equal load" not in written_report(tmp_path, doc)
