"""scripts/call_trace.py and scripts/agreement.py's use of it, on kernel timelines made by hand: which kernels
are a timed call (those between qsa's clock stamps, as many as a call launches), a call's span, its kernels'
sum and gaps, and what qsa's events time beyond the span."""

from __future__ import annotations

import json
import tarfile
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import agreement  # noqa: E402
import call_trace  # noqa: E402

STAMP = call_trace.STAMP


def timeline(*calls: list[tuple[int, int]], name: str = "block_topk_split_kernel") -> list[tuple[str, int, int]]:
    """Each call's kernels ([start, end] in ns) between two stamps, after a flush and a hold as qsa queues them."""
    kernels, at = [], 0
    for call in calls:
        kernels += [("read_floor_kernel", at, at + 500), ("hold_stream_kernel", at + 600, at + 900),
                    (STAMP, at + 950, at + 960)]
        kernels += [(name, at + 1000 + start, at + 1000 + end) for start, end in call]
        kernels.append((STAMP, at + 1000 + call[-1][1] + 100, at + 1000 + call[-1][1] + 110))
        at += 100_000
    return kernels


def test_a_call_is_the_kernels_between_two_stamps_of_its_launch_count() -> None:
    serial = [(0, 4000), (4500, 9000), (9300, 12000)]
    kernels = timeline(serial, serial[:2], serial)  # the middle one is no call of 3 (a batch is no call either)
    calls = call_trace.calls_between_stamps(list(reversed(kernels)), 3, "block_topk_split")
    assert len(calls) == 2 and all(len(c) == 3 for _, c, _ in calls)
    assert all(opened[0] == closed[0] == STAMP for opened, _, closed in calls)
    s = call_trace.bracketed_summary(calls)
    assert s["span_us"] == [12.0, 12.0] and s["kernels_sum_us"] == [11.2, 11.2]
    assert s["median_kernel_us"] == [4.0, 4.5, 2.7] and s["median_gap_us"] == [0.5, 0.3]
    # the start stamp ends 40 ns before the call's first kernel starts; the end stamp starts 100 ns after its last
    assert s["lead_us"] == [0.04, 0.04] and s["trail_us"] == [0.1, 0.1]
    assert s["median_lead_us"] == 0.04 and s["median_trail_us"] == 0.1
    assert call_trace.stamped_calls(sorted(kernels, key=lambda k: k[1]), 3, "split") == [c for _, c, _ in calls]
    assert call_trace.calls_between_stamps(kernels, 3, "cluster") == []  # kernels of another name: no call


def test_another_timers_calls_are_the_lone_runs_of_a_calls_kernels_outside_the_stamps() -> None:
    serial = [(0, 4000), (4500, 9000)]
    kernels = timeline(serial)  # qsa's: between its stamps
    name = "block_topk_split_kernel"
    for at in (200_000, 300_000):  # nvbench's: its blocking kernel, then the call
        kernels += [("nvbench_block_stream", at, at + 100), (name, at + 200, at + 4200), (name, at + 4500, at + 9500)]
    kernels.append(("read_floor_kernel", 390_000, 390_100))
    kernels += [(name, 400_000 + 5000 * i, 400_000 + 5000 * i + 4000) for i in range(6)]  # a warm-up: no lone call
    kernels.append(("hold_stream_kernel", 500_000, 500_100))
    calls = call_trace.unstamped_calls(list(reversed(kernels)), 2, "split")
    assert [c[0][1] for c in calls] == [200_200, 300_200]
    assert call_trace.summary(calls)["span_us"] == [9.3, 9.3]


def test_overlapped_launches_have_a_span_shorter_than_their_sum() -> None:
    overlapped = [(0, 5000), (3000, 9000)]  # a programmatic dependent launch starts before the first ends
    s = call_trace.bracketed_summary(call_trace.calls_between_stamps(timeline(overlapped), 2, "split"))
    assert s["median_span_us"] == 9.0 and s["median_kernels_sum_us"] == 11.0 and s["median_gap_us"] == [-2.0]


