"""Judging and rendering a ``qsa compare`` run: did the candidate side keep the base side's bits, and is it faster?

A compare run times two sides (two engine checkouts, two revisions of one, or two kernel folders) on the
same inputs in one record, each side's variants named ``SIDE.variant``, and checks each candidate variant
against its base variant bit for bit (``settings["compare"]["pairs"]``). This module reads that record
only. A row is one pair on one case; its time is judged by the gate's rule (``gate.timing_verdict``), so
compare and gate call the same change FAST, SLOW or SAME. It fails closed like the gate: other bits,
a SLOW row, a side's timing missing (MISSING) or unusable (BAD-SAMPLES), any failed check of the record
(integrity, the reference, the CPU model) and a run that compared nothing all fail. A pair of which either side
is declared not bitwise is never "same" bits: its candidate is measured against its base (and each side
against the reference and the CPU model), and fails only by a limit the run set on those measures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import InputError
from ..record.schema import Agreement, Case, ComparePair, EngineProvenance, Measurement, ParityCheck, RunRecord
from ..record.vocabulary import CPU_MODEL, CPU_ORACLE, SCORES, TOPK, WINDOW
from .gate import JUDGED, bad_samples, rule_met, sample_count, stop_of, timing_verdict
from .layout import MISSING, Block, Column, Prose, Sheet, csv_text
from .report import (
    THROTTLED_NOTE,
    agreement_cell,
    header,
    limit_failure,
    numbered,
    rule_cell,
    rule_not_met,
    samples_cell,
    time_cell,
    without_empty_columns,
)
from .rows import case_label, measurement_index, sample_problem, stage_cases

REFERENCE = "reference"  # qsa's reference variant: the "against" of each side's reference check
MODELS = {SCORES: CPU_MODEL, TOPK: CPU_ORACLE, WINDOW: CPU_ORACLE}  # the CPU model a stage's outputs are checked against
UNTIMED = "UNTIMED"  # neither side timed the case (a parity-only run): its bits alone are compared
FAILING = ("SLOW", "MISSING", "BAD-SAMPLES")
VERDICTS = ("FAST", "SLOW", "SAME", "MISSING", "BAD-SAMPLES", UNTIMED)  # the summary's order


def _check_cell(p: ParityCheck | None) -> str:
    if p is None:
        return MISSING
    return "yes" if p.equal else f"NO: {p.detail}" if p.detail else "NO"


def _check_failure(p: ParityCheck) -> str:
    return f"{p.stage} {case_label(p.case)}: {p.subject} vs {p.against}: {p.detail or 'differs'}"


Compared = ParityCheck | Agreement  # a pair's comparison: bit for bit, or measured (an inexact side)


def _compared_cell(c: Compared | None) -> str:
    return agreement_cell(c) if isinstance(c, Agreement) else _check_cell(c)


def _compared_failures(c: Compared) -> list[str]:
    if isinstance(c, Agreement):
        return [f"{c.stage} {case_label(c.case)}: {limit_failure(c, v)}" for v in c.limits if not v["passed"]]
    return [] if c.equal else [_check_failure(c)]


@dataclass(frozen=True)
class CompareRow:
    """One pair (a base variant and its candidate) on one case: their times, and their checks."""

    stage: str
    case: Case
    pair: str  # the variant without its side's prefix, e.g. "topk-split"
    base: Measurement | None
    candidate: Measurement | None
    verdict: str  # FAST, SLOW, SAME (gate.timing_verdict), MISSING, BAD-SAMPLES or UNTIMED
    detail: str  # why the verdict
    bits_check: Compared | None  # the candidate against the base: the change's promise, the same bits (or measured)
    reference_checks: tuple[Compared | None, Compared | None]  # (base, candidate) against qsa's reference
    model_checks: tuple[Compared | None, Compared | None]  # (base, candidate) against the CPU model

    @property
    def base_us(self) -> float | None:
        return self.base.median_us if self.base is not None else None

    @property
    def candidate_us(self) -> float | None:
        return self.candidate.median_us if self.candidate is not None else None

    @property
    def ratio(self) -> float | None:
        """The candidate's median over the base's (below 1 is faster), where both were timed and usable."""
        if self.verdict not in JUDGED:
            return None
        return self.candidate.median_us / self.base.median_us

    @property
    def bits(self) -> str:
        """"same", "DIFFER: <the first difference>", an inexact pair's measures, or "–" when the run compared none."""
        p = self.bits_check
        if isinstance(p, Agreement):
            return agreement_cell(p)
        return MISSING if p is None else "same" if p.equal else f"DIFFER: {p.detail}"

    @property
    def reference(self) -> tuple[str, str]:
        """Whether (base, candidate) equal qsa's reference: "yes", "NO: <detail>", measures, or "–"."""
        return _compared_cell(self.reference_checks[0]), _compared_cell(self.reference_checks[1])

    @property
    def model(self) -> tuple[str, str]:
        """Whether (base, candidate) equal the stage's CPU model: "yes", "NO: <detail>", measures, or "–"."""
        return _compared_cell(self.model_checks[0]), _compared_cell(self.model_checks[1])

    @property
    def compared(self) -> bool:
        """Whether anything of the pair was compared here: its timings judged or its bits checked."""
        return self.verdict in JUDGED or self.bits_check is not None

    def failures(self) -> list[str]:
        where = f"{self.stage} {case_label(self.case)}, {self.pair}"
        out = [f"{where}: {self.verdict}: {self.detail}"] if self.verdict in FAILING else []
        checks = (self.bits_check, *self.reference_checks, *self.model_checks)
        return out + [f for p in checks if p is not None for f in _compared_failures(p)]


