"""The variant registry: every kernel variant qsa runs, declared once, read by everything else.

A variant is a (stage, name): its role in a comparison, the CUDA source and kernels its code comes from,
the CPU model whose bits it must give, the oldest card it runs on, and (a top-k variant) the scorer it
follows in a decode window. The launchers compile and look up its kernels from here; the stages take
their "before" and "after" from the roles (a run records them, and the report's columns and
"before -> after" come from the record); config validation, the selftest, the dispatch policy, the
window's pairs and ``qsa sanitize`` list the names from here. Adding a variant of qsa's own is one
entry below plus its kernel (and a CPU model when its arithmetic order is new): docs/adding-a-variant.md.

Variants whose code is not qsa's installed kernels are registered while a run uses them: an engine
checkout's (``engine.attach``: ``NAME.scores`` ... ``NAME.topk-cluster``, from engine/kinds.py) and a
copy of qsa's kernels in another folder (``side``: ``NAME.halve`` ... , ``qsa compare``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .core.errors import VariantError
from .core.geometry import (
    CLUSTER_MIN_CC,
    HALVE_MAX_QUERIES,
    RADIX_PASSES,
    TOPK_CLUSTER_THREADS,
    TOPK_REF_THREADS,
    TOPK_SPLIT_THREADS,
    TOPK_WIDE_THREADS,
)
from .engine.kinds import ENGINE_KINDS, ENGINE_SCORER, EngineEntry
from .model.scores import ORDERS
from .model.topk import ALGORITHMS
from .record.vocabulary import ROLES

STAGES = ("scores", "topk")
SCORER_MODELS = ORDERS  # model/scores.py: the two orders of the scorer's additions
TOPK_MODELS = tuple(a for a in ALGORITHMS if a != "oracle")  # model/topk.py: a radix select step by step
# The launchers' shapes (launch/scores.py, launch/topk.py): a warp per (query, block) on a (blocks / 8, nq)
# grid; a fixed grid striding over the blocks; the halving scorer's calls of up to 4 queries; one CTA a
# query; the split's six launches; the cluster's 8 CTAs a query.
SCORER_LAUNCHES = ("per-block", "striding", "halving")
TOPK_LAUNCHES = ("one-cta", "split", "cluster")
ENGINE_LAUNCH = "engine"  # a host function of an engine checkout's library (engine/launch.py)


@dataclass(frozen=True)
class Variant:
    stage: str
    name: str
    role: str
    source: str  # the file of kernels/ its kernels are in
    kernels: tuple[str, ...]  # their names as the launcher looks them up (template instances included)
    model: str  # the CPU model it must equal: a scorer order, or a top-k model (the oracle for every top-k)
    launch: str  # how its launcher launches it: one of SCORER_LAUNCHES or TOPK_LAUNCHES
    threads: int = 0  # threads a CTA where the launch shape takes them from the variant (its __launch_bounds__)
    min_cc: int = 0  # the oldest card it runs on (major * 10 + minor)
    window_scorer: str | None = None  # a top-k variant: the scorer it follows in window-bench's graph
    folder: Path | None = None  # a folder of qsa's kernel sources other than the one in use (qsa compare)
    engine: EngineEntry | None = None  # an engine checkout's variant (launch "engine")

    @property
    def qsa_own(self) -> bool:
        """One of qsa's own variants, compiled from the kernels in use."""
        return self.folder is None and self.engine is None

    def runs_on(self, compute_capability: int) -> bool:
        return compute_capability >= self.min_cc


_HALVE_KERNELS = tuple(f"block_scores_halve_kernel<{n}>" for n in range(1, HALVE_MAX_QUERIES + 1))  # by queries
_SPLIT_KERNELS = (*(f"block_topk_split_pass_kernel<{p}>" for p in range(RADIX_PASSES)),  # launch order: the passes,
                  "block_topk_split_count_kernel", "block_topk_split_emit_kernel")  # the count, the emit

_REGISTRY: dict[tuple[str, str], Variant] = {}


def register(variant: Variant) -> Variant:
    """Add a variant (a stage's names are unique); a ValueError when it contradicts the registry."""
    if variant.stage not in STAGES or variant.role not in ROLES:
        raise ValueError(f"variant {variant.name!r}: stage must be one of {STAGES} and role one of {ROLES}")
    models, launches = (SCORER_MODELS, SCORER_LAUNCHES) if variant.stage == "scores" else (TOPK_MODELS, TOPK_LAUNCHES)
    if variant.model not in models:
        raise ValueError(f"variant {variant.name!r}: model must be one of {', '.join(models)} (got {variant.model!r})")
    if (variant.launch == ENGINE_LAUNCH) != (variant.engine is not None):
        raise ValueError(f"variant {variant.name!r}: an engine checkout's variants, and only they, launch {ENGINE_LAUNCH!r}")
    if variant.launch not in launches and variant.engine is None:
        raise ValueError(f"variant {variant.name!r}: launch must be one of {', '.join(launches)} (got {variant.launch!r})")
    if (variant.stage, variant.name) in _REGISTRY:
        raise ValueError(f"a {variant.stage} variant {variant.name!r} is already registered")
    if variant.role != "variant" and any(v.role == variant.role for v in stage_variants(variant.stage)):
        raise ValueError(f"the {variant.stage} stage already has its {variant.role}")
    _REGISTRY[(variant.stage, variant.name)] = variant
    return variant


