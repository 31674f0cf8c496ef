"""The launchers of a loaded checkout's host functions: closures that check their arrays and the card,
then only enqueue the engine's work on the current CuPy stream (so a CUDA graph can capture them); and the
launch shapes of an engine checkout's variants (launch/shape.py), which call them.

CuPy is imported inside the functions that launch, never at import.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import EngineError, EngineRefused, GeometryError
from ..core.geometry import IDX_DIM, IDX_HEADS, MAX_QUERIES, SELECT_CAP, blocks_read
from ..core.integrity import Allocator, PlainAllocator
from ..inputs import ID_POISON, ScorerInputs
from ..launch.shape import ScorerShape, TopkShape
from ..launch.topk import TopkLaunch, check_arrays
from .domains import variant_refusal
from .kinds import ENGINE_KINDS, EngineEntry, engine_kinds
from .library import EngineLibrary

NO_ACTIVE_COUNT = -1  # the engine's "no active block count": a decode call
DECODE_SCORERS = ("scores", "scores-dx")  # the kinds of qsa_block_scores's decode paths: at most 8 queries
# each scorer kind's host path (engine/library.py's wrappers)
SCORER_PATHS = {"scores": "qsa_block_scores", "scores-ref": "qsa_block_scores",
                "scores-dx": "qsa_block_scores.decode_dx", "scores-tc": "qsa_block_scores_tc"}


def require_built_for_device(lib: EngineLibrary) -> int:
    """The device's compute capability, the one ``lib`` was built for (an EngineError if not)."""
    import cupy

    cc = int(cupy.cuda.Device().compute_capability)
    if cc != lib.arch:
        raise EngineError(f"{lib.name} was built for sm_{lib.arch}; this device is sm_{cc}")
    return cc


def _require_runs(lib: EngineLibrary, variant: str, nq: int) -> None:
    refusal = variant_refusal(lib, variant, require_built_for_device(lib), nq=nq)
    if refusal is not None:
        raise EngineRefused(refusal)


def _require(name: str, a: Any, shape: tuple[int, ...], dtype: Any) -> None:
    """The engine gets bare pointers: each array must be exactly what they point at."""
    if a.dtype != dtype or tuple(a.shape) != shape or not a.flags.c_contiguous:
        raise GeometryError(f"{name} must be C-contiguous {np.dtype(dtype).name} {list(shape)} "
                            f"(got {a.dtype} {list(a.shape)})")


def require_scorer_arrays(dev: ScorerInputs, out: Any) -> None:
    """A GeometryError unless ``dev``'s arrays and ``out`` are exactly what a scorer's bare pointers point at."""
    nq, mb = dev.nq, dev.max_blocks
    for name, a, shape, dtype in (("pooled", dev.pooled, (mb, IDX_DIM), np.float32),
                                  ("dead", dev.dead, (IDX_DIM,), np.float32),
                                  ("q", dev.q, (nq, IDX_HEADS, IDX_DIM), np.float32),
                                  ("steps", dev.steps, (nq, 4), np.int32),
                                  ("scores", out, (nq, mb), np.float32)):
        _require(name, a, shape, dtype)


@dataclass(frozen=True, eq=False)
class EngineCall:
    """One host function call on the current CuPy stream: ``before`` the stream argument, then ``after``.

    ``arrays`` holds every array whose address is among the arguments, so none is freed while the call
    (or a graph that captured it) can still reach it.
    """

    lib: EngineLibrary
    function: str
    before: tuple[int, ...]
    after: tuple[int, ...]
    arrays: tuple[Any, ...]

    def __call__(self) -> None:
        import cupy

        self.lib.launch(self.function, *self.before, cupy.cuda.get_current_stream().ptr, *self.after)


def engine_scorer_launcher(lib: EngineLibrary, variant: str, dev: ScorerInputs, out: Any) -> Callable[[], None]:
    """A closure calling ``lib``'s scorer ``variant`` on ``dev`` (cupy arrays) into ``out`` (float32
    [nq, max_blocks], poisoned by the caller).

    "scores": qsa_block_scores with no active count (-1), the engine's decode scorer, at most 8 queries;
    "scores-dx": the same with decode_dx = true (the shuffle-free decode scorer where STRATA_SCORES_DX lets
    it); "scores-ref": an active count of max_blocks, its per-block reference kernel over every block;
    "scores-tc": qsa_block_scores_tc with the call's largest n_bid + 1 as its active count, as the engine's
    prompt path passes it (read from ``dev.steps`` here, before any launch).
    """
    if variant not in engine_kinds("scores"):
        raise ValueError(f"unknown engine scorer variant {variant!r} (expected one of {', '.join(engine_kinds('scores'))})")
    nq, mb = dev.nq, dev.max_blocks
    if variant in DECODE_SCORERS and nq > MAX_QUERIES:
        raise GeometryError(f"the engine's decode scorer takes at most {MAX_QUERIES} queries (got {nq})")
    require_scorer_arrays(dev, out)
    _require_runs(lib, variant, nq)
    arrays = (dev.pooled, dev.dead, dev.q, dev.steps, out)
    pointers = tuple(a.data.ptr for a in arrays)
    active = {"scores-ref": mb, "scores-tc": blocks_read(dev.steps)}.get(variant, NO_ACTIVE_COUNT)
    return EngineCall(lib, SCORER_PATHS[variant], (*pointers[:4], nq, mb, pointers[4]), (active,), arrays)


# The top-k kinds that take no scratch of qsa's, and the function each calls (the dispatching one with the count)
UNSCRATCHED = {"topk": "qsa_block_topk", "topk-ref": "qsa_block_topk_ref", "topk-cluster": "qsa_block_topk_cluster"}


