"""What a worker process (runs/pool.py) makes for the kernels' process, each case once: a top-k score set or a
scorer case, with its CPU oracle's or model's output and its inputs' digests (inputs.TopkInputs.digests), so
that the kernels' process hashes nothing; and, for the selftests' CPU model rows, a case run through every
variant's CPU model (``ModelledCase``). The workers' server imports this module before it forks the workers
(pool.PRELOADED)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..catalog import Variant
from ..core.geometry import Call
from ..inputs import ScorerInputs, TopkInputs, synthetic_scorer_inputs, synthetic_scores
from ..model import scores as scores_model
from ..model.topk import topk_ids
from ..stages import scores as scores_stage
from ..stages import topk as topk_stage
from ..stages.common import Measurer, StageOutcome


def topk_score_set(call: Call, score_set: str, seed: int, oracle: bool) -> tuple[TopkInputs, np.ndarray | None]:
    """One score set of ``call``, hashed, and (``oracle``) its CPU oracle's ids."""
    inputs = synthetic_scores(call, score_set, seed)
    inputs.digests  # noqa: B018 (made here, in the worker, and pickled with the inputs)
    return inputs, topk_ids(inputs, "oracle") if oracle else None


def scorer_case_model(call: Call, seed: int, keys: str) -> tuple[ScorerInputs, np.ndarray]:
    """A scorer case's inputs, hashed, and the butterfly's CPU model of them, for the kernels to equal."""
    inputs = synthetic_scorer_inputs(call, seed, keys)
    inputs.digests  # noqa: B018 (made here, in the worker, and pickled with the inputs)
    return inputs, scores_model.score_blocks(inputs, "butterfly")


@dataclass
class ModelledCase:
    """A case made by a worker: its CPU-backend outcome (the rows of every variant's CPU model against each
    other and the model or oracle; without its outputs, which no row reads and pickling would copy back) and,
    for the kernels' row, its inputs with the model's or oracle's output (None without a device)."""

    outcome: StageOutcome
    for_kernels: tuple[Any, np.ndarray] | None


def _modelled(outcome: StageOutcome, inputs: Any, model: np.ndarray | None, for_kernels: bool) -> ModelledCase:
    outcome.outputs.clear()
    return ModelledCase(outcome, (inputs, model) if for_kernels else None)


def scorer_models_case(call: Call, seed: int, keys: str, variants: tuple[Variant, ...], roles: dict[str, str],
                       for_kernels: bool) -> ModelledCase:
    """A scorer case on the CPU backend (every variant's CPU model against each other and the butterfly's, each
    order made apart from the others, the lane partials they share once), and its inputs and butterfly model for
    the kernels to equal."""
    inputs = synthetic_scorer_inputs(call, seed, keys)
    # the model: the butterfly's
    made = scores_model.scores_in_orders(inputs, ("butterfly", *(v.model for v in variants)))
    return _modelled(scores_stage.run_scores(inputs, Measurer(0), variants, roles, None, model=made["butterfly"],
                                             made=made), inputs, made["butterfly"], for_kernels)


def topk_models_case(call: Call, score_set: str, seed: int, variants: tuple[Variant, ...], roles: dict[str, str],
                     for_kernels: bool, check_model: bool = True) -> ModelledCase:
    """A top-k score set on the CPU backend (every variant's CPU model against each other and, with
    ``check_model``, the oracle), and the set and its oracle's ids for the kernels to equal."""
    inputs = synthetic_scores(call, score_set, seed)
    oracle = topk_ids(inputs, "oracle") if check_model else None
    return _modelled(topk_stage.run_topk(inputs, Measurer(0), variants, roles, None, call.active_blocks,
                                         check_model=check_model, oracle=oracle), inputs, oracle, for_kernels)
