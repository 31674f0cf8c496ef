"""Running the harness: a session (device, timer, clocks, record) and the runs the commands make.

The CLI parses arguments and renders; everything between (which cases, which variants, what is
timed, what is checked, what is recorded) happens here and in the stage runners.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import variants as registry
from .core.errors import (
    ClusterUnavailable,
    EngineError,
    NoDeviceError,
    SanitizerError,
    SideError,
    VariantError,
)
from .core.geometry import CLUSTER_MIN_CC, MAX_QUERIES, NEW_KERNELS_CC, PROMPT_QUERIES, Call, check_queries
from .dispatch import ENV_PDL, dispatch, programmatic_launches
from .inputs import SCORE_SETS, ScorerInputs, TopkInputs, synthetic_scorer_inputs, synthetic_scores
from .kernels import ENV_KERNELS, kernel_dir, sources_hash
from .record.schema import RunRecord
from .record.vocabulary import DEFAULT_KEYS, SCORER_KEYS
from .stages import scores as scores_stage
from .stages import topk as topk_stage
from .stages.common import Measurer, StageOutcome
from .timing import DEFAULT_WARMUP

BACKENDS = ("gpu", "cpu")

SELFTEST_CONFIG = "selftest"  # configs/selftest.yaml: spec section 6's matrix, plus up to 1,048,576 cells


@dataclass
class Settings:
    backend: str = "gpu"
    l2: str = "cold"
    warmup: int = DEFAULT_WARMUP
    seed: int = 0
    check_model: bool = True
    device_id: int = 0
    engines: tuple[str, ...] = ()  # --engine [NAME=]PATH[@REV]: checkouts whose variants run beside qsa's
    variants: tuple[str, ...] | None = None  # --variants: only these (each stage runs those of its own)
    baseline: str | None = None  # --baseline / --candidate: the "before" and "after" (default: the registry's)
    candidate: str | None = None


@dataclass
class Session:
    """One run: the device (or the CPU), its timer and clocks, and the record everything lands in."""

    settings: Settings
    record: RunRecord
    probe_info: dict[str, Any] = field(default_factory=dict)
    clocks: Any = None
    # stage -> (subject, against) pairs whose outputs must be the same bits besides the roles' (qsa compare)
    same_bits: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    _timer: Any = None

    @property
    def on_gpu(self) -> bool:
        return self.settings.backend == "gpu"

    def measurer(self, iters: int) -> Measurer:
        if self.on_gpu and self._timer is None:
            from .timing import DeviceTimer

            self._timer = DeviceTimer(l2=self.settings.l2, warmup=self.settings.warmup)
        return Measurer(iters=iters, timer=self._timer, clocks=self.clocks)

    def take(self, outcome: StageOutcome) -> StageOutcome:
        self.record.measurements += outcome.measurements
        self.record.parity += outcome.parity
        self.record.notes += [n for n in dict.fromkeys(outcome.notes) if n not in self.record.notes]
        return outcome

    def roles(self, stage: str) -> dict[str, str]:
        return self.record.settings["roles"][stage]

    def chosen(self, stage: str, variants: tuple[str, ...]) -> tuple[str, ...]:
        """``variants`` less those ``--variants`` leaves out."""
        picked = self.settings.variants
        return variants if picked is None else tuple(v for v in variants if v in picked)

    @property
    def compute_capability(self) -> int | None:
        cc = self.record.device.get("compute_capability")
        return int(cc.replace(".", "")) if cc else None


@contextlib.contextmanager
def session(
    settings: Settings,
    command: str,
    argv: list[str],
    lock: tuple[int, int | None] | None = None,
    lock_optional: bool = False,
    warn: Callable[[str], None] = lambda msg: None,
) -> Iterator[Session]:
    """Open the device (GPU backend), NVML and the optional clock lock; restore everything on exit."""
    if settings.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)} (got {settings.backend!r})")
    from .device import environment

    record = RunRecord(command=command, argv=argv, backend=settings.backend, kernel_source_hash=sources_hash())
    record.environment = environment()
    record.settings = {"l2": settings.l2, "warmup": settings.warmup, "seed": settings.seed,
                       "check_model": settings.check_model,
                       "roles": {stage: registry.roles(stage) for stage in registry.STAGES}}
    if os.environ.get(ENV_KERNELS):
        record.settings["kernels"] = str(kernel_dir())
    s = Session(settings, record)
    if not s.on_gpu:
        if settings.engines:
            raise EngineError("--engine runs an engine checkout's kernels: it needs --backend gpu")
        _assign_roles(s)
        yield s
        return
    from .clocks import ClockMonitor, lock_clocks
    from .device import require

    found = require(settings.device_id)  # a one-line NoDeviceError before anything imports CuPy
    import cupy

    record.device = found.info
    with cupy.cuda.Device(settings.device_id), contextlib.ExitStack() as stack:
        if settings.engines:
            from .engine.attach import attached

            record.settings["engines"] = stack.enter_context(attached(settings.engines, s.compute_capability or 0))
            stack.enter_context(registry.registered(_switched_variants(s)))
        _assign_roles(s)
        monitor = ClockMonitor.for_pci_bus_id(found.info["pci_bus_id"])
        stack.callback(monitor.close)
        record.device["nvml"] = monitor.device_info()
        s.clocks = monitor if monitor.available else None
        if lock is not None:
            state = stack.enter_context(lock_clocks(monitor, lock[0], lock[1], optional=lock_optional, warn=warn))
            record.settings["clock_lock"] = state.to_dict()
        yield s


def _switched_variants(s: Session) -> list[registry.Variant]:
    """The engine variants under switches that ``--variants``, ``--baseline`` or ``--candidate`` name
    (``NAME.KIND[K=V,...]``), whose names become the registry's spelling of them."""
    from .engine.switches import switched_variant

    found: dict[str, registry.Variant] = {}
    named = [*(s.settings.variants or ()), s.settings.baseline, s.settings.candidate]
    for name in filter(None, named):
        v = switched_variant(name, s.compute_capability or 0)
        if v is not None:
            found[name] = v
    if s.settings.variants is not None:
        s.settings.variants = tuple(found[n].name if n in found else n for n in s.settings.variants)
    s.settings.baseline, s.settings.candidate = (found[n].name if n in found else n for n in
                                                 (s.settings.baseline, s.settings.candidate))
    return list({v.name: v for v in found.values()}.values())


