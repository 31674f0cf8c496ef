"""``--timer nvbench``: the run's launchers timed by NVIDIA's nvbench (the cuda-bench package's ``cuda.bench``)
instead of qsa's timer, into the same record.

nvbench runs its registered benchmarks once per process (``run_all_benchmarks`` refuses a second call), so
it is a deferred timer (timing.Timer): each measurement the measurer asks of it (stages/common.py) is given back
at once, pending, while the stages run their variants and checks, and it completes them all in one nvbench run
as the run's cases end (``complete``: session.Session.measuring). Each launcher
becomes a benchmark that launches it on nvbench's stream (CuPy's current stream, which every qsa launcher
launches on, made nvbench's); nvbench's cold measurement (the L2 flushed by a write, as qsa's ``--l2 dirty``;
a blocking kernel while it queues; its own throttle rule) and batch measurement time it. ITERS is nvbench's
exact sample count (its ``sample-count`` criterion), ``auto`` its ``stdrel`` criterion with qsa's
``--min-samples``, ``--max-noise``, ``--min-time`` and ``--timeout`` (its noise is the samples' relative
standard deviation, not the median's standard error: docs/timing.md). Its JSON output with every cold sample
(``--jsonbin``) is read back through ``cuda.bench.results``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core.errors import TimerError
from .record.schema import BatchTiming, Measurement, NvbenchSummary
from .record.vocabulary import NVBENCH_TIMER
from .timing import MAX_TIMEOUT_S, ClockSource, StoppingRule, TimingJob, clocked, read_clocks

PACKAGE = "cuda-bench"
INSTALL = "pip install '.[nvbench]'"
L2_STATE = "dirty"  # nvbench's cold measurement flushes the L2 by writing it (cudaMemsetAsync), as qsa's dirty
_COLD, _BATCH = "nv/cold/", "nv/batch/"
# Whether this process has run nvbench: its benchmarks run once per process (a second run_all_benchmarks
# raises), so a second run is refused with a message that says why.
_RUN_IN_THIS_PROCESS: list[bool] = []


def nvbench_used() -> bool:
    """Whether nvbench has run in this process already (it runs once per process)."""
    return bool(_RUN_IN_THIS_PROCESS)


def cuda_bench() -> Any:
    """The ``cuda.bench`` module; a TimerError naming the package when it is not installed."""
    try:
        import cuda.bench
    except ImportError as missing:
        raise TimerError(f"--timer nvbench needs NVIDIA's nvbench, the {PACKAGE} package ({INSTALL}): "
                         f"{missing}") from None
    return cuda.bench


def check_timer(timer: str, backend: str, l2: str) -> None:
    """``--timer nvbench`` refused where it cannot time the run, before anything is measured: on the CPU
    backend, in another L2 state than its cold measurement's, or without cuda-bench."""
    if timer != NVBENCH_TIMER:
        return
    if backend != "gpu":
        raise TimerError("--timer nvbench times CUDA launches: it needs --backend gpu")
    if l2 != L2_STATE:
        raise TimerError(f"--timer nvbench flushes the L2 by writing it before each cold sample: it times --l2 "
                         f"{L2_STATE} only (got --l2 {l2})")
    cuda_bench()


@dataclass(frozen=True)
class _Queued:
    name: str  # the benchmark's, unique in the run
    job: TimingJob
    measurement: Measurement  # given back pending; completed by the run


@contextlib.contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """The process's stdout and stderr (nvbench's C++ writes its tables to file descriptors 1 and 2) into
    ``log``: the run's own output stays qsa's."""
    saved = [os.dup(fd) for fd in (1, 2)]
    with log.open("wb") as sink:
        try:
            for fd in (1, 2):
                os.dup2(sink.fileno(), fd)
            yield
        finally:
            for fd, kept in zip((1, 2), saved):
                os.dup2(kept, fd)
                os.close(kept)


def _seconds_to_us(value: Any) -> float:
    return float(value) * 1e6


def on_cupy_stream(stream: Any, device_id: int) -> contextlib.AbstractContextManager[Any]:
    """nvbench's stream (a ``cuda.bench.CudaStream``) as CuPy's current stream, where qsa's launchers launch."""
    import cupy

    return cupy.cuda.ExternalStream(stream.addressof(), device_id)


