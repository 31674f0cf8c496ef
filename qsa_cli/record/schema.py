"""The result record of a run: plain, versioned, JSON-serialisable data, every sample kept.

Measurement and parity are recorded here and nowhere else; tables, markdown, plots and the gate are
all rendered from a record, so a saved run can be re-rendered or compared later (``qsa report``).
The classes' type hints are the record's schema: a record read back is checked against them, field
by field (``RunRecord.from_dict``; record/load.py reads a file and migrates older versions), so whatever
renders it can trust every type.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import os
import statistics
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, TypedDict, Union, get_args, get_origin, get_type_hints, is_typeddict

from .. import __version__
from ..core.errors import InputError
from ..core.files import atomic_write
from ..core.source import Source, commit_label, running_source

SCHEMA = "qsa.run"
# 2 added "incomplete" and "sanitizer"; 3 added "checks"; 4 named the L2 states (clean, dirty, warm) and added a
# measurement's "batch" and "stop"; 5 added "agreements", an inexact variant's measures, and a measurement's
# "rounds", "timer" and "nvbench"; 6 drains the stream before each sample, each sample its own hold (a round
# in "rounds" is one sample or one batch; in 5 a round was 32 samples queued back to back); 7 records a decode
# call's scorer by its queries; 8 added a measurement's "launches"; 9 added "confirmations", the gate's measurements
# again of the cases holding a SLOW row, and a measurement's "round_medians_us" (qsa compare --rounds) (record/load.py
# migrates older ones)
SCHEMA_VERSION = 9
INFO_SCHEMA = "qsa.info"  # what ``qsa info`` reports (InfoReport)

# "keys" is in a scorer case only for keys other than the synthetic ones: the cases of earlier runs keep their key
CASE_FIELDS = ("stage", "ctx", "nq", "capacity", "kind", "score_set", "keys", "l2")


class _CallFields(TypedDict):  # what every case has
    ctx: int
    nq: int
    capacity: int
    kind: str
    l2: str


class Case(_CallFields, total=False):
    """A call as a record names it (``stages.common.call_case``); the top-k's adds its score set, the
    scorer's its keys where they are not the synthetic ones."""

    score_set: str
    keys: str


class Clocks(TypedDict):
    """A clock reading as a record holds it (``clocks.ClockReading.to_dict``)."""

    sm_mhz: int | None
    mem_mhz: int | None
    temperature_c: int | None
    power_w: float | None
    event_reasons: list[str]
    throttled: bool


class BatchTiming(TypedDict):
    """Back-to-back launches timed by one pair of events (``timing.sample``): each batch's mean per launch."""

    launches: int
    means_us: list[float]


class DiscardedRound(TypedDict):
    """A round of samples (or a batch) the timer threw away and measured again (``timing.RoundRule``): why
    (``hold timed out``: the host had not released the stream's hold, so the times hold its launch gaps;
    ``throttled``: the SM clock over it was below the threshold), its times and its SM clock (MHz; None:
    not measured)."""

    reason: str
    batch: bool
    samples_us: list[float]
    sm_mhz: float | None


class RoundChecks(TypedDict):
    """How a GPU measurement's rounds (what one hold covers: a batch, or a sample; 32 samples in schema 5)
    were judged: each kept one's
    SM clock (MHz, in the order taken: the batches first; None: not measured) and how long its hold held the
    stream while the host queued it (µs: how near the hold's timeout it came), the clock the threshold is a
    fraction of, the rounds thrown away, and the reasons of those kept though faulty once the re-measures
    ran out (the measurement is then suspect, and the record's notes say so)."""

    sm_mhz: list[float | None]
    held_us: list[float | None]
    reference_mhz: float
    threshold: float
    discarded: list[DiscardedRound]
    suspect: list[str]


class NvbenchSummary(TypedDict):
    """What nvbench reported of a measurement it timed (``--timer nvbench``; qsa_cli/nvbench_timer.py): the
    cuda-bench version, its cold measurement's mean and median (µs), the relative standard deviation of its
    samples (percent: nvbench's noise, not the median's), how many samples it took, and its batch
    measurement's mean per launch (µs) and launches (None: nvbench took no batch)."""

    version: str
    cold_mean_us: float
    cold_median_us: float
    noise_pct: float
    samples: int
    batch_mean_us: float | None
    batch_launches: int | None


