"""scripts/paired_timers.py on the CPU: qsa's timer and a reference in alternating rounds on the same launchers in
one process. Against nvbench (a stand-in for cuda.bench): each round a benchmark a launcher, qsa's samples taken
just before nvbench's, every round's samples of both written out, the record's measurement the last round's.
Against ncu (a stand-in for CuPy's runtime): rounds outside the profiler's range, each followed by samples inside
it with the batches off, the measurement every unprofiled sample."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from qsa_cli import timing
from qsa_cli.nvbench_timer import NvbenchTimer
from qsa_cli.stages.common import Measurer
from qsa_cli.timing import Timed
from test_nvbench_timer import CASE, FakeBench, bench, timer_of  # noqa: F401  (bench: the fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import paired_timers  # noqa: E402


class LoggingDeviceTimer:
    """qsa's DeviceTimer as the pairing builds it: its samples of a launcher are logged, numbered."""

    log: list[str] = []

    def __init__(self, l2: str, warmup: int) -> None:
        self.l2, self.warmup = l2, warmup

    def measure(self, launch: Any, iters: int, synchronizes: bool = False) -> Timed:
        launch()
        self.log.append("qsa")
        return Timed(samples_us=[float(len(self.log))] * iters)


def test_nvbench_rounds_alternate_with_qsas_samples_on_the_same_launchers(bench: FakeBench, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(NvbenchTimer, "complete", NvbenchTimer.complete)  # the pairing's patch undone after
    monkeypatch.setattr(timing, "DeviceTimer", LoggingDeviceTimer)
    monkeypatch.setattr(LoggingDeviceTimer, "log", [])
    out = tmp_path / "paired.json"
    paired_timers.pair_with_nvbench(rounds=3, samples=4, out=out)
    launched: list[str] = []
    measurer = Measurer(7, timer_of(bench, []), clocks=None)
    rows = [measurer.measure("scores", v, CASE, lambda v=v: launched.append(v)) for v in ("multi", "halve")]
    measurer.complete()
    names = [b.settings["name"] for b in bench.registered]
    assert names == [f"round {r}: {i}: scores {v}" for r in range(3) for i, v in enumerate(("multi", "halve"))]
    assert all(b.params["target-samples"] == 4 for b in bench.registered)  # each round's exact count
    # each benchmark: qsa's samples (one call here), then nvbench's warm-up and samples, no batch
    assert launched == [v for _ in range(3) for v in ("multi",) * 7 + ("halve",) * 7]
    written = json.loads(out.read_text())
    assert (written["rounds"], written["samples"]) == (3, 4)
    multi, halve = written["calls"]
    assert (multi["variant"], halve["variant"], multi["case"]) == ("multi", "halve", CASE)
    assert [r[0] for r in multi["qsa_us"]] == [1.0, 3.0, 5.0] and [r[0] for r in halve["qsa_us"]] == [2.0, 4.0, 6.0]
    assert all(len(r) == 4 for c in (multi, halve) for key in ("qsa_us", "nvbench_us") for r in c[key])
    assert [m.samples_us for m in rows] == [multi["nvbench_us"][-1], halve["nvbench_us"][-1]]


def test_ncu_rounds_profile_samples_between_unprofiled_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    runtime = types.SimpleNamespace(deviceSynchronize=lambda: None, profilerStart=lambda: events.append("start"),
                                    profilerStop=lambda: events.append("stop"))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime)))

    def measure(self: Any, launch: Any, iters: int, before_last: Any = None, synchronizes: bool = False) -> Timed:
        events.append(f"measure {iters}")
        return Timed(samples_us=[float(len(events))] * iters)

    def sample(stream: Any, launch: Any, iters: int, *, warmup: int, before_last: Any = None) -> Timed:
        events.append(f"sample {iters}, warm-up {warmup}, hold {stream.hold_timeout_ns} ns")
        return Timed(samples_us=[-1.0] * iters)

    monkeypatch.setattr(timing.DeviceTimer, "measure", measure)
    monkeypatch.setattr(timing, "sample", sample)
    out = tmp_path / "paired.json"
    paired_timers.pair_with_ncu(rounds=2, samples=3, profiled=1, out=out)
    timer = types.SimpleNamespace(hold_timeout_ns=timing.HOLD_TIMEOUT_NS)
    timed = timing.DeviceTimer.measure(timer, lambda: None, 50)
    profiled = f"sample 1, warm-up 0, hold {paired_timers.PROFILED_HOLD_NS} ns"
    assert events == ["measure 3", "start", profiled, "stop"] * 2 and timer.hold_timeout_ns == timing.HOLD_TIMEOUT_NS
    assert timed.samples_us == [1.0] * 3 + [5.0] * 3  # the unprofiled samples of both rounds
    assert json.loads(out.read_text()) == {"rounds": 2, "samples": 3, "profiled": 1, "measurements": 1}
