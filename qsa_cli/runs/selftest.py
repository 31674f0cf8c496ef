"""qsa selftest: every check this machine can run, a row each (topk-parity --selftest's matrix is
runs/topk_selftest.py's)."""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..core.errors import NoDeviceError, SanitizerError, TimerError
from ..core.geometry import MAX_QUERIES, PROMPT_QUERIES, Call, header_mismatches
from ..core.progress import Progress, no_progress
from ..device import probe
from ..dispatch import Dispatch
from ..inputs import SCORE_SETS, ScorerInputs, TopkInputs, synthetic_scorer_inputs
from ..kernels import header_defines
from ..nvbench_timer import L2_STATE as NVBENCH_L2
from ..nvbench_timer import NvbenchTimer, cuda_bench, nvbench_used
from ..record.schema import Measurement, RunRecord, SelftestCheck
from ..record.vocabulary import DEFAULT_KEYS, SCORER_KEYS
from ..sanitize import Children, default_jobs, find_sanitizer
from ..session import Session, Settings, session
from ..stages import scores as scores_stage
from ..stages.common import Measurer, StageOutcome
from ..timing import AUTO, DeviceTimer
from .made import scorer_case_model, scorer_models_case, topk_models_case, topk_score_set
from .pool import Task, in_order
from .sanitizer import sanitize_run
from .stages import run_topk_case

SELFTEST_SCORER_CASES: tuple[tuple[int, int, int], ...] = (
    # (context, queries, capacity): n_kv % 4 = 0..3, 1-8 queries, capacity above the context
    (2048, 1, 4096), (2049, 3, 2049), (9002, 4, 16384), (32771, 5, 65536), (131072, 8, 262144),
)
SELFTEST_TOPK_CASES: tuple[tuple[int, int], ...] = ((2052, 4096), (9000, 262144), (135176, 135176))
DISPATCH_CALL = Call(420001, 4, 524288)  # the selftest's check of what the engine dispatches here
# The timers' check: qsa's timer under nvbench's cold state (--l2 dirty) against nvbench on the same launchers,
# the candidate scorer and the read floor of a latency-bound call (6.5 µs on an H200) and of a bandwidth-bound
# one (24 µs); they agree within 5 % or 0.5 µs, whichever is more (docs/timing.md says why).
TIMERS_CALLS = (Call(32768, 1, 65536), Call(420000, 4, 524288))
TIMERS_TOLERANCE, TIMERS_TOLERANCE_US = 0.05, 0.5
SELFTEST_SANITIZERS = ("memcheck", "racecheck")  # the fast subset: one small call of every variant


def _timed(name: str, body: Callable[[], tuple[int, list[str]]]) -> SelftestCheck:
    t0 = time.perf_counter()
    cases, failures = body()
    return SelftestCheck.judged(name, cases, failures, time.perf_counter() - t0)


def _scorer_calls() -> list[tuple[Call, str]]:
    return [(Call(ctx, nq, cap), keys) for (ctx, nq, cap), keys in itertools.product(SELFTEST_SCORER_CASES, SCORER_KEYS)]


def _topk_calls() -> list[Call]:
    return [Call(ctx, nq, cap, prompt=prompt) for ctx, cap in SELFTEST_TOPK_CASES
            for nq, prompt in ((MAX_QUERIES, False), (PROMPT_QUERIES, True))]


def _tasks(s: Session, seed: int, on_gpu: bool) -> list[Task]:
    """Every case's inputs and CPU models, the scorer's then the top-k's (and, ``on_gpu``, the dispatch
    check's inputs and models): each made once, for the models' row and the kernels'."""
    scorers, topks = s.variants("scores", s.catalog.names("scores")), s.variants("topk", s.catalog.names("topk"))
    dispatch: list[Task] = [*((scorer_case_model, (DISPATCH_CALL, seed, keys)) for keys in SCORER_KEYS),
                            *((topk_score_set, (DISPATCH_CALL, name, seed, True)) for name in SCORE_SETS)]
    return [*((scorer_models_case, (call, seed, keys, scorers, s.roles["scores"], on_gpu))
              for call, keys in _scorer_calls()),
            *((topk_models_case, (call, name, seed, topks, s.roles["topk"], on_gpu)) for call in _topk_calls()
              for name in SCORE_SETS),
            *(dispatch if on_gpu else [])]


