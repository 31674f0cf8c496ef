"""Measurement: CUDA-event timing of launch closures with warm-up and an explicit L2 state.

Only measures; never prints. Modelled on nvbench's cold measurement: before each cold sample the
L2 is flushed (a read of a buffer twice the L2's size, outside the timed region); each sample is
bracketed by its own pair of events; a batch of samples is queued behind a kernel that holds the
stream, so the host's launch rate never shows up in the times.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .kernels import load

L2_MODES = ("cold", "warm")
DEFAULT_WARMUP = 5
# The most timed samples (ITERS, a sweep's iterations) and untimed runs (--warmup, a sweep's warmup) a case
# takes, on the command line and in a YAML alike: past 10,000 samples a median gains nothing the clocks'
# drift does not swamp, and a larger number is a typo that would run for hours and fill the record.
MAX_ITERATIONS = 10_000
MAX_WARMUP = 10_000
_BATCH = 32  # samples queued behind one hold of the stream
_HOLD_NS_PER_SAMPLE = 60_000  # host time to enqueue a sample (events, flush and up to 6 launches), generously
_FLOOR_THREADS = 256

Launch = Callable[[], None]


def _bench_module(kernels: Path | None) -> Any:
    return load("bench.cu", ("read_floor_kernel", "hold_stream_kernel"), folder=kernels)


@dataclass
class DeviceTimer:
    """Times launch closures on the current CuPy stream of the current device; its read floor and stream hold
    are ``kernels``' bench.cu (the run's folder of kernel sources; None: the installed one)."""

    l2: str = "cold"
    warmup: int = DEFAULT_WARMUP
    kernels: Path | None = None

    def __post_init__(self) -> None:
        import cupy

        if self.l2 not in L2_MODES:
            raise ValueError(f"l2 must be one of {', '.join(L2_MODES)} (got {self.l2!r})")
        self._cupy = cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        self.sms = int(props["multiProcessorCount"])
        self.l2_bytes = int(props["l2CacheSize"])
        module = _bench_module(self.kernels)
        self._read = module.function("read_floor_kernel")
        self._hold = module.function("hold_stream_kernel")
        self._sink = cupy.zeros(1, dtype=cupy.float32)
        flush_floats = 2 * self.l2_bytes // 4 if self.l2 == "cold" else 4
        self._flush_buf = cupy.random.default_rng(0).random(flush_floats, dtype=cupy.float32)

    def read_launcher(self, array: Any, nbytes: int | None = None) -> Launch:
        """A plain float4 read of the first ``nbytes`` of ``array``: the read floor of those bytes."""
        cupy = self._cupy
        n4 = (array.nbytes if nbytes is None else nbytes) // 16
        blocks = max(1, min(self.sms * 8, (n4 + _FLOOR_THREADS - 1) // _FLOOR_THREADS))
        args = (array, cupy.int64(n4), self._sink)
        return lambda: self._read((blocks,), (_FLOOR_THREADS,), args)

    def flush_l2(self) -> None:
        if self.l2 == "cold":
            self.read_launcher(self._flush_buf)()

    def measure(self, launch: Launch, iters: int, before_each: Launch | None = None,
                before_last: Launch | None = None) -> list[float]:
        """``iters`` samples in microseconds, after ``warmup`` untimed runs.

        ``before_each`` runs before every sample outside the timed region (e.g. to reset state);
        ``before_last`` before the last one only (e.g. to re-poison the output, so that what it holds
        afterwards is the last timed call's). The L2 flush of cold mode comes after them.
        """
        cupy = self._cupy
        stream = cupy.cuda.get_current_stream()
        for _ in range(self.warmup):
            if before_each:
                before_each()
            self.flush_l2()
            launch()
        samples: list[float] = []
        for first in range(0, iters, _BATCH):
            count = min(_BATCH, iters - first)
            events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(count)]
            self._hold((1,), (1,), (cupy.int64(count * _HOLD_NS_PER_SAMPLE),))
            for i, (start, end) in enumerate(events):
                if before_each:
                    before_each()
                if before_last and first + i == iters - 1:
                    before_last()
                self.flush_l2()
                start.record(stream)
                launch()
                end.record(stream)
            stream.synchronize()
            samples += [cupy.cuda.get_elapsed_time(s, e) * 1e3 for s, e in events]
        return samples


def measure_host(run: Callable[[], object], iters: int, warmup: int = 1,
                 before_last: Callable[[], object] | None = None) -> list[float]:
    """Wall-clock samples in microseconds of a host function (the CPU backend's models)."""
    for _ in range(warmup):
        run()
    samples = []
    for i in range(iters):
        if before_last and i == iters - 1:
            before_last()
        t0 = time.perf_counter()
        run()
        samples.append((time.perf_counter() - t0) * 1e6)
    return samples
