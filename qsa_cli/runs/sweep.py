"""A YAML sweep's run (qsa sweep, select-bench and topk-parity --config, qsa gate): every case of it into the
session's record, then its thresholds."""

from __future__ import annotations

import functools
from typing import Any

from ..config import SweepCase
from ..core.errors import VariantError
from ..core.progress import Progress, no_progress
from ..inputs import synthetic_scores
from ..record.schema import RunRecord, ThresholdCheck
from ..record.vocabulary import CPU_TIMES, DEFAULT_KEYS, READ_FLOOR, times_judged
from ..session import GPU_TIMER_SETTINGS, Session
from .stages import run_cases, scorer_case, scorer_inputs, scorer_variants, topk_case


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
    run_cases(s, runs, progress)  # each switch setting in one child over all the cases
    if times_judged(s.record.backend):
        check_thresholds(s.record, config.thresholds)
    elif config.thresholds:
        s.note(f"thresholds {CPU_TIMES}; {config.source}'s thresholds are judged on the GPU backend)")


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
