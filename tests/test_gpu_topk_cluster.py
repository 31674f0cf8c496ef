"""block_topk_cluster_kernel on the GPU (sm_90+): ids identical to the CPU oracle's, at 8 and at 16 CTAs a
query (``QSA_CLUSTER_WIDE`` forces either; unset, the launcher's rule picks).

GPU tests (``-m gpu``) skip cleanly without cupy, a device or an sm_90 card. Each draws a fresh seed
(printed; ``QSA_TEST_SEED=N`` replays it). The ids are poisoned before every run and compared as bytes
with the oracle's matrix, which holds the poison past each query's width: exactly entries 0..width-1
of every row must be written.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import QSA, scorer_launch, topk_launch
from topk_rows import EARLY_ENDS, GATHERED_KINDS, early_end_inputs

from qsa_cli.catalog import Launcher, qsa_catalog
from qsa_cli.core.geometry import (
    CLUSTER_CTAS,
    CLUSTER_MIN_CC,
    CLUSTER_SIZES,
    CLUSTER_WIDE_CTAS,
    MAX_QUERIES,
    PROMPT_QUERIES,
    SELECT_CAP,
    STEP_NBID,
    Call,
    max_blocks,
    window_steps,
)
from qsa_cli.core.integrity import GuardedBuffers
from qsa_cli.dispatch import ENV_CLUSTER_WIDE, ENV_PDL
from qsa_cli.inputs import (
    SCORE_SETS,
    TopkInputs,
    id_poison,
    score_poison,
    synthetic_scorer_inputs,
    synthetic_scores,
)
from qsa_cli.kernels import kernel_dir
from qsa_cli.launch.driver import ProgrammaticLaunch, clusters_at_once
from qsa_cli.launch.topk_cluster import (
    STATIC_SMEM_BYTES,
    THREADS,
    WAITS_FOR_PRIOR_GRID,
    ClusterUnavailable,
    cluster_max_capacity,
    cluster_smem_bytes,
)
from qsa_cli.model.scores import score_blocks
from qsa_cli.model.topk import first_difference, topk_ids
from qsa_cli.stages.scores import place_scorer_inputs

# (context, capacity): the spec's selftest windows plus contexts up to 1,048,576 at capacity 1,048,576.
WINDOWS = [
    (9000, 9000),
    (135160, 135160),
    (135176, 135176),
    (2100, 262144),
    (9000, 262144),
    (32768, 262144),
    (262144, 262144),
    (300001, 524288),
    (524288, 524288),
    (2100, 1 << 20),
    (65539, 1 << 20),
    (1 << 20, 1 << 20),
]
# Prompt calls (64 queries) cost the CPU oracle 64 rows each: every set on these, levels64 on the rest.
PROMPT_WINDOWS = [(9000, 9000), (2100, 262144), (32768, 262144), (135176, 135176), (300001, 524288)]
# The adversarial scores against the cluster model, decode and (up to 300001 cells) prompt calls
ADVERSARIAL_WINDOWS = [(2052, 4096), (9003, 16384), (65539, 1 << 20), (300001, 524288), (1 << 20, 1 << 20)]
# The wide kernel (16 CTAs a query) on the windows where the rule takes it and on a few where it does not;
# the quick suite keeps the window's (420K), the slow one has the rest
WIDE_WINDOWS = [pytest.param(c, k, id=f"{c}-of-{k}", marks=() if c == 420000 else pytest.mark.slow)
                for c, k in [(9000, 9000), (65539, 1 << 20), (300001, 524288), (420000, 420000), (1 << 20, 1 << 20)]]
GRAPH_REPLAYS = 50
# Each size forced (the rule alone would run 8 queries at 8 CTAs a query on an H200)
SIZES = {"8-ctas": {ENV_CLUSTER_WIDE: "0"}, "16-ctas": {ENV_CLUSTER_WIDE: "1"}}


@pytest.fixture(scope="module")
def cupy(cupy: Any) -> Any:
    """conftest's CuPy, on an sm_90+ device only: else the test is skipped."""
    cc = int(cupy.cuda.Device().compute_capability)
    if cc < CLUSTER_MIN_CC:
        pytest.skip(f"the cluster top-k needs sm_{CLUSTER_MIN_CC}+ (this device is sm_{cc})")
    return cupy


@pytest.fixture
def seed(rng: np.random.Generator) -> int:
    return int(rng.integers(2**31))


