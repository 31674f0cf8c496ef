"""The one result model every table is rendered from: a row per (stage, case, variant) of a record.

A row holds what the record says of one variant on one case: its timing (median, 10th-90th percentile
spread, sample count and, under the stopping rule, whether it was met; back-to-back batches' time per
launch, throttling, GB/s, ratio to the read floor), the hash of its output, and its bits
against the run's reference, the CPU model and its pair (the candidate against the baseline, a compare
side against the other), or, for a variant declared not bitwise, its measures against them (its
agreement rows and their limits). Variants are rows, never columns, so no table grows wider with the number of
variants. Reads the record only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..record.schema import Agreement, Case, LimitVerdict, Measurement, ParityCheck, RunRecord, StopOutcome, case_key
from ..record.vocabulary import (
    CPU_MODEL,
    CPU_ORACLE,
    GUARD_ZONES,
    HOST_L2,
    INPUTS,
    LAST_CALL,
    OUTPUT_HASH,
    REFERENCE_POINTS,
    SCORES,
    STAGES,
    TOPK,
    WINDOW,
    pair_name,
)

MODELS = (CPU_MODEL, CPU_ORACLE)  # what a stage's outputs are checked against besides variants
INTEGRITY = (GUARD_ZONES, INPUTS)  # a variant's own integrity rows (its last timed call is the third)
REFERENCE_POINT = "reference point"  # the role of the read floor and of a library's top-k
# A sample past this (1000 s for one call) is no kernel's time but a record's corruption or a hand's edit: a
# median of 1e308 µs would print 309 digits and overflow a plot's axis.
MAX_SAMPLE_US = 1e9


# ---- looking things up in a record ----------------------------------------------------------------------


def measurement_index(record: RunRecord) -> dict[tuple[str, str], Measurement]:
    """(case key, variant) -> measurement; a later measurement of the same pair replaces an earlier one."""
    return {(m.key, m.variant): m for m in record.measurements}


def inexact_variant(record: RunRecord, variant: str) -> bool:
    """Whether the run declared ``variant`` not bitwise (a window pair: either of its parts)."""
    inexact = record.settings.get("inexact") or {}
    return any(part in inexact for part in variant.split("+"))


def stage_cases(record: RunRecord, stage: str) -> dict[str, Case]:
    """Case key -> case of every case a stage measured or checked, in the record's order."""
    out: dict[str, Case] = {}
    for row in [*record.measurements, *record.parity, *record.agreements]:
        if row.stage == stage:
            out.setdefault(row.key, row.case)
    return out


def roles_of(record: RunRecord, stage: str) -> dict[str, str]:
    """A stage's variants by role (reference, baseline, candidate) as the run recorded them (a record
    read back from before roles were recorded has the registry's of the time: record/load.py). A window
    pair is named by its scorer and top-k, so the window's roles are the pairs of the scorer's and the
    top-k's variant in the same role."""
    recorded = record.settings.get("roles") or {}
    if stage == WINDOW:
        scorer, topk = recorded.get(STAGES[0], {}), recorded.get(STAGES[1], {})
        return {role: pair_name(name, topk[role]) for role, name in scorer.items() if role in topk}
    return dict(recorded.get(stage, {}))


def dispatch_of(record: RunRecord, kind: str) -> dict[str, Any] | None:
    """The engine's choice for ``kind`` calls as the run recorded it: one summary, or one per kind (a sweep)."""
    d = record.settings.get("dispatch") or {}
    if kind in d:
        return d[kind]
    return d if d.get("kind", kind) == kind and "topk" in d else None


def dispatched_variant(record: RunRecord, stage: str, case: Mapping[str, Any]) -> str | None:
    """The variant the engine runs for ``case``'s call in ``stage`` (a window: its pair), as recorded: a
    decode call takes the scorer its query count has in the recorded ``scores_by_queries`` where there is one."""
    d = dispatch_of(record, case["kind"])
    if d is None:
        return None
    by_queries = d.get("scores_by_queries") or []
    scores = by_queries[case["nq"] - 1] if 1 <= case["nq"] <= len(by_queries) else d["scores"]
    return pair_name(scores, d["topk"]) if stage == WINDOW else {SCORES: scores, TOPK: d["topk"]}.get(stage)


def subject_variant(subject: str) -> str:
    """The variant a check is about: ``V (last timed call)`` is V's."""
    return subject.removesuffix(f" ({LAST_CALL})")


def sample_problem(m: Measurement | None) -> str | None:
    """What makes a measurement's samples unusable (none, NaN or infinite ones, a median not above 0), or
    None: the gate's and ``qsa compare``'s BAD-SAMPLES, and the tables' ``BAD (...)``."""
    if m is None:
        return None
    if not m.samples_us:
        return "samples: none"
    bad = sum(not math.isfinite(x) for x in m.samples_us)
    if bad:
        return f"samples: {bad} of {len(m.samples_us)} NaN or infinite"
    huge = sum(x > MAX_SAMPLE_US for x in m.samples_us)
    if huge:
        return f"samples: {huge} of {len(m.samples_us)} past {MAX_SAMPLE_US:g} µs"
    return f"samples: a median of {m.median_us:g} µs" if m.median_us <= 0 else None


