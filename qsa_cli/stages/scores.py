"""The scorer stage: every variant on the same inputs, bitwise parity, timing against the read floor.

On the GPU the variants are the kernels (reference, multi = the old decode scorer, halve = the new);
on the CPU backend they are the exact models of their arithmetic (the butterfly order for reference
and multi, the recursive-halving order for halve), so the same command runs and checks everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import variants as registry
from ..core.errors import EngineRefused
from ..core.integrity import GuardedBuffers
from ..inputs import ScorerInputs, score_poison
from ..model.scores import first_difference, score_blocks, scores_hash
from ..record.vocabulary import CPU_MODEL, READ_FLOOR
from ..record.vocabulary import SCORES as STAGE
from .common import Integrity, Measurer, StageOutcome, array_module, bitwise_check, call_case, keys_case, to_host

SCORER_INPUTS = ("pooled", "dead", "q", "steps")  # ScorerInputs' arrays, in its field order


def place_scorer_inputs(buffers: GuardedBuffers, inputs: ScorerInputs) -> tuple[ScorerInputs, Integrity]:
    """The scorer's inputs copied between guard zones, and the integrity checks that watch them."""
    placed = ScorerInputs(*(buffers.asarray(name, getattr(inputs, name)) for name in SCORER_INPUTS))
    return placed, Integrity(buffers, {name: (getattr(placed, name), getattr(inputs, name)) for name in SCORER_INPUTS})


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
    variants: tuple[str, ...] | None = None,
    check_model: bool = True,
    roles: Mapping[str, str] | None = None,
    same_bits: tuple[tuple[str, str], ...] = (),
) -> StageOutcome:
    """Run ``variants`` on ``inputs``, time each, and check them bit for bit against each other and the model.

    ``roles`` (default: the registry's) name the reference, the baseline and the candidate; ``variants``
    defaults to the baseline and the candidate, which are also checked against each other, and every
    other variant is checked against the reference when it runs. The inputs and the scores sit between
    guard zones; each variant's integrity is checked after its runs (stages/common.py, Integrity). An
    engine variant that refuses the call is noted, not run. ``same_bits``: (subject, against) pairs
    checked against each other too (qsa compare's candidate against its base)."""
    roles = roles or registry.roles(STAGE)
    old, new = roles["baseline"], roles["candidate"]
    variants = variants or (old, new)
    case = call_case(inputs.steps, inputs.capacity, "decode", measurer.l2, **keys_case(inputs))
    out = StageOutcome()
    key_bytes = inputs.key_bytes()
    on_gpu = measurer.timer is not None
    xp = array_module(on_gpu)
    buffers = GuardedBuffers(xp)
    placed, integrity = place_scorer_inputs(buffers, inputs)
    scores = buffers.empty("scores", (inputs.nq, inputs.max_blocks), np.float32)
    poison = xp.asarray(score_poison(scores.shape))
    repoison = lambda: xp.copyto(scores, poison)  # noqa: E731
    diff = lambda a, b: describe_difference(inputs.steps, a, b)  # noqa: E731
    for v in variants:
        try:
            if on_gpu:
                from ..launch.scores import scorer_launcher

                launch = scorer_launcher(v, placed, scores)
            else:
                launch = lambda v=v: np.copyto(scores, score_blocks(placed, registry.get(STAGE, v).model))  # noqa: E731
            repoison()
            launch()
        except EngineRefused as refused:
            out.refused(v, refused)
            continue
        out.outputs[v] = to_host(scores)
        timed = measurer.measure(STAGE, v, case, launch, bytes_read=key_bytes, before_last=repoison)
        out.add(timed)
        out.parity += integrity.checks(STAGE, case, v, out.outputs[v], to_host(scores) if timed else None, diff)
    if on_gpu:
        floor = measurer.timer.read_launcher(placed.pooled, key_bytes)
        out.add(measurer.measure(STAGE, READ_FLOOR, case, floor, bytes_read=key_bytes))

    ran = out.ran(variants)
    hashes = {v: scores_hash(out.outputs[v], inputs.steps) for v in ran}
    reference = roles.get("reference")
    if reference in ran:
        for v in ran:
            if v != reference:
                out.parity.append(bitwise_check(STAGE, case, v, reference, out.outputs, diff, hashes))
    for subject, against in dict.fromkeys(((new, old), *same_bits)):
        if subject in ran and against in ran:
            out.parity.append(bitwise_check(STAGE, case, subject, against, out.outputs, diff, hashes))
    if check_model:
        out.outputs[CPU_MODEL] = score_blocks(inputs, "butterfly")
        model_hash = scores_hash(out.outputs[CPU_MODEL], inputs.steps)
        for v in ran:
            h = {v: hashes[v], CPU_MODEL: model_hash}
            out.parity.append(bitwise_check(STAGE, case, v, CPU_MODEL, out.outputs, diff, h))
    return out
