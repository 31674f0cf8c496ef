"""The regression gate on records built by hand: noise, regressions, parity, refusals, JUnit XML."""

from __future__ import annotations

import copy
import csv
import dataclasses
import io
import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from record_factory import samples as samples_of
from record_factory import seed_record, stop_outcome

from qsa_cli.output.ci import junit_xml
from qsa_cli.output.gate import GateError, check_comparable, compare, gate_csv, gate_sheet, gate_verdict
from qsa_cli.output.judged import of_gate
from qsa_cli.output.layout import markdown, text_of
from qsa_cli.record.schema import RunRecord
from qsa_cli.record.vocabulary import ARGPARTITION


def verdicts(result: object) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in result.rows:
        out[r.verdict] = out.get(r.verdict, 0) + 1
    return out


def slowed(record: RunRecord, variant: str, factor: float) -> RunRecord:
    out = copy.deepcopy(record)
    for m in out.measurements:
        if m.variant == variant:
            m.samples_us = [s * factor for s in m.samples_us]
    return out


def test_two_runs_of_the_same_kernels_are_the_same() -> None:
    baseline, run = seed_record(seed=1, noise=0.03), seed_record(seed=2, noise=0.03)
    result = compare(run, baseline)
    assert verdicts(result) == {"SAME": len(run.measurements)} and result.passed


def test_a_slower_new_kernel_is_slow_and_fails() -> None:
    baseline, run = seed_record(seed=1, noise=0.02), seed_record(seed=2, noise=0.02, scale=1.3)
    result = compare(run, baseline)
    slow = [r for r in result.rows if r.verdict == "SLOW"]
    assert {r.variant for r in slow} == {"halve", "split"} and len(slow) == 13 + 12
    assert all(1.25 < r.ratio < 1.35 for r in slow)
    assert not result.passed


def test_a_faster_new_kernel_is_fast_and_passes() -> None:
    result = compare(seed_record(seed=2, noise=0.02, scale=0.7), seed_record(seed=1, noise=0.02))
    assert verdicts(result) == {"FAST": 25, "SAME": 50} and result.passed


def test_a_library_reference_point_is_shown_but_never_fails() -> None:
    """cupy.argpartition's time includes CuPy's own host work: a change there is no regression of ours."""
    baseline = seed_record(seed=5, noise=0.02)
    topk = next(m for m in baseline.measurements if m.stage == "topk")
    baseline.measurements.append(dataclasses.replace(topk, variant=ARGPARTITION, samples_us=[s * 20 for s in topk.samples_us]))
    for factor in (1.4, 1.0, 0.7):
        result = compare(slowed(baseline, ARGPARTITION, factor), baseline)
        (row,) = [r for r in result.rows if r.variant == ARGPARTITION]
        assert row.verdict == "REFERENCE" and f"({factor:.2f}x the baseline)" in row.detail
        assert result.passed and not row.failed
    assert compare(slowed(slowed(baseline, ARGPARTITION, 1.4), "split", 1.3), baseline).passed is False


def test_a_deliberately_slowed_run_fails_against_its_own_baseline() -> None:
    baseline = seed_record(seed=5, noise=0.02)
    assert compare(slowed(baseline, "read-floor", 1.0), baseline).passed
    slow = slowed(baseline, "read-floor", 1.12)
    result = compare(slow, baseline)
    assert {r.variant for r in result.rows if r.verdict == "SLOW"} == {"read-floor"} and not result.passed
    suite = ET.fromstring(junit_xml(of_gate(result, slow, baseline))).find("testsuite")
    assert suite.get("failures") == "13"


def test_beyond_tolerance_but_within_noise_is_same() -> None:
    baseline, run = seed_record(seed=1, noise=0.4), seed_record(seed=2, noise=0.4, scale=1.1)
    result = compare(run, baseline)
    noisy = [r for r in result.rows if r.variant == "halve" and r.ratio > 1.05]
    assert noisy and all(r.verdict == "SAME" and "within the runs' spread" in r.detail for r in noisy)
    assert result.passed


def test_tolerance_decides_small_shifts() -> None:
    baseline = seed_record(seed=3, noise=0.001)
    run = slowed(baseline, "multi", 1.04)
    assert compare(run, baseline, tolerance=0.05).passed
    assert not compare(run, baseline, tolerance=0.02).passed
    with pytest.raises(GateError, match="tolerance"):
        compare(run, baseline, tolerance=-0.1)


def test_a_parity_failure_fails_even_with_equal_times() -> None:
    baseline = seed_record(seed=1)
    run = copy.deepcopy(baseline)
    run.parity[3].equal = False
    run.parity[3].detail = "query 2 block 9: 1.0 vs 1.0000001"
    result = compare(run, baseline)
    failed = [r for r in result.rows if r.failed]
    assert [(r.verdict, r.variant, r.detail) for r in failed] == [
        ("PARITY-FAIL", "halve vs cpu-model", "query 2 block 9: 1.0 vs 1.0000001")]
    assert not result.passed