# ---- labels ---------------------------------------------------------------------------------------------------


def context_label(ctx: int) -> str:
    """The seed's short form: thousands rounded down (9000 -> 9K, 131072 -> 131K), millions to 0.1M."""
    if ctx < 1000:
        return str(ctx)
    if ctx < 1_000_000:
        return f"{ctx // 1000}K"
    return f"{ctx // 100_000 / 10:g}M"


def label_is_exact(label: str, ctx: int) -> bool:
    scale = {"K": 1000, "M": 1_000_000}.get(label[-1], 1)
    return float(label.rstrip("KM")) * scale == ctx


def context_cell(ctx: int) -> str:
    """A context for a table: the short label, with the exact number where the label is not it."""
    label = context_label(ctx)
    return label if label_is_exact(label, ctx) else f"{label} ({ctx})"


def case_label(case: Case | dict[str, Any]) -> str:
    """One line naming a case for people: ``131K (131072), 4 queries, capacity 524288, prompt, equal,
    L2 dirty`` (a scorer case: ``..., adversarial keys, ...``; the CPU backend's, which has no L2, no state)."""
    parts = [context_cell(case["ctx"]), f"{case['nq']} quer{'y' if case['nq'] == 1 else 'ies'}",
             f"capacity {case['capacity']}"]
    parts += [str(case[k]) for k in ("kind", "score_set") if case.get(k) not in (None, "decode")]
    parts += [f"{case['keys']} keys"] if "keys" in case else []
    parts += [f"L2 {case['l2']}"] if case.get("l2", HOST_L2) != HOST_L2 else []
    return ", ".join(parts)


# ---- the rows -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResultRow:
    """One variant (or reference point) on one case of one stage, as the record has it."""

    stage: str
    case: Case
    variant: str
    role: str  # reference, baseline, candidate, variant, or a reference point (REFERENCE_POINT)
    dispatched: bool  # what the engine runs for this kind of call on the run's card
    measurement: Measurement | None  # None: checked, not timed
    floor: Measurement | None  # the case's read floor (the scorer's), for the ratio
    shown_hash: str | None  # the hash its checks compared, else the sha256 of its output (its inputs row)
    checks: tuple[ParityCheck, ...]  # every check of its output, its integrity rows included
    reference: str | None  # the run's reference variant of the stage: what ``vs_reference`` is against
    exact: bool = True  # False: declared not bitwise (a window pair: a part of it), judged by its measures
    agreements: tuple[Agreement, ...] = ()  # its output measured against others (an inexact variant's)

    @property
    def key(self) -> str:
        return case_key(self.stage, self.case)

    @property
    def problem(self) -> str | None:
        return sample_problem(self.measurement)

    @property
    def timed(self) -> bool:
        """Timed, with usable samples."""
        return self.measurement is not None and self.problem is None

    @property
    def median_us(self) -> float | None:
        return self.measurement.median_us if self.timed else None

    @property
    def spread_us(self) -> tuple[float, float] | None:
        return self.measurement.spread_us if self.timed else None

    @property
    def samples(self) -> int:
        return len(self.measurement.samples_us) if self.measurement is not None else 0

    @property
    def stop(self) -> StopOutcome | None:
        """How the stopping rule ended its samples (None: ITERS was a count)."""
        return self.measurement.stop if self.measurement is not None else None

    @property
    def batch_us(self) -> float | None:
        """The median of its batches' time per back-to-back launch (None: no batches, or unusable ones)."""
        batch = self.measurement.batch if self.measurement is not None else None
        if batch is None or not batch["means_us"] or not all(math.isfinite(x) for x in batch["means_us"]):
            return None
        return statistics.median(batch["means_us"])

    @property
    def throttled(self) -> bool:
        return self.measurement is not None and self.measurement.throttled

    @property
    def gbps(self) -> float | None:
        return self.measurement.gbps if self.timed else None

    @property
    def floor_ratio(self) -> float | None:
        """The median over the read floor's, for a variant of a stage that has one."""
        if not self.timed or self.role == REFERENCE_POINT or self.floor is None or sample_problem(self.floor):
            return None
        return self.measurement.median_us / self.floor.median_us

    def _against(self, *names: str) -> ParityCheck | None:
        return next((p for p in self.checks if p.subject == self.variant and p.against in names), None)

    @property
    def vs_reference(self) -> ParityCheck | None:
        return self._against(self.reference) if self.reference else None

    @property
    def vs_model(self) -> ParityCheck | None:
        return self._against(*MODELS)

    @property
    def vs_pair(self) -> ParityCheck | None:
        """Its check against another variant than the reference: the candidate's against the baseline, a
        compare side's against the other side's."""
        return next((p for p in self.checks if p.subject == self.variant
                     and p.against not in (self.reference, *MODELS, *INTEGRITY)), None)

    def _measured(self, *names: str) -> Agreement | None:
        return next((a for a in self.agreements if a.subject == self.variant and a.against in names), None)

    @property
    def measured_reference(self) -> Agreement | None:
        return self._measured(self.reference) if self.reference else None

    @property
    def measured_model(self) -> Agreement | None:
        return self._measured(*MODELS)

    @property
    def measured_pair(self) -> Agreement | None:
        """Its measures against another variant than the reference (the pair's other side)."""
        return next((a for a in self.agreements if a.subject == self.variant
                     and a.against not in (self.reference, *MODELS)), None)

    @property
    def measured(self) -> Agreement | None:
        """Its measures against the reference, else the CPU model: what a table's one summary of them shows."""
        return self.measured_reference or self.measured_model

    @property
    def failed(self) -> list[ParityCheck]:
        return [p for p in self.checks if not p.equal]

    @property
    def broken_limits(self) -> list[tuple[Agreement, LimitVerdict]]:
        return [(a, v) for a in self.agreements for v in a.limits if not v["passed"]]

    @property
    def verdict(self) -> str | None:
        """PASS when every check of its output and every limit on its measures holds, FAIL when one does not,
        None when none was made."""
        if not self.checks and not self.agreements:
            return None
        return "FAIL" if self.failed or self.broken_limits else "PASS"


