"""--timer nvbench on the CPU, against a stand-in for cuda-bench's ``cuda.bench`` (and ``cuda.bench.results``) put
in sys.modules: a deferred timer, whose measurements the measurer gives back pending while the stages run, each
launcher registered with the run's criterion and launched on nvbench's stream, one nvbench run as the run's cases
end, its JSON read back into those measurements, timed by nvbench; nvbench's output kept off qsa's; a failed run
one line; and the refusals (no cuda-bench, the CPU backend, another L2 state)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qsa_cli.cli import main
from qsa_cli.core.errors import TimerError
from qsa_cli.launch.shape import Described, KernelCall
from qsa_cli.nvbench_timer import NvbenchTimer, check_timer, cuda_bench
from qsa_cli.record.vocabulary import HOST_L2, NVBENCH_TIMER
from qsa_cli.runs.selftest import timers_check, timers_disagree
from qsa_cli.session import Settings, session
from qsa_cli.stages.common import Measurer, StageOutcome
from qsa_cli.timing import MAX_TIMEOUT_S, StoppingRule


class FakeBenchmark:
    def __init__(self, fn: Callable[[Any], None]) -> None:
        self.fn, self.settings, self.params = fn, {}, {}

    def set_name(self, name: str) -> FakeBenchmark:
        self.settings["name"] = name
        return self

    def set_cold_warmup_runs(self, count: int) -> FakeBenchmark:
        self.settings["warmup"] = count
        return self

    def set_stopping_criterion(self, name: str) -> FakeBenchmark:
        self.settings["criterion"] = name
        return self

    def set_criterion_param_float64(self, name: str, value: float) -> FakeBenchmark:
        self.params[name] = value
        return self

    def set_criterion_param_int64(self, name: str, value: int) -> FakeBenchmark:
        self.params[name] = value
        return self

    def set_min_samples(self, count: int) -> FakeBenchmark:
        self.settings["min_samples"] = count
        return self

    def set_timeout(self, seconds: float) -> FakeBenchmark:
        self.settings["timeout"] = seconds
        return self


class FakeStream:
    def addressof(self) -> int:
        return 0xBEEF


class FakeLaunch:
    def get_stream(self) -> FakeStream:
        return FakeStream()


class FakeState:
    """Runs the launcher as nvbench's cold measurement would, its warm-up first, then the criterion's count
    (``target-samples``, or ``min_samples`` for stdrel), timing each call on the host; 8 calls of a batch."""

    def __init__(self, benchmark: FakeBenchmark) -> None:
        self.benchmark, self.cold, self.batch = benchmark, [], []
        self.sync = False

    def exec(self, fn: Callable[[FakeLaunch], None], *, sync: bool = False, batched: bool | None = None) -> None:
        """``sync``: nvbench's sync tag (no blocking kernel, and no batch); ``batched=False``: no batch."""
        b = self.benchmark
        self.sync = sync
        count = b.params.get("target-samples", b.settings["min_samples"])
        for _ in range(b.settings["warmup"]):
            fn(FakeLaunch())
        for _ in range(count):
            t0 = time.perf_counter()
            fn(FakeLaunch())
            self.cold.append(time.perf_counter() - t0)
        if sync or batched is False:
            return
        t0 = time.perf_counter()
        for _ in range(8):
            fn(FakeLaunch())
        self.batch.append((time.perf_counter() - t0) / 8)


def _summary(value: float | int) -> dict[str, Any]:
    return {"value": value}