def _assign_roles(s: Session) -> None:
    """The run's roles (``--baseline`` / ``--candidate`` over the registry's) and its ``--variants``, each
    name checked against the registry, engine variants included: a VariantError naming one it lacks."""
    known = {name for stage in registry.STAGES for name in registry.names(stage)}
    for option, value in (("--baseline", s.settings.baseline), ("--candidate", s.settings.candidate)):
        if value is not None and value not in known:
            raise VariantError(f"{option}: no variant {value!r} (expected one of {', '.join(sorted(known))})")
    for name in s.settings.variants or ():
        if name not in known:
            raise VariantError(f"--variants: no variant {name!r} (expected one of {', '.join(sorted(known))})")
    for stage, roles in s.record.settings["roles"].items():
        stage_names = registry.names(stage)
        for role, value in (("baseline", s.settings.baseline), ("candidate", s.settings.candidate)):
            if value in stage_names:
                roles[role] = value


def cluster_refusal(s: Session, max_blocks: int, active_blocks: int = 0) -> str | None:
    """Why the cluster top-k cannot take a call of this size on this card (None when it can, or when the
    card has no clusters and the question does not arise)."""
    cc = s.compute_capability or 0
    if not s.on_gpu or cc < CLUSTER_MIN_CC:
        return None
    from .launch.topk_cluster import require_cluster

    try:
        require_cluster(cc, max_blocks, s.record.device["shared_optin_bytes"], active_blocks)
    except ClusterUnavailable as refused:
        return str(refused)
    return None


def dispatch_for(s: Session, kind: str, max_blocks: int = 0) -> Any:
    """The engine's choice for this device and call size (sm_75 on the CPU backend, where the new
    kernels default); a capacity the cluster top-k cannot hold falls back as the engine does."""
    refusal = cluster_refusal(s, max_blocks) if max_blocks else None
    return dispatch(s.compute_capability or NEW_KERNELS_CC, kind, os.environ, refusal)


# ---- the scorer ---------------------------------------------------------------------------------


def scorer_inputs(call: Call, seed: int, keys: str = DEFAULT_KEYS) -> ScorerInputs:
    """A decode call's synthetic inputs of a ``keys`` kind (the scorers' decode kernels take 1-8 queries)."""
    check_queries(call.nq, prompt=False)
    return synthetic_scorer_inputs(call, seed, keys)