@pytest.fixture(params=["8-ctas", pytest.param("16-ctas", marks=pytest.mark.slow)])
def size(request: pytest.FixtureRequest) -> dict[str, str]:
    """The switches that force one of the cluster's sizes (the wide one's cases in the slow suite)."""
    return SIZES[request.param]


def run_cluster(cupy: Any, inputs: TopkInputs, active_blocks: int = 0, switches: dict[str, str] | None = None) -> np.ndarray:
    scores, steps = cupy.asarray(inputs.scores), cupy.asarray(inputs.steps)
    ids = cupy.asarray(id_poison((inputs.nq, SELECT_CAP)))
    topk_launch("cluster", scores, steps, ids, active_blocks, switches=switches)()
    return cupy.asnumpy(ids)


def assert_ids(got: np.ndarray, want: np.ndarray, steps: np.ndarray, what: str) -> None:
    if got.tobytes() != want.tobytes():
        where = first_difference(got, want, steps)
        detail = f"query {where[0]} position {where[1]}: id {got[where]} vs {want[where]}" if where else "past width"
        pytest.fail(f"{what}: ids differ from the oracle's, first at {detail}")


def prompt_active(steps: np.ndarray) -> int:
    return int(steps[:, STEP_NBID].max()) + 1


def check_call(cupy: Any, inputs: TopkInputs, what: str, switches: dict[str, str] | None = None) -> None:
    """As the call it is (decode: no count; more than 8 queries: prompt, with its count)."""
    active = prompt_active(inputs.steps) if inputs.nq > MAX_QUERIES else 0
    assert_ids(run_cluster(cupy, inputs, active, switches), topk_ids(inputs, "oracle"), inputs.steps, what)


def decode_of(prompt: TopkInputs) -> TopkInputs:
    """A prompt window's last 8 queries: the decode window ending at the same context."""
    return TopkInputs(prompt.scores[-MAX_QUERIES:], prompt.steps[-MAX_QUERIES:], prompt.score_set)


@pytest.mark.gpu
@pytest.mark.parametrize("score_set", SCORE_SETS)
@pytest.mark.parametrize(("ctx", "capacity"), WINDOWS, ids=[f"{c}-of-{k}" for c, k in WINDOWS])
def test_decode_matches_oracle(cupy: Any, seed: int, ctx: int, capacity: int, score_set: str) -> None:
    inputs = synthetic_scores(Call(ctx, MAX_QUERIES, capacity), score_set, seed)
    check_call(cupy, inputs, f"decode {score_set} context {ctx} of {capacity}")


@pytest.mark.gpu
@pytest.mark.parametrize("score_set", SCORE_SETS)
@pytest.mark.parametrize(("ctx", "capacity"), WIDE_WINDOWS)
def test_the_wide_kernel_matches_oracle(cupy: Any, seed: int, ctx: int, capacity: int, score_set: str) -> None:
    """16 CTAs a query, 4 and 8 queries (an H200 runs 7 such clusters at once: 8 take two waves)."""
    for nq in (4, MAX_QUERIES):
        inputs = synthetic_scores(Call(ctx, nq, capacity), score_set, seed)
        check_call(cupy, inputs, f"wide, {nq} queries, {score_set} context {ctx} of {capacity}", SIZES["16-ctas"])


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("ctx", "capacity", "score_set"),
    [(c, k, s) for c, k in PROMPT_WINDOWS for s in SCORE_SETS] + [(1 << 20, 1 << 20, "levels64")],
)
def test_prompt_matches_oracle(cupy: Any, seed: int, ctx: int, capacity: int, score_set: str) -> None:
    """64 queries with the active block count; the same window's last 8 as a decode call."""
    inputs = synthetic_scores(Call(ctx, PROMPT_QUERIES, capacity, prompt=True), score_set, seed)
    want = topk_ids(inputs, "oracle")
    what = f"{score_set} context {ctx} of {capacity}"
    assert_ids(run_cluster(cupy, inputs, prompt_active(inputs.steps)), want, inputs.steps, f"prompt {what}")
    decode = decode_of(inputs)
    assert_ids(run_cluster(cupy, decode), want[-MAX_QUERIES:], decode.steps, f"decode {what}")