def test_qsa_beyond_the_span_is_paired_per_call_or_else_by_medians() -> None:
    assert agreement.beyond_span_us([13.0, 14.0, 15.0], [12.0, 12.5, 13.0]) == 1.5
    # a re-measured round traced a call the samples lack: the medians' difference
    assert agreement.beyond_span_us([13.0, 15.0], [12.0, 12.5, 30.0]) == pytest.approx(14.0 - 12.5)


def test_the_table_judges_ncu_where_it_observes_the_call_and_shows_cupti_beside() -> None:
    common = {"qsa_dirty_median_us": 30.0, "nvbench_cold_median_us": 30.3, "dirty_vs_nvbench": -0.01,
              "qsa_clean_traced_median_us": 29.1, "cupti_plus_overhead_us": 29.2, "clean_vs_cupti": -0.003,
              "traced_qsa_dirty_median_us": 30.1, "cupti_qsa_dirty_span_us": 27.6,
              "traced_nvbench_median_us": 30.5, "cupti_nvbench_span_us": 27.9, "cupti_span_us": 26.8,
              "qsa_beyond_span_us": 2.3, "cupti_lead_us": 1.25, "cupti_trail_us": 1.5, "overhead_call": "wave x1"}
    ncu = {"qsa_clean_median_us": 29.0}
    rows = [{"row": "one", **common, **ncu, "ncu_plus_overhead_us": 29.5, "clean_vs_ncu": -0.017, "launches": 1},
            {"row": "five, PDL off", **common, **ncu, "ncu_plus_overhead_us": 29.9, "clean_vs_ncu": -0.03,
             "launches": 5},
            {"row": "five", **common, "launches": 5}]
    text = agreement.table(rows, {"wave x1": {"qsa_us": 3.1, "beyond_span_us": 1.2, "ncu_us": 1.3, "lead_us": 1.0,
                                              "trail_us": 0.75}})
    one, five_off, five = text.splitlines()[2:5]
    assert one == "| one | 1 | 30.00 | 30.30 | -1.0% | 29.00 | 29.50 | -1.7% | 29.10 | 29.20 | -0.3% |"
    assert five_off.startswith("| five, PDL off | 5 |") and "| 29.00 | 29.90 | -3.0% |" in five_off
    assert "| -1.0% | – | not observable (PDL) | – | 29.10 | 29.20 | -0.3% |" in five
    assert "| one | 30.10 | 27.60 | +2.50 | 30.50 | 27.90 | +2.60 |" in text.splitlines()
    assert "| five | 26.80 | +2.30 | 1.25 | 1.50 | wave x1 | +1.20 | 1.00 | 0.75 |" in text.splitlines()
    assert "wave x1: 3.10 µs under qsa's timer, +1.20 beyond CUPTI's span, +1.30 beyond ncu" in text


def test_a_calls_launches_are_the_records_never_a_constant() -> None:
    """The split's call was once 6 launches and is 5 now: the count, and whether the launches overlap, come from
    what qsa's launcher recorded."""
    launched = {"variant": "split", "launches": [{"kernel": f"block_topk_split_pass_kernel<{p}, 8>",
                                                  "programmatic": p > 0} for p in range(4)]
                + [{"kernel": "block_topk_split_emit_kernel<8>", "programmatic": True}]}
    assert agreement.launch_count(launched) == 5 and agreement.overlapped(launched["launches"])
    assert not agreement.overlapped([{**launch, "programmatic": False} for launch in launched["launches"]])
    with pytest.raises(SystemExit, match="lists no launches"):
        agreement.launch_count({"variant": "split", "launches": None})


def test_what_runs_between_one_calls_end_and_the_next_ones_start_is_no_call() -> None:
    """The next case's parity run (as many kernels as a call, after the last sample's end stamp and before the
    next sample's start stamp) is no timed call."""
    serial = [(0, 4000), (4500, 9000)]
    kernels = timeline(serial, serial)
    parity = [("block_topk_split_kernel", 50_000 + i, 50_000 + i + 10) for i in (0, 100)]
    calls = call_trace.calls_between_stamps(kernels + parity, 2, "split")
    assert len(calls) == 2 and all(c[0][1] % 100_000 == 1000 for _, c, _ in calls)