@dataclass
class _RowSoFar:
    """A row whose cases run interleaved with another row's: its checks so far and the time its own steps
    took in this thread (a CPU model row's is the wait for its cases, a kernels row's their runs)."""

    name: str
    checks: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - t0

    def count(self, outcome: StageOutcome) -> None:
        self.checks += len(outcome.parity)
        self.failures += outcome.failures()

    def row(self) -> SelftestCheck:
        return SelftestCheck.judged(self.name, self.checks, self.failures, self.seconds)


def _models_and_kernels(s: Session, made: Iterator[Any], cases: int, models: _RowSoFar, kernels: _RowSoFar,
                        run_kernels: Callable[[Any, np.ndarray], StageOutcome] | None) -> None:
    """The next ``cases`` cases, each as it is made: its CPU models' rows taken into ``s`` (``models``), then, on
    the GPU, its kernels run on its inputs against the model made with them (``run_kernels``, into
    ``kernels``), while the workers make the cases after it."""
    for _ in range(cases):
        with models.step():
            modelled = next(made)
            models.count(s.take(modelled.outcome))
        if run_kernels is not None:
            with kernels.step():
                kernels.count(run_kernels(*modelled.for_kernels))


def _scorer_kernels(s: Session, variants: tuple[str, ...], inputs: ScorerInputs, model: np.ndarray) -> StageOutcome:
    """``variants`` on a scorer case's inputs, against the model made with them."""
    return s.take(scores_stage.run_scores(inputs, s.measurer, s.variants("scores", variants), s.roles["scores"],
                                          s.launcher, model=model))


def _topk_kernels(s: Session, variants: tuple[str, ...], active_blocks: int, inputs: TopkInputs,
                  oracle: np.ndarray) -> StageOutcome:
    """Parity only: ``variants`` on a score set, against each other and the oracle's ids made with it."""
    return run_topk_case(s, inputs, variants, active_blocks, check_model=True, oracle=oracle)


def _models_rows(s: Session, g: Session | None, made: Iterator[Any], rows: list[SelftestCheck],
                 progress: Progress, total: int) -> None:
    """The CPU models' rows (scorer, top-k) and, on the GPU (``g``), the kernels' (scorer, top-k), in that
    order into ``rows``: each case's models and kernels as it is made (``_models_and_kernels``), so that
    the kernels run while the workers make the cases after it."""
    scorers, topks = s.catalog.names("scores"), s.catalog.names("topk")
    cc = (g.compute_capability or 0) if g is not None else 0
    scorers_here = g.catalog.runs_on("scores", cc) if g is not None else ()
    topks_here = g.catalog.runs_on("topk", cc) if g is not None else ()
    scorer_models = _RowSoFar(f"scorer models ({', '.join(scorers)}) == butterfly ({' and '.join(SCORER_KEYS)} keys)")
    scorer_kernels = _RowSoFar(f"scorer kernels ({', '.join(scorers_here)}) == model")
    progress(len(rows), total, "scorer models and kernels" if g is not None else "scorer models")
    _models_and_kernels(s, made, len(_scorer_calls()), scorer_models, scorer_kernels,
                        functools.partial(_scorer_kernels, g, scorers_here) if g is not None else None)
    rows.append(scorer_models.row())
    topk_models = _RowSoFar(f"top-k models ({', '.join(topks)}) == oracle")
    topk_kernels = _RowSoFar(f"top-k kernels ({', '.join(topks_here)}) == oracle")
    progress(len(rows), total, "top-k models and kernels" if g is not None else "top-k models")
    for call in _topk_calls():
        run_kernels = functools.partial(_topk_kernels, g, g.here("topk", call.max_blocks, call.active_blocks),
                                        call.active_blocks) if g is not None else None
        _models_and_kernels(s, made, len(SCORE_SETS), topk_models, topk_kernels, run_kernels)
    rows.append(topk_models.row())
    if g is not None:
        rows += [scorer_kernels.row(), topk_kernels.row()]


def _topk_call_check(s: Session, call: Call, made: Iterator[Any], variants: tuple[str, ...]) -> tuple[int, list[str]]:
    """Parity only: ``variants`` on every score set of ``call`` made, against each other and the oracle."""
    out = StageOutcome()
    for _ in SCORE_SETS:
        inputs, oracle = next(made)
        out.extend(run_topk_case(s, inputs, variants, call.active_blocks, check_model=True, oracle=oracle))
    return len(out.parity), out.failures()


def _constants_check(s: Session) -> tuple[int, list[str]]:
    defines = header_defines(s.catalog.kernel_folder)
    return len(defines), header_mismatches(defines)


