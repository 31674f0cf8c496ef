"""Geometry of the QSA selection (spec section 1) and the step records of a call.

The constants mirror ``kernels/qsa_common.cuh``; ``tests/test_geometry.py`` checks they agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .errors import GeometryError

IDX_DIM = 128
IDX_HEADS = 4
BLOCK_CELLS = 4  # R
TOP_K = 2048
SELECT_CAP = TOP_K + BLOCK_CELLS - 1  # 2051: the widest selection and the row stride of ids
MAX_QUERIES = 8  # queries of a decode call
HALVE_MAX_QUERIES = 4
QUERY_LANES = 4  # the quarters scorer's lanes a query, each summing a quarter of the butterfly's lanes
# The paired decode scorer's queries for the even and the odd warp of a pair, by a window's queries (1-8):
# the kernels instantiated in kernels/scores_onepass.cu. For 5-8 the even warp takes 4 (fewest shuffles: a warp's
# values are padded to a power of two), which measured faster on an H200 than 3 + 2 and 3 + 3.
PAIRED_SPLITS = ((1, 0), (1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 3), (4, 4))
SPLIT_CHUNK_BLOCKS = 2048  # the most blocks a CTA of the split top-k takes
SPLIT_MIN_CHUNK_BLOCKS = 512  # the fewest
# The split's chunk sizes, ascending: powers of two between the two (each a kernel instantiation of topk.cu).
SPLIT_CHUNK_SIZES = tuple(SPLIT_MIN_CHUNK_BLOCKS << i for i in range((SPLIT_CHUNK_BLOCKS // SPLIT_MIN_CHUNK_BLOCKS).bit_length()))
CLUSTER_CTAS = 8  # CTAs a query of the cluster top-k (the portable cluster size)
CLUSTER_WIDE_CTAS = 16  # ... in a wide call (non-portable: launch/topk_cluster.py's rule)
CLUSTER_SIZES = (CLUSTER_CTAS, CLUSTER_WIDE_CTAS)  # a call's CTAs a query, portable first (a kernel instance each)
CLUSTER_LANE_KEYS = 4  # order keys a lane of the cluster top-k reads at once (16 bytes)
RADIX_BITS = 8
RADIX_BINS = 256
RADIX_PASSES = 4
WARP = 32
BUTTERFLY_OFFSETS = tuple(WARP >> s for s in range(1, WARP.bit_length()))  # a warp sum's xor offsets: 16 ... 1
CLUSTER_CHUNK_KEYS = WARP * CLUSTER_LANE_KEYS  # keys a warp reads at once; the emit scans a count pair a chunk
CLUSTER_HIST_BUFFERS = 2  # a CTA's pass records in the cluster top-k: pass p's in buffer p % 2 (read remotely)
# The cluster top-k's gather path (spec section 3): taken when the cluster's blocks at pass 0's digit, each CTA's
# share padded to CLUSTER_GATHER_ALIGN, are at most CLUSTER_GATHER_BLOCKS and a slice holds at most
# CLUSTER_GATHER_CHUNKS chunks.
CLUSTER_GATHER_BLOCKS = 4096
CLUSTER_GATHER_ALIGN = 4
CLUSTER_GATHER_CHUNKS = 256
TOPK_REF_THREADS = 256
TOPK_WIDE_THREADS = 1024
TOPK_SPLIT_THREADS = 256
TOPK_CLUSTER_THREADS = 1024
QUARTERS_THREADS = 128  # a CTA of the quarters scorer (its rings of keys are static shared memory)
TAIL_BONUS = np.float32(1e9)

# The oldest cards (major * 10 + minor) whose instructions some kernels use (the header's), and the one card
# the engine defaults its new decode kernels on (its dispatch policy, docs/spec.md section 4: no kernel's).
PDL_MIN_CC = 90  # programmatic dependent launch (griddepcontrol)
CLUSTER_MIN_CC = 90  # thread-block clusters and distributed shared memory
NEW_KERNELS_CC = 75  # the seed measured (and defaults) its kernels on sm_75 only

STEP_POS, STEP_NKV, STEP_NBID, STEP_WIDTH = range(4)
STEP_INTS = 4

PROMPT_QUERIES = 64  # the selftest's prompt call
MAX_PROMPT_QUERIES = 1024  # queries of a prompt top-k call the harness accepts (one row of ids each)
MAX_CAPACITY = 1 << 24  # cells: 2 GB of keys; ids and block indices stay far inside int32


# A size (a context, a capacity) as a user writes it, on the command line and in a sweep file alike: ASCII
# digits, optionally K (1024) or M (1048576). Python's int() takes more (full-width digits, 20_000, spaces)
# and YAML's ints more again (0x..., 20_000): one rule for both places, and none of those.
SIZE_SUFFIXES = {"K": 1024, "M": 1024 * 1024}
SIZE_EXAMPLES = "32768, 32K or 1M"
_SIZE = re.compile(r"(-?[0-9]+)([KM]?)", re.ASCII | re.IGNORECASE)  # a sign, for the range checks to name
_COUNT = re.compile(r"-?[0-9]+", re.ASCII)


def parse_size(text: str) -> int | None:
    """A number of cells written as SIZE_EXAMPLES are, or None."""
    m = _SIZE.fullmatch(text)
    return int(m.group(1)) * SIZE_SUFFIXES.get(m.group(2).upper(), 1) if m else None


def parse_count(text: str) -> int | None:
    """A count (queries, iterations) written in ASCII digits, or None."""
    return int(text) if _COUNT.fullmatch(text) else None


def selection_width(n_kv: int) -> int:
    return min(n_kv, SELECT_CAP)


def max_blocks(capacity: int) -> int:
    """Row stride of the score matrix for a capacity in cells (the decode grid is sized by it)."""
    return capacity // BLOCK_CELLS + 2


def capacity_of(max_blocks_: int) -> int:
    return (max_blocks_ - 2) * BLOCK_CELLS


@dataclass(frozen=True)
class Call:
    """One selection call: ``nq`` queries at the end of a ``ctx``-cell context, under ``capacity``.

    A decode call (``prompt=False``) passes no active block count; a prompt call passes the call's
    largest ``n_bid + 1``.
    """

    ctx: int
    nq: int
    capacity: int
    prompt: bool = False

    def __post_init__(self) -> None:
        check_call(self.ctx, self.nq, self.capacity)

    @property
    def max_blocks(self) -> int:
        return max_blocks(self.capacity)

    @property
    def steps(self) -> np.ndarray:
        return window_steps(self.ctx, self.nq)

    @property
    def active_blocks(self) -> int:
        """The count a prompt call passes (0, none, for a decode call)."""
        return self.ctx // BLOCK_CELLS + 1 if self.prompt else 0

    @property
    def kind(self) -> str:
        return "prompt" if self.prompt else "decode"


def check_call(ctx: int, nq: int, capacity: int) -> None:
    if ctx <= 0:
        raise GeometryError(f"context must be > 0 (got {ctx})")
    if nq <= 0:
        raise GeometryError(f"queries must be > 0 (got {nq})")
    if ctx < nq:
        raise GeometryError(f"context must be >= queries (got context {ctx}, {nq} queries)")
    if capacity < ctx:
        raise GeometryError(f"capacity must be >= context (got capacity {capacity}, context {ctx})")
    if capacity > MAX_CAPACITY:
        raise GeometryError(f"capacity must be <= {MAX_CAPACITY} cells (got {capacity})")


def check_capacity(capacity: int) -> None:
    """A capacity a user gives (CAP, a sweep's ``capacity``) is whole blocks: the kernels size a call by
    ``capacity // 4 + 2`` blocks, so any other value would run, and be recorded, as the multiple of 4 below it."""
    if capacity % BLOCK_CELLS:
        raise GeometryError(f"capacity {capacity} is not a multiple of {BLOCK_CELLS} cells (one block holds {BLOCK_CELLS})")


def check_queries(nq: int, prompt: bool) -> None:
    """A decode call is a verify window of 1-8 queries; a prompt call may have many."""
    limit = MAX_PROMPT_QUERIES if prompt else MAX_QUERIES
    if nq > limit:
        kind = "prompt" if prompt else "decode"
        raise GeometryError(f"a {kind} call has at most {limit} queries (got {nq})")


def window_steps(ctx: int, nq: int) -> np.ndarray:
    """Step records of ``nq`` queries at consecutive positions ending the context: pos = ctx - nq + i."""
    pos = np.arange(ctx - nq, ctx, dtype=np.int64)
    n_kv = pos + 1
    steps = np.stack([pos, n_kv, n_kv // BLOCK_CELLS, np.minimum(n_kv, SELECT_CAP)], axis=1)
    return steps.astype(np.int32)


def cluster_slice_blocks(blocks: int, ctas: int = CLUSTER_CTAS) -> int:
    """Blocks of each CTA's slice in the cluster top-k of ``ctas`` CTAs a query: a query's ``blocks`` cut
    into ``ctas`` contiguous slices of ceil(blocks / ctas), the last one shorter (the kernel's ``per``)."""
    return -(-blocks // ctas)


def blocks_read(steps: np.ndarray) -> int:
    """Blocks 0..the largest n_bid of a call's queries: what a decode call reads, a prompt call's active block count."""
    return int(steps[:, STEP_NBID].max()) + 1


def validate_steps(steps: np.ndarray, max_blocks_: int) -> None:
    """Raise GeometryError naming the first query whose step record breaks the spec's rules."""
    if steps.dtype != np.int32 or steps.ndim != 2 or steps.shape[1] != STEP_INTS:
        raise GeometryError(f"steps must be int32 [nq, {STEP_INTS}] (got {steps.dtype} {list(steps.shape)})")
    pos, n_kv, n_bid, width = (steps[:, i].astype(np.int64) for i in range(STEP_INTS))
    rules = (
        (pos >= 0, "pos >= 0"),
        (n_kv == pos + 1, "n_kv == pos + 1"),
        (n_bid == n_kv // BLOCK_CELLS, f"n_bid == n_kv // {BLOCK_CELLS}"),
        (width == np.minimum(n_kv, SELECT_CAP), f"width == min(n_kv, {SELECT_CAP})"),
        (n_bid < max_blocks_ - 1, f"n_bid < max_blocks - 1 = {max_blocks_ - 1}"),
    )
    for ok, rule in rules:
        bad = np.flatnonzero(~ok)
        if bad.size:
            q = int(bad[0])
            raise GeometryError(f"steps[{q}] = {steps[q].tolist()} breaks {rule}")


def block_weights(n_kv: int, n_blocks: int, dtype: type[np.signedinteger] = np.int32) -> np.ndarray:
    """Cells of blocks 0..n_blocks-1 for a query of n_kv cells: R, ..., R, tail (0-3), then 0."""
    cells = np.zeros(n_blocks, dtype=dtype)  # filled, not clipped from a range: every model calls this per query
    whole = min(n_blocks, max(0, n_kv // BLOCK_CELLS))
    cells[:whole] = BLOCK_CELLS
    if whole < n_blocks:
        cells[whole] = max(0, n_kv - whole * BLOCK_CELLS)
    return cells


def header_mismatches(defines: dict[str, str]) -> list[str]:
    """Names whose ``#define QSA_<NAME>`` in the CUDA header differs from this module's NAME."""
    bad = []
    for macro, text in defines.items():
        name = macro.removeprefix("QSA_")
        mine = globals().get(name)
        value = float(text.rstrip("f")) if name == "TAIL_BONUS" else int(text, 0)
        if mine is None or float(mine) != value:
            bad.append(f"{macro} = {text} but geometry.{name} = {mine}")
    return bad
