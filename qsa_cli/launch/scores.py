"""Launchers of the three block scorers in ``kernels/scores.cu`` (spec section 2).

``scorer_launcher`` resolves the kernels, grids and arguments once and returns a closure that only
enqueues launches on the current CuPy stream: no host sync, no allocation, so it can be captured
into a CUDA graph and replayed while the context grows (every count the kernels need is on the device).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.geometry import HALVE_MAX_QUERIES, MAX_QUERIES, WARP
from ..inputs import ScorerInputs
from ..variants import compiled, get

SOURCE = "scores.cu"
STAGE = "scores"

WARPS_PER_CTA = 8  # the reference and the old decode scorer (spec section 2)
MULTI_CTAS = 256  # the old decode scorer's fixed grid (spec section 2)
# The new decode scorer: small CTAs round its 70-168 registers a thread into more resident warps
# (H200, 420K cells, 4 queries: 23.6 us with 128 threads a CTA, 25.2 us with 256).
HALVE_WARPS_PER_CTA = 4


@dataclass(frozen=True)
class DeviceScorerInputs(ScorerInputs):
    """The scorer's inputs on the current device: the same four arrays, as C-contiguous cupy arrays."""

    @classmethod
    def from_host(cls, inputs: ScorerInputs) -> DeviceScorerInputs:
        import cupy

        return cls(*(cupy.asarray(np.ascontiguousarray(a)) for a in (inputs.pooled, inputs.dead, inputs.q, inputs.steps)))


def _resident_grid(kernel: Any, threads: int) -> int:
    """CTAs that fill the card once: the grid-striding kernel then has no second wave."""
    import cupy

    sms = int(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"])
    per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, threads, 0)
    return sms * max(1, int(per_sm))


def scorer_launcher(variant: str, dev: ScorerInputs, out: Any) -> Callable[[], None]:
    """A closure launching ``variant`` on ``dev`` into ``out`` (float32 [nq, max_blocks], poisoned by the caller).

    Blocks 0..n_bid of each query's row are written, no others. An engine checkout's variant calls its host
    function (engine/launch.py); for qsa's, the variant's launch shape (variants.py)
    decides the grid: "halving" runs 5-8 queries as two launches (queries 0..3, then 4..nq-1) on pointer
    offsets into q, steps and out, its kernels indexed by the launch's queries.
    """
    v = get(STAGE, variant)
    if v.engine is not None:
        from ..engine.attach import library
        from ..engine.launch import engine_scorer_launcher
        from ..engine.switches import require_switches

        require_switches(v.engine)
        return engine_scorer_launcher(library(v.engine.checkout), v.engine.kind, dev, out)
    nq, mb = dev.nq, dev.max_blocks
    if v.launch != "per-block" and nq > MAX_QUERIES:
        raise ValueError(f"the {variant} scorer is a decode kernel: at most {MAX_QUERIES} queries (got {nq})")
    if out.dtype != np.float32 or out.shape != (nq, mb) or not out.flags.c_contiguous:
        raise ValueError(f"scores must be C-contiguous float32 [{nq}, {mb}] (got {out.dtype} {list(out.shape)})")
    mod = compiled(v)
    launches: list[tuple[Any, tuple[int, ...], tuple[int, ...], tuple[Any, ...]]] = []
    if v.launch == "per-block":
        grid = (-(-mb // WARPS_PER_CTA), nq)
        args = (dev.pooled, dev.dead, dev.q, dev.steps, out, np.int32(nq), np.int32(mb))
        launches.append((mod.function(v.kernels[0]), grid, (WARPS_PER_CTA * WARP,), args))
    elif v.launch == "striding":
        args = (dev.pooled, dev.dead, dev.q, dev.steps, out, np.int32(nq), np.int32(mb))
        launches.append((mod.function(v.kernels[0]), (MULTI_CTAS,), (WARPS_PER_CTA * WARP,), args))
    else:
        block = (HALVE_WARPS_PER_CTA * WARP,)
        for start in range(0, nq, HALVE_MAX_QUERIES):
            n = min(HALVE_MAX_QUERIES, nq - start)
            kernel = mod.function(v.kernels[n - 1])
            # more CTAs than there are blocks for their warps would only launch idle warps
            grid = (min(_resident_grid(kernel, block[0]), -(-mb // HALVE_WARPS_PER_CTA)),)
            sub = slice(start, start + n)
            args = (dev.pooled, dev.dead, dev.q[sub], dev.steps[sub], out[sub], np.int32(n), np.int32(mb))
            launches.append((kernel, grid, block, args))

    def launch() -> None:
        for kernel, grid, block, args in launches:
            kernel(grid, block, args)

    return launch
