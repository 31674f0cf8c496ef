"""A fake engine checkout's variants on the GPU, through qsa_cli/engine/, in both API generations
(tests/fake_engine.py): the same bytes as qsa's kernels and CPU models (the newer generation's dx scorer and
multi-CTA top-k too), its TF32 scorer inexact exactly where the fake makes it so, a flipped variant caught
where it flips, a slowed one measured slower, a short multi-CTA scratch caught by its guard zones, a CUDA
error named.

GPU tests (``-m gpu``) skip cleanly without cupy or a device; each draws a fresh seed, printed
(``QSA_TEST_SEED=N`` replays one). The engine reads its switches once per process, so every other
setting (the sm_86 paths under ``STRATA_EMULATE_CC=86``, the other scorers) runs these tests again in a
child process.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import fresh_seed, scorer_launch, topk_launch
from fake_builds import FakeBuilds
from fake_engine import FLIPPED_ENTRY, GENERATIONS, NEWER, SLOW_NS, TC_INEXACT_STRIDE

from qsa_cli.core.errors import EngineError, EngineRefused
from qsa_cli.core.geometry import MAX_QUERIES, PROMPT_QUERIES, SELECT_CAP, STEP_NBID, Call
from qsa_cli.core.integrity import GuardedBuffers
from qsa_cli.engine.build import build_engine
from qsa_cli.engine.checkout import EngineCheckout
from qsa_cli.engine.domains import CLUSTER_MAX_QUERIES, engine_variants
from qsa_cli.engine.kinds import ENGINE_KINDS, engine_kinds
from qsa_cli.engine.launch import engine_scorer_launcher, engine_topk_launcher
from qsa_cli.engine.library import EngineLibrary, load_engine
from qsa_cli.inputs import ID_POISON, SCORE_SETS, id_poison, score_poison, synthetic_scorer_inputs, synthetic_scores
from qsa_cli.launch.scores import DeviceScorerInputs
from qsa_cli.model.scores import first_difference as first_score_difference
from qsa_cli.model.scores import score_blocks
from qsa_cli.model.topk import first_difference as first_id_difference
from qsa_cli.model.topk import topk_ids
from qsa_cli.timing import DeviceTimer

WINDOWS = [(2050, 9000), (32771, 262144), (300001, 524288)]  # the last query's tail: 2, 3 and 1 cells
TOPK_CASES = [(2048, 2048), (2052, 4096), (9000, 9000), (135176, 135176), (300001, 524288)]
# Switch settings run in a child each, with the tests they change (pytest -k).
CHILD_SETTINGS = [
    ({"STRATA_EMULATE_CC": "86"}, "topk or slowed or graphs"),
    ({"STRATA_QSA_CLUSTER": "0"}, "topk or graphs"),
    ({"STRATA_SCORES_RS": "0"}, "scorers or graphs"),
    ({"STRATA_SCORES_MULTI": "0"}, "scorers or graphs"),
    # what NAME.scores-dx and NAME.topk-multi imply on an H200 (qsa runs them so): the newer paths taken
    ({"STRATA_SCORES_DX": "1", "STRATA_TOPK_MULTI": "1", "STRATA_QSA_CLUSTER": "0"}, "scorers or topk or graphs or paths or scratch"),
]
SWITCHES = sorted({name for setting, _ in CHILD_SETTINGS for name in setting})


def device_cc(cupy: Any) -> int:
    return int(cupy.cuda.Device().compute_capability)


def newer_paths_on() -> bool:
    """Whether this process takes the newer generation's dx scorer and multi-CTA top-k (the child that sets
    their switches; the cluster off, which on sm_90 is dispatched before the multi-CTA path)."""
    return (os.environ.get("STRATA_SCORES_DX") == "1" and os.environ.get("STRATA_TOPK_MULTI") == "1"
            and os.environ.get("STRATA_QSA_CLUSTER") == "0")


def bitwise_kinds(stage: str, runs: tuple[str, ...]) -> tuple[str, ...]:
    """The kinds of ``stage`` the checkout runs here that are held to qsa's bits."""
    return tuple(k for k in engine_kinds(stage) if k in runs and ENGINE_KINDS[k].exact)


@pytest.fixture(scope="module")
def engines(cupy: Any, fake_builds: FakeBuilds) -> Callable[..., EngineLibrary]:
    """Fake engines for this device by their write_fake_engine options, each loaded once (fake_builds built
    them beforehand, in qsa's usual cache, where a child process finds them built)."""
    loaded: dict[Path, EngineLibrary] = {}

    def engine(**options: Any) -> EngineLibrary:
        tree = fake_builds.with_options(**options)
        if tree not in loaded:
            loaded[tree] = load_engine(build_engine(EngineCheckout(tree, "fake"), device_cc(cupy)))
        return loaded[tree]

    return engine


