"""Variants under the engine's ``STRATA_*`` switches: ``NAME.KIND[K=V,...]`` parsed, resolved against the
attached checkouts, and refused in a process whose environment does not have its switches."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from ..core.errors import EngineError
from ..variants import Variant, engine_variant
from .attach import attached_libraries
from .domains import ENV_EMULATE_CC, variant_refusal
from .kinds import ENGINE_KINDS, EngineEntry

# The engine's switches (docs/spec.md section 8), each read once per process.
ENGINE_SWITCHES = ("STRATA_SCORES_MULTI", "STRATA_SCORES_RS", "STRATA_TOPK_SPLIT", "STRATA_QSA_CLUSTER",
                   "STRATA_TOPK_OLD", "STRATA_TOPK_WIDE", "STRATA_TOPK_ACTIVE_ANY", ENV_EMULATE_CC)
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
        switches.append((key, value.strip()))
    return m["base"], tuple(sorted(switches))


def switched_variant(name: str, compute_capability: int) -> Variant | None:
    """The attached checkout's variant ``NAME.KIND[K=V,...]`` runs under those switches (None when ``name``
    has none): an EngineError when no checkout has it, or it does not run on this card under them."""
    base, switches = parse_switched(name)
    if not switches:
        return None
    found = next(((lib, base[len(lib.name) + 1:]) for lib in attached_libraries()
                  if base.startswith(lib.name + ".") and base[len(lib.name) + 1:] in ENGINE_KINDS), None)
    if found is None:
        raise EngineError(f"variant {name!r}: no attached engine checkout has a variant {base!r}")
    lib, kind = found
    refusal = variant_refusal(lib, kind, compute_capability, dict(switches))
    if refusal is not None:
        raise EngineError(f"variant {name!r} does not run here: {refusal}")
    return engine_variant(lib.name, kind, switches=switches)


def require_switches(entry: EngineEntry, env: Mapping[str, str] | None = None) -> None:
    """A variant with switches runs only in a process whose environment has them (the engine reads each
    once per process): anywhere else its launcher would measure the switches' defaults."""
    env = os.environ if env is None else env
    wrong = [f"{k}={v}" for k, v in entry.switches if env.get(k) != v]
    if wrong:
        raise EngineError(f"{entry.checkout}.{entry.kind} under {', '.join(wrong)} runs in a child process with "
                          "those switches set, not in this one")
