"""The top-k stage: every variant's ids on the same scores, bitwise parity, timing.

On the GPU the variants are the kernels (reference, wide = the old decode top-k, split = the new,
cluster on sm_90+); on the CPU backend they are the step-by-step models of the same algorithms.
``cupy.argpartition`` over the same block scores is timed beside them as a reference point only:
it neither weighs cells nor breaks ties by index, so it takes no part in parity.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..catalog import Launcher, Variant
from ..core.geometry import BLOCK_CELLS, SELECT_CAP, STEP_WIDTH, blocks_read
from ..core.integrity import GuardedBuffers
from ..inputs import TopkInputs, id_poison
from ..model.agreement import selection_agreement
from ..model.topk import first_difference, topk_ids
from ..record.schema import Measurement, SelectionAgreement
from ..record.vocabulary import ARGPARTITION, CPU_ORACLE
from ..record.vocabulary import TOPK as STAGE
from ..timing import Launch
from .base import Placed, StageBase, poisoned, run_stage
from .common import Measurer, StageOutcome, call_case


def describe_difference(steps: np.ndarray, a: np.ndarray, b: np.ndarray) -> str:
    where = first_difference(a, b, steps)
    if where is None:
        return "an entry past the query's width (which no kernel may write) differs"
    q, j = where
    return f"query {q} position {j}: id {int(a[q, j])} vs {int(b[q, j])}"


def topk_call_case(inputs: TopkInputs, active_blocks: int, l2: str) -> dict[str, Any]:
    """The case of a top-k call on one score set (a decode call when ``active_blocks`` is 0, else a prompt call)."""
    kind = "prompt" if active_blocks else "decode"
    return call_case(inputs.steps, inputs.capacity, kind, l2, score_set=inputs.score_set)


class TopkStage(StageBase):
    """A call's top-k on one score set (a decode call when ``active_blocks`` is 0, else a prompt call), with
    cupy.argpartition over the same scores timed beside the variants on the GPU; ``oracle``:
    the CPU oracle's ids of these inputs, made beforehand (by a worker process, runs/pool.py), else made here."""

    name, model_name = STAGE, CPU_ORACLE

    def __init__(self, inputs: TopkInputs, active_blocks: int, launcher: Launcher | None,
                 oracle: np.ndarray | None = None) -> None:
        self.inputs = inputs
        self.oracle = oracle
        self.launcher = launcher  # the GPU's (catalog.Launcher)
        self.active_blocks = active_blocks

    def case(self, l2: str) -> dict[str, Any]:
        return topk_call_case(self.inputs, self.active_blocks, l2)

    def place(self, buffers: GuardedBuffers) -> Placed:
        given = self.inputs.arrays()
        self.placed = TopkInputs(*(buffers.asarray(name, host) for name, host in given.items()), self.inputs.score_set)
        self.ids = buffers.empty("ids", (self.inputs.nq, SELECT_CAP), np.int32)
        watched = {name: (copy, given[name]) for name, copy in self.placed.arrays().items()}
        return Placed(watched, self.inputs.digests, self.ids, poisoned(buffers.xp, self.ids, id_poison(self.ids.shape)))

    def launch(self, variant: Variant, buffers: GuardedBuffers, on_gpu: bool) -> Launch:
        if on_gpu:  # any scratch between guard zones too
            return self.launcher.topk(variant, self.placed.scores, self.placed.steps, self.ids, self.active_blocks,
                                      scratch=buffers)
        return lambda: np.copyto(self.ids, topk_ids(self.placed, variant.model, self.active_blocks))

    def model(self) -> np.ndarray:
        return self.oracle if self.oracle is not None else topk_ids(self.inputs, "oracle")

    def describe(self, a: np.ndarray, b: np.ndarray) -> str:
        return describe_difference(self.inputs.steps, a, b)

    def measure(self, subject: np.ndarray, against: np.ndarray) -> tuple[None, SelectionAgreement]:
        return None, selection_agreement(subject, against, self.inputs.steps)

    def reference_points(self, measurer: Measurer, case: dict[str, Any], on_gpu: bool) -> Iterator[Measurement | None]:
        if on_gpu:
            # its sort waits for the stream on the host: timed unheld, the host's time in its samples
            yield measurer.measure(STAGE, ARGPARTITION, case, _argpartition_launcher(self.placed.scores, self.inputs),
                                   synchronizes=True)


def run_topk(inputs: TopkInputs, measurer: Measurer, variants: tuple[Variant, ...], roles: Mapping[str, str],
             launcher: Launcher | None, active_blocks: int = 0, check_model: bool = True,
             same_bits: tuple[tuple[str, str], ...] = (), oracle: np.ndarray | None = None) -> StageOutcome:
    """``variants`` on ``inputs`` (through ``launcher`` on the GPU, as their CPU models on the CPU), each
    timed, its ids checked bit for bit against the reference, the CPU oracle (``oracle``: its ids, made
    beforehand), and the roles' baseline against their candidate (stages/base.py)."""
    return run_stage(TopkStage(inputs, active_blocks, launcher, oracle), variants, measurer, roles,
                     check_model, same_bits)


def _argpartition_launcher(scores: Any, inputs: TopkInputs) -> Any:
    """What a user would reach for: the best ceil(width / 4) blocks of each row by cupy.argpartition."""
    import cupy

    blocks = blocks_read(inputs.steps)
    k = -(-int(inputs.steps[:, STEP_WIDTH].max()) // BLOCK_CELLS)
    view = scores[:, :blocks]
    kth = max(0, blocks - k)
    return lambda: cupy.argpartition(view, kth, axis=1)


def graph_replay_check(inputs: TopkInputs, expected: np.ndarray, replays: int, variant: Variant,
                       launcher: Launcher) -> tuple[bool, str]:
    """Capture ``variant`` as a CUDA graph and replay it: every replay must give ``expected``, the oracle's ids
    of ``inputs`` (made beforehand, by a worker process).

    The engine replays its decode graph every step, so a kernel's scratch must be left clean by
    each run; the output is re-poisoned before every replay, so stale ids cannot pass.
    """
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        buffers = GuardedBuffers(cupy)
        scores = buffers.asarray("scores", inputs.scores)
        steps = buffers.asarray("steps", inputs.steps)
        poison = cupy.asarray(id_poison((inputs.nq, SELECT_CAP)))
        ids = buffers.empty("ids", poison.shape, np.int32)
        launch = launcher.topk(variant, scores, steps, ids, scratch=buffers)
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
