"""Where each kind of a loaded checkout runs: the functions the checkout has and the documented domains of
its bool functions (spec section 8), as the engine's host side answers them under its switches."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Protocol

from ..core.errors import EngineError
from ..core.geometry import CLUSTER_MIN_CC
from .kinds import ENGINE_KINDS

ENV_EMULATE_CC = "STRATA_EMULATE_CC"
ENV_CLUSTER = "STRATA_QSA_CLUSTER"
# The values a switch takes: 0 or 1; a compute capability; a count of CTAs.
FLAG, CAPABILITY, COUNT = "0 or 1", "a compute capability such as 86", "a positive count"
# The engine's switches qsa knows (docs/spec.md section 8), each read once per process, and the values each takes
# (or unset, or empty). A checkout may read others: a variant may set those to a value of SAFE_VALUE's form.
ENGINE_SWITCHES: dict[str, str] = {
    "STRATA_SCORES_MULTI": FLAG, "STRATA_SCORES_RS": FLAG, "STRATA_TOPK_SPLIT": FLAG, ENV_CLUSTER: FLAG,
    "STRATA_TOPK_OLD": FLAG, "STRATA_TOPK_WIDE": FLAG, "STRATA_TOPK_ACTIVE_ANY": FLAG, ENV_EMULATE_CC: CAPABILITY,
    "STRATA_SCORES_DX": FLAG, "STRATA_TOPK_MULTI": FLAG, "STRATA_TOPK_MULTI_N": COUNT,
    "STRATA_QSA_EARLY_EXIT": FLAG, "STRATA_SELECT_EXACT": FLAG, "STRATA_SELECT_SIMT": FLAG}
# a value that cannot break a variant's name (",", "=", "]", "+" join its parts) nor mean two things in a shell
SAFE_VALUE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
SAFE_FORM = "1-64 letters, digits, '_', '.' or '-'"
SPLIT_MIN_CC, SPLIT_END_CC = 70, 90  # the split top-k: sm_70 to sm_89; the cluster's is geometry.CLUSTER_MIN_CC
TC_MIN_CC = 80  # the TF32 tensor-core scorer: sm_80 and newer
CLUSTER_MAX_QUERIES = 16


def check_engine_switch(name: str, value: str) -> None:
    """An EngineError when ``value`` is not in the domain of the engine's switch ``name`` (a switch qsa does
    not know: not of SAFE_VALUE's form)."""
    if value == "":
        return
    domain = ENGINE_SWITCHES.get(name)
    fits = {FLAG: value in ("0", "1"), CAPABILITY: value.isdigit(),
            COUNT: value.isdigit() and int(value) > 0}.get(domain, bool(SAFE_VALUE.fullmatch(value)))
    if not fits:
        raise EngineError(f"{name} must be {domain or SAFE_FORM} (got {value!r})")


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


def implied_switches(kind: str, compute_capability: int, given: Mapping[str, str]) -> dict[str, str]:
    """The switches ``kind``'s path is taken under (engine/kinds.py: ``implies``, and ``STRATA_QSA_CLUSTER=0``
    for a path past the cluster where the card answers sm_90 or newer), on an sm_``compute_capability`` card
    under the switches ``given`` (a variant's own and the environment's)."""
    k = ENGINE_KINDS[kind]
    implied = dict(k.implies)
    if k.past_cluster and answered_cc(compute_capability, given) >= CLUSTER_MIN_CC:
        implied[ENV_CLUSTER] = "0"
    return implied


def implied_conflict(kind: str, switches: Mapping[str, str], compute_capability: int | None = None) -> str | None:
    """Why a variant of ``kind`` cannot run under its ``switches`` (one line), or None: one sets what the kind's
    path needs otherwise. Without a card only the switches every card implies are checked."""
    implied = (dict(ENGINE_KINDS[kind].implies) if compute_capability is None
               else implied_switches(kind, compute_capability, switches))
    clash = next((k for k, v in implied.items() if switches.get(k, v) != v), None)
    if clash is None:
        return None
    return f"{kind} runs under {clash}={implied[clash]} (its path), so it cannot set {clash}={switches[clash]}"


def described_path(path: str) -> str:
    """A host path as a header declares it: ``qsa_block_scores.decode_dx`` -> "qsa_block_scores(..., decode_dx)"."""
    function, dot, parameter = path.partition(".")
    return f"{function}(..., {parameter})" if dot else function


def variant_refusal(lib: Declares, variant: str, compute_capability: int,
                    env: Mapping[str, str] | None = None, nq: int | None = None) -> str | None:
    """Why ``variant`` of ``lib`` does not run on an sm_``compute_capability`` card (one line), or None.

    From the host paths the checkout has and the documented domains of its bool functions (spec section 8),
    under the switches of ``env`` (default: this process's environment, which the engine reads once) and
    those the kind implies (the child process it runs in sets them).
    """
    if variant not in ENGINE_KINDS:
        raise ValueError(f"unknown engine variant {variant!r} (expected one of {', '.join(ENGINE_KINDS)})")
    missing = [described_path(f) for f in ENGINE_KINDS[variant].functions if f not in lib.functions]
    if missing:
        return f"{lib.name}: its qsa_select.hpp declares no {' or '.join(missing)}"
    env = os.environ if env is None else env
    env = {**env, **implied_switches(variant, compute_capability, env)}
    cc = answered_cc(compute_capability, env)
    card = f"sm_{cc}" + (f" ({ENV_EMULATE_CC}={cc})" if cc != compute_capability else "")
    if variant == "topk-split" and not SPLIT_MIN_CC <= cc < SPLIT_END_CC:
        return (f"{lib.name}: qsa_block_topk_split runs on sm_{SPLIT_MIN_CC} to sm_{SPLIT_END_CC - 1} only; "
                f"the card is {card}")
    if variant == "scores-tc" and cc < TC_MIN_CC:
        return f"{lib.name}: qsa_block_scores_tc needs sm_{TC_MIN_CC} or newer (TF32 tensor cores); the card is {card}"
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
