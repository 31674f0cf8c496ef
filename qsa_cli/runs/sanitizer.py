"""qsa sanitize's run: compute-sanitizer over every case of the chosen variants (qsa_cli/sanitize.py), each
child given the run's kernels folder and engine checkouts."""

from __future__ import annotations

from typing import Any

from ..catalog import STAGES
from ..core.progress import Progress, no_progress
from ..inputs import SCORE_SETS
from ..sanitize import matrix, sanitize
from ..session import Session


def sanitize_variants(s: Session) -> dict[str, tuple[str, ...]]:
    """Stage -> every variant this device runs (the cluster top-k on sm_90 and newer)."""
    return {stage: s.catalog.runs_on(stage, s.compute_capability or 0) for stage in STAGES}


def sanitize_run(s: Session, tools: tuple[str, ...], chosen: tuple[str, ...] | None, known: list[Any],
                 sanitizer: Any, quick: bool = False, jobs: int = 4, progress: Progress = no_progress) -> None:
    """compute-sanitizer over every case of the chosen variants (all this device runs by default) into
    the session's record, each child's rows as it ends; ``progress``: each child that ended."""
    variants = sanitize_variants(s)
    if chosen is not None:
        variants = {stage: tuple(v for v in names if v in chosen) for stage, names in variants.items()}
    cases = matrix(variants, SCORE_SETS, s.settings.seed, quick=quick)
    s.record_settings(sanitizer=str(sanitizer), tools=list(tools), quick=quick)
    start = len(s.record.sanitizer)

    def kept(rows: list[Any]) -> None:  # the rows so far: what an interrupted run's record keeps
        s.record.sanitizer[start:] = rows

    sanitize(cases, tools, known, sanitizer, s.catalog.kernel_folder, kept, jobs, s.settings.device_id, progress,
             s.settings.engines, s.settings.adapter)