def unregister(stage: str, name: str) -> None:
    _REGISTRY.pop((stage, name), None)


def stage_variants(stage: str) -> tuple[Variant, ...]:
    return tuple(v for v in _REGISTRY.values() if v.stage == stage)


def names(stage: str) -> tuple[str, ...]:
    """Every variant of ``stage``, in the order they were declared."""
    return tuple(v.name for v in stage_variants(stage))


def get(stage: str, name: str) -> Variant:
    try:
        return _REGISTRY[(stage, name)]
    except KeyError:
        raise VariantError(f"unknown {stage} variant {name!r} (expected one of {', '.join(names(stage))})") from None


def with_role(stage: str, role: str) -> str:
    """The name of ``stage``'s variant in ``role`` (reference, baseline or candidate)."""
    return next(v.name for v in stage_variants(stage) if v.role == role)


def roles(stage: str) -> dict[str, str]:
    """``stage``'s variants by role (reference, baseline, candidate): what a run records as its roles."""
    return {v.role: v.name for v in stage_variants(stage) if v.role != "variant"}


def with_launch(stage: str, launch: str) -> str:
    """The name of qsa's own ``stage`` variant of launch shape ``launch``."""
    return next(v.name for v in stage_variants(stage) if v.qsa_own and v.launch == launch)


def runs_on(stage: str, compute_capability: int) -> tuple[str, ...]:
    """The variants of ``stage`` a card of this compute capability runs."""
    return tuple(v.name for v in stage_variants(stage) if v.runs_on(compute_capability))


def kernels_of(source: str, folder: Path | None = None) -> tuple[str, ...]:
    """Every kernel of every variant in ``source`` of ``folder`` (each once: two variants may share one):
    what one compile of that file provides."""
    return tuple(dict.fromkeys(k for v in _REGISTRY.values() if v.engine is None and v.source == source
                               and v.folder == folder for k in v.kernels))


def compiled(variant: Variant) -> Any:
    """A ``kernels.Module`` of the variant's source compiled for the current device: one compile a file, with
    every kernel of every variant in it."""
    from .kernels import load

    if variant.engine is not None:
        raise ValueError(f"variant {variant.name!r} is an engine checkout's: it has no qsa kernels")
    return load(variant.source, kernels_of(variant.source, variant.folder), folder=variant.folder)


@contextlib.contextmanager
def registered(variants: list[Variant]) -> Iterator[tuple[Variant, ...]]:
    """``variants`` registered for the block's length (a run's engine checkouts and compare sides)."""
    done: list[Variant] = []
    try:
        for v in variants:
            done.append(register(v))
        yield tuple(done)
    finally:
        for v in done:
            unregister(v.stage, v.name)


def side(name: str, folder: Path) -> list[Variant]:
    """qsa's own variants compiled from another folder of its kernel sources, named ``name.VARIANT`` (role
    "variant"; a top-k follows its side's scorer in the window)."""
    return [dataclasses.replace(v, name=f"{name}.{v.name}", role="variant", folder=folder,
                                window_scorer=f"{name}.{v.window_scorer}" if v.window_scorer else None)
            for v in _REGISTRY.values() if v.qsa_own]


def engine_variant(checkout: str, kind: str, min_cc: int = 0, switches: tuple[tuple[str, str], ...] = ()) -> Variant:
    """An engine checkout's variant of ``kind`` (ENGINE_KINDS), named ``checkout.kind`` (``[K=V,...]`` after
    it when it runs under switches)."""
    k = ENGINE_KINDS[kind]
    suffix = f"[{','.join(f'{key}={value}' for key, value in switches)}]" if switches else ""
    scorer = f"{checkout}.{ENGINE_SCORER}{suffix}" if k.in_window else None
    return Variant(k.stage, f"{checkout}.{kind}{suffix}", "variant", "", k.functions, k.model, ENGINE_LAUNCH,
                   min_cc=min_cc, window_scorer=scorer, engine=EngineEntry(checkout, kind, switches))


def window_pairs() -> tuple[tuple[str, str], ...]:
    """(scorer, top-k) of each top-k variant that follows a scorer in a decode window."""
    return tuple((v.window_scorer, v.name) for v in stage_variants("topk") if v.window_scorer)


for _v in (
    Variant("scores", "reference", "reference", "scores.cu", ("block_scores_kernel",), "butterfly", "per-block"),
    Variant("scores", "multi", "baseline", "scores.cu", ("block_scores_multi_kernel",), "butterfly", "striding"),
    Variant("scores", "halve", "candidate", "scores.cu", _HALVE_KERNELS, "halve", "halving"),
    Variant("topk", "reference", "reference", "topk.cu", ("block_topk_kernel",), "reference", "one-cta",
            TOPK_REF_THREADS),
    Variant("topk", "wide", "baseline", "topk.cu", ("block_topk_wide_kernel",), "wide", "one-cta", TOPK_WIDE_THREADS,
            window_scorer="multi"),
    Variant("topk", "split", "candidate", "topk.cu", _SPLIT_KERNELS, "split", "split", TOPK_SPLIT_THREADS,
            window_scorer="halve"),
    Variant("topk", "cluster", "variant", "topk_cluster.cu", ("block_topk_cluster_kernel",), "cluster", "cluster",
            TOPK_CLUSTER_THREADS, min_cc=CLUSTER_MIN_CC, window_scorer="halve"),
):
    register(_v)
