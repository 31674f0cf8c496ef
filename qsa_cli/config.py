"""YAML sweeps: which stages, contexts, query counts and variants a run measures, and its thresholds.

A sweep file is a mapping. Run settings: ``iterations`` (0 = parity only; ``auto``: the stopping rule's
count), ``warmup``, ``l2`` (clean / dirty / warm), ``seed``, ``description``, ``engine`` (NAME -> an
engine checkout, ``PATH[@REV]``, a relative PATH from the file's folder: its variants ``NAME.scores`` ... run beside qsa's), ``variants``
(stage -> the variants to run, an engine checkout's among them; default: all of the stage's), ``thresholds`` (stage -> ``min_speedup``, new vs old, and for the scorer
``max_floor_ratio``, new vs the read floor) and ``limits`` (a variant declared not bitwise, or ``inexact`` for
every one -> a measure such as ``max_ulps`` -> its limit: record/limits.py). Case keys: ``stages``, ``contexts``, ``queries``,
``capacity``, ``kind`` (decode / prompt), ``score_sets`` (top-k only) and ``keys`` (the scorer's
synthetic inputs, scorer only: synthetic / adversarial). Written at the top level they describe one
block of cases; with a ``matrix`` list, each entry is a block whose case keys override the top
level's. A block's cases are every stage x (context, capacity) x queries (x score set for top-k, x
keys for the scorer).

Sizes (contexts, capacity) are cells: a plain int, or an int with a suffix K = 1024 or M = 1048576
(``32K`` = 32768, ``512K`` = 524288, ``1M`` = 1048576). The seed's labels are looser (its "131K" is
131072, its "420K" about 420000), so the shipped files write those as plain numbers. ``capacity``
is one size for every context, or a list paired with ``contexts`` one for one.

Every mistake is a ConfigError naming the file and line: ``configs/x.yaml:7: unknown key 'contxts'``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .catalog import STAGES, Catalog, qsa_catalog
from .core.errors import ConfigError, GeometryError, LimitError
from .core.geometry import SIZE_EXAMPLES, Call, check_call, check_capacity, check_queries, parse_size
from .dispatch import CALL_KINDS
from .engine.kinds import ENGINE_KINDS, engine_kinds
from .inputs import SCORE_SETS
from .record.limits import LIMITS, check_scopes, limit_value
from .record.vocabulary import DEFAULT_KEYS, DEFAULT_L2, L2_STATES, RENAMED_L2, SCORER_KEYS
from .timing import AUTO, DEFAULT_WARMUP, MAX_ITERATIONS, MAX_WARMUP, Iters

MERGE_TAG = "tag:yaml.org,2002:merge"
THRESHOLD_KEYS = {"scores": ("min_speedup", "max_floor_ratio"), "topk": ("min_speedup",)}

CASE_KEYS = ("stages", "contexts", "queries", "capacity", "kind", "score_sets", "keys")
SETTING_KEYS = ("description", "iterations", "warmup", "l2", "seed", "engine", "variants", "thresholds", "limits")
TOP_KEYS = (*SETTING_KEYS, *CASE_KEYS, "matrix")
# 50 iterations: the seed's
DEFAULTS: dict[str, Any] = {"iterations": 50, "warmup": DEFAULT_WARMUP, "l2": DEFAULT_L2, "seed": 0, "kind": "decode",
                            "score_sets": ("continuous",), "keys": (DEFAULT_KEYS,)}



@dataclass(frozen=True)
class SweepCase:
    """One call of one stage; l2, iterations and seed are the sweep's."""

    stage: str
    ctx: int
    nq: int
    capacity: int
    kind: str = "decode"
    score_set: str | None = None  # top-k only
    keys: str = DEFAULT_KEYS  # the scorer's inputs (a top-k case keeps the default)

    @property
    def call(self) -> Call:
        return Call(self.ctx, self.nq, self.capacity, prompt=self.kind == "prompt")


