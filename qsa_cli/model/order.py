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
        v = scores + np.float32(0.0)
    u = v.view(np.uint32)
    keys = np.where(u & np.uint32(0x80000000), ~u, u | np.uint32(0x80000000))
    keys[np.isnan(v)] = 0
    return keys.astype(np.uint32, copy=False)