def _variants(stage: str, names: tuple[str, ...]) -> tuple[registry.Variant, ...]:
    return tuple(registry.get(stage, n) for n in names)


def scorer_variants(s: Session) -> tuple[str, ...]:
    """What a scorer case runs: the baseline and the candidate, and every variant from elsewhere (an engine
    checkout's, a compare side's) with qsa's reference to check it against; ``--variants`` picks among all."""
    if s.settings.variants is not None:
        return s.chosen("scores", registry.names("scores"))
    roles = s.roles("scores")
    others = tuple(v.name for v in registry.stage_variants("scores") if not v.qsa_own)
    return tuple(dict.fromkeys((*((roles["reference"],) if others else ()), roles["baseline"], roles["candidate"],
                                *others)))


def _with_switched(s: Session, stage: str, variants: tuple[str, ...], inputs: Any, iters: int,
                   run_here: Callable[[tuple[str, ...]], StageOutcome], active_blocks: int = 0) -> StageOutcome:
    """``run_here`` on the variants that run in this process; each switch setting's variants (an engine's
    ``NAME.KIND[K=V]``) in a child of its own on the same inputs (qsa_cli/variant_child.py)."""
    from .variant_child import run_switched, switches_of

    groups: dict[tuple[tuple[str, str], ...], tuple[str, ...]] = {}
    for name in variants:
        key = switches_of(stage, name)
        groups[key] = (*groups.get(key, ()), name)
    here = groups.pop((), ())
    out = s.take(run_here(here)) if here or not groups else StageOutcome()
    for switches, names in groups.items():
        job = {"roles": s.roles("scores" if stage == "window" else stage), "check_model": s.settings.check_model,
               "active_blocks": active_blocks, "device_id": s.settings.device_id,
               "pci_bus_id": s.record.device["pci_bus_id"]}
        out.extend(s.take(run_switched(stage, switches, names, inputs, s.measurer(iters), job)))
    return out


def run_scorer_case(s: Session, inputs: ScorerInputs, iters: int, variants: tuple[str, ...] | None = None) -> StageOutcome:
    def here(names: tuple[str, ...]) -> StageOutcome:
        return scores_stage.run_scores(inputs, s.measurer(iters), _variants("scores", names), s.roles("scores"),
                                       s.settings.check_model, s.same_bits.get("scores", ()))

    return _with_switched(s, "scores", variants or scorer_variants(s), inputs, iters, here)


def select_bench(s: Session, inputs: ScorerInputs, iters: int) -> StageOutcome:
    """The seed's decode-call scorer benchmark: the baseline and the candidate (and any engine checkout's
    scorers) on the same inputs, hashes, times."""
    return run_scorer_case(s, inputs, iters)


# ---- the top-k ----------------------------------------------------------------------------------


def topk_variants(s: Session, max_blocks: int, active_blocks: int = 0) -> tuple[str, ...]:
    """The variants this card runs for a call of this size: the cluster kernel only where it fits
    (a note in the record says why it was left out)."""
    if not s.on_gpu:
        return s.chosen("topk", registry.names("topk"))  # the CPU models: every variant
    variants = s.chosen("topk", registry.runs_on("topk", s.compute_capability or 0))
    refusal = cluster_refusal(s, max_blocks, active_blocks)
    if refusal is None:
        return variants
    note = f"cluster top-k left out: {refusal}"
    if note not in s.record.notes:
        s.record.notes.append(note)
    return tuple(v for v in variants if registry.get("topk", v).launch != "cluster")


def topk_score_sets(call: Call, seed: int) -> list[TopkInputs]:
    return [synthetic_scores(call, name, seed) for name in SCORE_SETS]


def topk_parity(s: Session, inputs: list[TopkInputs], iters: int, active_blocks: int) -> StageOutcome:
    """Every variant on every score set; times, identical-id counts, and the dispatched variant."""
    variants = topk_variants(s, inputs[0].max_blocks, active_blocks)
    kind = "prompt" if active_blocks else "decode"
    s.record.settings["dispatch"] = _dispatch_summary(s, kind, inputs[0].max_blocks)
    out = StageOutcome()
    for inp in inputs:  # each score set's rows recorded as it ends (an interrupted run keeps them)
        out.extend(run_topk_case(s, inp, iters, variants, active_blocks), prefix=f"{inp.score_set}.")
    return out


