"""The launch shapes of an adapter's variants (engine/adapter.py, qsa_adapter.h): closures that check their
arrays and the card, then only call the adapter's function with the current CuPy stream (an EngineCall of
the variant's name, its stream the last argument), as the checkout's own launchers do (engine/launch.py), so
a CUDA graph can capture them.

CuPy is imported inside the functions that launch, never at import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..core.errors import EngineError
from ..core.geometry import SELECT_CAP
from ..core.integrity import Allocator, PlainAllocator
from ..inputs import ScorerInputs
from ..launch.shape import ScorerShape, TopkShape
from ..launch.topk import TopkLaunch, check_arrays
from .adapter import SCRATCH_BYTES, AdapterEntry
from .launch import EngineCall, require_built_for_device, require_scorer_arrays, require_switches
from .library import EngineLibrary


def _entry(lib: EngineLibrary, variant: Any) -> AdapterEntry:
    try:
        return lib.adapter[variant.engine.kind]
    except KeyError:
        raise EngineError(f"variant {variant.name!r}: the adapter of {lib.name} has no entry "
                          f"{variant.engine.kind!r}") from None


def adapter_scorer_launcher(lib: EngineLibrary, variant: Any, dev: ScorerInputs, out: Any) -> Callable[[], None]:
    """A closure calling the adapter scorer of ``variant`` on ``dev`` (cupy arrays) into ``out`` (float32
    [nq, max_blocks], poisoned by the caller)."""
    require_scorer_arrays(dev, out)
    require_built_for_device(lib)
    _entry(lib, variant)
    arrays = (dev.pooled, dev.dead, dev.q, dev.steps, out)
    pointers = tuple(a.data.ptr for a in arrays)
    return EngineCall(lib, variant.name, (*pointers[:4], dev.nq, dev.max_blocks, pointers[4]), (), arrays)


def entry_scratch_bytes(entry: AdapterEntry, nq: int) -> int:
    """The scratch an entry asks for a call of ``nq`` queries (its ``scratch_bytes(nq)``; 0: it takes none)."""
    return 0 if entry.scratch_bytes is None else int(SCRATCH_BYTES(entry.scratch_bytes)(nq))


def adapter_topk_launcher(lib: EngineLibrary, variant: Any, scores: Any, steps: Any, ids: Any, active_blocks: int = 0,
                          scratch: Allocator | None = None) -> Callable[[], None]:
    """A callable calling the adapter top-k of ``variant`` on ``scores`` (float32 [nq, max_blocks]) and
    ``steps`` (int32 [nq, 4]) into ``ids`` (int32 [nq, SELECT_CAP], poisoned by the caller). The ABI has no
    active block count: a prompt call's steps say which blocks each query reads. Its scratch, the entry's
    ``scratch_bytes(nq)`` bytes, is taken zeroed from ``scratch`` (default: a plain CuPy array) once."""
    nq, mb = check_arrays(scores, steps, ids, active_blocks)
    require_built_for_device(lib)
    entry = _entry(lib, variant)
    arrays: tuple[Any, ...] = (scores, steps, ids)
    scratch_pointer = 0
    if entry.scratch_bytes is not None:
        size = entry_scratch_bytes(entry, nq)
        if size <= 0:
            raise EngineError(f"{variant.name}: its scratch_bytes({nq}) is {size}: a scratch needs more than 0 bytes")
        if scratch is None:
            import cupy

            scratch = PlainAllocator(cupy)
        buffer = scratch.zeros(f"{variant.name} scratch", (size,), np.uint8)
        arrays, scratch_pointer = (*arrays, buffer), buffer.data.ptr
    head = (scores.data.ptr, steps.data.ptr, nq, mb, SELECT_CAP, ids.data.ptr, scratch_pointer)
    return TopkLaunch((EngineCall(lib, variant.name, head, (), arrays),))


class AdapterScorer(ScorerShape):
    """An adapter's scorer entries: its function (``code()``: the checkout's loaded library)."""

    name, title, engine = "adapter-scores", "adapter scorer", True

    def build(self, variant: Any, code: Callable[[], Any], dev: ScorerInputs, out: Any) -> Callable[[], None]:
        require_switches(variant.engine)
        return adapter_scorer_launcher(code(), variant, dev, out)


class AdapterTopk(TopkShape):
    """An adapter's top-k entries: its function (``code()``: the checkout's loaded library)."""

    name, title, engine = "adapter-topk", "adapter top-k", True

    def build(self, variant: Any, code: Callable[[], Any], scores: Any, steps: Any, ids: Any, *, active_blocks: int,
              scratch: Allocator | None, switches: Mapping[str, str],
              follows_kernel: bool = False) -> Callable[[], None]:
        require_switches(variant.engine)
        return adapter_topk_launcher(code(), variant, scores, steps, ids, active_blocks, scratch)

    def scratch_bytes(self, variant: Any, code: Callable[[], Any], nq: int, blocks: int, sms: int) -> tuple[int, ...]:
        size = entry_scratch_bytes(_entry(code(), variant), nq)
        return (size,) if size > 0 else ()


ADAPTER_SHAPES = {"scores": AdapterScorer(), "topk": AdapterTopk()}  # an adapter variant's, by its stage