def test_ncu_sums_each_profiled_call_of_its_csv(monkeypatch: pytest.MonkeyPatch) -> None:
    """ncu's CSV rows in the order the kernels ran (its IDs), stamps among them and kernels of other names left
    out: a call's kernels summed, the median over the profiled calls of one case (a command's measurements each
    profile ROUNDS x PROFILED calls in turn); calls that are not as many as its cases profile are refused."""
    stamp = "void clock_stamp_kernel(long long volatile *)"

    def call(*us: float) -> list[tuple[str, float]]:
        return [(stamp, 1.0), *[(f"void block_topk_split_pass_kernel<{i}, 2>(...)", u) for i, u in enumerate(us)],
                (stamp, 1.0)]

    profiled = [("void block_topk_split_pass_kernel<0, 2>(...)", 0.5), ("hold_stream_kernel", 9.0)] \
        + call(4.0, 2.0) + call(5.0, 3.0) + call(4.5, 2.5) + call(9.0, 9.0) * 3
    lines = ['"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"', "==PROF== Disconnected"]
    lines += [f'"{i}","{name}","gpu__time_duration.sum","ns","{1000 * us:,.0f}"' for i, (name, us) in
              reversed(list(enumerate(profiled)))]
    durations = agreement.ncu_durations_us("\n".join(lines), "block_topk_split")
    assert [name for name, _ in durations][:2] == ["void block_topk_split_pass_kernel<0, 2>(...)", stamp]
    monkeypatch.setattr(agreement, "ROUNDS", 1)
    monkeypatch.setattr(agreement, "PROFILED", 3)  # each case's calls: 3
    median, names, per_kernel, calls = agreement.ncu_calls(durations, 2, "block_topk_split", cases=2, case=0)
    assert (median, per_kernel, calls) == (7.0, [4.5, 2.5], 3) and names[0].endswith("pass_kernel<0, 2>(...)")
    assert agreement.ncu_calls(durations, 2, "block_topk_split", cases=2, case=1)[0] == 18.0
    with pytest.raises(SystemExit, match="profiled 6 calls .* where 1 measurements profile 3 each"):
        agreement.ncu_calls(durations, 2, "block_topk_split")  # the calls of two cases, as if of one


def test_a_rows_paired_samples_are_its_variants_on_its_case(tmp_path: Path) -> None:
    paired = tmp_path / "p.json"
    case = {"ctx": 32768, "nq": 1, "score_set": "continuous"}
    paired.write_text(json.dumps({"calls": [
        {"variant": "floor", "case": case, "qsa_us": [[1.0]], "nvbench_us": [[1.0]]},
        {"variant": "halve", "case": {**case, "score_set": "equal"}, "qsa_us": [[9.0]], "nvbench_us": [[9.0]]},
        {"variant": "halve", "case": case, "qsa_us": [[6.0, 6.2], [6.1]], "nvbench_us": [[6.3], [6.2, 6.4]]}]}))
    assert agreement.paired_calls(paired, {"variant": "halve", "case": case})["qsa_us"] == [[6.0, 6.2], [6.1]]
    with pytest.raises(SystemExit, match="no paired samples of split"):
        agreement.paired_calls(paired, {"variant": "split", "case": case})


