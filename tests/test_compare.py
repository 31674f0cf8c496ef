"""Judging and rendering ``qsa compare`` records built by hand: bits, the gate's timing rule, failures, tables."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest
from record_factory import measurement, parity, record, scores_case, stop_outcome, topk_case

from qsa_cli.core.errors import InputError
from qsa_cli.output.compare import MODELS, compare_blocks, compare_csv, compare_sheet, compare_verdict, judge
from qsa_cli.output.layout import markdown, text_of
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import ParityCheck, RunRecord, case_key
from qsa_cli.record.vocabulary import GUARD_ZONES, INPUTS, LAST_CALL

BASE, PR = "base", "pr"
CASES = {"scores": [scores_case(32768, 1), scores_case(131072, 4), scores_case(420000, 8)],
         "topk": [topk_case(131072, 1), topk_case(524288, 6, score_set="adversarial")]}
PAIRS = {"scores": "scores", "topk": "topk-split"}  # stage -> the variant both sides have
MEDIAN_US = {"scores": 40.0, "topk-split": 30.0}
ROWS = sum(map(len, CASES.values()))
FLIP = "query 0 block 5: 1.0 vs 1.0000001"


def compare_record(scale: float = 1.0, noise: float = 0.01, seed: int = 0) -> RunRecord:
    """A compare run as the measuring half writes it: each side's variant timed on every case, qsa's reference
    timed beside them, every check made and holding; ``scale`` multiplies the candidate's times."""
    rng = np.random.default_rng(seed)
    ms, checks = [], []
    for stage, variant in PAIRS.items():
        for case in CASES[stage]:
            ms.append(measurement(stage, "reference", case, 100.0, rng, noise))
            for side, factor in ((BASE, 1.0), (PR, scale)):
                name = f"{side}.{variant}"
                ms.append(measurement(stage, name, case, MEDIAN_US[variant] * factor, rng, noise))
                checks += [parity(stage, case, name, against) for against in ("reference", MODELS[stage], GUARD_ZONES, INPUTS)]
                checks.append(parity(stage, case, f"{name} ({LAST_CALL})", name))
            checks.append(parity(stage, case, f"{PR}.{variant}", f"{BASE}.{variant}"))
    settings = {
        "iterations": 50, "warmup": 5, "l2": "cold", "seed": 0,
        "compare": {"base": BASE, "candidate": PR, "tolerance": 0.05,
                    "pairs": [{"stage": stage, "base": f"{BASE}.{v}", "candidate": f"{PR}.{v}"} for stage, v in PAIRS.items()]},
        "sides": [{"name": BASE, "kind": "engine", "path": "/src/engine", "revision": "main"},
                  {"name": PR, "kind": "kernels", "path": "/src/kernels-pr", "revision": None}],
        "engines": [{"name": BASE, "path": "/src/engine", "revision": "main", "commit": "0123456789ab",
                     "library_sha256": "fedcba9876543210" * 4}],
    }
    return record(ms, checks, command="compare", argv=["compare", "/src/engine@main", "/src/kernels-pr", "131072", "4",
                                                       "50", "524288"], settings=settings)


def check_of(r: RunRecord, subject: str, against: str, stage: str = "scores", n: int = 0) -> ParityCheck:
    """The check of ``subject`` against ``against`` on the stage's ``n``-th case."""
    key = case_key(stage, CASES[stage][n])
    return next(p for p in r.parity if (p.key, p.subject, p.against) == (key, subject, against))


def text(result: object) -> str:
    return text_of([compare_sheet(result)], 300)


def compare_markdown(result: object, r: RunRecord) -> str:
    return markdown(compare_blocks(result, r))


def test_identical_bits_and_a_faster_candidate_are_fast_and_pass() -> None:
    result = judge(compare_record(scale=0.62))
    assert len(result.rows) == ROWS and {r.pair for r in result.rows} == {"scores", "topk-split"}
    assert {r.verdict for r in result.rows} == {"FAST"} and all(abs(r.ratio - 0.62) < 1e-9 for r in result.rows)
    assert {(r.bits, r.reference, r.model) for r in result.rows} == {("same", ("yes", "yes"), ("yes", "yes"))}
    assert result.passed and result.failures() == [] and result.tolerance == 0.05


