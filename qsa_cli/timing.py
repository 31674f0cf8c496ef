"""Measurement: CUDA-event timing of launch closures with warm-up, a named L2 state, a stopping rule and
batch timing.

Only measures; never prints. Modelled on nvbench's cold measurement. Before each sample the L2 is put in the
run's state, outside the timed region: ``clean`` reads a buffer twice the L2's size (the L2 then holds clean
lines of other data), ``dirty`` writes it, as nvbench's cold measurement flushes (the measured kernel must
first write dirty lines back), ``warm`` leaves what the previous call left. The stream is then drained, so
that the flush is done and the card idle when the sample starts (as nvbench synchronises after its flush: a
sample queued straight behind a write flush reads about 0.5 µs slower, docs/timing.md), and the sample is
queued behind a kernel that holds the stream until the host has queued it and releases it, so the host's
launch rate never shows in the times; its own pair of events brackets it. A sample whose hold ran out before
the host released it (the host's launch gaps would be in its time), or whose SM clock, measured on the GPU
over the sample, was below a threshold of the card's, is thrown away (kept in the record, flagged) and
measured again, a bounded number of times. ITERS is an exact count, or ``auto``: samples until the stopping
rule holds (or its timeout), checked every ROUND samples. Beside the isolated samples, batches of
back-to-back launches are each timed by one pair of events (their mean per launch), as nvbench's batch
measurement: where a kernel's launches overlap or queue behind one another, the batch differs from the
samples.

The loop (``sample``) runs against an ``EventStream``: the GPU's (``DeviceTimer``: CuPy events on the current
stream), the host's (``HOST``: the CPU backend's models, which run synchronously) or a test's fake.

A ``Timer`` is what the measurer (stages/common.py) hands each variant's launch to, as a ``TimingJob``: it gives
back the job's measurement, which it completes at once (``DeviceTimer``, ``HostTimer``: the clocks read around
the samples) or later, when it times every job it was given in one batch (``complete``: nvbench's,
nvbench_timer.py).
"""

from __future__ import annotations

import ctypes
import math
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from .core.memory import FLUSH_L2_MULTIPLE
from .kernels import load
from .launch.kernel import KernelLaunch
from .record.schema import (
    BatchTiming,
    DiscardedRound,
    KernelLaunchRecord,
    Measurement,
    RoundChecks,
    StopOutcome,
    StoppingSettings,
)
from .record.vocabulary import HOST_L2, L2_STATES, QSA_TIMER

DEFAULT_WARMUP = 5
# The most timed samples (ITERS, a sweep's iterations, the stopping rule's cap) and untimed runs (--warmup, a
# sweep's warmup) a case takes, on the command line and in a YAML alike: past 10,000 samples a median gains
# nothing the clocks' drift does not swamp, and a larger number is a typo that would run for hours and fill
# the record.
MAX_ITERATIONS = 10_000
MAX_WARMUP = 10_000
AUTO = "auto"  # ITERS spelled so: as many samples as the stopping rule takes
Iters = int | Literal["auto"]

ROUND = 32  # samples between two checks of the stopping rule (each sample its own hold)
BATCH_LAUNCHES = 32  # launches of one batch, queued behind one hold
BATCHES = 5  # batches a GPU measurement times, so the batch's spread shows beside its median
_FLOOR_THREADS = 256
_FLOOR_KERNEL = "read_floor_kernel"  # the read floor's kernel (kernels/bench.cu)