@dataclass(frozen=True)
class CompareResult:
    rows: tuple[CompareRow, ...]
    tolerance: float
    base: str  # the sides' names
    candidate: str
    other_failures: tuple[str, ...] = ()  # what fails outside the rows: other failed checks, nothing compared

    def failures(self) -> list[str]:
        """One line per reason the comparison fails; none when it passes."""
        return [f for r in self.rows for f in r.failures()] + list(self.other_failures)

    @property
    def passed(self) -> bool:
        return not self.failures()

    def count(self, verdict: str) -> int:
        return sum(r.verdict == verdict for r in self.rows)


def unprefixed(name: str, side: str) -> str:
    """A side's variant without the side's name: ``base.topk`` -> ``topk``, a window pair's each part
    (``base.scores+base.topk`` -> ``scores+topk``)."""
    return "+".join(part.removeprefix(f"{side}.") for part in name.split("+"))


def judge(record: RunRecord) -> CompareResult:
    """Every pair of the record's compare settings on every case it ran, and what else of the record fails."""
    settings = record.settings.get("compare")
    if settings is None:
        raise InputError("not a qsa compare record: its settings have no \"compare\"")
    base, candidate, tolerance = settings["base"], settings["candidate"], settings["tolerance"]
    index = measurement_index(record)
    checks: dict[tuple[str, str, str], Compared] = {(p.key, p.subject, p.against): p
                                                    for p in [*record.parity, *record.agreements]}
    shown: set[tuple[str, str, str]] = set()  # the checks a row shows

    def check(key: str, subject: str, against: str) -> Compared | None:
        found = checks.get((key, subject, against))
        if found is not None:
            shown.add((key, subject, against))
        return found

    def row(key: str, stage: str, case: Case, pair: ComparePair) -> CompareRow | None:
        sides = (pair["base"], pair["candidate"])
        m_base, m_cand = (index.get((key, v)) for v in sides)
        bits = check(key, pair["candidate"], pair["base"])
        references = (check(key, sides[0], REFERENCE), check(key, sides[1], REFERENCE))
        models = (check(key, sides[0], MODELS[stage]), check(key, sides[1], MODELS[stage]))
        if m_base is None and m_cand is None and not any((bits, *references, *models)):
            return None  # the pair did not run this case
        bad = [why for why in (bad_samples(m_base, f"{base}'s"), bad_samples(m_cand, f"{candidate}'s")) if why]
        if bad:
            verdict, detail = "BAD-SAMPLES", "; ".join(bad)
        elif m_base is None and m_cand is None:
            verdict, detail = UNTIMED, "neither side timed this case"
        elif m_base is None or m_cand is None:
            timed, untimed = (candidate, base) if m_base is None else (base, candidate)
            verdict, detail = "MISSING", f"timed on {timed}, not on {untimed}"
        else:
            verdict, detail = timing_verdict(m_cand, m_base, tolerance)
        unmet = [why for why in (rule_not_met(m_cand, f"{candidate}'s"), rule_not_met(m_base, f"{base}'s")) if why]
        detail = "; ".join([detail, *unmet] if detail else unmet)
        return CompareRow(stage, case, unprefixed(pair["base"], base), m_base, m_cand, verdict, detail,
                          bits, references, models)

    by_stage: dict[str, list[ComparePair]] = {}
    for pair in settings["pairs"]:
        by_stage.setdefault(pair["stage"], []).append(pair)
    rows = [r for stage, pairs in by_stage.items() for key, case in stage_cases(record, stage).items()
            for pair in pairs if (r := row(key, stage, case, pair)) is not None]

    other = [f for p in [*record.parity, *record.agreements] if (p.key, p.subject, p.against) not in shown
             for f in _compared_failures(p)]
    if record.incomplete:
        other.append("INCOMPLETE: the run was interrupted, so only what it measured before is compared")
    if not any(r.compared for r in rows):
        other.append("NOTHING-COMPARED: no pair's timings or bits were compared on any case")
    return CompareResult(tuple(rows), tolerance, base, candidate, tuple(other))


# ---- rendering --------------------------------------------------------------------------------------------

RULE_COLUMNS = (Column("base rule"), Column("candidate rule"))  # shown only when a side took its samples by the rule
COLUMNS = (Column("variant", bare=True), Column("base", "µs", numeric=True), Column("base n", numeric=True),
           RULE_COLUMNS[0], Column("candidate", "µs", numeric=True), Column("candidate n", numeric=True), RULE_COLUMNS[1],
           Column("change", numeric=True), Column("verdict"), Column("bits"), Column("= reference"), Column("= model"))


