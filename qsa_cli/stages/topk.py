"""The top-k stage: every variant's ids on the same scores, bitwise parity, timing.

On the GPU the variants are the kernels (reference, wide = the old decode top-k, split = the new,
cluster on sm_90+); on the CPU backend they are the step-by-step models of the same algorithms.
``cupy.argpartition`` over the same block scores is timed beside them as a reference point only:
it neither weighs cells nor breaks ties by index, so it takes no part in parity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import variants as registry
from ..core.errors import EngineRefused
from ..core.geometry import BLOCK_CELLS, SELECT_CAP, STEP_WIDTH, blocks_read
from ..core.integrity import GuardedBuffers
from ..inputs import TopkInputs, id_poison
from ..model.topk import first_difference, topk_ids
from ..record.vocabulary import ARGPARTITION, CPU_ORACLE
from ..record.vocabulary import TOPK as STAGE
from .common import Integrity, Measurer, StageOutcome, array_module, bitwise_check, call_case, to_host


def describe_difference(steps: np.ndarray, a: np.ndarray, b: np.ndarray) -> str:
    where = first_difference(a, b, steps)
    if where is None:
        return "an entry past the query's width (which no kernel may write) differs"
    q, j = where
    return f"query {q} position {j}: id {int(a[q, j])} vs {int(b[q, j])}"


def run_topk(
    inputs: TopkInputs,
    measurer: Measurer,
    variants: tuple[str, ...],
    active_blocks: int = 0,
    check_model: bool = True,
    argpartition: bool = False,
    roles: Mapping[str, str] | None = None,
    same_bits: tuple[tuple[str, str], ...] = (),
) -> StageOutcome:
    """Run ``variants`` on ``inputs`` (a decode call when ``active_blocks`` is 0, else a prompt call).

    ``roles`` (default: the registry's) name the reference every variant is checked against and the
    baseline and candidate checked against each other. The inputs, the ids and every scratch array sit
    between guard zones; each variant's integrity is checked after its runs (stages/common.py,
    Integrity). An engine variant that refuses the call is noted, not run. ``same_bits``: (subject,
    against) pairs checked against each other too (qsa compare's candidate against its base)."""
    case = call_case(inputs.steps, inputs.capacity, "prompt" if active_blocks else "decode", measurer.l2,
                     score_set=inputs.score_set)
    out = StageOutcome()
    on_gpu = measurer.timer is not None
    xp = array_module(on_gpu)
    buffers = GuardedBuffers(xp)
    placed = TopkInputs(buffers.asarray("scores", inputs.scores), buffers.asarray("steps", inputs.steps),
                        inputs.score_set)
    ids = buffers.empty("ids", (inputs.nq, SELECT_CAP), np.int32)
    poison = xp.asarray(id_poison(ids.shape))
    repoison = lambda: xp.copyto(ids, poison)  # noqa: E731
    integrity = Integrity(buffers, {"scores": (placed.scores, inputs.scores), "steps": (placed.steps, inputs.steps)})
    diff = lambda a, b: describe_difference(inputs.steps, a, b)  # noqa: E731
    for v in variants:
        try:
            if on_gpu:
                from ..launch.topk import topk_launcher

                launch = topk_launcher(v, placed.scores, placed.steps, ids, active_blocks=active_blocks,
                                       scratch=buffers)
            else:
                launch = lambda v=v: np.copyto(ids, topk_ids(placed, registry.get(STAGE, v).model, active_blocks))  # noqa: E731
            repoison()
            launch()
        except EngineRefused as refused:
            out.refused(v, refused)
            continue
        out.outputs[v] = to_host(ids)
        timed = measurer.measure(STAGE, v, case, launch, before_last=repoison)
        out.add(timed)
        out.parity += integrity.checks(STAGE, case, v, out.outputs[v], to_host(ids) if timed else None, diff)
    if argpartition and on_gpu:
        out.add(measurer.measure(STAGE, ARGPARTITION, case, _argpartition_launcher(placed.scores, inputs)))

    roles = roles or registry.roles(STAGE)
    reference, old, new = roles["reference"], roles["baseline"], roles["candidate"]
    ran = out.ran(variants)
    against = [reference] if reference in ran else []
    if check_model:
        out.outputs[CPU_ORACLE] = topk_ids(inputs, "oracle")
        against.append(CPU_ORACLE)
    for ref in against:
        for v in ran:
            if v != ref:
                out.parity.append(bitwise_check(STAGE, case, v, ref, out.outputs, diff))
    for subject, against in dict.fromkeys(((new, old), *same_bits)):
        if subject in ran and against in ran:
            out.parity.append(bitwise_check(STAGE, case, subject, against, out.outputs, diff))
    return out


def _argpartition_launcher(scores: Any, inputs: TopkInputs) -> Any:
    """What a user would reach for: the best ceil(width / 4) blocks of each row by cupy.argpartition."""
    import cupy

    blocks = blocks_read(inputs.steps)
    k = -(-int(inputs.steps[:, STEP_WIDTH].max()) // BLOCK_CELLS)
    view = scores[:, :blocks]
    kth = max(0, blocks - k)
    return lambda: cupy.argpartition(view, kth, axis=1)


def graph_replay_check(inputs: TopkInputs, replays: int, variant: str) -> tuple[bool, str]:
    """Capture ``variant`` as a CUDA graph and replay it: every replay must give the oracle's ids.

    The engine replays its decode graph every step, so a kernel's scratch must be left clean by
    each run; the output is re-poisoned before every replay, so stale ids cannot pass.
    """
    import cupy

    from ..launch.topk import topk_launcher

    expected = topk_ids(inputs, "oracle")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        buffers = GuardedBuffers(cupy)
        scores = buffers.asarray("scores", inputs.scores)
        steps = buffers.asarray("steps", inputs.steps)
        poison = cupy.asarray(id_poison((inputs.nq, SELECT_CAP)))
        ids = buffers.empty("ids", poison.shape, np.int32)
        launch = topk_launcher(variant, scores, steps, ids, scratch=buffers)
        launch()  # module loading and first-use work stay out of the capture
        stream.begin_capture()
        launch()
        graph = stream.end_capture()
        for replay in range(replays):
            cupy.copyto(ids, poison)
            graph.launch(stream)
            got = cupy.asnumpy(ids, stream=stream)
            if got.tobytes() != expected.tobytes():
                return False, f"replay {replay}: " + describe_difference(inputs.steps, got, expected)
            breaches = buffers.breaches()
            if breaches:
                return False, f"replay {replay}: {'; '.join(breaches)}"
    return True, ""