def engine_scratch_bytes(lib: EngineLibrary, variant: str, nq: int) -> int:
    """The bytes of the scratch ``engine_topk_launcher`` takes for a call of ``nq`` queries of top-k kind
    ``variant`` (0: none, or a call the library refuses)."""
    if variant in UNSCRATCHED:
        return 0
    try:
        if variant == "topk-multi":
            return max(0, lib.multi_scratch_ints(nq)) * np.dtype(np.int32).itemsize
        return lib.split_bytes(nq)
    except (EngineError, EngineRefused):  # the launcher says so when the call comes
        return 0


def engine_topk_launcher(lib: EngineLibrary, variant: str, scores: Any, steps: Any, ids: Any, active_blocks: int = 0,
                         scratch: Allocator | None = None) -> Callable[[], None]:
    """A callable calling ``lib``'s top-k ``variant`` on ``scores`` (float32 [nq, max_blocks]) and ``steps``
    (int32 [nq, 4]) into ``ids`` (int32 [nq, SELECT_CAP], poisoned by the caller).

    "topk": qsa_block_topk, what the engine dispatches (passing ``active_blocks``, a prompt call's count;
    0, a decode call, passes none); "topk-ref", "topk-split", "topk-cluster": those functions alone. The
    split's scratch, ``qsa_topk_split_bytes(nq)`` bytes, is taken zeroed from ``scratch`` (default: a plain
    CuPy array) once; every call leaves it zero. "topk-multi": qsa_block_topk of a decode call with a
    multi_scratch of ``qsa_topk_multi_scratch_ints(nq)`` int32s, taken from ``scratch`` once and filled with
    the id poison (the engine promises it needs no initial value: this holds it to that). EngineRefused when
    the variant is outside its domain here.
    """
    if variant not in engine_kinds("topk"):
        raise ValueError(f"unknown engine top-k variant {variant!r} (expected one of {', '.join(engine_kinds('topk'))})")
    nq, mb = check_arrays(scores, steps, ids, active_blocks)
    _require_runs(lib, variant, nq)
    arrays: tuple[Any, ...] = (scores, steps, ids)
    head = (scores.data.ptr, steps.data.ptr, nq, mb, SELECT_CAP, ids.data.ptr)
    if variant in UNSCRATCHED:
        count = (active_blocks or NO_ACTIVE_COUNT,) if variant == "topk" else ()
        return TopkLaunch((EngineCall(lib, UNSCRATCHED[variant], head, count, arrays),))
    if scratch is None:
        import cupy

        scratch = PlainAllocator(cupy)
    if active_blocks and ENGINE_KINDS[variant].decode_only:
        raise EngineRefused(f"{lib.name}: {variant} serves decode calls (no active count); this is a prompt call of "
                            f"{active_blocks} active blocks")
    if variant == "topk-multi":
        ints = lib.multi_scratch_ints(nq)
        if ints <= 0:
            raise EngineRefused(f"{lib.name}: qsa_topk_multi_scratch_ints({nq}) is {ints}: "
                                "the build has no multi-CTA path")
        multi = scratch.zeros(f"{lib.name} multi scratch", (ints,), np.int32)
        multi.fill(ID_POISON)
        call = EngineCall(lib, "qsa_block_topk.multi_scratch", head, (NO_ACTIVE_COUNT, multi.data.ptr), (*arrays, multi))
        return TopkLaunch((call,))
    buffer = scratch.zeros(f"{lib.name} split scratch", (lib.split_bytes(nq),), np.uint8)
    call = EngineCall(lib, "qsa_block_topk_split", (*head, buffer.data.ptr), (), (*arrays, buffer))
    return TopkLaunch((call,), accumulators=(buffer,))


def require_switches(entry: EngineEntry, env: Mapping[str, str] | None = None) -> None:
    """A variant with switches runs only in a process whose environment has them (the engine reads each
    once per process): anywhere else its launcher would measure the switches' defaults."""
    env = os.environ if env is None else env
    wrong = [f"{k}={v}" for k, v in entry.switches if env.get(k) != v]
    if wrong:
        raise EngineError(f"{entry.checkout}.{entry.kind} under {', '.join(wrong)} runs in a child process with "
                          "those switches set, not in this one")


class EngineScorer(ScorerShape):
    """An engine checkout's scorer kinds: its qsa_block_scores (``code()``: the checkout's loaded library)."""

    name, title, engine = "engine-scores", "engine scorer", True

    def build(self, variant: Any, code: Callable[[], Any], dev: ScorerInputs, out: Any) -> Callable[[], None]:
        require_switches(variant.engine)
        return engine_scorer_launcher(code(), variant.engine.kind, dev, out)


class EngineTopk(TopkShape):
    """An engine checkout's top-k kinds: its top-k host functions (``code()``: the checkout's loaded library)."""

    name, title, engine = "engine-topk", "engine top-k", True

    def build(self, variant: Any, code: Callable[[], Any], scores: Any, steps: Any, ids: Any, *, active_blocks: int,
              scratch: Allocator | None, switches: Mapping[str, str],
              follows_kernel: bool = False) -> Callable[[], None]:
        require_switches(variant.engine)
        return engine_topk_launcher(code(), variant.engine.kind, scores, steps, ids, active_blocks, scratch)

    def scratch_bytes(self, variant: Any, code: Callable[[], Any], nq: int, blocks: int, sms: int) -> tuple[int, ...]:
        return tuple(filter(None, [engine_scratch_bytes(code(), variant.engine.kind, nq)]))


ENGINE_SHAPES = {"scores": EngineScorer(), "topk": EngineTopk()}  # an engine variant's, by its stage
