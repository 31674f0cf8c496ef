"""A run's engine checkouts: each built for the card and loaded, and the variants that the checkout and the
card run, for the run's catalog to add (qsa_cli/catalog.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..catalog import Variant
from ..core.errors import EngineError
from .adapter import MODELS, adapter_source, check_adapter_file
from .adapter_launch import ADAPTER_SHAPES
from .build import build_engine, find_nvcc
from .checkout import EngineSpec, open_engine, parse_engine_spec
from .domains import check_engine_environment, engine_variants
from .kinds import ENGINE_SCORER, EngineEntry
from .library import EngineLibrary, load_engine
from .switches import check_named, engine_variant


@dataclass(frozen=True)
class Attached:
    """Engine checkouts ready to run: each one's loaded library by its name, the variants they give on this
    card, and their provenance (the record's ``engines``: what each library was built from, and its variants)."""

    libraries: dict[str, EngineLibrary]
    variants: tuple[Variant, ...]
    provenance: list[dict[str, Any]]


def adapter_variants(lib: EngineLibrary, kinds: tuple[str, ...]) -> list[Variant]:
    """The variants ``NAME.ENTRY`` of ``lib``'s adapter entries (engine/adapter.py), beside the checkout's
    ``kinds`` here: a top-k follows the scorer its entry names in a window where the checkout has it."""
    scorers = {*kinds, *(e.name for e in lib.adapter.values() if e.stage == "scores")}
    return [Variant(e.stage, f"{lib.name}.{e.name}", "variant", "", (e.name,), MODELS[e.stage], ADAPTER_SHAPES[e.stage],
                    window_scorer=f"{lib.name}.{e.window_scorer}" if e.window_scorer in scorers else None,
                    engine=EngineEntry(lib.name, e.name), exact=e.exact) for e in lib.adapter.values()]


def _loaded(libraries: list[EngineLibrary], env: Mapping[str, str] | None) -> Attached:
    """Each library's variants that run on the card it was built for (a top-k follows the checkout's scorer
    in a window, where it has one), its adapter's after them."""
    variants: list[Variant] = []
    provenance = []
    for lib in libraries:
        here = engine_variants(lib, lib.arch, env)
        given = [engine_variant(lib.name, kind, lib.arch) for kind in here]
        if ENGINE_SCORER not in here:  # nothing to follow in a window
            given = [dataclasses.replace(v, window_scorer=None) for v in given]
        given += adapter_variants(lib, here)
        variants += given
        built = {**lib.provenance, "variants": [v.name for v in given]}
        if lib.adapter:
            built["adapter"] = {**lib.provenance["adapter"], "entries": [e.record() for e in lib.adapter.values()]}
        provenance.append(built)
    return Attached({lib.name: lib for lib in libraries}, tuple(variants), provenance)


def engine_specs(specs: tuple[str | EngineSpec, ...], env: Mapping[str, str] | None = None) -> list[EngineSpec]:
    """``specs`` parsed, each name once, the engine's switches of ``env`` (default this process's) in their
    domains: an EngineError naming the first that is not."""
    check_engine_environment(os.environ if env is None else env)
    parsed = [parse_engine_spec(spec) if isinstance(spec, str) else spec for spec in specs]
    names = [spec.name for spec in parsed]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise EngineError(f"two engine checkouts are named {twice!r}: name them (--engine NAME=PATH)")
    return parsed


def check_engines(specs: tuple[str | EngineSpec, ...], env: Mapping[str, str] | None = None,
                  variants: Iterable[str] = (), adapter: Path | None = None) -> None:
    """Each checkout of ``specs`` as its build would find it, without building: the switches, the folder (a
    ``PATH@REV``'s worktree, made and removed), its files and header (engine/checkout.py), its adapter
    (``adapter``, else its own), the switched variants of ``variants`` (names a run was given) against the
    switches its sources read, and nvcc. An EngineError naming the first problem: what a run reports before
    it says that no device can run them."""
    require_checkout_for(adapter, specs)
    reads = {}
    for spec in engine_specs(specs, env):
        with open_engine(spec) as checkout:
            adapter_source(checkout, adapter)
            reads[checkout.name] = checkout.switches()
    check_named(variants, reads)
    find_nvcc()


def require_checkout_for(adapter: Path | None, specs: tuple[str | EngineSpec, ...]) -> None:
    """An EngineError when ``adapter`` (``--adapter``) is given with no checkout to build it with."""
    if adapter is not None and not specs:
        check_adapter_file(adapter)
        raise EngineError(f"--adapter {adapter}: an adapter adds variants to an engine checkout: name one with "
                          "--engine")


@contextlib.contextmanager
def attached(specs: tuple[str | EngineSpec, ...], compute_capability: int,
             env: Mapping[str, str] | None = None, adapter: Path | None = None) -> Iterator[Attached]:
    """Each checkout of ``specs`` (``[NAME=]PATH[@REV]``) built for this card, with ``adapter`` (else the
    checkout's own, engine/adapter.py), and loaded, with its variants that the checkout and the card run
    (under the switches of ``env``, default this process's) and its adapter's, for the block's length (a
    ``PATH@REV`` checkout lives in a temporary worktree until then)."""
    require_checkout_for(adapter, specs)
    with contextlib.ExitStack() as stack:
        libraries = []
        for spec in engine_specs(specs, env):
            checkout = stack.enter_context(open_engine(spec))
            build = build_engine(checkout, compute_capability, adapter=adapter_source(checkout, adapter))
            libraries.append(load_engine(build))
        yield _loaded(libraries, env)