def run_topk_case(s: Session, inputs: TopkInputs, iters: int, variants: tuple[str, ...], active_blocks: int,
                  check_model: bool | None = None) -> StageOutcome:
    def here(names: tuple[str, ...]) -> StageOutcome:
        return topk_stage.run_topk(inputs, s.measurer(iters), _variants("topk", names), s.roles("topk"), active_blocks,
                                   s.settings.check_model if check_model is None else check_model,
                                   argpartition=s.on_gpu and iters > 0, same_bits=s.same_bits.get("topk", ()))

    return _with_switched(s, "topk", variants, inputs, iters, here, active_blocks)


def _dispatch_summary(s: Session, kind: str, max_blocks: int = 0) -> dict[str, Any]:
    d = dispatch_for(s, kind, max_blocks)
    return {"kind": kind, "scores": d.scores, "topk": d.topk, "reasons": dict(d.reasons)}


@dataclass
class SelftestRow:
    check: str
    cases: int
    passed: bool | None  # None: skipped
    seconds: float
    detail: str = ""


def topk_selftest(s: Session, seed: int, progress: Callable[[str], None] = lambda msg: None) -> list[SelftestRow]:
    """Spec section 6's matrix (configs/selftest.yaml): decode calls of 8 queries without the count and
    prompt calls of 64 with it, every score set, every variant this device runs, and the CPU oracle."""
    from .config import config_path, load_config

    calls = dict.fromkeys(c.call for c in load_config(config_path(SELFTEST_CONFIG)).cases("topk"))
    rows = []
    for call in calls:
        progress(f"top-k {call.kind} ctx={call.ctx} cap={call.capacity}")
        t0 = time.perf_counter()
        out = topk_parity(s, topk_score_sets(call, seed), 0, call.active_blocks)
        failures = _parity_failures(out)
        rows.append(SelftestRow(f"top-k {call.kind} {call.ctx} / {call.capacity}", len(out.parity), not failures,
                                time.perf_counter() - t0, failures[0] if failures else ""))
    if s.on_gpu:
        candidate = s.roles("topk")["candidate"]  # the kernel with scratch a call must leave clean
        progress(f"top-k {candidate} in a CUDA graph")
        t0 = time.perf_counter()
        call = Call(524288, MAX_QUERIES, 524288)
        ok, detail = topk_stage.graph_replay_check(synthetic_scores(call, "levels64", seed), 50, candidate)
        rows.append(SelftestRow(f"top-k {candidate}, CUDA graph x50", 1, ok, time.perf_counter() - t0, detail))
    return rows


# ---- qsa selftest ---------------------------------------------------------------------------------

SELFTEST_SCORER_CASES: tuple[tuple[int, int, int], ...] = (
    # (context, queries, capacity): n_kv % 4 = 0..3, 1-8 queries, capacity above the context
    (2048, 1, 4096), (2049, 3, 2049), (9002, 4, 16384), (32771, 5, 65536), (131072, 8, 262144),
)
SELFTEST_TOPK_CASES: tuple[tuple[int, int], ...] = ((2052, 4096), (9000, 262144), (135176, 135176))
DISPATCH_CALL = Call(420001, 4, 524288)  # the selftest's check of what the engine dispatches here


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
        out = s.take(scores_stage.run_scores(inputs, s.measurer(0), _variants("scores", variants), s.roles("scores")))
        checks += len(out.parity)
        failures += _parity_failures(out)
    return checks, failures


def _topk_check(s: Session, seed: int) -> tuple[int, list[str]]:
    checks, failures = 0, []
    for ctx, cap in SELFTEST_TOPK_CASES:
        for nq, prompt in ((MAX_QUERIES, False), (PROMPT_QUERIES, True)):
            call = Call(ctx, nq, cap, prompt=prompt)
            c, f = _topk_call_check(s, call, seed, topk_variants(s, call.max_blocks, call.active_blocks))
            checks, failures = checks + c, failures + f
    return checks, failures


def _topk_call_check(s: Session, call: Call, seed: int, variants: tuple[str, ...]) -> tuple[int, list[str]]:
    """Parity only: ``variants`` on every score set of ``call``, against each other and the oracle."""
    out = StageOutcome()
    for inp in topk_score_sets(call, seed):
        out.extend(run_topk_case(s, inp, 0, variants, call.active_blocks, check_model=True))
    return len(out.parity), _parity_failures(out)


