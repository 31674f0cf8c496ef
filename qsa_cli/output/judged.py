"""A judging command's verdict as rows a CI system reads: one row per thing judged (a gate's (case, variant),
a compare pair, a sweep's variant or threshold, a selftest check, a sanitizer run), each failed, warned (not
judged, or shown instead of failed) or passed, with what the run was: the card, its clocks and the commits.

The JUnit XML, the annotations, the pull-request comment, the step summary and the short summary in a log
(output/ci.py) are all rendered from this one model, so they never disagree. Built from a record (or the
gate's or a compare's result) only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..record.schema import Agreement, EngineProvenance, Measurement, ParityCheck, RunRecord
from ..record.vocabulary import CPU_TIMES
from .compare import FAILING as COMPARE_FAILING
from .compare import CompareResult, CompareRow, compare_verdict
from .gate import UNCONFIRMED, GateResult, GateRow, gate_verdict
from .report import card, clocks_text, row_failures, verdict_lines
from .rows import case_label, result_rows

FAILED, WARNED, PASSED = "failed", "warned", "passed"
# the verdicts of rows that passed as expected: a comment folds them away, the rest it shows in its table
ROUTINE = ("SAME", "PASS", "REFERENCE", "UNTIMED", "TIMED", "clean", "holds")
# the gate's verdicts of a row shown instead of judged or failed, or SLOW and not when measured again: a warning,
# and skipped in the JUnit XML
GATE_WARNINGS = ("NOT-JUDGED", "MISSING-ALLOWED", "BITS-CHANGED-ALLOWED", UNCONFIRMED)


@dataclass(frozen=True)
class JudgedRow:
    stage: str  # scores, topk, window; or what else was judged: checks, sanitizer, gate, compare
    case: str  # the case for people (case_label), or "" where the row is no case's
    name: str  # the variant, pair, threshold, check or (variant, tool)
    verdict: str
    detail: str
    outcome: str  # FAILED, WARNED or PASSED
    measured: str = ""  # its times, where it has them: "12.3 → 16.0 µs (+30%)"
    seconds: float | None = None  # its time for a JUnit testcase (a median, a check's duration)


@dataclass(frozen=True)
class Judgement:
    command: str  # "gate", "compare", "sweep", ...: the JUnit suite is "qsa <command>"
    passed: bool
    verdict: str  # the command's verdict line: GATE PASS (76 SAME, 13 REFERENCE), FAIL (2 checks differ), ...
    rows: tuple[JudgedRow, ...]
    card: str
    clocks: str
    runs: tuple[tuple[str, str], ...]  # (which run: run, baseline, base, candidate; its commits and date)
    properties: tuple[tuple[str, str], ...] = ()  # settings a JUnit reader should see (the tolerance)
    notes: tuple[str, ...] = ()

    def of(self, outcome: str) -> list[JudgedRow]:
        return [r for r in self.rows if r.outcome == outcome]


def _when(record: RunRecord) -> str:
    return record.created.replace("T", " ")


def _engine_commits(engines: Sequence[EngineProvenance]) -> list[str]:
    return [f"engine {e.get('name', '?')} {e.get('commit') or e.get('revision') or 'no commit'}" for e in engines]


def run_of(record: RunRecord) -> str:
    """The commits a run's code came from and its date: ``qsa 528ef52dfd0b, engine strata 9f2c..., 2026-11-30 00:53:32``."""
    return ", ".join([f"qsa {record.git_commit or 'no commit'}", *_engine_commits(record.settings.get("engines") or []),
                      _when(record)])


def _change(base: float | None, now: float | None) -> str:
    if base is None or now is None or base <= 0:
        return ""
    return f"{base:.1f} → {now:.1f} µs ({now / base - 1:+.0%})"


# ---- the gate ------------------------------------------------------------------------------------------------


def _gate_row(r: GateRow) -> JudgedRow:
    outcome = FAILED if r.failed else WARNED if r.verdict in GATE_WARNINGS else PASSED
    case = " ".join(r.key.split()[1:])
    seconds = r.median_us * 1e-6 if r.median_us is not None and not r.run_bad else None
    return JudgedRow(r.key.split()[0], case, r.variant, r.verdict, r.detail, outcome,
                     "" if r.baseline_bad or r.run_bad else _change(r.baseline_us, r.median_us), seconds)


def of_gate(result: GateResult, record: RunRecord, baseline: RunRecord) -> Judgement:
    return Judgement("gate", result.passed, gate_verdict(result)[0], tuple(_gate_row(r) for r in result.rows),
                     card(record), clocks_text(record), (("run", run_of(record)), ("baseline", run_of(baseline))),
                     (("tolerance", str(result.tolerance)),), result.notes)


# ---- qsa compare ---------------------------------------------------------------------------------------------


def _median(m: Measurement | None) -> float | None:
    return m.median_us if m is not None else None