def test_a_slowed_candidate_is_slow_and_fails() -> None:
    result = judge(compare_record(scale=1.3))
    assert result.count("SLOW") == ROWS and not result.passed
    failures = result.failures()
    assert len(failures) == ROWS and failures[0].startswith("scores 32K (32768), 1 query, capacity 524288, L2 clean, scores: SLOW: 1.30x")


def test_a_flipped_bit_differs_naming_the_position_and_fails() -> None:
    r = compare_record(scale=0.62)
    flipped = check_of(r, f"{PR}.scores", f"{BASE}.scores", n=1)
    flipped.equal, flipped.detail = False, FLIP
    result = judge(r)
    (row,) = [row for row in result.rows if row.bits != "same"]
    assert row.bits == f"DIFFER: {FLIP}" and row.case == CASES["scores"][1] and row.verdict == "FAST"
    assert not result.passed
    assert result.failures() == [f"scores 131K (131072), 4 queries, capacity 524288, L2 clean: pr.scores vs base.scores: {FLIP}"]


def test_a_side_unlike_the_reference_is_named_in_its_cell_and_fails() -> None:
    r = compare_record()
    unlike = check_of(r, f"{PR}.topk-split", "reference", stage="topk")
    unlike.equal, unlike.detail = False, "query 0 position 3: id 12 vs 13"
    result = judge(r)
    row = next(row for row in result.rows if row.stage == "topk")
    assert row.reference == ("yes", "NO: query 0 position 3: id 12 vs 13") and row.bits == "same"
    assert "base yes, pr NO: query 0 position 3: id 12 vs 13" in text(result)
    assert result.failures() == ["topk 131K (131072), 1 query, capacity 524288, continuous, L2 clean: pr.topk-split vs reference: "
                                 "query 0 position 3: id 12 vs 13"]


@pytest.mark.parametrize(("subject", "against"), [(f"{PR}.scores", GUARD_ZONES), (f"{BASE}.scores", INPUTS),
                                                  (f"{PR}.scores ({LAST_CALL})", f"{PR}.scores")])
def test_a_failed_integrity_row_fails(subject: str, against: str) -> None:
    r = compare_record(scale=0.62)
    check_of(r, subject, against, n=2).equal = False
    result = judge(r)
    assert result.count("FAST") == ROWS and {r.bits for r in result.rows} == {"same"}
    assert not result.passed and len(result.other_failures) == 1 and f"{subject} vs {against}" in result.other_failures[0]
    assert "Compare: FAIL" in text(result) and f"{subject} vs {against}" in text(result)


def test_within_the_tolerance_with_spreads_apart_is_same() -> None:
    result = judge(compare_record(scale=1.03, noise=0.0))  # every sample at its median: spreads apart
    assert result.count("SAME") == ROWS and {r.detail for r in result.rows} == {""} and result.passed


def test_beyond_the_tolerance_within_the_spreads_is_same() -> None:
    result = judge(compare_record(scale=1.1, noise=0.4))
    assert result.count("SAME") == ROWS and result.passed
    assert all(r.ratio > 1.05 and "within the runs' spread" in r.detail for r in result.rows)


def test_a_sides_missing_measurement_is_missing_and_fails() -> None:
    r = compare_record()
    dropped = next(m for m in r.measurements if m.variant == f"{PR}.topk-split")
    r.measurements.remove(dropped)
    result = judge(r)
    (row,) = [row for row in result.rows if row.verdict == "MISSING"]
    assert row.case == dropped.case and row.candidate is None and row.ratio is None and row.bits == "same"
    assert row.detail == "timed on base, not on pr" and not result.passed
    assert result.failures() == ["topk 131K (131072), 1 query, capacity 524288, continuous, L2 clean, topk-split: MISSING: "
                                 "timed on base, not on pr"]


def test_a_case_neither_side_ran_is_no_row() -> None:
    r = compare_record()
    case = CASES["scores"][0]
    r.measurements = [m for m in r.measurements if not (m.case == case and m.variant != "reference")]
    r.parity = [p for p in r.parity if p.case != case]
    result = judge(r)
    assert len(result.rows) == ROWS - 1 and result.passed