def test_what_the_run_needs_is_checked_before_it_measures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A missing tool or package, an output that is a file, labels of no row: one line, status 2, nothing made."""
    assert not agreement._found("qsa_no_such_package.sub") and agreement._found("json")
    here = {"ncu", "cuda.bench", "cupti", "cupy"}
    monkeypatch.setattr(agreement, "_found", lambda name: name in here)
    out = tmp_path / "out"
    assert agreement.unmet(out, []) is None and agreement.unmet(out, ["cluster"]) is None
    here.discard("cupti")
    assert agreement.main(out, []) == 2 and not out.exists()
    assert capsys.readouterr().err == "agreement.py: cupti is missing: pip install cupti-python\n"
    here.add("cupti")
    (tmp_path / "file").write_text("")
    assert agreement.unmet(tmp_path / "file", []) == f"{tmp_path / 'file'} is a file: the output is a folder"
    assert agreement.unmet(out, ["tensor"]).startswith("no row's label holds 'tensor' (rows: multi scorer")


def test_a_cluster_rows_overhead_call_is_its_own_launcher_idle_and_launched_as_the_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The overhead call of a call that launches clusters (the cluster top-k's) is the row's command on IDLE_CTX
    cells, its figures taken as an empty call's (CUPTI's spans of its clean calls, ncu's durations in rounds with
    qsa); one launched otherwise than the row is refused. A call without clusters keeps its empty kernels."""
    row = next(r for r in agreement.ROWS if r.label == "cluster top-k 524K x 8")
    idle = row.idle_row()
    assert (idle.ctx, idle.nq, idle.cap, idle.variant) == (agreement.IDLE_CTX, 8, 524288, "cluster")
    assert idle.args("auto")[:5] == ["topk-parity", str(agreement.IDLE_CTX), "8", "auto", "524288"]
    launch = {"grid": [16, 8], "block": [1024], "cluster": 16, "shared_bytes": 70000, "programmatic": False}
    assert agreement.overhead_call_name(row, [launch]) == f"idle-cluster-{agreement.IDLE_CTX}-8"
    scorer = agreement.ROWS[0]
    plain = {**launch, "cluster": 0}
    assert agreement.overhead_call_name(scorer, [plain]) == agreement.empty_call_name([plain]) == "grid16x8-block1024" \
        "-shared70000-x1"

    ran: list[list[str]] = []
    launched = [launch]

    def record(path: Path, samples: list[float]) -> None:
        path.write_text(json.dumps({"measurements": [
            {"variant": "cluster", "case": {"ctx": agreement.IDLE_CTX, "score_set": "continuous"},
             "samples_us": samples, "launches": launched}]}))

    def traced(out: Path, tag: str, launches: int, kernel: str, args: list[str], env: dict) -> tuple[dict, str]:
        ran.append(args)
        record(Path(args[args.index("--json") + 1]), [4.0, 4.2, 4.4])
        return {"calls": 3, "span_us": [2.0, 2.1, 2.2], "lead_us": [1.0] * 3, "trail_us": [0.5] * 3,
                "unstamped": {}}, ""

    ncu_csv = "\n".join(['"ID","Kernel Name","Metric Name","Metric Value"'] + [
        f'"{i}","{name}","gpu__time_duration.sum","{ns}"' for i, (name, ns) in enumerate([
            (STAMP, 1000), ("block_topk_cluster_kernel<16>", 3000), (STAMP, 1000)])])

    def paired_run(r: agreement.Row, out: Path, mode: str, *extra: str, under: list[str] = ()) -> tuple:
        record(out / f"{mode}-{r.tag}.json", [4.1, 4.3, 4.5])
        return agreement.measurement(out / f"{mode}-{r.tag}.json", r.variant), out / "p.json", ncu_csv

    monkeypatch.setattr(agreement, "traced", traced)
    monkeypatch.setattr(agreement, "paired_run", paired_run)
    monkeypatch.setattr(agreement, "ROUNDS", 1)
    monkeypatch.setattr(agreement, "PROFILED", 1)
    found = agreement.idle_call_overhead(tmp_path, row, [launch])
    assert ran and ran[0][:2] == ["topk-parity", str(agreement.IDLE_CTX)] and "--l2" in ran[0]
    assert found == {"qsa_us": 4.3, "qsa_traced_us": 4.2, "beyond_span_us": pytest.approx(2.1), "ncu_call_us": 3.0,
                     "ncu_us": pytest.approx(1.3), "lead_us": 1.0, "trail_us": 0.5}
    launched = [{**launch, "grid": [8, 8], "cluster": 8}]
    with pytest.raises(SystemExit, match="cluster top-k 524K x 8, idle: launched as .* not as the row"):
        agreement.idle_call_overhead(tmp_path, row, [launch])


