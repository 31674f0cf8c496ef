"""qsa selftest (every check this machine can run, a row each) and topk-parity --selftest (spec section 6's
matrix)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..config import config_path, load_config
from ..core.errors import NoDeviceError, SanitizerError, TimerError
from ..core.geometry import MAX_QUERIES, PROMPT_QUERIES, Call, header_mismatches
from ..core.progress import Progress, no_progress
from ..device import probe
from ..dispatch import Dispatch
from ..inputs import synthetic_scorer_inputs, synthetic_scores
from ..kernels import header_defines
from ..nvbench_timer import L2_STATE as NVBENCH_L2
from ..nvbench_timer import NvbenchTimer, cuda_bench, nvbench_used
from ..record.schema import RunRecord
from ..record.vocabulary import DEFAULT_KEYS, SCORER_KEYS
from ..sanitize import find_sanitizer
from ..session import Session, Settings, session
from ..stages import scores as scores_stage
from ..stages import topk as topk_stage
from ..stages.common import Measurer, StageOutcome
from ..timing import AUTO, DeviceTimer
from .sanitizer import sanitize_run
from .stages import run_topk_case, topk_parity, topk_score_sets

SELFTEST_CONFIG = "selftest"  # configs/selftest.yaml: spec section 6's matrix, plus up to 1,048,576 cells


@dataclass
class SelftestRow:
    check: str
    cases: int
    passed: bool | None  # None: skipped
    seconds: float
    detail: str = ""


def topk_selftest(s: Session, seed: int, progress: Progress = no_progress) -> list[SelftestRow]:
    """Spec section 6's matrix (configs/selftest.yaml): decode calls of 8 queries without the count and
    prompt calls of 64 with it, every score set, every variant this device runs, and the CPU oracle;
    ``progress``: each call, then the CUDA graph's replays."""
    calls = dict.fromkeys(c.call for c in load_config(config_path(SELFTEST_CONFIG)).cases("topk"))
    total = len(calls) + s.on_gpu
    rows = []
    for i, call in enumerate(calls):
        progress(i, total, f"top-k {call.kind} ctx={call.ctx} cap={call.capacity}")
        t0 = time.perf_counter()
        out = topk_parity(s, topk_score_sets(call, seed), 0, call.active_blocks)
        failures = _parity_failures(out)
        rows.append(SelftestRow(f"top-k {call.kind} {call.ctx} / {call.capacity}", len(out.parity), not failures,
                                time.perf_counter() - t0, failures[0] if failures else ""))
    if s.on_gpu:
        candidate = s.roles["topk"]["candidate"]  # the kernel with scratch a call must leave clean
        progress(len(calls), total, f"top-k {candidate} in a CUDA graph")
        t0 = time.perf_counter()
        call = Call(524288, MAX_QUERIES, 524288)
        ok, detail = topk_stage.graph_replay_check(synthetic_scores(call, "levels64", seed), 50,
                                                   s.catalog.get("topk", candidate), s.launcher)
        rows.append(SelftestRow(f"top-k {candidate}, CUDA graph x50", 1, ok, time.perf_counter() - t0, detail))
    progress(total, total, "done")
    return rows


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


def _timed(name: str, body: Callable[[], tuple[int, list[str]]]) -> SelftestRow:
    t0 = time.perf_counter()
    cases, failures = body()
    return SelftestRow(name, cases, not failures, time.perf_counter() - t0, failures[0] if failures else "")


def _parity_failures(outcome: StageOutcome) -> list[str]:
    return [f"{p.key}: {p.subject} vs {p.against}: {p.detail}" for p in outcome.parity if not p.equal]


def _scorer_check(s: Session, seed: int, variants: tuple[str, ...]) -> tuple[int, list[str]]:
    checks, failures = 0, []
    for (ctx, nq, cap), keys in itertools.product(SELFTEST_SCORER_CASES, SCORER_KEYS):
        inputs = synthetic_scorer_inputs(Call(ctx, nq, cap), seed, keys)
        out = s.take(scores_stage.run_scores(inputs, s.measurer(0), s.variants("scores", variants), s.roles["scores"],
                                             s.launcher))
        checks += len(out.parity)
        failures += _parity_failures(out)
    return checks, failures


