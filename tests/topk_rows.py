"""Score rows that end the cluster top-k's radix select in each of its ways, randomised by a generator.

Shared by the CPU model tests (fixed seeds) and the GPU tests (fresh seeds). Every query of a call has
its own row and the same context, so each kind holds for every query. The near-block kinds also come
gathered: without their fillers, the cluster's blocks at pass 0's digit fit its gather path.
"""

from __future__ import annotations

import numpy as np

from qsa_cli.core.geometry import CLUSTER_CTAS, CLUSTER_GATHER_BLOCKS, cluster_slice_blocks, max_blocks, window_steps
from qsa_cli.inputs import TopkInputs

# kind: (context, the passes the select runs over the cluster, its gather path out of reach). The widths
# are all 2051 = 512 blocks and 3 cells.
EARLY_ENDS: dict[str, tuple[int, int]] = {
    "one-key": (4 * 40000 + 1, 2),  # pass 1 counts one key only: thr is that key
    "one-block": (4 * 30000, 3),  # the threshold block alone at its top 24 bits
    "all-needed": (4 * 20000 + 3, 3),  # two keys at the top 24 bits, both taken whole
    "two-blocks": (4 * 20000, 3),  # two keys at the top 24 bits, 7 of their 8 cells taken (pass 2's keys)
    "tied-blocks": (4 * 20000, 3),  # three blocks of one key at the top 24 bits, 7 of their 12 cells taken
    "greatest-block": (4 * 20000, 3),  # three keys at the top 24 bits, 3 of their 12 cells taken
    "three-blocks": (4 * 20000, 3),  # three keys at the top 24 bits in three CTAs, 7 of their 12 cells taken
    "four-passes": (4 * 20000, 4),  # as three-blocks, all three in one CTA (its keys there unknown)
    "weightless-tail": (4 * 30000, 3),  # as one-block, with the 0-cell tail at the threshold key
}

NEAR = np.float32(10.3)  # the keys sharing their top 24 bits: 10.3 and the next floats up
DISTRACTORS = np.array([10.26, 10.27], dtype=np.float32)  # lower, sharing only their top 16 bits
# Lower still, sharing only the top 8 bits (pass 0's digit), and more than the gather path takes: the
# select then runs its rounds.
FILLERS = CLUSTER_GATHER_BLOCKS + 64
FILLER_RANGE = (8.0, 10.2)


GATHERED_KINDS = ("all-needed", "two-blocks", "tied-blocks", "greatest-block", "three-blocks", "four-passes")


def _up(x: np.float32, steps: int) -> np.float32:
    for _ in range(steps):
        x = np.nextafter(x, np.float32(11.0))
    return x


# kind: the near blocks' scores, the blocks above them besides the 510 (11 and up: 4 cells each), and
# where the near blocks lie in the cluster kernel's CTAs: anywhere, each in its own, or side by side
_NEAR_ROWS = {
    "all-needed": ([NEAR, _up(NEAR, 1)], 0, "anywhere"),
    "two-blocks": ([NEAR, _up(NEAR, 1)], 1, "anywhere"),
    "tied-blocks": ([NEAR, NEAR, NEAR], 1, "anywhere"),
    "greatest-block": ([NEAR, _up(NEAR, 1), _up(NEAR, 2)], 2, "anywhere"),
    "three-blocks": ([NEAR, _up(NEAR, 1), _up(NEAR, 2)], 1, "apart"),
    "four-passes": ([NEAR, _up(NEAR, 1), _up(NEAR, 2)], 1, "together"),
}


def _near_spots(rng: np.random.Generator, n_bid: int, count: int, layout: str) -> np.ndarray:
    """Positions for ``count`` near blocks among blocks 0..n_bid - 1 (the cluster kernel gives CTA r
    the blocks r * per .. r * per + per - 1)."""
    per = cluster_slice_blocks(n_bid + 1)
    if layout == "apart":
        ctas = rng.choice(CLUSTER_CTAS, count, replace=False)
        return np.array([r * per + rng.integers(min(per, n_bid - r * per)) for r in ctas])
    if layout == "together":
        r = int(rng.integers(CLUSTER_CTAS))
        return r * per + rng.integers(min(per, n_bid - r * per) - count + 1) + np.arange(count)
    return rng.permutation(n_bid)[:count]


def _near_blocks_row(rng: np.random.Generator, n_bid: int, near: list[np.float32], more_above: int,
                     layout: str, gathered: bool) -> np.ndarray:
    """Background below every key of interest; the near blocks laid out as ``layout`` asks; 510
    blocks above (distinct values of 100 and up), the distractors and ``more_above`` blocks at 11,
    11.5, ... between them, and unless ``gathered`` the fillers, at random distinct positions among the
    other blocks 0..n_bid - 1."""
    row = (rng.standard_normal(max_blocks(4 * n_bid)) - 10.0).astype(np.float32)
    near_spots = _near_spots(rng, n_bid, len(near), layout)
    row[near_spots] = near
    others = rng.permutation(np.setdiff1d(np.arange(n_bid), near_spots))
    values = [*DISTRACTORS, *(np.float32(11.0 + k / 2) for k in range(more_above))]
    row[others[:510]] = 100.0 + rng.permutation(510).astype(np.float32)
    row[others[510 : 510 + len(values)]] = values
    if not gathered:
        fill = others[510 + len(values) : 510 + len(values) + FILLERS]
        row[fill] = rng.uniform(*FILLER_RANGE, fill.size).astype(np.float32)
    return row


def early_end_inputs(kind: str, rng: np.random.Generator, nq: int, gathered: bool = False) -> TopkInputs:
    """``nq`` queries at the kind's context, each with its own row; ``gathered`` (a kind of GATHERED_KINDS):
    rows the cluster's gather path takes."""
    ctx, _ = EARLY_ENDS[kind]
    n_bid = ctx // 4
    rows = []
    for _ in range(nq):
        if kind == "one-key":
            row = np.full(max_blocks(ctx), rng.standard_normal(), dtype=np.float32)
        elif kind in ("one-block", "weightless-tail"):
            # distinct integers, exact in float32: near the threshold one a 24-bit prefix
            row = rng.permutation(max_blocks(ctx)).astype(np.float32)
            if kind == "weightless-tail":  # n_kv % 4 == 0: block n_bid holds no cell
                threshold_block = int(np.argsort(-row[: n_bid + 1], kind="stable")[512])
                row[n_bid] = row[threshold_block]
        else:
            row = _near_blocks_row(rng, n_bid, *_NEAR_ROWS[kind], gathered)
            if kind == "all-needed":
                row[n_bid] = np.float32(1e9)  # the 3-cell tail on top: 3 + 510 * 4 + 2 * 4 = 2051
        rows.append(row)
    steps = np.repeat(window_steps(ctx, 1), nq, axis=0)
    return TopkInputs(np.stack(rows), steps, kind)
