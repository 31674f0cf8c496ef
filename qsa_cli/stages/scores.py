"""The scorer stage: every variant on the same inputs, bitwise parity, timing against the read floor.

On the GPU the variants are the kernels (reference, multi = the old decode scorer, halve = the new);
on the CPU backend they are the exact models of their arithmetic (the butterfly order for reference
and multi, the recursive-halving order for halve), so the same command runs and checks everywhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..inputs import ScorerInputs, score_poison
from ..model.scores import first_difference, score_blocks, scores_hash
from .common import Measurer, StageOutcome, bitwise_check, call_case, keys_case

STAGE = "scores"
OLD, NEW = "multi", "halve"
CPU_MODEL = "cpu-model"
MODEL_ORDER = {"reference": "butterfly", "multi": "butterfly", "halve": "halve"}
READ_FLOOR = "read-floor"


def describe_difference(steps: np.ndarray, a: np.ndarray, b: np.ndarray) -> str:
    where = first_difference(a, b, steps)
    if where is None:
        return "an entry past n_bid (which no kernel may write) differs"
    q, blk = where
    bits = lambda x: f"{x[q, blk]!r} (0x{int(x[q:q+1, blk:blk+1].view(np.uint32)[0, 0]):08x})"  # noqa: E731
    return f"query {q} block {blk}: {bits(a)} vs {bits(b)}"


def run_scores(
    inputs: ScorerInputs,
    measurer: Measurer,
    variants: tuple[str, ...] = (OLD, NEW),
    check_model: bool = True,
) -> StageOutcome:
    """Run ``variants`` on ``inputs``, time each, and check them bit for bit against each other and the model."""
    case = call_case(inputs.steps, inputs.capacity, "decode", measurer.l2, **keys_case(inputs))
    out = StageOutcome()
    key_bytes = inputs.key_bytes()
    if measurer.timer is None:
        for v in variants:
            run = lambda v=v: score_blocks(inputs, MODEL_ORDER[v])  # noqa: E731
            out.outputs[v] = run()
            out.add(measurer.measure(STAGE, v, case, run, bytes_read=key_bytes))
    else:
        _run_gpu(inputs, measurer, variants, case, key_bytes, out)

    hashes = {v: scores_hash(out.outputs[v], inputs.steps) for v in variants}
    diff = lambda a, b: describe_difference(inputs.steps, a, b)  # noqa: E731
    if OLD in variants and NEW in variants:
        out.parity.append(bitwise_check(STAGE, case, NEW, OLD, out.outputs, diff, hashes))
    if check_model:
        out.outputs[CPU_MODEL] = score_blocks(inputs, "butterfly")
        model_hash = scores_hash(out.outputs[CPU_MODEL], inputs.steps)
        for v in variants:
            h = {v: hashes[v], CPU_MODEL: model_hash}
            out.parity.append(bitwise_check(STAGE, case, v, CPU_MODEL, out.outputs, diff, h))
    return out


def _run_gpu(
    inputs: ScorerInputs,
    measurer: Measurer,
    variants: tuple[str, ...],
    case: dict[str, Any],
    key_bytes: int,
    out: StageOutcome,
) -> None:
    import cupy

    from ..launch.scores import DeviceScorerInputs, scorer_launcher

    assert measurer.timer is not None
    dev = DeviceScorerInputs.from_host(inputs)
    poison = cupy.asarray(score_poison((inputs.nq, inputs.max_blocks)))
    scores = cupy.empty_like(poison)
    repoison = lambda: cupy.copyto(scores, poison)  # noqa: E731
    for v in variants:
        launch = scorer_launcher(v, dev, scores)
        repoison()
        launch()
        out.outputs[v] = cupy.asnumpy(scores)
        out.add(measurer.measure(STAGE, v, case, launch, bytes_read=key_bytes))
    floor = measurer.timer.read_launcher(dev.pooled, key_bytes)
    out.add(measurer.measure(STAGE, READ_FLOOR, case, floor, bytes_read=key_bytes))
