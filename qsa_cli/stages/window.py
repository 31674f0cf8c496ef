"""The whole decode window's selection, as the engine replays it: scores then top-k in one CUDA graph.

Each pair (a top-k variant after the scorer it follows, catalog.window_pairs) is captured once and its
replays are timed (stages/base.py runs them). A replay from poisoned outputs must give the CPU oracle's
ids on the CPU model's scores (a pair with an inexact part: its selection's agreement with them is
measured), and the last timed replay (its outputs poisoned before it) the same ids, so a kernel whose
scratch a replay leaves dirty cannot pass.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..catalog import Launcher, Variant
from ..core.geometry import SELECT_CAP
from ..core.integrity import GuardedBuffers
from ..core.progress import Progress, no_progress
from ..inputs import ScorerInputs, TopkInputs, id_poison, score_poison
from ..launch.shape import Described, kernel_calls
from ..model.agreement import selection_agreement
from ..model.scores import score_blocks
from ..model.topk import topk_ids
from ..record.schema import SelectionAgreement
from ..record.vocabulary import CPU_ORACLE, pair_name
from ..record.vocabulary import WINDOW as STAGE
from ..timing import Launch
from .base import Placed, StageBase, poisoned, run_stage
from .common import Measurer, StageOutcome, decode_call_case
from .scores import place_scorer_inputs
from .topk import describe_difference


@dataclass(frozen=True)
class WindowPair:
    """A top-k variant after the scorer it follows, as one graph."""

    scorer: Variant
    topk: Variant

    @property
    def name(self) -> str:
        return pair_name(self.scorer.name, self.topk.name)

    @property
    def exact(self) -> bool:
        """Bitwise only when both are: an inexact scorer's scores change what the top-k selects."""
        return self.scorer.exact and self.topk.exact


class WindowStage(StageBase):
    """A decode call's window on its keys and queries, on a non-blocking stream of its own (a graph is
    captured from one); the key bytes are its GB/s."""

    name, model_name = STAGE, CPU_ORACLE

    def __init__(self, inputs: ScorerInputs, launcher: Launcher) -> None:
        import cupy

        self.inputs = inputs
        self.launcher = launcher
        self.bytes_read = inputs.key_bytes()
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def case(self, l2: str) -> dict[str, Any]:
        return decode_call_case(self.inputs, l2)

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        return self.stream

    def place(self, buffers: GuardedBuffers) -> Placed:
        self.placed, watched = place_scorer_inputs(buffers, self.inputs)
        self.scores = buffers.empty("scores", (self.inputs.nq, self.inputs.max_blocks), np.float32)
        self.ids = buffers.empty("ids", (self.inputs.nq, SELECT_CAP), np.int32)
        scores = poisoned(buffers.xp, self.scores, score_poison(self.scores.shape))
        ids = poisoned(buffers.xp, self.ids, id_poison(self.ids.shape))

        def repoison() -> None:
            scores()
            ids()

        return Placed(watched, self.inputs.digests, self.ids, repoison)

    def launch(self, variant: WindowPair, buffers: GuardedBuffers, on_gpu: bool) -> Launch:
        import cupy

        score = self.launcher.scorer(variant.scorer, self.placed, self.scores)
        # right after the scorer: a top-k whose first kernel waits for it may start as it drains
        select = self.launcher.topk(variant.topk, self.scores, self.placed.steps, self.ids, scratch=buffers,
                                    follows_kernel=True)
        score()
        select()  # first use (module load, attributes) stays out of the capture
        self.stream.begin_capture()
        score()
        select()
        graph = self.stream.end_capture()
        # replayed on the current stream: the window's own under qsa's timer (scope), nvbench's under its
        def replay() -> None:
            graph.launch(cupy.cuda.get_current_stream())

        scorer_calls, topk_calls = kernel_calls(score), kernel_calls(select)
        if scorer_calls is None or topk_calls is None:  # an engine's host functions: what they launch is theirs
            return replay
        return Described(replay, scorer_calls + topk_calls)

    def host(self, output: Any) -> np.ndarray:
        import cupy

        return cupy.asnumpy(output, stream=self.stream)

    def model(self) -> np.ndarray:
        return topk_ids(TopkInputs(score_blocks(self.inputs, "butterfly"), self.inputs.steps), "oracle")

    def describe(self, a: np.ndarray, b: np.ndarray) -> str:
        return describe_difference(self.inputs.steps, a, b)

    def measure(self, subject: np.ndarray, against: np.ndarray) -> tuple[None, SelectionAgreement]:
        return None, selection_agreement(subject, against, self.inputs.steps)


def run_window(inputs: ScorerInputs, measurer: Measurer, pairs: tuple[WindowPair, ...], launcher: Launcher,
               same_bits: tuple[tuple[str, str], ...] = (), progress: Progress = no_progress) -> StageOutcome:
    """Capture each pair as one graph, time its replays, check its ids against the CPU oracle's.

    The inputs, the scores, the ids and the split's scratch sit between guard zones. ``same_bits``:
    (subject, against) pairs of pair names whose ids are checked against each other too (qsa compare)."""
    return run_stage(WindowStage(inputs, launcher), pairs, measurer, None, True, same_bits, progress)