@pytest.mark.gpu
@pytest.mark.parametrize(("ctx", "capacity"), ADVERSARIAL_WINDOWS, ids=[f"{c}-of-{k}" for c, k in ADVERSARIAL_WINDOWS])
def test_adversarial_scores_match_the_model(cupy: Any, seed: int, ctx: int, capacity: int,
                                           size: dict[str, str]) -> None:
    """NaN, signed zeros, subnormals, infinities and runs of ties across the CTA slices (of either size) and
    128-key chunks, the threshold in a tie run or at NaN, zero, a subnormal or -inf: the cluster model's ids
    (its early ends included), then the oracle's."""
    for nq in (MAX_QUERIES, PROMPT_QUERIES) if ctx <= 300001 else (MAX_QUERIES,):
        inputs = synthetic_scores(Call(ctx, nq, capacity, prompt=nq > MAX_QUERIES), "adversarial", seed)
        got = run_cluster(cupy, inputs, prompt_active(inputs.steps) if nq > MAX_QUERIES else 0, size)
        what = f"adversarial, {nq} queries at context {ctx} of {capacity}, {size}"
        assert_ids(got, topk_ids(inputs, "cluster"), inputs.steps, f"{what} vs the cluster model")
        assert_ids(got, topk_ids(inputs, "oracle"), inputs.steps, what)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", EARLY_ENDS)
def test_each_early_end_matches_oracle(cupy: Any, seed: int, kind: str, size: dict[str, str]) -> None:
    """Rows whose select ends after 2, 3 or 4 passes, each way it can (tests/topk_rows.py), 8 queries."""
    inputs = early_end_inputs(kind, np.random.default_rng(seed), MAX_QUERIES)
    check_call(cupy, inputs, f"{kind} rows at context {EARLY_ENDS[kind][0]}, {size}", size)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", GATHERED_KINDS)
def test_each_gathered_near_row_matches_oracle(cupy: Any, seed: int, kind: str, size: dict[str, str]) -> None:
    """The near-block rows without their fillers: the gather path finds thr in every CTA, ties, a tail
    and near blocks apart or side by side included, 8 queries."""
    inputs = early_end_inputs(kind, np.random.default_rng(seed), MAX_QUERIES, gathered=True)
    check_call(cupy, inputs, f"gathered {kind} rows at context {EARLY_ENDS[kind][0]}, {size}", size)


def special_scores(rng: np.random.Generator, nq: int, capacity: int, shares: tuple[tuple[float, float], ...]) -> np.ndarray:
    """Normal scores with a share of the blocks replaced by each special value."""
    s = rng.standard_normal((nq, max_blocks(capacity))).astype(np.float32)
    kind = rng.random(s.shape)
    start = 0.0
    for value, share in shares:
        s[(kind >= start) & (kind < start + share)] = np.float32(value)
        start += share
    return s


# (value, share) pairs, not dicts: 0.0 and -0.0 are one dict key
SPECIAL_MIXES = {
    "sprinkled": ((np.nan, 0.01), (np.inf, 0.001), (-np.inf, 0.01), (0.0, 0.05), (-0.0, 0.05)),
    "mostly-nan": ((np.nan, 0.998), (np.inf, 0.0002)),  # thr lands on NaN's key 0
    "inf-and-zeros": ((np.inf, 0.3), (-np.inf, 0.3), (0.0, 0.2), (-0.0, 0.2)),  # +-0 tie as one key
    "mostly-minus-inf": ((-np.inf, 0.999),),
}


@pytest.mark.gpu
@pytest.mark.parametrize("mix", SPECIAL_MIXES)
@pytest.mark.parametrize(("ctx", "capacity"), [(9003, 16384), (131074, 262144)])
def test_nan_inf_and_signed_zeros(cupy: Any, seed: int, ctx: int, capacity: int, mix: str,
                                 size: dict[str, str]) -> None:
    rng = np.random.default_rng(seed)
    for nq in (MAX_QUERIES, PROMPT_QUERIES):
        inputs = TopkInputs(special_scores(rng, nq, capacity, SPECIAL_MIXES[mix]), window_steps(ctx, nq))
        check_call(cupy, inputs, f"{mix} {nq} queries at context {ctx} of {capacity}, {size}", size)