def scored(scores: np.ndarray, steps: np.ndarray) -> bytes:
    """The bytes a scorer must get right: each query's blocks 0..n_bid (what qsa's scores hash covers)."""
    return b"".join(scores[i, : int(nb) + 1].tobytes() for i, nb in enumerate(steps[:, STEP_NBID]))


def assert_same_scores(got: np.ndarray, want: np.ndarray, steps: np.ndarray, what: str) -> None:
    if scored(got, steps) != scored(want, steps):
        q, b = first_score_difference(got, want, steps) or (-1, -1)
        bits = [f"{x[q, b]!r} (0x{int(x[q:q+1, b:b+1].view(np.uint32)[0, 0]):08x})" for x in (got, want)]
        pytest.fail(f"{what}: query {q} block {b}: {bits[0]} vs {bits[1]}")


def assert_same_ids(got: np.ndarray, want: np.ndarray, steps: np.ndarray, what: str) -> None:
    if got.tobytes() != want.tobytes():
        where = first_id_difference(got, want, steps)
        detail = f"query {where[0]} position {where[1]}: id {got[where]} vs {want[where]}" if where else "past a width"
        pytest.fail(f"{what}: {detail}")


def run_scorer(cupy: Any, launch: Callable[[], None], out: Any) -> np.ndarray:
    out[...] = cupy.asarray(score_poison(out.shape))
    launch()
    return out.get()


def run_topk(cupy: Any, launch: Callable[[], None], ids: Any) -> np.ndarray:
    ids[...] = cupy.asarray(id_poison(ids.shape))
    launch()
    return ids.get()


def sub_window(dev: DeviceScorerInputs, nq: int) -> DeviceScorerInputs:
    """The last nq queries of a window: the window of nq queries ending at the same context."""
    return DeviceScorerInputs(dev.pooled, dev.dead, dev.q[-nq:], dev.steps[-nq:])


@pytest.mark.gpu
@pytest.mark.parametrize("generation", GENERATIONS)
@pytest.mark.parametrize(("ctx", "capacity"), WINDOWS, ids=[f"{c}-of-{k}" for c, k in WINDOWS])
def test_engine_scorers_match_qsa_and_the_model(cupy: Any, engines: Callable[..., EngineLibrary], ctx: int,
                                                capacity: int, generation: str) -> None:
    """Every bitwise scorer the checkout runs here (the newer one's dx scorer: its path in the child that sets
    STRATA_SCORES_DX=1, the default path elsewhere; the same bits either way)."""
    lib = engines(generation=generation)
    kinds = bitwise_kinds("scores", engine_variants(lib, device_cc(cupy)))
    inputs = synthetic_scorer_inputs(Call(ctx, MAX_QUERIES, capacity), fresh_seed())
    model = score_blocks(inputs, order="butterfly")
    dev_all = DeviceScorerInputs.from_host(inputs)
    for nq in range(1, MAX_QUERIES + 1):
        dev = sub_window(dev_all, nq)
        steps = inputs.steps[-nq:]
        out = cupy.empty((nq, inputs.max_blocks), np.float32)
        qsa = run_scorer(cupy, scorer_launch("reference", dev, out), out)
        for variant in kinds:
            got = run_scorer(cupy, engine_scorer_launcher(lib, variant, dev, out), out)
            what = f"{generation} engine {variant}, context {ctx} of {capacity}, {nq} queries"
            assert_same_scores(got, qsa, steps, f"{what} vs qsa's reference kernel")
            assert_same_scores(got, model[-nq:], steps, f"{what} vs the CPU model")


@pytest.mark.gpu
def test_engine_reference_scorer_takes_a_prompt_call(cupy: Any, engines: Callable[..., EngineLibrary]) -> None:
    call = Call(9000, PROMPT_QUERIES, 262144, prompt=True)
    inputs = synthetic_scorer_inputs(call, fresh_seed())
    out = cupy.empty((call.nq, inputs.max_blocks), np.float32)
    launch = engine_scorer_launcher(engines(), "scores-ref", DeviceScorerInputs.from_host(inputs), out)
    got = run_scorer(cupy, launch, out)
    assert_same_scores(got, score_blocks(inputs), inputs.steps, "engine scores-ref, a prompt call of 64 queries")


