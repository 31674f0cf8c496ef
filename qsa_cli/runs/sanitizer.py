"""qsa sanitize's run: compute-sanitizer over every case of the chosen variants (qsa_cli/sanitize.py), each
child given the run's kernels folder and engine checkouts."""

from __future__ import annotations

from typing import Any

from ..catalog import STAGES
from ..core.progress import Progress, no_progress
from ..engine.kinds import ENGINE_KINDS
from ..inputs import SCORE_SETS
from ..sanitize import Children, matrix, sanitize
from ..session import Session


def sanitize_variants(s: Session) -> dict[str, tuple[str, ...]]:
    """Stage -> every variant this device runs (the cluster top-k on sm_90 and newer)."""
    return {stage: s.catalog.runs_on(stage, s.compute_capability or 0) for stage in STAGES}


def sanitize_run(s: Session, tools: tuple[str, ...], chosen: tuple[str, ...] | None, known: list[Any],
                 sanitizer: Any, quick: bool = False, jobs: int = 4, progress: Progress = no_progress,
                 children: Children | None = None) -> None:
    """compute-sanitizer over every case of the chosen variants (all this device runs by default) into
    the session's record, each child's rows as it ends, ``jobs`` children at a time (``quick``: the quick
    matrix, a stage's cases sharing a child per tool); ``progress``: each child that ended; ``children``: where
    they are started (sanitize.sanitize)."""
    variants = sanitize_variants(s)
    if chosen is not None:
        variants = {stage: tuple(v for v in names if v in chosen) for stage, names in variants.items()}
    engine = {name: v.engine for stage, names in variants.items() for name in names
              if (v := s.catalog.get(stage, name)).engine is not None}
    # an engine path for decode calls only has no prompt case (its launcher refuses one)
    cases = [c for c in matrix(variants, SCORE_SETS, s.settings.seed, quick=quick)
             if not (c.kind == "prompt" and c.variant in engine and _decode_only(engine[c.variant].kind))]
    s.record_settings(sanitizer=str(sanitizer), tools=list(tools), quick=quick)
    start = len(s.record.sanitizer)

    def kept(rows: list[Any]) -> None:  # the rows so far: what an interrupted run's record keeps
        s.record.sanitizer[start:] = rows

    switched = {name: entry.switches for name, entry in engine.items() if entry.switches}
    sanitize(cases, tools, known, sanitizer, s.catalog.kernel_folder, kept, jobs, s.settings.device_id, progress,
             s.settings.engines, switched, children, s.settings.adapter, grouped=quick)


def _decode_only(kind: str) -> bool:
    """An engine kind the engine takes for decode calls only (an adapter's entry is no kind: it takes both)."""
    return kind in ENGINE_KINDS and ENGINE_KINDS[kind].decode_only