def _topk_check(s: Session, seed: int) -> tuple[int, list[str]]:
    checks, failures = 0, []
    for ctx, cap in SELFTEST_TOPK_CASES:
        for nq, prompt in ((MAX_QUERIES, False), (PROMPT_QUERIES, True)):
            call = Call(ctx, nq, cap, prompt=prompt)
            c, f = _topk_call_check(s, call, seed, s.here("topk", call.max_blocks, call.active_blocks))
            checks, failures = checks + c, failures + f
    return checks, failures


def _topk_call_check(s: Session, call: Call, seed: int, variants: tuple[str, ...]) -> tuple[int, list[str]]:
    """Parity only: ``variants`` on every score set of ``call``, against each other and the oracle."""
    out = StageOutcome()
    for inp in topk_score_sets(call, seed):
        out.extend(run_topk_case(s, inp, 0, variants, call.active_blocks, check_model=True))
    return len(out.parity), _parity_failures(out)


def _constants_check(s: Session) -> tuple[int, list[str]]:
    defines = header_defines(s.catalog.kernel_folder)
    return len(defines), header_mismatches(defines)


@dataclass
class SelftestSoFar:
    """A selftest as far as it has gone: the record of the session now open (the GPU's holds the CPU's parity
    rows too) and the checks done, which an interrupted selftest still records."""

    record: RunRecord | None = None
    rows: list[SelftestRow] = field(default_factory=list)


def selftest(settings: Settings, require_gpu: bool, argv: list[str], progress: Progress = no_progress,
             so_far: SelftestSoFar | None = None) -> tuple[RunRecord, list[SelftestRow]]:
    """Every check this machine can run: the CPU models always, the kernels when a device is found
    (``require_gpu``: a missing device is a NoDeviceError before anything runs); ``progress``: each check;
    ``so_far``: filled as the checks go."""
    found = probe(settings.device_id)
    if require_gpu and not found.available:
        raise NoDeviceError(f"--require-gpu: {found.reason}")
    so_far = so_far if so_far is not None else SelftestSoFar()
    rows = so_far.rows
    total = 3 + (5 if found.available else 0)  # the CPU's checks, and the GPU's
    cpu = Settings(backend="cpu", seed=settings.seed, kernels=settings.kernels)
    with session(cpu, "selftest", argv) as s:
        so_far.record = s.record
        progress(0, total, "constants")
        rows.append(_timed("constants: kernels/qsa_common.cuh == geometry", lambda: _constants_check(s)))
        scorers, topks = s.catalog.names("scores"), s.catalog.names("topk")
        progress(1, total, "scorer models")
        rows.append(_timed(f"scorer models ({', '.join(scorers)}) == butterfly ({' and '.join(SCORER_KEYS)} keys)",
                           lambda: _scorer_check(s, settings.seed, scorers)))
        progress(2, total, "top-k models")
        rows.append(_timed(f"top-k models ({', '.join(topks)}) == oracle", lambda: _topk_check(s, settings.seed)))
        record = s.record
    if not found.available:
        rows.append(SelftestRow("GPU checks", 0, None, 0.0, f"skipped: {found.reason}"))
        progress(total, total, "done")
        return record, rows
    with session(replace(settings, backend="gpu"), "selftest", argv) as g:
        g.record.parity = record.parity + g.record.parity
        so_far.record = g.record
        cc = g.compute_capability or 0
        scorers = g.catalog.runs_on("scores", cc)
        progress(3, total, "scorer kernels")
        rows.append(_timed(f"scorer kernels ({', '.join(scorers)}) == model",
                           lambda: _scorer_check(g, settings.seed, scorers)))
        variants = g.catalog.runs_on("topk", cc)
        progress(4, total, "top-k kernels")
        rows.append(_timed(f"top-k kernels ({', '.join(variants)}) == oracle", lambda: _topk_check(g, settings.seed)))
        d = g.dispatch("decode", DISPATCH_CALL.max_blocks)
        progress(5, total, "dispatch")
        rows.append(_timed(f"dispatch here (sm_{g.compute_capability}): {d.scores} + {d.topk}",
                           lambda: _dispatched_check(g, settings.seed, d)))
        progress(6, total, "timers")
        rows.append(timers_check(g, settings.seed))
        progress(7, total, "compute-sanitizer")
        rows.append(_sanitizer_check(g))
        record = g.record
    progress(total, total, "done")
    return record, rows


