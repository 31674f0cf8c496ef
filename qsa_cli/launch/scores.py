"""The launch shapes of the five block scorers in ``kernels/scores.cu`` (the engine's reference, multi and halve)
and ``kernels/scores_onepass.cu`` (qsa's paired and quarters), spec section 2.

Each shape resolves the kernels, grids and arguments once and returns a closure that only enqueues
launches on the current CuPy stream: no host sync, no allocation, so it can be captured into a CUDA
graph and replayed while the context grows (every count the kernels need is on the device).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.geometry import HALVE_MAX_QUERIES, MAX_QUERIES, QUARTERS_THREADS, QUERY_LANES, WARP
from ..inputs import ScorerInputs
from .driver import device_property
from .kernel import KernelLaunch
from .shape import Described, KernelCall, ScorerShape

SOURCE = "scores.cu"  # the engine's scorers
ONE_PASS_SOURCE = "scores_onepass.cu"  # qsa's paired and quarters

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

    sms = device_property(cupy.cuda.Device().id, "multiProcessorCount")
    per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, threads, 0)
    return sms * max(1, int(per_sm))


class QsaScorerShape(ScorerShape):
    """A shape of qsa's own scorer kernels: the arrays checked, then the shape's launches."""

    decode_only = True  # at most MAX_QUERIES queries (a decode call's)

    def build(self, variant: Any, code: Callable[[], Any], dev: ScorerInputs, out: Any) -> Described:
        nq, mb = dev.nq, dev.max_blocks
        if self.decode_only and nq > MAX_QUERIES:
            raise ValueError(f"the {variant.name} scorer is a decode kernel: at most {MAX_QUERIES} queries (got {nq})")
        if out.dtype != np.float32 or out.shape != (nq, mb) or not out.flags.c_contiguous:
            raise ValueError(f"scores must be C-contiguous float32 [{nq}, {mb}] (got {out.dtype} {list(out.shape)})")
        launches = self.launches(variant, code(), dev, out)

        def launch() -> None:
            for one in launches:
                one()

        return Described(launch, tuple(KernelCall(one.name, one.grid, one.block) for one in launches))

    @abstractmethod
    def launches(self, variant: Any, module: Any, dev: ScorerInputs, out: Any) -> list[KernelLaunch]:
        """The shape's launches of ``variant``'s kernels (of ``module``, a kernels.Module) on checked arrays."""


def _whole_call(dev: ScorerInputs, out: Any) -> tuple[Any, ...]:
    return (dev.pooled, dev.dead, dev.q, dev.steps, out, np.int32(dev.nq), np.int32(dev.max_blocks))


class PerBlock(QsaScorerShape):
    """A warp per (query, block): ``(max_blocks / 8, nq)`` CTAs of 8 warps; any number of queries."""

    name, title, decode_only = "per-block", "per-block scorer", False

    def launches(self, variant: Any, module: Any, dev: ScorerInputs, out: Any) -> list[KernelLaunch]:
        grid = (-(-dev.max_blocks // WARPS_PER_CTA), dev.nq)
        return [KernelLaunch.of(module, variant.kernels[0], grid, (WARPS_PER_CTA * WARP,), _whole_call(dev, out))]


class Striding(QsaScorerShape):
    """MULTI_CTAS CTAs of 8 warps striding over the blocks, every query of a block in one warp."""

    name, title = "striding", "striding scorer"

    def launches(self, variant: Any, module: Any, dev: ScorerInputs, out: Any) -> list[KernelLaunch]:
        return [KernelLaunch.of(module, variant.kernels[0], (MULTI_CTAS,), (WARPS_PER_CTA * WARP,), _whole_call(dev, out))]


class Halving(QsaScorerShape):
    """Calls of up to HALVE_MAX_QUERIES queries (5-8: queries 0..3, then 4..nq-1, on pointer offsets into
    q, steps and out), each kernel ``variant.kernels[n - 1]`` for its call's n queries, on a grid that
    fills the card once."""

    name, title = "halving", "halving scorer"

    def launches(self, variant: Any, module: Any, dev: ScorerInputs, out: Any) -> list[KernelLaunch]:
        nq, mb = dev.nq, dev.max_blocks
        block = (HALVE_WARPS_PER_CTA * WARP,)
        launches = []
        for start in range(0, nq, HALVE_MAX_QUERIES):
            n = min(HALVE_MAX_QUERIES, nq - start)
            name = variant.kernels[n - 1]
            kernel = module.function(name)
            # more CTAs than there are blocks for their warps would only launch idle warps
            grid = (min(_resident_grid(kernel, block[0]), -(-mb // HALVE_WARPS_PER_CTA)),)
            sub = slice(start, start + n)
            args = (dev.pooled, dev.dead, dev.q[sub], dev.steps[sub], out[sub], np.int32(n), np.int32(mb))
            launches.append(KernelLaunch(name, kernel, grid, block, args))
        return launches


class Paired(QsaScorerShape):
    """One call of the whole window: kernel ``variant.kernels[nq - 1]``, its warps in pairs that score the
    same blocks (each pair half of the queries), HALVE_WARPS_PER_CTA warps a CTA, on a grid that fills the
    card once."""

    name, title = "paired", "paired scorer"

    def launches(self, variant: Any, module: Any, dev: ScorerInputs, out: Any) -> list[KernelLaunch]:
        name = variant.kernels[dev.nq - 1]
        kernel = module.function(name)
        block = (HALVE_WARPS_PER_CTA * WARP,)
        pairs_per_cta = HALVE_WARPS_PER_CTA // 2
        grid = (min(_resident_grid(kernel, block[0]), -(-dev.max_blocks // pairs_per_cta)),)
        return [KernelLaunch(name, kernel, grid, block, _whole_call(dev, out))]


class Quarters(QsaScorerShape):
    """One call of the whole window: kernel ``variant.kernels[nq - 1]``, CTAs of QUARTERS_THREADS whose warps
    each score ``32 / QUERY_LANES`` blocks a step, on a grid that fills the card once."""

    name, title = "quarters", "quarters scorer"

    def launches(self, variant: Any, module: Any, dev: ScorerInputs, out: Any) -> list[KernelLaunch]:
        name = variant.kernels[dev.nq - 1]
        kernel = module.function(name)
        blocks_a_cta = QUARTERS_THREADS // WARP * (WARP // QUERY_LANES)
        grid = (min(_resident_grid(kernel, QUARTERS_THREADS), -(-dev.max_blocks // blocks_a_cta)),)
        return [KernelLaunch(name, kernel, grid, (QUARTERS_THREADS,), _whole_call(dev, out))]


PER_BLOCK, STRIDING, HALVING, PAIRED, QUARTERS = PerBlock(), Striding(), Halving(), Paired(), Quarters()