def _constants_check() -> tuple[int, list[str]]:
    from .core.geometry import header_mismatches
    from .kernels import header_defines

    defines = header_defines()
    return len(defines), header_mismatches(defines)


def selftest(settings: Settings, require_gpu: bool, argv: list[str]) -> tuple[RunRecord, list[SelftestRow]]:
    """Every check this machine can run: the CPU models always, the kernels when a device is found
    (``require_gpu``: a missing device is a NoDeviceError before anything runs)."""
    from .device import probe

    found = probe(settings.device_id)
    if require_gpu and not found.available:
        raise NoDeviceError(f"--require-gpu: {found.reason}")
    rows = [_timed("constants: kernels/qsa_common.cuh == geometry", _constants_check)]
    cpu = Settings(backend="cpu", seed=settings.seed)
    with session(cpu, "selftest", argv) as s:
        scorers, topks = registry.names("scores"), registry.names("topk")
        rows.append(_timed(f"scorer models ({', '.join(scorers)}) == butterfly ({' and '.join(SCORER_KEYS)} keys)",
                           lambda: _scorer_check(s, settings.seed, scorers)))
        rows.append(_timed(f"top-k models ({', '.join(topks)}) == oracle", lambda: _topk_check(s, settings.seed)))
        record = s.record
    if not found.available:
        rows.append(SelftestRow("GPU checks", 0, None, 0.0, f"skipped: {found.reason}"))
        return record, rows
    with session(Settings(backend="gpu", seed=settings.seed, device_id=settings.device_id, engines=settings.engines),
                 "selftest", argv) as g:
        cc = g.compute_capability or 0
        scorers = registry.runs_on("scores", cc)
        rows.append(_timed(f"scorer kernels ({', '.join(scorers)}) == model",
                           lambda: _scorer_check(g, settings.seed, scorers)))
        variants = registry.runs_on("topk", cc)
        rows.append(_timed(f"top-k kernels ({', '.join(variants)}) == oracle", lambda: _topk_check(g, settings.seed)))
        d = dispatch_for(g, "decode", DISPATCH_CALL.max_blocks)
        rows.append(_timed(f"dispatch here (sm_{g.compute_capability}): {d.scores} + {d.topk}",
                           lambda: _dispatched_check(g, settings.seed, d)))
        rows.append(_sanitizer_check(g))
        g.record.parity = record.parity + g.record.parity
        record = g.record
    return record, rows


SELFTEST_SANITIZERS = ("memcheck", "racecheck")  # the fast subset: one small call of every variant


def _sanitizer_check(s: Session) -> SelftestRow:
    from .sanitize import find_sanitizer

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


def _dispatched_check(s: Session, seed: int, d: Any) -> tuple[int, list[str]]:
    """The variants the engine would run on this card, on a decode call, against the models."""
    call = DISPATCH_CALL
    out = StageOutcome()
    for keys in SCORER_KEYS:
        inputs = synthetic_scorer_inputs(call, seed, keys)
        out.extend(s.take(scores_stage.run_scores(inputs, s.measurer(0), _variants("scores", (d.scores,)),
                                                  s.roles("scores"))))
    checks, failures = _topk_call_check(s, call, seed, (d.topk,))
    return checks + len(out.parity), _parity_failures(out) + failures


# ---- sweeps (YAML configs) ----------------------------------------------------------------------------


def sweep(s: Session, config: Any, stage: str | None = None,
          progress: Callable[[int, int, str], None] = lambda done, total, msg: None) -> None:
    """Run every case of a sweep (only ``stage``'s when given) into the session's record, then its thresholds."""
    from .config import SweepCase

    s.record.settings.update({"config": config.source, "iterations": config.iterations})
    for named_stage, named in config.variants.items():
        unknown = [v for v in named if v not in registry.names(named_stage)]
        if unknown:
            raise VariantError(f"{config.source}: {named_stage} variant {unknown[0]!r} does not run here (its engine "
                             "checkout lacks it, or this card does not run it)")
    cases: list[SweepCase] = config.cases(stage)
    largest: dict[str, int] = {}  # per call kind, the largest call: what the dispatch summary is for
    for c in cases:
        largest[c.kind] = max(largest.get(c.kind, 0), c.call.max_blocks)
    s.record.settings["dispatch"] = {k: _dispatch_summary(s, k, largest[k]) for k in sorted(largest)}
    for i, case in enumerate(cases):
        shown = case.score_set or (case.keys if case.keys != DEFAULT_KEYS else "")
        progress(i, len(cases), f"{case.stage} ctx={case.ctx} q={case.nq} cap={case.capacity} "
                 f"{case.kind}{' ' + shown if shown else ''}")
        call = case.call
        if case.stage == "scores":
            inputs = scorer_inputs(call, config.seed, case.keys)
            run_scorer_case(s, inputs, config.iterations, s.chosen("scores", config.variants_for("scores")))
        else:
            inputs_t = synthetic_scores(call, case.score_set or "continuous", config.seed)
            available = topk_variants(s, call.max_blocks, call.active_blocks)
            variants = tuple(v for v in config.variants_for("topk") if v in available)
            run_topk_case(s, inputs_t, config.iterations, variants, call.active_blocks)
    progress(len(cases), len(cases), "done")
    check_thresholds(s.record, config.thresholds)


