"""The whole decode window's selection, as the engine replays it: scores then top-k in one CUDA graph.

Each pair (a top-k variant after the scorer it follows, variants.window_pairs) is captured once
and its replays are timed. A replay from poisoned outputs must give the CPU oracle's ids on the CPU
model's scores, and the last timed replay (its outputs poisoned before it) the same ids, so a kernel
whose scratch a replay leaves dirty cannot pass.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import EngineRefused
from ..core.geometry import SELECT_CAP
from ..core.integrity import GuardedBuffers
from ..inputs import ScorerInputs, TopkInputs, id_poison, score_poison
from ..model.scores import score_blocks
from ..model.topk import topk_ids
from ..record.vocabulary import CPU_ORACLE, pair_name
from ..record.vocabulary import WINDOW as STAGE
from .common import Measurer, StageOutcome, bitwise_check, call_case, keys_case
from .scores import place_scorer_inputs
from .topk import describe_difference


def run_window(inputs: ScorerInputs, measurer: Measurer, pairs: tuple[tuple[str, str], ...],
               same_bits: tuple[tuple[str, str], ...] = ()) -> StageOutcome:
    """Capture each pair as one graph on a non-blocking stream, time its replays, check its ids.

    The inputs, the scores, the ids and the split's scratch sit between guard zones; each pair's
    integrity is checked after its replays (stages/common.py, Integrity). ``same_bits``: (subject,
    against) pairs of pair names whose ids are checked against each other too (qsa compare)."""
    import cupy

    from ..launch.scores import scorer_launcher
    from ..launch.topk import topk_launcher

    case = call_case(inputs.steps, inputs.capacity, "decode", measurer.l2, **keys_case(inputs))
    out = StageOutcome()
    expected = topk_ids(TopkInputs(score_blocks(inputs, "butterfly"), inputs.steps), "oracle")
    out.outputs[CPU_ORACLE] = expected
    diff = lambda a, b: describe_difference(inputs.steps, a, b)  # noqa: E731
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        buffers = GuardedBuffers(cupy)
        placed, integrity = place_scorer_inputs(buffers, inputs)
        scores = buffers.empty("scores", (inputs.nq, inputs.max_blocks), np.float32)
        ids = buffers.empty("ids", (inputs.nq, SELECT_CAP), np.int32)
        poisons = ((scores, cupy.asarray(score_poison(scores.shape))), (ids, cupy.asarray(id_poison(ids.shape))))

        def repoison() -> None:
            for array, poison in poisons:
                cupy.copyto(array, poison)

        for scorer, topk in pairs:
            name = pair_name(scorer, topk)
            try:
                score = scorer_launcher(scorer, placed, scores)
                select = topk_launcher(topk, scores, placed.steps, ids, active_blocks=0, scratch=buffers)
                score()
                select()  # first use (module load, attributes) stays out of the capture
            except EngineRefused as refused:
                out.refused(name, refused)
                continue
            stream.begin_capture()
            score()
            select()
            graph = stream.end_capture()
            replay = lambda graph=graph: graph.launch(stream)  # noqa: E731
            repoison()
            replay()
            out.outputs[name] = cupy.asnumpy(ids, stream=stream)
            timed = measurer.measure(STAGE, name, case, replay, bytes_read=inputs.key_bytes(), before_last=repoison)
            out.add(timed)
            last = cupy.asnumpy(ids, stream=stream) if timed else None
            out.parity += integrity.checks(STAGE, case, name, out.outputs[name], last, diff)
            out.parity.append(bitwise_check(STAGE, case, name, CPU_ORACLE, out.outputs, diff))
    for subject, against in same_bits:
        if subject in out.outputs and against in out.outputs:
            out.parity.append(bitwise_check(STAGE, case, subject, against, out.outputs, diff))
    return out