class FakeBench(types.ModuleType):
    """``cuda.bench``: register, and one run_all_benchmarks per process (as the real one), which writes a JSON
    file of each benchmark's summaries and samples (the stand-in's own layout, read by FakeResults) and prints
    to file descriptor 1, as nvbench's tables do."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__("cuda.bench")
        self.__version__ = "0.3.0"
        self.registered: list[FakeBenchmark] = []
        self.argv: list[str] | None = None
        self.fail = fail
        self.synced: dict[str, bool] = {}  # each benchmark's sync tag, as its state.exec was given it

    def register(self, fn: Callable[[Any], None]) -> FakeBenchmark:
        self.registered.append(FakeBenchmark(fn))
        return self.registered[-1]

    def run_all_benchmarks(self, argv: list[str]) -> None:
        if self.argv is not None:
            raise RuntimeError("Benchmarks were already executed")
        self.argv = list(argv)
        os.write(1, b"| nvbench's markdown table |\n")
        if self.fail:
            os.write(2, b"Fail: the blocking kernel timed out\n")
            raise RuntimeError("Caught unknown exception in nvbench_main")
        out = {}
        for b in self.registered:
            state = FakeState(b)
            b.fn(state)
            cold = np.array(state.cold)
            batch = {"nv/batch/time/gpu/mean": state.batch[0], "nv/batch/sample_size": 8} if state.batch else {}
            out[b.settings["name"]] = {
                "nv/cold/time/gpu/mean": float(cold.mean()), "nv/cold/time/gpu/median": float(np.median(cold)),
                "nv/cold/time/gpu/stdev/relative": float(cold.std() / cold.mean()),
                "nv/cold/sample_size": len(cold), **batch, "samples": state.cold}
            self.synced[b.settings["name"]] = state.sync
        Path(argv[argv.index("--jsonbin") + 1]).write_text(json.dumps(out))


class FakeSubState:
    def __init__(self, data: dict[str, Any]) -> None:
        self.summaries = {tag: types.SimpleNamespace(value=v) for tag, v in data.items() if tag.startswith("nv/")}
        self.samples, self.is_skipped, self.skip_reason = data["samples"], False, None


class FakeResult:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.data = json.loads(Path(path).read_text())

    def __getitem__(self, name: str) -> Any:
        return types.SimpleNamespace(states=[FakeSubState(self.data[name])])


def fake_results() -> types.ModuleType:
    module = types.ModuleType("cuda.bench.results")
    module.BenchmarkResult = types.SimpleNamespace(from_json=FakeResult)  # type: ignore[attr-defined]
    return module


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> FakeBench:
    fake = FakeBench()
    cuda = types.ModuleType("cuda")
    cuda.bench = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "cuda.bench", fake)
    monkeypatch.setitem(sys.modules, "cuda.bench.results", fake_results())
    monkeypatch.setattr("qsa_cli.nvbench_timer._RUN_IN_THIS_PROCESS", [])  # this test's process, as it were
    return fake


@contextlib.contextmanager
def recording_stream(log: list[tuple[int, int]], stream: Any, device_id: int) -> Iterator[None]:
    log.append((stream.addressof(), device_id))
    yield


def timer_of(bench: FakeBench, streams: list[tuple[int, int]], warmup: int = 2) -> NvbenchTimer:
    return NvbenchTimer(cuda_bench(), device_id=1, warmup=warmup,
                        on_stream=lambda stream, device: recording_stream(streams, stream, device))


CASE = {"ctx": 9000, "nq": 1, "capacity": 9000, "kind": "decode", "l2": HOST_L2}


def test_measurements_are_pending_then_timed_in_one_nvbench_run_each_on_its_stream(bench: FakeBench, capfd) -> None:
    streams: list[tuple[int, int]] = []
    timer = timer_of(bench, streams)
    calls = {"multi": 0, "halve": 0}

    def launcher(name: str) -> Callable[[], None]:
        return lambda: calls.__setitem__(name, calls[name] + 1)

    measurer = Measurer(7, timer, clocks=None)
    assert measurer.deferred and measurer.l2 == "dirty"
    multi = measurer.measure("scores", "multi", CASE, launcher("multi"), bytes_read=4096)
    described = Described(launcher("halve"), (KernelCall("block_scores_halve_kernel<4>", (528,), (128,)),))
    halve = measurer.measure("scores", "halve", CASE, described)
    rows = [multi, halve]
    assert all(m is not None and m.samples_us == [] and m.timer == NVBENCH_TIMER for m in rows)  # pending
    assert timer.pending == rows and calls == {"multi": 0, "halve": 0} and bench.argv is None  # nothing ran yet
    measurer.complete()
    assert timer.pending == []
    assert bench.argv is not None and bench.argv[1:3] == ["--devices", "1"] and "--jsonbin" in bench.argv
    assert calls == {"multi": 2 + 7 + 8, "halve": 2 + 7 + 8}  # warm-up, the exact count, the batch
    assert streams and set(streams) == {(0xBEEF, 1)}  # every call on nvbench's stream of the run's device
    settings = [b.settings | b.params for b in bench.registered]
    assert all(s["criterion"] == "sample-count" and s["target-samples"] == 7 and s["min_samples"] == 7
               and s["timeout"] == MAX_TIMEOUT_S and s["warmup"] == 2 for s in settings)
    assert [(m.variant, m.timer, len(m.samples_us), m.bytes_read) for m in rows] == [
        ("multi", NVBENCH_TIMER, 7, 4096), ("halve", NVBENCH_TIMER, 7, None)]
    for m in rows:
        assert m.nvbench is not None and m.nvbench["samples"] == 7 and m.nvbench["version"] == "0.3.0"
        assert m.nvbench["cold_median_us"] == pytest.approx(float(np.median(m.samples_us)))
        assert m.batch == {"launches": 8, "means_us": [m.nvbench["batch_mean_us"]]} and m.case == CASE
        assert m.stop is None and m.rounds is None and m.warmup == 2
    assert [m.launches for m in rows] == [None, [{"kernel": "block_scores_halve_kernel<4>", "grid": [528],
                                                 "block": [128], "cluster": 0, "shared_bytes": 0,
                                                 "programmatic": False}]]
    assert "nvbench's markdown table" not in capfd.readouterr().out  # nvbench's output is not qsa's


def test_the_clocks_are_read_around_nvbenchs_one_run_for_every_measurement(bench: FakeBench) -> None:
    readings = iter([types.SimpleNamespace(throttled=t, to_dict=lambda t=t: {"throttled": t}) for t in (False, True)])
    clocks = types.SimpleNamespace(read=lambda: next(readings))
    measurer = Measurer(3, timer_of(bench, []), clocks=clocks)
    rows = [measurer.measure("scores", v, CASE, lambda: None) for v in ("multi", "halve")]
    measurer.complete()  # both readings taken by now: one before the run, one after
    assert all(m is not None and m.clocks_before == {"throttled": False} and m.clocks_after == {"throttled": True}
               and m.throttled for m in rows)


def test_iters_auto_is_nvbenchs_stdrel_criterion_with_the_runs_rule(bench: FakeBench) -> None:
    timer = timer_of(bench, [])
    rule = StoppingRule(min_samples=12, max_noise_pct=2.5, min_time_s=0.25, timeout_s=30.0)
    m = Measurer("auto", timer, rule=rule).measure("topk", "split", CASE, lambda: None)
    timer.complete(None)
    (b,) = bench.registered
    assert b.settings["criterion"] == "stdrel" and b.params == {"max-noise": 0.025, "min-time": 0.25}
    assert b.settings["min_samples"] == 12 and b.settings["timeout"] == 30.0 and m is not None
    assert len(m.samples_us) == 12


def test_a_failed_nvbench_run_is_one_error_with_its_output(monkeypatch: pytest.MonkeyPatch, bench: FakeBench) -> None:
    bench.fail = True
    timer = timer_of(bench, [])
    Measurer(3, timer).measure("scores", "halve", CASE, lambda: None)
    with pytest.raises(TimerError) as failed:
        timer.complete(None)
    assert str(failed.value).startswith("nvbench failed: Caught unknown exception in nvbench_main")
    assert "the blocking kernel timed out" in str(failed.value)


def test_nvbench_runs_once_a_process_and_a_second_run_says_so(bench: FakeBench) -> None:
    first, second = timer_of(bench, []), timer_of(bench, [])
    for timer in (first, second):
        Measurer(3, timer).measure("scores", "halve", CASE, lambda: None)
    first.complete(None)
    assert first.pending == []
    with pytest.raises(TimerError, match="nvbench runs once per process and already ran in this one"):
        second.complete(None)


def test_nothing_pending_runs_no_nvbench(bench: FakeBench) -> None:
    timer = timer_of(bench, [])
    measurer = Measurer(0, timer)
    assert measurer.measure("scores", "halve", CASE, lambda: None) is None  # ITERS 0: parity only
    measurer.complete()
    assert bench.argv is None


def test_an_interrupted_run_keeps_no_measurement_nvbench_never_timed(bench: FakeBench) -> None:
    """The session's cases end early: what nvbench was given leaves the record untimed (it never runs)."""
    with session(Settings(backend="cpu", iters=3), "select-bench", []) as s:
        s.run_measurer = Measurer(3, timer_of(bench, []))
        with pytest.raises(KeyboardInterrupt), s.measuring() as measurer:
            s.take(StageOutcome([measurer.measure("scores", "halve", CASE, lambda: None)]))
            assert len(s.record.measurements) == 1
            raise KeyboardInterrupt
    assert s.record.measurements == [] and bench.argv is None