# A hold's timeout: the host queues what one hold covers (a sample: two events, two clock stamps and up to 6
# launches; a batch: 32 launches) in well under 1 ms, so a hold still unreleased after 100 ms means the host
# stalled (or waits on the held stream); the sample or batch is then measured again (docs/timing.md).
HOLD_TIMEOUT_NS = 100_000_000
# The throttle rule (docs/timing.md): a sample (or batch) whose SM clock is below this fraction of the card's is
# measured again after a pause (nvbench's threshold and recovery delay).
THROTTLE_THRESHOLD = 0.75
THROTTLE_PAUSE_S = 0.05
# Samples and batches one measurement throws away and measures again, at most: past it a faulty one is kept,
# counted in the record as suspect, and the run says so in a note.
MAX_REMEASURES = 10
DRAINED = "hold timed out"  # the host had not released the hold: the times hold its launch gaps
THROTTLED = "throttled"  # the SM clock over the sample (or batch) was below the threshold
# bench.cu's words in host-mapped memory (QSA_HOLD_*, QSA_STAMP_*; a test checks they agree)
HOLD_FLAG, HOLD_STATUS, HOLD_WAITED, STAMP_START, STAMP_END, HOLD_WORDS = 0, 1, 2, 3, 5, 7
HOLD_RELEASED, HOLD_TIMED_OUT = 1, 2
_CUDA_DEV_ATTR_CLOCK_RATE = 13  # cudaDevAttrClockRate: the card's peak SM clock, in kHz

# The stopping rule's defaults and bounds (docs/timing.md says why each).
DEFAULT_MIN_SAMPLES = 20
MIN_SAMPLES_LEAST = 10  # fewer: the median's interval (median_noise_pct) spans most of the samples
DEFAULT_MAX_NOISE_PCT = 0.5
DEFAULT_MIN_TIME_S = 0.0
DEFAULT_TIMEOUT_S = 15.0
MAX_TIMEOUT_S = 3600.0  # an hour on one measurement is a typo

Launch = Callable[[], None]


def median_noise_pct(samples_us: list[float]) -> float:
    """The noise of the samples' median, in percent of it: half the width of the distribution-free interval
    between the order statistics at ranks n/2 -/+ sqrt(n)/2 (the median's rank is binomial, of standard
    deviation sqrt(n)/2), which is one standard error of the median for any distribution of samples.
    The timer's values come in steps (32 ns for an H200's events), and a median is known no closer than half
    a step, so the half width is at least half the smallest gap between two of the samples: otherwise a few
    equal samples around the median would claim no noise at all. Infinite when the median is not above 0."""
    s = sorted(samples_us)
    n = len(s)
    middle, half = (n - 1) / 2, math.sqrt(n) / 2
    lo, hi = max(0, math.floor(middle - half)), min(n - 1, math.ceil(middle + half))
    median = (s[math.floor(middle)] + s[math.ceil(middle)]) / 2
    step = min((b - a for a, b in zip(s, s[1:]) if b > a), default=0.0)
    return 100 * max(s[hi] - s[lo], step) / 2 / median if median > 0 else math.inf


@dataclass(frozen=True)
class StoppingRule:
    """When ITERS is ``auto``: at least ``min_samples``, then rounds until the median's noise is at most
    ``max_noise_pct`` percent and the samples hold ``min_time_s`` of measured time; whatever the noise, the
    sampling stops after ``timeout_s`` seconds of wall time or at MAX_ITERATIONS samples, and the outcome
    says that the rule was not met."""

    min_samples: int = DEFAULT_MIN_SAMPLES
    max_noise_pct: float = DEFAULT_MAX_NOISE_PCT
    min_time_s: float = DEFAULT_MIN_TIME_S
    timeout_s: float = DEFAULT_TIMEOUT_S

    def to_dict(self) -> StoppingSettings:
        return StoppingSettings(**asdict(self))  # type: ignore[typeddict-item]

    def next_round(self, taken: int) -> int:
        """How many samples the next round takes: up to ``min_samples`` first, then a round at a time."""
        wanted = self.min_samples - taken if taken < self.min_samples else ROUND
        return min(ROUND, wanted, MAX_ITERATIONS - taken)

    def outcome(self, samples_us: list[float], wall_s: float) -> StopOutcome | None:
        """After a round: how the sampling ends, or None to take another round. The timeout holds even
        before ``min_samples`` (as nvbench's does): a measurement never runs past it."""
        noise = median_noise_pct(samples_us)
        measured_s = sum(samples_us) * 1e-6
        enough = len(samples_us) >= self.min_samples
        if enough and noise <= self.max_noise_pct and measured_s >= self.min_time_s:
            reason = "met"
        elif wall_s >= self.timeout_s:
            reason = "timeout"
        elif len(samples_us) >= MAX_ITERATIONS:
            reason = "sample cap"
        else:
            return None
        return StopOutcome(met=reason == "met", reason=reason, noise_pct=noise, measured_s=measured_s, wall_s=wall_s)


