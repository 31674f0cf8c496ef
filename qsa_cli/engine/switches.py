"""Variants under the engine's ``STRATA_*`` switches: ``NAME.KIND[K=V,...]`` parsed and resolved against a
run's loaded checkouts (engine/launch.py refuses one in a process whose environment does not have its
switches)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..catalog import Variant
from ..core.errors import EngineError
from .attach import engine_variant
from .domains import ENGINE_SWITCHES, check_engine_switch, variant_refusal
from .kinds import ENGINE_KINDS
from .library import EngineLibrary

_SWITCHED = re.compile(r"^(?P<base>[^\[\]]+)\[(?P<switches>[^\[\]]*)\]$")


def parse_switched(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``NAME.KIND[K=V,...]`` -> (``NAME.KIND``, ((K, V), ...)); a name without switches -> (name, ())."""
    m = _SWITCHED.match(name)
    if m is None:
        return name, ()
    switches = []
    for item in m["switches"].split(","):
        key, eq, value = item.strip().partition("=")
        if not eq or key not in ENGINE_SWITCHES:
            raise EngineError(f"variant {name!r}: {item.strip()!r} is not a switch K=V of the engine's "
                              f"({', '.join(ENGINE_SWITCHES)})")
        try:
            check_engine_switch(key, value.strip())
        except EngineError as bad:
            raise EngineError(f"variant {name!r}: {bad}") from None
        switches.append((key, value.strip()))
    return m["base"], tuple(sorted(switches))


def switched_variant(name: str, libraries: Iterable[EngineLibrary], compute_capability: int) -> Variant | None:
    """The variant ``NAME.KIND[K=V,...]`` of the checkout NAME among ``libraries`` (a run's), under those
    switches (None when ``name`` has none): an EngineError when no checkout has it, or it does not run on
    this card under them."""
    base, switches = parse_switched(name)
    if not switches:
        return None
    found = next(((lib, base[len(lib.name) + 1:]) for lib in libraries
                  if base.startswith(lib.name + ".") and base[len(lib.name) + 1:] in ENGINE_KINDS), None)
    if found is None:
        raise EngineError(f"variant {name!r}: no attached engine checkout has a variant {base!r}")
    lib, kind = found
    refusal = variant_refusal(lib, kind, compute_capability, dict(switches))
    if refusal is not None:
        raise EngineError(f"variant {name!r} does not run here: {refusal}")
    return engine_variant(lib.name, kind, switches=switches)
