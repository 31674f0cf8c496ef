"""The launch shapes of the top-k kernels in ``kernels/topk.cu`` (spec section 3): one CTA a query, and the
split's five launches.

Each resolves the kernels, grids and arguments once and allocates (zeroed) the split's scratch once, then
returns a callable that only enqueues launches on the current CuPy stream: no host sync, no allocation,
so it can be captured into a CUDA graph and replayed while the context grows (every count the kernels
need is on the device, in the step records). The step records are the caller's to validate
(``geometry.validate_steps``): reading them here would need a host sync.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import GeometryError
from ..core.geometry import (
    RADIX_BINS,
    RADIX_PASSES,
    SELECT_CAP,
    SPLIT_CHUNK_SIZES,
    STEP_INTS,
)
from ..core.integrity import Allocator, PlainAllocator
from ..dispatch import programmatic_launches
from .driver import ProgrammaticLaunch, device_property
from .shape import KernelCall, TopkShape

SOURCE = "topk.cu"
MAX_GRID_Y = 65535  # the split's grid is (chunks, nq)
# The split's chunk a call: the smallest whose grid has at most this many CTAs an SM. Measured on an H200
# (132 SMs, 2026-12-03): fewer blocks a CTA shorten each launch's chain until the grid outgrows what the
# card holds beside the next launch's early CTAs (524K x 8: chunks of 2048, 520 CTAs, 24.8 us, against
# 26.4 with 1024; 131K x 1 at a capacity of 262144: chunks of 512, 129 CTAs, 14.0 us, against 16.2 with
# 2048; docs/benchmarks.md).
SPLIT_CTAS_PER_SM = 4


@dataclass(frozen=True)
class SplitGrid:
    """A split call's chunking: ``chunk_blocks`` blocks a CTA, ``chunks`` CTAs a query."""

    chunk_blocks: int
    chunks: int