@dataclass(frozen=True)
class HoldReport:
    """How a hold ended and how long it held the stream (µs; None: no hold), and the SM clock over what it
    covered (a sample or a batch) as the GPU measured it (None: not measured)."""

    timed_out: bool
    sm_mhz: float | None
    held_us: float | None = None


@dataclass(frozen=True)
class RoundRule:
    """When a sample or batch (a round: what one hold covers) is thrown away and measured again: its hold timed
    out, or its SM clock was below ``threshold`` of ``reference_mhz`` (the card's peak, or a lock's); at most
    ``max_remeasures`` times per measurement, a throttled one after ``pause_s`` of rest (by ``sleep``)."""

    reference_mhz: float
    threshold: float = THROTTLE_THRESHOLD
    max_remeasures: int = MAX_REMEASURES
    pause_s: float = THROTTLE_PAUSE_S
    sleep: Callable[[float], None] = time.sleep

    def fault(self, report: HoldReport) -> str | None:
        if report.timed_out:
            return DRAINED
        if report.sm_mhz is not None and report.sm_mhz < self.threshold * self.reference_mhz:
            return THROTTLED
        return None


@dataclass
class _RoundLog:
    """A measurement's rounds (its samples and batches, a hold each) as the rule judged them (the record's
    RoundChecks)."""

    rule: RoundRule
    sm_mhz: list[float | None] = field(default_factory=list)
    held_us: list[float | None] = field(default_factory=list)
    discarded: list[DiscardedRound] = field(default_factory=list)
    suspect: list[str] = field(default_factory=list)

    def to_dict(self) -> RoundChecks:
        return RoundChecks(sm_mhz=self.sm_mhz, held_us=self.held_us, reference_mhz=self.rule.reference_mhz,
                           threshold=self.rule.threshold, discarded=self.discarded, suspect=self.suspect)


@dataclass(frozen=True)
class Timed:
    """A measurement's times: the isolated samples, the batches (None: not taken), the rule's outcome (None:
    ITERS was a count), how its rounds were judged (None: no hold and no clock to judge them by)."""

    samples_us: list[float]
    batch: BatchTiming | None = None
    stop: StopOutcome | None = None
    rounds: RoundChecks | None = None


class EventStream(Protocol):
    """What the sampling loop needs of a stream of work: the L2 put in its state, a hold while the host
    enqueues and its report, events and their elapsed time."""

    def settle(self) -> None:
        """Put the L2 in the run's state (before a sample or a batch)."""

    def hold(self) -> None:
        """Hold the stream until ``release`` (or the hold's timeout), and start measuring the SM clock."""

    def release(self) -> None:
        """Stop measuring the SM clock after what is queued, and release the hold: what it covers is queued."""

    def held(self) -> HoldReport:
        """After ``wait``: how the last hold ended and the SM clock between hold and release."""

    def mark(self) -> Any:
        """An event recorded on the stream now."""

    def wait(self) -> None:
        """Until the stream has run all that is queued."""

    def elapsed_us(self, start: Any, end: Any) -> float: ...


