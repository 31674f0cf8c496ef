"""An engine checkout's variants as the catalog holds them, under the engine's ``STRATA_*`` switches: those its
kind implies, and those a name ``NAME.KIND[K=V,...]`` gives, parsed, each switch checked against
those the checkout NAME reads (engine/checkout.py finds them in its source) and against what its kind implies,
and resolved against a run's loaded checkouts (engine/launch.py refuses one in a process whose environment does
not have its switches)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ..catalog import Variant
from ..core.errors import EngineError
from .checkout import SWITCH_NAME
from .domains import check_engine_switch, implied_conflict, implied_switches, variant_refusal
from .kinds import ENGINE_KINDS, ENGINE_SCORER, EngineEntry
from .launch import ENGINE_SHAPES
from .library import EngineLibrary

_SWITCHED = re.compile(r"^(?P<base>[^\[\]]+)\[(?P<switches>[^\[\]]*)\]$")


def engine_variant(checkout: str, kind: str, compute_capability: int,
                   switches: tuple[tuple[str, str], ...] = ()) -> Variant:
    """An engine checkout's variant of ``kind`` (ENGINE_KINDS) on an sm_``compute_capability`` card, named
    ``checkout.kind`` (``[K=V,...]`` after it when it is named with switches). It runs under those switches
    and those its kind implies there (engine/domains.py: ``NAME.scores-dx`` under ``STRATA_SCORES_DX=1``), so
    an implying kind runs in a child process even without a suffix."""
    k = ENGINE_KINDS[kind]
    suffix = f"[{','.join(f'{key}={value}' for key, value in switches)}]" if switches else ""
    scorer = f"{checkout}.{ENGINE_SCORER}{suffix}" if k.in_window else None
    runs_under = {**dict(switches), **implied_switches(kind, compute_capability, dict(switches))}
    return Variant(k.stage, f"{checkout}.{kind}{suffix}", "variant", "", k.functions, k.model, ENGINE_SHAPES[k.stage],
                   window_scorer=scorer, engine=EngineEntry(checkout, kind, tuple(sorted(runs_under.items()))),
                   exact=k.exact)


def parse_switched(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``NAME.KIND[K=V,...]`` -> (``NAME.KIND``, ((K, V), ...)), each K a ``STRATA_*`` name and its V in its
    domain (engine/domains.py); a name without switches -> (name, ())."""
    m = _SWITCHED.match(name)
    if m is None:
        return name, ()
    switches = []
    for item in m["switches"].split(","):
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not SWITCH_NAME.fullmatch(key):
            raise EngineError(f"variant {name!r}: {item.strip()!r} is not a switch K=V of the engine's "
                              "(K a STRATA_* name the checkout reads)")
        try:
            check_engine_switch(key, value)
        except EngineError as bad:
            raise EngineError(f"variant {name!r}: {bad}") from None
        switches.append((key, value))
    return m["base"], tuple(sorted(switches))


def check_switched(name: str, checkout: str, reads: tuple[str, ...], cc: int | None = None) -> None:
    """An EngineError (one line) when the switched variant ``name`` of ``checkout``, whose sources read the
    switches ``reads``, sets one it does not read, or one its kind's path needs set otherwise (on an sm_``cc``
    card; without one, what every card implies)."""
    base, switches = parse_switched(name)
    unread = [k for k, _ in switches if k not in reads]
    if unread:
        raise EngineError(f"variant {name!r}: checkout {checkout} reads no {unread[0]} (its sources read "
                          f"{', '.join(reads) or 'no STRATA_* switch'})")
    conflict = implied_conflict(base[len(checkout) + 1:], dict(switches), cc)
    if conflict is not None:
        raise EngineError(f"variant {name!r}: {conflict}")


def checkout_of(base: str, checkouts: Iterable[str]) -> tuple[str, str] | None:
    """(the checkout, the kind) of ``NAME.KIND`` among ``checkouts`` (their names), or None."""
    return next(((c, base[len(c) + 1:]) for c in checkouts
                 if base.startswith(c + ".") and base[len(c) + 1:] in ENGINE_KINDS), None)


def check_named(names: Iterable[str], reads: Mapping[str, tuple[str, ...]]) -> None:
    """Each switched variant among ``names`` whose checkout is one of ``reads`` (name -> the switches its sources
    read) checked before anything is built: an EngineError naming the first that sets a switch its checkout
    does not read, or one its kind's path needs set otherwise."""
    for name in names:
        base, switches = parse_switched(name)
        found = checkout_of(base, reads) if switches else None
        if found is not None:
            check_switched(name, found[0], reads[found[0]])


def switched_variant(name: str, libraries: Iterable[EngineLibrary], compute_capability: int) -> Variant | None:
    """The variant ``NAME.KIND[K=V,...]`` of the checkout NAME among ``libraries`` (a run's), under those
    switches (None when ``name`` has none): an EngineError when no checkout has it, its checkout reads no such
    switch, or it does not run on this card under them."""
    base, switches = parse_switched(name)
    if not switches:
        return None
    by_name = {lib.name: lib for lib in libraries}
    found = checkout_of(base, by_name)
    if found is None:
        raise EngineError(f"variant {name!r}: no attached engine checkout has a variant {base!r}")
    lib, kind = by_name[found[0]], found[1]
    check_switched(name, lib.name, lib.switches, compute_capability)
    refusal = variant_refusal(lib, kind, compute_capability, dict(switches))
    if refusal is not None:
        raise EngineError(f"variant {name!r} does not run here: {refusal}")
    return engine_variant(lib.name, kind, compute_capability, switches)
