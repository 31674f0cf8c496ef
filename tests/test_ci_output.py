"""CI-native output of the judging commands (output/ci.py, commands/finish.py): GitHub's step summary and
annotations, JUnit XML checked against the format's structure, the pull-request comment's size limit, and
the short summary a log shows of a passing run (at 80 columns: nothing here depends on a terminal)."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from record_factory import measurement, record, scores_case, seed_record
from test_compare import check_of, compare_record

from qsa_cli.cli import main
from qsa_cli.commands.finish import CiEnvironment, Presentation, finish
from qsa_cli.output import ci, printed
from qsa_cli.output.compare import judge
from qsa_cli.output.gate import compare
from qsa_cli.output.judged import FAILED, PASSED, WARNED
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import RunRecord, SanitizerRun, SelftestCheck

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results" / "h200-2026-11-30"
BASELINE, RUN, SLOWED = RESULTS / "ci.json", RESULTS / "ci-2.json", RESULTS / "ci-slowed.json"
MAX_PASSING_LINES = 25
WIDTH = "80"


@pytest.fixture(autouse=True)
def log_width(monkeypatch):
    """A log's width, and no CI runner around unless a test sets one."""
    monkeypatch.setenv("COLUMNS", WIDTH)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out, err = capsys.readouterr()
    return info.value.code, out, err


# ---- JUnit XML: the format's structure ------------------------------------------------------------------------

COUNTS = ("tests", "failures", "errors", "skipped")


def check_junit(text: str) -> dict[str, int]:
    """JUnit XML as its readers (GitHub's test reporters, GitLab, Jenkins) take it: <testsuites> of <testsuite>s
    of <testcase>s, each named, with at most one <failure>, <error> or <skipped>, a numeric time where given,
    and every count attribute the sum of what it counts (a suite's over its cases, the root's over its suites).
    Returns the root's counts."""
    root = ET.fromstring(text)
    assert root.tag == "testsuites" and root.get("name")
    totals = dict.fromkeys(COUNTS, 0)
    for suite in root:
        assert suite.tag == "testsuite" and suite.get("name")
        found = dict.fromkeys(COUNTS, 0)
        for child in suite:
            if child.tag == "properties":
                assert all(p.tag == "property" and p.get("name") and p.get("value") is not None for p in child)
                continue
            assert child.tag == "testcase" and child.get("name") and child.get("classname")
            if child.get("time") is not None:
                assert float(child.get("time")) >= 0
            outcomes = [c.tag for c in child if c.tag in ("failure", "error", "skipped")]
            assert len(outcomes) <= 1, outcomes
            assert all(c.tag in ("failure", "error", "skipped", "system-out", "system-err") for c in child)
            found["tests"] += 1
            for tag, count in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
                found[count] += outcomes == [tag]
        assert {k: int(suite.get(k)) for k in COUNTS} == found
        totals = {k: totals[k] + found[k] for k in COUNTS}
    assert {k: int(root.get(k)) for k in COUNTS} == totals
    return totals


def test_the_junit_check_catches_counts_that_do_not_add_up() -> None:
    bad = ('<testsuites name="x" tests="2" failures="0" errors="0" skipped="0"><testsuite name="x" tests="2" '
           'failures="0" errors="0" skipped="0"><testcase classname="a" name="b"><failure/></testcase>'
           '<testcase classname="a" name="c"/></testsuite></testsuites>')
    with pytest.raises(AssertionError):
        check_junit(bad)


def test_gate_junit_is_well_formed_passing_and_failing(capsys, tmp_path) -> None:
    junit = tmp_path / "gate.xml"
    code, _, _ = run(capsys, "gate", "--baseline", str(BASELINE), "--results", str(RUN), "--junit", str(junit))
    assert code == 0 and check_junit(junit.read_text()) == {"tests": 89, "failures": 0, "errors": 0, "skipped": 0}
    code, _, _ = run(capsys, "gate", "--baseline", str(SLOWED), "--results", str(BASELINE), "--junit", str(junit))
    assert code == 1 and check_junit(junit.read_text())["failures"] == 19


def selftest_record(*checks: SelftestCheck) -> RunRecord:
    """A selftest's record on the H200 (the card of the records above): its checks only."""
    rec = record([], [], command="selftest", argv=["selftest"], device=load_record(BASELINE).device)
    rec.checks = [SelftestCheck(f"cpu: check {i}", 12, True, 0.5) for i in range(40)] + list(checks)
    return rec


def test_selftest_junit_skips_a_skipped_check_and_fails_a_failed_one() -> None:
    rec = selftest_record(SelftestCheck("gpu: nothing", 0, None, 0.0, "no device"),
                          SelftestCheck("cpu: x", 3, False, 0.1, "bad"))
    counts = check_junit(ci.junit_xml(printed.of_selftest(rec).judgement()))
    assert counts == {"tests": 42, "failures": 1, "errors": 0, "skipped": 1}


