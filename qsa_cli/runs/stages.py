"""The stages' runs: select-bench, topk-parity and window-bench, and the cases every other run is made of
(a scorer case, a top-k case), each variant under the engine's switches in a child process of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.geometry import Call, check_queries
from ..core.progress import Progress, no_progress
from ..inputs import SCORE_SETS, ScorerInputs, TopkInputs, synthetic_scorer_inputs, synthetic_scores
from ..model.topk import topk_ids
from ..record.vocabulary import DEFAULT_KEYS
from ..session import Session
from ..stages import scores as scores_stage
from ..stages import topk as topk_stage
from ..stages import window as window_stage
from ..stages.common import StageOutcome
from ..timing import Iters
from ..variant_child import run_switched, switches_of


def scorer_inputs(call: Call, seed: int, keys: str = DEFAULT_KEYS) -> ScorerInputs:
    """A decode call's synthetic inputs of a ``keys`` kind (the scorers' decode kernels take 1-8 queries)."""
    check_queries(call.nq, prompt=False)
    return synthetic_scorer_inputs(call, seed, keys)


def topk_score_sets(call: Call, seed: int) -> list[TopkInputs]:
    return [synthetic_scores(call, name, seed) for name in SCORE_SETS]


def topk_score_set(call: Call, score_set: str, seed: int, oracle: bool) -> tuple[TopkInputs, np.ndarray | None]:
    """One score set of ``call`` and (``oracle``) its CPU oracle's ids: a worker process's part of a top-k
    case (runs/pool.py)."""
    inputs = synthetic_scores(call, score_set, seed)
    return inputs, topk_ids(inputs, "oracle") if oracle else None


def scorer_variants(s: Session, queries: int) -> tuple[str, ...]:
    """What a scorer case of ``queries`` queries runs: the baseline and the candidate, the scorer the engine
    dispatches for a decode call of that many, and every variant from elsewhere (an engine checkout's, a
    compare side's) with qsa's reference to check it against; ``--variants`` picks among all."""
    if s.picked is not None:
        return s.chosen(s.catalog.names("scores"))
    roles = s.roles["scores"]
    dispatched = s.dispatch("decode").scorer_for(queries)
    others = tuple(v.name for v in s.catalog.stage("scores") if not v.qsa_own)
    return tuple(dict.fromkeys((*((roles["reference"],) if others else ()), roles["baseline"], roles["candidate"],
                                dispatched, *others)))


def _with_switched(s: Session, stage: str, variants: tuple[str, ...], inputs: Any, iters: Iters,
                   run_here: Callable[[tuple[str, ...], Progress], StageOutcome], active_blocks: int = 0,
                   progress: Progress = no_progress) -> StageOutcome:
    """``run_here`` on the variants that run in this process; each switch setting's variants (an engine's
    ``NAME.KIND[K=V]``) in a child of its own on the same inputs (qsa_cli/variant_child.py). ``progress``:
    each variant run here, then each child, then the end."""
    groups: dict[tuple[tuple[str, str], ...], tuple[str, ...]] = {}
    for name in variants:
        key = switches_of(s.catalog, stage, name)
        groups[key] = (*groups.get(key, ()), name)
    here = groups.pop((), ())
    total = len(here) + len(groups)
    out = s.take(run_here(here, lambda done, _, message: progress(done, total, message))) if here or not groups \
        else StageOutcome()
    for i, (switches, names) in enumerate(groups.items()):
        progress(len(here) + i, total, f"{stage} {', '.join(names)} (a child process)")
        job = {"roles": s.roles["scores" if stage == "window" else stage], "check_model": s.settings.check_model,
               "active_blocks": active_blocks, "device_id": s.settings.device_id,
               "pci_bus_id": s.record.device["pci_bus_id"], "kernels": str(s.catalog.kernel_folder)}
        out.extend(s.take(run_switched(s.catalog, stage, switches, names, inputs, s.measurer(iters), job)))
    progress(total, total, "done")
    return out


def run_scorer_case(s: Session, inputs: ScorerInputs, iters: Iters, variants: tuple[str, ...] | None = None,
                    progress: Progress = no_progress) -> StageOutcome:
    def here(names: tuple[str, ...], told: Progress) -> StageOutcome:
        return scores_stage.run_scores(inputs, s.measurer(iters), s.variants("scores", names), s.roles["scores"],
                                       s.launcher, s.settings.check_model,
                                       s.compared_bits("scores"), told)

    return _with_switched(s, "scores", variants or scorer_variants(s, inputs.nq), inputs, iters, here, progress=progress)


def select_bench(s: Session, inputs: ScorerInputs, iters: Iters, progress: Progress = no_progress) -> StageOutcome:
    """The seed's decode-call scorer benchmark: the baseline and the candidate (and any engine checkout's
    scorers, and the scorer the engine dispatches for the call) on the same inputs, hashes, times;
    ``progress``: each variant."""
    s.record_settings(dispatch=s.dispatch_summary("decode", inputs.max_blocks))
    return run_scorer_case(s, inputs, iters, progress=progress)


def run_topk_case(s: Session, inputs: TopkInputs, iters: Iters, variants: tuple[str, ...], active_blocks: int,
                  check_model: bool | None = None, oracle: np.ndarray | None = None) -> StageOutcome:
    """``oracle``: the CPU oracle's ids of ``inputs``, made beforehand (else made as the check needs them)."""
    def here(names: tuple[str, ...], told: Progress) -> StageOutcome:
        return topk_stage.run_topk(inputs, s.measurer(iters), s.variants("topk", names), s.roles["topk"], s.launcher,
                                   active_blocks, s.settings.check_model if check_model is None else check_model,
                                   argpartition=s.on_gpu and iters != 0, same_bits=s.compared_bits("topk"),
                                   oracle=oracle)

    return _with_switched(s, "topk", variants, inputs, iters, here, active_blocks)


