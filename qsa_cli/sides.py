"""``qsa compare``'s sides: what a side is (an engine checkout, or a folder of qsa's kernel sources, at a
git revision of it when given), and how its variants join a run's catalog."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .catalog import Catalog, Variant, kernel_sources
from .core.errors import SideError
from .core.git import folder_at_revision
from .engine.attach import attached
from .engine.checkout import SOURCE, parse_engine_spec

SIDE_NAMES = ("base", "candidate")  # a side's name when it is not given one (NAME=PATH)


@dataclass(frozen=True)
class SideSpec:
    """One side of ``qsa compare``: an engine checkout or a folder of qsa's kernel sources (or a checkout of
    qsa, whose ``kernels/`` it is), at a git revision of it when given."""

    name: str
    path: str
    revision: str | None

    @classmethod
    def parse(cls, text: str, default_name: str) -> SideSpec:
        spec = parse_engine_spec(text)
        named = "=" in text and text.partition("=")[0] == spec.name
        return cls(spec.name if named else default_name, str(spec.path), spec.revision)

    def describe(self, kind: str) -> dict[str, Any]:
        return {"name": self.name, "kind": kind, "path": str(Path(self.path).resolve()), "revision": self.revision}


def side_kind(path: Path) -> tuple[str, Path]:
    """("engine", the checkout) or ("kernels", the folder of kernel sources) that ``path`` is; a SideError
    (one line) when it is neither."""
    if (path / SOURCE).is_file():
        return "engine", path
    required = kernel_sources()
    for folder in (path, path / "kernels"):
        if all((folder / name).is_file() for name in required):
            return "kernels", folder.resolve()
    if not path.is_dir():
        raise SideError(f"{path}: no such folder")
    raise SideError(f"{path}: neither an engine checkout (no {SOURCE}) nor a folder of qsa's kernel sources "
                    f"(no {', '.join(required)}, here or in kernels/)")


@dataclass(frozen=True)
class Sides:
    """Both sides ready to run: as the record describes them, the engine sides' provenance (the record's
    ``engines``), and the variants and loaded libraries they add to the run's catalog."""

    described: list[dict[str, Any]]
    engines: list[dict[str, Any]]
    variants: tuple[Variant, ...]
    libraries: dict[str, Any]


def open_sides(stack: contextlib.ExitStack, sides: tuple[SideSpec, SideSpec], catalog: Catalog,
               compute_capability: int, adapter: Path | None = None, env: Mapping[str, str] | None = None) -> Sides:
    """Each side's variants: an engine checkout's built and loaded for the card (with ``adapter``, else its
    own, engine/adapter.py; its variants those it runs under the engine's switches of ``env``, default this
    process's), a kernels folder's as qsa's own from it (``catalog.side``), each ``PATH@REV`` checked out into a
    temporary worktree until ``stack`` closes."""
    if sides[0].name == sides[1].name:
        raise SideError(f"both sides are named {sides[0].name!r}: name them BASE=PATH and CANDIDATE=PATH")
    described, engines, variants, libraries = [], [], [], {}
    for side in sides:
        path = Path(side.path)
        if side.revision is not None:
            path = stack.enter_context(folder_at_revision(path, side.revision))
        kind, where = side_kind(path)
        described.append(side.describe(kind))
        if kind == "engine":
            found = stack.enter_context(attached((f"{side.name}={where}",), compute_capability, env, adapter=adapter))
            engines += [{**p, "path": described[-1]["path"], "revision": side.revision} for p in found.provenance]
            variants += found.variants
            libraries.update(found.libraries)
        else:
            variants += catalog.side(side.name, where)
    if adapter is not None and not engines:
        raise SideError(f"--adapter {adapter}: neither side is an engine checkout to build it with")
    return Sides(described, engines, tuple(variants), libraries)


def side_pairs(catalog: Catalog, stage: str, base: str, candidate: str) -> tuple[tuple[str, str], ...]:
    """(base.X, candidate.X) for every X of ``stage`` both sides have, in the catalog's order."""
    names = catalog.names(stage)
    return tuple((n, f"{candidate}.{n.removeprefix(base + '.')}") for n in names
                 if n.startswith(base + ".") and f"{candidate}.{n.removeprefix(base + '.')}" in names)
