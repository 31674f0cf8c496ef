"""A YAML sweep's run (qsa sweep, select-bench and topk-parity --config, qsa gate): every case of it into the
session's record, then its thresholds."""

from __future__ import annotations

import functools
from typing import Any

from ..config import SweepCase
from ..core.errors import VariantError
from ..core.memory import CaseSize
from ..core.progress import Progress, no_progress
from ..inputs import synthetic_scores
from ..record.assembly import start_of
from ..record.schema import Measurement, RunRecord, ThresholdCheck, case_key
from ..record.vocabulary import CPU_TIMES, DEFAULT_KEYS, READ_FLOOR, times_judged
from ..session import GPU_TIMER_SETTINGS, Session
from .rounds import taken_back
from .stages import Case, run_cases, scorer_case, scorer_inputs, scorer_variants, topk_case


def sweep(s: Session, config: Any, stage: str | None = None, progress: Progress = no_progress) -> None:
    """Run every case of a sweep (only ``stage``'s when given) into the session's record, then its thresholds;
    ``progress``: each case, then each child of switched variants."""
    s.record_settings(config=config.source, iterations=config.iterations)
    not_applied = [name for name in GPU_TIMER_SETTINGS if name in config.given] if not s.on_gpu else []
    if not_applied:
        s.note(f"not applied: {config.source}'s " + " and ".join(f"{n} {getattr(config, n)}" for n in not_applied)
               + " (" + "; ".join(GPU_TIMER_SETTINGS[n] for n in not_applied) + ")")
    for named_stage, named in config.variants.items():
        unknown = [v for v in named if v not in s.catalog.names(named_stage)]
        if unknown:
            raise VariantError(f"{config.source}: {named_stage} variant {unknown[0]!r} does not run here (its engine "
                               "checkout lacks it, or this card does not run it)")
    cases: list[SweepCase] = config.cases(stage)
    largest: dict[str, int] = {}  # per call kind, the largest call: what the dispatch summary is for
    for c in cases:
        largest[c.kind] = max(largest.get(c.kind, 0), c.call.max_blocks)
    s.record_settings(dispatch={k: s.dispatch_summary(k, largest[k]) for k in sorted(largest)})
    run_cases(s, _case_runs(s, config, cases), progress)  # each switch setting in one child over all the cases
    if times_judged(s.record.backend):
        check_thresholds(s.record, config.thresholds)
    elif config.thresholds:
        s.note(f"thresholds {CPU_TIMES}; {config.source}'s thresholds are judged on the GPU backend)")


def _case_runs(s: Session, config: Any, cases: list[SweepCase]) -> list[Case]:
    """The sweep's ``cases`` as the runs' cases: each one's variants here and the inputs it makes."""
    runs = []
    for case in cases:
        shown = case.score_set or (case.keys if case.keys != DEFAULT_KEYS else "")
        label = f"{case.stage} ctx={case.ctx} q={case.nq} cap={case.capacity} {case.kind}{' ' + shown if shown else ''}"
        call = case.call
        if case.stage == "scores":  # each case's inputs made as its turn comes
            variants = s.chosen(config.variants_for("scores", s.catalog)) or scorer_variants(s, call.nq)
            runs.append(scorer_case(s, functools.partial(scorer_inputs, call, config.seed, case.keys), variants,
                                    label))
        else:
            available = s.here("topk", call.max_blocks, call.active_blocks)
            variants = tuple(v for v in config.variants_for("topk", s.catalog) if v in available)
            made = functools.partial(synthetic_scores, call, case.score_set or "continuous", config.seed)
            runs.append(topk_case(s, made, variants, call.active_blocks, label=label))
    return runs


def sweep_sizes(config: Any, stage: str | None = None) -> tuple[CaseSize, ...]:
    """Every case of the sweep (only ``stage``'s when given) by size, each made as its turn comes: what the run's
    memory is weighed by before it starts (session.Settings.sizes)."""
    return tuple(CaseSize.of(case.stage, case.call) for case in config.cases(stage))


def sweep_case_key(case: SweepCase) -> str:
    """The record's key of a sweep case's rows (``case_key`` of the case ``stages.common.call_case`` names: the
    top-k's score set, the scorer's keys where they are not the synthetic ones) less its L2 state, which is the
    run's (its timer's, or the host's on the CPU backend), the same for every case."""
    extra = ({"score_set": case.score_set or "continuous"} if case.stage == "topk"
             else {} if case.keys == DEFAULT_KEYS else {"keys": case.keys})
    return case_key(case.stage, {"ctx": case.ctx, "nq": case.nq, "capacity": case.capacity, "kind": case.kind,
                                 **extra})  # type: ignore[typeddict-item]


def remeasure(s: Session, config: Any, keys: set[str], progress: Progress = no_progress) -> list[Measurement]:
    """The sweep's cases holding a row of ``keys`` (record keys) run again in this session, after the sweep (qsa
    gate --confirm): their measurements, taken back out of the record's rows so that the sweep's stay the ones
    the record's tables show; their checks stay in the record only where one fails (rounds.taken_back)."""
    wanted = {key.rsplit(" l2=", 1)[0] for key in keys}
    cases = [c for c in config.cases() if sweep_case_key(c) in wanted]
    unknown = sorted(wanted - {sweep_case_key(c) for c in cases})
    if unknown:  # sweep_case_key no longer names a case as its stage does: qsa's own error, never the user's
        raise RuntimeError(f"{config.source}: no case of the sweep holds {unknown[0]!r} to measure again")
    start = start_of(s.record)
    run_cases(s, _case_runs(s, config, cases), progress)
    return taken_back(s.record, start)


def check_thresholds(record: RunRecord, thresholds: Any) -> None:
    """Add a ThresholdCheck per (case, threshold) the record has the medians for (the record's roles say which
    variants are the baseline and the candidate)."""
    roles = record.settings["roles"]
    olds = {stage: r["baseline"] for stage, r in roles.items()}
    news = {stage: r["candidate"] for stage, r in roles.items()}
    medians: dict[tuple[str, str], float] = {(m.key, m.variant): m.median_us for m in record.measurements}
    for m in record.measurements:
        limits = thresholds.get(m.stage)
        if limits is None or m.variant != news.get(m.stage):
            continue
        old = medians.get((m.key, olds[m.stage]))
        floor = medians.get((m.key, READ_FLOOR))
        if limits.min_speedup is not None and old is not None:
            value = old / m.median_us
            record.thresholds.append(ThresholdCheck(m.stage, m.case, "min_speedup", value, limits.min_speedup,
                                                    value >= limits.min_speedup))
        if limits.max_floor_ratio is not None and floor is not None:
            value = m.median_us / floor
            record.thresholds.append(ThresholdCheck(m.stage, m.case, "max_floor_ratio", value,
                                                    limits.max_floor_ratio, value <= limits.max_floor_ratio))
