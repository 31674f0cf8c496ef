"""Exact CPU models of the top-k selection (spec section 3).

``select_oracle`` is the rule (a stable sort's first cells), reached in no kernel's way.
``select_reference``, ``select_wide``, ``select_split`` and ``select_cluster`` reach the same ids the
way the reference, old decode (1,024-thread), new decode (split) and Hopper (cluster) kernels do: the same radix passes,
histograms, scans and write offsets, vectorised over blocks.
Each takes one query's score row and step record and returns its ``width`` ids, ascending; when a
kernel disagrees with the oracle, the model that follows that kernel shows where its steps go wrong.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..core.errors import GeometryError
from ..core.geometry import (
    BLOCK_CELLS,
    CLUSTER_CHUNK_KEYS,
    CLUSTER_CTAS,
    CLUSTER_GATHER_ALIGN,
    CLUSTER_GATHER_BLOCKS,
    CLUSTER_GATHER_CHUNKS,
    RADIX_BINS,
    RADIX_BITS,
    RADIX_PASSES,
    SELECT_CAP,
    SPLIT_CHUNK_BLOCKS,
    STEP_NBID,
    STEP_NKV,
    STEP_WIDTH,
    block_weights,
    blocks_read,
    cluster_slice_blocks,
    validate_steps,
)
from ..inputs import TopkInputs, id_poison
from .order import order_keys, threshold_key

ALGORITHMS = ("oracle", "reference", "wide", "split", "cluster")

_DIGIT_MASK = RADIX_BINS - 1
_KEY_BITS = RADIX_BITS * RADIX_PASSES  # 32
# The cluster kernel's pass that also finds each digit's least and greatest key (kTrackedPass).
TRACKED_PASS = RADIX_PASSES - 2


def digit_rule(hist: np.ndarray, above: int, width: int) -> tuple[int, int]:
    """The reference's choice of one pass's digit, a pure function of integer counts.

    Walk the digits from 255 down to 1 and stop at the first ``d`` with
    ``above + cells at digits >= d >= width`` (``d = 0`` when none); the cells at digits above ``d``
    join ``above``. Returns ``(d, new_above)``.
    """
    counts = np.asarray(hist).tolist()  # Python's integers, made at once (the walk below is Python's)
    if len(counts) != RADIX_BINS:
        raise ValueError(f"a histogram has {RADIX_BINS} bins (got {len(counts)})")
    running = above
    for d in range(RADIX_BINS - 1, 0, -1):
        if running + counts[d] >= width:
            return d, running
        running += counts[d]
    return 0, running


def _query(step: np.ndarray) -> tuple[int, int, int]:
    return int(step[STEP_NKV]), int(step[STEP_NBID]), int(step[STEP_WIDTH])


def _identity(n_kv: int) -> np.ndarray:
    return np.arange(n_kv, dtype=np.int32)


def _blocks(scores_row: np.ndarray, n_kv: int, n_bid: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys and cell weights of blocks 0..n_bid; the blocks past n_bid are never read."""
    if scores_row.ndim != 1 or scores_row.shape[0] <= n_bid:
        raise GeometryError(f"a score row of shape {list(scores_row.shape)} has no block n_bid = {n_bid}")
    keys = order_keys(scores_row[: n_bid + 1])
    return keys, block_weights(n_kv, n_bid + 1, np.int64)


def _shift(p: int) -> int:
    """Bit position of pass p's digit (``topk_shift``): 8 bits a pass from the top of the key."""
    return _KEY_BITS - RADIX_BITS * (p + 1)


def _digits(keys: np.ndarray, p: int) -> np.ndarray:
    return ((keys >> np.uint32(_shift(p))) & np.uint32(_DIGIT_MASK)).astype(np.int64)


