"""The scorer's CPU model: exact fma, butterfly, recursive halving, and the scores, bit for bit."""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qsa_cli.core.geometry import IDX_DIM, IDX_HEADS, TAIL_BONUS, WARP, Call, GeometryError, max_blocks, window_steps
from qsa_cli.inputs import ADVERSARIAL_NANS, SCORE_POISON_BITS, ScorerInputs, rng_for, synthetic_scorer_inputs
from qsa_cli.model import scores as scores_model
from qsa_cli.model.scores import (
    CUDA_NAN_BITS,
    ORDERS,
    butterfly_sum,
    first_difference,
    fma_f32,
    halve_calls,
    halving_sums,
    lane_partials,
    paired_calls,
    score_blocks,
    scores_hash,
    scores_in_orders,
)

F32 = np.float32
F32_MAX = float(np.finfo(np.float32).max)
SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, F32_MAX, -F32_MAX], F32)


def canon(x: np.ndarray) -> bytes:
    """Bytes of a float32 array with every NaN made the GPU's NaN, 0x7FFFFFFF: what the model writes where
    numpy's references (and fma_ref) keep another NaN."""
    u = np.array(x, F32).view(np.uint32)
    u[np.isnan(np.asarray(x, F32))] = CUDA_NAN_BITS
    return u.tobytes()


# ---- exact fma ------------------------------------------------------------------------------------


def round_f32(x: Fraction) -> float:
    """x rounded to the nearest float32, ties to even, with float32's subnormals and overflow."""
    neg, x = x < 0, abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()  # floor(log2 x) or one less
    if Fraction(2) ** (e + 1) <= x:
        e += 1
    q = max(e, -126) - 23  # exponent of the ulp
    n = round(x / Fraction(2) ** q)  # Fraction rounds half to even
    v = math.inf if n * Fraction(2) ** q >= 2**128 else math.ldexp(n, q)
    return -v if neg else v


def fma_ref(a: float, b: float, c: float) -> F32:
    """IEEE 754 fusedMultiplyAdd in float32, round to nearest even: Fractions for finite values."""
    a, b, c = float(a), float(b), float(c)
    if math.isnan(a) or math.isnan(b) or math.isnan(c):
        return F32(np.nan)
    p_neg = (math.copysign(1, a) < 0) != (math.copysign(1, b) < 0)
    if math.isinf(a) or math.isinf(b):
        if a == 0 or b == 0 or (math.isinf(c) and (c < 0) != p_neg):
            return F32(np.nan)
        return F32(-np.inf if p_neg else np.inf)
    if math.isinf(c):
        return F32(c)
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:  # exact zero: -0 only as the sum of two negative zeros
        both_neg_zero = (a == 0 or b == 0) and p_neg and c == 0 and math.copysign(1, c) < 0
        return F32(-0.0 if both_neg_zero else 0.0)
    return F32(round_f32(exact))


def ulp(x: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(x).astype(F32))


