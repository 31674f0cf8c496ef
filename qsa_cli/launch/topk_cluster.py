"""The launch shape of the cluster top-k in ``kernels/topk_cluster.cu`` (spec section 3; sm_90 and newer).

A cluster of ``CLUSTER_CTAS`` CTAs per query, grid ``(CLUSTER_CTAS, nq)``, or of ``CLUSTER_WIDE_CTAS`` in
a wide call (``cluster_ctas``: the rule); each CTA keeps its slice of the query's order keys in dynamic
shared memory, one uint32 a block (padded to 16 bytes: a lane reads 4 keys at once), then two uint32 a
chunk of ``CLUSTER_CHUNK_KEYS`` keys and two more (the emit's counts and their scan), sized by the
capacity (a decode call: ``max_blocks``) or by a prompt call's active block count. A capacity whose slice does not fit the device's opt-in shared memory per CTA is refused with
``ClusterUnavailable``, as is a card older than sm_90.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..core.errors import ClusterUnavailable, KernelError
from ..core.geometry import (
    BLOCK_CELLS,
    CLUSTER_CHUNK_KEYS,
    CLUSTER_CTAS,
    CLUSTER_HIST_BUFFERS,
    CLUSTER_LANE_KEYS,
    CLUSTER_MIN_CC,
    CLUSTER_SIZES,
    CLUSTER_WIDE_CTAS,
    RADIX_BINS,
    TOPK_CLUSTER_THREADS,
    WARP,
    capacity_of,
    cluster_slice_blocks,
)
from ..core.integrity import Allocator
from ..dispatch import cluster_wide, programmatic_launches
from .driver import ProgrammaticLaunch, clusters_at_once, device_property
from .shape import Card, KernelCall, TopkShape
from .topk import TopkLaunch, check_arrays

SOURCE = "topk_cluster.cu"
# What a cluster kernel that waits for the grid before it, before it reads a score, declares in its source
# (``// qsa-declares: ...``): only then may its launch be a programmatic dependent launch
WAITS_FOR_PRIOR_GRID = "waits-for-prior-grid"
THREADS = TOPK_CLUSTER_THREADS
WORD_BYTES = 4  # a uint32: one block's order key, one histogram bin
CHUNK_WORDS = 2  # a chunk's cells above and at the threshold
MAX_CHUNKS = THREADS  # the emit's scan over the chunks: one thread a chunk
DIGIT_KEY_WORDS = 2  # pass 2's least and greatest key of each digit (read by the cluster)
SCRATCH_BYTES = 1024  # room for the kernel's per-warp totals and pass results
# The kernel's static shared memory, bounded without a compile so that fit decisions need no device:
# the histogram with a column per lane, the CTA's histogram buffers, the digits' keys and the scratch
# (the launcher checks the compiled kernel against it).
STATIC_SMEM_BYTES = (WARP + CLUSTER_HIST_BUFFERS + DIGIT_KEY_WORDS) * RADIX_BINS * WORD_BYTES + SCRATCH_BYTES
# A wide call: 16 CTAs a query halve each CTA's slice, so its per-key work, and double what its digit rounds
# read from the cluster. Measured on an H200 (2026-12-03, docs/benchmarks.md): 0.2-3.3 us faster from 420K
# cells (most on adversarial scores, which need four passes), within 0.6 either way at 262K and 327K,
# 0.3-0.6 slower at 131K; and 8-11 us slower where the call's clusters of 16 do not all fit at once (the
# H200 holds 7: 8 queries run in two waves). So a call goes wide from this many blocks a query, when its
# clusters fit at once.
CLUSTER_WIDE_MIN_BLOCKS = 81920  # capacity 327,672 cells and over: between 262K's 65,538 and 420K's 105,002


def cluster_ctas(blocks: int, nq: int, wide_at_once: int, switches: Mapping[str, str]) -> int:
    """CTAs a query of a cluster call of ``nq`` queries over ``blocks`` blocks (a prompt call's active
    blocks, else max_blocks), where ``wide_at_once`` clusters of CLUSTER_WIDE_CTAS run at once on the card
    (0: none runs): CLUSTER_WIDE_CTAS when every query's cluster fits at once and ``blocks`` reaches
    CLUSTER_WIDE_MIN_BLOCKS, else CLUSTER_CTAS. ``QSA_CLUSTER_WIDE=1`` goes wide wherever such a cluster
    runs, ``=0`` never (dispatch.cluster_wide)."""
    wide = cluster_wide(switches)
    if wide_at_once < 1 or wide is False:
        return CLUSTER_CTAS
    if wide or (nq <= wide_at_once and blocks >= CLUSTER_WIDE_MIN_BLOCKS):
        return CLUSTER_WIDE_CTAS
    return CLUSTER_CTAS


def cluster_smem_bytes(max_blocks: int, ctas: int = CLUSTER_CTAS) -> int:
    """Dynamic shared memory per CTA for a call of ``max_blocks`` blocks and ``ctas`` CTAs a query:
    ceil(max_blocks / ctas) keys, rounded up to a multiple of 4, then two words for each chunk of 128 of
    them and two more."""
    keys = cluster_slice_blocks(max_blocks, ctas)
    padded = -(-keys // CLUSTER_LANE_KEYS) * CLUSTER_LANE_KEYS
    return (padded + CHUNK_WORDS * (-(-keys // CLUSTER_CHUNK_KEYS) + 1)) * WORD_BYTES


def cluster_fits(max_blocks: int, device_max_smem_optin: int) -> bool:
    """Whether a CTA's slice and the kernel's static shared memory fit the device's opt-in limit
    (and the slice the emit's one-thread-a-chunk scan)."""
    return (cluster_smem_bytes(max_blocks) + STATIC_SMEM_BYTES <= device_max_smem_optin
            and cluster_slice_blocks(max_blocks) <= MAX_CHUNKS * CLUSTER_CHUNK_KEYS)


def cluster_max_capacity(device_max_smem_optin: int) -> int:
    """The largest capacity in cells whose ``max_blocks = capacity // 4 + 2`` fits (0 when none does)."""
    room = (device_max_smem_optin - STATIC_SMEM_BYTES) // WORD_BYTES - CHUNK_WORDS  # keys and chunk counts
    # whole chunks first (CLUSTER_CHUNK_KEYS + CHUNK_WORDS words each), then the keys of a last, partial one
    chunks, rest = divmod(max(0, room), CLUSTER_CHUNK_KEYS + CHUNK_WORDS)
    keys = chunks * CLUSTER_CHUNK_KEYS + max(0, rest - CHUNK_WORDS) // CLUSTER_LANE_KEYS * CLUSTER_LANE_KEYS
    keys = min(keys, MAX_CHUNKS * CLUSTER_CHUNK_KEYS)
    return max(0, capacity_of(keys * CLUSTER_CTAS) + BLOCK_CELLS - 1)


def require_cluster(compute_capability: int, max_blocks: int, device_max_smem_optin: int, active_blocks: int = 0) -> int:
    """The dynamic shared memory bytes a launch needs; ClusterUnavailable (one line) when it cannot run.

    A prompt call's ``active_blocks`` (its largest n_bid + 1) sizes the slices; a decode call (0) is
    sized by ``max_blocks``, so a captured graph stays valid while the context grows to the capacity.
    """
    if compute_capability < CLUSTER_MIN_CC:
        raise ClusterUnavailable(
            f"the cluster top-k needs sm_{CLUSTER_MIN_CC} or newer (thread-block clusters); this device is sm_{compute_capability}"
        )
    blocks = active_blocks or max_blocks
    if not cluster_fits(blocks, device_max_smem_optin):
        what = f"{active_blocks} active blocks" if active_blocks else f"capacity {capacity_of(max_blocks)} cells"
        raise ClusterUnavailable(
            f"the cluster top-k cannot hold {what}: {cluster_smem_bytes(blocks) + STATIC_SMEM_BYTES} B of shared "
            f"memory per CTA, over this device's {device_max_smem_optin} B "
            f"(capacity at most {cluster_max_capacity(device_max_smem_optin)} cells)"
        )
    return cluster_smem_bytes(blocks)


class Cluster(TopkShape):
    """A cluster of CLUSTER_CTAS or CLUSTER_WIDE_CTAS CTAs a query (sm_90 and newer; ``cluster_ctas``), its
    dynamic shared memory sized by the capacity (a decode call) or a prompt call's active blocks: refused
    where a slice of CLUSTER_CTAS does not fit the card."""

    name, title, min_cc = "cluster", "cluster top-k", CLUSTER_MIN_CC

    def refusal(self, card: Card, max_blocks: int, active_blocks: int = 0) -> str | None:
        try:
            require_cluster(card.compute_capability, max_blocks, card.shared_optin_bytes, active_blocks)
        except ClusterUnavailable as refused:
            return str(refused)
        return None

    def build(self, variant: Any, code: Callable[[], Any], scores: Any, steps: Any, ids: Any, *, active_blocks: int,
              scratch: Allocator | None, switches: Mapping[str, str],
              follows_kernel: bool = False) -> TopkLaunch:
        """One launch on the current stream, so it can be captured into a CUDA graph, of the kernel of
        ``cluster_ctas`` CTAs a query (``variant.kernels`` by CLUSTER_SIZES); after a kernel
        (``follows_kernel``), a programmatic dependent launch where the kernel says it waits for that grid
        before it reads the scores (WAITS_FOR_PRIOR_GRID), unless ``QSA_PDL=0``: the window's top-k then starts
        while its scorer drains."""
        nq, mb = check_arrays(scores, steps, ids, active_blocks)
        import cupy

        device = cupy.cuda.Device()
        optin = device_property(device.id, "sharedMemPerBlockOptin")
        require_cluster(int(device.compute_capability), mb, optin, active_blocks)
        module = code()
        blocks = active_blocks or mb
        ctas, prepared = CLUSTER_CTAS, None
        if cluster_wide(switches) is not False:
            wide = _prepared(module, variant, CLUSTER_WIDE_CTAS, blocks)
            if cluster_ctas(blocks, nq, _at_once(wide), switches) == CLUSTER_WIDE_CTAS:
                ctas, prepared = CLUSTER_WIDE_CTAS, wide
        kernel, dynamic = prepared or _prepared(module, variant, CLUSTER_CTAS, blocks)
        grid, block = (ctas, nq), (THREADS,)
        args = (scores, steps, ids, np.int32(nq), np.int32(mb), np.int32(active_blocks))
        programmatic = (follows_kernel and programmatic_launches(int(device.compute_capability), switches)
                        and module.declares(WAITS_FOR_PRIOR_GRID))
        call = KernelCall(_kernel_name(variant, ctas), grid, block, ctas, dynamic, programmatic)
        if programmatic:
            return TopkLaunch((ProgrammaticLaunch(kernel, grid, block, args, shared_mem=dynamic),), calls=(call,))

        def launch() -> None:
            kernel(grid, block, args, shared_mem=dynamic)

        return TopkLaunch((launch,), calls=(call,))


def wide_clusters_at_once(module: Any, variant: Any, blocks: int) -> int:
    """How many clusters of CLUSTER_WIDE_CTAS this device runs at once in a call over ``blocks`` blocks a
    query (what ``cluster_ctas`` weighs against the call's queries)."""
    return _at_once(_prepared(module, variant, CLUSTER_WIDE_CTAS, blocks))


def _at_once(prepared: tuple[Any, int]) -> int:
    """``clusters_at_once`` of a wide kernel ``_prepared`` for a call (the kernel and its dynamic bytes)."""
    kernel, dynamic = prepared
    return clusters_at_once(kernel, CLUSTER_WIDE_CTAS, THREADS, dynamic)


def _kernel_name(variant: Any, ctas: int) -> str:
    """The name of ``variant``'s kernel of ``ctas`` CTAs a query (its kernels in CLUSTER_SIZES' order)."""
    return variant.kernels[CLUSTER_SIZES.index(ctas)]


def _prepared(module: Any, variant: Any, ctas: int, blocks: int) -> tuple[Any, int]:
    """The kernel of ``ctas`` CTAs a query, its dynamic shared memory limit raised to a slice of ``blocks``
    (the bytes returned), its static shared memory checked against STATIC_SMEM_BYTES."""
    kernel = module.function(_kernel_name(variant, ctas))
    static = int(kernel.attributes["shared_size_bytes"])
    if static > STATIC_SMEM_BYTES:
        raise KernelError(f"{SOURCE}: {static} B of static shared memory, over the {STATIC_SMEM_BYTES} B the "
                          "launcher sizes for")
    dynamic = cluster_smem_bytes(blocks, ctas)
    # The limit belongs to the kernel, shared by every launcher: only ever raise it.
    kernel.max_dynamic_shared_size_bytes = max(kernel.max_dynamic_shared_size_bytes, dynamic)
    return kernel, dynamic


CLUSTER = Cluster()
