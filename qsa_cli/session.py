"""A run's session: its settings, the device (or the CPU), NVML and the optional clock lock, the catalog of
its variants, its roles, and the record everything lands in.

``session`` opens one and builds, once, what the runs read and never change: the run's catalog (qsa's own
variants from the kernels folder in use, an engine checkout's, a ``qsa compare`` side's, engine variants
under switches), the roles (the tables' "before" and "after"), the variants ``--variants`` picks, the
environment's switches (read here, once) and the card's limits. The record's settings are written through
``Session.record_settings`` only. The runs (qsa_cli/runs/) take the session and fill its record. A child of a
run (``SwitchedChild``: the variants of one switch setting, runs/switched.py) opens the same session from the
same command line, its catalog made as the run's was and the run's clock lock kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from .catalog import STAGES, Catalog, Launcher, Variant, qsa_catalog
from .clocks import ClockMonitor, lock_clocks
from .core.errors import EngineError, SideError, SwitchedRunError, TimerError, VariantError
from .core.geometry import NEW_KERNELS_CC
from .core.memory import CaseSize, check_device, check_host, device_case_bytes, device_run_bytes, flush_bytes, tell
from .device import environment, require
from .dispatch import Dispatch, dispatch, read_switches
from .engine.attach import attached, check_engines
from .engine.switches import switched_variant
from .kernels import sources_hash
from .launch.shape import Card
from .nvbench_timer import NvbenchTimer, check_timer, cuda_bench
from .record.assembly import add_rows
from .record.limits import Limits, check_scopes, verdicts
from .record.schema import RunRecord, RunSettings
from .record.vocabulary import DEFAULT_L2, NVBENCH_TIMER, QSA_TIMER, pair_name
from .sides import SideSpec, open_sides, side_pairs
from .stages.common import Measurer, StageOutcome
from .timing import AUTO, DEFAULT_WARMUP, DeviceTimer, Iters, StoppingRule, Timer

BACKENDS = ("gpu", "cpu")
# A top-k variant is in at most three of a window's pairs: the catalog's, after the fastest scorer, the dispatched
# one (runs/stages.window_bench), each building its own scratch.
WINDOW_PAIRS_A_TOPK = 3
# In a child qsa process of a run (runs/switched.py), what it runs for the run: a SwitchedChild as JSON.
CHILD_ENV = "QSA_SWITCHED_CHILD"
# The settings of the GPU's timer, and what each would not do on the CPU backend: a run there records neither
# (the command line refuses them; a sweep config's are noted as not applied, runs/sweep.py).
GPU_TIMER_SETTINGS = {"warmup": "the CPU backend times its models after one untimed run of each",
                      "l2": "the CPU backend has no L2 to flush or keep warm"}


@dataclass(frozen=True)
class SwitchedChild:
    """What makes a qsa process one switch setting's child of a run (runs/switched.py starts it, on the run's own
    command line, with the setting in its environment and this beside it, CHILD_ENV): the setting; the run's own
    values of those switches (None: unset), under which the run's catalog of engine variants was made, so that
    the child's is the same; the SM clock the run locked (None: none), which the child keeps to rather than lock
    the clocks again; and its cases, each by its record key with the setting's variants it runs there."""

    switches: tuple[tuple[str, str], ...]
    run_values: tuple[tuple[str, str | None], ...]
    locked_sm_mhz: int | None
    cases: tuple[tuple[str, tuple[str, ...]], ...]

    def encoded(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def of_environment(cls, env: Mapping[str, str]) -> SwitchedChild | None:
        """The child that ``env`` (a process's environment) says this process is, or None."""
        text = env.get(CHILD_ENV, "")
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(tuple((str(k), str(v)) for k, v in data["switches"]),
                       tuple((str(k), None if v is None else str(v)) for k, v in data["run_values"]),
                       None if data["locked_sm_mhz"] is None else int(data["locked_sm_mhz"]),
                       tuple((str(key), tuple(map(str, names))) for key, names in data["cases"]))
        except (ValueError, KeyError, TypeError) as bad:
            raise SwitchedRunError(f"{CHILD_ENV} does not say what a child of a run runs ({bad!r}): it is set by "
                                   "qsa for its own child processes") from None

    def run_environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` (this child's environment) with the setting's switches as the run had them: what the run's
        catalog of engine variants was made under."""
        given = dict(self.switches)
        return {**{k: v for k, v in env.items() if k not in given},
                **{k: v for k, v in self.run_values if v is not None}}


class ChildCasesRun(Exception):
    """A run's child (SwitchedChild) has run every case it was given: its command ends there, its record written
    (commands/measuring.py)."""


@dataclass(frozen=True)
class Settings:
    backend: str = "gpu"
    l2: str = DEFAULT_L2
    warmup: int = DEFAULT_WARMUP
    stopping: StoppingRule = StoppingRule()  # how many samples ITERS auto takes
    seed: int = 0
    check_model: bool = True
    device_id: int = 0
    engines: tuple[str, ...] = ()  # --engine [NAME=]PATH[@REV]: checkouts whose variants run beside qsa's
    adapter: Path | None = None  # --adapter FILE.cu: built with each checkout, its entries their variants
    variants: tuple[str, ...] | None = None  # --variants: only these (each stage runs those of its own)
    baseline: str | None = None  # --baseline / --candidate: the "before" and "after" (default: the catalog's)
    candidate: str | None = None
    kernels: Path | None = None  # --kernels DIR: qsa's kernel sources from this folder (None: the installed)
    sides: tuple[SideSpec, SideSpec] | None = None  # qsa compare: the base and the candidate side
    timer: str = QSA_TIMER  # --timer: qsa's, or nvbench (record.vocabulary TIMERS)
    # the samples each variant of a case takes (ITERS, a sweep's iterations; 0: parity only); None: the session
    # runs no stage (qsa info, sanitize's parent), so it opens no timer
    iters: Iters | None = None
    limits: tuple[tuple[str, str, float], ...] = ()  # (scope, measure, value): limits on inexact variants' measures
    # the cases the run will make, by size: what its memory is weighed by before it starts (core/memory.py; none:
    # not weighed, a run of fixed small cases)
    sizes: tuple[CaseSize, ...] = ()
    child: SwitchedChild | None = None  # this process is a child of a run, for one switch setting (runs/switched.py)

    @property
    def on_gpu(self) -> bool:
        return self.backend == "gpu"

    @property
    def limits_by_scope(self) -> dict[str, dict[str, float]]:
        """The limits as record/limits.py reads them (a later (scope, measure) taking the place of an earlier)."""
        out: dict[str, dict[str, float]] = {}
        for scope, measure, value in self.limits:
            out.setdefault(scope, {})[measure] = value
        return out


@dataclass(frozen=True)
class Compared:
    """``qsa compare``'s two sides in a run: per stage (the window's too) the (base, candidate) pairs of the
    variants both run, in the catalog's order."""

    base: str
    candidate: str
    pairs: dict[str, tuple[tuple[str, str], ...]]


_SETTING_KEYS = frozenset(get_type_hints(RunSettings))


@dataclass
class Session:
    """One run: its settings, catalog and roles (fixed when it opened), the device (or the CPU), its timer
    and clocks, and the record everything lands in."""

    settings: Settings
    record: RunRecord
    catalog: Catalog = field(default_factory=qsa_catalog)
    roles: dict[str, dict[str, str]] = field(default_factory=dict)  # stage -> role -> variant
    picked: tuple[str, ...] | None = None  # --variants (or compare's sides), as the catalog spells them
    switches: Mapping[str, str] = field(default_factory=dict)  # the environment's dispatch.SWITCHES, read once
    card: Card | None = None  # the device's limits (GPU backend)
    compared: Compared | None = None
    clocks: Any = None
    run_measurer: Measurer | None = None  # built as the session opens (session()) when it runs stages
    ran_as_child: set[str] = field(default_factory=set)  # a child of a run: the keys of the cases it has run

    @property
    def on_gpu(self) -> bool:
        return self.settings.on_gpu

    @property
    def compute_capability(self) -> int | None:
        return self.card.compute_capability if self.card is not None else None

    def record_settings(self, **values: Any) -> None:
        """The one place the record's settings are written (record/schema.py RunSettings names them)."""
        unknown = sorted(set(values) - _SETTING_KEYS)
        if unknown:
            raise ValueError(f"no run setting {unknown[0]!r} in the record's schema")
        self.record.settings.update(values)  # type: ignore[typeddict-item]

    @property
    def launcher(self) -> Launcher | None:
        """How the GPU backend launches the run's variants (None on the CPU backend: the models run)."""
        return Launcher(self.catalog, self.switches) if self.on_gpu else None

    def compared_bits(self, stage: str) -> tuple[tuple[str, str], ...]:
        """(subject, against) pairs of ``stage`` whose outputs must be the same bits besides the roles':
        qsa compare's candidate against its base."""
        return tuple((c, b) for b, c in self.compared.pairs[stage]) if self.compared else ()

    @property
    def measurer(self) -> Measurer:
        """What times every case's variants: the session's one timer (qsa's or nvbench) and clocks, ``iters``
        samples each, or (ITERS auto) the run's stopping rule's."""
        if self.run_measurer is None:
            raise RuntimeError("this session runs no stage: its Settings.iters is None")
        return self.run_measurer

    @contextlib.contextmanager
    def measuring(self) -> Iterator[Measurer]:
        """The run's cases measured in the block, their measurements complete as it ends: a deferred timer's
        (nvbench's) timed then, in its one batch. A block left early (an interruption, an error) leaves the
        measurements never timed out of the record, which holds only what was measured; so does a deferred timer's
        batch that fails or is interrupted."""
        measurer = self.measurer
        try:
            yield measurer
            measurer.complete()
        except BaseException:
            untimed = {id(m) for m in measurer.timer.pending}
            self.record.measurements = [m for m in self.record.measurements if id(m) not in untimed]
            raise

    @property
    def inexact(self) -> dict[str, str]:
        """The run's variants declared not bitwise, each name with its stage."""
        return {v.name: v.stage for v in self.catalog.variants if not v.exact}

    def take(self, outcome: StageOutcome) -> StageOutcome:
        """A stage's rows into the record, each inexact variant's row against the stage's reference or CPU
        model judged by the run's limits (record/limits.py)."""
        limits: Limits = self.settings.limits_by_scope
        for row in outcome.agreements:
            row.limits = verdicts(row, self.roles.get(row.stage, {}).get("reference"), self.inexact, limits)
        for m in outcome.measurements:
            if m.rounds and m.rounds["suspect"]:
                self.note(f"{m.variant} on {m.key}: {len(m.rounds['suspect'])} sample(s) or batch(es) kept after "
                          f"{len(m.rounds['discarded'])} re-measures though faulty "
                          f"({', '.join(sorted(set(m.rounds['suspect'])))}): its times are suspect")
        add_rows(self.record, outcome)
        return outcome

    def note(self, text: str) -> None:
        if text not in self.record.notes:
            self.record.notes.append(text)

    def chosen(self, variants: tuple[str, ...]) -> tuple[str, ...]:
        """``variants`` less those ``--variants`` leaves out."""
        return variants if self.picked is None else tuple(v for v in variants if v in self.picked)

    def variants(self, stage: str, names: tuple[str, ...]) -> tuple[Variant, ...]:
        """The catalog's ``stage`` variants of these names."""
        return tuple(self.catalog.get(stage, n) for n in names)

    def here(self, stage: str, max_blocks: int, active_blocks: int = 0) -> tuple[str, ...]:
        """The variants of ``stage`` this card runs for a call of this size (every one on the CPU, whose
        models take any call), less those ``--variants`` leaves out: a variant whose launch shape refuses
        the call is left out, and a note in the record says why."""
        if self.card is None:
            return self.chosen(self.catalog.names(stage))
        kept = []
        for name in self.chosen(self.catalog.runs_on(stage, self.card.compute_capability)):
            shape = self.catalog.get(stage, name).launch
            refusal = shape.refusal(self.card, max_blocks, active_blocks)
            if refusal is None:
                kept.append(name)
            else:
                self.note(f"{shape.title} left out: {refusal}")
        return tuple(kept)

    def dispatch(self, kind: str, max_blocks: int = 0) -> Dispatch:
        """The engine's choice for this device and call size (sm_75 on the CPU backend, where the new
        kernels default); a capacity the cluster top-k cannot hold falls back as the engine does."""
        cc = self.compute_capability or NEW_KERNELS_CC
        refusal = None
        if self.card is not None and max_blocks:
            cluster = self.catalog.get("topk", self.catalog.with_launch("topk", "cluster"))
            if cluster.runs_on(cc):
                refusal = cluster.launch.refusal(self.card, max_blocks)
        return dispatch(self.catalog, cc, kind, self.switches, refusal)

    def dispatch_summary(self, kind: str, max_blocks: int = 0) -> dict[str, Any]:
        return self.dispatch(kind, max_blocks).summary(kind)


@dataclass(frozen=True)
class Opening:
    """A session about to open (``with opening as s``), its settings readable before it does: what a run that
    starts work first reads (topk-parity --selftest's workers)."""

    settings: Settings
    context: contextlib.AbstractContextManager[Session]

    def __enter__(self) -> Session:
        return self.context.__enter__()

    def __exit__(self, *exc_info: Any) -> bool | None:
        return self.context.__exit__(*exc_info)


@contextlib.contextmanager
def session(
    settings: Settings,
    command: str,
    argv: list[str],
    lock: tuple[int, int | None] | None = None,
    lock_optional: bool = False,
    warn: Callable[[str], None] = lambda msg: None,
) -> Iterator[Session]:
    """Open the device (GPU backend), NVML and the optional clock lock, build the run's catalog and roles;
    restore everything on exit."""
    if settings.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)} (got {settings.backend!r})")
    catalog = qsa_catalog(settings.kernels)
    switches = read_switches()
    record = RunRecord(command=command, argv=argv, backend=settings.backend,
                       kernel_source_hash=sources_hash(catalog.kernel_folder))
    record.environment = environment(switches)
    s = Session(settings, record, catalog, switches=switches)
    s.record_settings(seed=settings.seed, check_model=settings.check_model)
    check_timer(settings.timer, settings.backend, settings.l2)
    if s.on_gpu:  # the timer's settings, applied only there
        s.record_settings(l2=settings.l2, warmup=settings.warmup)
    if settings.timer != QSA_TIMER:
        s.record_settings(timer=settings.timer)
    if settings.kernels is not None:
        s.record_settings(kernels=str(catalog.kernel_folder))
    # a checkout's own problem first: what a device or the GPU would meet (a compare's sides are checked as opened)
    if settings.engines or (settings.adapter is not None and settings.sides is None):
        check_engines(settings.engines, variants=filter(None, (*(settings.variants or ()), settings.baseline,
                                                               settings.candidate)), adapter=settings.adapter)
    if settings.iters == AUTO:
        s.record_settings(stopping=settings.stopping.to_dict())
    if not s.on_gpu:
        if settings.engines:
            raise EngineError("--engine runs an engine checkout's kernels: it needs --backend gpu")
        _cast(s, {})
        tell(check_host(command, settings.sizes, on_gpu=False))
        if settings.iters is not None:
            s.run_measurer = Measurer(settings.iters, rule=settings.stopping)
        yield s
        return
    found = require(settings.device_id)  # a one-line NoDeviceError before anything imports CuPy
    # a switched run's child weighs nothing: its run weighed itself, the child's share included (memory.py)
    weighs = settings.child is None
    host_need = check_host(command, settings.sizes, on_gpu=True) if weighs else None  # before the builds
    import cupy

    record.device = found.info
    s.card = Card(found.compute_capability, int(found.info["shared_optin_bytes"]))
    with cupy.cuda.Device(settings.device_id), contextlib.ExitStack() as stack:
        switched = _add_parts(s, stack)
        if switched and settings.timer == NVBENCH_TIMER:
            raise TimerError(f"--timer nvbench times the launchers of this process; {next(iter(switched.values()))} "
                             "runs under its switches in a child process of its own")
        _cast(s, switched)
        tell(host_need, check_device_memory(s, command) if weighs else None)
        monitor = ClockMonitor.for_pci_bus_id(found.info["pci_bus_id"])
        stack.callback(monitor.close)
        record.device["nvml"] = monitor.device_info()
        s.clocks = monitor if monitor.available else None
        locked_sm_mhz = None
        if settings.child is not None:  # the run holds the lock; a child's would reset it as the child ends
            locked_sm_mhz = settings.child.locked_sm_mhz
        elif lock is not None:
            state = stack.enter_context(lock_clocks(monitor, lock[0], lock[1], optional=lock_optional, warn=warn))
            s.record_settings(clock_lock=state.to_dict())
            locked_sm_mhz = state.sm_mhz if state.locked else None
        if settings.iters is not None:
            s.run_measurer = _gpu_measurer(settings, catalog.kernel_folder, s.clocks, locked_sm_mhz)
        yield s


def check_device_memory(s: Session, command: str) -> str | None:
    """The run's cases (Settings.sizes) weighed against the device's free memory, before the timer places its
    flush buffer or any case its arrays (core/memory.py): a MemoryNeedError, one line, when the largest cannot
    fit; else the line to tell of a large run (memory.tell). Each top-k variant the run may run takes its scratch in a top-k case (in a window case once for each
    pair it may be in: WINDOW_PAIRS_A_TOPK)."""
    if not s.settings.sizes or s.settings.iters is None:
        return None
    device = s.record.device
    sms, l2 = int(device["sms"]), int(device["l2_bytes"])
    topk = s.variants("topk", s.chosen(s.catalog.names("topk")))
    flush = flush_bytes(l2, s.settings.l2 == "warm") + (l2 if s.settings.timer == NVBENCH_TIMER else 0)
    children = any(v.engine is not None and v.engine.switches for v in s.catalog.variants)

    def need(case: CaseSize) -> int:
        scratch = [size for v in topk for size in v.launch.scratch_bytes(v, functools.partial(s.catalog.code, v),
                                                                         case.nq, case.blocks, sms)]
        pairs = {"scores": 0, "topk": 1, "window": WINDOW_PAIRS_A_TOPK}[case.stage]
        timed_sort = case.stage == "topk" and s.settings.iters != 0  # runs/stages.topk_case's argpartition
        return device_run_bytes(device_case_bytes(case, scratch * pairs, timed_sort), flush, children)

    needs = [(case, need(case)) for case in s.settings.sizes]
    return check_device(command, needs, f"device {device['id']} ({device['name']})")


def _gpu_measurer(settings: Settings, kernels: Path, clocks: Any, locked_sm_mhz: int | None) -> Measurer:
    """The GPU session's measurer: qsa's timer (its read floor serves any timer), or with --timer nvbench
    nvbench's, which times every case's variants in one run as the run's cases end (Session.measuring)."""
    assert settings.iters is not None
    gpu = DeviceTimer(l2=settings.l2, warmup=settings.warmup, kernels=kernels, locked_sm_mhz=locked_sm_mhz)
    timer: Timer = (NvbenchTimer(cuda_bench(), settings.device_id, settings.warmup)
                    if settings.timer == NVBENCH_TIMER and settings.iters != 0 else gpu)
    return Measurer(settings.iters, timer, clocks, settings.stopping, gpu=gpu, reference_points=settings.child is None)


def _add_parts(s: Session, stack: contextlib.ExitStack) -> dict[str, str]:
    """The run's engine checkouts, compare sides and (with ``--engine``) the switched variants it names added
    to its catalog, in that order, each checkout built and loaded for the card, for the session's length.
    Returns the catalog's spelling of each switched variant named (``NAME.KIND[K=V,...]``, its switches
    sorted) by the name given."""
    cc = s.card.compute_capability if s.card else 0
    env = s.settings.child.run_environment(os.environ) if s.settings.child is not None else None  # None: this one's
    engines: list[dict[str, Any]] = []
    if s.settings.engines:
        found = stack.enter_context(attached(s.settings.engines, cc, env, adapter=s.settings.adapter))
        s.catalog = s.catalog.adding(found.variants, found.libraries)
        engines += found.provenance
    if s.settings.sides:
        sides = open_sides(stack, s.settings.sides, s.catalog, cc, s.settings.adapter, env)
        s.catalog = s.catalog.adding(sides.variants, sides.libraries)
        engines += sides.engines
        s.record_settings(sides=sides.described)
    if engines:
        s.record_settings(engines=engines)
    if not s.settings.engines:
        return {}
    named = [*(s.settings.variants or ()), s.settings.baseline, s.settings.candidate]
    switched = {name: v for name in filter(None, named)
                if (v := switched_variant(name, s.catalog.libraries.values(), cc)) is not None}
    s.catalog = s.catalog.adding({v.name: v for v in switched.values()}.values())
    return {name: v.name for name, v in switched.items()}


def _cast(s: Session, spelled: Mapping[str, str]) -> None:
    """The run's roles (the catalog's, ``--baseline`` / ``--candidate`` over them, or compare's first pair
    of each stage) and the variants it picks (``spelled``: a switched variant's name as the catalog has it),
    each name checked against the catalog: a VariantError naming one it lacks."""
    baseline, candidate = (spelled.get(n, n) if n else n for n in (s.settings.baseline, s.settings.candidate))
    known = s.catalog.known()
    for option, value in (("--baseline", baseline), ("--candidate", candidate)):
        if value is not None and value not in known:
            raise VariantError(f"{option}: no variant {value!r} (expected one of {', '.join(sorted(known))})")
    for name in s.settings.variants or ():
        if spelled.get(name, name) not in known:
            raise VariantError(f"--variants: no variant {name!r} (expected one of {', '.join(sorted(known))})")
    roles = {stage: s.catalog.roles(stage) for stage in STAGES}
    for stage, cast in roles.items():
        names = s.catalog.names(stage)
        for role, value in (("baseline", baseline), ("candidate", candidate)):
            if value in names:
                cast[role] = value
    for option, value in (("--baseline", baseline), ("--candidate", candidate)):
        stage = next((stage for stage in STAGES if value in s.catalog.names(stage)), None)
        if stage is not None:
            _check_compares(roles[stage], option, value, s.settings.variants and tuple(spelled.get(n, n) for n in
                                                                                          s.settings.variants))
    if s.settings.variants is not None:
        s.picked = tuple(spelled.get(n, n) for n in s.settings.variants)
    if s.settings.sides:
        s.compared = _compared(s.catalog, *(side.name for side in s.settings.sides))
        for stage in STAGES:  # a variant one side has and the other lacks (another API generation) is named
            paired = {name for pair in s.compared.pairs[stage] for name in pair}
            for side in s.settings.sides:
                alone = [n for n in s.catalog.names(stage) if n.startswith(side.name + ".") and n not in paired]
                if alone:
                    s.note(f"compare: {', '.join(alone)}: only the {side.name} side has them here; not compared")
        for stage in STAGES:
            if s.compared.pairs[stage]:
                roles[stage].update({"baseline": s.compared.pairs[stage][0][0],
                                     "candidate": s.compared.pairs[stage][0][1]})
        # both sides' variants, and qsa's references to check each against
        s.picked = tuple(dict.fromkeys([*(name for stage in STAGES for pair in s.compared.pairs[stage] for name in pair),
                                        *(roles[stage]["reference"] for stage in STAGES)]))
    s.roles = roles
    s.record_settings(roles=roles)
    limits = s.settings.limits_by_scope
    check_scopes(limits, s.inexact, known)
    if s.inexact:
        s.record_settings(inexact=s.inexact)
    if limits:
        s.record_settings(limits=limits)


def _check_compares(cast: dict[str, str], option: str, value: str, picked: tuple[str, ...] | None) -> None:
    """A role given (``option``: --baseline or --candidate, as ``value``) must make a before / after that
    compares two variants that run: not one variant with itself, not a variant ``--variants`` leaves out."""
    if cast["baseline"] == cast["candidate"]:
        other = "--candidate" if option == "--baseline" else "--baseline"
        raise VariantError(f"{option} {value}: it is the {other.removeprefix('--')} too, so the before and after "
                           f"would be one variant (give {other} another)")
    if picked is not None and value not in picked:
        raise VariantError(f"{option} {value}: --variants leaves it out, so the before and after would compare "
                           "nothing (add it to --variants)")


def _compared(catalog: Catalog, base: str, candidate: str) -> Compared:
    """The (base, candidate) pairs of every stage's variants both sides run, the window's of the top-k's
    pairs whose variants both follow a scorer; a SideError when there are none."""
    pairs = {stage: side_pairs(catalog, stage, base, candidate) for stage in STAGES}
    if not any(pairs.values()):
        raise SideError(f"{base} and {candidate} have no variant in common that runs here")
    topk = {v.name: v for v in catalog.stage("topk")}
    pairs["window"] = tuple((pair_name(topk[b].window_scorer, b), pair_name(topk[c].window_scorer, c))
                            for b, c in pairs["topk"] if topk[b].window_scorer and topk[c].window_scorer)
    return Compared(base, candidate, pairs)

