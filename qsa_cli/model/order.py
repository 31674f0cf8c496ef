"""The top-k's ranking key of a score, as ``qsa_order_key`` (kernels/qsa_common.cuh) computes it, and the key of
the width-th cell: what every top-k model ranks by, and what the adversarial score set (inputs.py) steers its
cut with."""

from __future__ import annotations

import numpy as np

from ..core.geometry import BLOCK_CELLS


def order_keys(scores: np.ndarray) -> np.ndarray:
    """The ranking key of each score (``qsa_order_key``): a larger key is a larger score.

    ``+ 0.0f`` turns -0 into +0; NaN maps to 0, below every other key (-inf's is 0x007FFFFF).
    """
    scores = np.asarray(scores)
    if scores.dtype != np.float32:
        raise TypeError(f"scores must be float32 (got {scores.dtype})")
    with np.errstate(invalid="ignore"):  # a signalling NaN raises "invalid"; its key is 0 all the same
        v = scores.reshape(-1) + np.float32(0.0)  # flat: numpy's operators make a 0-d array's result a scalar
    # (u & 0x80000000) ? ~u : u | 0x80000000 as one xor, in place: the sign, shifted arithmetically across
    # every bit, flips them all for a negative score and the sign bit alone for a positive one (a select of
    # two whole arrays, as np.where makes it, took 20 times as long)
    flip = v.view(np.int32) >> 31
    flip |= np.int32(-0x80000000)
    keys = flip.view(np.uint32)
    keys ^= v.view(np.uint32)
    keys[np.isnan(v)] = 0
    return keys.reshape(scores.shape)


def threshold_key(keys: np.ndarray, weights: np.ndarray, width: int) -> np.uint32:
    """The key of the width-th cell when cells go by key, descending (thr; the lowest key when the blocks hold
    fewer cells): block i has ``keys[i]`` and holds ``weights[i]`` cells, R each but the last.

    Every block but the last holds R cells, so the ``width // R + 2`` greatest blocks hold more than
    ``width`` cells, and a block left out has no key above theirs: thr is among their keys."""
    top = min(keys.shape[0], width // BLOCK_CELLS + 2)
    # the top greatest blocks: those above the top-th greatest key, then the first of those at it (which of
    # them changes no rank's key); a partition of the keys alone takes half the time of an argpartition
    least = ~np.partition(~keys, top - 1)[top - 1]  # ~key ascending == key descending
    above_least = np.flatnonzero(keys > least)
    greatest = np.concatenate([above_least, np.flatnonzero(keys == least)[: top - above_least.size]])
    ranked = greatest[np.argsort(~keys[greatest], kind="stable")]
    reach = int(np.searchsorted(np.cumsum(weights[ranked]), width))  # the first rank reaching width cells
    return keys[ranked[min(reach, ranked.size - 1)]]