@pytest.mark.gpu
@pytest.mark.parametrize("generation", GENERATIONS)
@pytest.mark.parametrize("prompt", [False, True], ids=["decode", "prompt"])
@pytest.mark.parametrize(("ctx", "capacity"), TOPK_CASES, ids=[f"{c}-of-{k}" for c, k in TOPK_CASES])
def test_engine_topk_variants_match_qsa_and_the_oracle(cupy: Any, engines: Callable[..., EngineLibrary], ctx: int,
                                                       capacity: int, prompt: bool, generation: str) -> None:
    """Every top-k variant the checkout runs here; the others refused at construction, launching nothing (the
    multi-CTA top-k for a prompt call: its scratch serves decode calls)."""
    lib = engines(generation=generation)
    runs = engine_variants(lib, device_cc(cupy))
    seed = fresh_seed()
    call = Call(ctx, PROMPT_QUERIES if prompt else MAX_QUERIES, capacity, prompt)
    for score_set in SCORE_SETS:
        inputs = synthetic_scores(call, score_set, seed)
        oracle = topk_ids(inputs, "oracle")
        scores, steps = cupy.asarray(inputs.scores), cupy.asarray(inputs.steps)
        ids = cupy.empty((call.nq, SELECT_CAP), np.int32)
        label = f"{call.kind} context {ctx} of {capacity}, {score_set}"
        qsa = run_topk(cupy, topk_launch("reference", scores, steps, ids, call.active_blocks), ids)
        assert_same_ids(qsa, oracle, inputs.steps, f"qsa's reference, {label}")
        for variant in engine_kinds("topk"):
            make = functools.partial(engine_topk_launcher, lib, variant, scores, steps, ids, call.active_blocks)
            if (variant not in runs or (variant == "topk-cluster" and call.nq > CLUSTER_MAX_QUERIES)
                    or (variant == "topk-multi" and prompt)):
                with pytest.raises(EngineRefused) as info:
                    make()
                assert "\n" not in str(info.value)
                continue
            got = run_topk(cupy, make(), ids)
            assert_same_ids(got, qsa, inputs.steps, f"{generation} engine {variant} vs qsa's reference, {label}")


def decode_graph(cupy: Any, launch: Callable[[], None], stream: Any) -> Any:
    launch()  # first-use work stays out of the capture
    stream.begin_capture()
    launch()
    return stream.end_capture()


@pytest.mark.gpu
@pytest.mark.parametrize("generation", GENERATIONS)
def test_engine_variants_replay_from_cuda_graphs(cupy: Any, engines: Callable[..., EngineLibrary],
                                                 generation: str) -> None:
    """Each bitwise variant of a decode call captured and replayed; the split's scratch zero after every replay
    (the TF32 scorer takes an active count, which the engine does not capture)."""
    lib = engines(generation=generation)
    runs = engine_variants(lib, device_cc(cupy))
    seed = fresh_seed()
    call = Call(300001, MAX_QUERIES, 524288)
    scorer_in = synthetic_scorer_inputs(call, seed)
    topk_in = synthetic_scores(call, "levels64", seed)
    model, oracle = score_blocks(scorer_in), topk_ids(topk_in, "oracle")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        dev = DeviceScorerInputs.from_host(scorer_in)
        out = cupy.empty((call.nq, call.max_blocks), np.float32)
        scores, steps = cupy.asarray(topk_in.scores), cupy.asarray(topk_in.steps)
        ids = cupy.empty((call.nq, SELECT_CAP), np.int32)
        for variant in bitwise_kinds("scores", runs):
            graph = decode_graph(cupy, engine_scorer_launcher(lib, variant, dev, out), stream)
            for replay in range(5):
                got = run_scorer(cupy, functools.partial(graph.launch, stream), out)
                assert_same_scores(got, model, call.steps, f"engine {variant}, graph replay {replay}")
        for variant in bitwise_kinds("topk", runs):
            launch = engine_topk_launcher(lib, variant, scores, steps, ids)
            graph = decode_graph(cupy, launch, stream)
            for replay in range(5):
                got = run_topk(cupy, functools.partial(graph.launch, stream), ids)
                assert_same_ids(got, oracle, call.steps, f"engine {variant}, graph replay {replay}")
                dirty = [a for a in launch.accumulators if bool(a.any())]
                assert not dirty, f"engine {variant} left its scratch dirty after replay {replay}"