@dataclass
class NvbenchTimer:
    """A deferred timer (timing.Timer): the launchers it is given, each timed in one nvbench run on device
    ``device_id`` after ``warmup`` untimed runs; ``batched``: with nvbench's batch measurement (about half a
    second a launcher) after the cold one; ``bench``: the ``cuda.bench`` module, and ``on_stream`` what makes its
    stream the launchers' (a test's stand-ins)."""

    bench: Any
    device_id: int
    warmup: int
    batched: bool = True
    on_stream: Callable[[Any, int], contextlib.AbstractContextManager[Any]] = on_cupy_stream
    queued: list[_Queued] = field(default_factory=list)

    deferred = True
    l2 = L2_STATE

    @property
    def pending(self) -> list[Measurement]:
        return [item.measurement for item in self.queued]

    def time(self, job: TimingJob, clocks: ClockSource | None) -> Measurement:
        """``job``'s measurement, pending: its samples come with the run (``complete``)."""
        measurement = job.measurement(self.warmup, NVBENCH_TIMER)
        self.queued.append(_Queued(f"{len(self.queued)}: {job.stage} {job.variant}", job, measurement))
        return measurement

    def _register(self, item: _Queued) -> None:
        job = item.job

        def on_nvbench_stream(launch: Any) -> None:
            with self.on_stream(launch.get_stream(), self.device_id):
                job.launch()

        def benchmark(state: Any) -> None:
            # a launch that synchronises cannot queue behind nvbench's blocking kernel (it would deadlock):
            # nvbench's sync tag times it without one, and without batches
            tags = {"sync": True} if job.synchronizes else {} if self.batched else {"batched": False}
            state.exec(on_nvbench_stream, **tags)

        registered = self.bench.register(benchmark)
        registered.set_name(item.name)
        registered.set_cold_warmup_runs(self.warmup)
        if isinstance(job.iters, StoppingRule):
            rule = job.iters
            registered.set_stopping_criterion("stdrel")
            registered.set_criterion_param_float64("max-noise", rule.max_noise_pct / 100)  # nvbench's: a ratio
            registered.set_criterion_param_float64("min-time", rule.min_time_s)
            registered.set_min_samples(rule.min_samples)
            registered.set_timeout(rule.timeout_s)
        else:
            registered.set_stopping_criterion("sample-count")
            registered.set_criterion_param_int64("target-samples", job.iters)
            registered.set_min_samples(job.iters)
            registered.set_timeout(MAX_TIMEOUT_S)  # an exact count is taken whole

    def complete(self, clocks: ClockSource | None) -> None:
        """Every pending measurement timed in one nvbench run, by nvbench (its cold samples, its summary, its
        batch), with ``clocks`` read around the run (None: no NVML). Nothing pending: nvbench does not run."""
        if not self.queued:
            return
        if nvbench_used():
            raise TimerError("nvbench runs once per process and already ran in this one: time with it in a run "
                             "of its own")
        _RUN_IN_THIS_PROCESS.append(True)
        before = read_clocks(clocks)
        for item in self.queued:
            self._register(item)
        from cuda.bench.results import BenchmarkResult

        with tempfile.TemporaryDirectory(prefix="qsa-nvbench-") as folder:
            path, log = Path(folder) / "nvbench.json", Path(folder) / "nvbench.log"
            try:
                with _output_to(log):
                    self.bench.run_all_benchmarks(["qsa", "--devices", str(self.device_id), "--jsonbin", str(path)])
            except RuntimeError as failed:
                tail = log.read_text(errors="replace").strip().splitlines()[-12:]
                raise TimerError(f"nvbench failed: {failed}" + "".join(f"\n  {line}" for line in tail)) from None
            after = read_clocks(clocks)
            results = BenchmarkResult.from_json(path)
            for item in self.queued:
                self._completed(item, results[item.name].states[0], before, after)
        self.queued = []

    def _completed(self, item: _Queued, state: Any, before: Any, after: Any) -> None:
        """``item``'s measurement completed from nvbench's state of its benchmark."""
        summaries = state.summaries
        if state.is_skipped or state.samples is None:
            raise TimerError(f"nvbench kept no samples of {item.job.variant} "
                             f"({state.skip_reason or 'no --jsonbin file'})")

        def value(tag: str) -> Any:
            return summaries[tag].value if tag in summaries else None

        batch_mean = value(_BATCH + "time/gpu/mean")
        batch_launches = value(_BATCH + "sample_size")
        summary = NvbenchSummary(
            version=str(getattr(self.bench, "__version__", "unknown")),
            cold_mean_us=_seconds_to_us(value(_COLD + "time/gpu/mean")),
            cold_median_us=_seconds_to_us(value(_COLD + "time/gpu/median")),
            noise_pct=100 * float(value(_COLD + "time/gpu/stdev/relative")),
            samples=int(value(_COLD + "sample_size")),
            batch_mean_us=_seconds_to_us(batch_mean) if batch_mean is not None else None,
            batch_launches=int(batch_launches) if batch_launches is not None else None,
        )
        m = item.measurement
        m.samples_us = [_seconds_to_us(t) for t in state.samples]
        m.batch = (BatchTiming(launches=summary["batch_launches"], means_us=[summary["batch_mean_us"]])
                   if summary["batch_mean_us"] is not None and summary["batch_launches"] else None)
        m.nvbench = summary
        clocked(m, before, after)