class StoppingSettings(TypedDict):
    """The stopping rule a run's ``ITERS auto`` measurements took their samples by (``timing.StoppingRule``)."""

    min_samples: int
    max_noise_pct: float
    min_time_s: float
    timeout_s: float


class StopOutcome(TypedDict):
    """How a measurement taken by the stopping rule ended: the rule met, or not (``reason``: met, timeout, or
    the sample cap); the median's noise (percent) and the samples' GPU time then, and the wall time taken."""

    met: bool
    reason: str
    noise_pct: float
    measured_s: float
    wall_s: float


class KernelLaunchRecord(TypedDict):
    """One kernel launch of a variant's call (``launch.shape.KernelCall.to_dict``): the kernel by the name the
    spec gives it (a template instance included), its grid and CTA, the CTAs of its thread-block cluster (0:
    none), its dynamic shared memory a CTA, and whether it is a programmatic dependent launch."""

    kernel: str
    grid: list[int]
    block: list[int]
    cluster: int
    shared_bytes: int
    programmatic: bool


class DeviceInfo(TypedDict, total=False):
    """The card a run measured on (``device.probe``; nothing on the CPU backend) and NVML's view of it."""

    id: int
    name: str
    compute_capability: str
    sms: int
    l2_bytes: int
    shared_optin_bytes: int
    memory_bytes: int
    pci_bus_id: str
    driver: str
    cuda_runtime: str
    cupy: str
    nvrtc: str  # the compiler of the kernels (kernels.nvrtc_version), since it was recorded
    nvml: dict[str, Any]  # clocks.ClockMonitor.device_info: what NVML reports, or why it is unavailable


class Environment(TypedDict, total=False):
    """Versions, the host, the run's switches (``device.environment``) and, since it was recorded, where qsa's
    code came from (core/source.py)."""

    python: str
    numpy: str
    qsa: str
    host: str
    switches: dict[str, str]
    source: Source


class ClockLockRecord(TypedDict):
    """What a run's clock lock did (``clocks.ClockLock.to_dict``)."""

    sm_mhz: int
    mem_mhz: int | None
    locked: bool
    reason: str | None


class _DispatchFields(TypedDict):
    kind: str
    scores: str
    topk: str
    reasons: dict[str, str]


class Dispatch(_DispatchFields, total=False):
    """The engine's choice for one kind of call (``session.Session.dispatch_summary``); ``scores_by_queries``: the
    scorer of a decode call by its queries (1-8), where the count decides (dispatch.Dispatch.scorer_for)."""

    scores_by_queries: list[str]


class Roles(TypedDict, total=False):
    """A stage's variants in their roles for this run (record.vocabulary ROLES; ``--baseline`` / ``--candidate``)."""

    reference: str
    baseline: str
    candidate: str


class AdapterEntryRecord(TypedDict):
    """An entry of a user's adapter table (engine/adapter.py): its variant is NAME.name."""

    name: str
    kind: str  # its stage: scores or topk
    exact: bool  # False: declared not bit for bit its model
    scratch: bool  # a top-k that takes scratch
    window_scorer: str | None  # a top-k: the scorer it follows in a window


class AdapterProvenance(TypedDict, total=False):
    """The user's adapter a checkout's library was built with (``--adapter``, or the checkout's own)."""

    path: str
    origin: str  # "--adapter" or "checkout"
    sha256: str  # the adapter file's
    sources: dict[str, str]  # every file of it qsa hashed (its own includes, qsa_adapter.h): sha256
    entries: list[AdapterEntryRecord]


class AdapterDeclared(TypedDict):
    """An engine checkout's adapter as ``qsa info`` lists it, built for ``arch`` to read its table."""

    checkout: str
    path: str
    origin: str
    sha256: str
    arch: str
    entries: list[AdapterEntryRecord]


class EngineProvenance(TypedDict, total=False):
    """An engine checkout whose variants ran (``engine.build.build_engine``): what its library was built from."""

    name: str
    path: str  # the checkout, or the repository a PATH@REV worktree was made from
    revision: str | None  # PATH@REV's revision
    commit: str | None  # the checked-out commit (``-dirty`` when the files differ from it)
    sources: dict[str, str]  # every file of the build, by its path in the checkout: sha256
    shim_sha256: str
    nvcc: str
    arch: str
    flags: list[str]
    functions: list[str]  # the host paths its header declares: functions, then parameters (function.parameter)
    switches: list[str]  # the STRATA_* switches its sources read
    cache_key: str
    library_sha256: str
    variants: list[str]  # the variants it gave this run
    adapter: AdapterProvenance  # built with a user's adapter (absent: none)


