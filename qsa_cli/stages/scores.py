"""The scorer stage: every variant on the same inputs, bitwise parity, timing against the read floor.

On the GPU the variants are the kernels (reference, multi = the old decode scorer, halve = the new);
on the CPU backend they are the exact models of their arithmetic (the butterfly order for reference
and multi, the recursive-halving order for halve), so the same command runs and checks everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..catalog import Launcher, Variant
from ..core.integrity import GuardedBuffers
from ..core.progress import Progress, no_progress
from ..inputs import ScorerInputs, TopkInputs, score_poison
from ..launch.shape import Described, KernelCall
from ..model.agreement import score_errors, selection_agreement
from ..model.scores import first_difference, score_blocks, scores_hash
from ..model.topk import topk_ids
from ..record.schema import Measurement, ScoreErrors, SelectionAgreement
from ..record.vocabulary import CPU_MODEL, READ_FLOOR
from ..record.vocabulary import SCORES as STAGE
from ..timing import Launch
from .base import Placed, StageBase, poisoned, run_stage
from .common import Measurer, StageOutcome, decode_call_case


def place_scorer_inputs(buffers: GuardedBuffers, inputs: ScorerInputs) -> tuple[ScorerInputs, dict[str, Any]]:
    """The scorer's inputs copied between guard zones, each with the host array it came from (what the
    integrity rows watch)."""
    placed = ScorerInputs(*(buffers.asarray(name, host) for name, host in inputs.arrays().items()))
    return placed, {name: (copy, getattr(inputs, name)) for name, copy in placed.arrays().items()}


def describe_difference(steps: np.ndarray, a: np.ndarray, b: np.ndarray) -> str:
    where = first_difference(a, b, steps)
    if where is None:
        return "an entry past n_bid (which no kernel may write) differs"
    q, blk = where
    bits = lambda x: f"{x[q, blk]!r} (0x{int(x[q:q+1, blk:blk+1].view(np.uint32)[0, 0]):08x})"  # noqa: E731
    return f"query {q} block {blk}: {bits(a)} vs {bits(b)}"


class ScorerStage(StageBase):
    """A decode call's scorers on its keys and queries; the read floor of its key bytes beside them. Made
    beforehand (by a worker process, runs/pool.py), else here: ``model``, the CPU model's scores of these inputs
    (the butterfly's, which every variant must equal); ``made``, on the CPU backend, each variant's output by its
    model's order (runs/made.py makes every order's in one pass)."""

    name, model_name = STAGE, CPU_MODEL

    def __init__(self, inputs: ScorerInputs, launcher: Launcher | None, model: np.ndarray | None = None,
                 made: Mapping[str, np.ndarray] | None = None) -> None:
        self.inputs = inputs
        self.expected = model
        self.made = dict(made or {})
        self.launcher = launcher  # the GPU's (catalog.Launcher)
        self.bytes_read = inputs.key_bytes()
        self._selected: dict[str, np.ndarray] = {}  # the oracle's ids on an output, by the output's hash

    def case(self, l2: str) -> dict[str, Any]:
        return decode_call_case(self.inputs, l2)

    def place(self, buffers: GuardedBuffers) -> Placed:
        self.placed, watched = place_scorer_inputs(buffers, self.inputs)
        self.scores = buffers.empty("scores", (self.inputs.nq, self.inputs.max_blocks), np.float32)
        return Placed(watched, self.inputs.digests, self.scores,
                      poisoned(buffers.xp, self.scores, score_poison(self.scores.shape)))

    def launch(self, variant: Variant, buffers: GuardedBuffers, on_gpu: bool) -> Launch:
        if on_gpu:
            return self.launcher.scorer(variant, self.placed, self.scores)
        made = self.made.get(variant.model)
        if made is not None:
            return lambda: np.copyto(self.scores, made)
        return lambda: np.copyto(self.scores, score_blocks(self.placed, variant.model))

    def model(self) -> np.ndarray:
        return self.expected if self.expected is not None else score_blocks(self.inputs, "butterfly")

    def describe(self, a: np.ndarray, b: np.ndarray) -> str:
        return describe_difference(self.inputs.steps, a, b)

    def output_hash(self, output: np.ndarray) -> str:
        return scores_hash(output, self.inputs.steps)

    def measure(self, subject: np.ndarray, against: np.ndarray) -> tuple[ScoreErrors, SelectionAgreement]:
        """The scores' errors, and the selection they feed: the CPU oracle's top-k on ``subject``'s scores
        against the oracle's on ``against``'s (what a near-tie changes)."""
        return score_errors(subject, against), selection_agreement(self._selection(subject),
                                                                   self._selection(against), self.inputs.steps)

    def _selection(self, scores: np.ndarray) -> np.ndarray:
        key = self.output_hash(scores)  # over each query's blocks 0..n_bid: all the oracle reads
        if key not in self._selected:
            self._selected[key] = topk_ids(TopkInputs(scores, self.inputs.steps), "oracle")
        return self._selected[key]

    def reference_points(self, measurer: Measurer, case: dict[str, Any], on_gpu: bool) -> Iterator[Measurement | None]:
        if on_gpu:
            read = measurer.gpu.read_launcher(self.placed.pooled, self.bytes_read)
            floor = Described(read, (KernelCall(read.name, read.grid, read.block),))
            yield measurer.measure(STAGE, READ_FLOOR, case, floor, bytes_read=self.bytes_read)


def run_scores(inputs: ScorerInputs, measurer: Measurer, variants: tuple[Variant, ...], roles: Mapping[str, str],
               launcher: Launcher | None, check_model: bool = True, same_bits: tuple[tuple[str, str], ...] = (),
               progress: Progress = no_progress, model: np.ndarray | None = None,
               made: Mapping[str, np.ndarray] | None = None) -> StageOutcome:
    """``variants`` on ``inputs`` (through ``launcher`` on the GPU, as their CPU models on the CPU), each timed,
    checked bit for bit against the reference, the butterfly order's CPU model (``model``: its scores, made
    beforehand; ``made``: the CPU models' outputs by order), and the roles' baseline against their candidate
    (stages/base.py)."""
    return run_stage(ScorerStage(inputs, launcher, model, made), variants, measurer, roles, check_model, same_bits,
                     progress)