def topk_parity(s: Session, inputs: list[TopkInputs], iters: Iters, active_blocks: int,
                progress: Progress = no_progress, oracles: list[np.ndarray | None] | None = None) -> StageOutcome:
    """Every variant on every score set; times, identical-id counts, and the dispatched variant;
    ``progress``: each score set; ``oracles``: each set's CPU oracle ids, made beforehand."""
    variants = s.here("topk", inputs[0].max_blocks, active_blocks)
    kind = "prompt" if active_blocks else "decode"
    s.record_settings(dispatch=s.dispatch_summary(kind, inputs[0].max_blocks))
    out = StageOutcome()
    for i, inp in enumerate(inputs):  # each score set's rows recorded as it ends (an interrupted run keeps them)
        progress(i, len(inputs), f"topk {inp.score_set}")
        out.extend(run_topk_case(s, inp, iters, variants, active_blocks, oracle=oracles[i] if oracles else None),
                   prefix=f"{inp.score_set}.")
    progress(len(inputs), len(inputs), "done")
    return out


def window_bench(s: Session, call: Call, iters: Iters, keys: str = DEFAULT_KEYS,
                 progress: Progress = no_progress) -> StageOutcome:
    """Each kernel pair this device runs, captured as one CUDA graph (scores then top-k), replays timed, on
    synthetic inputs of a ``keys`` kind: the catalog's pairs and the one the engine dispatches here, those
    ``--variants`` picks; ``progress``: each pair."""
    available = s.here("topk", call.max_blocks)
    choice = s.dispatch("decode", call.max_blocks)
    summary = choice.summary("decode")
    dispatched = (choice.scorer_for(call.nq), choice.topk)  # what the engine replays on this card
    chosen = tuple(dict.fromkeys(p for p in (*s.catalog.window_pairs(), dispatched) if p[1] in available
                                 and (s.picked is None or p[0] in s.picked)))
    s.record_settings(dispatch=summary)
    inputs = scorer_inputs(call, s.settings.seed, keys)
    named = {p.name: p for p in (window_stage.WindowPair(s.catalog.get("scores", scorer), s.catalog.get("topk", topk))
                                 for scorer, topk in chosen)}

    def here(names: tuple[str, ...], told: Progress) -> StageOutcome:
        return window_stage.run_window(inputs, s.measurer(iters), tuple(named[n] for n in names), s.launcher,
                                       s.compared_bits("window"), told)

    return _with_switched(s, "window", tuple(named), inputs, iters, here, progress=progress)
