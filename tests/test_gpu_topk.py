"""The top-k kernels on the GPU: every variant's ids are the CPU oracle's, byte for byte.

GPU tests (``-m gpu``) skip cleanly without cupy or a device. Each draws a fresh seed, printed;
``QSA_TEST_SEED=N`` replays one. The ids are poisoned before every kernel run, and exactly entries
0..width-1 of each query's row must be written. The launcher's argument checks need no device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import QSA, fresh_seed, topk_launch

from qsa_cli.core.geometry import (
    MAX_QUERIES,
    PROMPT_QUERIES,
    SELECT_CAP,
    SPLIT_CHUNK_BLOCKS,
    STEP_WIDTH,
    Call,
    window_steps,
)
from qsa_cli.dispatch import ENV_PDL, programmatic_launches
from qsa_cli.inputs import (
    ID_POISON,
    SCORE_SETS,
    TopkInputs,
    id_poison,
    synthetic_scores,
)
from qsa_cli.launch.topk import SOURCE, SplitGrid, split_grid
from qsa_cli.model.topk import first_difference, topk_ids

CELLS_PER_CHUNK = SPLIT_CHUNK_BLOCKS * 4  # a chunk of blocks, in cells
# topk.cu's variants (the cluster kernel, in a file of its own, is tests/test_gpu_topk_cluster.py's)
TOPK_CU_VARIANTS = tuple(v.name for v in QSA.stage("topk") if v.source == SOURCE)

# (context, capacity), each run as a decode call (8 queries, no active count) and a prompt call
# (64 queries, ctx // 4 + 1 active blocks), with the three score sets.
CASES = [
    # the seed's selftest
    (9000, 9000), (135160, 135160), (135176, 135176), (2100, 262144), (9000, 262144),
    (32768, 262144), (262144, 262144), (300001, 524288), (524288, 524288),
    # the identity (n_kv <= 2051) next to the first selecting width (2052), all tails
    (2048, 2048), (2052, 524288), (2059, 2059),
    # n_bid at a multiple of 2,048 blocks and one either side, tails 0-3, under a tight and a loose capacity
    (CELLS_PER_CHUNK + 3, CELLS_PER_CHUNK + 3), (CELLS_PER_CHUNK + 7, 524288),
    (2 * CELLS_PER_CHUNK + 3, 2 * CELLS_PER_CHUNK + 7), (64 * CELLS_PER_CHUNK + 7, 64 * CELLS_PER_CHUNK + 7),
    # capacity far above the context; the longest context
    (2100, 1048576), (40003, 1048576), (1048576, 1048576),
]
# (value, share of the blocks): NaN ranks lowest, -0 ties +0, infinities at both ends
SPECIALS = ((np.nan, 0.05), (np.inf, 0.02), (-np.inf, 0.05), (0.0, 0.2), (-0.0, 0.2), (1.0, 0.1), (-1.0, 0.1))
SPECIAL_CASES = [(9000, 262144), (135176, 524288), (2 * CELLS_PER_CHUNK + 7, 524288)]
# (context, capacity, prompt) for the adversarial scores against each variant's model: the first selecting
# width, several chunks at a tight capacity, a capacity far above the context, up to 1M cells
ADVERSARIAL_CASES = [(2052, 4096, False), (2052, 4096, True), (3 * CELLS_PER_CHUNK + 3, 3 * CELLS_PER_CHUNK + 3, False),
                     (3 * CELLS_PER_CHUNK + 3, 3 * CELLS_PER_CHUNK + 3, True), (40003, 1048576, False),
                     (40003, 1048576, True), (300001, 524288, False), (300001, 524288, True), (1048576, 1048576, False)]


def special_scores(call: Call, seed: int) -> TopkInputs:
    """NaN, infinities and both zeros mixed into continuous scores: many ties, at every rank."""
    base = synthetic_scores(call, "continuous", seed)
    rng = np.random.default_rng([seed, call.ctx, call.nq])
    values = np.array([v for v, _ in SPECIALS] + [0.0], dtype=np.float32)
    shares = [s for _, s in SPECIALS]
    pick = rng.choice(len(values), size=base.scores.shape, p=[*shares, 1.0 - sum(shares)])
    scores = np.where(pick < len(SPECIALS), values[pick], base.scores).astype(np.float32)
    return TopkInputs(scores, base.steps, "specials")


def assert_written_exactly(got: np.ndarray, steps: np.ndarray, what: str) -> None:
    for i, width in enumerate(steps[:, STEP_WIDTH]):
        unwritten = np.flatnonzero(got[i, :width] == ID_POISON)
        assert unwritten.size == 0, f"{what}: query {i} left entry {unwritten[0]} of 0..{width - 1} unwritten"
        written = np.flatnonzero(got[i, width:] != ID_POISON)
        assert written.size == 0, f"{what}: query {i} wrote entry {width + written[0]} past its width {width}"


def assert_ids(got: np.ndarray, expected: np.ndarray, inputs: TopkInputs, what: str) -> None:
    assert_written_exactly(got, inputs.steps, what)
    if got.tobytes() != expected.tobytes():
        q, j = first_difference(got, expected, inputs.steps) or (-1, -1)
        pytest.fail(f"{what}: query {q} (steps {inputs.steps[q].tolist()}) position {j}: "
                    f"id {got[q, j]}, oracle {expected[q, j]}")


def run_variants(cupy: Any, inputs: TopkInputs, active_blocks: int, label: str, models: bool = False) -> None:
    """Every variant on the same device scores, each into freshly poisoned ids, against the oracle (and, with
    ``models``, first against the CPU model of its own steps)."""
    expected = topk_ids(inputs, "oracle")
    scores, steps = cupy.asarray(inputs.scores), cupy.asarray(inputs.steps)
    poison = cupy.asarray(id_poison((inputs.nq, SELECT_CAP)))
    ids = cupy.empty_like(poison)
    for variant in TOPK_CU_VARIANTS:
        cupy.copyto(ids, poison)
        topk_launch(variant, scores, steps, ids, active_blocks)()
        got = ids.get()
        if models:
            assert_ids(got, topk_ids(inputs, variant, active_blocks), inputs, f"{variant} vs its model, {label}")
        assert_ids(got, expected, inputs, f"{variant}, {label}")


@pytest.mark.gpu
@pytest.mark.parametrize("prompt", [False, True], ids=["decode", "prompt"])
@pytest.mark.parametrize(("ctx", "capacity"), CASES)
def test_variants_match_oracle(cupy: Any, ctx: int, capacity: int, prompt: bool) -> None:
    seed = fresh_seed()
    call = Call(ctx, PROMPT_QUERIES if prompt else MAX_QUERIES, capacity, prompt)
    for score_set in SCORE_SETS:
        inputs = synthetic_scores(call, score_set, seed)
        run_variants(cupy, inputs, call.active_blocks, f"{call.kind} ctx {ctx} capacity {capacity} {score_set}")


@pytest.mark.gpu
@pytest.mark.parametrize("prompt", [False, True], ids=["decode", "prompt"])
@pytest.mark.parametrize(("ctx", "capacity"), SPECIAL_CASES)
def test_nan_inf_zeros(cupy: Any, ctx: int, capacity: int, prompt: bool) -> None:
    seed = fresh_seed()
    call = Call(ctx, PROMPT_QUERIES if prompt else MAX_QUERIES, capacity, prompt)
    run_variants(cupy, special_scores(call, seed), call.active_blocks, f"{call.kind} ctx {ctx} specials")


@pytest.mark.gpu
@pytest.mark.parametrize(("ctx", "capacity", "prompt"), ADVERSARIAL_CASES,
                         ids=[f"{'prompt' if p else 'decode'}-{c}-of-{k}" for c, k, p in ADVERSARIAL_CASES])
def test_adversarial_scores_match_each_model(cupy: Any, ctx: int, capacity: int, prompt: bool) -> None:
    """The adversarial score set (NaN, signed zeros, subnormals, infinities, runs of ties across the chunk
    borders, the threshold in a tie run or at NaN, zero, a subnormal or -inf): each variant's own model's ids."""
    seed = fresh_seed()
    call = Call(ctx, PROMPT_QUERIES if prompt else MAX_QUERIES, capacity, prompt)
    inputs = synthetic_scores(call, "adversarial", seed)
    run_variants(cupy, inputs, call.active_blocks, f"{call.kind} ctx {ctx} capacity {capacity} adversarial",
                 models=True)


@pytest.mark.gpu
def test_split_is_clean_across_calls_and_graph_replays(cupy: Any) -> None:
    """Called twice, then captured and replayed 50 times: the same ids, and zeroed histograms and arrivals
    after each."""
    seed = fresh_seed()
    inputs = synthetic_scores(Call(300001, MAX_QUERIES, 524288), "levels64", seed)
    expected = topk_ids(inputs, "oracle")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        scores, steps = cupy.asarray(inputs.scores), cupy.asarray(inputs.steps)
        poison = cupy.asarray(id_poison((inputs.nq, SELECT_CAP)))
        ids = cupy.empty_like(poison)
        launch = topk_launch("split", scores, steps, ids)
        hist, arrivals = launch.accumulators

        def check(what: str) -> None:
            assert_ids(cupy.asnumpy(ids, stream=stream), expected, inputs, what)
            assert not bool(hist.any()), f"{what}: the split left its histograms dirty"
            assert not bool(arrivals.any()), f"{what}: the split left its arrivals counted"

        for n in range(2):
            cupy.copyto(ids, poison)
            launch()
            check(f"call {n}")
        stream.begin_capture()
        launch()
        graph = stream.end_capture()
        for replay in range(50):
            cupy.copyto(ids, poison)
            graph.launch(stream)
            check(f"replay {replay}")


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", ["0", "1"], ids=["plain", "programmatic"])
def test_split_plain_and_programmatic_launches(cupy: Any, pdl: str) -> None:
    """The split's launches 2-5 one after another (QSA_PDL=0) or overlapping (sm_90+): the oracle's ids
    either way, called back to back on one stream so that each call's first launch follows an emit."""
    seed = fresh_seed()
    cc = int(cupy.cuda.Device().compute_capability)
    for call in (Call(524288, MAX_QUERIES, 524288), Call(135176, PROMPT_QUERIES, 524288, True)):
        for score_set in SCORE_SETS:
            inputs = synthetic_scores(call, score_set, seed)
            expected = topk_ids(inputs, "oracle")
            scores, steps = cupy.asarray(inputs.scores), cupy.asarray(inputs.steps)
            poison = cupy.asarray(id_poison((inputs.nq, SELECT_CAP)))
            ids = cupy.empty_like(poison)
            launch = topk_launch("split", scores, steps, ids, call.active_blocks, switches={ENV_PDL: pdl})
            assert launch.programmatic == programmatic_launches(cc, {ENV_PDL: pdl})
            for n in range(3):
                cupy.copyto(ids, poison)
                launch()
                assert_ids(ids.get(), expected, inputs, f"{call.kind} {score_set} QSA_PDL={pdl} call {n}")