@pytest.mark.gpu
def test_the_tc_scorer_is_inexact_where_the_fake_makes_it_so(cupy: Any, engines: Callable[..., EngineLibrary]) -> None:
    """The newer generation's TF32 scorer: the reference's scores but the last mantissa bit of every
    TC_INEXACT_STRIDE-th block of each query, over the call's blocks (the launcher passes the largest n_bid + 1)."""
    lib = engines(generation=NEWER)
    inputs = synthetic_scorer_inputs(Call(32771, 4, 65536), fresh_seed())
    dev = DeviceScorerInputs.from_host(inputs)
    out = cupy.empty((inputs.nq, inputs.max_blocks), np.float32)
    if "scores-tc" not in engine_variants(lib, device_cc(cupy)):
        with pytest.raises(EngineRefused, match="qsa_block_scores_tc needs sm_80"):
            engine_scorer_launcher(lib, "scores-tc", dev, out)
        return
    want = score_blocks(inputs)
    for q, n_bid in enumerate(inputs.steps[:, STEP_NBID]):
        want.view(np.uint32)[q, : int(n_bid) + 1 : TC_INEXACT_STRIDE] ^= 1
    got = run_scorer(cupy, engine_scorer_launcher(lib, "scores-tc", dev, out), out)
    assert_same_scores(got, want, inputs.steps, "engine scores-tc against the reference with its documented bits flipped")


@pytest.mark.gpu
def test_the_newer_paths_run_under_their_switches(cupy: Any, engines: Callable[..., EngineLibrary]) -> None:
    """Each flipped on its own path: the dx scorer's and the multi-CTA top-k's flips show where their switches
    are set (the child of CHILD_SETTINGS that sets what qsa's scores-dx and topk-multi imply), and nowhere else;
    the multi-CTA top-k writes its scratch (poisoned by qsa: it needs no initial value) only there."""
    on = newer_paths_on()
    inputs = synthetic_scorer_inputs(Call(9001, 4, 16384), fresh_seed())
    dev = DeviceScorerInputs.from_host(inputs)
    out = cupy.empty((inputs.nq, inputs.max_blocks), np.float32)
    got = run_scorer(cupy, engine_scorer_launcher(engines(generation=NEWER, flip="scores-dx"), "scores-dx", dev, out),
                     out)
    assert first_score_difference(got, score_blocks(inputs), inputs.steps) == ((0, FLIPPED_ENTRY) if on else None)
    scores_in = synthetic_scores(Call(300001, MAX_QUERIES, 524288), "continuous", fresh_seed())
    scores, steps = cupy.asarray(scores_in.scores), cupy.asarray(scores_in.steps)
    ids = cupy.empty((scores_in.nq, SELECT_CAP), np.int32)
    launch = engine_topk_launcher(engines(generation=NEWER, flip="topk-multi"), "topk-multi", scores, steps, ids)
    scratch = launch.launches[0].arrays[-1]
    got = run_topk(cupy, launch, ids)
    assert first_id_difference(got, topk_ids(scores_in, "oracle"), scores_in.steps) == ((0, FLIPPED_ENTRY) if on
                                                                                            else None)
    assert bool((scratch == ID_POISON).all()) != on, "the multi-CTA path writes its scratch; no other path does"