def _judged(stream: EventStream, take: Callable[[], list[float]], log: _RoundLog | None, batch: bool) -> list[float]:
    """``take`` (a sample, or a batch's mean: what one hold covers), taken again while the rule finds a fault in
    its hold's report and the measurement has re-measures left; those thrown away, and a faulty one kept past
    the bound, go to ``log``."""
    while True:
        times = take()
        if log is None:
            return times
        report = stream.held()
        fault = log.rule.fault(report)
        if fault is None or len(log.discarded) >= log.rule.max_remeasures:
            log.sm_mhz.append(report.sm_mhz)
            log.held_us.append(report.held_us)
            if fault is not None:
                log.suspect.append(fault)
            return times
        log.discarded.append(DiscardedRound(reason=fault, batch=batch, samples_us=times, sm_mhz=report.sm_mhz))
        if fault == THROTTLED:
            log.rule.sleep(log.rule.pause_s)


def _settled(stream: EventStream) -> None:
    """The L2 put in its state and the stream drained: the flush done and the card idle before what follows."""
    stream.settle()
    stream.wait()


def _isolated(stream: EventStream, launch: Launch, before: Launch | None) -> list[float]:
    """One sample: ``before`` (outside its events, before the L2 is settled), the L2 settled and the stream
    drained, then the launch queued behind a hold between its two events."""
    if before is not None:
        before()
    _settled(stream)
    stream.hold()
    start = stream.mark()
    launch()
    end = stream.mark()
    stream.release()
    stream.wait()
    return [stream.elapsed_us(start, end)]


def _batch(stream: EventStream, launch: Launch) -> list[float]:
    """One batch of BATCH_LAUNCHES back-to-back launches after the L2 is put in its state, timed by one pair
    of events (its mean per launch): the launches after the first meet what the one before left."""
    _settled(stream)
    stream.hold()
    start = stream.mark()
    for _ in range(BATCH_LAUNCHES):
        launch()
    end = stream.mark()
    stream.release()
    stream.wait()
    return [stream.elapsed_us(start, end) / BATCH_LAUNCHES]


def sample(stream: EventStream, launch: Launch, iters: int | StoppingRule, *, warmup: int, batches: int = 0,
           before_last: Launch | None = None, wall: Callable[[], float] = time.monotonic,
           rule: RoundRule | None = None) -> Timed:
    """``warmup`` untimed runs, ``batches`` batches, then the samples: exactly ``iters`` of them, or as many as
    the stopping rule takes (checked every ROUND samples; its timeout by ``wall``, from the first sample on).
    ``before_last`` runs before the last sample (outside its events, before the L2 is settled), e.g. to poison
    the output again so that what it holds afterwards is the last timed call's; under the rule, before each
    round's last, since any round may be the last. With a ``rule``, each sample and batch is judged by its
    hold's report and measured again when faulty (None: the stream has no hold to judge, as the host's)."""
    log = _RoundLog(rule) if rule is not None else None
    for _ in range(warmup):
        stream.settle()
        launch()
    means = [m for _ in range(batches) for m in _judged(stream, lambda: _batch(stream, launch), log, batch=True)]
    batch = BatchTiming(launches=BATCH_LAUNCHES, means_us=means) if batches else None
    rounds = log.to_dict if log is not None else lambda: None

    def take(count: int, last: Launch | None) -> list[float]:
        """``count`` samples, ``last`` before the last of them."""
        taken: list[float] = []
        for i in range(count):
            before = last if i == count - 1 else None
            taken += _judged(stream, lambda: _isolated(stream, launch, before), log, batch=False)
        return taken

    if not isinstance(iters, StoppingRule):
        return Timed(take(iters, before_last), batch, rounds=rounds())
    started = wall()
    samples: list[float] = []
    while True:
        samples += take(iters.next_round(len(samples)), before_last)
        stop = iters.outcome(samples, wall() - started)
        if stop is not None:
            return Timed(samples, batch, stop, rounds())