def test_a_missing_row_fails_unless_allowed_and_a_new_row_passes() -> None:
    baseline = seed_record(seed=1)
    run = copy.deepcopy(baseline)
    dropped = run.measurements.pop(0)
    run.measurements[0].variant = "cluster"
    result = compare(run, baseline)
    assert verdicts(result)["MISSING"] == 2 and verdicts(result)["NEW"] == 1 and not result.passed
    assert any(r.verdict == "MISSING" and r.key == dropped.key and r.variant == dropped.variant for r in result.rows)
    allowed = compare(run, baseline, allow_missing=True)
    assert verdicts(allowed)["MISSING-ALLOWED"] == 2 and "MISSING" not in verdicts(allowed) and allowed.passed
    new_only = copy.deepcopy(baseline)
    new_only.measurements[0].variant = "cluster"
    assert compare(new_only, copy.deepcopy(new_only)).passed


def test_nothing_timed_in_both_fails() -> None:
    """A parity-only baseline, or runs of other cases, leave nothing to judge: that is no pass."""
    run = seed_record(seed=1)
    parity_only = copy.deepcopy(run)
    parity_only.measurements = []
    for baseline, record in ((parity_only, run), (run, parity_only), (parity_only, parity_only)):
        result = compare(record, baseline, allow_missing=True)
        assert not result.passed and verdicts(result).get("NOTHING-COMPARED") == 1
    only_reference = copy.deepcopy(run)
    only_reference.measurements = [dataclasses.replace(run.measurements[0], variant=ARGPARTITION)]
    assert verdicts(compare(only_reference, only_reference))["NOTHING-COMPARED"] == 1


@pytest.mark.parametrize(("samples", "why"), [
    ([], "samples: none"),
    ([10.0, float("nan"), 11.0], "samples: 1 of 3 NaN or infinite"),
    ([float("inf")] * 4, "samples: 4 of 4 NaN or infinite"),
    ([0.0, 0.0, 1.0], "samples: a median of 0 µs"),
    ([10.0, 1e308, 11.0], "samples: 1 of 3 past 1e+09 µs"),
])
@pytest.mark.parametrize("whose", ["the run's", "the baseline's"])
def test_unusable_samples_in_either_record_fail_and_are_named(samples: list[float], why: str, whose: str) -> None:
    baseline = seed_record(seed=1)
    run = copy.deepcopy(baseline)
    broken = (run if whose == "the run's" else baseline).measurements[4]
    broken.samples_us = samples
    result = compare(run, baseline)
    (row,) = [r for r in result.rows if r.verdict == "BAD-SAMPLES"]
    assert (row.key, row.variant, row.detail) == (broken.key, broken.variant, f"{whose} {why}")
    assert not result.passed and row.failed and verdicts(result)["SAME"] == len(run.measurements) - 1


@pytest.mark.parametrize(
    ("change", "what"),
    [
        (lambda r: r.device.update(name="NVIDIA H200"), "device 'NVIDIA H200' here"),
        (lambda r: r.device.update(compute_capability="9.0"), "compute capability '9.0' here"),
        (lambda r: setattr(r, "kernel_source_hash", "f" * 16), "kernel sources"),
    ],
)
def test_another_card_or_other_kernels_is_refused_unless_forced(change: object, what: str) -> None:
    baseline = seed_record(seed=1)
    run = copy.deepcopy(baseline)
    change(run)
    with pytest.raises(GateError) as refused:
        compare(run, baseline)
    message = str(refused.value)
    assert "\n" not in message and what in message and "--force" in message
    with pytest.raises(GateError, match="--force"):
        check_comparable(run, baseline)  # what a command calls before it measures anything
    assert check_comparable(baseline, copy.deepcopy(baseline)) == []
    forced = compare(run, baseline, force=True)
    assert forced.passed and len(forced.notes) == 1 and what in forced.notes[0]


def test_junit_xml_is_valid_with_one_testcase_per_row() -> None:
    baseline = seed_record(seed=1, noise=0.02)
    run = seed_record(seed=2, noise=0.02, scale=1.3)
    run.parity[0].equal = False
    run.measurements.pop(0)  # an old-kernel row: MISSING-ALLOWED, which is skipped
    result = compare(run, baseline, force=True, allow_missing=True)
    root = ET.fromstring(junit_xml(of_gate(result, run, baseline)))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(result.rows) == int(root.get("tests"))
    assert len(suite.findall("testcase/failure")) == int(suite.get("failures")) == 25 + 1
    assert len(suite.findall("testcase/skipped")) == int(suite.get("skipped")) == 1
    slow = next(c for c in cases if c.find("failure") is not None and c.find("failure").get("type") == "SLOW")
    assert slow.get("classname") in ("qsa.scores", "qsa.topk") and float(slow.get("time")) > 0
    assert suite.find("properties/property").get("value") == "0.05"