@dataclass
class SelftestSoFar:
    """A selftest as far as it has gone: the record of the session now open (the GPU's holds the CPU's parity
    rows too) and the checks done, which an interrupted selftest still records."""

    record: RunRecord | None = None
    rows: list[SelftestCheck] = field(default_factory=list)


def selftest(settings: Settings, require_gpu: bool, argv: list[str], progress: Progress = no_progress,
             so_far: SelftestSoFar | None = None) -> tuple[RunRecord, list[SelftestCheck]]:
    """Every check this machine can run: the CPU models always, the kernels when a device is found
    (``require_gpu``: a missing device is a NoDeviceError before anything runs); ``progress``: each check;
    ``so_far``: filled as the checks go. On the GPU the timers' check runs first, on a quiet card (the workers
    making the first cases and compute-sanitizer's children setting theirs up meanwhile use the CPU alone); the
    children then run beside the other checks; the inputs and CPU models of every case are made once, by
    worker processes (runs/pool.py), and each case's kernels run as soon as it is made, while the workers make
    the cases after it."""
    found = probe(settings.device_id)
    if require_gpu and not found.available:
        raise NoDeviceError(f"--require-gpu: {found.reason}")
    so_far = so_far if so_far is not None else SelftestSoFar()
    rows = so_far.rows
    total = 3 + (5 if found.available else 0)  # the CPU's checks, and the GPU's
    cpu = Settings(backend="cpu", seed=settings.seed, kernels=settings.kernels, iters=0)
    with contextlib.ExitStack() as stack:
        s = stack.enter_context(session(cpu, "selftest", argv))
        so_far.record = s.record
        # the workers start first: they make the first cases while the device's session opens
        made = stack.enter_context(in_order(_tasks(s, settings.seed, found.available)))
        gpu = replace(settings, backend="gpu", iters=0)
        g = stack.enter_context(session(gpu, "selftest", argv)) if found.available else None
        # the sanitizer's children start now and are held before their first launch until the timers' check,
        # which runs first while the card is quiet, is done
        sanitized = stack.enter_context(_SanitizerRow(g)) if g is not None else None
        progress(0, total, "constants")
        rows.append(_timed("constants: kernels/qsa_common.cuh == geometry", lambda: _constants_check(s)))
        if g is not None and sanitized is not None:
            progress(len(rows), total, "timers")
            rows.append(timers_check(g, settings.seed))
            sanitized.release()
        try:
            _models_rows(s, g, made, rows, progress, total)
        finally:  # the GPU's record holds the CPU's parity rows first, an interrupted one's too
            if g is not None:
                g.record.parity = s.record.parity + g.record.parity
                so_far.record = g.record
        if g is None or sanitized is None:
            rows.append(SelftestCheck("GPU checks", 0, None, 0.0, f"skipped: {found.reason}"))
            progress(total, total, "done")
            return s.record, rows
        d = g.dispatch("decode", DISPATCH_CALL.max_blocks)
        progress(len(rows), total, "dispatch")
        rows.append(_timed(f"dispatch here (sm_{g.compute_capability}): {d.scores} + {d.topk}",
                           lambda: _dispatched_check(g, made, d)))
        progress(len(rows), total, "compute-sanitizer")
        rows.append(sanitized.row())
        record = g.record
    progress(total, total, "done")
    return record, rows


def timers_disagree(ours_us: float, nvbench_us: float) -> bool:
    """Whether qsa's median and nvbench's cold median of one launcher differ by more than the tolerance."""
    return abs(ours_us - nvbench_us) > max(TIMERS_TOLERANCE * nvbench_us, TIMERS_TOLERANCE_US)