def check_thresholds(record: RunRecord, thresholds: Any) -> None:
    """Add a ThresholdCheck per (case, threshold) the record has the medians for."""
    from .record.schema import ThresholdCheck

    roles = record.settings.get("roles") or {stage: registry.roles(stage) for stage in registry.STAGES}
    olds = {stage: r["baseline"] for stage, r in roles.items()}
    news = {stage: r["candidate"] for stage, r in roles.items()}
    medians: dict[tuple[str, str], float] = {(m.key, m.variant): m.median_us for m in record.measurements}
    for m in record.measurements:
        limits = thresholds.get(m.stage)
        if limits is None or m.variant != news.get(m.stage):
            continue
        old = medians.get((m.key, olds[m.stage]))
        floor = medians.get((m.key, scores_stage.READ_FLOOR))
        if limits.min_speedup is not None and old is not None:
            value = old / m.median_us
            record.thresholds.append(ThresholdCheck(m.stage, m.case, "min_speedup", value, limits.min_speedup,
                                                    value >= limits.min_speedup))
        if limits.max_floor_ratio is not None and floor is not None:
            value = m.median_us / floor
            record.thresholds.append(ThresholdCheck(m.stage, m.case, "max_floor_ratio", value,
                                                    limits.max_floor_ratio, value <= limits.max_floor_ratio))


# ---- qsa sanitize ----------------------------------------------------------------------------------------


def sanitize_variants(s: Session) -> dict[str, tuple[str, ...]]:
    """Stage -> every variant this device runs (the cluster top-k on sm_90 and newer)."""
    return {stage: registry.runs_on(stage, s.compute_capability or 0) for stage in registry.STAGES}


def sanitize_run(s: Session, tools: tuple[str, ...], chosen: tuple[str, ...] | None, known: list[Any],
                 sanitizer: Any, quick: bool = False, jobs: int = 4,
                 progress: Callable[[int, int, str], None] = lambda done, total, msg: None) -> None:
    """compute-sanitizer over every case of the chosen variants (all this device runs by default) into
    the session's record."""
    from .sanitize import matrix, sanitize

    variants = sanitize_variants(s)
    if chosen is not None:
        variants = {stage: tuple(v for v in names if v in chosen) for stage, names in variants.items()}
    cases = matrix(variants, SCORE_SETS, s.settings.seed, quick=quick)
    s.record.settings.update({"sanitizer": str(sanitizer), "tools": list(tools), "quick": quick})
    s.record.sanitizer += sanitize(cases, tools, known, sanitizer, jobs, s.settings.device_id, progress,
                                   s.settings.engines)


# ---- the window and qsa info ----------------------------------------------------------------------------


def window_bench(s: Session, call: Call, iters: int, keys: str = DEFAULT_KEYS) -> StageOutcome:
    """Each kernel pair this device runs, captured as one CUDA graph (scores then top-k), replays timed, on
    synthetic inputs of a ``keys`` kind."""
    from .stages import window as window_stage

    available = topk_variants(s, call.max_blocks)
    summary = _dispatch_summary(s, "decode", call.max_blocks)
    dispatched = (summary["scores"], summary["topk"])  # what the engine replays on this card
    pairs = tuple(dict.fromkeys(p for p in (*registry.window_pairs(), dispatched) if p[1] in available
                                and (s.settings.variants is None or p[0] in s.settings.variants)))
    s.record.settings["dispatch"] = summary
    inputs = scorer_inputs(call, s.settings.seed, keys)
    named = {p.name: p for p in (window_stage.WindowPair(registry.get("scores", scorer), registry.get("topk", topk))
                                 for scorer, topk in pairs)}

    def here(names: tuple[str, ...]) -> StageOutcome:
        return window_stage.run_window(inputs, s.measurer(iters), tuple(named[n] for n in names),
                                       s.same_bits.get("window", ()))

    return _with_switched(s, "window", tuple(named), inputs, iters, here)


