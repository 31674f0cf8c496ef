"""The catalog of a run's variants: every kernel variant it runs, immutable, built once and passed down.

A variant is a (stage, name): its role in a comparison, the CUDA source and kernels its code comes from,
the CPU model whose bits it must give, its launch shape (launch/shape.py: the grid it is launched on, the
oldest card it runs on, the calls it refuses) and (a top-k variant) the scorer it follows in a decode
window. qsa's own variants are declared once, in ``QSA_VARIANTS`` below: adding one is an entry there plus
its kernel, and a CPU model when its arithmetic order is new (docs/adding-a-variant.md).

A run's ``Catalog`` is built once, when its session opens (session.py): qsa's own variants compiled from
the kernels folder in use (``--kernels``, else the installed one), then a new catalog from those and the
parts the run adds, never a change to one: an engine checkout's variants (engine/attach.py,
``NAME.scores`` ... ``NAME.topk-cluster``) with its loaded library, a ``qsa compare`` side's copy of qsa's
own from another folder (``side``: ``NAME.halve`` ...), and engine variants under switches
(``NAME.KIND[K=V]``). The stages, launchers, the dispatch policy, config validation, the selftest, the
window's pairs, ``qsa sanitize`` and ``qsa info`` read it; a run records its roles for the reports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .core.errors import VariantError
from .core.geometry import (
    HALVE_MAX_QUERIES,
    MAX_QUERIES,
    PAIRED_SPLITS,
    RADIX_PASSES,
    SPLIT_CHUNK_SIZES,
    TOPK_CLUSTER_THREADS,
    TOPK_REF_THREADS,
    TOPK_SPLIT_THREADS,
    TOPK_WIDE_THREADS,
)
from .kernels import BENCH, HEADER, Module, check_kernel_dir, defined_kernels, kernel_dir, load
from .launch.scores import HALVING, ONE_PASS_SOURCE, PAIRED, PER_BLOCK, QUARTERS, STRIDING
from .launch.scores import SOURCE as SCORES_SOURCE
from .launch.shape import LaunchShape
from .launch.topk import ONE_CTA, SPLIT
from .launch.topk import SOURCE as TOPK_SOURCE
from .launch.topk_cluster import CLUSTER
from .launch.topk_cluster import SOURCE as CLUSTER_SOURCE
from .model.scores import ORDERS
from .model.topk import ALGORITHMS
from .record.vocabulary import KERNEL_STAGES, ROLES

if TYPE_CHECKING:
    from .engine.kinds import EngineEntry

STAGES = KERNEL_STAGES  # the stages whose variants are kernels ("scores", "topk")
MODELS = {"scores": ORDERS,  # model/scores.py: the two orders of the scorer's additions
          "topk": tuple(a for a in ALGORITHMS if a != "oracle")}  # model/topk.py: a radix select step by step


@dataclass(frozen=True)
class Variant:
    stage: str
    name: str
    role: str
    source: str  # the file of kernels/ its kernels are in ("" for an engine checkout's)
    kernels: tuple[str, ...]  # their names as its shape looks them up (template instances included)
    model: str  # the CPU model it must equal: a scorer order, or a top-k model (the oracle for every top-k)
    launch: LaunchShape  # how it is launched, on which cards, and which calls it refuses
    threads: int = 0  # threads a CTA where the launch shape takes them from the variant (its __launch_bounds__)
    window_scorer: str | None = None  # a top-k variant: the scorer it follows in window-bench's graph
    folder: Path | None = None  # a folder of qsa's kernel sources other than the run's (a compare side's)
    engine: EngineEntry | None = None  # an engine checkout's variant (an engine launch shape)
    exact: bool = True  # False: declared not bitwise (a TF32 scorer, an adapter's approximation), judged by measures

    @property
    def qsa_own(self) -> bool:
        """One of qsa's own variants, compiled from the run's kernels."""
        return self.folder is None and self.engine is None

    @property
    def min_cc(self) -> int:
        """The oldest card it runs on (major * 10 + minor): its launch shape's."""
        return self.launch.min_cc

    def runs_on(self, compute_capability: int) -> bool:
        return compute_capability >= self.min_cc