@pytest.mark.gpu
def test_split_graph_follows_a_growing_context(cupy: Any) -> None:
    """A decode graph replays while the context grows across a chunk boundary: only the steps change."""
    seed = fresh_seed()
    start = 16 * CELLS_PER_CHUNK - 12
    call = Call(start + 24, MAX_QUERIES, 262144)
    scores_host = synthetic_scores(call, "continuous", seed).scores  # rows cover every context replayed
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        scores = cupy.asarray(scores_host)
        steps = cupy.asarray(window_steps(start, MAX_QUERIES))
        poison = cupy.asarray(id_poison((MAX_QUERIES, SELECT_CAP)))
        ids = cupy.empty_like(poison)
        launch = topk_launch("split", scores, steps, ids)
        launch()
        stream.begin_capture()
        launch()
        graph = stream.end_capture()
        for ctx in range(start, start + 24):
            inputs = TopkInputs(scores_host, window_steps(ctx, MAX_QUERIES))
            steps.set(inputs.steps, stream=stream)
            cupy.copyto(ids, poison)
            graph.launch(stream)
            assert_ids(cupy.asnumpy(ids, stream=stream), topk_ids(inputs, "oracle"), inputs, f"graph at ctx {ctx}")


@pytest.mark.gpu
def test_threads_match_launch_bounds(cupy: Any) -> None:
    mod = QSA.compiled(QSA.get("topk", "reference"))  # topk.cu's kernels
    for variant in TOPK_CU_VARIANTS:
        v = QSA.get("topk", variant)
        for name in v.kernels:
            info = mod.info(name)
            assert info.max_threads == v.threads, f"{name}: launch bounds {info.max_threads}"
            assert info.local_bytes == 0, f"{name}: {info.local_bytes} bytes of local memory (spills)"


