"""The CPU models of the top-k: every radix model equals the stable-sort oracle, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from topk_rows import EARLY_ENDS, GATHERED_KINDS, NEAR, early_end_inputs

from qsa_cli.core.geometry import (
    BLOCK_CELLS,
    CLUSTER_CHUNK_KEYS,
    CLUSTER_CTAS,
    CLUSTER_GATHER_ALIGN,
    CLUSTER_GATHER_BLOCKS,
    CLUSTER_GATHER_CHUNKS,
    CLUSTER_WIDE_CTAS,
    SELECT_CAP,
    SPLIT_CHUNK_BLOCKS,
    STEP_NBID,
    STEP_NKV,
    STEP_WIDTH,
    Call,
    GeometryError,
    block_weights,
    max_blocks,
    window_steps,
)
from qsa_cli.inputs import ADVERSARIAL_NANS, ID_POISON, SCORE_SETS, TopkInputs, rng_for, synthetic_scores
from qsa_cli.model.order import order_keys
from qsa_cli.model.topk import (
    ALGORITHMS,
    _digit_by_scan,
    cluster_gathers,
    cluster_passes,
    digit_rule,
    first_difference,
    select_oracle,
    select_split,
    topk_ids,
)

MODELS = tuple(a for a in ALGORITHMS if a != "oracle")

SPECIALS = np.array(
    [np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 1e9, -1e9, 1e-45, -1e-45, 3.4028235e38, -3.4028235e38],
    dtype=np.float32,
)


def assert_models_match(inputs: TopkInputs, active_blocks: int = 0) -> np.ndarray:
    """Every model's ids are the oracle's bytes; rows are ascending, in range, poisoned past width."""
    want = topk_ids(inputs, "oracle", active_blocks)
    width = inputs.steps[:, 3]
    n_kv = inputs.steps[:, 1]
    for i, row in enumerate(want):
        ids = row[: width[i]]
        assert np.all(np.diff(ids) > 0) and ids[0] >= 0 and ids[-1] < n_kv[i], f"query {i}"
        assert np.all(row[width[i] :] == ID_POISON), f"query {i}"
    for algorithm in MODELS:
        got = topk_ids(inputs, algorithm, active_blocks)
        assert got.tobytes() == want.tobytes(), (algorithm, first_difference(got, want, inputs.steps))
    for i in range(inputs.nq):  # the cluster kernel at its wide size too (16 CTAs a query: other slices)
        wide = cluster_passes(inputs.scores[i], inputs.steps[i], CLUSTER_WIDE_CTAS)[0]
        assert wide.tobytes() == want[i, : wide.size].tobytes(), f"cluster of {CLUSTER_WIDE_CTAS}, query {i}"
    return want


def custom_inputs(ctx: int, nq: int, capacity: int, scores_of_blocks: np.ndarray) -> TopkInputs:
    """One score row shared by the call's queries (each reads its own blocks 0..n_bid)."""
    mb = max_blocks(capacity)
    scores = np.broadcast_to(scores_of_blocks[:mb].astype(np.float32), (nq, mb)).copy()
    return TopkInputs(scores, window_steps(ctx, nq))


# ---- the synthetic score sets ------------------------------------------------------------------

CASES = [
    Call(9000, 8, 9000),
    Call(2100, 8, 262144),
    Call(9000, 8, 262144),
    Call(32768, 8, 262144),
    Call(135176, 8, 135176),
    Call(300001, 8, 524288),
    Call(524288, 8, 524288),
    Call(9000, 64, 9000, prompt=True),
    Call(2100, 64, 262144, prompt=True),
    Call(32768, 64, 262144, prompt=True),
]


@pytest.mark.parametrize("score_set", SCORE_SETS)
@pytest.mark.parametrize("call", CASES, ids=lambda c: f"{c.kind}-{c.ctx}-{c.capacity}-seed{c.ctx % 97}")
def test_score_sets(call: Call, score_set: str) -> None:
    inputs = synthetic_scores(call, score_set, seed=call.ctx % 97)
    assert_models_match(inputs, call.active_blocks)


