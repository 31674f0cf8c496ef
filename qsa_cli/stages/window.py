"""The whole decode window's selection, as the engine replays it: scores then top-k in one CUDA graph.

Each pair (old scorer + old top-k, new + new, new scorer + cluster top-k on sm_90+) is captured once
and its replays are timed; after all of them the ids are poisoned and one more replay must give the
CPU oracle's ids on the CPU model's scores, so a kernel whose scratch a replay leaves dirty cannot pass.
"""

from __future__ import annotations

from ..geometry import SELECT_CAP
from ..inputs import ScorerInputs, TopkInputs, id_poison, score_poison
from ..model.scores import score_blocks
from ..model.topk import topk_ids
from .common import Measurer, StageOutcome, bitwise_check, call_case, keys_case
from .topk import describe_difference

STAGE = "window"
PAIRS: tuple[tuple[str, str], ...] = (("multi", "wide"), ("halve", "split"), ("halve", "cluster"))
CPU_ORACLE = "cpu-oracle"


def pair_name(scorer: str, topk: str) -> str:
    return f"{scorer}+{topk}"


def run_window(inputs: ScorerInputs, measurer: Measurer, pairs: tuple[tuple[str, str], ...]) -> StageOutcome:
    """Capture each pair as one graph on a non-blocking stream, time its replays, check its ids."""
    import cupy

    from ..launch.scores import DeviceScorerInputs, scorer_launcher
    from ..launch.topk import topk_launcher

    case = call_case(inputs.steps, inputs.capacity, "decode", measurer.l2, **keys_case(inputs))
    out = StageOutcome()
    expected = topk_ids(TopkInputs(score_blocks(inputs, "butterfly"), inputs.steps), "oracle")
    out.outputs[CPU_ORACLE] = expected
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        dev = DeviceScorerInputs.from_host(inputs)
        scores = cupy.asarray(score_poison((inputs.nq, inputs.max_blocks)))
        id_poison_dev = cupy.asarray(id_poison((inputs.nq, SELECT_CAP)))
        for scorer, topk in pairs:
            name = pair_name(scorer, topk)
            ids = id_poison_dev.copy()
            score = scorer_launcher(scorer, dev, scores)
            select = topk_launcher(topk, scores, dev.steps, ids, active_blocks=0)
            score()
            select()  # first use (module load, attributes) stays out of the capture
            stream.begin_capture()
            score()
            select()
            graph = stream.end_capture()
            replay = lambda graph=graph: graph.launch(stream)  # noqa: E731
            out.add(measurer.measure(STAGE, name, case, replay, bytes_read=inputs.key_bytes()))
            cupy.copyto(ids, id_poison_dev)
            replay()
            out.outputs[name] = cupy.asnumpy(ids, stream=stream)
            diff = lambda a, b: describe_difference(inputs.steps, a, b)  # noqa: E731
            out.parity.append(bitwise_check(STAGE, case, name, CPU_ORACLE, out.outputs, diff))
    return out