def test_a_trace_of_several_cases_is_judged_on_the_rows_case_alone() -> None:
    """A top-k command times each score set with the same kernels: the row's (continuous) calls are those of its
    measurement, in the order the record's measurements were taken, a thrown-away sample's call among them; a
    trace of other calls than the measurements timed cannot be told apart and is refused."""
    def measured(score_set: str, samples: int, discarded: list[dict] | None = None) -> dict:
        return {"variant": "cluster", "case": {"score_set": score_set}, "samples_us": [1.0] * samples,
                "rounds": {"discarded": discarded or []}}

    found = [measured("levels64", 2), measured("continuous", 3, [{"batch": False, "samples_us": [9.0]},
                                                                 {"batch": True, "samples_us": [9.0]}]),
             measured("adversarial", 2)]
    assert [agreement.timed_calls(m) for m in found] == [2, 4, 2]
    spans = [15.0, 15.5, 14.0, 14.1, 14.2, 14.3, 21.0, 22.0]
    trace = {"calls": 8, "span_us": spans, "lead_us": [2.4] * 8, "trail_us": [2.3] * 8, "median_span_us": 14.65,
             "kernels": ["block_topk_cluster_kernel"], "unstamped": {"calls": 0}}
    row = agreement.case_trace(trace, found, 1, "t")
    assert (row["calls"], row["span_us"]) == (4, [14.0, 14.1, 14.2, 14.3])
    assert row["median_span_us"] == pytest.approx(14.15)
    assert row["kernels"] == ["block_topk_cluster_kernel"] and row["median_lead_us"] == 2.4
    with pytest.raises(SystemExit, match="t: 9 calls where the record's measurements timed 8"):
        agreement.case_trace({**trace, "calls": 9, "span_us": [*spans, 14.0]}, found, 1, "t")
    assert agreement.case_indices([2, 3], [1], 6) is None
    assert agreement.case_indices([2, 3, 2], [0, 2], 7) == [0, 1, 5, 6]


def test_rejudging_reads_an_earlier_runs_folder_and_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The H100's cluster rows of 2026-12-07 (docs/results), judged again from their records: every process's
    output read from the folder, nothing run, each side on the continuous scores alone."""
    records = Path(__file__).resolve().parents[1] / "docs/results/h100-2026-12-07-agreement"
    with tarfile.open(records / "agreement-cluster-rerun.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    out = tmp_path / "agreement"
    monkeypatch.setattr(agreement, "REJUDGING", False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(agreement.subprocess, "run", lambda *a, **k: pytest.fail("rejudging ran a process"))
    assert agreement.main(out, ["cluster"], rejudge=True) == 0
    rows = (out / "agreement.md").read_text().splitlines()[2:4]
    assert rows == ["| cluster top-k 524K x 8 | 1 | 17.25 | 17.18 | +0.4% | 16.42 | 16.37 | +0.3% | 16.66 | 16.48 "
                    "| +1.1% |",
                    "| cluster top-k 9000 x 1 | 1 | 12.06 | 12.03 | +0.3% | 11.84 | 11.82 | +0.1% | 11.87 | 11.86 "
                    "| +0.1% |"]
    # qsa's dirty calls told apart by round and case; nvbench's not (its warm-ups add calls to its samples')
    assert "| cluster top-k 524K x 8 | 17.06 | 14.53 | +2.53 | 17.12 | not told apart by case | – |" in (
        out / "agreement.md").read_text().splitlines()
    assert agreement.main(tmp_path / "none", [], rejudge=True) == 2
    assert capsys.readouterr().err.endswith("holds no agreement.jsonl: --rejudge reads the folder of an earlier run\n")