def trap_triples(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a*b = +-ulp(c)/2 * (1 - 2^-46): the float64 sum is an exact float32 midpoint, the exact sum is not.

    c has an odd significand, so rounding the float64 sum again would tie away from the correct result.
    """
    c = rng.uniform(1, 2, n).astype(F32) * F32(2.0) ** rng.integers(-90, 100, n).astype(F32)
    c = (c.view(np.uint32) | 1).view(F32) * rng.choice([F32(-1), F32(1)], n)
    half = ulp(c).astype(np.float64) / 2
    split = rng.integers(0, 30, n)  # keeps a normal: a subnormal a could not hold 1 + 2^-23
    a = (F32(1 + 2.0**-23) * np.ldexp(half, split)).astype(F32)
    b = (F32(1 - 2.0**-23) * np.ldexp(1.0, -split) * rng.choice([-1.0, 1.0], n)).astype(F32)
    return a, b, c


def adversarial_triples(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = 400
    sign = lambda k: rng.choice([F32(-1), F32(1)], k)  # noqa: E731
    families = [trap_triples(rng, n)]
    # ties: a*b = (k + 1/2) ulp(c) exactly
    c = rng.standard_normal(n).astype(F32) * F32(10) ** rng.integers(-30, 30, n).astype(F32)
    families.append(((2 * rng.integers(0, 8, n) + 1).astype(F32) * sign(n), (ulp(c) / 2).astype(F32), c))
    # cancellation: c = -RN(a*b) nudged by a few ulps, the exact result is the product's low bits
    a = rng.standard_normal(n).astype(F32)
    b = rng.standard_normal(n).astype(F32) * F32(10) ** rng.integers(-20, 20, n).astype(F32)
    c = -(a * b) + rng.integers(-3, 4, n).astype(F32) * ulp(a * b)
    families.append((a, b, c.astype(F32)))
    # subnormal results and operands
    a = np.ldexp(rng.uniform(1, 2, n), rng.integers(-80, -60, n)).astype(F32) * sign(n)
    b = np.ldexp(rng.uniform(1, 2, n), rng.integers(-80, -60, n)).astype(F32)
    c = rng.integers(1, 1 << 23, n).astype(np.uint32).view(F32) * sign(n)
    families.append((a, b, c))
    # overflow: exactly max + ulp/2 (ties to inf), just below it (max), and products past the range
    half_ulp_max = F32(2.0**103)
    families.append(
        (
            np.array([half_ulp_max, F32(2.0**103 * (1 + 2.0**-23)), F32(3e38), F32(-3e38), F32(1e20)], F32),
            np.array([1, 1 - 2.0**-23, 2, 2, 1e19], F32),
            np.array([F32_MAX, F32_MAX, F32_MAX, 0, -F32_MAX], F32),
        )
    )
    # every combination of special values
    grid = np.array(np.meshgrid(SPECIALS, SPECIALS, SPECIALS)).reshape(3, -1)
    families.append((grid[0], grid[1], grid[2]))
    return tuple(np.concatenate([f[i] for f in families]).astype(F32) for i in range(3))


def random_triples(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Half random bit patterns (every class of float32), half log-uniform magnitudes 1e-45..3e38."""
    bits = rng.integers(0, 1 << 32, (3, n // 2), dtype=np.uint64).astype(np.uint32).view(F32)
    mags = (10.0 ** rng.uniform(-45, 38.5, (3, n - n // 2)) * rng.choice([-1, 1], (3, n - n // 2))).astype(F32)
    return tuple(np.concatenate([bits[i], mags[i]]) for i in range(3))


def check_fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    got = fma_f32(a, b, c)
    assert got.dtype == F32 and got.shape == a.shape
    want = np.array([fma_ref(x, y, z) for x, y, z in zip(a, b, c)], F32)
    bad = np.flatnonzero(got.view(np.uint32) != np.frombuffer(canon(want), np.uint32))
    assert bad.size == 0, [(a[i], b[i], c[i], got[i], want[i]) for i in bad[:5]]


@pytest.mark.parametrize("seed", [11, 12])
def test_fma_adversarial(seed: int) -> None:
    a, b, c = adversarial_triples(rng_for(seed))
    check_fma(a, b, c)


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_fma_random(seed: int) -> None:
    check_fma(*random_triples(rng_for(seed), 4000))


def test_traps_defeat_plain_double_rounding() -> None:
    """The trap family is meaningful: rounding the float64 sum to float32 again gets every one wrong."""
    a, b, c = trap_triples(rng_for(31), 200)
    naive = (a.astype(np.float64) * b + c).astype(F32)
    assert np.all(naive != fma_f32(a, b, c))


def test_fma_signed_zeros_and_broadcast() -> None:
    z = np.array([0.0, -0.0], F32)
    got = fma_f32(z[:, None, None], np.float32(1), z[None, :, None] + np.zeros((1, 1, 2), F32))
    assert got.shape == (2, 2, 2)
    assert np.signbit(fma_f32(F32(-0.0), F32(1), F32(-0.0)))
    assert not np.signbit(fma_f32(F32(-0.0), F32(1), F32(0.0)))
    assert not np.signbit(fma_f32(F32(2), F32(3), F32(-6)))
    assert np.signbit(fma_f32(F32(-1e-30), F32(1e-30), F32(0)))  # underflows to -0


# ---- lane partials --------------------------------------------------------------------------------


def partials_ref(keys: np.ndarray, qh: np.ndarray) -> np.ndarray:
    """qsa_lane_partial step by step with the exact fma: keys [nb, 128], qh [128] -> [nb, 32]."""
    k = keys.reshape(-1, 32, 4)
    q = qh.reshape(32, 4)
    with np.errstate(over="ignore", invalid="ignore"):
        p = (k[..., 1].astype(np.float64) * q[:, 1]).astype(F32)  # one rounding of the exact product
    for c in (0, 2, 3):
        p = fma_f32(k[..., c], q[:, c], p)
    return p


def planted_traps(rng: np.random.Generator, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys and one query head whose lane partials hit a double-rounding trap at the x, z or w fma."""
    keys = np.empty((nb, 32, 4), F32)
    q = np.empty((32, 4), F32)
    a, b, c = (x.reshape(nb, 32) for x in trap_triples(rng, nb * 32))
    a, b = a * (b / b[0]), b[0]  # one query value per lane: b / b[0] is an exact +-power of two
    for lane in range(32):
        step = lane % 3  # the trap sits at fma x, z or w; the earlier steps hand it c exactly
        q[lane] = [b[lane], 1, 1, 1] if step == 0 else ([1, 0, b[lane], 1] if step == 1 else [1, 0, 0, b[lane]])
        keys[:, lane] = 0
        if step == 0:
            keys[:, lane, 1], keys[:, lane, 0] = c[:, lane], a[:, lane]
        elif step == 1:
            keys[:, lane, 0], keys[:, lane, 2] = c[:, lane], a[:, lane]
        else:
            keys[:, lane, 0], keys[:, lane, 3] = c[:, lane], a[:, lane]
    return keys.reshape(nb, IDX_DIM), q.reshape(IDX_DIM)


@pytest.mark.parametrize("seed", [41, 42])
def test_lane_partials_traps(seed: int) -> None:
    keys, q = planted_traps(rng_for(seed), 64)
    got = lane_partials(keys, q)
    assert got.shape == (64, 32)
    assert got.tobytes() == canon(partials_ref(keys, q))


def edge_traps(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Traps whose correct fma is subnormal, or is +-FLT_MAX beside the overflow threshold (a double rounding
    gives the wrong subnormal, or inf / the float below max): a*b = +-half ulp(c) * (1 - i^2 2^-46)."""
    i = rng.integers(1, 64, n)
    sub = rng.random(n) < 0.5
    c_sign, ab_sign = rng.choice([-1.0, 1.0], (2, n))
    c = np.where(sub, np.ldexp(2.0 * rng.integers(1 << 20, 1 << 22, n) + 1, -149), F32_MAX) * c_sign
    a = np.ldexp(1 + i * 2.0**-23, np.where(sub, -75, 52))  # half ulp(c) = 2^-150 or 2^103
    b = np.ldexp(1 - i * 2.0**-23, np.where(sub, -75, 51)) * c_sign * ab_sign
    return a.astype(F32), b.astype(F32), c.astype(F32)


@pytest.mark.parametrize("seed", [43, 44])
def test_lane_partials_traps_at_range_edges(seed: int) -> None:
    """The fast path's midpoint test also catches the subnormal grid's midpoints and the overflow threshold."""
    rows = 24
    a, b, c = (x.reshape(rows, 32) for x in edge_traps(rng_for(seed), rows * 32))
    want = np.array([fma_ref(*t) for t in zip(a.ravel(), b.ravel(), c.ravel())], F32).reshape(rows, 32)
    with np.errstate(over="ignore"):
        naive = (a.astype(np.float64) * b + c).astype(F32)
    assert np.all(naive.view(np.uint32) != want.view(np.uint32))  # every case is a trap
    assert fma_f32(a, b, c).tobytes() == canon(want)
    zeros = np.zeros_like(a)
    keys = np.stack([a, c, zeros, zeros], -1).reshape(rows, IDX_DIM)  # p = c * 1, then fma(a, b, c), then + 0
    qs = np.stack([b, np.ones_like(b), np.ones_like(b), np.ones_like(b)], -1).reshape(rows, IDX_DIM)
    got = lane_partials(keys, qs)[np.arange(rows), np.arange(rows)]  # row r's keys against its own query
    assert got.tobytes() == canon(want), f"seed {seed}"


@pytest.mark.parametrize("seed", [51, 52, 53])
def test_lane_partials_match_fma_steps(seed: int) -> None:
    rng = rng_for(seed)
    keys = random_keys(rng, 48)
    qh = random_keys(rng, 3)
    got = lane_partials(keys, qh)
    assert got.shape == (3, 48, 32)
    for h in range(3):
        assert got[h].tobytes() == canon(partials_ref(keys, qh[h])), f"seed {seed} head {h}"


def random_keys(rng: np.random.Generator, n: int) -> np.ndarray:
    """Keys scaled by 10**U(-30, 30) per row, with +x / -x pairs and a sprinkle of 0, -0, +-inf, NaN."""
    k = rng.standard_normal((n, IDX_DIM)).astype(F32) * (F32(10) ** rng.uniform(-30, 30, (n, 1))).astype(F32)
    pairs = rng.random(n) < 0.3
    k[pairs, 64:] = -k[pairs, :64]  # lane l and lane l ^ 16 cancel
    specials = rng.random(k.shape) < 0.02
    k[specials] = rng.choice(SPECIALS, int(specials.sum()))
    return k


# ---- reductions -----------------------------------------------------------------------------------


def butterfly_lanes(v: np.ndarray) -> list[np.ndarray]:
    """The butterfly with every lane kept: lane l adds lane l ^ o (mine + partner's)."""
    lanes = [v[..., lane] for lane in range(32)]
    with np.errstate(over="ignore", invalid="ignore"):
        for o in (16, 8, 4, 2, 1):
            lanes = [lanes[lane] + lanes[lane ^ o] for lane in range(32)]
    return lanes


def spread(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values whose float32 sums depend on the order: mixed signs, magnitudes 1e-8..1e8."""
    return (rng.standard_normal(shape) * 10.0 ** rng.uniform(-8, 8, shape)).astype(F32)


@pytest.mark.parametrize("seed", [61, 62])
def test_butterfly_matches_lane_loop(seed: int) -> None:
    v = spread(rng_for(seed), (40, 32))
    lanes = butterfly_lanes(v)
    got = butterfly_sum(v)
    assert got.shape == (40,)
    for lane in lanes:
        assert lane.tobytes() == got.tobytes()
    assert np.any(np.cumsum(v, -1, dtype=F32)[:, -1] != got)  # the data is order-sensitive


def halving_cases(rng: np.random.Generator, m: int) -> list[np.ndarray]:
    """[rows, 32 lanes, m values]: order-sensitive values, cancelling lanes, wide magnitudes, specials."""
    wide = (rng.standard_normal((30, 32, m)) * 10.0 ** rng.uniform(-30, 30, (30, 32, m))).astype(F32)
    cancel = spread(rng, (30, 32, m))
    cancel[:, 16:] = -cancel[:, :16] * F32(1 + 2.0**-20)
    special = spread(rng, (30, 32, m))
    pick = rng.random(special.shape) < 0.05
    special[pick] = rng.choice(SPECIALS, int(pick.sum()))
    return [spread(rng, (30, 32, m)), wide, cancel, special]


@pytest.mark.parametrize("m", [4, 8, 16])
@pytest.mark.parametrize("seed", [71, 72])
def test_halving_matches_butterfly(m: int, seed: int) -> None:
    for case, v in enumerate(halving_cases(rng_for(seed, m), m)):
        got = halving_sums(v)
        assert got.shape == (30, m)
        assert got.tobytes() == butterfly_sum(np.swapaxes(v, -1, -2)).tobytes(), f"seed {seed} m {m} case {case}"


# 32 x 16 floats can overrun Hypothesis's buffer: such a draw is discarded, not failed, and when many are the
# filter health check would end the run (test_halving_matches_butterfly covers m = 16 on chosen data)
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(m=st.sampled_from([4, 8, 16]), data=st.data())
def test_halving_property(m: int, data: st.DataObject) -> None:
    v = np.array(data.draw(st.lists(st.floats(width=32), min_size=32 * m, max_size=32 * m)), F32).reshape(32, m)
    assert halving_sums(v).tobytes() == butterfly_sum(v.T).tobytes()


def assert_gpu_nans(x: np.ndarray, what: str) -> None:
    nan = np.isnan(x)
    assert nan.any(), f"{what}: no NaN to check"
    assert np.all(np.asarray(x).view(np.uint32)[nan] == CUDA_NAN_BITS), f"{what}: a NaN that is not 0x7FFFFFFF"


def test_every_nan_is_the_gpus() -> None:
    """A NaN operand (of any payload or sign) and an invalid operation (0 * inf, inf - inf) give the GPU's one
    NaN in each function that returns intermediate values; numpy alone keeps the payload, or 0xFFC00000."""
    rng = rng_for(141)
    inf, n = F32(np.inf), 64
    nans = rng.choice(ADVERSARIAL_NANS, n)
    ones = np.ones(n, F32)
    a, b, c = (np.concatenate([x, np.array(y, F32)]) for x, y in ((nans, [0, inf, inf]), (ones, [inf, 0, 1]),
                                                                    (ones, [1, 1, -inf])))
    assert_gpu_nans(fma_f32(a, b, c), "fma_f32")
    assert_gpu_nans(fma_f32(c, b, a), "fma_f32, the NaN added")
    keys = spread(rng, (n, IDX_DIM))
    keys[np.arange(n), rng.integers(0, IDX_DIM, n)] = nans  # a NaN operand in one lane of each key
    keys[: n // 2, 0] = inf  # k.x = inf against q.x = 0: an invalid fma in lane 0
    qh = spread(rng, (IDX_DIM,))
    qh[0] = 0
    part = lane_partials(keys, qh)
    assert_gpu_nans(part, "lane_partials")
    v = spread(rng, (n, WARP))
    v[: n // 2, rng.integers(0, WARP, n // 2)] = nans[: n // 2]
    v[n // 2 :, 3], v[n // 2 :, 17] = inf, -inf  # inf - inf where the butterfly adds them
    assert_gpu_nans(butterfly_sum(v), "butterfly_sum")
    assert_gpu_nans(halving_sums(np.stack([v, v[::-1], v, v], -1)), "halving_sums")


def test_reductions_reject_bad_shapes() -> None:
    with pytest.raises(ValueError):
        butterfly_sum(np.ones((3, 16), F32))
    with pytest.raises(ValueError):
        halving_sums(np.ones((32, 12), F32))


# ---- scores ---------------------------------------------------------------------------------------


def scores_ref(inp: ScorerInputs) -> np.ndarray:
    """Spec section 2 one query and block at a time, from partials_ref and the all-lanes butterfly."""
    out = np.full((inp.nq, inp.max_blocks), SCORE_POISON_BITS, np.uint32).view(F32)
    for i in range(inp.nq):
        _, n_kv, n_bid, _ = (int(x) for x in inp.steps[i])
        keys = inp.pooled[: n_bid + 1].copy()
        keys[n_bid] = inp.dead
        d = [butterfly_lanes(partials_ref(keys, inp.q[i, h]))[0] for h in range(IDX_HEADS)]
        for b in range(n_bid + 1):
            s = F32(0)
            for h in range(IDX_HEADS):
                s = s + (d[h][b] if d[h][b] > 0 else F32(0))
            if b == n_bid and n_kv % 4:
                s = s + TAIL_BONUS
            out[i, b] = s
    return out


def window_cases(seed: int) -> list[tuple[int, int, int]]:
    """(ctx, nq, capacity): 1-8 queries, contexts ending on every tail length 0-3."""
    rng = rng_for(seed)
    cases = []
    for nq in range(1, 9):
        for tail in range(4):
            ctx = int(rng.integers(8, 60)) * 4 + tail + nq
            cases.append((ctx, nq, ctx + int(rng.integers(0, 40))))
    return cases


@pytest.mark.parametrize("seed", [81, 82, 83, 84])
def test_halve_equals_butterfly_adversarial(seed: int) -> None:
    for ctx, nq, cap in window_cases(seed):
        inp = synthetic_scorer_inputs(Call(ctx, nq, cap), seed, "adversarial")
        a = score_blocks(inp, "butterfly")
        for order in ("halve", "paired", "quarters"):
            b = score_blocks(inp, order)
            assert a.tobytes() == b.tobytes(), (seed, ctx, nq, cap, order, first_difference(a, b, inp.steps))


@pytest.mark.parametrize("seed", [91])
def test_halve_equals_butterfly_synthetic(seed: int) -> None:
    for ctx, nq, cap in window_cases(seed)[::3] + [(40000, 8, 65536), (9000, 5, 9000)]:
        inp = synthetic_scorer_inputs(Call(ctx, nq, cap), seed)
        a = score_blocks(inp, "butterfly")
        for order in ("halve", "paired", "quarters"):
            b = score_blocks(inp, order)
            assert a.tobytes() == b.tobytes(), (seed, ctx, nq, cap, order, first_difference(a, b, inp.steps))


@pytest.mark.parametrize("kind,seed", [("adversarial", 101), ("adversarial", 102), ("synthetic", 103)])
def test_scores_match_slow_reference(kind: str, seed: int) -> None:
    rng = rng_for(seed)
    for nq, tail in [(1, 0), (2, 3), (3, 1), (5, 2), (8, 0)]:
        ctx = int(rng.integers(3, 12)) * 4 + tail + nq
        inp = synthetic_scorer_inputs(Call(ctx, nq, ctx + 8), seed, kind)
        want = scores_ref(inp)
        for order in ORDERS:
            got = score_blocks(inp, order)
            assert got.tobytes() == want.tobytes(), (seed, ctx, nq, order, first_difference(got, want, inp.steps))


@pytest.mark.parametrize("blocks_per_chunk", [1, 3])
@pytest.mark.parametrize("seed", [105])
def test_chunks_split_the_window(blocks_per_chunk: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny chunks put the window's queries' n_bid (dead key, tail bonus) in different chunks; every order made
    from one pass over the partials (scores_in_orders) is the same bits as made alone: no order's additions
    change the partials the next one reads."""
    rng = rng_for(seed, blocks_per_chunk)
    for nq, tail in [(3, 2), (6, 1), (8, 3)]:
        ctx = int(rng.integers(4, 9)) * 4 + tail + nq
        inp = synthetic_scorer_inputs(Call(ctx, nq, ctx + 12), seed, "adversarial")
        monkeypatch.setattr(scores_model, "_CHUNK_PARTIALS", blocks_per_chunk * nq * IDX_HEADS * 32)
        want = scores_ref(inp)
        together = scores_in_orders(inp, (*ORDERS, ORDERS[0]))
        assert list(together) == list(ORDERS)
        for order in ORDERS:
            for got in (score_blocks(inp, order), together[order]):
                assert got.tobytes() == want.tobytes(), (seed, ctx, nq, order, first_difference(got, want, inp.steps))


@pytest.mark.parametrize("seed", [151, 152])
def test_adversarial_keys_break_the_arithmetic(seed: int) -> None:
    """Products overflow and go subnormal, a head's sum of products far from 0 is exactly 0 (they cancel), some
    sums are subnormal, and the model's bits stay well defined: the GPU's NaN in every NaN partial and sum,
    no NaN in a score, the halving order's bits the butterfly's, the same bits computed twice."""
    inp = synthetic_scorer_inputs(Call(8003, 8, 16384), seed, "adversarial")
    keys, heads = inp.pooled[:1000], inp.q.reshape(-1, IDX_DIM)
    with np.errstate(over="ignore", invalid="ignore"):
        products = keys.astype(np.float64)[None, :, :] * heads.astype(np.float64)[:, None, :]  # [head, key, dim]
    size = np.abs(products[np.isfinite(products) & (products != 0)])
    assert (size > F32_MAX).any() and (size < np.finfo(F32).tiny).any()
    part = lane_partials(keys, heads)
    assert_gpu_nans(part, "lane partials")
    for h in range(heads.shape[0]):  # the fast path's fma against the exact one, step by step
        assert part[h].tobytes() == canon(partials_ref(keys, heads[h])), f"seed {seed} head {h}"
    d = butterfly_sum(part)
    assert_gpu_nans(d, "head sums")
    largest = np.max(np.abs(products), axis=-1)
    assert ((d == 0) & (largest > 1e-20) & (largest <= F32_MAX)).any()  # an exact 0 only a cancellation gives
    assert ((d != 0) & (np.abs(d) < np.finfo(F32).tiny)).any()
    scores = score_blocks(inp, "butterfly")
    live = np.concatenate([scores[i, : n + 1] for i, n in enumerate(inp.steps[:, 2])])
    assert not np.isnan(live).any() and np.isinf(live).any() and (live == 0).any()
    assert scores.tobytes() == score_blocks(inp, "halve").tobytes() == score_blocks(inp, "butterfly").tobytes()


def test_writes_exactly_blocks_to_n_bid() -> None:
    inp = synthetic_scorer_inputs(Call(203, 6, 300), 111)
    out = score_blocks(inp, "halve")
    bits = out.view(np.uint32)
    for i, n_bid in enumerate(inp.steps[:, 2]):
        assert np.all(bits[i, n_bid + 1 :] == SCORE_POISON_BITS)
        assert np.all(bits[i, : n_bid + 1] != SCORE_POISON_BITS) and not np.isnan(out[i, : n_bid + 1]).any()


def unit_heads_inputs(ctx: int, block_keys: list[list[float]], dead: list[float]) -> ScorerInputs:
    """One query whose head h reads dim h alone (q[h] = e_h), so d_h = key[h] for finite keys (NaN * 0 and
    inf * 0 make every other head NaN); dims 4.. are noise that meets zeros."""
    rng = rng_for(121, ctx)
    mb = max_blocks(ctx + 8)
    pooled = rng.standard_normal((mb, IDX_DIM)).astype(F32)
    pooled[: len(block_keys), :4] = np.array(block_keys, F32)
    dead_key = rng.standard_normal(IDX_DIM).astype(F32)
    dead_key[:4] = dead
    q = np.zeros((1, IDX_HEADS, IDX_DIM), F32)
    q[0, range(4), range(4)] = 1
    return ScorerInputs(pooled, dead_key, q, window_steps(ctx, 1))


@pytest.mark.parametrize("order", ORDERS)
def test_relu_and_tail_rules(order: str) -> None:
    blocks = [[2, -3, 0.5, 4], [np.nan, 1, 1, 1], [-np.inf, 1, 2, 3], [1.5, 0.25, 1, 8], [np.inf, 0, 0, 0]]
    blocks.append([-1, -2, -0.0, -5])
    want = np.array([6.5, 0, 0, 10.75, np.inf, 0], F32)  # negative, NaN and -inf heads add +0
    for tail in range(4):
        inp = unit_heads_inputs(len(blocks) * 4 + tail, blocks, [64, 32, -5, 32])
        out = score_blocks(inp, order)
        assert out[0, : len(blocks)].tobytes() == want.tobytes(), (tail, out[0, : len(blocks)])
        tail_score = out[0, len(blocks)]
        expect = F32(128) + TAIL_BONUS if tail else F32(128)  # n_kv % 4 == 0: dead key scored, no bonus
        assert tail_score.tobytes() == expect.tobytes(), (tail, tail_score)


def test_halve_calls_and_errors() -> None:
    assert halve_calls(3) == [(0, 3)]
    assert halve_calls(4) == [(0, 4)]
    assert halve_calls(5) == [(0, 4), (4, 5)]
    assert halve_calls(8) == [(0, 4), (4, 8)]
    assert paired_calls(1) == [(0, 1)]  # one query: the odd warp of each pair has none
    assert paired_calls(4) == [(0, 2), (2, 4)]
    assert paired_calls(5) == [(0, 4), (4, 5)]
    assert paired_calls(8) == [(0, 4), (4, 8)]
    for nq in range(1, 9):  # the two warps of a pair take the window's queries in order, none twice
        assert [q for a, b in paired_calls(nq) for q in range(a, b)] == list(range(nq))
    inp = synthetic_scorer_inputs(Call(100, 8, 100), 131)
    big = ScorerInputs(inp.pooled, inp.dead, np.concatenate([inp.q, inp.q]), window_steps(100, 16))
    for order in ("halve", "paired"):
        with pytest.raises(GeometryError):
            score_blocks(big, order)
    assert score_blocks(big).shape == (16, inp.max_blocks)  # the butterfly takes a prompt call's queries
    with pytest.raises(ValueError):
        score_blocks(inp, "sequential")


def test_hash_and_first_difference() -> None:
    inp = synthetic_scorer_inputs(Call(150, 3, 200), 141)
    s = score_blocks(inp)
    steps = inp.steps
    manual = hashlib.blake2b(b"".join(s[i, : n + 1].tobytes() for i, n in enumerate(steps[:, 2])), digest_size=8)
    h = scores_hash(s, steps)
    assert h == manual.hexdigest() and len(h) == 16
    t = s.copy()
    t[0, -1] = 123.0  # past n_bid: not part of the hash
    assert scores_hash(t, steps) == h and first_difference(s, t, steps) is None
    t[1, 7] = -t[1, 7] if t[1, 7] != 0 else F32(1e-45)
    t[2, 3] = np.nextafter(t[2, 3], F32(np.inf))
    assert scores_hash(t, steps) != h
    assert first_difference(s, t, steps) == (1, 7)
    z = s.copy()
    z[0, 2], s[0, 2] = F32(0.0), F32(-0.0)
    assert first_difference(s, z, steps) == (0, 2)
    with pytest.raises(TypeError):
        scores_hash(np.ones(s.shape), steps)  # float64
