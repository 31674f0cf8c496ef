"""The scorer kernels on the GPU (every scorer of the catalog): identical bytes to each other and to the exact CPU model.

GPU tests (``-m gpu``) skip cleanly without cupy or a device. Each draws a fresh seed, printed;
``QSA_TEST_SEED=N`` replays one. Every output is poisoned before its kernel runs, and exactly blocks
0..n_bid of each query must be written. The launcher's argument checks at the end need no device.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from conftest import QSA, fresh_seed, older_kernels, scorer_launch

from qsa_cli.cli import main
from qsa_cli.core.geometry import (
    HALVE_MAX_QUERIES,
    IDX_DIM,
    IDX_HEADS,
    MAX_QUERIES,
    STEP_NBID,
    WARP,
    Call,
    max_blocks,
    window_steps,
)
from qsa_cli.inputs import ADVERSARIAL_NANS, SCORE_POISON_BITS, ScorerInputs, score_poison, synthetic_scorer_inputs
from qsa_cli.kernels import load
from qsa_cli.launch.scores import ONE_PASS_SOURCE, SOURCE, DeviceScorerInputs
from qsa_cli.model.scores import butterfly_sum, first_difference, lane_partials, score_blocks

# (context, capacity): 8 cells to 524K, the window's last n_kv % 4 = 0, 1, 2, 1, 3, 0, 1, 3; capacity above the
# context. At 8 and 13 cells every block is some query's tail or below it (n_bid 0-3: the tails' own call).
WINDOWS = [(8, 64), (13, 64), (2050, 9000), (9001, 16384), (32771, 262144), (131072, 135176), (300001, 524288),
           (524287, 524296)]
ADVERSARIAL_WINDOWS = [(2050, 9000), (40003, 65536), (131077, 131100), (300001, 524288)]


def sub_window(inputs: ScorerInputs, nq: int) -> ScorerInputs:
    """The last nq queries of a window: the window of nq queries ending at the same context."""
    return ScorerInputs(inputs.pooled, inputs.dead, inputs.q[-nq:], inputs.steps[-nq:])


def run_variant(cupy: Any, variant: str, dev: DeviceScorerInputs) -> np.ndarray:
    out = cupy.asarray(score_poison((dev.nq, dev.max_blocks)))
    scorer_launch(variant, dev, out)()
    cupy.cuda.get_current_stream().synchronize()
    return out.get()


def assert_written_exactly(got: np.ndarray, steps: np.ndarray, what: str) -> None:
    bits = got.view(np.uint32)
    for i, nb in enumerate(steps[:, STEP_NBID]):
        unwritten = np.flatnonzero(bits[i, : nb + 1] == SCORE_POISON_BITS)
        assert unwritten.size == 0, f"{what}: query {i} block {unwritten[0]} <= n_bid {nb} not written"
        clobbered = np.flatnonzero(bits[i, nb + 1 :] != SCORE_POISON_BITS)
        assert clobbered.size == 0, f"{what}: query {i} block {nb + 1 + clobbered[0]} > n_bid {nb} written"


def assert_same_bytes(got: np.ndarray, want: np.ndarray, steps: np.ndarray, what: str) -> None:
    if got.tobytes() != want.tobytes():
        where = first_difference(got, want, steps)
        detail = f"query {where[0]} block {where[1]}: {got[where]!r} vs {want[where]!r}" if where else "past n_bid"
        pytest.fail(f"{what}: bytes differ, first at {detail}")


def check_window(cupy: Any, inputs: ScorerInputs, want_all: np.ndarray, label: str) -> None:
    """Every variant, 1..8 queries ending at the window's context, against the model's bytes (want_all)."""
    dev_all = DeviceScorerInputs.from_host(inputs)
    for nq in range(1, inputs.nq + 1):
        sub = sub_window(inputs, nq)
        dev = DeviceScorerInputs(dev_all.pooled, dev_all.dead, dev_all.q[-nq:], dev_all.steps[-nq:])
        want = want_all[-nq:]
        got = {v: run_variant(cupy, v, dev) for v in QSA.names("scores")}
        for v in QSA.names("scores"):
            what = f"{label} {nq} queries, {v}"
            assert_written_exactly(got[v], sub.steps, what)
            assert_same_bytes(got[v], got["reference"], sub.steps, f"{what} vs reference")
            assert_same_bytes(got[v], want, sub.steps, f"{what} vs the CPU model")


@pytest.mark.gpu
@pytest.mark.parametrize(("ctx", "capacity"), WINDOWS, ids=[f"{c}-of-{k}" for c, k in WINDOWS])
def test_scorers_match_model(cupy: Any, ctx: int, capacity: int) -> None:
    inputs = synthetic_scorer_inputs(Call(ctx, MAX_QUERIES, capacity), fresh_seed())
    check_window(cupy, inputs, score_blocks(inputs, order="butterfly"), f"context {ctx} of {capacity}")


@pytest.mark.gpu
@pytest.mark.parametrize(("ctx", "capacity"), ADVERSARIAL_WINDOWS, ids=[f"{c}-of-{k}" for c, k in ADVERSARIAL_WINDOWS])
def test_scorers_match_model_adversarial(cupy: Any, ctx: int, capacity: int) -> None:
    """The adversarial keys (qsa_cli/inputs.py): products past float32's range and under it, NaN, infinities
    and signed zeros, sums that cancel in a lane and across the butterfly."""
    inputs = synthetic_scorer_inputs(Call(ctx, MAX_QUERIES, capacity), fresh_seed(), "adversarial")
    want = score_blocks(inputs, order="butterfly")
    assert np.isinf(want).any() and (want == 0).any(), "the adversarial inputs should reach inf and 0 scores"
    check_window(cupy, inputs, want, f"adversarial context {ctx} of {capacity}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", QSA.names("scores"))
def test_graph_replay_follows_device_steps(cupy: Any, variant: str) -> None:
    """A launch captured into a CUDA graph reads every count from the device: replayed after the
    window's step records advance by one cell (a new block completes), it scores the new window."""
    ctx, capacity = 20003, 32768  # 20004 cells completes block 5000
    seed = fresh_seed()
    base = synthetic_scorer_inputs(Call(ctx, MAX_QUERIES, capacity), seed)
    windows = [ScorerInputs(base.pooled, base.dead, base.q, window_steps(c, MAX_QUERIES)) for c in (ctx, ctx + 1)]
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:  # the copies too: a non-blocking stream does not wait for the legacy default stream's
        dev = DeviceScorerInputs.from_host(windows[0])
        poison = cupy.asarray(score_poison((MAX_QUERIES, dev.max_blocks)))
        out = cupy.empty_like(poison)
        launch = scorer_launch(variant, dev, out)
        launch()  # any first-launch work happens outside the capture
        stream.begin_capture()
        launch()
        graph = stream.end_capture()
        for w in windows:
            dev.steps.set(w.steps, stream=stream)
            cupy.copyto(out, poison)
            graph.launch(stream)
            stream.synchronize()
            got = out.get()
            assert_written_exactly(got, w.steps, f"{variant} graph replay")
            assert_same_bytes(got, score_blocks(w, order="butterfly"), w.steps, f"{variant} graph replay at context {w.steps[-1, 1]}")