def _shown_hash(variant: str, checks: list[ParityCheck]) -> str | None:
    """The hash its checks compared (the scorer's: over exactly each query's blocks 0..n_bid, what the
    README's "hash of its scores" means), else the sha256 of its whole output (its inputs row)."""
    compared = next((p.hashes[variant] for p in checks if variant in p.hashes), None)
    if compared is not None:
        return compared
    return next((p.hashes[OUTPUT_HASH] for p in checks
                 if p.subject == variant and p.against == INPUTS and OUTPUT_HASH in p.hashes), None)


def result_rows(record: RunRecord, stage: str | None = None) -> list[ResultRow]:
    """Every (case, variant) of ``stage`` (every stage, in the tables' order, when None) that the record
    timed or checked: per case its variants in the order the run first met them, reference points last."""
    index = measurement_index(record)
    rows: list[ResultRow] = []
    for st in STAGES if stage is None else (stage,):
        roles = roles_of(record, st)
        by_role = {name: role for role, name in roles.items()}
        checks_of: dict[str, list[ParityCheck]] = {}
        measured_of: dict[str, list[Agreement]] = {}
        names: dict[str, dict[str, None]] = {}
        for m in record.measurements:
            if m.stage == st:
                names.setdefault(m.key, {})[m.variant] = None
        for p in record.parity:
            if p.stage == st:
                checks_of.setdefault(p.key, []).append(p)
                names.setdefault(p.key, {})[subject_variant(p.subject)] = None
        for a in record.agreements:
            if a.stage == st:
                measured_of.setdefault(a.key, []).append(a)
                names.setdefault(a.key, {})[a.subject] = None
        for key, case in stage_cases(record, st).items():
            checks = checks_of.get(key, [])
            dispatched = dispatched_variant(record, st, case)
            ordered = sorted(names.get(key, {}), key=lambda v: v in REFERENCE_POINTS)
            for variant in ordered:
                mine = tuple(p for p in checks if subject_variant(p.subject) == variant)
                role = REFERENCE_POINT if variant in REFERENCE_POINTS else by_role.get(variant, "variant")
                rows.append(ResultRow(st, case, variant, role, variant == dispatched, index.get((key, variant)),
                                      index.get((key, REFERENCE_POINTS[0])), _shown_hash(variant, checks), mine,
                                      roles.get("reference"), not inexact_variant(record, variant),
                                      tuple(a for a in measured_of.get(key, []) if a.subject == variant)))
    return rows


@dataclass(frozen=True)
class BeforeAfter:
    """A case's before and after: the run's baseline and candidate (a window: their pairs, or the
    dispatched pair where the candidate's was not timed), and the speedup of one over the other."""

    stage: str
    case: Case
    baseline: ResultRow
    candidate: ResultRow

    @property
    def speedup(self) -> float | None:
        if self.baseline.median_us is None or self.candidate.median_us is None:
            return None
        return self.baseline.median_us / self.candidate.median_us


def before_after(rows: list[ResultRow]) -> list[BeforeAfter]:
    """Per (stage, case), the baseline row and the candidate row, where both were timed or checked."""
    by_case: dict[str, dict[str, ResultRow]] = {}
    for r in rows:
        by_case.setdefault(r.key, {})[r.role] = r
        if r.dispatched and r.stage == WINDOW:
            by_case[r.key].setdefault("dispatched", r)
    out = []
    for found in by_case.values():
        before, after = found.get("baseline"), found.get("candidate")
        if before is not None and before.stage == WINDOW and (after is None or after.measurement is None):
            after = found.get("dispatched", after)
        if before is not None and after is not None:
            out.append(BeforeAfter(before.stage, before.case, before, after))
    return out
