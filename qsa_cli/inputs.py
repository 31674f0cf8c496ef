"""Inputs of a selection call: synthetic and seeded (spec section 5), or loaded from ``.npz``.

Also the poison values every output buffer is filled with before a kernel runs, so that a test can
check that exactly the entries that must be written were written.
"""

from __future__ import annotations

import functools
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .core.errors import GeometryError, InputError
from .core.files import atomic_write
from .core.geometry import (
    BLOCK_CELLS,
    BUTTERFLY_OFFSETS,
    CLUSTER_CHUNK_KEYS,
    CLUSTER_SIZES,
    IDX_DIM,
    IDX_HEADS,
    SPLIT_CHUNK_BLOCKS,
    STEP_NBID,
    STEP_NKV,
    STEP_WIDTH,
    TAIL_BONUS,
    TOPK_WIDE_THREADS,
    WARP,
    Call,
    block_weights,
    blocks_read,
    capacity_of,
    cluster_slice_blocks,
    validate_steps,
)
from .core.integrity import sealed
from .model.order import order_keys, threshold_key
from .record.vocabulary import DEFAULT_KEYS, SCORER_KEYS

SCORE_POISON_BITS = 0x7FBADBAD  # a NaN no arithmetic produces (payload kept by copies, not by math)
ID_POISON = -0x2BADBAD  # an id no selection produces
# NaNs of every kind, as adversarial inputs hold them: quiet, negative, with a payload, signalling, all bits set
ADVERSARIAL_NANS = np.array([0x7FC00000, 0xFFC00000, 0x7FC01234, 0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)

SCORE_SETS = ("continuous", "levels64", "equal", "adversarial")


def score_poison(shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, SCORE_POISON_BITS, dtype=np.uint32).view(np.float32)


def id_poison(shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, ID_POISON, dtype=np.int32)


SCORER_INPUTS = ("pooled", "dead", "q", "steps")  # ScorerInputs' arrays, in its field order


class _Sealed:
    """Inputs that keep their arrays' digests (the integrity rows' inputs hash, core/integrity.py): made once,
    the arrays read-only from then on (``integrity.sealed``), and pickled with the inputs, so that inputs a
    worker process made and hashed (runs/made.py) are not hashed again where the kernels run."""

    def arrays(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    @functools.cached_property
    def digests(self) -> dict[str, str]:
        return sealed(self.arrays())


@dataclass(frozen=True)
class ScorerInputs(_Sealed):
    pooled: np.ndarray  # float32 [max_blocks, IDX_DIM]
    dead: np.ndarray  # float32 [IDX_DIM]
    q: np.ndarray  # float32 [nq, IDX_HEADS, IDX_DIM]
    steps: np.ndarray  # int32 [nq, 4]
    keys: str = "given"  # one of SCORER_KEYS when generated

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in SCORER_INPUTS}

    @property
    def nq(self) -> int:
        return int(self.q.shape[0])

    @property
    def max_blocks(self) -> int:
        return int(self.pooled.shape[0])

    @property
    def capacity(self) -> int:
        return capacity_of(self.max_blocks)

    def key_bytes(self) -> int:
        """Bytes of keys a decode call must read once: blocks 0..max n_bid (the tail reads ``dead``)."""
        return blocks_read(self.steps) * IDX_DIM * 4


@dataclass(frozen=True)
class TopkInputs(_Sealed):
    scores: np.ndarray  # float32 [nq, max_blocks]; only blocks 0..n_bid of each row are read
    steps: np.ndarray  # int32 [nq, 4]
    score_set: str = "given"

    def arrays(self) -> dict[str, np.ndarray]:
        return {"scores": self.scores, "steps": self.steps}

    @property
    def nq(self) -> int:
        return int(self.scores.shape[0])

    @property
    def max_blocks(self) -> int:
        return int(self.scores.shape[1])

    @property
    def capacity(self) -> int:
        return capacity_of(self.max_blocks)


def rng_for(seed: int, *labels: int) -> np.random.Generator:
    """An independent stream per (seed, case labels), so cases do not depend on their order."""
    return np.random.default_rng([seed, *labels])


def synthetic_scorer_inputs(call: Call, seed: int, keys: str = DEFAULT_KEYS) -> ScorerInputs:
    """Keys with a shared direction plus noise (spec section 5), so scores spread like an indexer's; or, for
    ``keys="adversarial"``, keys and queries made to break the arithmetic (``adversarial_scorer_inputs``)."""
    if keys not in SCORER_KEYS:
        raise InputError(f"unknown scorer keys {keys!r} (expected one of {', '.join(SCORER_KEYS)})")
    if keys == "adversarial":
        return adversarial_scorer_inputs(call, seed)
    rng = rng_for(seed, call.ctx, call.nq, call.capacity)
    mb = call.max_blocks
    direction = rng.standard_normal(IDX_DIM, dtype=np.float32)
    amplitude = rng.standard_normal((mb, 1), dtype=np.float32)
    pooled = np.float32(0.5) * amplitude * direction + rng.standard_normal((mb, IDX_DIM), dtype=np.float32)
    dead = rng.standard_normal(IDX_DIM, dtype=np.float32)
    noise = rng.standard_normal((call.nq, IDX_HEADS, IDX_DIM), dtype=np.float32)
    q = np.float32(0.2) * direction + np.float32(0.1) * noise
    return ScorerInputs(pooled.astype(np.float32), dead, q.astype(np.float32), call.steps, DEFAULT_KEYS)


# ---- the adversarial scorer keys --------------------------------------------------------------------

_KEYS_STREAM = 0x6B657973  # the adversarial keys' own random stream ("keys"; the score sets' labels are 0-3)
_EXPONENTS = (-30.0, 30.0)  # magnitudes 1e-30..1e30: products overflow (past 3.4e38) and go subnormal
_ROW_SPANS = (0.5, 4.0, 60.0)  # decades a row's magnitudes span: half a decade, 4, or the whole range
_ELEMENT_SPECIALS = {"nan": 0.0005, "+inf": 0.0005, "-inf": 0.0005, "zero": 0.04}  # the share of elements
_SPECIAL_ROWS = (0.05, 20.0)  # the share of rows with this many times the specials
_SYMMETRIC_HEADS = 1 / 3  # query heads whose every lane holds one float4 (x == y, z == w): products can cancel
_CANCEL_MODES = {"none": 0.4, "in-lane": 0.3, "across": 0.3}  # keys cancelling within a lane, or across lanes
_NEAR_CANCEL = 0.5  # the share of cancelling keys scaled by 1 + 2^-10..2^-24 (nearly cancelling) instead of 1


def _wild(rng: np.random.Generator, rows: int) -> np.ndarray:
    """float32 [rows, IDX_DIM]: log-uniform magnitudes over a random stretch of 1e-30..1e30 a row, random
    signs, and NaNs of every kind, infinities and zeros of both signs sprinkled (thicker in a few rows)."""
    lo, hi = _EXPONENTS
    centre = rng.uniform(lo, hi, (rows, 1)).astype(np.float32)
    span = rng.choice(np.array(_ROW_SPANS, np.float32), (rows, 1))
    low, high = np.maximum(lo, centre - span / 2), np.minimum(hi, centre + span / 2)
    exponent = low + (high - low) * rng.random((rows, IDX_DIM), dtype=np.float32)
    x = np.exp(exponent * np.float32(np.log(10)))
    np.negative(x, out=x, where=rng.random((rows, IDX_DIM), dtype=np.float32) < 0.5)
    # one uniform draw an element: each special kind owns a slice of [0, 1), a thick row's draws are scaled down
    u = rng.random((rows, IDX_DIM), dtype=np.float32) / np.where(rng.random((rows, 1)) < _SPECIAL_ROWS[0],
                                                                  np.float32(_SPECIAL_ROWS[1]), np.float32(1))
    edge = 0.0
    for kind, share in _ELEMENT_SPECIALS.items():
        at = (u >= edge) & (u < edge + share)
        x[at] = _values(kind, rng, int(at.sum()), tied=False)
        edge += share
    return x


def _cancelling(rng: np.random.Generator, keys: np.ndarray) -> None:
    """Make some keys cancel against a symmetric head, in place: ``in-lane``, k.x = -k.y * f and k.z = -k.w * f
    in every lane (with q.x == q.y the lane's fma of x adds the exact -k.y q.y f to RN(k.y q.y): for f = 1,
    the product's rounding error is what is left); ``across``, the lanes with bit o set hold their partner's
    (lane ^ o) float4 times -f, so the butterfly's stage o adds two sums that cancel. f is 1 (exactly) or
    1 + 2^-10..2^-24 (nearly)."""

    rows = keys.shape[0]
    lanes = keys.reshape(rows, WARP, IDX_DIM // WARP)
    mode = rng.choice(list(_CANCEL_MODES), rows, p=list(_CANCEL_MODES.values()))
    near = rng.random(rows) < _NEAR_CANCEL
    f = np.where(near, 1 + 2.0 ** -rng.integers(10, 25, rows), 1.0).astype(np.float32)[:, None]
    inlane = mode == "in-lane"
    offset = rng.choice(BUTTERFLY_OFFSETS, rows)
    with np.errstate(invalid="ignore"):  # a signalling NaN times f
        lanes[inlane, :, 0] = -lanes[inlane, :, 1] * f[inlane]
        lanes[inlane, :, 2] = -lanes[inlane, :, 3] * f[inlane]
        for o in BUTTERFLY_OFFSETS:
            at = np.flatnonzero((mode == "across") & (offset == o))
            high = np.array([lane for lane in range(WARP) if lane & o])
            lanes[np.ix_(at, high)] = -lanes[np.ix_(at, high ^ o)] * f[at, :, None]


def adversarial_scorer_inputs(call: Call, seed: int) -> ScorerInputs:
    """Keys, the dead key and queries of magnitudes 1e-30..1e30 with random signs (products overflow to inf
    and go subnormal), NaNs of every kind, infinities and signed zeros, and keys whose products cancel,
    exactly or nearly, against a third of the query heads: within a lane's 4-term partial, and across the
    butterfly (``_cancelling``). Seeded like the others."""
    rng = rng_for(seed, call.ctx, call.nq, call.capacity, _KEYS_STREAM)
    keys = _wild(rng, call.max_blocks + 1)
    _cancelling(rng, keys)
    heads = _wild(rng, call.nq * IDX_HEADS).reshape(call.nq * IDX_HEADS, WARP, IDX_DIM // WARP)
    symmetric = rng.random(heads.shape[0]) < _SYMMETRIC_HEADS
    lane = heads[symmetric, 0]
    lane[:, 1], lane[:, 3] = lane[:, 0], lane[:, 2]
    heads[symmetric] = lane[:, None, :]
    q = heads.reshape(call.nq, IDX_HEADS, IDX_DIM)
    # a few queries' elements are too few for the sprinkle to hold every special: one head holds them
    specials = np.concatenate([rng.choice(ADVERSARIAL_NANS, 1), np.array([np.inf, -np.inf], np.float32)])
    q.reshape(-1, IDX_DIM)[rng.integers(q.shape[0] * IDX_HEADS), rng.choice(IDX_DIM, 3, replace=False)] = specials
    return ScorerInputs(keys[:-1], np.ascontiguousarray(keys[-1]), q, call.steps, "adversarial")


def synthetic_scores(call: Call, score_set: str, seed: int) -> TopkInputs:
    """One of the score sets; blocks past each query's n_bid hold +inf, which no correct kernel reads."""
    if score_set not in SCORE_SETS:
        raise InputError(f"unknown score set {score_set!r} (expected one of {', '.join(SCORE_SETS)})")
    rng = rng_for(seed, call.ctx, call.nq, call.capacity, SCORE_SETS.index(score_set))
    steps = call.steps
    s = rng.standard_normal((call.nq, call.max_blocks), dtype=np.float32)
    if score_set == "levels64":  # in place: the same float32 operations, no copies of a call's scores
        s *= np.float32(8)
        np.floor(s, out=s)
        s /= np.float32(8)
    elif score_set == "equal":
        s.fill(np.float32(rng.standard_normal()))  # in place: a new array's first writes cost as much as the draws
    rows = np.arange(call.nq)
    n_kv, n_bid = steps[:, STEP_NKV], steps[:, STEP_NBID]
    has_tail = n_kv % BLOCK_CELLS != 0
    if score_set in ("continuous", "adversarial"):
        s[rows[has_tail], n_bid[has_tail]] += TAIL_BONUS
    if score_set == "adversarial":
        for i in rows:
            _adversarial_row(rng, s[i, : n_bid[i] + 1], int(n_kv[i]), int(steps[i, STEP_WIDTH]))
    for i in rows:  # a row's slice, not a mask of the whole call
        s[i, n_bid[i] + 1:] = np.inf
    return TopkInputs(s, steps, score_set)


# ---- the adversarial score set --------------------------------------------------------------------
#
# Continuous N(0, 1) scores with NaNs of every kind, both zeros, subnormals of both signs and both infinities
# among them, and runs of tied scores across the borders where the kernels split a query's blocks. The cut
# (the key of the width-th cell, the threshold the radix select must find) is steered: onto the zeros, the
# NaNs (key 0), a subnormal or -inf in some rows, and in every row the runs most often repeat the cut's own
# key, so the select ends inside a run of ties and the tie cut crosses a border.

# Where a row's cut is steered (with its chance): where the normal scores put it, or onto a special value.
_CUT_REGIMES = {"normal": 0.4, "zero": 0.15, "nan": 0.15, "subnormal": 0.15, "-inf": 0.15}
# A run's value (with its chance): the cut's key; a key 1-3 ulps from it (the same top 24 bits, as a rule:
# the last radix pass decides); one normal value; NaN; a zero; a subnormal; -inf; +inf.
_RUN_KINDS = {"cut": 0.35, "near": 0.15, "level": 0.15, "nan": 0.1, "zero": 0.1, "subnormal": 0.08, "-inf": 0.05,
              "+inf": 0.02}
# a run's kind is drawn as Generator.choice(p=...) draws one (a uniform number against the chances' running sum),
# without its checks of the chances, which cost more than the draw in a loop over a row's borders
_RUN_KIND_NAMES = tuple(_RUN_KINDS)
_RUN_KIND_BOUNDS = np.cumsum(list(_RUN_KINDS.values()))
_RUN_KIND_BOUNDS /= _RUN_KIND_BOUNDS[-1]
_RUN_BLOCKS = (2, 10)  # a run's length in blocks: 2-9, at least one on each side of its border
_SAMPLED_BORDERS = 48  # runs at the cluster's chunks and the wide kernel's tiles: this many of their borders
_SPRINKLED = {"nan": 0.01, "zero": 0.02, "subnormal": 0.02, "-inf": 0.01}  # the share of blocks of each
_MAX_POS_INF = 16  # +inf blocks a row: few, so that the cut stays below them
# What a block holds, in the order the steering lowers them: its normal draw, a special value, a run's value,
# the special value kept for its kind and sign (so that every row holds each)
_DRAWN, _SPECIAL, _RUN, _KEPT = range(4)


def _values(kind: str, rng: np.random.Generator, n: int, tied: bool) -> np.ndarray:
    """``n`` float32 of a special ``kind``; ``tied``: all of one order key (zeros of both signs and NaNs of
    every kind are each one key)."""
    if kind == "nan":
        return rng.choice(ADVERSARIAL_NANS, n)
    if kind == "zero":
        return np.where(rng.random(n) < 0.5, np.float32(0.0), np.float32(-0.0))
    if kind in ("-inf", "+inf"):
        return np.full(n, np.float32(-np.inf if kind == "-inf" else np.inf))
    if kind == "subnormal":
        k = 1 if tied else n
        bits = rng.integers(1, 1 << 23, k, dtype=np.uint32) | (rng.integers(0, 2, k, dtype=np.uint32) << np.uint32(31))
        return np.broadcast_to(bits.view(np.float32), (n,)).copy()
    raise ValueError(f"no special values of kind {kind!r}")


def _same_key(value: np.float32, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` scores of ``value``'s order key: NaNs of every kind for a NaN, zeros of both signs for a zero."""
    if np.isnan(value):
        return _values("nan", rng, n, tied=True)
    if value == 0:
        return _values("zero", rng, n, tied=True)
    return np.full(n, value, np.float32)


def _cut(live: np.ndarray, weights: np.ndarray, width: int) -> np.float32:
    """A score with the key of the width-th cell when cells go by key, descending (the threshold key): the first
    block's of that key (which one changes nothing: the steering reads its key, and makes NaNs and zeros anew)."""
    keys = order_keys(live)
    return live[np.argmax(keys == threshold_key(keys, weights, width))]


def _steer_cut(rng: np.random.Generator, live: np.ndarray, weights: np.ndarray, width: int, value: np.float32,
               placed: np.ndarray) -> None:
    """Make ``value``'s key the cut: fewer than width cells above it (lowering blocks below it in the order of
    ``placed``, so that the special values and the runs stay where they can) and at least width at or above
    it (raising lower blocks that hold neither to it). The tail is never changed."""

    key = order_keys(np.array([value]))[0]
    if key <= order_keys(np.array([-np.inf], np.float32))[0]:  # NaN or -inf: only NaN is lower
        below = lambda n: _values("nan", rng, n, tied=True)  # noqa: E731
    else:  # under -1: below any zero, subnormal or value near them
        below = lambda n: -(np.abs(rng.standard_normal(n, dtype=np.float32)) + np.float32(1))  # noqa: E731
    free = slice(0, live.size - 1)  # the blocks before the tail, R cells each
    tail_above = int(weights[-1]) if order_keys(live[-1:])[0] > key else 0
    room = max(0, (width - 1 - tail_above) // BLOCK_CELLS)  # blocks above the key that keep it under width
    keep = int(rng.integers(room // 2, room + 1))
    above = np.flatnonzero(order_keys(live[free]) > key)
    if above.size > keep:
        order = np.concatenate([rng.permutation(above[placed[above] == rank]) for rank in range(_KEPT + 1)])
        lowered = order[: above.size - keep]
        live[lowered] = below(lowered.size)
    keys = order_keys(live)
    short = width - int(weights[keys >= key].sum())
    lower = np.flatnonzero((keys[free] < key) & (placed[free] == _DRAWN))
    count = min(lower.size, max(0, -(-short // BLOCK_CELLS)) + int(rng.integers(0, 64)))  # and a few ties past the cut
    live[rng.choice(lower, count, replace=False)] = _same_key(value, rng, count)


def _borders(rng: np.random.Generator, blocks: int) -> np.ndarray:
    """Where the kernels split a query's blocks 0..blocks-1: every border of the split's chunks and the
    cluster's CTA slices (at each of its sizes), and a sample of those of the cluster's 128-key chunks and
    the wide kernel's tiles."""
    slices, chunks = [], [np.arange(TOPK_WIDE_THREADS, blocks, TOPK_WIDE_THREADS)]
    for per in (cluster_slice_blocks(blocks, ctas) for ctas in CLUSTER_SIZES):
        starts = np.arange(0, blocks, per)
        slices.append(starts[1:])
        chunks.append((starts[:, None] + np.arange(CLUSTER_CHUNK_KEYS, per, CLUSTER_CHUNK_KEYS)).ravel())
    inner = np.concatenate(chunks)
    sampled = rng.permutation(np.unique(inner[inner < blocks]))[:_SAMPLED_BORDERS]
    return np.unique(np.concatenate([np.arange(SPLIT_CHUNK_BLOCKS, blocks, SPLIT_CHUNK_BLOCKS), *slices, sampled]))


_DRAW_CHUNK = 1 << 14  # uniform draws made at a time: a chunk's doubles stay in the core's cache


def _uniform_below(rng: np.random.Generator, n: int, share: float) -> np.ndarray:
    """``rng.random(n) < share``, drawn a cache-sized chunk at a time (the same draws: one 64-bit word each)."""
    below, chunk = np.empty(n, bool), np.empty(min(n, _DRAW_CHUNK))
    for start in range(0, n, _DRAW_CHUNK):
        drawn = rng.random(out=chunk[: min(_DRAW_CHUNK, n - start)])
        np.less(drawn, share, out=below[start: start + _DRAW_CHUNK])
    return below


def _adversarial_row(rng: np.random.Generator, live: np.ndarray, n_kv: int, width: int) -> None:
    """One query's blocks 0..n_bid (``live``: N(0, 1), the tail's bonus added where it has cells), in place."""
    weights = block_weights(n_kv, live.size)
    last = live.size - 1  # the tail keeps its score; a 0-cell tail is set last
    regime = rng.choice(list(_CUT_REGIMES), p=list(_CUT_REGIMES.values()))
    steer_to = None if regime == "normal" else _values(regime, rng, 1, tied=True)[0]
    near = _cut(live, weights, width) if steer_to is None else steer_to
    near = np.float32(-np.inf) if np.isnan(near) else near  # the lowest key above NaN's
    placed = np.full(live.size, _DRAWN, dtype=np.int8)
    cut_runs = []
    for border in _borders(rng, live.size):
        length = int(rng.integers(*_RUN_BLOCKS))
        start = max(0, int(border) - int(rng.integers(1, length)))
        run = slice(start, min(start + length, last))
        if run.stop <= run.start:
            continue
        placed[run] = _RUN
        kind = _RUN_KIND_NAMES[int(np.searchsorted(_RUN_KIND_BOUNDS, rng.random(), side="right"))]
        if kind == "cut":
            cut_runs.append(run)
        elif kind == "near":
            value, toward = near, np.float32(np.inf if rng.random() < 0.5 else -np.inf)
            for _ in range(int(rng.integers(1, 4))):
                value = np.nextafter(value, toward)
            live[run] = value
        elif kind == "level":
            live[run] = rng.standard_normal(dtype=np.float32)
        else:
            live[run] = _values(kind, rng, run.stop - run.start, tied=True)
    between = np.flatnonzero(placed[:last] == _DRAWN)  # the blocks before the tail outside the runs
    for kind, share in _SPRINKLED.items():
        at = between[_uniform_below(rng, between.size, share)]
        live[at], placed[at] = _values(kind, rng, at.size, tied=False), _SPECIAL
        for negative in (False, True):  # one of each sign outlasts the steering
            placed[at[np.signbit(live[at]) == negative][:1]] = _KEPT
    if between.size:
        at = rng.choice(between, min(between.size, int(rng.integers(1, _MAX_POS_INF + 1))), replace=False)
        live[at], placed[at] = np.inf, _SPECIAL
        placed[at[0]] = _KEPT
    if steer_to is not None:
        _steer_cut(rng, live, weights, width, steer_to, placed)
    cut = _cut(live, weights, width)  # runs at the cut's key keep it the cut: they only add cells at it
    for run in cut_runs:
        live[run] = _same_key(cut, rng, run.stop - run.start)
    if weights[-1] == 0:  # a block no kernel may select: on top, or at the cut's key
        live[-1] = np.inf if rng.random() < 0.5 else _same_key(cut, rng, 1)[0]


# ---- .npz files -----------------------------------------------------------------------------

_SCORER_ARRAYS = {"pooled": np.float32, "dead": np.float32, "q": np.float32, "steps": np.int32}
_TOPK_ARRAYS = {"scores": np.float32, "steps": np.int32}


NPY_MAGIC = b"\x93NUMPY"  # the first bytes of a .npy file (numpy.lib.format.MAGIC_PREFIX)


def _not_npz(path: Path) -> str | None:
    """Why ``path`` is not an .npz archive at all (None when it is a zip archive)."""
    with open(path, "rb") as fh:
        head = fh.read(len(NPY_MAGIC))
    if not head:
        return "an empty file"
    if zipfile.is_zipfile(path):
        return None
    if head == NPY_MAGIC:
        return "a single .npy array; an .npz holds named arrays, as numpy.savez writes them"
    return "not a zip archive of .npy arrays, as numpy.savez writes them"


def _member(path: Path, npz: Any, name: str) -> np.ndarray:
    """One array of an open .npz archive."""
    try:
        value = npz[name]
    except ValueError as exc:
        # numpy's words for an object array advise allow_pickle, which qsa never uses
        what = "holds Python objects (an object array)" if "allow_pickle" in str(exc) else f"cannot be read ({exc})"
        raise InputError(f"{path}: not a readable .npz file (array {name!r} {what})") from None
    if not isinstance(value, np.ndarray):  # numpy hands over a member that is not a .npy file as its bytes
        raise InputError(f"{path}: not a readable .npz file (member {name!r} is not a .npy array)")
    return value


def _read_npz(path: Path, expected: dict[str, type]) -> dict[str, np.ndarray]:
    try:
        why = _not_npz(path)
        if why is not None:
            raise InputError(f"{path}: not a readable .npz file ({why})")
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: _member(path, npz, name) for name in npz.files}
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except InputError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npz file ({' '.join(str(exc).split())})") from None
    missing = [n for n in expected if n not in arrays]
    if missing:
        raise InputError(f"{path}: missing array(s) {', '.join(missing)} (has {', '.join(sorted(arrays)) or 'none'})")
    for name, dtype in expected.items():
        if arrays[name].dtype != dtype:
            raise InputError(f"{path}: array {name!r} must be {np.dtype(dtype).name} (got {arrays[name].dtype})")
    return arrays


def _check_shape(path: Path, name: str, array: np.ndarray, shape: tuple[object, ...]) -> None:
    ok = array.ndim == len(shape) and all(s is None or a == s for a, s in zip(array.shape, shape))
    if not ok:
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise InputError(f"{path}: array {name!r} must have shape {want} (got {list(array.shape)})")


def _check_steps(path: Path, steps: np.ndarray, nq: int, max_blocks_: int) -> None:
    _check_shape(path, "steps", steps, (nq, 4))
    try:
        validate_steps(steps, max_blocks_)
    except GeometryError as exc:
        raise InputError(f"{path}: {exc}") from None


def load_scorer_inputs(path: str | os.PathLike[str]) -> ScorerInputs:
    path = Path(path)
    a = _read_npz(path, _SCORER_ARRAYS)
    _check_shape(path, "pooled", a["pooled"], (None, IDX_DIM))
    mb = a["pooled"].shape[0]
    if mb < 3:
        raise InputError(f"{path}: array 'pooled' needs at least 3 rows (max_blocks = capacity / 4 + 2)")
    _check_shape(path, "dead", a["dead"], (IDX_DIM,))
    _check_shape(path, "q", a["q"], (None, IDX_HEADS, IDX_DIM))
    nq = a["q"].shape[0]
    if nq == 0:
        raise InputError(f"{path}: array 'q' has no queries")
    _check_steps(path, a["steps"], nq, mb)
    return ScorerInputs(*(np.ascontiguousarray(a[n]) for n in ("pooled", "dead", "q", "steps")))


def load_topk_inputs(path: str | os.PathLike[str]) -> TopkInputs:
    path = Path(path)
    a = _read_npz(path, _TOPK_ARRAYS)
    _check_shape(path, "scores", a["scores"], (None, None))
    nq, mb = a["scores"].shape
    if nq == 0 or mb < 3:
        raise InputError(f"{path}: array 'scores' must be [nq >= 1, max_blocks >= 3] (got {[nq, mb]})")
    _check_steps(path, a["steps"], nq, mb)
    return TopkInputs(np.ascontiguousarray(a["scores"]), np.ascontiguousarray(a["steps"]), "given")


def save_npz_atomic(path: str | os.PathLike[str], **arrays: np.ndarray) -> None:
    with atomic_write(path, "wb") as fh:
        np.savez(fh, **arrays)