class ComparePair(TypedDict):
    """``qsa compare``: a variant of the base side and the same variant of the candidate side."""

    stage: str
    base: str
    candidate: str


class CompareSettings(TypedDict):
    """``qsa compare``'s two sides (their names prefix their variants) and the pairs it compares."""

    base: str
    candidate: str
    tolerance: float
    pairs: list[ComparePair]


class RunSettings(TypedDict, total=False):
    """A run's settings; each command records those it has."""

    l2: str
    warmup: int
    seed: int
    check_model: bool
    config: str
    iterations: int | Literal["auto"]  # a sweep's; "auto": as many samples as the stopping rule takes
    stopping: StoppingSettings  # ITERS auto: the rule
    timer: str  # --timer nvbench (a run without it was timed by qsa's timer)
    dispatch: Dispatch | dict[str, Dispatch]  # one call's, or a sweep's per kind of call
    clock_lock: ClockLockRecord
    kernels: str  # --kernels: the folder of kernel sources used instead of the installed ones
    sanitizer: str  # qsa sanitize: the compute-sanitizer run, its tools, and whether the quick subset
    tools: list[str]
    quick: bool
    roles: dict[str, Roles]  # stage -> its variants in their roles (the tables' "before" and "after")
    engines: list[EngineProvenance]  # --engine: each checkout whose variants ran
    sides: list[dict[str, Any]]  # qsa compare: each side as given (name, kind, path, revision)
    compare: CompareSettings
    inexact: dict[str, str]  # the run's variants declared not bitwise, each with its stage (judged by measures)
    limits: dict[str, dict[str, float]]  # the limits on their measures: a variant (or "inexact": all) -> measure
    rounds: int  # qsa compare --rounds: the run made this many times over, each variant's samples pooled


def case_key(stage: str, case: Case) -> str:
    """A stable name for a (stage, case): what the gate matches a run's rows with a baseline's on."""
    parts = [stage] + [f"{k}={case[k]}" for k in CASE_FIELDS[1:] if k in case]
    return " ".join(parts)


class CaseKeyed:
    """A result about one case of one stage; ``key`` is the case as the reports and the gate index it."""

    stage: str
    case: Case

    @property
    def key(self) -> str:
        return case_key(self.stage, self.case)


@dataclass
class Measurement(CaseKeyed):
    """The timed samples of one variant on one case, with the clocks around them."""

    stage: str  # "scores", "topk", "window"
    variant: str  # a kernel variant, "read-floor" or a library reference point
    case: Case
    samples_us: list[float]
    warmup: int = 0
    bytes_read: int | None = None  # bytes the variant must read once (for GB/s)
    clocks_before: Clocks | None = None
    clocks_after: Clocks | None = None
    throttled: bool = False  # a clocks-event reason for thermal, power or hardware slowdown was seen
    batch: BatchTiming | None = None  # back-to-back launches beside the isolated samples (GPU backend)
    stop: StopOutcome | None = None  # ITERS auto: how the stopping rule ended (None: ITERS was a count)
    rounds: RoundChecks | None = None  # the rounds' holds and SM clocks, judged (GPU backend)
    timer: str = "qsa"  # what timed it (record.vocabulary TIMERS)
    nvbench: NvbenchSummary | None = None  # --timer nvbench: nvbench's own summary (samples_us: its cold samples)
    # what qsa's launcher enqueued a call, in order (since it was recorded; None: not qsa's launcher, such as an
    # engine checkout's host functions, or a model or library on either backend)
    launches: list[KernelLaunchRecord] | None = None
    # qsa compare --rounds: each round's median, in the order run (``samples_us`` pools every round's samples)
    round_medians_us: list[float] | None = None

    @property
    def median_us(self) -> float:
        """NaN without samples (a run always has some; a hand-made record may have none)."""
        return statistics.median(self.samples_us) if self.samples_us else math.nan

    def percentile_us(self, p: float) -> float:
        s = sorted(self.samples_us)
        return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))] if s else math.nan

    @property
    def spread_us(self) -> tuple[float, float]:
        """(10th, 90th) percentile: the range the gate requires a regression to fall outside of."""
        return self.percentile_us(10), self.percentile_us(90)

    @property
    def gbps(self) -> float | None:
        if not self.bytes_read:
            return None
        return self.bytes_read / (self.median_us * 1e-6) / 1e9