@dataclass
class DeviceReport:
    device: dict[str, Any]
    clocks: dict[str, Any] | None
    kernels: list[Any]  # kernels.KernelInfo, as compiled for this device
    dispatch: dict[str, Any]  # kind -> summary
    notes: list[str]


def device_report(device_id: int = 0, engines: tuple[str, ...] = ()) -> DeviceReport:
    """What ``qsa info`` shows: the device and its clocks, every kernel's resources, the engine's choice,
    and each engine checkout's variants here."""
    with session(Settings(device_id=device_id, engines=engines), "info", []) as s:
        cc = s.compute_capability or 0
        kernels, notes = [], []
        for stage in registry.STAGES:
            for name in registry.runs_on(stage, cc):
                v = registry.get(stage, name)
                if v.engine is None:
                    kernels += [registry.compiled(v).info(k) for k in v.kernels]
        for checkout in s.record.settings.get("engines", []):
            notes.append(f"engine checkout {checkout['name']} ({checkout['path']}, commit {checkout['commit']}): "
                         f"{', '.join(checkout['variants']) or 'no variant runs here'}")
        if any(registry.get("topk", v).launch == "cluster" for v in registry.runs_on("topk", cc)):
            from .launch import topk_cluster

            optin = int(s.record.device.get("shared_optin_bytes", 0))
            notes.append(f"cluster top-k: capacities up to {topk_cluster.cluster_max_capacity(optin)} cells fit "
                         f"{optin} B of shared memory per CTA")
        else:
            notes.append(f"cluster top-k: needs sm_90 or newer (this device is sm_{cc})")
        if programmatic_launches(cc, os.environ):
            notes.append(f"split top-k: launches 2-6 are programmatic dependent launches ({ENV_PDL}=0 "
                         "runs them one after another)")
        else:
            notes.append("split top-k: launches one after another (programmatic launches need sm_90 or newer, "
                         f"or {ENV_PDL} is 0)")
        clocks = s.clocks.read().to_dict() if s.clocks is not None else None
        choices = {kind: _dispatch_summary(s, kind) for kind in ("decode", "prompt")}
        return DeviceReport(s.record.device, clocks, kernels, choices, notes)


# ---- qsa compare ---------------------------------------------------------------------------------------

COMPARE_SIDE_NAMES = ("base", "candidate")


@dataclass(frozen=True)
class SideSpec:
    """One side of ``qsa compare``: an engine checkout or a folder of qsa's kernel sources (or a checkout of
    qsa, whose ``kernels/`` it is), at a git revision of it when given."""

    name: str
    path: str
    revision: str | None

    @classmethod
    def parse(cls, text: str, default_name: str) -> SideSpec:
        from .engine.checkout import parse_engine_spec

        spec = parse_engine_spec(text)
        named = "=" in text and text.partition("=")[0] == spec.name
        return cls(spec.name if named else default_name, str(spec.path), spec.revision)

    def describe(self, kind: str) -> dict[str, Any]:
        return {"name": self.name, "kind": kind, "path": str(Path(self.path).resolve()), "revision": self.revision}


def side_kind(path: Path) -> tuple[str, Path]:
    """("engine", the checkout) or ("kernels", the folder of kernel sources) that ``path`` is; a SideError
    (one line) when it is neither."""
    from .engine.checkout import SOURCE
    from .kernels import REQUIRED_SOURCES, check_kernel_dir

    if (path / SOURCE).is_file():
        return "engine", path
    for folder in (path, path / "kernels"):
        if all((folder / name).is_file() for name in REQUIRED_SOURCES):
            return "kernels", check_kernel_dir(folder)
    if not path.is_dir():
        raise SideError(f"{path}: no such folder")
    raise SideError(f"{path}: neither an engine checkout (no {SOURCE}) nor a folder of qsa's kernel sources "
                     f"(no {', '.join(REQUIRED_SOURCES)}, here or in kernels/)")