def split_grid(blocks: int, nq: int, sms: int) -> SplitGrid:
    """The split's grid for ``nq`` queries over ``blocks`` blocks (a prompt call's active blocks, else the
    capacity's max_blocks) on a card of ``sms`` SMs: the smallest chunk of ``SPLIT_CHUNK_SIZES`` whose grid
    has at most ``SPLIT_CTAS_PER_SM`` CTAs an SM, else the largest."""
    size = next((s for s in SPLIT_CHUNK_SIZES if -(-blocks // s) * nq <= SPLIT_CTAS_PER_SM * sms), SPLIT_CHUNK_SIZES[-1])
    return SplitGrid(size, -(-blocks // size))


@dataclass(frozen=True)
class TopkLaunch:
    """A top-k call ready to run: calling it enqueues the variant's launches on the current stream."""

    launches: tuple[Callable[[], None], ...]
    accumulators: tuple[Any, ...] = ()  # scratch the kernels add into: all zero between calls
    programmatic: bool = False  # launches after the first are programmatic dependent launches
    calls: tuple[KernelCall, ...] | None = None  # what qsa's launcher enqueues (None: an engine's host functions)

    def __call__(self) -> None:
        for launch in self.launches:
            launch()


def check_arrays(scores: Any, steps: Any, ids: Any, active_blocks: int) -> tuple[int, int]:
    """(nq, max_blocks) of a top-k call's arrays; a GeometryError (one line) naming one that does not fit
    (every top-k launcher's check, an engine checkout's too)."""
    if scores.dtype != np.float32 or scores.ndim != 2 or not scores.flags.c_contiguous:
        raise GeometryError(f"scores must be C-contiguous float32 [nq, max_blocks] (got {scores.dtype} {list(scores.shape)})")
    nq, mb = (int(n) for n in scores.shape)
    if not 1 <= nq <= MAX_GRID_Y or mb < 3:
        raise GeometryError(f"scores must have 1..{MAX_GRID_Y} queries and >= 3 blocks (got {[nq, mb]})")
    for name, a, shape in (("steps", steps, (nq, STEP_INTS)), ("ids", ids, (nq, SELECT_CAP))):
        if a.dtype != np.int32 or a.shape != shape or not a.flags.c_contiguous:
            raise GeometryError(f"{name} must be C-contiguous int32 {list(shape)} (got {a.dtype} {list(a.shape)})")
    if not 0 <= active_blocks <= mb:
        raise GeometryError(f"active_blocks must be 0 (a decode call) or at most max_blocks = {mb} (got {active_blocks})")
    return nq, mb


class OneCta(TopkShape):
    """One CTA of ``variant.threads`` a query: grid ``(nq,)``."""

    name, title = "one-cta", "one-CTA top-k"

    def build(self, variant: Any, code: Callable[[], Any], scores: Any, steps: Any, ids: Any, *, active_blocks: int,
              scratch: Allocator | None, switches: Mapping[str, str],
              follows_kernel: bool = False) -> TopkLaunch:
        nq, mb = check_arrays(scores, steps, ids, active_blocks)
        args = (scores, steps, ids, np.int32(nq), np.int32(mb), np.int32(active_blocks))
        name, grid, block = variant.kernels[0], (nq,), (variant.threads,)
        return TopkLaunch((functools.partial(code().function(name), grid, block, args),),
                          calls=(KernelCall(name, grid, block),))


class Split(TopkShape):
    """The split's five launches (four passes, the emit: the five of ``variant.kernels`` at the call's chunk
    size, ``split_grid``) on a ``(chunks, nq)`` grid of CTAs of ``variant.threads``, their scratch zeroed
    once; on sm_90 and newer launches 2-5 are programmatic dependent launches unless ``QSA_PDL=0``
    (dispatch.programmatic_launches)."""

    name, title = "split", "split top-k"

    def build(self, variant: Any, code: Callable[[], Any], scores: Any, steps: Any, ids: Any, *, active_blocks: int,
              scratch: Allocator | None, switches: Mapping[str, str],
              follows_kernel: bool = False) -> TopkLaunch:
        nq, mb = check_arrays(scores, steps, ids, active_blocks)
        import cupy

        device = cupy.cuda.Device()
        grid = split_grid(active_blocks or mb, nq, device_property(device.id, "multiProcessorCount"))
        launches = RADIX_PASSES + 1
        at = SPLIT_CHUNK_SIZES.index(grid.chunk_blocks) * launches
        module = code()
        names = variant.kernels[at:at + launches]
        kernels = [module.function(name) for name in names]
        block = (variant.threads,)
        common = (scores, steps, ids, np.int32(nq), np.int32(mb), np.int32(active_blocks))
        if scratch is None:
            scratch = PlainAllocator(cupy)
        buffers = split_scratch(scratch, nq, grid.chunks)
        (first, first_args), *rest = zip(kernels, split_kernel_args(common, buffers))
        cta_grid = (grid.chunks, nq)
        # The first launch waits for whatever the stream ran before (the scores' writer, the previous
        # call's emit, which zeroes the histograms) as usual, even after the window's scorer
        # (``follows_kernel``): launched programmatically there, pass 0 waiting for the scorer, the window
        # measured 1.5-2.3 µs slower on the H200. The others may overlap the launch before them.
        programmatic = programmatic_launches(int(device.compute_capability), switches)
        later = ProgrammaticLaunch if programmatic else functools.partial
        return TopkLaunch(
            (functools.partial(first, cta_grid, block, first_args), *(later(k, cta_grid, block, a) for k, a in rest)),
            accumulators=(buffers.hist, buffers.arrivals),
            programmatic=programmatic,
            calls=tuple(KernelCall(name, cta_grid, block, programmatic=programmatic and i > 0)
                        for i, name in enumerate(names)),
        )

    def scratch_bytes(self, variant: Any, code: Callable[[], Any], nq: int, blocks: int, sms: int) -> tuple[int, ...]:
        return split_scratch_bytes(nq, split_grid(blocks, nq, sms).chunks)


ONE_CTA, SPLIT = OneCta(), Split()


@dataclass(frozen=True)
class SplitScratch:
    """The split's scratch for one call of ``nq`` queries (all zero before the first call)."""

    hist: Any  # uint32 [nq, RADIX_PASSES, RADIX_BINS]: the queries' global histograms; the emit re-zeroes them
    # uint32 [nq, RADIX_PASSES - 1, 2]: per pass p < 3, the key's digits 0..p and the cells above them,
    # passed from launch to launch; each slot is written in the call before it is read
    select: Any
    # uint32 [nq, chunks, RADIX_BINS + 1]: per chunk, the last pass's cells at or above each digit (entry d:
    # above the 3-digit prefix, or on it with digit 3 >= d); written in the call before the emit reads it
    suffix: Any
    arrivals: Any  # uint32 [nq]: the emit's CTAs that have read the last histogram; the last resets it


def _split_shapes(nq: int, chunks: int) -> dict[str, tuple[int, ...]]:
    """The shape of each of SplitScratch's uint32 arrays, in its field order."""
    return {"hist": (nq, RADIX_PASSES, RADIX_BINS), "select": (nq, RADIX_PASSES - 1, 2),
            "suffix": (nq, chunks, RADIX_BINS + 1), "arrivals": (nq,)}


def split_scratch(scratch: Allocator, nq: int, chunks: int) -> SplitScratch:
    return SplitScratch(*(scratch.zeros(f"split scratch '{name}'", shape, np.uint32)
                          for name, shape in _split_shapes(nq, chunks).items()))


def split_scratch_bytes(nq: int, chunks: int) -> tuple[int, ...]:
    """The bytes of each array ``split_scratch`` allocates."""
    return tuple(math.prod(shape) * np.dtype(np.uint32).itemsize for shape in _split_shapes(nq, chunks).values())


def split_kernel_args(common: tuple[Any, ...], s: SplitScratch) -> list[tuple[Any, ...]]:
    """The arguments of the split's five launches, in its kernels' order (catalog.py: four passes, the
    emit), as their kernels declare them."""
    return [*((*common, s.hist, s.select, s.suffix) for _ in range(RADIX_PASSES)),
            (*common, s.hist, s.select, s.suffix, s.arrivals)]

