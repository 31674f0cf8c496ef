"""The top-k's ranking key of a score, as ``qsa_order_key`` (kernels/qsa_common.cuh) computes it: what every
top-k model ranks by, and what the adversarial score set (inputs.py) steers its cut with."""

from __future__ import annotations

import numpy as np


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
