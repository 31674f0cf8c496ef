"""Exact CPU model of the block scorer (spec section 2), bit for bit.

A score's arithmetic is fixed by the reference kernel: lane ``l`` of a warp forms the partial dot product of
dims ``4l..4l+3`` with explicit round-to-nearest intrinsics, and the 32 partials are summed by a butterfly.
The new decode scorer sums a lane's ``4 x nq`` values by recursive halving instead; ``halving_sums`` simulates
that exchange lane by lane so a test can show it adds the butterfly's operands in the butterfly's order.

NaN: every float32 add, multiply and fma of an NVIDIA GPU whose result is NaN gives the one NaN 0x7FFFFFFF,
whether an operand was a NaN (its payload and sign are not kept) or the operation was invalid (inf - inf,
0 * inf); the CUDA Programming Guide states it for NaN operands ("Floating-Point Standard"), and
tests/test_gpu_scores.py checks both cases on the scorer's own lane partial and butterfly. numpy keeps an x86
payload instead (the operand's, or 0xFFC00000 for an invalid operation), so the functions that return
intermediate values (``fma_f32``, ``lane_partials``, ``butterfly_sum``, ``halving_sums``) write the GPU's NaN.
``score_blocks`` needs no such step: relu turns every NaN head into +0, so scores never hold a NaN.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from ..core.errors import GeometryError
from ..core.geometry import (
    BLOCK_CELLS,
    BUTTERFLY_OFFSETS,
    HALVE_MAX_QUERIES,
    IDX_DIM,
    IDX_HEADS,
    MAX_QUERIES,
    PAIRED_SPLITS,
    QUERY_LANES,
    STEP_NBID,
    STEP_NKV,
    TAIL_BONUS,
    WARP,
    validate_steps,
)
from ..inputs import ScorerInputs, score_poison

ORDERS = ("butterfly", "halve", "paired", "quarters")

LANE_DIMS = IDX_DIM // WARP  # 4: a lane's float4 of the key and of a query head
_CHUNK_PARTIALS = 1 << 20  # lane partials per chunk of blocks (4 MB of float32): bounds memory, fits caches
_LOW28 = np.uint64((1 << 28) - 1)
_IEEE_QUIET = {"over": "ignore", "invalid": "ignore", "under": "ignore"}  # inf and NaN are data here
CUDA_NAN_BITS = 0x7FFFFFFF  # the NaN a GPU's float32 arithmetic returns (module docstring)


def cuda_nan(x: np.ndarray) -> np.ndarray:
    """``x`` (float32) with every NaN made the GPU's, in place; returns ``x``."""
    np.copyto(x.view(np.uint32), np.uint32(CUDA_NAN_BITS), where=np.isnan(x))
    return x


def fma_f32(a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike) -> np.ndarray:
    """``fmaf(a, b, c)`` rounded to nearest-even once, as IEEE 754 (and ``__fmaf_rn``) does; broadcasts.

    Operands are taken as float32 (converted first, like a float argument to ``fmaf``).

    The float32 product is exact in float64. The float64 sum is rounded to odd (TwoSum's error term says
    whether it was inexact and on which side the exact sum lies); a value rounded to odd at 53 bits rounds
    correctly to any precision of 51 bits or less, so the cast to float32 is the correctly rounded fma,
    subnormal and overflowing results included. Non-finite sums need no adjustment: IEEE arithmetic already
    gives the fma's inf / NaN, and ``p + c`` gives the fma's signed zeros.
    """
    with np.errstate(**_IEEE_QUIET):
        a64, b64, c64 = (np.asarray(x, dtype=np.float32).astype(np.float64) for x in (a, b, c))
        p = a64 * b64  # exact: 48 significant bits, exponents within [-298, 256]
        s = p + c64
        bp = s - p
        err = (p - (s - bp)) + (c64 - bp)  # exact: s + err == p + c (NaN when s is not finite)
        even = (np.asarray(s).view(np.uint64) & np.uint64(1)) == 0
        to_odd = (err != 0) & np.isfinite(err) & even
        s = np.where(to_odd, np.nextafter(s, np.copysign(np.inf, err)), s)
        return cuda_nan(np.asarray(s.astype(np.float32)))