def test_split_grid_takes_the_smallest_chunk_with_at_most_four_ctas_an_sm() -> None:
    h200 = 132  # SMs: at most 528 CTAs
    assert split_grid(524288 // 4 + 2, 8, h200) == SplitGrid(2048, 65)  # 520 CTAs (1,032 with chunks of 1024)
    assert split_grid(262144 // 4 + 2, 8, h200) == SplitGrid(1024, 65)  # 520 (1,032 with 512)
    assert split_grid(131072 // 4 + 2, 1, h200) == SplitGrid(512, 65)
    assert split_grid(1048576 // 4 + 2, 8, h200) == SplitGrid(2048, 129)  # none holds: the largest
    assert split_grid(2 * SPLIT_CHUNK_BLOCKS, 1, 1) == SplitGrid(1024, 4)
    assert split_grid(2 * SPLIT_CHUNK_BLOCKS + 1, 1, 1) == SplitGrid(2048, 3)
    assert split_grid(SPLIT_CHUNK_BLOCKS, 1, 1) == SplitGrid(512, 4)


def test_launcher_rejects_bad_arguments() -> None:
    nq, mb = 2, 100
    scores = np.zeros((nq, mb), np.float32)
    steps = np.zeros((nq, 4), np.int32)
    ids = np.zeros((nq, SELECT_CAP), np.int32)
    bad = [
        (("cluster-of-one", scores, steps, ids), {}, "unknown topk variant"),
        (("split", scores.astype(np.float64), steps, ids), {}, "scores must be"),
        (("split", scores[:, ::2], steps, ids), {}, "scores must be"),
        (("wide", scores, steps[:1], ids), {}, "steps must be"),
        (("reference", scores, steps, ids[:, :-1]), {}, "ids must be"),
        (("split", scores, steps, ids), {"active_blocks": mb + 1}, "active_blocks"),
    ]
    for args, kwargs, message in bad:
        with pytest.raises(ValueError, match=message) as info:
            topk_launch(*args, **kwargs)
        assert "\n" not in str(info.value)


@pytest.mark.gpu
@pytest.mark.parametrize(("ctx", "nq", "capacity", "prompt"), [
    (9000, 1, 524288, False), (2100, 3, 524288, False), (131072, 3, 131072, False), (524288, MAX_QUERIES, 524288, False),
    (135176, PROMPT_QUERIES, 135176, True)])
def test_programmatic_split_stays_inside_its_buffers(cupy: Any, ctx: int, nq: int, capacity: int,
                                                     prompt: bool) -> None:
    """The split through the programmatic path (sm_90+) with guard zones around its scores, steps, ids and
    every scratch array, 100 calls and 20 graph replays: no guard byte written, the oracle's ids every time;
    and an array allocated from CuPy's pool after the launcher was built (where a freed scratch array's
    memory goes first) is never written (the sizes at which the freed counts once wrote 4-515 times)."""
    cc = int(cupy.cuda.Device().compute_capability)
    if not programmatic_launches(cc, {}):
        pytest.skip(f"programmatic launches need sm_90 or newer (this device is sm_{cc})")
    from qsa_cli.core.integrity import GuardedBuffers

    seed = fresh_seed()
    call = Call(ctx, nq, capacity, prompt)
    inputs = synthetic_scores(call, "continuous", seed)
    expected = topk_ids(inputs, "oracle")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        buffers = GuardedBuffers(cupy)
        scores, steps = buffers.asarray("scores", inputs.scores), buffers.asarray("steps", inputs.steps)
        poison = cupy.asarray(id_poison((inputs.nq, SELECT_CAP)))
        ids = buffers.empty("ids", poison.shape, np.int32)
        launch = topk_launch("split", scores, steps, ids, call.active_blocks, scratch=buffers)
        assert launch.programmatic
        neighbour = cupy.asarray(inputs.steps)  # the next case's step records, in the pool after the launcher's
        stream.begin_capture()
        launch()
        graph = stream.end_capture()
        for n in range(120):
            cupy.copyto(ids, poison)
            if n < 100:
                launch()
            else:
                graph.launch(stream)
            if n % 20 == 19:
                assert buffers.breaches() == [], f"call {n}"
                assert_ids(cupy.asnumpy(ids, stream=stream), expected, inputs, f"call {n}")
        assert cupy.asnumpy(neighbour, stream=stream).tobytes() == inputs.steps.tobytes(), "a neighbouring array was written"