@pytest.mark.parametrize(("samples", "why"), [([40.0, float("nan"), 41.0], "pr's samples: 1 of 3 NaN or infinite"),
                                              ([], "pr's samples: none")])
def test_unusable_samples_fail(samples: list[float], why: str) -> None:
    r = compare_record()
    next(m for m in r.measurements if m.variant == f"{PR}.scores").samples_us = samples
    result = judge(r)
    (row,) = [row for row in result.rows if row.verdict == "BAD-SAMPLES"]
    assert row.detail == why and row.ratio is None and not result.passed
    assert result.failures() == [f"scores 32K (32768), 1 query, capacity 524288, L2 clean, scores: BAD-SAMPLES: {why}"]


def test_a_parity_only_run_compares_bits() -> None:
    r = compare_record()
    r.measurements = []
    result = judge(r)
    assert result.count("UNTIMED") == ROWS and result.passed
    assert compare_markdown(result, r).count("| UNTIMED | same | yes | yes |") == ROWS


def test_nothing_compared_fails() -> None:
    r = compare_record()
    r.settings["compare"]["pairs"] = []
    result = judge(r)
    assert result.rows == () and not result.passed
    assert result.failures() == ["NOTHING-COMPARED: no pair's timings or bits were compared on any case"]


def test_an_interrupted_run_fails() -> None:
    r = compare_record(scale=0.62)
    r.incomplete = True
    assert [f.split(":")[0] for f in judge(r).failures()] == ["INCOMPLETE"]


def test_a_record_of_another_command_is_refused() -> None:
    r = compare_record()
    del r.settings["compare"]
    with pytest.raises(InputError, match="not a qsa compare record"):
        judge(r)


def test_markdown_has_the_sides_the_summary_and_the_rows() -> None:
    r = compare_record(scale=0.62)
    md = compare_markdown(judge(r), r)
    assert md.startswith("### qsa compare: pr against base\n")
    assert ("- **base**: engine `/src/engine` at `main`, commit `0123456789ab`, library sha256 `fedcba987654`"
            in md.splitlines())
    assert "- **pr**: kernels `/src/kernels-pr`" in md.splitlines()
    assert "**NVIDIA GeForce RTX 2080 Ti (sm_75)**" in md
    assert f"**PASS**: {ROWS} pairs, bits identical, {ROWS} FAST" in md.splitlines()
    assert ("| case | variant | base µs | base n | candidate µs | candidate n | change | verdict | bits | = reference "
            "| = model |") in md
    assert ("| scores 32K (32768), 1 query, capacity 524288, L2 clean | scores | 40.0 | 50 | 24.8 | 50 | 0.62x | FAST | same "
            "| yes | yes |") in md
    assert ("| topk 524K (524288), 6 queries, capacity 524288, adversarial, L2 clean | topk-split | 30.0 | 50 | 18.6 | 50 "
            "| 0.62x | FAST | same | yes | yes |") in md


def test_markdown_of_a_failure_says_why() -> None:
    r = compare_record(scale=1.3)
    flipped = check_of(r, f"{PR}.scores", f"{BASE}.scores")
    flipped.equal, flipped.detail = False, FLIP
    md = compare_markdown(judge(r), r)
    (line,) = [line for line in md.splitlines() if line.startswith("**FAIL**")]
    assert line.startswith(f"**FAIL**: {ROWS} pairs, bits identical in {ROWS - 1}, bits differ in 1, {ROWS} SLOW; "
                           f"{ROWS + 1} failures, the first: scores 32K (32768), 1 query, capacity 524288, L2 clean, scores: SLOW")
    assert f"| DIFFER: {FLIP} |" in md
    summary, *lines = compare_verdict(judge(r))
    assert summary == f"COMPARE FAIL ({ROWS + 1} failures)" and len(lines) == ROWS + 1
    assert f"COMPARE FAIL 2/{ROWS + 1}: scores 32K (32768), 1 query, capacity 524288, L2 clean: pr.scores vs base.scores: {FLIP}" in lines
    assert lines[0].startswith(f"COMPARE FAIL 1/{ROWS + 1}: scores 32K (32768), 1 query, capacity 524288, L2 clean, scores: SLOW: 1.30x")