@dataclass(frozen=True)
class SweepBlock:
    stages: tuple[str, ...]
    contexts: tuple[int, ...]
    capacities: tuple[int, ...]  # one per context
    queries: tuple[int, ...]
    kind: str
    score_sets: tuple[str, ...]
    keys: tuple[str, ...]

    def cases(self) -> list[SweepCase]:
        out = []
        for stage in self.stages:
            # (score set, keys): the top-k's score sets, or the scorer's keys
            inputs = [(s, DEFAULT_KEYS) for s in self.score_sets] if stage == "topk" else [(None, k) for k in self.keys]
            for (ctx, cap), nq, (score_set, keys) in itertools.product(zip(self.contexts, self.capacities),
                                                                       self.queries, inputs):
                out.append(SweepCase(stage, ctx, nq, cap, self.kind, score_set, keys))
        return out


@dataclass(frozen=True)
class Thresholds:
    min_speedup: float | None = None  # old median / new median must be at least this
    max_floor_ratio: float | None = None  # new median / read-floor median must be at most this


@dataclass(frozen=True)
class SweepConfig:
    source: str
    description: str
    iterations: Iters
    warmup: int
    l2: str
    seed: int
    blocks: tuple[SweepBlock, ...]
    variants: Mapping[str, tuple[str, ...]]  # only the stages the file names
    thresholds: Mapping[str, Thresholds]
    engines: tuple[str, ...] = ()  # NAME=PATH[@REV] of each engine checkout the file names
    limits: tuple[tuple[str, str, float], ...] = ()  # (scope, measure, value) on inexact variants' measures
    given: frozenset[str] = frozenset()  # the settings (SETTING_KEYS) the file sets, not left at DEFAULTS

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s for b in self.blocks for s in b.stages))

    def cases(self, stage: str | None = None) -> list[SweepCase]:
        """Every case in file order, each once; only ``stage``'s when given."""
        every = dict.fromkeys(c for b in self.blocks for c in b.cases())
        return [c for c in every if stage is None or c.stage == stage]

    def variants_for(self, stage: str, catalog: Catalog) -> tuple[str, ...]:
        """The variants of ``stage`` the file names, else every one of the run's ``catalog``."""
        return self.variants.get(stage, catalog.names(stage))


# ---- reading nodes with their lines -----------------------------------------------------------------


class _Reader:
    def __init__(self, source: str, loader: Any) -> None:
        self.source = source
        self.loader = loader

    def error(self, node: Any, message: str) -> ConfigError:
        return ConfigError(f"{self.source}:{node.start_mark.line + 1}: {message}")

    def mapping(self, node: Any, allowed: tuple[str, ...] | None, what: str) -> dict[str, Any]:
        """A mapping's value nodes by key; ``allowed`` None: any string key. YAML merge keys (``<<: *block``)
        are taken as YAML 1.1 defines them: the merged mapping's keys first, each overridden by one the
        mapping writes itself; a key the mapping itself writes twice is an error."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a mapping of keys to values")
        own = sum(1 for key_node, _ in node.value if key_node.tag != MERGE_TAG)
        try:
            self.loader.flatten_mapping(node)  # the merged entries, placed before the mapping's own
        except yaml.MarkedYAMLError as exc:  # a merge key whose value is no mapping: the mark is that value's
            raise ConfigError(f"{self.source}:{exc.problem_mark.line + 1}: a merge key (<<) {exc.problem}") from None
        merged = len(node.value) - own
        out: dict[str, Any] = {}
        for i, (key_node, value_node) in enumerate(node.value):
            key = self.value(key_node)
            if not isinstance(key, str):
                raise self.error(key_node, f"{what}: a key must be a name (got {key!r})")
            if allowed is not None and key not in allowed:
                raise self.error(key_node, f"unknown key {key!r} (expected one of {', '.join(allowed)})")
            if key in out and i >= merged and not out[key][1]:
                raise self.error(key_node, f"key {key!r} given twice")
            out[key] = (value_node, i < merged)
        return {key: value_node for key, (value_node, _) in out.items()}

    def value(self, node: Any) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, "expected a single value, not a list or mapping")
        try:
            return self.loader.construct_object(node)
        except yaml.YAMLError as exc:  # a tag the safe loader has no constructor for (!!python/..., !mine)
            raise self.error(node, f"not a plain value ({getattr(exc, 'problem', None) or exc})") from None

    def items(self, node: Any, what: str) -> list[Any]:
        """A list's item nodes; a single value is a list of one."""
        if isinstance(node, yaml.SequenceNode):
            if not node.value:
                raise self.error(node, f"{what} is an empty list")
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a value or a list of values, not a mapping")
        return [node]

    def integer(self, node: Any, what: str, minimum: int, maximum: int | None = None) -> int:
        v = self.value(node)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(node, f"{what} must be an integer (got {v!r})")
        if v < minimum:
            raise self.error(node, f"{what} must be >= {minimum} (got {v})")
        if maximum is not None and v > maximum:
            raise self.error(node, f"{what} must be <= {maximum} (got {v})")
        return v

    def number(self, node: Any, what: str) -> float:
        v = self.value(node)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise self.error(node, f"{what} must be a number > 0 (got {v!r})")
        return float(v)

    def size(self, node: Any, what: str) -> int:
        """The value as written (the command line's rule: parse_size), not as YAML reads it (0x4E20, 20_000)."""
        self.value(node)  # a list or a mapping is refused as everywhere
        v = parse_size(node.value)
        if v is None or v <= 0:
            raise self.error(node, f"{what} must be a number of cells such as {SIZE_EXAMPLES} (got {node.value!r})")
        return v

    def choice(self, node: Any, what: str, choices: tuple[str, ...]) -> str:
        v = self.value(node)
        if v not in choices:
            raise self.error(node, f"{what} must be one of {', '.join(choices)} (got {v!r})")
        return v

    def choices(self, node: Any, what: str, choices: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.choice(n, what, choices) for n in self.items(node, what)))


