"""The timer on the GPU (``-m gpu``; skipped without CuPy or a device): select-bench under each L2 state and
the stopping rule, its record's fields; the flushes' states; a rule that cannot be met ends at its timeout;
the hold released by the host (a launcher that sleeps on the host past its timeout is detected, one that
sleeps within it is held) and each sample's SM clock; qsa's --l2 dirty against nvbench's cold on a scorer
and a window's graph (with cuda-bench installed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from qsa_cli.cli import main
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import RunRecord
from qsa_cli.record.vocabulary import L2_STATES, NVBENCH_TIMER, READ_FLOOR
from qsa_cli.runs.selftest import timers_disagree
from qsa_cli.timing import BATCH_LAUNCHES, BATCHES, DRAINED, ROUND, DeviceTimer, StoppingRule, sample

pytestmark = pytest.mark.alone  # every GPU test here times the card


def bench(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[RunRecord, str]:
    js = tmp_path / "r.json"
    with pytest.raises(SystemExit) as ended:
        main(["select-bench", "131072", "4", *argv, "--json", str(js), "--quiet"])
    out = capsys.readouterr().out
    assert (ended.value.code or 0) == 0, out
    return load_record(js), out


@pytest.mark.gpu
@pytest.mark.parametrize("l2", L2_STATES)
def test_select_bench_under_each_l2_state_records_it_with_batches(cupy: Any, capsys, tmp_path: Path, l2: str) -> None:
    record, out = bench(capsys, tmp_path, "30", "524288", "--l2", l2)
    assert record.settings["l2"] == l2 and "stopping" not in record.settings
    variants = {m.variant for m in record.measurements}
    assert {"multi", "halve", READ_FLOOR} <= variants  # the read floor under the same state
    for m in record.measurements:
        assert m.case["l2"] == l2 and len(m.samples_us) == 30 and m.stop is None
        assert m.batch is not None and m.batch["launches"] == BATCH_LAUNCHES and len(m.batch["means_us"]) == BATCHES
        assert all(0 < x < 1e6 for x in m.batch["means_us"])
    assert f"L2 {l2}" in " ".join(out.split()) and " batch " in out


@pytest.mark.gpu
def test_select_bench_auto_stops_by_the_rule_and_records_how(cupy: Any, capsys, tmp_path: Path) -> None:
    record, out = bench(capsys, tmp_path, "auto", "524288", "--min-samples", "15", "--max-noise", "1", "--timeout",
                        "20")
    assert record.settings["stopping"] == {"min_samples": 15, "max_noise_pct": 1.0, "min_time_s": 0.0,
                                           "timeout_s": 20.0}
    for m in record.measurements:
        assert m.stop is not None and len(m.samples_us) >= 15 and m.batch is not None
        if m.stop["met"]:
            assert m.stop["reason"] == "met" and m.stop["noise_pct"] <= 1.0
        else:
            assert m.stop["reason"] == "timeout" and m.stop["wall_s"] >= 20.0
    assert " rule " in out


@pytest.mark.gpu
def test_a_rule_that_cannot_be_met_ends_at_its_timeout_and_says_so(cupy: Any, capsys, tmp_path: Path) -> None:
    record, out = bench(capsys, tmp_path, "auto", "524288", "--max-noise", "0.000001", "--timeout", "0.5",
                        "--variants", "halve")
    (m,) = [m for m in record.measurements if m.variant == "halve"]  # the read floor is timed beside it
    assert m.stop is not None and not m.stop["met"] and m.stop["reason"] == "timeout"
    assert 0.5 <= m.stop["wall_s"] < 10 and len(m.samples_us) >= 20
    assert "NOT MET (timeout)" in out


@pytest.mark.gpu
@pytest.mark.parametrize("l2", L2_STATES)
def test_each_state_times_a_read_and_its_rule(cupy: Any, l2: str) -> None:
    """The timer itself, in each state, on a plain read: samples, batches and the rule's outcome."""
    timer = DeviceTimer(l2=l2, warmup=2)
    data = cupy.random.default_rng(1).random(4 * 2**20, dtype=cupy.float32)
    timed = timer.measure(timer.read_launcher(data), StoppingRule(min_samples=10, max_noise_pct=5.0, timeout_s=10.0))
    assert timed.stop is not None and len(timed.samples_us) >= 10
    assert all(x > 0 for x in timed.samples_us) and timed.batch is not None and len(timed.batch["means_us"]) == BATCHES


def sleeping(launch: Callable[[], None], at: set[int], seconds: float) -> Callable[[], None]:
    """``launch``, after sleeping ``seconds`` on the host before each call whose index is in ``at``."""
    calls = iter(range(10**9))

    def run() -> None:
        if next(calls) in at:
            time.sleep(seconds)
        launch()
    return run