# Contexts across several of the split's chunks and the cluster's slices (and their 128-key chunks), each tail
# length, decode and prompt calls, the identity's edge; capacities at and far above the context.
ADVERSARIAL_CALLS = [
    Call(2052, 8, 4096),
    Call(4 * SPLIT_CHUNK_BLOCKS * 3 + 3, 8, 4 * SPLIT_CHUNK_BLOCKS * 3 + 3),
    Call(4 * SPLIT_CHUNK_BLOCKS * 7 + 6, 8, 1 << 20),
    Call(65539, 8, 65540),
    Call(9001, 64, 9001, prompt=True),
    Call(4 * SPLIT_CHUNK_BLOCKS * 4 + 2, 64, 65536, prompt=True),
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("call", ADVERSARIAL_CALLS, ids=lambda c: f"{c.kind}-{c.ctx}-{c.capacity}")
def test_adversarial_scores(call: Call, seed: int) -> None:
    assert_models_match(synthetic_scores(call, "adversarial", seed), call.active_blocks)


def test_adversarial_scores_end_the_cluster_select_early_and_late() -> None:
    """On adversarial rows the cluster model's rounds both end after pass 2 and run all four passes; with
    the gather path, some rows gather after pass 0 and others still run their rounds."""
    inputs = synthetic_scores(Call(4 * SPLIT_CHUNK_BLOCKS * 5 + 1, 8, 1 << 20), "adversarial", seed=7)
    rows = list(zip(inputs.scores, inputs.steps))
    assert {3, 4} <= {cluster_passes(row, step, gather=False)[1] for row, step in rows}
    with_gather = {cluster_passes(row, step)[1] for row, step in rows}
    assert 1 in with_gather and with_gather & {3, 4}


# ---- the cluster kernel's early end: each way it ends, against the oracle -------------------------


@pytest.mark.parametrize("seed", [51, 52])
@pytest.mark.parametrize("kind", EARLY_ENDS)
def test_cluster_ends_each_way(kind: str, seed: int) -> None:
    inputs = early_end_inputs(kind, rng_for(seed, len(kind)), nq=3)
    assert_models_match(inputs)
    passes = {cluster_passes(inputs.scores[i], inputs.steps[i])[1] for i in range(inputs.nq)}
    assert passes == {EARLY_ENDS[kind][1]}, kind


@pytest.mark.parametrize("seed", [57, 58])
@pytest.mark.parametrize("kind", GATHERED_KINDS)
def test_cluster_gathers_the_near_rows_without_fillers(kind: str, seed: int) -> None:
    """The same near blocks with few blocks at pass 0's digit: one round, thr found in every CTA."""
    inputs = early_end_inputs(kind, rng_for(seed, len(kind)), nq=3, gathered=True)
    assert_models_match(inputs)
    assert {cluster_passes(inputs.scores[i], inputs.steps[i])[1] for i in range(inputs.nq)} == {1}, kind


def test_cluster_gather_decision_pads_each_cta_and_bounds_the_slice() -> None:
    """Each CTA's blocks at the digit are padded to CLUSTER_GATHER_ALIGN before the total is bounded."""
    fits = np.full(CLUSTER_CTAS, CLUSTER_GATHER_BLOCKS // CLUSTER_CTAS * BLOCK_CELLS)
    assert cluster_gathers(fits, per=CLUSTER_GATHER_CHUNKS * CLUSTER_CHUNK_KEYS)
    assert not cluster_gathers(fits, per=CLUSTER_GATHER_CHUNKS * CLUSTER_CHUNK_KEYS + 1)
    one_more = fits.copy()
    one_more[0] += 1  # a tail's cell: one block more, padded to CLUSTER_GATHER_ALIGN
    assert not cluster_gathers(one_more, per=1)
    assert cluster_gathers(np.array([1] * (CLUSTER_GATHER_BLOCKS // CLUSTER_GATHER_ALIGN)), per=1)
    assert not cluster_gathers(np.array([1] * (CLUSTER_GATHER_BLOCKS // CLUSTER_GATHER_ALIGN + 1)), per=1)


def _cells(block: int, count: int) -> set[int]:
    return {4 * block + c for c in range(count)}


def _near_ids(kind: str, seed: int) -> tuple[list[int], set[int]]:
    """The near blocks of a one-query row of ``kind`` (by score, then by index) and the cluster model's ids."""
    inputs = early_end_inputs(kind, rng_for(seed), nq=1)
    row = inputs.scores[0]
    ups = [NEAR, np.nextafter(NEAR, np.float32(11.0))]
    ups.append(np.nextafter(ups[1], np.float32(11.0)))
    near = [int(b) for v in ups for b in np.flatnonzero(row == v)]
    return near, set(topk_ids(inputs, "cluster")[0].tolist())


def test_cluster_two_blocks_take_the_higher_whole_and_the_lower_in_part() -> None:
    (low, high), ids = _near_ids("two-blocks", 53)
    assert _cells(high, 4) <= ids
    assert _cells(low, 3) <= ids and 4 * low + 3 not in ids


def test_cluster_greatest_block_takes_the_whole_budget() -> None:
    (low, mid, high), ids = _near_ids("greatest-block", 54)
    assert _cells(high, 3) <= ids and 4 * high + 3 not in ids
    assert not (_cells(low, 4) | _cells(mid, 4)) & ids


def test_cluster_tied_blocks_give_their_cells_in_block_order() -> None:
    (first, second, third), ids = _near_ids("tied-blocks", 55)
    assert first < second < third
    assert _cells(first, 4) <= ids
    assert _cells(second, 3) <= ids and 4 * second + 3 not in ids
    assert not _cells(third, 4) & ids


@pytest.mark.parametrize("kind", ["three-blocks", "four-passes"])
def test_cluster_three_near_keys_give_the_greatest_and_part_of_the_middle(kind: str) -> None:
    (low, mid, high), ids = _near_ids(kind, 56)
    assert _cells(high, 4) <= ids
    assert _cells(mid, 3) <= ids and 4 * mid + 3 not in ids
    assert not _cells(low, 4) & ids


@pytest.mark.parametrize(("ctx", "seed", "query"), [(524288, 47, 4), (524288, 54, 0), (420000, 11, 1)])
def test_cluster_ends_continuous_draws_after_pass_2_that_needed_a_fourth(ctx: int, seed: int, query: int) -> None:
    """Three blocks share thr's top 24 bits (in three CTAs; or two of them in one), the budget
    between one and three of them: the rounds' digit records give thr's key (before them: four passes).
    The kernel gathers these rows instead (one round); the rounds run where the gather does not fit."""
    inputs = synthetic_scores(Call(ctx, 8, 524288), "continuous", seed)
    row, step = inputs.scores[query], inputs.steps[query]
    ids, passes = cluster_passes(row, step, gather=False)
    assert passes == 3
    assert np.array_equal(ids, select_oracle(row, step))
    gathered_ids, gathered_passes = cluster_passes(row, step)
    assert gathered_passes == 1 and gathered_ids.tobytes() == ids.tobytes()


# ---- adversarial rows --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [11, 12, 13])
@pytest.mark.parametrize("ctx", [4099, 8202, 2052 + 3])
def test_special_values_all_tails(ctx: int, seed: int) -> None:
    """NaN, +-0, +-inf, denormals and extremes; 4 consecutive queries cover tails of 0-3 cells."""
    rng = rng_for(seed, ctx)
    mb = max_blocks(ctx)
    scores = np.where(rng.random(mb) < 0.7, rng.choice(SPECIALS, mb), rng.standard_normal(mb, dtype=np.float32))
    inputs = custom_inputs(ctx, 4, ctx, scores)
    assert_models_match(inputs)
    assert_models_match(inputs, active_blocks=ctx // 4 + 1)


@pytest.mark.parametrize("seed", [21, 22])
def test_all_equal_and_signed_zero(seed: int) -> None:
    """-0 and +0 tie, so the lowest cells win; the same for one repeated random value."""
    rng = rng_for(seed)
    ctx = 6001
    zeros = np.where(rng.random(max_blocks(ctx)) < 0.5, np.float32(0.0), np.float32(-0.0))
    want = assert_models_match(custom_inputs(ctx, 8, ctx, zeros))
    assert np.array_equal(want[:, :SELECT_CAP], np.broadcast_to(np.arange(SELECT_CAP, dtype=np.int32), (8, SELECT_CAP)))
    level = np.full(max_blocks(ctx), rng.standard_normal(), dtype=np.float32)
    assert_models_match(custom_inputs(ctx, 8, ctx, level))


@pytest.mark.parametrize("seed", [31, 32, 33])
def test_two_levels(seed: int) -> None:
    rng = rng_for(seed)
    ctx = 20003
    scores = rng.choice(np.array([-1.5, 2.25], dtype=np.float32), max_blocks(ctx), p=[0.9, 0.1])
    assert_models_match(custom_inputs(ctx, 8, ctx, scores))


@pytest.mark.parametrize("seed", [41])
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_chunk_boundaries(k: int, delta: int, seed: int) -> None:
    """The last query's n_bid at 2048k + delta; 8 queries also cover the blocks just below."""
    ctx = 4 * (2048 * k + delta) + 3
    rng = rng_for(seed, k, delta + 1)
    mb = max_blocks(524288)
    scores = np.floor(rng.standard_normal(mb, dtype=np.float32) * 2) / 2  # ~12 levels: ties everywhere
    for capacity in (ctx, 524288):
        assert_models_match(custom_inputs(ctx, 8, capacity, scores))
    assert_models_match(custom_inputs(ctx, 8, ctx, scores), active_blocks=ctx // 4 + 1)


def test_tie_cut_across_chunks() -> None:
    """2,040 cells above thr in chunk 2; 11 tie cells taken: blocks 2046-2047 (chunk 0), 3 of block 2048."""
    ctx = 4 * 5000 + 3
    scores = np.zeros(max_blocks(ctx), dtype=np.float32)
    scores[2046:2051] = 1.0
    scores[4096 : 4096 + 510] = 2.0
    inputs = custom_inputs(ctx, 1, ctx, scores)
    want = np.concatenate([np.arange(4 * 2046, 4 * 2048 + 3), np.arange(4 * 4096, 4 * (4096 + 510))]).astype(np.int32)
    got = assert_models_match(inputs)
    assert np.array_equal(got[0], want)


def test_width_equals_n_kv() -> None:
    """n_kv <= 2051: the identity, whatever the scores."""
    rng = rng_for(51)
    for ctx in (1, 2, 5, 2051):
        nq = min(ctx, 8)
        inputs = custom_inputs(ctx, nq, ctx, rng.choice(SPECIALS, max_blocks(ctx)))
        got = assert_models_match(inputs)
        for i, n_kv in enumerate(inputs.steps[:, 1]):
            assert np.array_equal(got[i, :n_kv], np.arange(n_kv))


def test_one_cell_over_width() -> None:
    """n_kv = 2052: one cell is dropped, the lowest key's highest cell."""
    rng = rng_for(52)
    mb = max_blocks(2052)
    scores = rng.standard_normal(mb, dtype=np.float32) + np.float32(10)
    scores[100] = np.float32(-5)
    got = assert_models_match(custom_inputs(2052, 1, 2052, scores))
    assert np.array_equal(got[0], np.setdiff1d(np.arange(2052), [403]))
    got = assert_models_match(custom_inputs(2052, 1, 2052, np.full(mb, np.float32(rng.standard_normal()))))
    assert np.array_equal(got[0], np.arange(SELECT_CAP))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_kv=st.one_of(st.integers(1, 2060), st.integers(2052, 12000)),
    levels=st.integers(1, 5),
    specials=st.booleans(),
    chunk_blocks=st.sampled_from([1, 3, 64, 2048]),
    extra_blocks=st.integers(0, 300),
)
def test_property_models_match_oracle(seed, n_kv, levels, specials, chunk_blocks, extra_blocks) -> None:
    """Few levels (ties at the threshold), small chunks (many chunk boundaries), grids past the query."""
    rng = rng_for(seed)
    mb = max_blocks(n_kv) + extra_blocks
    scores = rng.integers(0, levels, mb).astype(np.float32)
    if specials:
        scores = np.where(rng.random(mb) < 0.3, rng.choice(SPECIALS, mb), scores)
    inputs = custom_inputs(n_kv, 1, (mb - 2) * 4, scores)
    want = topk_ids(inputs, "oracle")
    for algorithm in MODELS:
        assert topk_ids(inputs, algorithm).tobytes() == want.tobytes(), algorithm
    row, step = inputs.scores[0], inputs.steps[0]
    for active in (0, step[2] + 1):
        got = select_split(row, step, active_blocks=int(active), chunk_blocks=chunk_blocks)
        assert got.tobytes() == select_oracle(row, step).tobytes()
    for ctas in range(1, CLUSTER_WIDE_CTAS + 1):  # the cluster model at any size: the oracle's ids
        assert cluster_passes(row, step, ctas)[0].tobytes() == select_oracle(row, step).tobytes(), ctas


def sorted_cells_rule(scores_row: np.ndarray, step: np.ndarray) -> np.ndarray:
    """The rule as spec section 3 states it: a stable sort of the query's cells on (key descending, cell
    ascending), its first ``width`` cells, ascending (cell 4b + c has its block b's key)."""
    n_kv, n_bid, width = int(step[STEP_NKV]), int(step[STEP_NBID]), int(step[STEP_WIDTH])
    if n_kv <= width:
        return np.arange(n_kv, dtype=np.int32)
    cell_keys = np.repeat(order_keys(scores_row[: n_bid + 1]), block_weights(n_kv, n_bid + 1))
    return np.sort(np.argsort(~cell_keys, kind="stable")[:width]).astype(np.int32)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_kv=st.one_of(st.integers(1, 2060), st.integers(2052, 40000)),
    levels=st.sampled_from([1, 2, 5, 64, 0]),  # 0: continuous
    specials=st.booleans(),
)
def test_oracle_is_the_sorted_cells_rule(seed, n_kv, levels, specials) -> None:
    """Few levels put thr inside long runs of ties (one level: every block ties), specials the NaNs, zeros and
    infinities; each tail length, the identity's edge, and every rank of the partial last block."""
    rng = rng_for(seed)
    mb = max_blocks(n_kv)
    scores = rng.standard_normal(mb, dtype=np.float32) if levels == 0 else rng.integers(0, levels, mb).astype(np.float32)
    if specials:
        scores = np.where(rng.random(mb) < 0.3, rng.choice(SPECIALS, mb), scores)
    row, step = scores.astype(np.float32), window_steps(n_kv, 1)[0]
    assert select_oracle(row, step).tobytes() == sorted_cells_rule(row, step).tobytes()


@pytest.mark.parametrize("score_set", SCORE_SETS)
def test_oracle_is_the_sorted_cells_rule_on_the_score_sets(score_set: str) -> None:
    call = Call(300001, 8, 524288)
    inputs = synthetic_scores(call, score_set, seed=41)
    for row, step in zip(inputs.scores, inputs.steps):
        assert select_oracle(row, step).tobytes() == sorted_cells_rule(row, step).tobytes()


@pytest.mark.parametrize("score_set", ["levels64", "adversarial"])
@pytest.mark.parametrize("chunk_blocks", [1, 5, 256])
def test_split_small_chunks(chunk_blocks: int, score_set: str) -> None:
    seed = 60 + chunk_blocks
    call = Call(20001, 8, 40000)
    inputs = synthetic_scores(call, score_set, seed)
    for row, step in zip(inputs.scores, inputs.steps):
        got = select_split(row, step, chunk_blocks=chunk_blocks)
        assert got.tobytes() == select_oracle(row, step).tobytes()


# ---- order keys and the digit rule -------------------------------------------------------------


def test_order_keys_monotone() -> None:
    rng = rng_for(71)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    floats = bits.view(np.float32)
    floats = np.sort(np.concatenate([floats[~np.isnan(floats)], SPECIALS[~np.isnan(SPECIALS)]]))
    keys = order_keys(floats)
    assert np.all(np.diff(keys.astype(np.int64)) >= 0)
    strict = np.diff(floats) > 0
    assert np.all(np.diff(keys.astype(np.int64))[strict] > 0)
    assert np.all((np.diff(keys.astype(np.int64)) == 0) == ~strict)  # equal only for -0 == +0 and duplicates


def test_order_keys_special_values() -> None:
    k = order_keys(np.array([0.0, -0.0, np.nan, -np.nan, -np.inf, np.inf, 1.0, -1.0], dtype=np.float32))
    assert k[0] == k[1] == 0x80000000
    assert k[2] == k[3] == 0
    assert k[4] == 0x007FFFFF and k[4] > 0  # -inf is the lowest number, above NaN
    assert k[5] == 0xFF800000
    assert k[6] == 0x3F800000 | 0x80000000 and k[7] == ~np.uint32(0xBF800000)
    with pytest.raises(TypeError):
        order_keys(np.zeros(3, dtype=np.float64))


def _order_key(bits: int) -> int:
    """``qsa_order_key`` (kernels/qsa_common.cuh) of the float with these bits, in Python's integers: ``+ 0.0f``
    keeps every number but -0, which becomes +0; NaN's key is 0."""
    if bits & 0x7F800000 == 0x7F800000 and bits & 0x007FFFFF:
        return 0
    bits = 0 if bits == 0x80000000 else bits
    return bits ^ 0xFFFFFFFF if bits & 0x80000000 else bits | 0x80000000


def test_order_keys_are_the_kernels_key_of_every_kind_of_float() -> None:
    """Random bits (every exponent, NaNs of any payload, quiet and signalling, subnormals) and the special
    values, in arrays of any shape or stride, a 0-d one too."""
    rng = rng_for(72)
    bits = np.concatenate([rng.integers(0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32),
                           (rng.integers(0, 2**23, 2_000, dtype=np.uint32) | np.uint32(0x7F800000)
                            | (rng.integers(0, 2, 2_000, dtype=np.uint32) << np.uint32(31))),  # NaNs and infinities
                           rng.integers(0, 2**23, 2_000, dtype=np.uint32) | (rng.integers(0, 2, 2_000, dtype=np.uint32)
                                                                               << np.uint32(31)),  # subnormals, zeros
                           SPECIALS.view(np.uint32), ADVERSARIAL_NANS.view(np.uint32)])
    want = np.array([_order_key(int(b)) for b in bits], dtype=np.uint32)
    floats = bits.view(np.float32)
    assert order_keys(floats).tobytes() == want.tobytes()
    grid = floats[: 300 * 100].reshape(300, 100)
    assert order_keys(grid).shape == (300, 100) and order_keys(grid).tobytes() == want[: 30_000].tobytes()
    assert order_keys(grid[:, ::3]).tobytes() == want[: 30_000].reshape(300, 100)[:, ::3].tobytes()
    scalar = order_keys(floats[-1:].reshape(()))
    assert scalar.shape == () and scalar.dtype == np.uint32 and int(scalar) == int(want[-1])


def _hist(**bins: int) -> np.ndarray:
    h = np.zeros(256, dtype=np.int64)
    for name, count in bins.items():
        h[int(name[1:])] = count
    return h


@pytest.mark.parametrize(
    ("hist", "above", "width", "expected"),
    [
        (_hist(d255=3000), 0, 2051, (255, 0)),
        (_hist(d200=1000, d100=1500, d3=9), 0, 2051, (100, 1000)),
        (_hist(d0=3000), 0, 2051, (0, 0)),  # no digit 1..255 reaches the width
        (_hist(d7=40, d0=50), 2000, 2051, (0, 2040)),
        (_hist(d5=51, d4=1), 2000, 2051, (5, 2000)),  # exactly the width at d
        (_hist(d1=1, d0=4000), 2050, 2051, (1, 2050)),
        (_hist(d9=2, d8=2, d1=3), 2045, 2051, (1, 2049)),
    ],
)
def test_digit_rule(hist: np.ndarray, above: int, width: int, expected: tuple[int, int]) -> None:
    assert digit_rule(hist, above, width) == expected
    assert _digit_by_scan(hist, above, width) == expected


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), above=st.integers(0, 2050), dense=st.booleans())
def test_digit_by_scan_is_digit_rule(seed: int, above: int, dense: bool) -> None:
    rng = rng_for(seed)
    hist = rng.integers(0, 40 if dense else 3, 256) * (rng.random(256) < (0.9 if dense else 0.05))
    assert _digit_by_scan(hist, above, 2051) == digit_rule(hist, above, 2051)


# ---- topk_ids and first_difference -------------------------------------------------------------


def test_first_difference() -> None:
    inputs = synthetic_scores(Call(3000, 3, 3000), "continuous", seed=81)
    a = topk_ids(inputs, "reference")
    assert first_difference(a, a.copy(), inputs.steps) is None
    b = a.copy()
    b[2, 5] += 1
    b[1, 2050] += 1
    assert first_difference(a, b, inputs.steps) == (1, 2050)
    c = a.copy()
    c[0, SELECT_CAP - 1] = 7  # query 0 has n_kv = 2998 > width: position 2050 counts
    assert first_difference(a, c, inputs.steps) == (0, SELECT_CAP - 1)
    short = synthetic_scores(Call(10, 2, 10), "continuous", seed=82)
    s = topk_ids(short, "oracle")
    t = s.copy()
    t[0, 9:] = 1  # past query 0's width (9)
    assert first_difference(s, t, short.steps) is None
    with pytest.raises(ValueError):
        first_difference(a, a[:2], inputs.steps)


def test_topk_ids_rejects_bad_arguments() -> None:
    call = Call(9000, 8, 20000, prompt=True)
    inputs = synthetic_scores(call, "continuous", seed=91)
    with pytest.raises(ValueError, match="unknown top-k algorithm"):
        topk_ids(inputs, "bitonic")
    with pytest.raises(GeometryError):
        topk_ids(inputs, "split", active_blocks=call.active_blocks - 1)
    with pytest.raises(GeometryError):
        topk_ids(inputs, "split", active_blocks=inputs.max_blocks + 1)