# ---- loading ------------------------------------------------------------------------------------------


def yaml_problem(source: str, exc: yaml.YAMLError) -> str:
    """PyYAML's message of several lines (the problem, its context, each with a mark and an excerpt) as one:
    ``FILE:LINE: not valid YAML (the problem)``."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = f":{mark.line + 1}" if mark else ""
    what = (getattr(exc, "problem", None) or getattr(exc, "context", None) or getattr(exc, "reason", None)
            or " ".join(str(exc).split()))
    return f"{source}{line}: not valid YAML ({what})"


def load_config(path: str | Path) -> SweepConfig:
    """Read and check a sweep file (a path, or the name of a shipped config such as ``sm75-decode``)."""
    path = config_path(path)
    source = str(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: cannot read ({exc})") from None
    try:
        loader = yaml.SafeLoader(text)  # which refuses a control character at once
        root = loader.get_single_node()
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_problem(source, exc)) from None
    try:
        if root is None:
            raise ConfigError(f"{source}: empty file (a sweep needs at least stages, contexts, queries, capacity)")
        return _parse(_Reader(source, loader), root)
    finally:
        loader.dispose()


def _parse(r: _Reader, root: Any) -> SweepConfig:
    top = r.mapping(root, TOP_KEYS, "a sweep file")
    defaults = {k: v for k, v in top.items() if k in CASE_KEYS}
    if "matrix" in top:
        block_nodes = r.items(top["matrix"], "matrix")
        blocks = tuple(_block(r, {**defaults, **r.mapping(n, CASE_KEYS, "a matrix entry")}, n) for n in block_nodes)
    else:
        blocks = (_block(r, defaults, root),)

    def setting(key: str, read: Any) -> Any:
        return read(top[key]) if key in top else DEFAULTS[key]

    stages = {s for b in blocks for s in b.stages}
    engines = _engines(r, top["engine"]) if "engine" in top else {}

    def variant_names(stage: str, node: Any) -> tuple[str, ...]:
        # qsa's own and the file's checkouts' (the file is read before a run's catalog is built)
        names = (*qsa_catalog().names(stage), *(f"{e}.{kind}" for e in engines for kind in engine_kinds(stage)))
        return r.choices(node, f"a {stage} variant", names)

    variants = _per_stage(r, top.get("variants"), "variants", STAGES, stages, variant_names)
    thresholds = _per_stage(r, top.get("thresholds"), "thresholds", tuple(THRESHOLD_KEYS), stages,
                            lambda stage, n: _thresholds(r, stage, n))
    limits = _limits(r, top["limits"], engines) if "limits" in top else ()
    return SweepConfig(
        source=r.source,
        description=str(r.value(top["description"])) if "description" in top else "",
        iterations=setting("iterations", lambda n: _iterations(r, n)),
        warmup=setting("warmup", lambda n: r.integer(n, "warmup", 0, MAX_WARMUP)),
        l2=setting("l2", lambda n: _l2(r, n)),
        seed=setting("seed", lambda n: r.integer(n, "seed", 0)),
        blocks=blocks,
        variants=variants,
        thresholds=thresholds,
        engines=tuple(f"{name}={spec}" for name, spec in engines.items()),
        limits=limits,
        given=frozenset(key for key in SETTING_KEYS if key in top),
    )


def _iterations(r: _Reader, node: Any) -> Iters:
    """``iterations``: a count, or ``auto`` (the stopping rule decides, docs/timing.md)."""
    v = r.value(node)
    if v == AUTO:
        return AUTO
    if isinstance(v, bool) or not isinstance(v, int):
        raise r.error(node, f"iterations must be an integer or {AUTO} (got {v!r})")
    return r.integer(node, "iterations", 0, MAX_ITERATIONS)


def _l2(r: _Reader, node: Any) -> str:
    """``l2``: a state's name; the name it had before (``cold``) refused with its new one."""
    v = r.value(node)
    if v in RENAMED_L2:
        raise r.error(node, f"l2 {v!r} is now {RENAMED_L2[v]!r} (the read flush; 'dirty' flushes by writing)")
    return r.choice(node, "l2", L2_STATES)