@contextlib.contextmanager
def compare_sides(s: Session, sides: tuple[SideSpec, SideSpec]) -> Iterator[dict[str, tuple[tuple[str, str], ...]]]:
    """Both sides' variants registered (an engine checkout attached, a kernels folder compiled as qsa's own
    variants), each ``PATH@REV`` checked out into a temporary worktree for the block's length. Yields, per
    stage, the (base, candidate) pairs of the variants both sides run; the run's roles become the first pair
    of each stage (the tables' "before" and "after")."""
    from .core.git import folder_at_revision
    from .engine.attach import attached

    if sides[0].name == sides[1].name:
        raise SideError(f"both sides are named {sides[0].name!r}: name them BASE=PATH and CANDIDATE=PATH")
    with contextlib.ExitStack() as stack:
        described = []
        for side in sides:
            path = Path(side.path)
            if side.revision is not None:
                path = stack.enter_context(folder_at_revision(path, side.revision))
            kind, where = side_kind(path)
            described.append(side.describe(kind))
            if kind == "engine":
                engines = stack.enter_context(attached((f"{side.name}={where}",), s.compute_capability or 0))
                engines[0].update({"path": described[-1]["path"], "revision": side.revision})
                s.record.settings.setdefault("engines", []).extend(engines)
            else:
                stack.enter_context(registry.registered(registry.side(side.name, where)))
        s.record.settings["sides"] = described
        pairs = {stage: _side_pairs(stage, sides[0].name, sides[1].name) for stage in registry.STAGES}
        if not any(pairs.values()):
            raise SideError(f"{sides[0].name} and {sides[1].name} have no variant in common that runs here")
        for stage, matched in pairs.items():
            if matched:
                s.record.settings["roles"][stage].update({"baseline": matched[0][0], "candidate": matched[0][1]})
        yield pairs


def _side_pairs(stage: str, base: str, candidate: str) -> tuple[tuple[str, str], ...]:
    """(base.X, candidate.X) for every X of ``stage`` both sides registered, in the registry's order."""
    names = registry.names(stage)
    return tuple((n, f"{candidate}.{n.removeprefix(base + '.')}") for n in names
                 if n.startswith(base + ".") and f"{candidate}.{n.removeprefix(base + '.')}" in names)


def compare_run(s: Session, sides: tuple[SideSpec, SideSpec], call: Call | None, iters: int, config: Any = None,
                tolerance: float = 0.05) -> None:
    """Both sides on the same inputs into the session's record: the scorer on the call, the top-k on its
    four score sets (a decode call), and the window's pairs (or every case of ``config``); every pair's
    candidate checked bit for bit against its base, both against qsa's reference and the CPU model."""
    with compare_sides(s, sides) as pairs:
        window = tuple((window_pair(b), window_pair(c)) for b, c in pairs["topk"]
                       if registry.get("topk", b).window_scorer and registry.get("topk", c).window_scorer)
        # each candidate checked against its base: (subject, against)
        s.same_bits = {stage: tuple((c, b) for b, c in matched) for stage, matched in (*pairs.items(), ("window", window))}
        s.record.settings["compare"] = {
            "base": sides[0].name, "candidate": sides[1].name, "tolerance": tolerance,
            "pairs": [{"stage": stage, "base": b, "candidate": c}
                      for stage, matched in (*pairs.items(), ("window", window)) for b, c in matched]}
        chosen = {name for matched in pairs.values() for pair in matched for name in pair}
        s.settings.variants = tuple(chosen | {registry.roles(stage)["reference"] for stage in registry.STAGES})
        if config is not None:
            sweep(s, config)
            if s.record.thresholds:  # a sweep's thresholds judge qsa's baseline and candidate, not two sides
                s.record.thresholds = []
                s.record.notes.append(f"{config.source}'s thresholds are not checked by qsa compare: its verdicts "
                                      "are the pairs' bits and FAST / SLOW / SAME")
            return
        if pairs["scores"]:
            run_scorer_case(s, scorer_inputs(call, s.settings.seed), iters)
        if pairs["topk"]:
            topk_parity(s, topk_score_sets(call, s.settings.seed), iters, 0)
        if window:
            s.settings.variants = tuple(chosen)
            window_bench(s, call, iters)


def window_pair(topk: str) -> str:
    """The window pair a top-k variant makes with the scorer it follows."""
    from .record.vocabulary import pair_name

    return pair_name(registry.get("topk", topk).window_scorer, topk)