@pytest.mark.gpu
def test_a_short_multi_scratch_breaks_a_guard_zone(cupy: Any, engines: Callable[..., EngineLibrary]) -> None:
    """qsa sizes the multi-CTA scratch by the checkout's qsa_topk_multi_scratch_ints: one 64 ints short is caught
    (the fake writes all of it), where the multi-CTA path runs."""
    if not newer_paths_on():
        pytest.skip("the multi-CTA path runs in the child that sets its switches")
    lib = engines(generation=NEWER)
    inputs = synthetic_scores(Call(9000, MAX_QUERIES, 9000), "continuous", fresh_seed())
    buffers = GuardedBuffers(cupy)
    scores, steps = buffers.asarray("scores", inputs.scores), buffers.asarray("steps", inputs.steps)
    ids = buffers.empty("ids", (inputs.nq, SELECT_CAP), np.int32)

    class Short:
        def zeros(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
            return buffers.zeros(name, (shape[0] - 64,), dtype)

    for allocator, breached in ((buffers, False), (Short(), True)):
        run_topk(cupy, engine_topk_launcher(lib, "topk-multi", scores, steps, ids, scratch=allocator), ids)
        cupy.cuda.get_current_stream().synchronize()
        breaches = buffers.breaches()
        assert bool(breaches) == breached and all("multi scratch" in b for b in breaches), breaches


@pytest.mark.gpu
def test_a_flipped_variant_differs_where_it_flips(cupy: Any, engines: Callable[..., EngineLibrary]) -> None:
    lib = engines(flip="scores")
    inputs = synthetic_scorer_inputs(Call(9001, 4, 16384), fresh_seed())
    want = score_blocks(inputs)
    flipped = want.copy()
    flipped.view(np.uint32)[0, FLIPPED_ENTRY] ^= 1
    dev = DeviceScorerInputs.from_host(inputs)
    out = cupy.empty((inputs.nq, inputs.max_blocks), np.float32)
    got = run_scorer(cupy, engine_scorer_launcher(lib, "scores", dev, out), out)
    assert first_score_difference(got, want, inputs.steps) == (0, FLIPPED_ENTRY)
    assert_same_scores(got, flipped, inputs.steps, "engine scores with its flipped bit")
    untouched = run_scorer(cupy, engine_scorer_launcher(lib, "scores-ref", dev, out), out)
    assert_same_scores(untouched, want, inputs.steps, "engine scores-ref of the same checkout")


@pytest.mark.gpu
@pytest.mark.alone
@pytest.mark.parametrize("variant", ["topk-ref", "topk-split"])
def test_a_slowed_variant_is_slower(cupy: Any, engines: Callable[..., EngineLibrary], variant: str) -> None:
    plain = engines()
    if variant not in engine_variants(plain, device_cc(cupy)):
        pytest.skip(f"{variant} does not run on this card (the child under STRATA_EMULATE_CC=86 runs it)")
    slowed = engines(slow=variant)
    inputs = synthetic_scores(Call(9000, MAX_QUERIES, 9000), "continuous", fresh_seed())
    oracle = topk_ids(inputs, "oracle")
    scores, steps = cupy.asarray(inputs.scores), cupy.asarray(inputs.steps)
    ids = cupy.empty((inputs.nq, SELECT_CAP), np.int32)
    timer = DeviceTimer(l2="warm")
    medians = {}
    for label, lib in (("plain", plain), ("slowed", slowed)):
        launch = engine_topk_launcher(lib, variant, scores, steps, ids)
        assert_same_ids(run_topk(cupy, launch, ids), oracle, inputs.steps, f"{label} engine {variant}")
        medians[label] = float(np.median(timer.measure(launch, 30).samples_us))
    assert medians["slowed"] - medians["plain"] >= 0.75 * SLOW_NS / 1000, medians


@pytest.mark.gpu
def test_a_cuda_error_is_named(cupy: Any, engines: Callable[..., EngineLibrary]) -> None:
    """A launch the runtime rejects (a grid of no CTAs) is an EngineError naming the CUDA error."""
    lib = engines()
    inputs = synthetic_scores(Call(9000, 1, 9000), "continuous", 0)
    scores, steps = cupy.asarray(inputs.scores), cupy.asarray(inputs.steps)
    ids = cupy.empty((1, SELECT_CAP), np.int32)
    stream = cupy.cuda.get_current_stream().ptr
    with pytest.raises(EngineError, match=r"qsa_block_topk_ref left CUDA error \d+ cudaError\w+ \("):
        lib.launch("qsa_block_topk_ref", scores.data.ptr, steps.data.ptr, 0, inputs.max_blocks, SELECT_CAP,
                   ids.data.ptr, stream)
    launch = engine_topk_launcher(lib, "topk-ref", scores, steps, ids)  # the error was cleared: the next call runs
    assert_same_ids(run_topk(cupy, launch, ids), topk_ids(inputs, "oracle"), inputs.steps, "after the error")


@pytest.mark.gpu
@pytest.mark.slow  # each setting runs its tests again in a pytest of its own
@pytest.mark.parametrize(("setting", "tests"), CHILD_SETTINGS,
                         ids=[",".join(f"{k}={v}" for k, v in s.items()) for s, _ in CHILD_SETTINGS])
def test_engine_switch_settings_in_a_child(cupy: Any, setting: dict[str, str], tests: str) -> None:
    """The engine reads each switch once per process: a setting's tests run again in a process of their own."""
    if any(os.environ.get(name) for name in SWITCHES):
        pytest.skip("this process is already a child with a switch set")
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", str(Path(__file__)),
           "-k", f"({tests}) and not child"]
    proc = subprocess.run(cmd, env={**os.environ, **setting}, capture_output=True, text=True, timeout=1800,
                          cwd=Path(__file__).resolve().parent.parent, check=False)
    assert proc.returncode == 0, f"{setting}:\n{proc.stdout[-8000:]}\n{proc.stderr[-2000:]}"