_ENGINE_NAME = re.compile(r"[A-Za-z0-9_-]+")


def _engines(r: _Reader, node: Any) -> dict[str, str]:
    """``engine:`` NAME -> PATH[@REV]; a relative PATH is the file's folder's (the file travels with its checkouts)."""
    out = {}
    for name, value in r.mapping(node, None, "engine").items():
        if not _ENGINE_NAME.fullmatch(name):
            raise r.error(value, f"engine name {name!r}: letters, digits, '_' and '-' only (it prefixes "
                                 "its variants' names, NAME.scores)")
        spec = r.value(value)
        if not isinstance(spec, str) or not spec.strip():
            raise r.error(value, f"engine {name!r}: expected a checkout's path, PATH or PATH@REV (got {spec!r})")
        path = Path(spec)
        if not path.is_absolute() and r.source not in ("", "<string>"):
            path = Path(r.source).resolve().parent / path
        out[name] = str(path)
    return out


def _block(r: _Reader, keys: dict[str, Any], where: Any) -> SweepBlock:
    missing = [k for k in ("stages", "contexts", "queries", "capacity") if k not in keys]
    if missing:
        raise r.error(where, f"missing key {missing[0]!r} (a block of cases needs stages, contexts, queries, capacity)")
    stages = r.choices(keys["stages"], "stage", STAGES)
    kind = r.choice(keys["kind"], "kind", CALL_KINDS) if "kind" in keys else DEFAULTS["kind"]
    if kind == "prompt" and stages != ("topk",):
        raise r.error(keys["kind"], f"a prompt call is a top-k case only (stages here: {', '.join(stages)})")
    score_sets = r.choices(keys["score_sets"], "score set", SCORE_SETS) if "score_sets" in keys else DEFAULTS["score_sets"]
    scorer_keys = r.choices(keys["keys"], "keys", SCORER_KEYS) if "keys" in keys else DEFAULTS["keys"]

    context_nodes = r.items(keys["contexts"], "contexts")
    contexts = tuple(r.size(n, "a context") for n in context_nodes)
    capacity_nodes = r.items(keys["capacity"], "capacity")
    if len(capacity_nodes) == 1:
        capacity_nodes *= len(contexts)
    elif len(capacity_nodes) != len(contexts):
        raise r.error(keys["capacity"], f"capacity lists {len(capacity_nodes)} values for {len(contexts)} contexts "
                                         "(give one capacity, or one per context)")
    capacities = tuple(r.size(n, "capacity") for n in capacity_nodes)
    for node, cap in zip(capacity_nodes, capacities):
        try:
            check_capacity(cap)
        except GeometryError as exc:
            raise r.error(node, str(exc)) from None
    query_nodes = r.items(keys["queries"], "queries")
    queries = tuple(r.integer(n, "queries", 1) for n in query_nodes)

    for node, nq in zip(query_nodes, queries):
        try:
            check_queries(nq, prompt=kind == "prompt")
        except GeometryError as exc:
            raise r.error(node, str(exc)) from None
    for node, ctx, cap in zip(context_nodes, contexts, capacities):
        for nq in queries:
            try:
                check_call(ctx, nq, cap)
            except GeometryError as exc:
                raise r.error(node, f"context {ctx}, capacity {cap}, queries {nq}: {exc}") from None
    return SweepBlock(stages, contexts, capacities, queries, kind, score_sets, scorer_keys)