class _NoHold:
    """A stream whose work is never held: nothing to release, no hold to report on."""

    def hold(self) -> None:
        pass

    def release(self) -> None:
        pass

    def held(self) -> HoldReport:
        return HoldReport(timed_out=False, sm_mhz=None)


class _HostStream(_NoHold):
    """The host as a stream: the CPU backend's models run synchronously, so a mark is the time now, and
    there is no L2 to settle and no queue to hold."""

    def settle(self) -> None:
        pass

    def mark(self) -> float:
        return time.perf_counter()

    def wait(self) -> None:
        pass

    def elapsed_us(self, start: float, end: float) -> float:
        return (end - start) * 1e6


HOST = _HostStream()


class ClockSource(Protocol):
    def read(self) -> Any: ...  # an object with .to_dict() and .throttled, or None


def read_clocks(clocks: ClockSource | None) -> Any:
    """A reading of ``clocks`` now (None: the run reads no clocks)."""
    return clocks.read() if clocks is not None else None


@dataclass(frozen=True)
class TimingJob:
    """A variant's launch on one case as the measurer hands it to its timer: what the record names it by, the
    samples it takes (a count, or the stopping rule), the bytes it reads (for GB/s), what runs before its last
    sample, whether it waits for the stream on the host (a library sort), and the kernels it enqueues a call
    (None: not qsa's launcher)."""

    stage: str
    variant: str
    case: dict[str, Any]
    launch: Launch
    iters: int | StoppingRule
    bytes_read: int | None = None
    before_last: Launch | None = None
    synchronizes: bool = False
    launches: list[KernelLaunchRecord] | None = None

    def measurement(self, warmup: int, timer: str = QSA_TIMER) -> Measurement:
        """Its measurement, as yet without samples: its timer completes it."""
        return Measurement(stage=self.stage, variant=self.variant, case=dict(self.case), samples_us=[],
                           warmup=warmup, bytes_read=self.bytes_read, timer=timer, launches=self.launches)


def clocked(m: Measurement, before: Any, after: Any) -> None:
    """``m``'s clock readings before and after its samples (None: not read), and whether either saw the card
    throttled."""
    m.clocks_before = before.to_dict() if before is not None else None
    m.clocks_after = after.to_dict() if after is not None else None
    m.throttled = any(r.throttled for r in (before, after) if r is not None)


class Timer(Protocol):
    """What times the variants of a run (the measurer's one timer): the L2 state its samples start from, and
    each job's measurement, complete when ``time`` returns or (``deferred``) pending until ``complete`` times
    every job it was given, in one batch."""

    @property
    def l2(self) -> str: ...

    @property
    def deferred(self) -> bool: ...

    @property
    def pending(self) -> Sequence[Measurement]:
        """The measurements given back and not timed yet (a deferred timer's, until ``complete``)."""

    def time(self, job: TimingJob, clocks: ClockSource | None) -> Measurement: ...

    def complete(self, clocks: ClockSource | None) -> None: ...


class AtOnce(ABC):
    """A timer that times each job as it is given (``measure``: the samples and batches of a launch), the clocks
    read around it: nothing waits for ``complete``."""

    deferred = False
    pending: Sequence[Measurement] = ()
    warmup: int

    @abstractmethod
    def measure(self, launch: Launch, iters: int | StoppingRule, before_last: Launch | None = None,
                synchronizes: bool = False) -> Timed:
        """The samples of ``launch`` (``iters`` of them, or by the stopping rule), ``before_last`` before the
        last; ``synchronizes``: the launch waits for the stream on the host."""

    def time(self, job: TimingJob, clocks: ClockSource | None) -> Measurement:
        m = job.measurement(self.warmup)
        before = read_clocks(clocks)
        timed = self.measure(job.launch, job.iters, before_last=job.before_last, synchronizes=job.synchronizes)
        clocked(m, before, read_clocks(clocks))
        m.samples_us, m.batch, m.stop, m.rounds = timed.samples_us, timed.batch, timed.stop, timed.rounds
        return m

    def complete(self, clocks: ClockSource | None) -> None:
        """Every job was timed as it came."""


