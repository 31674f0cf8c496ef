"""qsa compare's run: both sides (in the session's catalog since it opened, session.Settings.sides) on the
same inputs, every pair's candidate checked bit for bit against its base."""

from __future__ import annotations

from typing import Any

from ..core.geometry import Call
from ..session import Session
from .stages import run_scorer_case, scorer_inputs, topk_parity, topk_score_sets, window_bench
from .sweep import sweep


def compare_run(s: Session, call: Call | None, config: Any = None, tolerance: float = 0.05) -> None:
    """Both sides on the same inputs into the session's record: the scorer on the call, the top-k on its
    four score sets (a decode call), and the window's pairs (or every case of ``config``); every pair's
    candidate checked bit for bit against its base, both against qsa's reference and the CPU model."""
    compared = s.compared
    s.record_settings(compare={
        "base": compared.base, "candidate": compared.candidate, "tolerance": tolerance,
        "pairs": [{"stage": stage, "base": b, "candidate": c} for stage, matched in compared.pairs.items()
                  for b, c in matched]})
    if config is not None:
        sweep(s, config)
        if s.record.thresholds:  # a sweep's thresholds judge qsa's baseline and candidate, not two sides
            s.record.thresholds = []
            s.note(f"{config.source}'s thresholds are not checked by qsa compare: its verdicts are the pairs' "
                   "bits and FAST / SLOW / SAME")
        return
    if compared.pairs["scores"]:
        run_scorer_case(s, scorer_inputs(call, s.settings.seed))
    if compared.pairs["topk"]:
        topk_parity(s, topk_score_sets(call, s.settings.seed), 0)
    if compared.pairs["window"]:
        window_bench(s, call)