def test_gate_sheet_renders() -> None:
    result = compare(seed_record(seed=2, noise=0.02, scale=1.3), seed_record(seed=1, noise=0.02))
    rendered = text_of([gate_sheet(result)], 240)
    assert "Gate: FAIL" in rendered and "SLOW" in rendered and "tolerance 5%" in rendered
    line = next(line for line in rendered.splitlines() if "scores ctx=420000 nq=8" in line)
    assert [c.strip() for c in line.strip()[1:-1].split("│")][:8] == [
        "scores ctx=420000 nq=8 capacity=524288 kind=decode l2=clean", "multi", "773.9", "50", "773.9", "50", "1.00x",
        "SAME"]
    assert "rule" not in rendered  # runs of ITERS counts: no stopping rule to show


def test_the_last_lines_name_every_failing_row_with_its_detail() -> None:
    run = seed_record(seed=2, noise=0.02, scale=1.3)
    run.parity[3].equal, run.parity[3].detail = False, "query 2 block 9: 1.0 vs 1.0000001"
    result = compare(run, seed_record(seed=1, noise=0.02))
    summary, *lines = gate_verdict(result)
    assert summary == "GATE FAIL (25 SLOW, 1 PARITY-FAIL)" and len(lines) == 26
    slow = next(line for line in lines if "scores ctx=32768 nq=1 " in line)
    assert slow.startswith("GATE FAIL 1/26: SLOW: scores ctx=32768 nq=1 capacity=524288 kind=decode l2=clean, halve: "
                           "10.0 µs vs 7.7 µs (+30%), 1.30x the baseline, outside both runs' spread")
    assert lines[-1] == ("GATE FAIL 26/26: PARITY-FAIL: scores ctx=32768 nq=3 capacity=524288 kind=decode l2=clean, "
                         "halve vs cpu-model: query 2 block 9: 1.0 vs 1.0000001")
    assert gate_verdict(compare(seed_record(seed=2), seed_record(seed=1))) == ["GATE PASS (75 SAME)"]


def test_fresh_noise_is_seeded() -> None:
    a, b = seed_record(seed=4, noise=0.1), seed_record(seed=4, noise=0.1)
    assert np.array_equal(a.measurements[5].samples_us, b.measurements[5].samples_us)


def test_a_broken_threshold_of_the_sweep_fails() -> None:
    from qsa_cli.record.schema import ThresholdCheck

    base = seed_record(0)
    run = copy.deepcopy(base)
    m = run.measurements[0]
    run.thresholds.append(ThresholdCheck(m.stage, m.case, "min_speedup", 1.8, 2.5, False))
    result = compare(run, base)
    assert not result.passed and verdicts(result).get("THRESHOLD") == 1
    run.thresholds[0] = ThresholdCheck(m.stage, m.case, "min_speedup", 3.1, 2.5, True)
    assert compare(run, base).passed


# ---- other kernels, compared by their outputs' bits ----------------------------------------------------------

def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    from qsa_cli.cli import main

    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    out, err = capsys.readouterr()
    return ended.value.code, " ".join(out.split()), err


@pytest.fixture
def two_runs(capsys, tmp_path, monkeypatch):
    """A run of a call on the CPU backend, and a copy as its baseline (edited by each test: the same
    timings, so that only what a test changes can fail the gate)."""
    monkeypatch.setenv("COLUMNS", "400")  # the gate table's details whole
    base, run = tmp_path / "base.json", tmp_path / "run.json"
    code, out, err = _cli(capsys, "topk-parity", "3001", "2", "3", "4096", "0", "--backend", "cpu", "--json", str(run))
    assert code == 0, err
    base.write_bytes(run.read_bytes())
    return [base, run]


