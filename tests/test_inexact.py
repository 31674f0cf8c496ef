"""Variants declared not bitwise, on the CPU backend (tests/inexact_variants.py): never "the same bits", their
measures in the record, tables, CSV, the gate and qsa compare, and the limits that fail them."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from inexact_variants import (  # the fixture by its name, for usefixtures
    APPROX_SCORER,
    APPROX_TOPK,
    inexact_variants,  # noqa: F401
    perturbed_ids,
    perturbed_scores,
)
from record_factory import measurement, parity, record, scores_case
from test_cli_runs import run, words

from qsa_cli.core.geometry import SELECT_CAP, Call
from qsa_cli.inputs import TopkInputs, synthetic_scorer_inputs, synthetic_scores
from qsa_cli.model.agreement import score_errors
from qsa_cli.model.scores import score_blocks
from qsa_cli.model.topk import topk_ids
from qsa_cli.output.compare import compare_csv, compare_verdict, judge
from qsa_cli.output.layout import text_of
from qsa_cli.output.report import blocks
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import Agreement
from qsa_cli.record.vocabulary import GUARD_ZONES, INPUTS, LAST_CALL

CTX, NQ, CAP = 16384, 2, 16384  # a selection of SELECT_CAP cells of 16384: a negated block leaves it
SCORER_RUN = ("select-bench", str(CTX), str(NQ), "1", str(CAP), "--backend", "cpu",
              "--variants", f"reference,multi,halve,{APPROX_SCORER}")


def scorer_record(capsys, tmp_path, *limits: str) -> tuple[int, str, dict]:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, *SCORER_RUN, "--json", str(js), *limits)
    assert code in (0, 1), err
    return code, out, json.loads(js.read_text())


@pytest.mark.usefixtures("inexact_variants")
def test_an_inexact_scorer_is_measured_never_the_same_bits(capsys, tmp_path):
    code, out, data = scorer_record(capsys, tmp_path)
    assert code == 0 and out.rstrip().splitlines()[-1] == "PASS"  # no limits: timed, reported, failing nothing
    ours = [p for p in data["parity"] if p["subject"].startswith(APPROX_SCORER)]
    # only its integrity rows are bitwise: its guard zones, inputs, and its last timed call against its first
    assert sorted(p["against"] for p in ours) == sorted([GUARD_ZONES, INPUTS, APPROX_SCORER])
    assert all(p["subject"] in (APPROX_SCORER, f"{APPROX_SCORER} ({LAST_CALL})") for p in ours)
    assert {m["variant"] for m in data["measurements"]} >= {APPROX_SCORER}
    assert data["settings"]["inexact"] == {APPROX_SCORER: "scores", APPROX_TOPK: "topk"}
    assert "limits" not in data["settings"]
    rows = {a["against"]: a for a in data["agreements"]}
    assert set(rows) == {"reference", "cpu-model"} and all(a["subject"] == APPROX_SCORER for a in rows.values())
    inputs = synthetic_scorer_inputs(Call(CTX, NQ, CAP), 0)
    exact = score_blocks(inputs)
    perturbed = perturbed_scores(exact, inputs.steps)
    assert rows["reference"]["scores"] == rows["cpu-model"]["scores"] == score_errors(perturbed, exact)
    changed = int((perturbed.view(np.uint32) != exact.view(np.uint32)).sum())
    assert rows["reference"]["scores"]["differing"] == changed == 3
    # the oracle's top-k on its scores loses the cells of query 0's greatest block and keeps query 1's selection
    ours, theirs = (topk_ids(TopkInputs(s, inputs.steps)) for s in (perturbed, exact))
    kept = len(set(ours[0, :SELECT_CAP].tolist()) & set(theirs[0, :SELECT_CAP].tolist())) / SELECT_CAP
    assert SELECT_CAP - 4 <= kept * SELECT_CAP < SELECT_CAP
    assert rows["reference"]["selection"] == {"queries": 2, "identical_queries": 1, "min_id_fraction": kept,
                                              "mean_id_fraction": (1 + kept) / 2}
    assert all(a["limits"] == [] for a in data["agreements"])
    flat = words(out)
    assert f"{APPROX_SCORER} variant, inexact" in flat and "inexact: 3 of" in flat and "ids 99.9% min" in flat
    assert (f"Scorer: the same bits in every check ({len(data['parity'])} checks); {APPROX_SCORER} is inexact, "
            "measured (not checked bit for bit) in 2 comparisons; no limits set.") in flat


@pytest.mark.usefixtures("inexact_variants")
def test_the_inexact_rows_fit_the_width(capsys, tmp_path):
    _, _, _ = scorer_record(capsys, tmp_path)
    text = text_of(blocks(load_record(tmp_path / "r.json")), 80)
    assert max(map(len, text.splitlines())) <= 80 and "inexact: 3 of" in words(text)


@pytest.mark.parametrize("limits, failures", [
    ((f"--limit={APPROX_SCORER}:max_ulps=1",), ["max_ulps"] * 2),
    (("--limit", "max_ulps=1", "--limit", f"{APPROX_SCORER}:max_ulps=1e10"), []),  # its own over every inexact's
    (("--limit", "min_id_fraction=0.99", "--limit", "max_rel_error=2.5"), []),
    (("--limit", "min_identical_fraction=1"), ["min_identical_fraction"] * 2),
])
@pytest.mark.usefixtures("inexact_variants")
def test_limits_fail_an_inexact_scorer_with_a_line_each(capsys, tmp_path, limits, failures):
    code, out, data = scorer_record(capsys, tmp_path, *limits)
    lines = out.rstrip().splitlines()
    assert code == (1 if failures else 0)
    assert data["settings"]["limits"]
    if not failures:
        assert lines[-1] == "PASS" and "every limit holds" in words(out)
        return
    assert lines[-1 - len(failures)] == f"FAIL ({len(failures)} limits broken)"
    for i, (line, measure) in enumerate(zip(lines[-len(failures):], failures), 1):
        assert line.startswith(f"FAIL {i}/{len(failures)}: scores ctx={CTX} ") and f": {APPROX_SCORER} vs " in line
        assert f"{measure} " in line and (", not <= 1" in line or ", not >= 1" in line)


@pytest.mark.parametrize("limit, message", [
    ("multi:max_ulps=1", "qsa: error: a limit for 'multi': it is exact (checked bit for bit, never measured); "
                         "limits apply to variants declared not bitwise"),
    ("nothing:max_ulps=1", "qsa: error: a limit for 'nothing': the run has no such variant"),
    (f"{APPROX_TOPK}:max_abs_error=1", f"qsa: error: a limit max_abs_error for '{APPROX_TOPK}': a topk variant's "
                                        "output has no score errors to limit"),
    ("max_ulp=1", "qsa: error: --limit: no measure 'max_ulp' to limit (expected one of max_abs_error, "
                  "max_rel_error, max_ulps, min_id_fraction, min_mean_id_fraction, min_identical_fraction)"),
])
@pytest.mark.usefixtures("inexact_variants")
def test_a_limit_that_cannot_apply_is_one_line_before_anything_runs(capsys, tmp_path, limit, message):
    js = tmp_path / "r.json"
    code, out, err = run(capsys, *SCORER_RUN, "--limit", limit, "--json", str(js))
    assert (code, out, err.strip()) == (2, "", message) and not js.exists()


@pytest.mark.usefixtures("inexact_variants")
def test_an_inexact_top_k_is_measured_on_every_score_set(capsys, tmp_path):
    js = tmp_path / "t.json"
    code, out, err = run(capsys, "topk-parity", str(CTX), "3", "1", str(CAP), "0", "--backend", "cpu",
                         "--variants", f"reference,wide,split,{APPROX_TOPK}", "--json", str(js),
                         "--limit", f"{APPROX_TOPK}:min_id_fraction=0.9999")
    assert code == 1, err
    data = json.loads(js.read_text())
    sets = {a["case"]["score_set"] for a in data["agreements"]}
    assert len(sets) == 4 and {a["against"] for a in data["agreements"]} == {"reference", "cpu-oracle"}
    for a in data["agreements"]:
        scores = synthetic_scores(Call(CTX, 3, CAP), a["case"]["score_set"], 0)
        exact = topk_ids(scores, "oracle")
        assert exact.tobytes() != perturbed_ids(exact, scores.steps).tobytes()
        assert a["scores"] is None and a["selection"] == {
            "queries": 3, "identical_queries": 2, "min_id_fraction": (SELECT_CAP - 1) / SELECT_CAP,
            "mean_id_fraction": (2 + (SELECT_CAP - 1) / SELECT_CAP) / 3}
        assert [(v["measure"], v["passed"]) for v in a["limits"]] == [("min_id_fraction", False)]
    assert out.rstrip().splitlines()[-9] == "FAIL (8 limits broken)"


@pytest.mark.usefixtures("inexact_variants")
def test_report_csv_carries_the_measures(capsys, tmp_path):
    scorer_record(capsys, tmp_path, "--limit", "max_ulps=1")
    code, out, _ = run(capsys, "report", "--format", "csv", str(tmp_path / "r.json"))
    rows = {r["variant"]: r for r in csv.DictReader(io.StringIO(out))}
    assert code == 0 and rows["halve"]["exact"] == "True" and rows["halve"]["max_ulps"] == ""
    approx = rows[APPROX_SCORER]
    assert approx["exact"] == "False" and approx["vs_reference"] == "" and approx["differing"] == "3"
    assert int(approx["max_ulps"]) > 1 and approx["identical_queries"] == "1" and approx["limits"] == "broken"
    assert approx["checks"] == "FAIL" and f"{APPROX_SCORER} vs reference: max_ulps" in approx["detail"]
    code, out, _ = run(capsys, "report", "--format", "json", str(tmp_path / "r.json"))
    assert json.loads(out)["agreements"][0]["limits"][0]["measure"] == "max_ulps"


@pytest.mark.usefixtures("inexact_variants")
def test_the_gate_judges_a_saved_records_inexact_rows_by_its_limits(capsys, tmp_path):
    scorer_record(capsys, tmp_path)
    js = str(tmp_path / "r.json")
    code, out, _ = run(capsys, "gate", "--baseline", js, "--results", js)
    assert code == 0, out
    code, out, _ = run(capsys, "gate", "--baseline", js, "--results", js, "--limit", f"{APPROX_SCORER}:max_ulps=1")
    lines = out.rstrip().splitlines()
    assert code == 1 and lines[-3] == "GATE FAIL (2 LIMIT)"
    assert lines[-2].startswith(f"GATE FAIL 1/2: LIMIT: scores ctx={CTX} ") and "max_ulps" in lines[-2]
    code, out, err = run(capsys, "gate", "--baseline", js, "--results", js, "--limit", "multi:max_ulps=1")
    assert code == 2 and "it is exact" in err
    # other bits than the baseline's on the same inputs: a bitwise variant's are BITS-CHANGED, an inexact one's not
    changed = json.loads((tmp_path / "r.json").read_text())
    for p in changed["parity"]:
        if p["against"] == INPUTS and p["subject"] in ("halve", APPROX_SCORER):
            p["hashes"]["output"] = "0" * 64
    (tmp_path / "changed.json").write_text(json.dumps(changed))
    code, out, _ = run(capsys, "gate", "--baseline", js, "--results", str(tmp_path / "changed.json"), "--format", "csv")
    verdicts = {(r["variant"], r["verdict"]) for r in csv.DictReader(io.StringIO(out))}
    assert code == 1 and ("halve", "BITS-CHANGED") in verdicts and (APPROX_SCORER, "BITS-CHANGED") not in verdicts


@pytest.mark.usefixtures("inexact_variants")
def test_a_sweeps_limits_are_judged_and_its_file_checked(capsys, tmp_path):
    config = tmp_path / "s.yaml"
    config.write_text(f"stages: scores\ncontexts: {CTX}\nqueries: {NQ}\ncapacity: {CAP}\niterations: 1\n"
                      f"limits:\n  inexact:\n    max_ulps: 1\n  {APPROX_SCORER}:\n    min_id_fraction: 0.5\n")
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "sweep", str(config), "--backend", "cpu", "--json", str(js),
                         "--limit", "max_ulps=1e12")  # the command line's after the file's
    data = json.loads(js.read_text())
    assert code == 0, out + err
    assert data["settings"]["limits"] == {"inexact": {"max_ulps": 1e12}, APPROX_SCORER: {"min_id_fraction": 0.5}}
    assert {(v["measure"], v["passed"]) for a in data["agreements"] for v in a["limits"]} == {
        ("max_ulps", True), ("min_id_fraction", True)}


def test_compare_judges_an_inexact_pair_by_its_measures() -> None:
    case = scores_case(131072, 4)
    rng = np.random.default_rng(5)
    ms = [measurement("scores", name, case, 40.0, rng, 0.01) for name in ("base.scores", "pr.scores")]
    checks = [parity("scores", case, name, against) for name in ("base.scores", "pr.scores")
              for against in (GUARD_ZONES, INPUTS)]
    checks += [parity("scores", case, "base.scores", against) for against in ("reference", "cpu-model")]
    errors = {"entries": 100, "differing": 7, "mismatched": 0, "max_abs_error": 0.5, "max_rel_error": 0.25,
              "max_ulps": 9}
    selection = {"queries": 4, "identical_queries": 3, "min_id_fraction": 0.99, "mean_id_fraction": 0.9975}
    broken = [{"measure": "max_ulps", "value": 9.0, "limit": 4.0, "passed": False, "detail": ""}]
    agreements = [Agreement("scores", case, "pr.scores", "base.scores", errors, selection),
                  Agreement("scores", case, "pr.scores", "reference", errors, selection, broken),
                  Agreement("scores", case, "pr.scores", "cpu-model", errors, selection)]
    settings = {"compare": {"base": "base", "candidate": "pr", "tolerance": 0.05,
                            "pairs": [{"stage": "scores", "base": "base.scores", "candidate": "pr.scores"}]},
                "inexact": {"pr.scores": "scores"}}
    r = record(ms, checks, command="compare", settings=settings)
    r.agreements = agreements
    result = judge(r)
    (row,) = result.rows
    assert row.bits.startswith("inexact: 7 of 100 differ, max 9 ulp") and row.bits != "same"
    assert row.reference == ("yes", row.bits) and not result.passed
    assert compare_verdict(result)[1].startswith("COMPARE FAIL 1/1: scores ") and "pr.scores vs reference: max_ulps 9" \
        in compare_verdict(result)[1]
    r.agreements[1] = Agreement("scores", case, "pr.scores", "reference", errors, selection)  # no limit set
    assert compare_verdict(judge(r)) == ["COMPARE PASS: 1 pair, bits measured (inexact) in 1, 1 SAME"]
    (line,) = csv.DictReader(io.StringIO(compare_csv(result)))
    assert line["bits"].startswith("inexact: ") and line["reference"].startswith("base yes, pr inexact")