@dataclass
class HostTimer(AtOnce):
    """Times the CPU backend's models on the host, after ``warmup`` untimed runs. No batches: the models run
    synchronously, so a batch would time what the samples do."""

    warmup: int = 1
    l2: str = HOST_L2

    def measure(self, launch: Launch, iters: int | StoppingRule, before_last: Launch | None = None,
                synchronizes: bool = False) -> Timed:
        return sample(HOST, launch, iters, warmup=self.warmup, before_last=before_last)


def _bench_module(kernels: Path | None) -> Any:
    return load("bench.cu", (_FLOOR_KERNEL, "hold_stream_kernel", "clock_stamp_kernel"), folder=kernels)


_CUDA_HOST_ALLOC_MAPPED = 2  # cudaHostAllocMapped (driver_types.h)


def round_sm_mhz(words: Any) -> float | None:
    """The SM clock between a hold's two stamps (SM 0's cycles over global nanoseconds), in MHz; None when a
    stamp was not written (no block of the stamp kernel ran on SM 0) or no global time passed."""
    (t0, c0), (t1, c1) = words[STAMP_START:STAMP_START + 2], words[STAMP_END:STAMP_END + 2]
    if min(t0, c0, t1, c1) < 0 or t1 <= t0:
        return None
    return float(c1 - c0) / float(t1 - t0) * 1e3


