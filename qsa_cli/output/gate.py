"""The regression gate: a run's record against a baseline record.

A row is SLOW only when its median is slower than the baseline's by more than the tolerance AND the
two runs' 10th-90th percentile spreads do not overlap, so noise alone never fails a build; FAST is
the mirror image. Any parity failure or broken threshold in the run fails the gate whatever the
times say. The gate fails closed: a (case, variant) of the baseline that the run lacks is MISSING
and fails (unless missing rows are allowed: MISSING-ALLOWED), samples that are empty, NaN or
infinite (or with a median not above 0) in either record are BAD-SAMPLES, and a run with no timing in
common with the baseline is NOTHING-COMPARED. A row only the run has is NEW and
passes. A library's reference point (``cupy.argpartition``, timed beside the kernels for scale, with
CuPy's own host work and allocations inside) is compared and shown but never fails the gate on its
time: its verdict is REFERENCE. Times of the CPU backend (in either record) are the CPU models' on the host
and say nothing of the kernels': they are shown, NOT-JUDGED, and so are a sweep's thresholds on them, as
the sweep itself does not judge them; parity and the rest are judged as on the GPU. A variant declared not
bitwise is judged by the limits on its measures (the run's, and the gate's own ``--limit``): a broken one is
LIMIT; its output's bits are never BITS-CHANGED, since they were never promised. An engine checkout's variants
are ``NAME.KIND``, NAME as given to ``--engine``: where each run had one engine checkout, named otherwise in
each, the baseline's are matched to the run's by their KIND (and a note names both). A SLOW row that the run
measured again (``qsa gate --confirm``: the record's ``confirmations``) stays SLOW only when every round's
measurement of it is SLOW against the same baseline too; otherwise it is UNCONFIRMED, which passes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.errors import GateError
from ..record.baselines import engine_names
from ..record.limits import check_scopes, merged, verdicts
from ..record.schema import Measurement, RunRecord, StopOutcome
from ..record.vocabulary import ARGPARTITION, CPU_TIMES, INPUTS, INPUTS_HASH, OUTPUT_HASH, times_judged
from .layout import MISSING, Block, Column, Prose, Sheet, csv_text
from .report import header, limit_failure, numbered, rule_cell, rule_not_met, samples_cell, without_empty_columns
from .rows import inexact_variant, measurement_index, sample_problem

UNCONFIRMED = "UNCONFIRMED"  # SLOW in the sweep, not SLOW when measured again (qsa gate --confirm): passes, warned
FAILING = ("SLOW", "PARITY-FAIL", "THRESHOLD", "LIMIT", "MISSING", "BAD-SAMPLES", "NOTHING-COMPARED", "BITS-CHANGED")
JUDGED = ("SAME", "FAST", "SLOW", UNCONFIRMED)  # a timing compared with the baseline's and judged
NOT_JUDGED = "NOT-JUDGED"  # a timing in both runs, of the CPU backend: compared, never judged
VERDICTS = (*FAILING, "MISSING-ALLOWED", "BITS-CHANGED-ALLOWED", UNCONFIRMED, "SAME", "FAST", "NEW", "REFERENCE",
            NOT_JUDGED)  # a summary's order
REFERENCE_POINTS = (ARGPARTITION,)  # variants the gate shows but does not judge


@dataclass(frozen=True)
class GateRow:
    key: str  # the case key (results.case_key)
    variant: str  # a measured variant, or "subject vs against" for a parity failure
    baseline_us: float | None
    median_us: float | None
    verdict: str  # FAST, SLOW, SAME, UNCONFIRMED (SLOW, then not when measured again), NOT-JUDGED (CPU times), PARITY-FAIL, THRESHOLD (a sweep's), LIMIT, MISSING or MISSING-ALLOWED (baseline
    # only), NEW (run only), REFERENCE (a library's reference point), BAD-SAMPLES, NOTHING-COMPARED (no row judged),
    # BITS-CHANGED or BITS-CHANGED-ALLOWED (another output than the baseline's on the same inputs)
    detail: str = ""
    baseline_bad: str | None = None  # why the baseline's samples are unusable (BAD-SAMPLES), and the run's
    run_bad: str | None = None
    measured: tuple[Measurement | None, Measurement | None] = (None, None)  # (the baseline's, the run's): their
    # sample counts and stopping rules

    @property
    def ratio(self) -> float | None:
        if self.baseline_us is None or self.median_us is None or self.baseline_bad or self.run_bad:
            return None
        return self.median_us / self.baseline_us

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING


@dataclass(frozen=True)
class GateResult:
    rows: tuple[GateRow, ...]
    tolerance: float
    notes: tuple[str, ...] = ()  # what a forced comparison overrode, and other kernels compared by their bits

    @property
    def passed(self) -> bool:
        return not any(r.failed for r in self.rows)


def output_hashes(record: RunRecord) -> dict[tuple[str, str], tuple[str, str]]:
    """(case key, variant) -> (inputs hash, output hash) of every variant run (its integrity row)."""
    return {(p.key, p.subject): (p.hashes[INPUTS_HASH], p.hashes[OUTPUT_HASH]) for p in record.parity
            if p.against == INPUTS and INPUTS_HASH in p.hashes and OUTPUT_HASH in p.hashes}


def check_comparable(record: RunRecord, baseline: RunRecord, force: bool = False) -> list[str]:
    """What makes the two runs incomparable: another backend or card is a GateError unless ``force`` (the
    differences are then returned for the result's notes); other kernel sources are compared by their
    bits when the baseline holds its outputs' hashes (a note says so), else refused like another card.
    Cheap: call it before measuring. An incomplete (interrupted) record is refused, forced or not: its
    missing rows would read as gone."""
    for name, r in (("the results", record), ("the baseline", baseline)):
        if r.incomplete:
            raise GateError(f"{name} record is incomplete (its run was interrupted): the gate compares whole runs")
    out = [f"{what} {get(record)!r} here, {get(baseline)!r} in the baseline"
           for what, get in (("backend", lambda r: r.backend),
                             ("device", lambda r: r.device.get("name")),
                             ("compute capability", lambda r: r.device.get("compute_capability")))
           if get(record) != get(baseline)]
    notes, ours, theirs = [], record.kernel_source_hash, baseline.kernel_source_hash
    if ours != theirs and output_hashes(baseline):
        notes.append(f"kernel sources {ours[:12]} here, {theirs[:12]} in the baseline: their outputs' bits are compared")
    elif ours != theirs:
        out.append(f"kernel sources {ours!r} here, {theirs!r} in the baseline (the baseline holds no output hashes "
                   "to compare the bits of other kernels by)")
    if out and not force:
        raise GateError(f"the baseline is not comparable: {'; '.join(out)} (pass --force to compare anyway)")
    return [f"forced: {d}" for d in out] + notes


def matched_engines(record: RunRecord, baseline: RunRecord) -> dict[str, str]:
    """The baseline's engine name -> the run's, where each run had one engine checkout and they were named
    otherwise (``--engine strata@main=...`` then ``--engine strata@pr=...``): what the engine is, not the name
    typed, matches its variants. Several engines are matched by their names."""
    ours, theirs = engine_names(record), engine_names(baseline)
    return {theirs[0]: ours[0]} if len(ours) == len(theirs) == 1 and ours != theirs else {}


def renamed(name: str, names: dict[str, str]) -> str:
    """A variant (a window pair: each part; a check's subject ``V (last timed call)`` too) with its engine's
    name replaced by ``names``: ``main.scores`` -> ``pr.scores``."""
    def part_of(part: str) -> str:
        old = next((old for old in names if part.startswith(f"{old}.")), None)
        return part if old is None else f"{names[old]}{part[len(old):]}"

    return "+".join(part_of(part) for part in name.split("+"))


def with_engines_renamed(record: RunRecord, names: dict[str, str]) -> RunRecord:
    """The record with its engine variants named by ``names`` wherever a row or setting names them."""
    if not names:
        return record
    return replace(
        record, measurements=[replace(m, variant=renamed(m.variant, names)) for m in record.measurements],
        parity=[replace(p, subject=renamed(p.subject, names), against=renamed(p.against, names)) for p in record.parity],
        agreements=[replace(a, subject=renamed(a.subject, names), against=renamed(a.against, names))
                    for a in record.agreements],
        settings={**record.settings, "inexact": {renamed(v, names): stage
                                                 for v, stage in (record.settings.get("inexact") or {}).items()}})


def _bits_rows(record: RunRecord, baseline: RunRecord, allow_bit_changes: bool) -> list[GateRow]:
    """A row for each (case, variant) of both runs whose output on the same inputs has other bits."""
    ours, theirs = output_hashes(record), output_hashes(baseline)
    rows = []
    for (key, variant), (inputs, output) in ours.items():
        base = theirs.get((key, variant))
        if base is None or base[0] != inputs or base[1] == output:
            continue
        if inexact_variant(record, variant) or inexact_variant(baseline, variant):
            continue  # judged by its measures' limits
        rows.append(GateRow(key, variant, None, None, "BITS-CHANGED-ALLOWED" if allow_bit_changes else "BITS-CHANGED",
                            f"output sha256 {output[:12]}, the baseline's {base[1][:12]}, on the same inputs"))
    return rows


Triples = tuple[tuple[str, str, float], ...]  # (scope, measure, value): the command line's --limit


def _by_scope(limits: Triples) -> dict[str, dict[str, float]]:
    return merged(*({scope: {measure: value}} for scope, measure, value in limits))


def check_limits(record: RunRecord, limits: Triples) -> None:
    """The gate's ``--limit`` on a saved record: each one's variant must be one the record declares not bitwise
    (a LimitError, exit 2, before anything is judged)."""
    known = {*(m.variant for m in record.measurements), *(p.subject for p in record.parity),
             *(a.subject for a in record.agreements)}
    check_scopes(_by_scope(limits), record.settings.get("inexact") or {}, known)


def _limit_rows(record: RunRecord, limits: Triples) -> list[GateRow]:
    """A LIMIT row for each broken limit: the run's own verdicts, or with the gate's ``--limit`` every inexact
    row judged again by the run's limits and the gate's over them."""
    roles = record.settings.get("roles") or {}
    inexact = record.settings.get("inexact") or {}
    given = merged(record.settings.get("limits") or {}, _by_scope(limits))
    rows = []
    for a in record.agreements:
        judged = verdicts(a, roles.get(a.stage, {}).get("reference"), inexact, given) if limits else a.limits
        rows += [GateRow(a.key, a.subject, None, None, "LIMIT", limit_failure(a, v)) for v in judged if not v["passed"]]
    return rows


def timing_verdict(m: Measurement, b: Measurement, tolerance: float) -> tuple[str, str]:
    """FAST, SLOW or SAME for ``m`` against the baseline ``b``, and why: the gate's rule, shared with ``qsa
    compare`` (a candidate against its base). A ratio beyond the tolerance whose spreads overlap is SAME, so
    noise alone never decides. Both must have usable samples (``bad_samples``)."""
    ratio = m.median_us / b.median_us
    (lo, hi), (b_lo, b_hi) = m.spread_us, b.spread_us
    apart = hi < b_lo or b_hi < lo
    if ratio > 1 + tolerance and apart:
        return "SLOW", f"{ratio:.2f}x the baseline, outside both runs' spread"
    if ratio < 1 - tolerance and apart:
        return "FAST", f"{ratio:.2f}x the baseline, outside both runs' spread"
    return "SAME", "beyond the tolerance but within the runs' spread" if abs(ratio - 1) > tolerance else ""


def _timing_row(key: str, variant: str, m: Measurement, b: Measurement, tolerance: float, judged: bool) -> GateRow:
    if not judged:
        return GateRow(key, variant, b.median_us, m.median_us, NOT_JUDGED,
                       f"{CPU_TIMES}; {m.median_us / b.median_us:.2f}x the baseline)")
    if variant in REFERENCE_POINTS:
        return GateRow(key, variant, b.median_us, m.median_us, "REFERENCE",
                       f"a library's reference point, not gated ({m.median_us / b.median_us:.2f}x the baseline)")
    return GateRow(key, variant, b.median_us, m.median_us, *timing_verdict(m, b, tolerance))


Reruns = dict[tuple[str, str], list[tuple[int, Measurement]]]  # (case key, variant) -> (round, measurement)


def reruns_of(record: RunRecord) -> Reruns:
    """Each (case, variant)'s measurements again (``RunRecord.confirmations``), in the order of their rounds."""
    out: Reruns = {}
    for c in sorted(record.confirmations, key=lambda c: c.round):
        for m in c.measurements:
            out.setdefault((m.key, m.variant), []).append((c.round, m))
    return out


def _confirmed(row: GateRow, b: Measurement, again: list[tuple[int, Measurement]], tolerance: float) -> GateRow:
    """A SLOW row judged again by each round's measurement of it against the same baseline: it stays SLOW only
    when every round's is SLOW too (its detail names them), and is UNCONFIRMED at the first round's that is
    not. A round whose samples are unusable refutes nothing."""
    if row.verdict != "SLOW" or not again:
        return row
    said = []
    for round_, m in again:
        problem = sample_problem(m)
        if problem:
            said.append(f"measured again (round {round_}): its samples {problem}")
            continue
        verdict = timing_verdict(m, b, tolerance)[0]
        said.append(f"measured again (round {round_}): {m.median_us:.1f} µs, {m.median_us / b.median_us:.2f}x, "
                    f"{verdict}")
        if verdict != "SLOW":
            return replace(row, verdict=UNCONFIRMED, detail=f"{row.detail}; {'; '.join(said)}")
    return replace(row, detail=f"{row.detail}; confirmed: {'; '.join(said)}")


def _measured(row: GateRow, b: Measurement | None, m: Measurement | None) -> GateRow:
    """The row with the measurements it compared, its detail saying which side's stopping rule was not met
    (its median is then noisier than the rule asked; the verdict stands, as the spreads already weigh noise)."""
    unmet = [why for why in (rule_not_met(m, "the run's"), rule_not_met(b, "the baseline's")) if why]
    return replace(row, detail="; ".join([row.detail, *unmet] if row.detail else unmet), measured=(b, m))


def bad_samples(m: Measurement | None, whose: str) -> str | None:
    """``whose`` samples' problem (``rows.sample_problem``), or None: the gate's and ``qsa compare``'s BAD-SAMPLES."""
    problem = sample_problem(m)
    return f"{whose} {problem}" if problem else None


def compare(record: RunRecord, baseline: RunRecord, tolerance: float = 0.05, force: bool = False,
            allow_missing: bool = False, allow_bit_changes: bool = False, limits: Triples = ()) -> GateResult:
    """Every (case, variant) of the run and the baseline, plus a row for each failed parity check, each
    broken threshold of the run's sweep and each broken limit on an inexact variant's measures (``limits``:
    the gate's own, over the run's), and one when no timing could be judged."""
    if not 0 <= tolerance < 1:
        raise GateError(f"tolerance must be a fraction in [0, 1) such as 0.05 (got {tolerance})")
    notes = check_comparable(record, baseline, force)
    engines = matched_engines(record, baseline)
    notes += [f"the baseline's engine {old} is this run's {new}: its variants {old}.KIND are matched as {new}.KIND"
              for old, new in engines.items()]
    baseline = with_engines_renamed(baseline, engines)
    judged = times_judged(record.backend) and times_judged(baseline.backend)
    if not judged:
        notes.append(f"times {CPU_TIMES}; the gate judges times on the GPU backend)")
        if record.thresholds:
            notes.append(f"the run's thresholds {CPU_TIMES})")
    ours, theirs = measurement_index(record), measurement_index(baseline)
    again = reruns_of(record)
    rows = []
    for key, variant in dict.fromkeys([*ours, *theirs]):
        m, b = ours.get((key, variant)), theirs.get((key, variant))
        median, base = (x.median_us if x is not None else None for x in (m, b))
        bad = [why for why in (bad_samples(m, "the run's"), bad_samples(b, "the baseline's")) if why]
        if bad:
            rows.append(GateRow(key, variant, base, median, "BAD-SAMPLES", "; ".join(bad), sample_problem(b),
                                sample_problem(m)))
        elif m is None:
            rows.append(GateRow(key, variant, base, None, "MISSING-ALLOWED" if allow_missing else "MISSING",
                                "in the baseline, not in this run"))
        elif b is None:
            rows.append(GateRow(key, variant, None, median, "NEW", "not in the baseline"))
        else:
            rows.append(_confirmed(_timing_row(key, variant, m, b, tolerance, judged), b, again.get((key, variant), []),
                                   tolerance))
        rows[-1] = _measured(rows[-1], b, m)
    if not any(r.verdict in (*JUDGED, NOT_JUDGED) for r in rows):
        rows.append(GateRow("gate", "timings", None, None, "NOTHING-COMPARED",
                            "no (case, variant) is timed in both the run and the baseline"))
    rows += _bits_rows(record, baseline, allow_bit_changes)
    rows += [GateRow(p.key, f"{p.subject} vs {p.against}", None, None, "PARITY-FAIL", p.detail)
             for p in record.parity if not p.equal]
    rows += [GateRow(t.key, t.name, None, None, "THRESHOLD", f"{t.value:.2f}, the limit is {t.limit:.2f}")
             for t in record.thresholds if judged and not t.passed]
    rows += _limit_rows(record, limits)
    return GateResult(tuple(rows), tolerance, tuple(notes))


# ---- rendering --------------------------------------------------------------------------------------------


def _fmt(value: float | None, template: str) -> str:
    return MISSING if value is None else template.format(value)


def _time(value: float | None, bad: str | None) -> str:
    return f"BAD ({bad})" if bad else _fmt(value, "{:.1f}")


RULE_COLUMNS = (Column("baseline rule"), Column("rule"))  # shown only when a side took its samples by the rule
GATE_COLUMNS = (Column("variant", bare=True), Column("baseline", "µs", numeric=True), Column("baseline n", numeric=True),
                RULE_COLUMNS[0], Column("median", "µs", numeric=True), Column("n", numeric=True), RULE_COLUMNS[1],
                Column("ratio", numeric=True), Column("verdict"), Column("detail"))


def stop_of(m: Measurement | None) -> StopOutcome | None:
    """How the stopping rule ended ``m``'s samples; None when ITERS was a count or nothing was timed."""
    return m.stop if m is not None else None


def gate_sheet(result: GateResult) -> Sheet:
    """Every row of the gate, grouped by case, with its verdict and why."""
    sheet = Sheet(f"Gate: {'PASS' if result.passed else 'FAIL'} against the baseline", GATE_COLUMNS)
    for r in result.rows:
        (b, m) = r.measured
        sheet.add(r.variant, _time(r.baseline_us, r.baseline_bad), samples_cell(b), rule_cell(stop_of(b)),
                  _time(r.median_us, r.run_bad), samples_cell(m), rule_cell(stop_of(m)), _fmt(r.ratio, "{:.2f}x"),
                  r.verdict, r.detail or MISSING, group=r.key)
    sheet.notes = [f"tolerance {result.tolerance:.0%}, and outside both runs' 10th-90th percentile spread",
                   *result.notes]
    return without_empty_columns(sheet, RULE_COLUMNS)


def gate_blocks(result: GateResult, record: RunRecord, baseline: RunRecord) -> list[Block]:
    """The run gated, the baseline it was gated against, and every row."""
    return [header(record), Prose(f"baseline: {header(baseline).text}", f"baseline: {header(baseline).markdown}",
                                  phrased=True),
            gate_sheet(result)]


def sample_count(m: Measurement | None) -> int | None:
    """A CSV's sample count (and ``rule_met``, the rule's outcome): None where there is none."""
    return None if m is None else len(m.samples_us)


def rule_met(m: Measurement | None) -> bool | None:
    stop = stop_of(m)
    return None if stop is None else stop["met"]


def gate_csv(result: GateResult) -> str:
    return csv_text(("stage", "case", "variant", "baseline_us", "baseline_samples", "baseline_rule_met", "median_us",
                     "samples", "rule_met", "ratio", "verdict", "detail"),
                    [(r.key.split()[0], r.key, r.variant, r.baseline_us, sample_count(b), rule_met(b), r.median_us,
                      sample_count(m), rule_met(m), r.ratio, r.verdict, r.detail) for r in result.rows for b, m in [r.measured]])


def _counts(rows: list[GateRow]) -> str:
    found = {v: sum(r.verdict == v for r in rows) for v in VERDICTS}
    return ", ".join(f"{n} {v}" for v, n in found.items() if n)


def _failure(r: GateRow) -> str:
    where = f"{r.verdict}: {r.key}, {r.variant}"
    if r.median_us is not None and r.baseline_us is not None and r.verdict in JUDGED:
        return f"{where}: {r.median_us:.1f} µs vs {r.baseline_us:.1f} µs ({r.ratio - 1:+.0%}), {r.detail}"
    return f"{where}: {r.detail}" if r.detail else where


def gate_verdict(result: GateResult) -> list[str]:
    """``GATE PASS (counts)``, or ``GATE FAIL (counts)`` then one line per failing row, each with its detail."""
    if result.passed:
        return [f"GATE PASS ({_counts(list(result.rows))})"]
    failing = [r for r in result.rows if r.failed]
    return [f"GATE FAIL ({_counts(failing)})", *numbered("GATE FAIL", [_failure(r) for r in failing])]