def _groups(n: int, size: int) -> np.ndarray:
    """Block i's group of ``size`` consecutive blocks (``i // size``) for blocks 0..n-1: a CTA's slice, a chunk.
    Repeated, not divided: a division of every index took four times as long."""
    return np.repeat(np.arange(-(-n // size)), size)[:n]


def _on_digit(digits: np.ndarray, d: int, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The entries of ``arrays`` (one per block) whose digit is ``d``: the blocks on the next pass's prefix.

    A pass counts only the blocks on the prefix of the digits found, so each pass keeps those of the pass
    before that are on its digit (the same blocks as a test of every key's prefix, fewer to read each pass)."""
    on = digits == d
    if on.all():  # every block (all one key, say): the arrays as they are, not copied
        return arrays
    return tuple(a[on] for a in arrays)


def _cells_by_bin(index: np.ndarray, weights: np.ndarray, bins: int) -> np.ndarray:
    """The cells of the blocks in each bin: block i is in bin ``index[i]`` and holds ``weights[i]`` cells.

    R a block counted, less what the blocks with fewer cells (the tail's) lack: np.bincount counts blocks
    1.5-4 times as fast as it sums float weights, slowest where one bin takes most blocks (each float add
    then waits for the one before)."""
    hist = np.bincount(index, minlength=bins) * BLOCK_CELLS
    short = np.flatnonzero(weights != BLOCK_CELLS)
    np.subtract.at(hist, index[short], BLOCK_CELLS - weights[short])
    return hist


def _exclusive_cumsum(x: np.ndarray, axis: int = -1) -> np.ndarray:
    inclusive = np.cumsum(x, axis=axis)
    return inclusive - x


def _exclusive_cumsums_in_groups(groups: np.ndarray, n_groups: int, *xs: np.ndarray) -> tuple[np.ndarray, ...]:
    """The exclusive scan of each of ``xs`` restarted at each group: ``groups[i]`` is i's group
    (0..n_groups-1), ascending, so that each group's entries are together and in order."""
    first = np.searchsorted(groups, np.arange(n_groups))[groups]  # each entry's group's first entry
    return tuple((before := _exclusive_cumsum(x)) - before[first] for x in xs)


def _cells_above_and_at(keys: np.ndarray, weights: np.ndarray, thr: int) -> tuple[np.ndarray, np.ndarray]:
    """Each block's cells above thr, and its cells at thr."""
    return np.where(keys > np.uint32(thr), weights, 0), np.where(keys == np.uint32(thr), weights, 0)


def _write_ids(width: int, offsets: np.ndarray, blocks: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Scatter ``counts[i]`` cells of block ``blocks[i]`` (its first cells, in order) to ``offsets[i]``."""
    out = id_poison((width,))
    total = int(counts.sum())
    within = np.arange(total, dtype=np.int64) - np.repeat(_exclusive_cumsum(counts), counts)
    positions = np.repeat(offsets, counts) + within
    out[positions] = (np.repeat(blocks, counts) * BLOCK_CELLS + within).astype(np.int32)
    return out


# ---- the rule: the width greatest cells, ties to the lower cell -------------------------------


def select_oracle(scores_row: np.ndarray, step: np.ndarray) -> np.ndarray:
    """The first ``width`` cells of a stable sort of cells on (key descending, cell ascending), ascending.

    Computed on blocks, not cells, in no kernel's way: the key of the width-th cell (thr) from the
    greatest blocks alone (``threshold_key``), then every cell above thr and the first cells at thr in cell
    order (the stable sort's tie order). tests/test_model_topk.py checks this against the sort itself.
    """
    n_kv, n_bid, width = _query(step)
    if n_kv <= width:
        return _identity(n_kv)
    keys, weights = _blocks(scores_row, n_kv, n_bid)
    thr = threshold_key(keys, weights, width)
    above = np.flatnonzero(keys > thr)  # every cell of these is taken, and no cell of a block below thr
    budget = width - int(weights[above].sum())
    # the cells at thr taken, in cell order: of the first budget // R + 2 blocks at thr, all but the tail hold R
    ties = np.flatnonzero(keys == thr)[: budget // BLOCK_CELLS + 2]
    tie_counts = np.clip(budget - _exclusive_cumsum(weights[ties]), 0, weights[ties])
    blocks = np.concatenate([above, ties])
    counts = np.concatenate([weights[above], tie_counts])
    order = np.argsort(blocks)  # cell order
    return _write_ids(width, _exclusive_cumsum(counts[order]), blocks[order], counts[order])


# ---- block_topk_kernel: the rule, pass by pass -----------------------------------------------


DigitRule = Callable[[np.ndarray, int, int], tuple[int, int]]


def _radix_threshold(keys: np.ndarray, weights: np.ndarray, width: int,
                     rule: DigitRule = digit_rule) -> tuple[int, int]:
    """The 4 passes: each one's histogram of the blocks on the prefix, and its digit by ``rule``.
    Returns (thr, the cells above thr)."""
    prefix, above = 0, 0
    for p in range(RADIX_PASSES):
        digits = _digits(keys, p)
        d, above = rule(_cells_by_bin(digits, weights, RADIX_BINS), above, width)
        prefix = (prefix << RADIX_BITS) | d
        if p + 1 < RADIX_PASSES:
            keys, weights = _on_digit(digits, d, keys, weights)  # the blocks on the next pass's prefix
    return prefix, above


def select_reference(scores_row: np.ndarray, step: np.ndarray) -> np.ndarray:
    """4-pass radix select of the threshold key, then every cell above it and the first ties."""
    n_kv, n_bid, width = _query(step)
    if n_kv <= width:
        return _identity(n_kv)
    keys, weights = _blocks(scores_row, n_kv, n_bid)
    thr, above = _radix_threshold(keys, weights, width)
    # the blocks whose cells may be taken: those above thr, and the first ceil((width - above) / R) at thr,
    # which hold the first width - above cells at thr (every block but the last holds R cells)
    at_thr = np.flatnonzero(keys == np.uint32(thr))[: -(-(width - above) // BLOCK_CELLS)]
    near = np.union1d(np.flatnonzero(keys > np.uint32(thr)), at_thr)
    cells = (near[:, None] * BLOCK_CELLS + np.arange(BLOCK_CELLS)).ravel()  # their cells, in order
    held = cells < n_kv  # the last block holds the tail's cells alone
    cells, cell_keys = cells[held], np.repeat(keys[near], BLOCK_CELLS)[held]
    ties = cell_keys == np.uint32(thr)
    taken_ties = ties & (np.cumsum(ties) <= width - above)
    return cells[(cell_keys > np.uint32(thr)) | taken_ties].astype(np.int32)


# ---- block_topk_wide_kernel: 1,024 threads, per-warp histograms, block-wide scans ------------


def _digit_by_scan(hist: np.ndarray, above: int, width: int) -> tuple[int, int]:
    """``digit_rule`` as the wide kernel computes it: a suffix scan over the bins, then the highest hit."""
    at_or_above = above + np.cumsum(hist[::-1])[::-1]  # above + cells at digits >= d
    hits = np.flatnonzero(at_or_above[1:] >= width)
    d = int(hits[-1]) + 1 if hits.size else 0
    return d, above + int(hist[d + 1 :].sum())


def select_wide(scores_row: np.ndarray, step: np.ndarray) -> np.ndarray:
    """The 1,024-thread kernel: thread t owns blocks t, t + 1024, ... (coalesced tiles of 1,024 blocks).

    Each pass sums the 32 warps' histograms (a warp's lanes of one digit add as one, which changes
    no count), which is the histogram of the blocks on the prefix: integer counts add to the same sum in
    any grouping, so the model counts them at once. The emit walks the tiles, placing each thread's
    cells by block-wide exclusive scans of the per-thread counts plus the totals carried from the tiles
    before.
    """
    n_kv, n_bid, width = _query(step)
    if n_kv <= width:
        return _identity(n_kv)
    keys, weights = _blocks(scores_row, n_kv, n_bid)
    thr, above = _radix_threshold(keys, weights, width, _digit_by_scan)
    budget = width - above

    # the threads' counts: the blocks below thr count no cell, so only those at or above it are scanned
    near = np.flatnonzero(keys >= np.uint32(thr))
    above_cells, tie_cells = _cells_above_and_at(keys[near], weights[near], thr)
    # the totals carried from the tiles before plus the block-wide exclusive scan inside the tile: together,
    # the exclusive scan of every thread's counts, tile by tile (block order)
    above_before = _exclusive_cumsum(above_cells)
    ties_before = _exclusive_cumsum(tie_cells)
    taken = np.clip(budget - ties_before, 0, tie_cells)
    offsets = above_before + np.minimum(ties_before, budget)
    counts = above_cells + taken
    owned = np.flatnonzero(counts)  # the threads (blocks tile * 1024 + thread) that write
    return _write_ids(width, offsets[owned], near[owned], counts[owned])


# ---- qsa_block_topk_split: chunks of 512-2,048 blocks, five launches -----------------------


def select_split(
    scores_row: np.ndarray,
    step: np.ndarray,
    active_blocks: int = 0,
    chunk_blocks: int = SPLIT_CHUNK_BLOCKS,
) -> np.ndarray:
    """The split kernel, launch by launch, for one query.

    The grid has ``ceil(blocks / chunk_blocks)`` chunks, ``blocks`` being ``active_blocks`` when a
    prompt call passes it and the score row's ``max_blocks`` otherwise; a chunk past the query's
    ``n_bid`` does nothing. Launch k (passes 1-3, then the emit) derives digit k - 1 from the complete
    histogram k - 1 and the digits and ``above`` that launch k - 1 left in the ``select`` scratch (every
    chunk of a launch derives the same, so the model derives it once per launch). The last pass leaves
    each chunk's suffix row (entry d: its cells above the 3-digit prefix, or on it with digit 3 >= d),
    from which the emit reads the chunk's cells above and at thr.
    """
    n_kv, n_bid, width = _query(step)
    blocks = active_blocks or scores_row.shape[0]
    if not n_bid < blocks <= scores_row.shape[0]:
        raise GeometryError(f"active blocks {blocks} must cover n_bid + 1 = {n_bid + 1} and fit {scores_row.shape[0]}")
    if chunk_blocks <= 0:
        raise GeometryError(f"chunk_blocks must be > 0 (got {chunk_blocks})")
    if n_kv <= width:
        return _identity(n_kv)
    grid = -(-blocks // chunk_blocks)
    keys, weights = _blocks(scores_row, n_kv, n_bid)
    chunk = _groups(n_bid + 1, chunk_blocks)

    hist = np.zeros((RADIX_PASSES, RADIX_BINS), dtype=np.int64)  # the query's global histograms
    prefix, above = 0, 0  # select's latest slot: the digits so far and the cells above them
    on_keys, on_weights, on_chunk = keys, weights, chunk  # the blocks on the prefix: only they are counted
    for p in range(RADIX_PASSES):  # launches 1-4
        digits = _digits(on_keys, p)
        per_chunk = _cells_by_bin(on_chunk * RADIX_BINS + digits, on_weights,
                                  grid * RADIX_BINS).reshape(grid, RADIX_BINS)
        hist[p] += per_chunk.sum(axis=0)  # each chunk's atomic adds
        if p + 1 < RADIX_PASSES:  # launch p + 2 begins with digit p, from histogram p and launch p + 1's slot
            d, above = digit_rule(hist[p], above, width)
            prefix = (prefix << RADIX_BITS) | d
            on_keys, on_weights, on_chunk = _on_digit(digits, d, on_keys, on_weights, on_chunk)
    # the blocks above the prefix or on it: no other block adds to a suffix row, or writes
    near = np.flatnonzero(keys >> RADIX_BITS >= np.uint32(prefix))
    near_keys, near_weights, near_chunk = keys[near], weights[near], chunk[near]
    over = near_keys >> RADIX_BITS > np.uint32(prefix)
    above_prefix = _cells_by_bin(near_chunk[over], near_weights[over], grid)
    # the last pass's suffix rows: entry d = cells above the prefix + cells on it at digits >= d
    suffix = above_prefix[:, None] + np.concatenate([np.cumsum(per_chunk[:, ::-1], axis=1)[:, ::-1],
                                                     np.zeros((grid, 1), np.int64)], axis=1)

    d, above = digit_rule(hist[-1], above, width)  # launch 5, the emit: digit 3, then the suffix rows
    thr = (prefix << RADIX_BITS) | d
    above_cells, tie_cells = _cells_above_and_at(near_keys, near_weights, thr)
    chunk_above = suffix[:, d + 1]
    chunk_ties = suffix[:, d] - suffix[:, d + 1]

    budget = width - above  # each chunk's start, from the suffix rows of the chunks before
    ties_before_chunk = _exclusive_cumsum(chunk_ties)
    start = _exclusive_cumsum(chunk_above) + np.minimum(ties_before_chunk, budget)
    chunk_budget = np.maximum(budget - ties_before_chunk, 0)
    # inside a chunk: exclusive scans of its blocks' counts, from the chunk's first block (the blocks below
    # the prefix count nothing)
    above_in, ties_in = _exclusive_cumsums_in_groups(near_chunk, grid, above_cells, tie_cells)
    taken = np.clip(chunk_budget[near_chunk] - ties_in, 0, tie_cells)
    offsets = start[near_chunk] + above_in + np.minimum(ties_in, chunk_budget[near_chunk])
    counts = above_cells + taken
    writers = np.flatnonzero(counts)
    return _write_ids(width, offsets[writers], near[writers], counts[writers])


# ---- block_topk_cluster_kernel: 8 or 16 CTAs a query, the select ends once the digits decide it ----


def _tracked_key(keys: np.ndarray, weights: np.ndarray, cta: np.ndarray,
                 budget: int, ctas: int) -> tuple[int, int, np.ndarray, np.ndarray] | None:
    """Pass 2's round in the cluster kernel: thr's full key from each CTA's cells at the digits found
    (``keys``, ``weights``, ``cta``: the blocks there) and their least and greatest key there, or None
    (pass 3 follows). A CTA's keys there are known when they are one key, or two blocks (2R cells);
    when every CTA's are, thr is the key whose cells, after those of the greater keys, reach the
    budget. Otherwise, with whole blocks only and the budget within one, thr is the greatest key (its
    first block takes the whole budget). Returns (thr, the cells there above thr, and per CTA the
    cells at thr and above thr there in the CTAs before it)."""
    entries: list[tuple[int, int, int]] = []  # (CTA, key, cells)
    known, total = True, 0
    greatest, holder = -1, 0  # the greatest key there, and the first CTA holding it
    for r in range(ctas):
        mine = (cta == r) & (weights > 0)
        cells = int(weights[mine].sum())
        if cells == 0:
            continue
        least, most = int(keys[mine].min()), int(keys[mine].max())
        total += cells
        if most > greatest:
            greatest, holder = most, r
        if least == most:
            entries.append((r, least, cells))
        elif cells == 2 * BLOCK_CELLS:
            entries += [(r, least, BLOCK_CELLS), (r, most, BLOCK_CELLS)]
        else:
            known = False
    ranks = np.arange(ctas)
    if known:
        for _, key, _ in entries:
            greater = sum(c for _, k, c in entries if k > key)
            if greater < budget <= greater + sum(c for _, k, c in entries if k == key):
                at_before = np.array([sum(c for e, k, c in entries if k == key and e < r) for r in ranks])
                above_before = np.array([sum(c for e, k, c in entries if k > key and e < r) for r in ranks])
                return key, greater, at_before, above_before
    if total % BLOCK_CELLS == 0 and budget <= BLOCK_CELLS:
        return greatest, 0, np.where(ranks > holder, BLOCK_CELLS, 0), np.zeros(ctas, np.int64)
    return None


def cluster_gathers(cells_at_digit: np.ndarray, per: int) -> bool:
    """Whether the cluster kernel takes its gather path after pass 0: the CTAs' blocks at pass 0's digit
    (``cells_at_digit[r]``: CTA r's cells there, in whole blocks but a tail's), each CTA's share padded to
    CLUSTER_GATHER_ALIGN, are at most CLUSTER_GATHER_BLOCKS, and a slice of ``per`` blocks holds at most
    CLUSTER_GATHER_CHUNKS chunks."""
    blocks = -(-cells_at_digit.astype(np.int64) // BLOCK_CELLS)
    padded = -(-blocks // CLUSTER_GATHER_ALIGN) * CLUSTER_GATHER_ALIGN
    return int(padded.sum()) <= CLUSTER_GATHER_BLOCKS and -(-per // CLUSTER_CHUNK_KEYS) <= CLUSTER_GATHER_CHUNKS


def cluster_passes(scores_row: np.ndarray, step: np.ndarray, ctas: int = CLUSTER_CTAS,
                   gather: bool = True) -> tuple[np.ndarray, int]:
    """The cluster kernel of ``ctas`` CTAs a query (8 or 16) for one query: its ids and the digit rounds it
    ran over the cluster (0: none, n_kv <= width; the gather path: 1). ``gather=False`` models the kernel
    where the gather path does not apply (the rounds alone).

    CTA r holds the blocks ``r * per .. r * per + per - 1`` (``per = ceil((n_bid + 1) / ctas)``). Every
    pass sums the CTAs' histograms and applies the reference's digit rule; each CTA learns the cells
    above and at thr in the CTAs before it from the histograms alone (a key is above thr when, at the
    first pass its digit differs from thr's, it is higher; at thr when it matches every digit found).
    The select ends after the pass where the digits found decide it: the keys that pass counted (from
    pass 1 on, those with cells) are all one key, which becomes thr; or the cells at the digits found
    are exactly the cells still needed, or are one block's. Keys then compare under the mask of the
    digits found. Pass 2's round may also end it with thr's full key from each CTA's least and
    greatest key at the digits found (``_tracked_key``). Inside a CTA, cells are placed in block
    order from its cells before.

    The gather path (``cluster_gathers``), after pass 0 when it has not ended the select: every CTA holds
    the cluster's blocks at pass 0's digit and finds thr's other three digits by the same rule, with no
    early end (thr: a full key; the kernel ranks the keys left once they hold at most 128 cells, which
    finds the same key).
    """
    n_kv, n_bid, width = _query(step)
    if n_kv <= width:
        return _identity(n_kv), 0
    keys, weights = _blocks(scores_row, n_kv, n_bid)
    per = cluster_slice_blocks(n_bid + 1, ctas)
    cta = _groups(n_bid + 1, per)

    thr, mask, above = 0, 0, 0
    above_before = np.zeros(ctas, dtype=np.int64)  # per CTA: the cells above thr before it
    at_before = np.zeros(ctas, dtype=np.int64)
    passes, gathered = 0, False
    counted = (keys, weights, cta)  # the blocks on the digits found so far: only they are counted
    for p in range(RADIX_PASSES):
        passes = passes if gathered else p + 1
        counted_keys, counted_weights, counted_cta = counted
        digits = _digits(counted_keys, p)
        per_cta = _cells_by_bin(counted_cta * RADIX_BINS + digits, counted_weights,
                                ctas * RADIX_BINS).reshape(ctas, RADIX_BINS)
        hist = per_cta.sum(axis=0)
        before = _exclusive_cumsum(per_cta, axis=0)  # [r, bin]: the bin's cells in the CTAs before r
        d, new_above = digit_rule(hist, above, width)
        decided = above + int(hist[d:].sum()) == width or int(hist[d]) <= BLOCK_CELLS
        above_before += before[:, d + 1 :].sum(axis=1)
        at_before = before[:, d]
        above = new_above
        thr, mask = thr | d << _shift(p), mask | _DIGIT_MASK << _shift(p)
        if not gathered:
            with_cells = counted_keys[counted_weights > 0]
            if p > 0 and with_cells.size and with_cells.min() == with_cells.max():
                thr, mask = int(with_cells[0]), (1 << _KEY_BITS) - 1
                break
            if decided:
                break
        if p + 1 < RADIX_PASSES:
            counted = _on_digit(digits, d, *counted)  # the next pass's
        if gathered:
            continue
        if p == 0 and gather and cluster_gathers(per_cta[:, d], per):
            gathered = True
            continue
        if p == TRACKED_PASS:
            tracked = _tracked_key(*counted, width - above, ctas)
            if tracked is not None:
                thr, gain, at_before, above_before_gain = tracked
                mask = (1 << _KEY_BITS) - 1
                above += gain
                above_before += above_before_gain
                break

    masked = keys & np.uint32(mask)
    near = np.flatnonzero(masked >= np.uint32(thr))  # the blocks at or above thr: no other block writes
    near_masked, near_weights, near_cta = masked[near], weights[near], cta[near]
    above_cells, tie_cells = _cells_above_and_at(near_masked, near_weights, thr)
    budget = width - above
    # inside the CTA, from its first block
    above_in, ties_in = _exclusive_cumsums_in_groups(near_cta, ctas, above_cells, tie_cells)
    ties_before = at_before[near_cta] + ties_in
    taken = np.clip(budget - ties_before, 0, tie_cells)
    offsets = above_before[near_cta] + above_in + np.minimum(ties_before, budget)
    counts = above_cells + taken
    writers = np.flatnonzero(counts)
    return _write_ids(width, offsets[writers], near[writers], counts[writers]), passes


def select_cluster(scores_row: np.ndarray, step: np.ndarray) -> np.ndarray:
    """The cluster kernel's ids for one query (``cluster_passes`` without the pass count)."""
    return cluster_passes(scores_row, step)[0]


# ---- a call's ids -----------------------------------------------------------------------------


def topk_ids(inputs: TopkInputs, algorithm: str = "oracle", active_blocks: int = 0) -> np.ndarray:
    """int32 [nq, SELECT_CAP]: each query's ``width`` ids, then ``ID_POISON`` (entries a kernel must not write).

    ``active_blocks`` is a prompt call's count (0 for a decode call); only the split's grid depends on it.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown top-k algorithm {algorithm!r} (expected one of {', '.join(ALGORITHMS)})")
    validate_steps(inputs.steps, inputs.max_blocks)
    needed = blocks_read(inputs.steps)
    if active_blocks and not needed <= active_blocks <= inputs.max_blocks:
        raise GeometryError(f"active blocks {active_blocks} must be in {needed}..{inputs.max_blocks} for this call")
    out = id_poison((inputs.nq, SELECT_CAP))
    for i in range(inputs.nq):
        row, step = inputs.scores[i], inputs.steps[i]
        if algorithm == "split":
            ids = select_split(row, step, active_blocks)
        else:
            ids = {"oracle": select_oracle, "reference": select_reference, "wide": select_wide,
                   "cluster": select_cluster}[algorithm](row, step)
        out[i, : ids.shape[0]] = ids
    return out


def first_difference(a: np.ndarray, b: np.ndarray, steps: np.ndarray) -> tuple[int, int] | None:
    """The first (query, position) among each query's entries 0..width-1 where the ids differ, or None."""
    if a.shape != b.shape or a.ndim != 2 or a.shape[0] != steps.shape[0]:
        raise ValueError(f"id matrices {list(a.shape)} and {list(b.shape)} do not match {steps.shape[0]} queries")
    inside = np.arange(a.shape[1])[None, :] < steps[:, STEP_WIDTH].astype(np.int64)[:, None]
    bad = np.flatnonzero((a != b) & inside)
    if bad.size == 0:
        return None
    q, j = divmod(int(bad[0]), a.shape[1])
    return q, j