@pytest.mark.gpu
def test_a_launcher_that_sleeps_on_the_host_past_the_holds_timeout_is_detected_and_measured_again(cupy: Any) -> None:
    timer = DeviceTimer(l2="warm", warmup=0, hold_timeout_ns=5_000_000)  # 5 ms
    read = timer.read_launcher(cupy.random.default_rng(2).random(4 * 2**20, dtype=cupy.float32))
    # the 41st launch sleeps 30 ms: the hold runs out while the host sleeps
    timed = sample(timer, sleeping(read, {ROUND + 8}, 0.03), 2 * ROUND, warmup=0, rule=timer.rule)
    assert timed.rounds is not None
    (drained,) = timed.rounds["discarded"]
    assert drained["reason"] == DRAINED and not drained["batch"] and len(drained["samples_us"]) == 1
    assert drained["samples_us"][0] > 10_000  # the GPU waited on the host inside that sample's events
    assert len(timed.samples_us) == 2 * ROUND and max(timed.samples_us) < 1_000  # none of the kept samples did
    assert timed.rounds["suspect"] == []


@pytest.mark.gpu
def test_a_host_slower_than_the_gpu_within_the_timeout_is_held_and_each_samples_clock_measured(cupy: Any) -> None:
    """Every launch sleeps 10 ms on the host, a hundred times the kernel's time, within the 100 ms timeout:
    the hold waits for the release, so no sample holds a gap."""
    timer = DeviceTimer(l2="warm", warmup=0)
    read = timer.read_launcher(cupy.random.default_rng(3).random(4 * 2**20, dtype=cupy.float32))
    timed = sample(timer, sleeping(read, set(range(10**6)), 0.01), 8, warmup=0, rule=timer.rule)
    assert timed.rounds is not None and timed.rounds["discarded"] == [] and timed.rounds["suspect"] == []
    assert max(timed.samples_us) < 500
    assert all(h is not None and 10_000 <= h < 100_000 for h in timed.rounds["held_us"])  # it waited for the host
    clocks = timed.rounds["sm_mhz"]
    assert len(clocks) == 8 and all(c is not None and 100 < c <= 1.05 * timed.rounds["reference_mhz"] for c in clocks)


@pytest.mark.gpu
def test_select_bench_records_every_samples_clock(cupy: Any, capsys, tmp_path: Path) -> None:
    record, _ = bench(capsys, tmp_path, "40", "524288", "--variants", "halve")
    for m in record.measurements:
        assert m.rounds is not None and len(m.rounds["sm_mhz"]) == BATCHES + 40  # the batches, then every sample
        assert m.rounds["reference_mhz"] > 0 and all(c is not None for c in m.rounds["sm_mhz"])


@pytest.mark.gpu
@pytest.mark.parametrize("call, agreeing", [
    (["select-bench", "32768", "1", "auto", "65536", "--variants", "halve"], {"halve", READ_FLOOR}),
    (["topk-parity", "131072", "1", "100", "262144", "0", "--variants", "split"], {"split"}),
    (["window-bench", "131072", "4", "auto", "262144", "--variants", "halve"], None),
], ids=["scorer-32K", "topk-131K", "window-131K"])
def test_qsa_dirty_and_nvbench_cold_agree(cupy: Any, capsys, tmp_path: Path, call: list[str],
                                          agreeing: set[str] | None) -> None:
    """The same launchers (halve on a 32K call of one query, 6.5 µs on an H200, and its read floor; the split
    top-k, beside cupy.argpartition, which synchronises: nvbench's sync tag times it; a window's CUDA graphs)
    timed by qsa's timer under --l2 dirty here and by nvbench in a process of its own (nvbench runs once a
    process): the same rows, and the medians of ``agreeing`` (None: all) within the selftest's tolerance
    (5 % or 0.5 µs). The top-k's take an exact count (nvbench's sample-count criterion): under the noise rule
    cupy.argpartition, whose host sort varies by tens of percent, would sample for seconds a score set."""
    pytest.importorskip("cuda.bench", reason="cuda-bench is not installed (pip install '.[nvbench]')")
    call = [*call, "--quiet"]
    nv_json = tmp_path / "nvbench.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "qsa_cli", *call, "--timer", "nvbench", "--json", str(nv_json)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    theirs = {(m.key, m.variant): m for m in load_record(nv_json).measurements}
    assert all(m.timer == NVBENCH_TIMER and m.nvbench is not None and m.nvbench["samples"] == len(m.samples_us)
               for m in theirs.values())
    ours_json = tmp_path / "qsa.json"
    with pytest.raises(SystemExit) as ended:
        main([*call, "--l2", "dirty", "--json", str(ours_json)])
    assert (ended.value.code or 0) == 0, capsys.readouterr().out
    ours = load_record(ours_json).measurements
    assert {(m.key, m.variant) for m in ours} == set(theirs)
    for m in ours:
        nv = theirs[(m.key, m.variant)]
        if agreeing is None or m.variant in agreeing:
            assert not timers_disagree(m.median_us, nv.median_us), (m.variant, m.median_us, nv.median_us)