def timers_check(s: Session, seed: int) -> SelftestCheck:
    """qsa's timer (--l2 dirty, ITERS auto) and nvbench's (cold, stdrel) on the same launchers, each median
    against the other's; skipped, and said so, where cuda-bench is missing or nvbench already ran here."""
    name = (f"timers: qsa --l2 {NVBENCH_L2} == nvbench cold (within {TIMERS_TOLERANCE:.0%} or "
            f"{TIMERS_TOLERANCE_US} µs)")
    try:
        bench = cuda_bench()
        if nvbench_used():
            raise TimerError("nvbench runs once per process and already ran in this one")
    except TimerError as unavailable:
        return SelftestCheck(name, 0, None, 0.0, f"skipped: {unavailable}")
    t0 = time.perf_counter()
    ours = DeviceTimer(l2=NVBENCH_L2, warmup=s.settings.warmup, kernels=s.catalog.kernel_folder)
    nvbench = NvbenchTimer(bench, s.settings.device_id, s.settings.warmup, batched=False)  # cold medians compared
    candidate = s.variants("scores", (s.roles["scores"]["candidate"],))
    measured: dict[str, list[Measurement]] = {"qsa": [], "nvbench": []}  # the same launchers, in the same order
    for call in TIMERS_CALLS:
        inputs = synthetic_scorer_inputs(call, seed, DEFAULT_KEYS)
        for which, timer in (("qsa", ours), ("nvbench", nvbench)):
            measurer = Measurer(AUTO, timer, s.clocks, s.settings.stopping, gpu=ours)
            measured[which] += scores_stage.run_scores(inputs, measurer, candidate, s.roles["scores"], s.launcher,
                                                      check_model=False).measurements
    try:
        nvbench.complete(s.clocks)
    except TimerError as failed:
        return SelftestCheck(name, len(measured["qsa"]), False, time.perf_counter() - t0, str(failed).splitlines()[0])
    pairs = list(zip(measured["qsa"], measured["nvbench"]))
    failures = [f"{m.variant} on {m.key}: qsa {m.median_us:.2f} µs, nvbench {nv.median_us:.2f} µs"
                for m, nv in pairs if timers_disagree(m.median_us, nv.median_us)]
    medians = "; ".join(f"{m.variant} {m.case['ctx']} x {m.case['nq']}: qsa {m.median_us:.2f}, nvbench "
                        f"{nv.median_us:.2f} µs" for m, nv in pairs)  # what agreed, said
    return SelftestCheck(name, len(pairs), not failures, time.perf_counter() - t0, failures[0] if failures else medians)


SANITIZER_ROW = f"compute-sanitizer ({', '.join(SELFTEST_SANITIZERS)}), every variant"


class _SanitizerRow:
    """compute-sanitizer's quick matrix on every variant, started on entry in a thread of its own: its children
    run beside the other checks, ``sanitize.default_jobs()`` at a time, held before their first launch until
    ``release``; ``row`` waits for them. Leaving the block before that (an interruption, an error) ends them."""

    def __init__(self, s: Session) -> None:
        self.s = s
        self.children = Children(held=True)
        self.thread: threading.Thread | None = None  # none where compute-sanitizer is missing (``skipped`` says)
        self.skipped = ""
        self.error: BaseException | None = None
        self.seconds = 0.0

    def __enter__(self) -> _SanitizerRow:
        try:
            sanitizer = find_sanitizer()
        except SanitizerError as missing:
            self.skipped = f"skipped: {missing}"
            return self
        self.thread = threading.Thread(target=self._run, args=(sanitizer,), name="qsa-selftest-sanitizer",
                                       daemon=True)
        self.thread.start()
        return self

    def _run(self, sanitizer: Any) -> None:
        t0 = time.perf_counter()
        try:
            sanitize_run(self.s, SELFTEST_SANITIZERS, None, [], sanitizer, quick=True, jobs=default_jobs(),
                         children=self.children)
        except BaseException as error:  # raised again in the main thread, which waits for the row
            self.error = error
        self.seconds = time.perf_counter() - t0

    def release(self) -> None:
        """The children go on to their launches."""
        self.children.release()

    def row(self) -> SelftestCheck:
        """The matrix's row, once every child has ended."""
        if self.thread is None:
            return SelftestCheck(SANITIZER_ROW, 0, None, 0.0, self.skipped)
        self.release()
        self.thread.join()
        if self.error is not None:
            raise self.error
        failed = [r for r in self.s.record.sanitizer if not r.passed]
        detail = f"{failed[0].variant} {failed[0].tool}: {failed[0].first_report}" if failed else ""
        return SelftestCheck(SANITIZER_ROW, len(self.s.record.sanitizer), not failed, self.seconds, detail)

    def __exit__(self, *exc: object) -> None:
        self.children.stop()  # none left running once the row is in
        if self.thread is not None:
            self.thread.join()


def _dispatched_check(s: Session, made: Iterator[Any], d: Dispatch) -> tuple[int, list[str]]:
    """The variants the engine would run on this card, on a decode call, against the models."""
    out = StageOutcome()
    for _ in SCORER_KEYS:
        out.extend(_scorer_kernels(s, (d.scores,), *next(made)))
    checks, failures = _topk_call_check(s, DISPATCH_CALL, made, (d.topk,))
    return checks + len(out.parity), out.failures() + failures
