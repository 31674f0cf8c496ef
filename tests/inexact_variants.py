"""Inexact variants for the CPU backend's tests: a scorer and a top-k declared not bitwise, joined to a run's
catalog the way an engine checkout's variants join it (``Catalog.adding``, here in place of session.py's
``qsa_catalog``), each run by a CPU model that perturbs the exact one's output in a known way. Never in qsa's
own catalog: only a test that asks for the fixture has them, and docs/checks.md's sample, which runs this
file as a script (``python tests/inexact_variants.py ARGS``: ``qsa ARGS`` with them)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from qsa_cli import session
from qsa_cli.catalog import QSA_VARIANTS, Catalog, Variant
from qsa_cli.cli import main
from qsa_cli.core.geometry import STEP_NBID, STEP_NKV, STEP_WIDTH
from qsa_cli.core.integrity import GuardedBuffers
from qsa_cli.model.scores import score_blocks
from qsa_cli.model.topk import topk_ids
from qsa_cli.stages.scores import ScorerStage
from qsa_cli.stages.topk import TopkStage

APPROX_SCORER, APPROX_TOPK = "approx", "approx-topk"


def _of(stage: str, name: str) -> Variant:
    return next(v for v in QSA_VARIANTS if (v.stage, v.name) == (stage, name))


INEXACT = (dataclasses.replace(_of("scores", "halve"), name=APPROX_SCORER, role="variant", exact=False),
           dataclasses.replace(_of("topk", "wide"), name=APPROX_TOPK, role="variant", window_scorer=None, exact=False))


def perturbed_scores(scores: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The exact scores with each query's first written block one ulp up (its float's next), and query 0's
    greatest block negated, so a selection of fewer cells than the context loses that block's cells."""
    out = scores.copy()
    for q, n_bid in enumerate(steps[:, STEP_NBID]):
        out[q, 0] = np.nextafter(out[q, 0], np.float32(np.inf))
        if q == 0:
            top = int(np.argmax(out[0, : int(n_bid) + 1]))
            out[0, top] = -out[0, top]
    return out


def perturbed_ids(ids: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The exact selection with query 0's first id swapped for the least id it does not select."""
    out = ids.copy()
    width, n_kv = int(steps[0, STEP_WIDTH]), int(steps[0, STEP_NKV])
    chosen = set(out[0, :width].tolist())
    out[0, 0] = next(i for i in range(n_kv) if i not in chosen)
    return out


def join(setattr_: Callable[[Any, str, Any], None]) -> tuple[Variant, ...]:
    """The run's catalog with ``approx`` (a scorer) and ``approx-topk`` (a top-k) declared not bitwise, the CPU
    backend running each as its perturbed model: set through ``setattr_`` (a test's monkeypatch, which undoes it;
    the sample's process, which ends)."""
    setattr_(session, "qsa_catalog", lambda kernels=None: Catalog(QSA_VARIANTS, kernels).adding(INEXACT))
    scorer_launch, topk_launch = ScorerStage.launch, TopkStage.launch

    def scorer(self: ScorerStage, variant: Variant, buffers: GuardedBuffers, on_gpu: bool) -> Any:
        if variant.name != APPROX_SCORER:
            return scorer_launch(self, variant, buffers, on_gpu)
        return lambda: np.copyto(self.scores, perturbed_scores(score_blocks(self.placed), self.inputs.steps))

    def topk(self: TopkStage, variant: Variant, buffers: GuardedBuffers, on_gpu: bool) -> Any:
        if variant.name != APPROX_TOPK:
            return topk_launch(self, variant, buffers, on_gpu)
        return lambda: np.copyto(self.ids, perturbed_ids(topk_ids(self.placed, "oracle"), self.inputs.steps))

    setattr_(ScorerStage, "launch", scorer)
    setattr_(TopkStage, "launch", topk)
    return INEXACT


@pytest.fixture
def inexact_variants(monkeypatch: pytest.MonkeyPatch) -> tuple[Variant, ...]:
    """``join``'s variants for one test."""
    return join(monkeypatch.setattr)


if __name__ == "__main__":
    join(setattr)
    main(sys.argv[1:])
