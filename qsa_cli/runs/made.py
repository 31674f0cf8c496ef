"""What a worker process (runs/pool.py) makes for the kernels' process: a top-k score set or a scorer case,
with its CPU oracle's or model's output and its inputs' digests (inputs.TopkInputs.digests), so that the
kernels' process hashes nothing. The workers' server imports this module, and runs/selftest.py (the CPU
models' tasks), before it forks the workers (pool.PRELOADED)."""

from __future__ import annotations

import numpy as np

from ..core.geometry import Call
from ..inputs import ScorerInputs, TopkInputs, synthetic_scorer_inputs, synthetic_scores
from ..model.scores import score_blocks
from ..model.topk import topk_ids


def topk_score_set(call: Call, score_set: str, seed: int, oracle: bool) -> tuple[TopkInputs, np.ndarray | None]:
    """One score set of ``call``, hashed, and (``oracle``) its CPU oracle's ids."""
    inputs = synthetic_scores(call, score_set, seed)
    inputs.digests  # noqa: B018 (made here, in the worker, and pickled with the inputs)
    return inputs, topk_ids(inputs, "oracle") if oracle else None


def scorer_case_model(call: Call, seed: int, keys: str) -> tuple[ScorerInputs, np.ndarray]:
    """A scorer case's inputs, hashed, and the butterfly's CPU model of them, for the kernels to equal."""
    inputs = synthetic_scorer_inputs(call, seed, keys)
    inputs.digests  # noqa: B018 (made here, in the worker, and pickled with the inputs)
    return inputs, score_blocks(inputs, "butterfly")