@pytest.mark.gpu
@pytest.mark.parametrize("ctx", [1, 8, 2051, 2052, 2053, 2058, 4096, 4097, 4098, 4099])
def test_identity_boundary_and_tails(cupy: Any, seed: int, ctx: int, size: dict[str, str]) -> None:
    """n_kv <= 2051 is the identity; 2052 the first cut; one query per tail of 0-3 cells."""
    for score_set in SCORE_SETS:
        for nq in sorted({1, min(ctx, MAX_QUERIES)}):
            inputs = synthetic_scores(Call(ctx, nq, 9000), score_set, seed)
            check_call(cupy, inputs, f"{score_set} {nq} queries at context {ctx}, {size}", size)


@pytest.mark.gpu
def test_graph_replays_follow_the_device_steps(cupy: Any, seed: int, size: dict[str, str]) -> None:
    """Captured once, replayed 50 times while the window grows a cell a replay (crossing blocks and
    tails, the steps rewritten on the device): every replay gives that window's oracle ids."""
    ctx, capacity = 40000, 65536
    base = synthetic_scores(Call(ctx + GRAPH_REPLAYS - 1, MAX_QUERIES, capacity), "levels64", seed)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        scores = cupy.asarray(base.scores)
        steps = cupy.asarray(window_steps(ctx, MAX_QUERIES))
        poison = cupy.asarray(id_poison((MAX_QUERIES, SELECT_CAP)))
        ids = cupy.empty_like(poison)
        launch = topk_launch("cluster", scores, steps, ids, switches=size)
        launch()  # module loading and first-use work stay out of the capture
        stream.begin_capture()
        launch()
        graph = stream.end_capture()
        for replay in range(GRAPH_REPLAYS):
            window = TopkInputs(base.scores, window_steps(ctx + replay, MAX_QUERIES))
            steps.set(window.steps, stream=stream)
            cupy.copyto(ids, poison)
            graph.launch(stream)
            got = cupy.asnumpy(ids, stream=stream)
            assert_ids(got, topk_ids(window, "oracle"), window.steps, f"replay {replay} (context {ctx + replay})")


@pytest.mark.gpu
@pytest.mark.parametrize(("scorer", "nq", "switches"), [("quarters", MAX_QUERIES, {}), ("paired", 5, {}),
                                                        ("quarters", 4, SIZES["16-ctas"])])
def test_the_windows_cluster_waits_for_its_scorer(cupy: Any, seed: int, scorer: str, nq: int,
                                                  switches: dict[str, str]) -> None:
    """The cluster right after one of qsa's scorers, as the window launches it (``follows_kernel``): on sm_90 a
    programmatic dependent launch (plain under QSA_PDL=0), which the scorer lets start while it still writes
    the scores. The scores are poisoned before every call and every graph replay: the ids are the oracle's
    on the CPU model's scores each time, so the kernel read the scores only once the scorer had ended; the
    inputs, scores and ids sit between guard zones, and the inputs end as they began."""
    inputs = synthetic_scorer_inputs(Call(65539, nq, 131072), seed)
    want = topk_ids(TopkInputs(score_blocks(inputs), inputs.steps), "oracle")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        buffers = GuardedBuffers(cupy)
        dev, watched = place_scorer_inputs(buffers, inputs)
        score_poison_ = cupy.asarray(score_poison((nq, inputs.max_blocks)))
        id_poison_ = cupy.asarray(id_poison((nq, SELECT_CAP)))
        scores = buffers.empty("scores", score_poison_.shape, np.float32)
        ids = buffers.empty("ids", id_poison_.shape, np.int32)
        cluster = QSA.get("topk", "cluster")
        plain = Launcher(QSA, {**switches, ENV_PDL: "0"}).topk(cluster, scores, dev.steps, ids, follows_kernel=True)
        assert not isinstance(plain.launches[0], ProgrammaticLaunch) and not plain.calls[0].programmatic
        select = Launcher(QSA, switches).topk(cluster, scores, dev.steps, ids, follows_kernel=True)
        assert isinstance(select.launches[0], ProgrammaticLaunch)  # the fixture's device is sm_90 or newer
        assert select.calls[0].programmatic
        score = scorer_launch(scorer, dev, scores)
        score()
        select()  # first use stays out of the capture
        stream.begin_capture()
        score()
        select()
        graph = stream.end_capture()
        for n in range(2 * GRAPH_REPLAYS):
            cupy.copyto(scores, score_poison_)
            cupy.copyto(ids, id_poison_)
            if n < GRAPH_REPLAYS:
                score()
                select()
            else:
                graph.launch(stream)
            got = cupy.asnumpy(ids, stream=stream)
            assert_ids(got, want, inputs.steps, f"{scorer} then cluster, call {n}")
        assert buffers.breaches() == []
        for name, (placed, host) in watched.items():
            assert cupy.asnumpy(placed, stream=stream).tobytes() == host.tobytes(), f"{name} changed"