# The scorer's own lane partial and butterfly (scores_common.cuh's helpers, compiled with scores.cu), one warp a row, every
# lane's partial and sum written: the device's bits for NaN operands, invalid operations and subnormals.
PROBE = r"""
extern "C" __global__ void qsa_probe_lane_sums(const float* __restrict__ keys, const float* __restrict__ heads,
                                               float* __restrict__ partials, float* __restrict__ sums, int rows) {
    const int lane = lane_id();
    const int row = blockIdx.x * (blockDim.x / QSA_WARP) + threadIdx.x / QSA_WARP;
    if (row >= rows) return;  // warp-uniform
    const size_t at = (size_t)row * QSA_IDX_DIM;
    const float p = qsa_lane_partial(lane_slice(keys + at, lane), lane_slice(heads + at, lane));
    partials[(size_t)row * QSA_WARP + lane] = p;
    sums[(size_t)row * QSA_WARP + lane] = butterfly_from(p, QSA_WARP / 2);
}
"""
PROBE_WARPS = 8


def nan_probe_rows(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys and heads, row against row: NaN operands of every kind, 0 * inf in a lane's fma, +inf and -inf
    partials that the butterfly adds, finite rows across 1e-30..1e30 (subnormal and overflowing products),
    and the adversarial keys against their heads (cancelling in a lane and across the butterfly)."""
    keys, heads = ((rng.standard_normal((5 * n, IDX_DIM)) * 10.0 ** rng.uniform(-30, 30, (5 * n, 1))).astype(np.float32)
                   for _ in range(2))  # the last n rows stay finite
    rows = np.arange(n)
    keys[rows, rng.integers(0, IDX_DIM, n)] = rng.choice(ADVERSARIAL_NANS, n)  # a NaN operand
    heads[n + rows, rng.integers(0, IDX_DIM, n)] = rng.choice(ADVERSARIAL_NANS, n)
    dim = 4 * rng.integers(0, 32, n) + rng.integers(0, 4, n)
    keys[2 * n + rows, dim], heads[2 * n + rows, dim] = np.inf, 0.0  # 0 * inf: invalid
    keys[3 * n + rows, 4 * 3], heads[3 * n + rows, 4 * 3] = 1e30, 1e30  # lane 3's partial overflows to +inf
    keys[3 * n + rows, 4 * 17], heads[3 * n + rows, 4 * 17] = -1e30, 1e30  # lane 17's to -inf: inf - inf
    wild = synthetic_scorer_inputs(Call(4 * n, MAX_QUERIES, 4 * n), int(rng.integers(1 << 30)), "adversarial")
    wild_heads = wild.q.reshape(-1, IDX_DIM)
    pairs = rng.integers(0, wild_heads.shape[0], n)
    return np.concatenate([keys, wild.pooled[:n]]), np.concatenate([heads, wild_heads[pairs]])


@pytest.mark.gpu
def test_lane_partials_and_butterfly_bits_match_model(cupy: Any) -> None:
    """Every NaN the device's float32 fmul, fma and add give is 0x7FFFFFFF, whatever the operands' payloads
    (the model's rule, qsa_cli/model/scores.py), and every other value is the model's, lane by lane."""
    seed, n = fresh_seed(), 256
    keys, heads = nan_probe_rows(np.random.default_rng(seed), n)
    rows = keys.shape[0]
    want = np.stack([lane_partials(keys[r : r + 1], heads[r])[0] for r in range(rows)])
    want_sums = butterfly_sum(want)
    # a NaN operand or 0 * inf in a lane of each of the first 3n rows, inf - inf in the sum of the next n
    assert np.isnan(want[: 3 * n]).any(axis=1).all() and np.isnan(want_sums[3 * n : 4 * n]).all()
    probe = load(SOURCE, ("qsa_probe_lane_sums",), appended=PROBE).function("qsa_probe_lane_sums")
    partials = cupy.empty((rows, WARP), cupy.float32)
    sums = cupy.empty_like(partials)
    probe((-(-rows // PROBE_WARPS),), (PROBE_WARPS * WARP,),
          (cupy.asarray(keys), cupy.asarray(heads), partials, sums, np.int32(rows)))
    assert_same_lanes(partials.get(), want, f"seed {seed}: lane partials")
    assert_same_lanes(sums.get(), np.repeat(want_sums[:, None], WARP, axis=1), f"seed {seed}: butterfly sums")


def assert_same_lanes(got: np.ndarray, want: np.ndarray, what: str) -> None:
    bad = np.flatnonzero((got.view(np.uint32) != want.view(np.uint32)).any(axis=1))
    if bad.size:
        r = int(bad[0])
        pytest.fail(f"{what}: row {r}: device {[hex(x) for x in got[r].view(np.uint32)]}, "
                    f"model {[hex(x) for x in want[r].view(np.uint32)]}")


# ---- the launcher's argument checks (CPU: they fail before any kernel is resolved) ---------------


def _host_dev(nq: int) -> DeviceScorerInputs:
    mb = max_blocks(64)
    return DeviceScorerInputs(
        np.zeros((mb, IDX_DIM), np.float32),
        np.zeros(IDX_DIM, np.float32),
        np.zeros((nq, IDX_HEADS, IDX_DIM), np.float32),
        window_steps(64, nq),
    )


def test_launcher_rejects_unknown_variant() -> None:
    dev = _host_dev(1)
    with pytest.raises(ValueError, match="unknown scores variant 'fast'"):
        scorer_launch("fast", dev, np.zeros((1, dev.max_blocks), np.float32))


@pytest.mark.parametrize("variant", ["multi", "halve", "paired", "quarters"])
def test_decode_scorers_reject_more_than_8_queries(variant: str) -> None:
    dev = _host_dev(MAX_QUERIES + 1)
    with pytest.raises(ValueError, match="at most 8 queries"):
        scorer_launch(variant, dev, np.zeros((dev.nq, dev.max_blocks), np.float32))


def test_launcher_rejects_wrong_output() -> None:
    dev = _host_dev(2)
    with pytest.raises(ValueError, match="scores must be"):
        scorer_launch("reference", dev, np.zeros((2, dev.max_blocks - 1), np.float32))


def test_kernel_names_cover_variants() -> None:
    assert {v.source for v in QSA.stage("scores")} == {SOURCE, ONE_PASS_SOURCE}
    assert len(QSA.get("scores", "halve").kernels) == HALVE_MAX_QUERIES  # one instantiation per sub-window size
    assert len(QSA.get("scores", "paired").kernels) == MAX_QUERIES  # one per window size
    assert len(QSA.get("scores", "quarters").kernels) == MAX_QUERIES


@pytest.mark.gpu
def test_an_older_kernels_folder_runs_what_it_defines(cupy: Any, capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """--kernels a copy without the quarters kernel: its other scorers run (the window's pairs after the fastest
    scorer left out, the record says why); naming quarters is exit 2 with one line before anything runs."""
    old = older_kernels(tmp_path / "old")

    def run(command: str, *argv: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as ended:
            main([command, "4099", "4", "2", "8192", "--kernels", str(old), "--warmup", "0", *argv])
        return (ended.value.code, *capsys.readouterr())

    code, out, err = run("select-bench", "--variants", "reference,paired")
    assert code == 0 and "paired" in out and "PASS" in out, err
    code, out, err = run("select-bench", "--variants", "quarters")
    assert (code, out) == (2, "") and err.startswith("qsa: error: --variants: no variant 'quarters' (expected one of ")
    assert err.count("\n") == 1
    record = tmp_path / "window.json"
    code, out, err = run("window-bench", "--json", str(record))
    assert code == 0 and "quarters+" not in out and "halve+cluster" in out, err
    assert "no pair after the fastest scorer at 4 queries: qsa's quarters scores kernels are not in the run's kernel " \
           "sources (an older copy? name its variants with --variants)" in json.loads(record.read_text())["notes"]