@dataclass
class ParityCheck(CaseKeyed):
    """One bitwise comparison: ``subject`` against ``against`` on one case."""

    stage: str
    case: Case
    subject: str
    against: str
    equal: bool
    detail: str = ""  # the first difference, when there is one
    hashes: dict[str, str] = field(default_factory=dict)
    rows_equal: int | None = None  # queries whose whole output row is identical
    rows: int | None = None


class ScoreErrors(TypedDict):
    """An inexact scorer's scores against another output (model/agreement.py says each rule): the entries
    compared, those whose bits differ, those a NaN or infinity on one side leaves without a number (mismatched),
    and the largest absolute error, relative error and distance in ulps over the rest."""

    entries: int
    differing: int
    mismatched: int
    max_abs_error: float
    max_rel_error: float
    max_ulps: int


class SelectionAgreement(TypedDict):
    """A selection against another (model/agreement.py): per query the fraction of the other's ids it holds,
    their minimum and mean over the queries, and the queries whose selection is identical."""

    queries: int
    identical_queries: int
    min_id_fraction: float
    mean_id_fraction: float


class LimitVerdict(TypedDict):
    """A limit a run set on a measure (record/limits.py), judged on one agreement row."""

    measure: str
    value: float
    limit: float
    passed: bool
    detail: str  # why it fails when no value says it (entries mismatched); "" otherwise