def _compare_verdict(r: CompareRow, failed: bool) -> str:
    """The pair's verdict: its bits first (a candidate whose bits are not the base's broke the change's promise,
    however fast or slow it is), then its time, then which other check failed it."""
    if not failed:
        return r.verdict
    bits = r.bits_check
    if isinstance(bits, ParityCheck) and not bits.equal:
        return "BITS-CHANGED"
    if r.verdict in COMPARE_FAILING:
        return r.verdict
    if isinstance(bits, Agreement) and not bits.passed:
        return "LIMIT"
    return "PARITY-FAIL"  # a side against qsa's reference or the CPU model


def _compare_row(r: CompareRow) -> JudgedRow:
    failures = r.failures()
    timed = r.ratio is not None and r.candidate is not None  # both sides timed and judged
    seconds = r.candidate.median_us * 1e-6 if timed and r.candidate is not None else None  # (narrowed for the types)
    return JudgedRow(r.stage, case_label(r.case), r.pair, _compare_verdict(r, bool(failures)),
                     "; ".join(failures) if failures else r.detail, FAILED if failures else PASSED,
                     _change(_median(r.base), _median(r.candidate)) if timed else "", seconds)


def _side_run(side: dict[str, object], engines: Sequence[EngineProvenance]) -> str:
    engine = next((e for e in engines if e.get("name") == side["name"]), None)
    commit = (engine or {}).get("commit") or side.get("revision")
    return f"{side['kind']} {side['path']}" + (f" at {commit}" if commit else ", no commit recorded")


def of_compare(result: CompareResult, record: RunRecord) -> Judgement:
    engines = record.settings.get("engines") or []
    sides = tuple((str(s["name"]), _side_run(s, engines)) for s in record.settings.get("sides") or [])
    # a failure outside the pairs: its verdict word leads it (INCOMPLETE: ..., NOTHING-COMPARED: ...), or it is
    # a check of the record's that no pair shows (a case's label leads it)
    other = tuple(JudgedRow("compare", "", "run", f.split(":")[0] if f[:1].isupper() else "PARITY-FAIL", f, FAILED)
                  for f in result.other_failures)
    return Judgement("compare", result.passed, compare_verdict(result)[0],
                     tuple(_compare_row(r) for r in result.rows) + other, card(record), clocks_text(record),
                     (("run", run_of(record)), *sides), (("tolerance", str(result.tolerance)),))


# ---- a record: a sweep, a selftest, a sanitize run -----------------------------------------------------------


def _measure_rows(record: RunRecord) -> list[JudgedRow]:
    """Each (stage, case, variant) with its checks' verdict (TIMED: timed, nothing checked), and each threshold."""
    rows = []
    for r in result_rows(record):
        verdict = r.verdict or "TIMED"
        seconds = r.median_us * 1e-6 if r.median_us is not None else None
        measured = f"{r.median_us:.1f} µs" if r.median_us is not None else ""
        rows.append(JudgedRow(r.stage, case_label(r.case), r.variant, verdict, row_failures(r),
                              FAILED if verdict == "FAIL" else PASSED, measured, seconds))
    rows += [JudgedRow(t.stage, case_label(t.case), t.name, "holds" if t.passed else "BROKEN",
                       f"{t.value:.2f}, the limit {t.limit:.2f}", PASSED if t.passed else FAILED)
             for t in record.thresholds]
    # a sweep's thresholds on the CPU backend: not judged, as its note says
    rows += [JudgedRow("thresholds", "", "thresholds", "NOT-JUDGED", note, WARNED)
             for note in record.notes if note.startswith(f"thresholds {CPU_TIMES}")]
    return rows


def _check_row(check_name: str, cases: int, passed: bool | None, seconds: float, detail: str) -> JudgedRow:
    verdict, outcome = {True: ("PASS", PASSED), None: ("SKIP", WARNED), False: ("FAIL", FAILED)}[passed]
    return JudgedRow("checks", f"{cases} cases", check_name, verdict, detail, outcome, seconds=seconds)


def of_record(record: RunRecord) -> Judgement:
    """A measuring command's record: its selftest checks where it has them, its sanitizer runs, else its rows."""
    if record.checks:
        rows = [_check_row(c.check, c.cases, c.passed, c.seconds, c.detail) for c in record.checks]
    elif record.sanitizer:
        rows = [JudgedRow(s.stage, case_label(s.case), f"{s.variant} {s.tool}",
                          "clean" if s.errors == 0 else "explained" if s.passed else "FAIL",
                          s.first_report, PASSED if s.passed else FAILED, seconds=s.seconds) for s in record.sanitizer]
    else:
        rows = _measure_rows(record)
    return Judgement(record.command, record.passed, verdict_lines(record)[0], tuple(rows), card(record),
                     clocks_text(record), (("run", run_of(record)),), notes=tuple(record.notes))