@dataclass
class DeviceTimer(AtOnce):
    """Times launch closures on the current CuPy stream of the current device, the L2 in state ``l2``; its
    read floor and stream hold are ``kernels``' bench.cu (the run's folder of kernel sources; None: the
    installed one)."""

    l2: str
    warmup: int = DEFAULT_WARMUP
    kernels: Path | None = None
    locked_sm_mhz: int | None = None  # the SM clock a lock holds: the throttle rule's reference then
    hold_timeout_ns: int = HOLD_TIMEOUT_NS

    def __post_init__(self) -> None:
        import cupy

        if self.l2 not in L2_STATES:
            raise ValueError(f"l2 must be one of {', '.join(L2_STATES)} (got {self.l2!r})")
        self._cupy = cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        self.sms = int(props["multiProcessorCount"])
        self.l2_bytes = int(props["l2CacheSize"])
        module = _bench_module(self.kernels)
        self._read = module.function(_FLOOR_KERNEL)
        self._hold = module.function("hold_stream_kernel")
        self._stamp = module.function("clock_stamp_kernel")
        self._sink = cupy.zeros(1, dtype=cupy.float32)
        peak_mhz = cupy.cuda.runtime.deviceGetAttribute(_CUDA_DEV_ATTR_CLOCK_RATE, cupy.cuda.Device().id) / 1000
        self.rule = RoundRule(reference_mhz=float(self.locked_sm_mhz or peak_mhz))
        # The hold's flag, its report and the clock stamps, in host memory the GPU reads and writes (mapped): the
        # host releases a hold by a store, with no call that would queue behind it.
        self._words_host = cupy.cuda.runtime.hostAlloc(HOLD_WORDS * 8, _CUDA_HOST_ALLOC_MAPPED)
        weakref.finalize(self, cupy.cuda.runtime.freeHost, self._words_host)  # at the latest at exit, CuPy still there
        self._words_device = cupy.cuda.runtime.pointerGetAttributes(self._words_host).devicePointer
        self._words = np.ctypeslib.as_array((ctypes.c_int64 * HOLD_WORDS).from_address(self._words_host))
        self._words[:] = 0
        self._generation = 0
        flush_floats = FLUSH_L2_MULTIPLE * self.l2_bytes // 4 if self.l2 != "warm" else 0
        self._flush_buf = cupy.random.default_rng(0).random(flush_floats, dtype=cupy.float32)
        self._flush_read = self.read_launcher(self._flush_buf) if self.l2 == "clean" else None

    def read_launcher(self, array: Any, nbytes: int | None = None) -> KernelLaunch:
        """A plain float4 read of the first ``nbytes`` of ``array``: the read floor of those bytes."""
        cupy = self._cupy
        n4 = (array.nbytes if nbytes is None else nbytes) // 16
        blocks = max(1, min(self.sms * 8, (n4 + _FLOOR_THREADS - 1) // _FLOOR_THREADS))
        args = (array, cupy.int64(n4), self._sink)
        return KernelLaunch(_FLOOR_KERNEL, self._read, (blocks,), (_FLOOR_THREADS,), args)

    def settle(self) -> None:
        if self._flush_read is not None:
            self._flush_read()
        elif self.l2 == "dirty":  # a write of every line, as nvbench's flush (cudaMemsetAsync)
            stream = self._cupy.cuda.get_current_stream()
            self._cupy.cuda.runtime.memsetAsync(self._flush_buf.data.ptr, 0, self._flush_buf.nbytes, stream.ptr)

    def _stamp_at(self, word: int) -> None:
        self._stamp((self.sms,), (1,), (self._cupy.uint64(self._words_device + 8 * word),))

    def hold(self) -> None:
        self._generation += 1
        self._words[HOLD_STATUS] = 0
        self._words[STAMP_START:HOLD_WORDS] = -1
        cupy = self._cupy
        self._hold((1,), (1,), (cupy.uint64(self._words_device), cupy.int64(self._generation),
                                cupy.int64(self.hold_timeout_ns)))
        self._stamp_at(STAMP_START)

    def release(self) -> None:
        self._stamp_at(STAMP_END)
        self._words[HOLD_FLAG] = self._generation

    def held(self) -> HoldReport:
        status = int(self._words[HOLD_STATUS])
        if status not in (HOLD_RELEASED, HOLD_TIMED_OUT):
            raise RuntimeError(f"the stream's hold wrote no report (status {status}) though the stream ran")
        return HoldReport(timed_out=status == HOLD_TIMED_OUT, sm_mhz=round_sm_mhz(self._words),
                          held_us=int(self._words[HOLD_WAITED]) / 1e3)

    def mark(self) -> Any:
        event = self._cupy.cuda.Event()
        event.record(self._cupy.cuda.get_current_stream())
        return event

    def wait(self) -> None:
        self._cupy.cuda.get_current_stream().synchronize()

    def elapsed_us(self, start: Any, end: Any) -> float:
        return self._cupy.cuda.get_elapsed_time(start, end) * 1e3

    def measure(self, launch: Launch, iters: int | StoppingRule, before_last: Launch | None = None,
                synchronizes: bool = False) -> Timed:
        """The samples (``iters`` of them, or by the stopping rule) and BATCHES batches of ``launch``.
        ``synchronizes``: the launch itself waits for the stream on the host (a library sort), so no hold can
        cover its queueing (each sample would wait out the hold's timeout): its samples are taken on the stream
        unheld, one after another, with no batches, the host's time between them in them."""
        if synchronizes:
            return sample(_Unheld(self), launch, iters, warmup=self.warmup, before_last=before_last)
        return sample(self, launch, iters, warmup=self.warmup, batches=BATCHES, before_last=before_last, rule=self.rule)


class _Unheld(_NoHold):
    """A device timer's stream without its hold: the L2 settled and the events as the timer's."""

    def __init__(self, timer: DeviceTimer) -> None:
        self._timer = timer

    def settle(self) -> None:
        self._timer.settle()

    def mark(self) -> Any:
        return self._timer.mark()

    def wait(self) -> None:
        self._timer.wait()

    def elapsed_us(self, start: Any, end: Any) -> float:
        return self._timer.elapsed_us(start, end)