_HALVE_KERNELS = tuple(f"block_scores_halve_kernel<{n}>" for n in range(1, HALVE_MAX_QUERIES + 1))  # by queries
_PAIRED_KERNELS = tuple(f"block_scores_paired_kernel<{a}, {b}>" for a, b in PAIRED_SPLITS)  # by queries
_QUARTERS_KERNELS = tuple(f"block_scores_quarters_kernel<{n}>" for n in range(1, MAX_QUERIES + 1))  # by queries
# The split's five launches (the passes, then the emit) at each chunk size, smallest first (launch/topk.py).
_SPLIT_KERNELS = tuple(name for bpt in (size // TOPK_SPLIT_THREADS for size in SPLIT_CHUNK_SIZES)
                       for name in (*(f"block_topk_split_pass_kernel<{p}, {bpt}>" for p in range(RADIX_PASSES)),
                                    f"block_topk_split_emit_kernel<{bpt}>"))
# The cluster top-k at each of its sizes (CTAs a query), as CLUSTER_SIZES lists them (launch/topk_cluster.py).
_CLUSTER_KERNELS = ("block_topk_cluster_kernel", "block_topk_cluster_wide_kernel")

# qsa's own variants, each declared once.
QSA_VARIANTS: tuple[Variant, ...] = (
    Variant("scores", "reference", "reference", SCORES_SOURCE, ("block_scores_kernel",), "butterfly", PER_BLOCK),
    Variant("scores", "multi", "baseline", SCORES_SOURCE, ("block_scores_multi_kernel",), "butterfly", STRIDING),
    Variant("scores", "halve", "candidate", SCORES_SOURCE, _HALVE_KERNELS, "halve", HALVING),
    Variant("scores", "paired", "variant", ONE_PASS_SOURCE, _PAIRED_KERNELS, "paired", PAIRED),
    Variant("scores", "quarters", "variant", ONE_PASS_SOURCE, _QUARTERS_KERNELS, "quarters", QUARTERS),
    Variant("topk", "reference", "reference", TOPK_SOURCE, ("block_topk_kernel",), "reference", ONE_CTA,
            TOPK_REF_THREADS),
    Variant("topk", "wide", "baseline", TOPK_SOURCE, ("block_topk_wide_kernel",), "wide", ONE_CTA, TOPK_WIDE_THREADS,
            window_scorer="multi"),
    Variant("topk", "split", "candidate", TOPK_SOURCE, _SPLIT_KERNELS, "split", SPLIT, TOPK_SPLIT_THREADS,
            window_scorer="halve"),
    Variant("topk", "cluster", "variant", CLUSTER_SOURCE, _CLUSTER_KERNELS, "cluster", CLUSTER,
            TOPK_CLUSTER_THREADS, window_scorer="halve"),
)


def _refusal(variant: Variant, earlier: list[Variant]) -> str | None:
    """Why ``variant`` cannot join the variants declared before it, or None."""
    if variant.stage not in STAGES or variant.role not in ROLES:
        return f"stage must be one of {STAGES} and role one of {ROLES}"
    models = MODELS[variant.stage]
    if variant.model not in models:
        return f"model must be one of {', '.join(models)} (got {variant.model!r})"
    if variant.launch.stage != variant.stage:
        return f"its launch shape {variant.launch.name!r} launches a {variant.launch.stage} kernel"
    if variant.launch.engine != (variant.engine is not None):
        return "an engine checkout's variants, and only they, have an engine launch shape"
    if any((v.stage, v.name) == (variant.stage, variant.name) for v in earlier):
        return f"a {variant.stage} variant {variant.name!r} is already in the catalog"
    if variant.role != "variant" and any(v.stage == variant.stage and v.role == variant.role for v in earlier):
        return f"the {variant.stage} stage already has its {variant.role}"
    return None


@dataclass(frozen=True, eq=False)
class Catalog:
    """Every variant of one run, in the order declared; ``kernels``: the folder of qsa's own kernel sources
    (None: the installed ones); ``libraries``: each engine checkout's loaded library, by its name.

    Built with a ValueError naming the first variant that contradicts those before it (a stage's names and
    roles are unique; a model, a launch shape of its stage)."""

    variants: tuple[Variant, ...]
    kernels: Path | None = None
    libraries: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for i, v in enumerate(self.variants):
            refusal = _refusal(v, list(self.variants[:i]))
            if refusal is not None:
                raise ValueError(f"variant {v.name!r}: {refusal}")
        object.__setattr__(self, "libraries", MappingProxyType(dict(self.libraries)))

    def adding(self, variants: Iterable[Variant], libraries: Mapping[str, Any] | None = None) -> Catalog:
        """A new catalog of these variants and ``variants`` after them (and these libraries and ``libraries``)."""
        return Catalog((*self.variants, *variants), self.kernels, {**self.libraries, **(libraries or {})})

    @property
    def kernel_folder(self) -> Path:
        """The folder qsa's own variants are compiled from."""
        return self.kernels or kernel_dir()

    def stage(self, stage: str) -> tuple[Variant, ...]:
        return tuple(v for v in self.variants if v.stage == stage)

    def names(self, stage: str) -> tuple[str, ...]:
        """Every variant of ``stage``, in the order they were declared."""
        return tuple(v.name for v in self.stage(stage))

    def known(self) -> set[str]:
        """Every variant's name, of every stage."""
        return {v.name for v in self.variants}

    def get(self, stage: str, name: str) -> Variant:
        found = next((v for v in self.variants if (v.stage, v.name) == (stage, name)), None)
        if found is None:
            raise VariantError(f"unknown {stage} variant {name!r} (expected one of {', '.join(self.names(stage))})")
        return found

    def roles(self, stage: str) -> dict[str, str]:
        """``stage``'s variants by role (reference, baseline, candidate): the run's roles unless it names others."""
        return {v.role: v.name for v in self.stage(stage) if v.role != "variant"}

    def with_role(self, stage: str, role: str) -> str:
        """The name of ``stage``'s variant in ``role`` (reference, baseline or candidate)."""
        return self.roles(stage)[role]

    def with_launch(self, stage: str, launch: str) -> str:
        """The name of qsa's own ``stage`` variant of the launch shape named ``launch``: a VariantError where
        the run's kernels have none (a copy older than it)."""
        name = next((v.name for v in self.stage(stage) if v.qsa_own and v.launch.name == launch), None)
        if name is None:
            raise VariantError(f"qsa's {launch} {stage} kernels are not in the run's kernel sources (an older copy? "
                               "name its variants with --variants)")
        return name

    def runs_on(self, stage: str, compute_capability: int) -> tuple[str, ...]:
        """The variants of ``stage`` a card of this compute capability runs."""
        return tuple(v.name for v in self.stage(stage) if v.runs_on(compute_capability))

    def window_pairs(self) -> tuple[tuple[str, str], ...]:
        """(scorer, top-k) of each top-k variant that follows a scorer in a decode window."""
        return tuple((v.window_scorer, v.name) for v in self.stage("topk") if v.window_scorer)

    def side(self, name: str, folder: Path) -> list[Variant]:
        """qsa's own variants compiled from another folder of its kernel sources, named ``name.VARIANT`` (role
        "variant"; a top-k follows its side's scorer in the window): a compare side's, to add."""
        return [dataclasses.replace(v, name=f"{name}.{v.name}", role="variant", folder=folder,
                                    window_scorer=f"{name}.{v.window_scorer}" if v.window_scorer else None)
                for v in self.variants if v.qsa_own and defined_in(v, folder)]

    def kernels_of(self, source: str, folder: Path | None = None) -> tuple[str, ...]:
        """Every kernel of every variant in ``source`` of ``folder`` (each once: two variants may share one):
        what one compile of that file provides."""
        return tuple(dict.fromkeys(k for v in self.variants if v.engine is None and v.source == source
                                   and v.folder == folder for k in v.kernels))

    def compiled(self, variant: Variant) -> Module:
        """A ``kernels.Module`` of the variant's source compiled for the current device: one compile a file,
        with every kernel of every variant in it."""
        if variant.engine is not None:
            raise ValueError(f"variant {variant.name!r} is an engine checkout's: it has no qsa kernels")
        return load(variant.source, self.kernels_of(variant.source, variant.folder),
                    folder=variant.folder or self.kernel_folder)

    def code(self, variant: Variant) -> Any:
        """What the variant's launch shape launches: its compiled kernels, or its engine checkout's library."""
        if variant.engine is None:
            return self.compiled(variant)
        try:
            return self.libraries[variant.engine.checkout]
        except KeyError:
            raise VariantError(f"variant {variant.name!r}: no engine checkout {variant.engine.checkout!r} "
                               "is attached to this run") from None

    def build(self, variant: Variant, *arrays: Any, **options: Any) -> Any:
        """The variant's launch on ``arrays`` (its shape's ``build``): its code is compiled or looked up only
        once the arrays passed the shape's checks."""
        return variant.launch.build(variant, lambda: self.code(variant), *arrays, **options)


def kernel_sources() -> tuple[str, ...]:
    """The files a folder of qsa's kernel sources has: the header, every source of qsa's variants, the timer's."""
    return (HEADER, *dict.fromkeys(v.source for v in QSA_VARIANTS), BENCH)


def check_kernels(path: Path) -> Path:
    """``path`` as a folder of qsa's kernel sources (``--kernels DIR``): a KernelError (one line) naming a
    file it lacks."""
    return check_kernel_dir(path, kernel_sources())


def defined_in(variant: Variant, folder: Path) -> bool:
    """Whether ``folder``'s copy of the variant's source defines every one of its kernels (templates by name)."""
    return {k.split("<")[0] for k in variant.kernels} <= defined_kernels(folder, variant.source)


def qsa_catalog(kernels: Path | None = None) -> Catalog:
    """qsa's own variants (``QSA_VARIANTS``) compiled from ``kernels`` (None: the installed ones), those whose
    kernels it defines (an older copy may lack a newer variant's): what a run's catalog starts from."""
    return Catalog(tuple(v for v in QSA_VARIANTS if kernels is None or defined_in(v, kernels)), kernels)


@dataclass(frozen=True)
class Launcher:
    """How a run launches its variants on the GPU: through its catalog (the compiled kernels, the engine
    checkouts' libraries), the top-k's under the environment's switches (``dispatch.SWITCHES``: the split's
    programmatic launches), read once when the run began."""

    catalog: Catalog
    switches: Mapping[str, str]

    def scorer(self, variant: Variant, dev: Any, out: Any) -> Any:
        """A closure launching the scorer ``variant`` on ``dev`` into ``out`` (launch/shape.py ScorerShape)."""
        return self.catalog.build(variant, dev, out)

    def topk(self, variant: Variant, scores: Any, steps: Any, ids: Any, active_blocks: int = 0,
             scratch: Any = None, follows_kernel: bool = False) -> Any:
        """A callable launching the top-k ``variant`` on ``scores`` and ``steps`` into ``ids``
        (launch/shape.py TopkShape; ``follows_kernel``: right after a kernel in the stream)."""
        return self.catalog.build(variant, scores, steps, ids, active_blocks=active_blocks, scratch=scratch,
                                  switches=self.switches, follows_kernel=follows_kernel)