def _edit(path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_other_kernels_are_compared_by_their_bits(capsys, two_runs) -> None:
    base, run = two_runs
    _edit(base, lambda d: d.update(kernel_source_hash="f" * 64))  # the change under review: other kernel sources
    code, out, err = _cli(capsys, "gate", "--baseline", str(base), "--results", str(run))
    assert code == 0, out + err
    assert "their outputs' bits are compared" in out


def test_changed_bits_on_the_same_inputs_fail_unless_allowed(capsys, two_runs) -> None:
    base, run = two_runs

    def flip(d: dict) -> None:
        row = next(p for p in d["parity"] if p["against"] == "inputs" and p["subject"] == "split")
        row["hashes"]["output"] = "0" * 64

    _edit(base, flip)
    code, out, err = _cli(capsys, "gate", "--baseline", str(base), "--results", str(run))
    assert code == 1 and "BITS-CHANGED" in out and "on the same inputs" in out, out
    code, out, err = _cli(capsys, "gate", "--baseline", str(base), "--results", str(run),
                          "--allow-bit-changes")
    assert code == 0 and "BITS-CHANGED-ALLOWED" in out, out


def test_other_inputs_are_not_compared_by_bits(capsys, two_runs) -> None:
    base, run = two_runs

    def other_inputs(d: dict) -> None:
        for p in d["parity"]:
            if p["against"] == "inputs":
                p["hashes"].update(inputs="1" * 64, output="2" * 64)

    _edit(base, other_inputs)
    code, out, err = _cli(capsys, "gate", "--baseline", str(base), "--results", str(run))
    assert code == 0 and "BITS-CHANGED" not in out, out


def test_other_kernels_without_output_hashes_are_refused(capsys, two_runs) -> None:
    base, run = two_runs

    def old_baseline(d: dict) -> None:
        d["kernel_source_hash"] = "f" * 64
        for p in d["parity"]:
            p["hashes"] = {}

    _edit(base, old_baseline)
    code, out, err = _cli(capsys, "gate", "--baseline", str(base), "--results", str(run))
    assert code == 2 and "holds no output hashes" in err and len(err.strip().splitlines()) == 1, err


def with_rule(record: RunRecord, reason: str, variant: str = "halve", samples: int = 12) -> RunRecord:
    """The record with ``variant``'s measurements taken by the stopping rule (``samples`` each), ended by ``reason``."""
    out = copy.deepcopy(record)
    rng = np.random.default_rng(7)
    for m in out.measurements:
        if m.variant == variant:
            m.samples_us = samples_of(m.median_us, rng, n=samples, noise=0.02)
            m.stop = stop_outcome(reason, noise_pct=0.4 if reason == "met" else 3.1)
    return out


def test_each_sides_sample_count_and_rule_are_shown_and_an_unmet_rule_is_said() -> None:
    base, run = with_rule(seed_record(seed=1, noise=0.02), "met", samples=40), with_rule(seed_record(seed=2, noise=0.02), "timeout")
    result = compare(run, base)
    assert result.passed  # the rule's outcome is shown, not judged: the spreads already weigh the noise
    rendered = text_of([gate_sheet(result)], 300)
    line = next(line for line in rendered.splitlines() if "scores ctx=420000 nq=8" in line)
    cells = [c.strip() for c in line.strip()[1:-1].split("│")]
    assert cells[1:9] == ["multi", "773.9", "50", "–", "773.9", "50", "–", "1.00x"]
    halve = next(r for r in result.rows if r.key.startswith("scores ctx=420000 nq=8") and r.variant == "halve")
    assert [len(m.samples_us) for m in halve.measured] == [40, 12]
    assert halve.detail.endswith("the run's stopping rule NOT MET (timeout)")
    lines = rendered.splitlines()
    halve_line = lines[lines.index(line) + 1]  # the case's next variant
    assert [c.strip() for c in halve_line.strip()[1:-1].split("│")][3:8] == ["40", "met", "255.1", "12", "NOT MET (timeout)"]
    csv_rows = list(csv.DictReader(io.StringIO(gate_csv(result))))
    by_variant = {row["variant"]: row for row in csv_rows if row["case"].startswith("scores ctx=420000 nq=8")}
    assert {k: by_variant["halve"][k] for k in ("baseline_samples", "baseline_rule_met", "samples", "rule_met")} == {
        "baseline_samples": "40", "baseline_rule_met": "True", "samples": "12", "rule_met": "False"}
    assert {k: by_variant["multi"][k] for k in ("baseline_samples", "baseline_rule_met", "samples", "rule_met")} == {
        "baseline_samples": "50", "baseline_rule_met": "", "samples": "50", "rule_met": ""}
    md = markdown([gate_sheet(result)])
    assert "| variant | baseline µs | baseline n | baseline rule | median µs | n | rule | ratio | verdict | detail |" in md


def test_a_failing_row_whose_rule_was_not_met_says_so_in_its_failure_line() -> None:
    base = with_rule(seed_record(seed=1, noise=0.02), "sample cap", samples=30)
    run = with_rule(seed_record(seed=2, noise=0.02, scale=1.3), "timeout")
    summary, *lines = gate_verdict(compare(run, base))
    slow = next(line for line in lines if "scores ctx=32768 nq=1 " in line)
    assert slow.endswith("outside both runs' spread; the run's stopping rule NOT MET (timeout); the baseline's stopping "
                         "rule NOT MET (sample cap)")
    assert summary.startswith("GATE FAIL (25 SLOW")