def test_a_failed_nvbench_run_leaves_no_untimed_measurement(bench: FakeBench) -> None:
    """nvbench's one batch fails as the cases end: the record keeps none of what it was to time."""
    bench.fail = True
    with session(Settings(backend="cpu", iters=3), "select-bench", []) as s:
        s.run_measurer = Measurer(3, timer_of(bench, []))
        with pytest.raises(TimerError, match="nvbench failed"), s.measuring() as measurer:
            s.take(StageOutcome([measurer.measure("scores", "halve", CASE, lambda: None)]))
    assert s.record.measurements == [] and bench.argv is not None


def test_a_runs_cases_end_with_nvbenchs_one_run(bench: FakeBench) -> None:
    """The measurements taken into the record while the cases run are nvbench's once the cases end."""
    with session(Settings(backend="cpu", iters=3), "select-bench", []) as s:
        s.run_measurer = Measurer(3, timer_of(bench, []))
        with s.measuring() as measurer:
            for variant in ("multi", "halve"):
                s.take(StageOutcome([measurer.measure("scores", variant, CASE, lambda: None)]))
            assert all(m.samples_us == [] for m in s.record.measurements)
    assert [(m.variant, len(m.samples_us), m.timer) for m in s.record.measurements] == [
        ("multi", 3, NVBENCH_TIMER), ("halve", 3, NVBENCH_TIMER)]