def test_a_throttled_side_is_marked() -> None:
    r = compare_record(scale=0.62)
    next(m for m in r.measurements if m.variant == f"{PR}.scores").throttled = True
    md = compare_markdown(judge(r), r)
    assert "| scores 32K (32768), 1 query, capacity 524288, L2 clean | scores | 40.0 | 50 | 24.8* | 50 | 0.62x |" in md
    assert "throttled: a thermal, power or hardware slowdown" in md
    assert "throttled: a thermal" in text(judge(r))


def test_the_table_renders_the_rows() -> None:
    rendered = text(judge(compare_record(scale=0.62)))
    assert "Compare: PASS, pr against base" in rendered and "tolerance 5%" in rendered
    line = next(line for line in rendered.splitlines() if "32K (32768)" in line)
    assert [c.strip() for c in line.strip()[1:-1].split("│")] == [
        "scores 32K (32768), 1 query, capacity 524288, L2 clean", "scores", "40.0", "50", "24.8", "50", "0.62x", "FAST", "same",
        "yes", "yes"]
    assert "rule" not in rendered  # sides of ITERS counts: no stopping rule to show
    assert compare_verdict(judge(compare_record(scale=0.62))) == [f"COMPARE PASS: {ROWS} pairs, bits identical, {ROWS} FAST"]


def test_a_saved_compare_record_judges_the_same(tmp_path: Path) -> None:
    r = compare_record(scale=0.62, noise=0.02)
    r.write(tmp_path / "compare.json")
    again = load_record(tmp_path / "compare.json")
    assert judge(again) == judge(r)
    assert compare_markdown(judge(again), again) == compare_markdown(judge(r), r)


def test_a_window_pairs_name_loses_the_side_on_each_part() -> None:
    from qsa_cli.output.compare import unprefixed

    assert unprefixed("main.scores+main.topk-cluster", "main") == "scores+topk-cluster"
    assert unprefixed("main.topk", "main") == "topk" and unprefixed("reference", "main") == "reference"


def test_each_sides_sample_count_and_rule_are_shown_and_an_unmet_rule_is_said() -> None:
    r = compare_record(scale=1.3)
    first = {m.variant: m for m in r.measurements if m.key == case_key("scores", CASES["scores"][0])}
    rng = np.random.default_rng(3)
    first[f"{BASE}.scores"] = measurement("scores", f"{BASE}.scores", CASES["scores"][0], 40.0, rng, 0.01, n=20,
                                          stop=stop_outcome("met"))
    first[f"{PR}.scores"] = measurement("scores", f"{PR}.scores", CASES["scores"][0], 52.0, rng, 0.01, n=400,
                                        stop=stop_outcome("sample cap", noise_pct=2.5))
    r.measurements = [first.get(m.variant, m) if m.key == case_key("scores", CASES["scores"][0]) else m
                      for m in r.measurements]
    result = judge(r)
    row = result.rows[0]
    assert row.verdict == "SLOW" and row.detail.endswith("outside both runs' spread; pr's stopping rule NOT MET (sample cap)")
    assert any(f.endswith("pr's stopping rule NOT MET (sample cap)") for f in result.failures())
    md = compare_markdown(result, r)
    assert ("| case | variant | base µs | base n | base rule | candidate µs | candidate n | candidate rule | change "
            "| verdict |") in md
    assert ("| scores 32K (32768), 1 query, capacity 524288, L2 clean | scores | 40.0 | 20 | met | 52.0 | 400 "
            "| NOT MET (sample cap) | 1.30x | SLOW |") in md
    assert "| topk-split | 30.0 | 50 | – | 39.0 | 50 | – | 1.30x | SLOW |" in md  # counted sides have no rule
    rows = list(csv.DictReader(io.StringIO(compare_csv(result))))
    assert [(row["base_samples"], row["base_rule_met"], row["candidate_samples"], row["candidate_rule_met"])
            for row in rows[:2]] == [("20", "True", "400", "False"), ("50", "", "50", "")]
