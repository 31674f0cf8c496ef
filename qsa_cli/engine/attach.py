"""A run's engine checkouts: each built for the card, loaded, findable by name, and its variants that the
checkout and the card run registered, for a block's length (a switched variants' child attaches the same
libraries again from their builds)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..core.errors import EngineError
from ..variants import engine_variant, registered
from .build import EngineBuild, build_engine
from .checkout import EngineSpec, open_engine, parse_engine_spec
from .domains import engine_variants
from .kinds import ENGINE_SCORER
from .library import EngineLibrary, load_engine

_ATTACHED: dict[str, EngineLibrary] = {}


def library(name: str) -> EngineLibrary:
    """The loaded library of the attached checkout ``name``."""
    try:
        return _ATTACHED[name]
    except KeyError:
        raise EngineError(f"no engine checkout named {name!r} is attached to this run") from None


def attached_libraries() -> tuple[EngineLibrary, ...]:
    """Every checkout attached to this run, loaded."""
    return tuple(_ATTACHED.values())


@contextlib.contextmanager
def attached(specs: tuple[str | EngineSpec, ...], compute_capability: int,
             env: Mapping[str, str] | None = None) -> Iterator[list[dict[str, Any]]]:
    """Each checkout of ``specs`` (``[NAME=]PATH[@REV]``) built for this card, loaded, and its variants that
    the checkout and the card run registered, for the block's length. Yields each checkout's provenance
    (the record's ``engines``: what its library was built from, and the variants it gave)."""
    parsed = [parse_engine_spec(spec) if isinstance(spec, str) else spec for spec in specs]
    names = [spec.name for spec in parsed]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise EngineError(f"two engine checkouts are named {twice!r}: name them (--engine NAME=PATH)")
    with contextlib.ExitStack() as stack:
        provenance = []
        for spec in parsed:
            checkout = stack.enter_context(open_engine(spec))
            lib = load_engine(build_engine(checkout, compute_capability))
            provenance.append(_attach(stack, lib, compute_capability, env))
        yield provenance


def _attach(stack: contextlib.ExitStack, lib: EngineLibrary, compute_capability: int,
            env: Mapping[str, str] | None) -> dict[str, Any]:
    """``lib``'s variants that run here registered, and ``lib`` findable by name, until ``stack`` closes;
    its provenance, with the variants it gave."""
    here = engine_variants(lib, compute_capability, env)
    variants = [engine_variant(lib.name, kind) for kind in here]
    if ENGINE_SCORER not in here:  # nothing to follow in a window
        variants = [dataclasses.replace(v, window_scorer=None) for v in variants]
    stack.enter_context(registered(variants))
    _ATTACHED[lib.name] = lib
    stack.callback(_ATTACHED.pop, lib.name, None)
    return {**lib.provenance, "variants": [v.name for v in variants]}


def engine_builds() -> list[dict[str, Any]]:
    """The attached checkouts' libraries, as a child process attaches them again (``attach_builds``)."""
    return [{"name": lib.name, "library": str(lib.build.library), "arch": lib.arch, "provenance": lib.provenance}
            for lib in _ATTACHED.values()]


@contextlib.contextmanager
def attach_builds(builds: list[dict[str, Any]]) -> Iterator[None]:
    """The libraries ``engine_builds`` listed in another process, attached here (a switched variants' child)."""
    with contextlib.ExitStack() as stack:
        for b in builds:
            lib = load_engine(EngineBuild(b["name"], Path(b["library"]), int(b["arch"]), b["provenance"], False))
            _attach(stack, lib, lib.arch, None)
        yield