def _partials(keys: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Lane partials, lanes-major: keys f32 [n, 128], q f32 [H, 128] -> f32 [H, 32, n].

    Blocks are the innermost axis, so every numpy loop runs over a long row against one per-lane scalar.
    Each fma is computed as RN32(RN64(k*q + p)), which is the correctly rounded fma unless the float64 sum
    sits on a float32 midpoint (or on the subnormal grid's); all such sums have the low 28 bits of their
    float64 significand clear and are no float32, so those few are recomputed exactly with ``fma_f32``.
    """
    n = keys.shape[0]
    kt = np.ascontiguousarray(keys.reshape(n, WARP, LANE_DIMS).transpose(2, 1, 0))  # [dim of float4, lane, block]
    qc = q.reshape(-1, WARP, LANE_DIMS)
    out = np.empty((qc.shape[0], WARP, n), np.float32)
    t = np.empty((WARP, n))
    low = np.empty(t.shape, np.uint64)
    rounded = np.empty(t.shape, np.float32)
    with np.errstate(**_IEEE_QUIET):  # from the casts on: a signalling NaN raises "invalid" when converted
        kt64 = kt.astype(np.float64)
        q64 = qc.astype(np.float64)
        for h in range(qc.shape[0]):
            p = out[h]
            np.multiply(kt[1], qc[h, :, 1, None], out=p)  # __fmul_rn(k.y, q.y): numpy's float32 product
            for c in (0, 2, 3):  # __fmaf_rn(k.x, q.x, p), then .z, then .w
                np.multiply(kt64[c], q64[h, :, c, None], out=t)
                np.add(t, p, out=t)
                np.bitwise_and(t.view(np.uint64), _LOW28, out=low)
                if low.min() != 0:  # the rule on real data: min is the cheapest "any zero" numpy has
                    np.copyto(p, t, casting="same_kind")
                    continue
                # adversarial keys clear the low bits of a third of the sums (zeros, exact products): a
                # sum no float32 holds is the one the double rounding can get wrong, and they are few, so
                # they are found over the whole array, not among every sum with clear bits (inf, NaN and
                # a float32 are the fma's already); p, t and kt[c] are contiguous: ravel() is a view
                np.copyto(rounded, t, casting="same_kind")
                odd = np.flatnonzero((low == 0) & (rounded != t))
                odd = odd[np.isfinite(t.ravel()[odd])]
                exact = fma_f32(kt[c].ravel()[odd], qc[h, odd // n, c], p.ravel()[odd])
                np.copyto(p, rounded)
                p.ravel()[odd] = exact
    return out


def lane_partials(keys: np.ndarray, qh: np.ndarray) -> np.ndarray:
    """Lane ``l``'s partial of dims ``4l..4l+3`` as ``qsa_lane_partial`` computes it: keys f32 [nb, 128],
    qh f32 [..., 128] -> f32 [..., nb, 32].

    ``p = fmul_rn(k.y, q.y); p = fma_rn(k.x, q.x, p); p = fma_rn(k.z, q.z, p); p = fma_rn(k.w, q.w, p)``
    with ``k.x .. k.w`` = dims ``4l .. 4l+3``.
    """
    keys = np.asarray(keys, np.float32)
    qh = np.asarray(qh, np.float32)
    lead = qh.shape[:-1]
    part = cuda_nan(_partials(keys, qh.reshape(-1, IDX_DIM)))
    return np.swapaxes(part, -1, -2).reshape(*lead, keys.shape[0], WARP)


def _butterfly(v: np.ndarray) -> np.ndarray:
    """butterfly_sum with the lanes on axis 0 (the scorer's layout: blocks stay the long inner axis)."""
    for o in BUTTERFLY_OFFSETS:
        v = v[:o] + v[o : 2 * o]
    return v[0]


def butterfly_sum(v: np.ndarray) -> np.ndarray:
    """The reference's reduction, f32 [..., 32 lanes] -> f32 [...]: for o in 16, 8, 4, 2, 1, lane l adds lane l^o.

    Vectorised as ``v[:o] + v[o:2o]``, which is exactly lanes 0..o-1's own additions (``mine + partner's``).
    Lanes o..2o-1 need no tracking: after the stage lane ``l ^ o`` holds ``b + a`` where lane ``l`` holds
    ``a + b``, the same bits because float addition commutes, so every later partner read finds the same
    value in the kept lower lanes. The result is lane 0's (every lane's: a NaN is the GPU's one NaN).
    """
    v = np.asarray(v, np.float32)
    if v.shape[-1] != WARP:
        raise ValueError(f"butterfly_sum needs {WARP} lanes on the last axis (got {v.shape})")
    with np.errstate(**_IEEE_QUIET):
        return cuda_nan(np.asarray(_butterfly(np.moveaxis(v, -1, 0))))


def _halving(v: np.ndarray) -> np.ndarray:
    """halving_sums with layout f32 [m values, lanes, ...] -> f32 [m, ...]: the lanes (32, or the quarters
    scorer's 4 of a query) exchange at the butterfly's offsets below their count."""
    m, lanes = v.shape[:2]
    rest = v.shape[2:]
    for o in (o for o in BUTTERFLY_OFFSETS if o < lanes):
        held = v.shape[0]
        # lane l = (hi, bit, lo) with l = hi*2o + bit*o + lo: bit is l & o, and lane l ^ o flips only bit.
        g = v.reshape(held, lanes // (2 * o), 2, o, *rest)
        clear, set_ = g[:, :, 0], g[:, :, 1]
        if held > 1:  # halve: each lane keeps one half and adds the partner's copy of that half
            half = held // 2
            new = np.empty((half, *g.shape[1:]), np.float32)
            np.add(clear[:half], set_[:half], out=new[:, :, 0])  # l & o == 0 keeps the lower half
            np.add(set_[half:], clear[half:], out=new[:, :, 1])  # l & o != 0 keeps the upper half
        else:  # one value left: plain butterfly
            new = np.empty_like(g)
            np.add(clear, set_, out=new[:, :, 0])
            np.add(set_, clear, out=new[:, :, 1])
        v = new.reshape(new.shape[0], lanes, *rest)
    return v[0, :: lanes // m]


def halving_sums(v: np.ndarray) -> np.ndarray:
    """The new decode scorer's reduction, simulated lane by lane: f32 [..., 32 lanes, m values] -> f32 [..., m].

    ``m`` is a power of two up to 32 (the kernel uses 4, 8 or 16: ``4 * nq`` padded, value ``j = 4*query + head``,
    padding zeros). A lane holds its values in registers ``r[0..m-1]``. At offset ``o`` = 16, 8, 4, ... while a
    lane holds ``m' > 1`` values::

        up = (lane & o) != 0
        for i in 0 .. m'/2 - 1:
            send = up ? r[i] : r[i + m'/2]           // the half the partner keeps
            keep = up ? r[i + m'/2] : r[i]           // upper half iff lane & o
            r[i] = keep + __shfl_xor_sync(~0u, send, o)   // mine + partner's
        m' /= 2

    then, with one value left, the remaining offsets are ``r[0] += __shfl_xor_sync(~0u, r[0], o)``. Each halving
    offset fixes one bit of the value index from the top, so after it all lanes ``l`` with
    ``l >> (5 - log2 m) == j`` hold the full sum of value ``j``: value ``j`` lives in lanes
    ``j * 32/m .. (j+1) * 32/m - 1``, and the kernel reads it from lane ``j * 32/m``, as this function does.
    Every addition is the butterfly's pair (lane l, lane l ^ o) at the same offset, operands in the same order.
    """
    v = np.asarray(v, np.float32)
    m = v.shape[-1]
    if v.ndim < 2 or v.shape[-2] != WARP or m < 1 or m > WARP or m & (m - 1):
        raise ValueError(f"halving_sums needs [..., {WARP} lanes, m values], m a power of two <= {WARP} (got {v.shape})")
    with np.errstate(**_IEEE_QUIET):
        return cuda_nan(np.moveaxis(_halving(np.moveaxis(v, (-1, -2), (0, 1))), 0, -1))


def halve_calls(nq: int) -> list[tuple[int, int]]:
    """The halving scorer's launches for a window of ``nq`` queries: ``(first query, end)`` of each.

    At most 4 queries fit a lane's registers, so 1-4 queries are one call and 5-8 are two: queries 0..3,
    then 4..nq-1.
    """
    if not 1 <= nq <= MAX_QUERIES:
        raise GeometryError(f"the halving scorer takes 1-{MAX_QUERIES} queries (got {nq})")
    return [(s, min(s + HALVE_MAX_QUERIES, nq)) for s in range(0, nq, HALVE_MAX_QUERIES)]


def paired_calls(nq: int) -> list[tuple[int, int]]:
    """The paired scorer's sub-windows for ``nq`` queries: ``(first query, end)`` of the even warp's and,
    where it has any, the odd warp's (``PAIRED_SPLITS``); each reduced as one halving call."""
    if not 1 <= nq <= MAX_QUERIES:
        raise GeometryError(f"the paired scorer takes 1-{MAX_QUERIES} queries (got {nq})")
    even, odd = PAIRED_SPLITS[nq - 1]
    return [(0, even), *([(even, even + odd)] if odd else [])]


def _pad_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _reduce_halve(part: np.ndarray, calls: list[tuple[int, int]]) -> np.ndarray:
    """d of every (query, head): part f32 [4*nq, 32, n] -> f32 [4*nq, n], each call's values reduced together."""
    d = np.empty((part.shape[0], part.shape[2]), np.float32)
    for first, end in calls:
        vals = part[IDX_HEADS * first : IDX_HEADS * end]
        m = _pad_pow2(vals.shape[0])
        if m != vals.shape[0]:
            vals = np.concatenate([vals, np.zeros((m - vals.shape[0], *vals.shape[1:]), np.float32)])
        d[IDX_HEADS * first : IDX_HEADS * end] = _halving(vals)[: IDX_HEADS * (end - first)]
    return d


def _reduce_quarters(part: np.ndarray) -> np.ndarray:
    """d of every (query, head) as the quarters scorer sums it: part f32 [4*nq, 32, n] -> f32 [4*nq, n].

    Lane ``t`` of a query's ``QUERY_LANES`` holds butterfly lanes ``t, t + 4, ... t + 28`` and adds them at
    offsets 16, 8 and 4 in its registers (``v[:o] + v[o:2o]`` keeps the lanes' order, so lane ``t`` stays at
    index ``t``); the four lanes then exchange the query's 4 heads by halving at offsets 2 and 1."""
    v = part
    for o in (o for o in BUTTERFLY_OFFSETS if o >= QUERY_LANES):
        v = v[:, :o] + v[:, o : 2 * o]
    heads = v.reshape(-1, IDX_HEADS, QUERY_LANES, v.shape[-1])  # [nq, heads, lanes, n]
    return np.concatenate([_halving(query) for query in heads])


def score_blocks(inputs: ScorerInputs, order: str = "butterfly") -> np.ndarray:
    """The scores a scorer kernel writes: f32 [nq, max_blocks], the poison past each query's ``n_bid``.

    ``order`` is the reduction: ``"butterfly"`` (reference and old decode scorer), ``"halve"`` (new decode
    scorer, 1-8 queries, launched as ``halve_calls(nq)``), ``"paired"`` (its sub-windows ``paired_calls(nq)``)
    or ``"quarters"`` (a quarter of the butterfly's lanes in a lane's registers, ``_reduce_quarters``).
    All give the same bits; computing each is the test.
    """
    return scores_in_orders(inputs, (order,))[order]


def scores_in_orders(inputs: ScorerInputs, orders: Iterable[str]) -> dict[str, np.ndarray]:
    """``score_blocks`` of each of ``orders``, from one pass over the lane partials: every order's lanes hold
    the same fma chains (``qsa_lane_partial``), and the orders differ only in how they add them, so each
    order's additions are computed on its own while the partials, most of the work, are computed once."""
    orders = tuple(dict.fromkeys(orders))
    if unknown := [o for o in orders if o not in ORDERS]:
        raise ValueError(f"unknown order {unknown[0]!r} (expected one of {', '.join(ORDERS)})")
    steps = inputs.steps
    validate_steps(steps, inputs.max_blocks)
    nq = inputs.nq
    n_kv = steps[:, STEP_NKV].astype(np.int64)
    n_bid = steps[:, STEP_NBID].astype(np.int64)
    n_active = int(n_bid.max()) + 1
    q = np.asarray(inputs.q, np.float32).reshape(nq * IDX_HEADS, IDX_DIM)
    dead_part = _partials(np.asarray(inputs.dead, np.float32)[None], q)[:, :, 0]
    scores = {order: np.empty((nq, n_active), np.float32) for order in orders}
    chunk = max(1, _CHUNK_PARTIALS // (nq * IDX_HEADS * WARP))
    with np.errstate(**_IEEE_QUIET):
        for start in range(0, n_active, chunk):
            stop = min(start + chunk, n_active)
            part = _partials(inputs.pooled[start:stop], q)
            for i in np.flatnonzero((n_bid >= start) & (n_bid < stop)):
                # a query's tail block is scored with the dead key, whatever the window's other queries read there
                heads = slice(IDX_HEADS * i, IDX_HEADS * (i + 1))
                part[heads, :, n_bid[i] - start] = dead_part[heads]
            for order in orders:
                scores[order][:, start:stop] = _head_sums(_reduce(part, order, nq), nq)
    out = {}
    for order, computed in scores.items():
        out[order] = score_poison((nq, inputs.max_blocks))
        for i in range(nq):
            out[order][i, : n_bid[i] + 1] = computed[i, : n_bid[i] + 1]
            if n_kv[i] % BLOCK_CELLS:
                out[order][i, n_bid[i]] += TAIL_BONUS
    return out


def _reduce(part: np.ndarray, order: str, nq: int) -> np.ndarray:
    """d of every (query, head) in ``order``'s additions: part f32 [4*nq, 32, n] -> f32 [4*nq, n], ``part`` left
    as it was (every order reads the same)."""
    if order == "quarters":
        return _reduce_quarters(part)
    if order == "butterfly":
        return _butterfly(np.moveaxis(part, 1, 0))
    return _reduce_halve(part, {"halve": halve_calls, "paired": paired_calls}[order](nq))


def _head_sums(d: np.ndarray, nq: int) -> np.ndarray:
    """A block's score of each query: the sum of its heads' positive parts, heads in order, f32 [nq, n]."""
    r = np.where(d > 0, d, np.float32(0)).reshape(nq, IDX_HEADS, d.shape[-1])  # NaN and -0 -> +0
    s = np.float32(0) + r[:, 0]
    for h in range(1, IDX_HEADS):
        s += r[:, h]
    return s


def _check_f32(*arrays: np.ndarray) -> None:
    for a in arrays:
        if a.dtype != np.float32:
            raise TypeError(f"scores must be float32 (got {a.dtype})")


def scores_hash(scores: np.ndarray, steps: np.ndarray) -> str:
    """16 hex digits (blake2b, 8 bytes) over each query's blocks 0..n_bid as little-endian float32, queries in order."""
    _check_f32(scores)
    h = hashlib.blake2b(digest_size=8)
    for i, nb in enumerate(steps[:, STEP_NBID]):
        h.update(np.ascontiguousarray(scores[i, : int(nb) + 1], dtype="<f4").tobytes())
    return h.hexdigest()


def first_difference(a: np.ndarray, b: np.ndarray, steps: np.ndarray) -> tuple[int, int] | None:
    """The first (query, block), blocks 0..n_bid of each query in order, whose float32 bits differ; None if none."""
    _check_f32(a, b)
    for i, nb in enumerate(steps[:, STEP_NBID]):
        n = int(nb) + 1
        diff = np.flatnonzero(a[i, :n].view(np.uint32) != b[i, :n].view(np.uint32))
        if diff.size:
            return i, int(diff[0])
    return None
