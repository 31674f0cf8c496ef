"""Where each kind of a loaded checkout runs: the functions the checkout has and the documented domains of
its bool functions (spec section 8), as the engine's host side answers them under its switches."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Protocol

from ..core.errors import EngineError
from ..core.geometry import CLUSTER_MIN_CC
from .kinds import ENGINE_KINDS

ENV_EMULATE_CC = "STRATA_EMULATE_CC"
ENV_CLUSTER = "STRATA_QSA_CLUSTER"
# The engine's switches (docs/spec.md section 8), each read once per process: every one is 0 or 1 (or unset,
# or empty) but STRATA_EMULATE_CC, a compute capability.
ENGINE_SWITCHES = ("STRATA_SCORES_MULTI", "STRATA_SCORES_RS", "STRATA_TOPK_SPLIT", ENV_CLUSTER,
                   "STRATA_TOPK_OLD", "STRATA_TOPK_WIDE", "STRATA_TOPK_ACTIVE_ANY", ENV_EMULATE_CC)
SPLIT_MIN_CC, SPLIT_END_CC = 70, 90  # the split top-k: sm_70 to sm_89; the cluster's is geometry.CLUSTER_MIN_CC
CLUSTER_MAX_QUERIES = 16


def check_engine_switch(name: str, value: str) -> None:
    """An EngineError when ``value`` is not in the domain of the engine's switch ``name``."""
    if value == "":
        return
    if name == ENV_EMULATE_CC:
        if not value.isdigit():
            raise EngineError(f"{ENV_EMULATE_CC} must be a compute capability such as 86 (got {value!r})")
    elif value not in ("0", "1"):
        raise EngineError(f"{name} must be 0 or 1 (got {value!r})")


def check_engine_environment(env: Mapping[str, str]) -> None:
    """The engine's switches ``env`` sets (the engine reads this process's), each in its domain."""
    for name in ENGINE_SWITCHES:
        check_engine_switch(name, env.get(name, ""))


def answered_cc(compute_capability: int, env: Mapping[str, str]) -> int:
    """The compute capability the engine's host side answers: ``STRATA_EMULATE_CC`` where it is set."""
    value = env.get(ENV_EMULATE_CC, "")
    check_engine_switch(ENV_EMULATE_CC, value)
    return int(value) if value else compute_capability


class Declares(Protocol):
    """What the domains read of a checkout: its name and its host functions (a loaded library's, or those an
    unbuilt checkout's header declares)."""

    name: str
    functions: tuple[str, ...]


def variant_refusal(lib: Declares, variant: str, compute_capability: int,
                    env: Mapping[str, str] | None = None, nq: int | None = None) -> str | None:
    """Why ``variant`` of ``lib`` does not run on an sm_``compute_capability`` card (one line), or None.

    From the functions the checkout has and the documented domains of its bool functions (spec section 8),
    under the switches of ``env`` (default: this process's environment, which the engine reads once).
    """
    if variant not in ENGINE_KINDS:
        raise ValueError(f"unknown engine variant {variant!r} (expected one of {', '.join(ENGINE_KINDS)})")
    missing = [f for f in ENGINE_KINDS[variant].functions if f not in lib.functions]
    if missing:
        return f"{lib.name}: its qsa_select.hpp declares no {' or '.join(missing)}"
    env = os.environ if env is None else env
    cc = answered_cc(compute_capability, env)
    card = f"sm_{cc}" + (f" ({ENV_EMULATE_CC}={cc})" if cc != compute_capability else "")
    if variant == "topk-split" and not SPLIT_MIN_CC <= cc < SPLIT_END_CC:
        return (f"{lib.name}: qsa_block_topk_split runs on sm_{SPLIT_MIN_CC} to sm_{SPLIT_END_CC - 1} only; "
                f"the card is {card}")
    if variant == "topk-cluster":
        if cc < CLUSTER_MIN_CC:
            return f"{lib.name}: qsa_block_topk_cluster needs sm_{CLUSTER_MIN_CC} or newer; the card is {card}"
        if env.get(ENV_CLUSTER) == "0":
            return f"{lib.name}: qsa_block_topk_cluster is off ({ENV_CLUSTER}=0)"
        if nq is not None and nq > CLUSTER_MAX_QUERIES:
            return f"{lib.name}: qsa_block_topk_cluster takes at most {CLUSTER_MAX_QUERIES} queries (got {nq})"
    return None


def engine_variants(lib: Declares, compute_capability: int,
                    env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The variants of ``lib`` that run on an sm_``compute_capability`` card (the arch it was built for)."""
    return tuple(v for v in ENGINE_KINDS if variant_refusal(lib, v, compute_capability, env) is None)