def _per_stage(r: _Reader, node: Any, what: str, allowed: tuple[str, ...], stages: set[str],
               read: Callable[[str, Any], Any]) -> dict[str, Any]:
    """A mapping of stage -> setting, for stages the sweep runs."""
    if node is None:
        return {}
    out = {}
    for stage, value in r.mapping(node, allowed, what).items():
        if stage not in stages:
            raise r.error(value, f"{what} for stage {stage!r}, which no case runs")
        out[stage] = read(stage, value)
    return out


def _thresholds(r: _Reader, stage: str, node: Any) -> Thresholds:
    limits = r.mapping(node, THRESHOLD_KEYS[stage], f"the {stage} thresholds")
    return Thresholds(**{k: r.number(v, k) for k, v in limits.items()})


def _limits(r: _Reader, node: Any, engines: Mapping[str, str]) -> tuple[tuple[str, str, float], ...]:
    """``limits:`` scope (a variant, or ``inexact``) -> measure -> value. A variant the file can know of (qsa's
    own, its checkouts' kinds) is checked here, with its line; any other (a --engine checkout's) once the run's
    catalog is built."""
    known = {name: (stage, True) for stage in STAGES for name in qsa_catalog().names(stage)}
    known |= {f"{e}.{kind}": (k.stage, k.exact) for e in engines for kind, k in ENGINE_KINDS.items()}
    inexact = {name: stage for name, (stage, exact) in known.items() if not exact}
    out = []
    for scope, scope_node in r.mapping(node, None, "limits").items():
        named = {}
        for measure, value_node in r.mapping(scope_node, tuple(LIMITS), f"the limits of {scope!r}").items():
            value = r.value(value_node)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise r.error(value_node, f"limit {measure} must be a number (got {value!r})")
            try:
                named[measure] = limit_value(measure, float(value))
            except LimitError as bad:
                raise r.error(value_node, str(bad)) from None
        if scope in known:
            try:
                check_scopes({scope: named}, inexact, known)
            except LimitError as bad:
                raise r.error(scope_node, str(bad)) from None
        out += [(scope, measure, value) for measure, value in named.items()]
    return tuple(out)


# ---- shipped configs -------------------------------------------------------------------------------------


def shipped_dir() -> Path:
    """The copy of ``configs/`` an installed wheel carries (``qsa_cli/config_files``), else the checkout's."""
    here = Path(__file__).resolve().parent
    installed = here / "config_files"
    return installed if installed.is_dir() else here.parent / "configs"


def shipped_configs() -> list[str]:
    return sorted(p.stem for p in shipped_dir().glob("*.yaml"))


def config_path(name: str | Path) -> Path:
    """A file path as given, or a shipped config by name (``sm75-decode``, ``ci``, ``selftest``)."""
    path = Path(name)
    if path.is_file():
        return path
    shipped = shipped_dir() / f"{path.stem}.yaml"
    if path.parent == Path(".") and path.suffix in ("", ".yaml") and shipped.is_file():
        return shipped
    raise ConfigError(f"{name}: no such config file (shipped: {', '.join(shipped_configs())})")