def timers_disagree(ours_us: float, nvbench_us: float) -> bool:
    """Whether qsa's median and nvbench's cold median of one launcher differ by more than the tolerance."""
    return abs(ours_us - nvbench_us) > max(TIMERS_TOLERANCE * nvbench_us, TIMERS_TOLERANCE_US)


def timers_check(s: Session, seed: int) -> SelftestRow:
    """qsa's timer (--l2 dirty, ITERS auto) and nvbench's (cold, stdrel) on the same launchers, each median
    against the other's; skipped, and said so, where cuda-bench is missing or nvbench already ran here."""
    name = (f"timers: qsa --l2 {NVBENCH_L2} == nvbench cold (within {TIMERS_TOLERANCE:.0%} or "
            f"{TIMERS_TOLERANCE_US} µs)")
    try:
        bench = cuda_bench()
        if nvbench_used():
            raise TimerError("nvbench runs once per process and already ran in this one")
    except TimerError as unavailable:
        return SelftestRow(name, 0, None, 0.0, f"skipped: {unavailable}")
    t0 = time.perf_counter()
    timer = DeviceTimer(l2=NVBENCH_L2, warmup=s.settings.warmup, kernels=s.catalog.kernel_folder)
    nvbench = NvbenchTimer(bench, s.settings.device_id, s.settings.warmup)
    candidate = s.variants("scores", (s.roles["scores"]["candidate"],))
    ours = []
    for call in TIMERS_CALLS:
        inputs = synthetic_scorer_inputs(call, seed, DEFAULT_KEYS)
        for queued in (None, nvbench):
            measurer = Measurer(AUTO, timer, s.clocks, s.settings.stopping, nvbench=queued)
            ours += scores_stage.run_scores(inputs, measurer, candidate, s.roles["scores"], s.launcher,
                                            check_model=False).measurements
    try:
        theirs = {(m.key, m.variant): m for m in nvbench.run(s.clocks)}
    except TimerError as failed:
        return SelftestRow(name, len(ours), False, time.perf_counter() - t0, str(failed).splitlines()[0])
    failures = [f"{m.variant} on {m.key}: qsa {m.median_us:.2f} µs, nvbench {nv.median_us:.2f} µs"
                for m in ours if timers_disagree(m.median_us, (nv := theirs[(m.key, m.variant)]).median_us)]
    return SelftestRow(name, len(ours), not failures, time.perf_counter() - t0, failures[0] if failures else "")


def _sanitizer_check(s: Session) -> SelftestRow:
    name = f"compute-sanitizer ({', '.join(SELFTEST_SANITIZERS)}), every variant"
    try:
        sanitizer = find_sanitizer()
    except SanitizerError as missing:
        return SelftestRow(name, 0, None, 0.0, f"skipped: {missing}")
    t0 = time.perf_counter()
    sanitize_run(s, SELFTEST_SANITIZERS, None, [], sanitizer, quick=True)
    failed = [r for r in s.record.sanitizer if not r.passed]
    detail = f"{failed[0].variant} {failed[0].tool}: {failed[0].first_report}" if failed else ""
    return SelftestRow(name, len(s.record.sanitizer), not failed, time.perf_counter() - t0, detail)


def _dispatched_check(s: Session, seed: int, d: Dispatch) -> tuple[int, list[str]]:
    """The variants the engine would run on this card, on a decode call, against the models."""
    call = DISPATCH_CALL
    out = StageOutcome()
    for keys in SCORER_KEYS:
        inputs = synthetic_scorer_inputs(call, seed, keys)
        out.extend(s.take(scores_stage.run_scores(inputs, s.measurer(0), s.variants("scores", (d.scores,)),
                                                  s.roles["scores"], s.launcher)))
    checks, failures = _topk_call_check(s, call, seed, (d.topk,))
    return checks + len(out.parity), _parity_failures(out) + failures