def _sides(result: CompareResult, cells: tuple[str, str]) -> str:
    """One cell for both sides' checks: the one answer when they agree, else each side's."""
    b, c = cells
    return b if b == c else f"{result.base} {b}, {result.candidate} {c}"


def _cells(result: CompareResult, r: CompareRow) -> tuple[str, ...]:
    return (r.pair, time_cell(r.base), samples_cell(r.base), rule_cell(stop_of(r.base)), time_cell(r.candidate),
            samples_cell(r.candidate), rule_cell(stop_of(r.candidate)),
            MISSING if r.ratio is None else f"{r.ratio:.2f}x", r.verdict, r.bits, _sides(result, r.reference), _sides(result, r.model))


def _throttled(result: CompareResult) -> bool:
    return any(m is not None and m.throttled for r in result.rows for m in (r.base, r.candidate))


def compare_sheet(result: CompareResult) -> Sheet:
    """The rows grouped by case, the record's other failures in its notes."""
    sheet = Sheet(f"Compare: {'PASS' if result.passed else 'FAIL'}, {result.candidate} against {result.base}", COLUMNS)
    for r in result.rows:
        sheet.add(*_cells(result, r), group=f"{r.stage} {case_label(r.case)}")
    sheet.notes = [f"tolerance {result.tolerance:.0%}, and outside both sides' 10th-90th percentile spread",
                   *([THROTTLED_NOTE] if _throttled(result) else []), *result.other_failures]
    return without_empty_columns(sheet, RULE_COLUMNS)


def _side_line(side: dict[str, Any], engines: list[EngineProvenance]) -> str:
    """A side: its name, kind, path and revision, and its engine's commit and library."""
    engine = next((e for e in engines if e.get("name") == side["name"]), {})
    parts = [f"{side['name']}: {side['kind']} `{side['path']}`" + (f" at `{side['revision']}`" if side.get("revision") else "")]
    parts += [f"commit `{engine['commit']}`"] if engine.get("commit") else []
    parts += [f"library sha256 `{engine['library_sha256'][:12]}`"] if engine.get("library_sha256") else []
    return ", ".join(parts)


def summary(result: CompareResult) -> str:
    """``PASS: 12 pairs, bits identical, 3 FAST, 9 SAME``; a failure adds how many reasons, and the first."""
    bits = {"identical": 0, "differ": 0, "measured (inexact)": 0, "unchecked": 0}
    for r in result.rows:
        p = r.bits_check
        bits["unchecked" if p is None else "measured (inexact)" if isinstance(p, Agreement)
             else "identical" if p.equal else "differ"] += 1
    bit_parts = ["bits identical"] if bits["identical"] == len(result.rows) else [
        f"bits {what} in {n}" for what, n in bits.items() if n]
    counts = [f"{result.count(v)} {v}" for v in VERDICTS if result.count(v)]
    line = ", ".join([f"{len(result.rows)} pair{'' if len(result.rows) == 1 else 's'}", *bit_parts, *counts])
    failures = result.failures()
    if not failures:
        return f"PASS: {line}"
    return f"FAIL: {line}; {len(failures)} failure{'' if len(failures) == 1 else 's'}, the first: {failures[0]}"


def compare_blocks(result: CompareResult, record: RunRecord) -> list[Block]:
    """The sides and where they came from, the run, the summary, and the rows."""
    title = f"qsa compare: {result.candidate} against {result.base}"
    out: list[Block] = [Prose(title, f"### {title}")]
    engines = record.settings.get("engines") or []
    for side in record.settings.get("sides") or []:
        line = _side_line(side, engines)
        name, rest = line.split(":", 1)
        out.append(Prose(line, f"- **{name}**:{rest}"))
    verdict, line = summary(result).split(": ", 1)
    out += [header(record), Prose(f"{verdict}: {line}", f"**{verdict}**: {line}")]
    if result.rows:
        out.append(compare_sheet(result))
    out += [Prose(f"{note}.") for note in record.notes]
    return out


def compare_csv(result: CompareResult) -> str:
    def median(m: Measurement | None) -> float | None:
        return m.median_us if m is not None and sample_problem(m) is None else None

    return csv_text(("stage", "case", "variant", "base_us", "base_samples", "base_rule_met", "candidate_us",
                     "candidate_samples", "candidate_rule_met", "ratio", "verdict", "detail", "bits", "reference", "model"),
                    [(r.stage, case_label(r.case), r.pair, median(r.base), sample_count(r.base), rule_met(r.base),
                      median(r.candidate), sample_count(r.candidate), rule_met(r.candidate), r.ratio, r.verdict,
                      r.detail, r.bits, _sides(result, r.reference), _sides(result, r.model)) for r in result.rows])


def compare_verdict(result: CompareResult) -> list[str]:
    """``COMPARE PASS: summary``, or ``COMPARE FAIL (n failures)`` then one line per failure."""
    failures = result.failures()
    if not failures:
        return [f"COMPARE {summary(result)}"]
    return [f"COMPARE FAIL ({len(failures)} failure{'' if len(failures) == 1 else 's'})",
            *numbered("COMPARE FAIL", failures)]