def test_the_timer_is_refused_where_it_cannot_time(bench: FakeBench) -> None:
    check_timer(NVBENCH_TIMER, "gpu", "dirty")  # cuda-bench there: nothing to refuse
    with pytest.raises(TimerError, match="needs --backend gpu"):
        check_timer(NVBENCH_TIMER, "cpu", "dirty")
    with pytest.raises(TimerError, match=r"times --l2 dirty only \(got --l2 warm\)"):
        check_timer(NVBENCH_TIMER, "gpu", "warm")
    check_timer("qsa", "cpu", "warm")


def test_without_cuda_bench_the_timer_is_one_line_exit_2_before_anything_runs(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "cuda", None)  # import cuda fails, as where cuda-bench is not installed
    with pytest.raises(SystemExit) as ended:
        main(["select-bench", "4096", "1", "3", "8192", "--timer", "nvbench"])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "--timer nvbench needs NVIDIA's nvbench, the cuda-bench package (pip install '.[nvbench]')" in err


def test_the_timers_tolerance_is_5_percent_or_half_a_microsecond() -> None:
    assert not timers_disagree(6.9, 6.5) and timers_disagree(7.1, 6.5)  # 0.5 µs over the 5 % of 6.5 µs
    assert not timers_disagree(25.2, 24.0) and timers_disagree(25.3, 24.0)  # 5 % of 24 µs: 1.2 µs


def test_the_selftests_timers_row_is_skipped_and_says_why_without_cuda_bench(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cuda", None)
    with session(Settings(backend="cpu", iters=0), "selftest", []) as s:
        row = timers_check(s, 0)
    assert row.passed is None and row.cases == 0
    assert row.detail.startswith("skipped: --timer nvbench needs NVIDIA's nvbench, the cuda-bench package")


def test_a_launcher_that_synchronises_takes_nvbenchs_sync_tag_and_no_batch(bench: FakeBench) -> None:
    """cupy.argpartition waits for the stream on the host: behind nvbench's blocking kernel it would deadlock
    (nvbench: "missing nvbench::exec_tag::sync?"), so it is timed with the sync tag, which takes no batch."""
    timer = timer_of(bench, [])
    measurer = Measurer(5, timer, clocks=None)
    sorted_ = measurer.measure("topk", "cupy.argpartition", CASE, lambda: None, synchronizes=True)
    split = measurer.measure("topk", "split", CASE, lambda: None)
    measurer.complete()
    assert sorted_ is not None and split is not None
    assert sorted_.batch is None and sorted_.nvbench is not None and sorted_.nvbench["batch_mean_us"] is None
    assert split.batch is not None
    assert bench.synced == {"0: topk cupy.argpartition": True, "1: topk split": False}


def test_a_timer_without_batches_times_the_cold_samples_only(bench: FakeBench) -> None:
    """The selftest's timers row compares cold medians: its nvbench run skips the batch (half a second each)."""
    timer = NvbenchTimer(cuda_bench(), device_id=1, warmup=1, batched=False,
                         on_stream=lambda stream, device: recording_stream([], stream, device))
    halve = Measurer(6, timer, clocks=None).measure("scores", "halve", CASE, lambda: None)
    timer.complete(None)
    assert halve is not None and halve.batch is None and halve.nvbench is not None
    assert halve.nvbench["batch_mean_us"] is None and len(halve.samples_us) == halve.nvbench["samples"] == 6
