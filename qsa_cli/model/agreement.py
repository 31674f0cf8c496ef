"""How far an inexact variant's output is from the reference's: the measures a variant declared not bitwise
(catalog.Variant.exact) is judged by instead of ``bytes ==`` (docs/checks.md, "Inexact variants").

Scores (float32 matrices of the same shape, every entry compared, the poison of unwritten entries too):

- ``differing``: entries whose bits differ.
- ``mismatched``: entries where a NaN or an infinity is not matched by the same bits on the other side (a
  NaN against a number, a NaN of another payload, an infinity against a number or the other infinity). Their
  error is not a number: they are counted here and left out of the three maxima below.
- ``max_abs_error``: the largest ``|subject - reference|`` (float64) over the entries finite on both sides
  (0 when there are none).
- ``max_rel_error``: the largest ``|subject - reference| / max(|reference|, 2**-126)``: relative to the
  reference, whose magnitude is taken as at least the smallest normal float32, so a reference of zero (of
  either sign) or a subnormal one divides by 2**-126 rather than by zero (+0.0 against -0.0 is 0).
- ``max_ulps``: the largest distance between the two as ordered integers (a float32's bits, negatives mirrored
  below zero, so -0.0 and +0.0 are both 0 and the smallest subnormals of either sign are 2 apart).

Selections (int32 id matrices, a query's ``width`` ids first, steps' STEP_WIDTH): per query the fraction of the
reference's ids (as a set) the subject's first ``width`` entries hold, then its minimum and mean over the
queries, and the queries whose selection is identical: the same set of ids, and the rest of the row (the
poison past the width) the same.
"""

from __future__ import annotations

import numpy as np

from ..core.geometry import STEP_WIDTH
from ..record.schema import ScoreErrors, SelectionAgreement

SMALLEST_NORMAL = float(np.finfo(np.float32).tiny)  # 2**-126: the least magnitude a relative error divides by


def ordered_ints(values: np.ndarray) -> np.ndarray:
    """float32 values as int64 in the order of the numbers: the bits of a non-negative float as they are, of a
    negative one mirrored below zero (so -0.0 and +0.0 are both 0); adjacent floats are 1 apart."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.int64)
    magnitude = bits & 0x7FFFFFFF
    return np.where(bits >> 31 == 1, -magnitude, magnitude)


def score_errors(subject: np.ndarray, reference: np.ndarray) -> ScoreErrors:
    """``subject``'s scores against ``reference``'s (float32, the same shape), by the module's rules."""
    if subject.shape != reference.shape:
        raise ValueError(f"score matrices {list(subject.shape)} and {list(reference.shape)} differ in shape")
    a, b = (np.ascontiguousarray(x, dtype=np.float32).ravel() for x in (subject, reference))
    same_bits = a.view(np.uint32) == b.view(np.uint32)
    finite = np.isfinite(a) & np.isfinite(b)
    mismatched = ~same_bits & ~finite  # a NaN or infinity on either side, and not the same bits on the other
    # the maxima are over the entries finite on both sides: a non-finite entry has the same bits on the other
    # side (no error) or is mismatched (counted)
    x, y = a[finite], b[finite]
    diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
    scale = np.maximum(np.abs(y.astype(np.float64)), SMALLEST_NORMAL)
    ulps = np.abs(ordered_ints(x) - ordered_ints(y))
    return ScoreErrors(
        entries=int(a.size),
        differing=int((~same_bits).sum()),
        mismatched=int(mismatched.sum()),
        max_abs_error=float(diff.max()) if diff.size else 0.0,
        max_rel_error=float((diff / scale).max()) if diff.size else 0.0,
        max_ulps=int(ulps.max()) if ulps.size else 0,
    )


def selection_agreement(subject: np.ndarray, reference: np.ndarray, steps: np.ndarray) -> SelectionAgreement:
    """``subject``'s ids against ``reference``'s (int32 [nq, SELECT_CAP]), each query's first ``width``
    entries as its selection, by the module's rules (a query of width 0 selects all of nothing: 1.0)."""
    if subject.shape != reference.shape or subject.ndim != 2 or subject.shape[0] != steps.shape[0]:
        raise ValueError(f"id matrices {list(subject.shape)} and {list(reference.shape)} do not match "
                         f"{steps.shape[0]} queries")
    fractions, identical = [], 0
    for q, width in enumerate(int(w) for w in steps[:, STEP_WIDTH]):
        theirs, ours = set(reference[q, :width].tolist()), set(subject[q, :width].tolist())
        fractions.append(len(ours & theirs) / len(theirs) if theirs else 1.0)
        identical += ours == theirs and subject[q, width:].tobytes() == reference[q, width:].tobytes()
    return SelectionAgreement(queries=len(fractions), identical_queries=identical,
                              min_id_fraction=min(fractions, default=1.0),
                              mean_id_fraction=float(np.mean(fractions)) if fractions else 1.0)