@pytest.mark.gpu
def test_a_copy_of_the_kernels_without_the_wait_is_launched_plainly(cupy: Any, tmp_path: Path) -> None:
    """A kernels folder whose cluster kernel does not declare that it waits for the grid before it (one from
    before the wait, say, under ``qsa compare``) is launched plainly after a kernel: it could read the scores
    before they are complete."""
    assert QSA.compiled(QSA.get("topk", "cluster")).declares(WAITS_FOR_PRIOR_GRID)
    assert not QSA.compiled(QSA.get("topk", "split")).declares(WAITS_FOR_PRIOR_GRID)
    copy = tmp_path / "kernels"
    shutil.copytree(kernel_dir(), copy)
    source = copy / "topk_cluster.cu"
    text = source.read_text()
    declaration = f"// qsa-declares: {WAITS_FOR_PRIOR_GRID}\n"
    assert declaration in text
    source.write_text(text.replace(declaration, ""))
    catalog = qsa_catalog(copy)
    assert not catalog.compiled(catalog.get("topk", "cluster")).declares(WAITS_FOR_PRIOR_GRID)
    scores = cupy.zeros((MAX_QUERIES, max_blocks(65536)), np.float32)
    steps = cupy.asarray(window_steps(65536, MAX_QUERIES))
    ids = cupy.empty((MAX_QUERIES, SELECT_CAP), np.int32)
    launch = Launcher(catalog, {}).topk(catalog.get("topk", "cluster"), scores, steps, ids, follows_kernel=True)
    assert not isinstance(launch.launches[0], ProgrammaticLaunch) and not launch.calls[0].programmatic


@pytest.mark.gpu
def test_compiled_kernels_match_the_launcher(cupy: Any) -> None:
    variant = QSA.get("topk", "cluster")
    for name in variant.kernels:
        info = QSA.compiled(variant).info(name)
        print(info)
        assert info.max_threads == THREADS
        assert info.shared_bytes <= STATIC_SMEM_BYTES
        assert info.local_bytes == 0


@pytest.mark.gpu
def test_the_card_runs_every_query_of_a_call_at_8_ctas_and_some_at_16(cupy: Any) -> None:
    """The driver's count of clusters at once that the rule reads: a window of 8 queries fits at 8 CTAs a
    query, and at least one cluster of 16 runs (an H200: 7)."""
    variant = QSA.get("topk", "cluster")
    module = QSA.compiled(variant)
    counts = {}
    for name, ctas in zip(variant.kernels, CLUSTER_SIZES):
        kernel = module.function(name)
        smem = cluster_smem_bytes(max_blocks(524288), ctas)
        kernel.max_dynamic_shared_size_bytes = max(kernel.max_dynamic_shared_size_bytes, smem)
        counts[ctas] = clusters_at_once(kernel, ctas, THREADS, smem)
    print(f"clusters at once at 524288 cells: {counts}")
    assert counts[CLUSTER_CTAS] >= MAX_QUERIES and 1 <= counts[CLUSTER_WIDE_CTAS] < counts[CLUSTER_CTAS]


@pytest.mark.gpu
def test_refuses_a_capacity_past_the_device(cupy: Any) -> None:
    optin = int(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["sharedMemPerBlockOptin"])
    capacity = cluster_max_capacity(optin) + 1
    print(f"opt-in shared memory {optin} B: capacity at most {capacity - 1} cells")
    scores = cupy.zeros((1, max_blocks(capacity)), cupy.float32)
    steps = cupy.asarray(window_steps(9000, 1))
    ids = cupy.asarray(id_poison((1, SELECT_CAP)))
    with pytest.raises(ClusterUnavailable, match=f"capacity {capacity - capacity % 4} cells"):
        topk_launch("cluster", scores, steps, ids)
    largest = TopkInputs(np.zeros((1, max_blocks(capacity - 1)), np.float32), window_steps(9000, 1))
    assert_ids(run_cluster(cupy, largest), topk_ids(largest, "oracle"), largest.steps, "the largest capacity that fits")