@dataclass
class Agreement(CaseKeyed):
    """An inexact variant's output measured against another (where a bitwise check would compare them): its
    scores' errors (the scorer stage), the selection's agreement (a top-k's or a window's ids, or for a scorer
    the CPU oracle's top-k on its scores against the oracle's on the other's), and the run's limits on them
    (only on a row against the stage's reference or CPU model). Never a bitwise pass or failure."""

    stage: str
    case: Case
    subject: str
    against: str
    scores: ScoreErrors | None
    selection: SelectionAgreement | None
    limits: list[LimitVerdict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(v["passed"] for v in self.limits)


@dataclass
class ThresholdCheck(CaseKeyed):
    """A sweep's threshold on one case, e.g. new vs old speedup >= 2.5, or new / read floor <= 1.3."""

    stage: str
    case: Case
    name: Literal["min_speedup", "max_floor_ratio"]
    value: float
    limit: float
    passed: bool


@dataclass
class SanitizerRun(CaseKeyed):
    """One case of one variant under one compute-sanitizer tool (``qsa sanitize``)."""

    stage: str
    case: dict[str, Any]
    variant: str
    tool: str  # memcheck, racecheck, synccheck, initcheck
    errors: int  # errors or hazards reported (a failed child counts one)
    explained: int  # of them, those a known-hazards file explains
    first_report: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.errors == self.explained


@dataclass
class SelftestCheck:
    """One check of ``qsa selftest`` (or ``topk-parity --selftest``): what it checked, on how many cases."""

    check: str
    cases: int
    passed: bool | None  # None: skipped (``detail`` says why)
    seconds: float
    detail: str = ""  # the first failure, or why it was skipped

    @classmethod
    def judged(cls, check: str, cases: int, failures: list[str], seconds: float) -> SelftestCheck:
        """A row that passed when ``failures`` is empty, its first failure the detail."""
        return cls(check, cases, not failures, seconds, failures[0] if failures else "")


@dataclass
class Confirmation:
    """One round of ``qsa gate --confirm``: the cases holding a row judged SLOW, measured again in the same
    process after the sweep. The sweep's own measurements stay in ``measurements``; these are kept beside them."""

    round: int  # 1: the first measurement again; a later round measures the cases still SLOW after the earlier
    measurements: list[Measurement]


@dataclass
class RunRecord:
    command: str
    argv: list[str]
    backend: str  # "gpu" or "cpu"
    device: DeviceInfo = field(default_factory=dict)
    settings: RunSettings = field(default_factory=dict)
    measurements: list[Measurement] = field(default_factory=list)
    parity: list[ParityCheck] = field(default_factory=list)
    thresholds: list[ThresholdCheck] = field(default_factory=list)
    sanitizer: list[SanitizerRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    tool_version: str = __version__
    git_commit: str | None = field(default_factory=lambda: commit_label(running_source()))  # environment.source's
    kernel_source_hash: str = ""
    environment: Environment = field(default_factory=dict)
    incomplete: bool = False  # interrupted: only what was measured before it (a note says so)
    checks: list[SelftestCheck] = field(default_factory=list)  # a selftest's checks
    agreements: list[Agreement] = field(default_factory=list)  # inexact variants' measures (and their limits)
    confirmations: list[Confirmation] = field(default_factory=list)  # qsa gate --confirm's rounds

    @property
    def passed(self) -> bool:
        return (all(p.equal for p in self.parity) and all(t.passed for t in self.thresholds)
                and all(r.passed for r in self.sanitizer) and all(c.passed is not False for c in self.checks)
                and all(a.passed for a in self.agreements))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **_plain(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """A record from its JSON form, every field checked: an InputError naming the first one wrong."""
        data = {k: v for k, v in data.items() if k not in ("schema", "schema_version")}
        return _conform(data, cls, "")

    def write(self, path: str | os.PathLike[str]) -> None:
        write_json(path, self.to_dict())


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """A record's JSON form to ``path``, whole or not at all."""
    with atomic_write(path) as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")


class KernelResources(TypedDict):
    """A kernel as compiled for a device (``kernels.KernelInfo``): what ``qsa info`` lists."""

    name: str
    registers: int
    shared_bytes: int
    local_bytes: int
    max_threads: int


class CatalogEntry(TypedDict):
    """A variant of the run's catalog (catalog.Variant) as ``qsa info`` lists it."""

    stage: str
    name: str
    role: str
    source: str  # the file of kernels/ its kernels are in ("" for an engine checkout's)
    kernels: list[str]
    launch: str  # its launch shape's name
    min_cc: int  # the oldest card it runs on (major * 10 + minor; 0: any)
    model: str  # the CPU model its bits must equal (an inexact variant's: it is measured against)
    exact: bool  # False: declared not bitwise, judged by measures


class EngineDeclared(TypedDict):
    """An engine checkout as ``qsa info`` reads it, unbuilt: what its qsa_select.hpp declares, and the variants
    that gives on each card under the environment's switches."""

    name: str
    path: str
    revision: str | None
    functions: list[str]  # the host functions its header declares
    lacks: list[str]  # those it does not
    variants: dict[str, list[str]]  # "sm_XX" -> its variants that card would run
    nvcc: str | None  # the release line of the nvcc a build would use; None: none found
    switches: list[str]  # the STRATA_* switches its sources read: those its variants may set
    implies: dict[str, dict[str, list[str]]]  # "sm_XX" -> a variant there -> the switches it runs under ("K=V")


@dataclass
class InfoReport:
    """What ``qsa info`` found: the device and its clocks now (or why there is none), every kernel as compiled
    for it, the engine's choice for each kind of call there; the catalog, the engine's choice on each card,
    the engine checkouts' headers and the switches set, which need no device; notes (an engine checkout's
    built variants, the cluster's reach)."""

    device: DeviceInfo  # {} when there is no device
    clocks: Clocks | None
    kernels: list[KernelResources]
    dispatch: dict[str, Dispatch]  # on this device ({} without one)
    notes: list[str]
    no_device: str | None = None  # why there is no device (no CuPy, no CUDA device); None: one was found
    catalog: list[CatalogEntry] = field(default_factory=list)
    architectures: dict[str, dict[str, Dispatch]] = field(default_factory=dict)  # "sm_XX" -> kind -> choice
    engines: list[EngineDeclared] = field(default_factory=list)
    switches: dict[str, str] = field(default_factory=dict)  # qsa's and the engine's switches the environment sets
    adapters: list[AdapterDeclared] = field(default_factory=list)  # --adapter or a checkout's own: their entries

    def to_dict(self) -> dict[str, Any]:
        return {"schema": INFO_SCHEMA, "schema_version": 1, **_plain(self)}




# ---- the schema: a record's JSON form against the dataclasses' type hints ----------------------------

_SCALARS = {str: ("a string", "strings"), int: ("an integer", "integers"), float: ("a number", "numbers"),
            bool: ("true or false", "true or false"), type(None): ("null", "null")}


@functools.cache
def _field_names(record_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(record_type))


def _plain(value: Any) -> Any:
    """A record object's JSON form as ``dataclasses.asdict`` makes it (dataclasses as dicts of their fields, lists,
    tuples and dicts copied), but numbers and strings, which nothing changes in place, kept, not deep-copied: a
    record's thousands of samples cost a comprehension, not a deep copy each."""
    if type(value) in _SCALARS:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in _field_names(type(value))}
    if isinstance(value, (list, tuple)):
        items = [v if type(v) in _SCALARS else _plain(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)  # a named tuple by fields
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return copy.deepcopy(value)


@functools.cache
def _fields(hint: Any) -> tuple[dict[str, Any], frozenset[str]] | None:
    """(field -> type, the required fields) of a dataclass or TypedDict; None for any other type.

    Every field of a dataclass is required: a record written by this module has them all, and a
    default (the checkout's commit, the time now) would misdescribe a run read back.
    """
    if dataclasses.is_dataclass(hint):
        return get_type_hints(hint), frozenset(f.name for f in dataclasses.fields(hint))
    if is_typeddict(hint):
        return get_type_hints(hint), frozenset(hint.__required_keys__)
    return None


@functools.cache
def _shape(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """``hint``'s origin and arguments (typing's, asked once a type: a record's fields ask for them by the thousand)."""
    return get_origin(hint), get_args(hint)


@functools.cache
def _test_of(hint: Any) -> Callable[[Any], bool]:
    """Whether a parsed JSON value is of ``hint``, a type with no record object inside: a test made once a type, so
    that a list of thousands of samples costs a call a sample, not a walk through typing's helpers."""
    origin, args = _shape(hint)
    if hint is Any:
        return lambda value: True
    if origin is Literal:
        return lambda value: value in args
    if origin is list:
        item = _test_of(args[0])
        return lambda value: isinstance(value, list) and all(map(item, value))
    if origin is dict:
        item = _test_of(args[1])
        return lambda value: isinstance(value, dict) and all(isinstance(k, str) and item(v) for k, v in value.items())
    if hint in (int, float):
        numbers = (int, float) if hint is float else int
        return lambda value: isinstance(value, numbers) and not isinstance(value, bool)  # JSON's true is no number
    return lambda value: isinstance(value, hint)


def _expected(hint: Any) -> str:
    origin, args = _shape(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(dict.fromkeys(_expected(a) for a in args))
    if origin is Literal:
        return " or ".join(json.dumps(a) for a in args)
    if origin is list:
        return f"a list of {_SCALARS[args[0]][1] if args[0] in _SCALARS else 'objects'}"
    return _SCALARS[hint][0] if hint in _SCALARS else "an object"


class _NotOfType(InputError):
    """A value of another type than the schema's at ``where`` (not one wrong inside)."""

    def __init__(self, hint: Any, where: str) -> None:
        super().__init__(_at(where, f"expected {_expected(hint)}"))
        self.where = where


def _at(where: str, what: str) -> str:
    return f"{where}: {what}" if where else what


def _inside(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _conform(value: Any, hint: Any, where: str) -> Any:
    """``value`` (parsed JSON) as ``hint`` types it, dataclasses built; an InputError naming ``where``."""
    fields = _fields(hint)
    if fields is not None:
        types_, required = fields
        if not isinstance(value, dict):
            raise _NotOfType(hint, where)
        unknown = [k for k in value if k not in types_]
        if unknown:
            raise InputError(_at(where, f"unknown field {unknown[0]!r}"))
        missing = sorted(required - value.keys())
        if missing:
            raise InputError(_at(where, f"missing field {missing[0]!r}"))
        out = {k: _conform(v, types_[k], _inside(where, k)) for k, v in value.items()}
        return hint(**out) if dataclasses.is_dataclass(hint) else out
    origin, args = _shape(hint)
    if origin in (Union, types.UnionType):
        within = []  # an alternative the value is of, wrong inside: that says more than "expected"
        for alternative in args:
            if _fields(alternative) is None and _shape(alternative)[0] in (None, Literal):  # a scalar: no inside
                if _test_of(alternative)(value):
                    return value
                continue
            try:
                return _conform(value, alternative, where)
            except InputError as exc:
                if not (isinstance(exc, _NotOfType) and exc.where == where):
                    within.append(exc)
        raise within[0] if within else _NotOfType(hint, where)
    if origin is list and isinstance(value, list) and _fields(args[0]) is not None:
        return [_conform(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict and isinstance(value, dict) and _fields(args[1]) is not None:
        return {k: _conform(v, args[1], _inside(where, k)) for k, v in value.items()}
    if not _test_of(hint)(value):
        raise _NotOfType(hint, where)
    return value