# ---- GitHub: annotations and the step summary ----------------------------------------------------------------


def test_workflow_commands_escape_as_githubs_toolkit() -> None:
    assert ci.escape_data("100% a\r\nb: c, d") == "100%25 a%0D%0Ab: c, d"
    assert ci.escape_property("100% a\r\nb: c, d") == "100%25 a%0D%0Ab%3A c%2C d"


def test_a_failing_gate_annotates_each_failing_row_and_appends_the_step_summary(capsys, tmp_path, monkeypatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("an earlier step's summary\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code, out, _ = run(capsys, "gate", "--baseline", str(SLOWED), "--results", str(BASELINE))
    assert code == 1
    errors = [line for line in out.splitlines() if line.startswith("::error ")]
    assert len(errors) == 19 and not [line for line in out.splitlines() if line.startswith("::warning")]
    assert errors[0].startswith("::error title=qsa gate%3A SLOW scores halve::ctx=32768 nq=1 ")
    assert "(+100%25)" in errors[0] and "\n" not in errors[0]
    lines = out.rstrip().splitlines()
    assert lines[-20] == "GATE FAIL (19 SLOW)" and lines[-1].startswith("GATE FAIL 19/19: SLOW: ")  # the verdict last
    text = summary.read_text()
    assert text.startswith("an earlier step's summary\n### qsa gate: FAIL\n") and "| halve | SLOW |" in text


def test_a_row_shown_instead_of_judged_is_a_warning(capsys, tmp_path, monkeypatch) -> None:
    baseline = json.loads(BASELINE.read_text())
    baseline["measurements"].append({**baseline["measurements"][0], "variant": "gone"})
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    code, out, _ = run(capsys, "gate", "--baseline", str(path), "--results", str(BASELINE), "--allow-missing")
    warnings = [line for line in out.splitlines() if line.startswith("::")]
    assert code == 0 and len(warnings) == 1 and warnings[0].startswith("::warning title=qsa gate%3A MISSING-ALLOWED")


def test_no_ci_runner_no_annotations(capsys) -> None:
    code, out, _ = run(capsys, "gate", "--baseline", str(SLOWED), "--results", str(BASELINE))
    assert code == 1 and "::error" not in out


def test_the_environment_is_read_once_into_the_presentation() -> None:
    assert CiEnvironment.of({"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": "/x"}) == CiEnvironment("/x", True)
    assert CiEnvironment.of({"GITHUB_ACTIONS": "false", "GITHUB_STEP_SUMMARY": ""}) == CiEnvironment(None, False)


def test_an_unwritable_step_summary_is_refused_before_anything_runs(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "missing" / "summary.md"))
    junit = tmp_path / "gate.xml"
    code, out, err = run(capsys, "gate", "--baseline", str(BASELINE), "--results", str(RUN), "--junit", str(junit))
    assert code == 2 and err.startswith("qsa: error: GITHUB_STEP_SUMMARY ") and "no such folder" in err
    assert not out and not junit.exists()


# ---- the pull-request comment ----------------------------------------------------------------------------------


def huge_record(cases: int, scale: float) -> tuple:
    """A run and its baseline of ``cases`` scorer cases, the run's ``halve`` ``scale`` times the baseline's."""
    rng = np.random.default_rng(0)
    base, now = [], []
    for i in range(cases):
        case = scores_case(32768 + 4 * i, 1 + i % 8)
        base += [measurement("scores", v, case, t, rng, noise=0.001) for v, t in (("multi", 12.0), ("halve", 8.0))]
        now += [measurement("scores", v, case, t, rng, noise=0.001) for v, t in (("multi", 12.0), ("halve", 8.0 * scale))]
    return record(now, []), record(base, [])


@pytest.mark.parametrize("scale", [1.0, 1.5])  # every row SAME (all folded), or every halve SLOW (the table)
def test_the_comment_stays_under_githubs_limit_whatever_the_size(scale: float) -> None:
    run_record, baseline = huge_record(4000, scale)
    result = compare(run_record, baseline)
    body = ci.comment(printed.of_gate(result, run_record, baseline).judgement())
    assert len(body) < ci.COMMENT_LIMIT and "left out to keep this under GitHub's 65,536 characters" in body
    assert body.count("<details>") == body.count("</details>") == 1
    assert ("**GATE FAIL (4000 SLOW)**" if scale > 1 else "**GATE PASS (8000 SAME)**") in body
    assert "| card | NVIDIA GeForce RTX 2080 Ti (sm_75) |" in body and "| run | qsa 0123456789ab, " in body


def test_the_comment_shows_the_rows_that_moved_and_folds_the_rest(capsys, tmp_path) -> None:
    path = tmp_path / "comment.md"
    code, _, _ = run(capsys, "gate", "--baseline", str(SLOWED), "--results", str(BASELINE), "--comment", str(path))
    body = path.read_text()
    table, folded = body.split("<details>")
    assert code == 1 and table.count("| SLOW |") == 19 and "| SAME |" not in table
    assert "The other 70 rows (57 SAME, 13 REFERENCE)" in folded and folded.count("| SAME |") == 57
    assert "| baseline | qsa 528ef52dfd0b-dirty, 2026-11-30 00:53:32+00:00 |" in table


# ---- what a log shows ------------------------------------------------------------------------------------------


def test_a_passing_gate_prints_what_a_reviewer_reads_in_a_log(capsys) -> None:
    code, out, _ = run(capsys, "gate", "--baseline", str(BASELINE), "--results", str(RUN))
    lines = out.rstrip().splitlines()
    assert code == 0 and len(lines) <= MAX_PASSING_LINES and max(map(len, lines)) <= int(WIDTH)
    assert lines[-1] == "GATE PASS (76 SAME, 13 REFERENCE)"
    text = " ".join(out.split())
    assert "qsa gate on NVIDIA H200 (sm_90), clocks: not locked, read: SM 1980 MHz" in text
    assert "scores: 24 SAME" in text and "topk: 52 SAME, 13 REFERENCE" in text
    assert f"record: {RUN}; every row: -v prints them" in text


def test_verbose_and_the_formats_keep_every_row(capsys) -> None:
    code, out, _ = run(capsys, "gate", "--baseline", str(BASELINE), "--results", str(RUN), "-v")
    assert code == 0 and out.count("verdict SAME") == 76 and out.count("verdict REFERENCE") == 13
    code, out, _ = run(capsys, "gate", "--baseline", str(BASELINE), "--results", str(RUN), "--format", "csv")
    assert code == 0 and len(out.splitlines()) == 1 + 89
    code, out, _ = run(capsys, "gate", "--baseline", str(BASELINE), "--results", str(RUN), "--markdown")
    assert code == 0 and out.count("| SAME |") == 76


def test_a_failing_gate_adds_one_line_per_failure_to_the_summary(capsys) -> None:
    code, out, _ = run(capsys, "gate", "--baseline", str(SLOWED), "--results", str(BASELINE))
    lines = out.rstrip().splitlines()
    failures = [line for line in lines if line.startswith("GATE FAIL ")]  # the verdict, then one line per failure
    assert code == 1 and len(failures) == 1 + 19 and len(lines) - len(failures) <= MAX_PASSING_LINES


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_keeps_the_tables_and_a_log_gets_the_summary() -> None:
    shown = Presentation("table", judging=True)
    assert shown.summarised(io.StringIO()) and not shown.summarised(Terminal())
    assert not Presentation("table", judging=True, verbose=True).summarised(io.StringIO())
    assert not Presentation("markdown", judging=True).summarised(io.StringIO())
    assert not Presentation("table").summarised(io.StringIO())  # a command that judges nothing for CI


@pytest.mark.parametrize("selftest", [True, False])
def test_a_passing_selftest_or_sweep_summary_fits(selftest: bool, capsys) -> None:
    rec = selftest_record() if selftest else load_record(BASELINE)
    shown = Presentation("table", judging=True)
    assert finish(printed.of_selftest(rec) if selftest else printed.of_record(rec), shown, None) == 0
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert len(lines) <= MAX_PASSING_LINES and lines[-1] == "PASS"
    assert lines[0].startswith(f"qsa {rec.command} on NVIDIA H200 (sm_90)")


def test_a_sweep_writes_its_ci_files_on_the_cpu(capsys, tmp_path) -> None:
    junit, comment = tmp_path / "s.xml", tmp_path / "c.md"
    config = tmp_path / "tiny.yaml"
    config.write_text("iterations: 2\ncapacity: 16384\nmatrix:\n  - stages: [scores, topk]\n    contexts: [9003]\n"
                      "    queries: [2]\n")
    code, out, err = run(capsys, "sweep", str(config), "--backend", "cpu", "--quiet", "--junit", str(junit),
                         "--comment", str(comment))
    assert code == 0, err
    counts = check_junit(junit.read_text())
    assert counts["failures"] == 0 and counts["tests"] > 0
    assert comment.read_text().startswith("### qsa sweep: PASS\n") and "| card | CPU backend" in comment.read_text()
    assert len(out.splitlines()) <= MAX_PASSING_LINES and out.rstrip().splitlines()[-1] == "PASS"


def test_topk_parity_takes_the_ci_options_with_selftest_only(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "topk-parity", "9000", "2", "1", "16384", "--backend", "cpu",
                       "--junit", str(tmp_path / "t.xml"))
    assert code == 2 and "--junit goes with --selftest" in err


def test_a_judged_row_is_failed_warned_or_passed() -> None:
    baseline = seed_record(seed=1, noise=0.02)
    result = compare(seed_record(seed=2, noise=0.02, scale=1.3), baseline)
    judged = printed.of_gate(result, seed_record(seed=2, noise=0.02, scale=1.3), baseline).judgement()
    assert {r.outcome for r in judged.rows} <= {FAILED, WARNED, PASSED}
    assert len(judged.of(FAILED)) == sum(r.failed for r in result.rows)



# ---- qsa compare and qsa sanitize: their rows as CI reads them ---------------------------------------------------


def test_a_compare_whose_candidate_changed_bits_is_bits_changed_with_both_sides_commits(capsys, tmp_path) -> None:
    rec = compare_record(scale=0.62)
    flipped = check_of(rec, "pr.scores", "base.scores", n=1)
    flipped.equal, flipped.detail = False, "query 0 block 5: 1.0 vs 1.0000001"
    judgement = printed.of_compare(judge(rec), rec).judgement()
    (failed,) = judgement.of(FAILED)
    assert (failed.verdict, failed.name, failed.case) == ("BITS-CHANGED", "scores", "131K (131072), 4 queries, "
                                                          "capacity 524288, L2 clean")
    assert dict(judgement.runs)["base"] == "engine /src/engine at 0123456789ab"
    assert dict(judgement.runs)["pr"] == "kernels /src/kernels-pr, no commit recorded"
    assert [line.split("::")[1] for line in ci.annotations(judgement)] == ["error title=qsa compare%3A BITS-CHANGED scores scores"]
    assert check_junit(ci.junit_xml(judgement))["failures"] == 1
    body = ci.comment(judgement)
    assert "| base | engine /src/engine at 0123456789ab |" in body and body.count("| BITS-CHANGED |") == 1
    shown = Presentation("table", judging=True)
    assert finish(printed.of_compare(judge(rec), rec), shown) == 1
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert lines[-2:] == ["COMPARE FAIL (1 failure)", "COMPARE FAIL 1/1: scores 131K (131072), 4 queries, capacity "
                          "524288, L2 clean: pr.scores vs base.scores: query 0 block 5: 1.0 vs 1.0000001"]
    assert len(lines) - 2 <= MAX_PASSING_LINES and "scores: 2 FAST, 1 BITS-CHANGED" in lines


def test_a_slower_candidate_whose_bits_changed_is_bits_changed_first() -> None:
    """The bits before the time: a pair both slower and of other bits is BITS-CHANGED, its SLOW in its detail."""
    rec = compare_record(scale=1.3)
    flipped = check_of(rec, "pr.scores", "base.scores", n=1)
    flipped.equal, flipped.detail = False, "query 0 block 5: 1.0 vs 1.0000001"
    judgement = printed.of_compare(judge(rec), rec).judgement()
    verdicts = {(r.case, r.verdict) for r in judgement.of(FAILED)}
    assert ("131K (131072), 4 queries, capacity 524288, L2 clean", "BITS-CHANGED") in verdicts
    changed = next(r for r in judgement.of(FAILED) if r.verdict == "BITS-CHANGED")
    assert "SLOW" in changed.detail and "query 0 block 5" in changed.detail
    assert sum("BITS-CHANGED" in line for line in ci.annotations(judgement)) == 1


def test_a_slower_candidate_is_a_slow_row_each(capsys) -> None:
    rec = compare_record(scale=1.3)
    judgement = printed.of_compare(judge(rec), rec).judgement()
    assert [r.verdict for r in judgement.rows] == ["SLOW"] * 5 and all(r.measured.endswith("(+30%)") for r in judgement.rows)
    assert check_junit(ci.junit_xml(judgement)) == {"tests": 5, "failures": 5, "errors": 0, "skipped": 0}


def test_sanitize_rows_clean_explained_and_failing() -> None:
    case = scores_case(4099, 2)
    rec = record([], [], command="sanitize", argv=["sanitize"])
    rec.sanitizer = [SanitizerRun("scores", case, "halve", "memcheck", 0, 0),
                     SanitizerRun("scores", case, "multi", "racecheck", 2, 2, "a known hazard"),
                     SanitizerRun("scores", case, "paired", "initcheck", 1, 0, "Uninitialized __global__ read")]
    judgement = printed.of_sanitize(rec).judgement()
    assert [(r.verdict, r.outcome) for r in judgement.rows] == [("clean", PASSED), ("explained", PASSED),
                                                                ("FAIL", FAILED)]
    assert check_junit(ci.junit_xml(judgement))["failures"] == 1
    assert "| paired initcheck | FAIL |" in ci.comment(judgement) and "| multi racecheck | explained |" in ci.comment(judgement)
