"""The engine's dispatch policy (spec section 4): which scorer and top-k variant a call runs by default.

A pure function of the card's compute capability, the call's kind and an environment mapping, so the
harness can say what "dispatched" means for any card without one. Assumption (the seed changes the
decode path only): a prompt call, with its active block count, runs the reference kernels,
``block_scores_kernel`` (8 warps a CTA) and the 256-thread ``block_topk_kernel``, whatever the card
and the switches. The harness can still run every variant explicitly; this only names the default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .core.errors import SwitchError
from .core.geometry import CLUSTER_MIN_CC, NEW_KERNELS_CC, PDL_MIN_CC

CALL_KINDS = ("decode", "prompt")

ENV_SCORES_HALVE = "STRATA_SCORES_HALVE"
ENV_TOPK_SPLIT = "STRATA_TOPK_SPLIT"
ENV_PDL = "QSA_PDL"  # "0": plain launches (the split's, the window's cluster) even where PDL exists
ENV_CLUSTER_WIDE = "QSA_CLUSTER_WIDE"  # the cluster top-k's 16 CTAs a query: "1" wherever they run, "0" never
SWITCHES = (ENV_SCORES_HALVE, ENV_TOPK_SPLIT, ENV_PDL, ENV_CLUSTER_WIDE)


class Named(Protocol):
    """Where the policy takes the names of the variants it chooses between: a run's catalog (catalog.py)."""

    def with_role(self, stage: str, role: str) -> str: ...

    def with_launch(self, stage: str, launch: str) -> str: ...


def read_switches(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The switches set in ``env`` (the process's): read once, where a run begins (session.py, a child
    process), recorded, and passed down from there. Each is checked against its domain (0 or 1, spec
    section 4) whether or not it decides anything in the run, so that a record never lists a value the
    harness did not understand: a SwitchError before anything runs."""
    for name in SWITCHES:
        _switch(env, name)
    return {k: env[k] for k in SWITCHES if k in env}


# Where the halving scorer is dispatched, the scorer of a decode call by its queries (1-8), by launch shape: the
# fastest median of halve, paired and quarters at each count on an H200 (cold L2, 420K cells; a lead under 1 %
# keeps the earlier choice: quarters led paired at 5 queries by 0.3-2.4 % over three runs, so 5 stays on paired;
# docs/benchmarks.md).
FASTEST_DECODE_SCORERS = ("quarters", "quarters", "quarters", "quarters", "paired", "quarters", "quarters", "quarters")


def fastest_decode_scorer(catalog: Named, queries: int) -> str:
    """qsa's scorer of FASTEST_DECODE_SCORERS for a decode call of ``queries`` queries (1-8)."""
    return catalog.with_launch("scores", FASTEST_DECODE_SCORERS[queries - 1])


@dataclass(frozen=True)
class Dispatch:
    scores: str
    topk: str
    reasons: Mapping[str, str]  # stage -> one line saying why ("scores_by_queries" too, where it is set)
    scores_by_queries: tuple[str, ...] = ()  # a decode call's scorer by its queries (1-8), where the count decides

    def scorer_for(self, queries: int) -> str:
        """The scorer of a decode call of ``queries`` queries."""
        return self.scores_by_queries[queries - 1] if self.scores_by_queries else self.scores

    def summary(self, kind: str) -> dict[str, Any]:
        """The choice for a ``kind`` call as a record holds it (record.schema.Dispatch)."""
        by_queries = {"scores_by_queries": list(self.scores_by_queries)} if self.scores_by_queries else {}
        return {"kind": kind, "scores": self.scores, "topk": self.topk, **by_queries, "reasons": dict(self.reasons)}


def _switch(env: Mapping[str, str], name: str) -> bool | None:
    """A 0/1 switch; None when unset or empty (``VAR= qsa ...`` is how a shell unsets it for one command)."""
    value = env.get(name, "")
    if value == "":
        return None
    if value not in ("0", "1"):
        raise SwitchError(f"{name} must be 0 or 1 (got {value!r})")
    return value == "1"


def _check_cc(cc: int) -> None:
    if isinstance(cc, bool) or not isinstance(cc, int) or not 10 <= cc <= 999:
        raise ValueError(f"compute capability must be an int major*10+minor such as 75 or 120 (got {cc!r})")


def _named(catalog: Named, stage: str) -> tuple[str, str, str]:
    """The catalog's names of ``stage``'s baseline (old) and candidate (new) variants, and of qsa's top-k
    variant of the cluster launch (the engine's sm_90 kernel): the variants this policy chooses between."""
    cluster = catalog.with_launch(stage, "cluster") if stage == "topk" else ""
    return catalog.with_role(stage, "baseline"), catalog.with_role(stage, "candidate"), cluster


def _decode_scorer(catalog: Named, cc: int, halve: bool | None) -> tuple[str, str]:
    sm = f"sm_{cc}"
    old, new, _ = _named(catalog, "scores")
    if cc != NEW_KERNELS_CC:
        note = f"; {ENV_SCORES_HALVE}={int(halve)} has no effect off sm_{NEW_KERNELS_CC}" if halve is not None else ""
        return old, f"{sm} decode: old multi scorer (the halving scorer defaults on sm_{NEW_KERNELS_CC} only{note})"
    if halve is False:
        return old, f"{ENV_SCORES_HALVE}=0 keeps the old multi scorer on {sm}"
    return new, f"{sm} decode: new halving scorer (default on {sm}; {ENV_SCORES_HALVE}=0 keeps multi)"


def _decode_topk(catalog: Named, cc: int, split: bool | None, cluster_refusal: str | None) -> tuple[str, str]:
    sm = f"sm_{cc}"
    old, new, cluster = _named(catalog, "topk")
    if cc >= CLUSTER_MIN_CC:
        if cluster_refusal is None:
            note = f"; {ENV_TOPK_SPLIT}={int(split)} does not apply" if split is not None else ""
            return cluster, f"{sm} decode: cluster top-k (sm_{CLUSTER_MIN_CC}+{note})"
        # The call does not fit the cluster kernel: the rule of a card without clusters (not sm_75).
        if split is True:
            return new, f"{sm} decode: {cluster_refusal}; {ENV_TOPK_SPLIT}=1 turns the split top-k on"
        return old, f"{sm} decode: {cluster_refusal}; the old wide top-k (the split defaults on sm_75 only)"
    if split is True:
        return new, f"{ENV_TOPK_SPLIT}=1 turns the split top-k on for {sm}"
    if split is False:
        return old, f"{ENV_TOPK_SPLIT}=0 keeps the old wide top-k on {sm}"
    if cc == NEW_KERNELS_CC:
        return new, f"{sm} decode: new split top-k (default on {sm}; {ENV_TOPK_SPLIT}=0 keeps wide)"
    return old, f"{sm} decode: old wide top-k (the split defaults on sm_{NEW_KERNELS_CC} only)"


def dispatch(catalog: Named, cc: int, kind: str, env: Mapping[str, str],
             cluster_refusal: str | None = None) -> Dispatch:
    """The variants of ``catalog`` the engine runs for a ``kind`` call ("decode" or "prompt") on an sm_``cc``
    card (its roles' variants, and qsa's cluster top-k).

    ``env`` is read for ``STRATA_SCORES_HALVE`` and ``STRATA_TOPK_SPLIT`` (a run's: its switches, read once
    where its session opened); both are validated even where they do not decide, so a typo never passes silently.
    ``cluster_refusal`` says why the cluster top-k cannot take this call (its capacity does not fit the
    card's shared memory): the decode top-k then falls back to the rule of a card without clusters.
    """
    _check_cc(cc)
    if kind not in CALL_KINDS:
        raise ValueError(f"call kind must be one of {', '.join(CALL_KINDS)} (got {kind!r})")
    halve = _switch(env, ENV_SCORES_HALVE)
    split = _switch(env, ENV_TOPK_SPLIT)
    if kind == "prompt":
        why = "prompt call: the reference kernel (the seed's new kernels are decode-path only)"
        return Dispatch(catalog.with_role("scores", "reference"), catalog.with_role("topk", "reference"),
                        {"scores": why, "topk": why})
    scores, scores_why = _decode_scorer(catalog, cc, halve)
    topk, topk_why = _decode_topk(catalog, cc, split, cluster_refusal)
    reasons = {"scores": scores_why, "topk": topk_why}
    by_queries: tuple[str, ...] = ()
    if scores == catalog.with_launch("scores", "halving"):
        by_queries = tuple(fastest_decode_scorer(catalog, q) for q in range(1, len(FASTEST_DECODE_SCORERS) + 1))
        counts = ", ".join(f"{q} {name}" for q, name in enumerate(by_queries, 1))
        reasons["scores_by_queries"] = (f"sm_{cc} decode by queries: {counts} (the fastest at each count on an H200; "
                                        f"no sm_{cc} card measured)")
    return Dispatch(scores, topk, reasons, by_queries)


def programmatic_launches(compute_capability: int, env: Mapping[str, str]) -> bool:
    """Whether the split's launches 2-5, and the window's cluster top-k after its scorer, are programmatic
    dependent launches: on sm_90 and newer, unless ``QSA_PDL=0``. Their bits cannot differ (the kernels wait
    before touching their call's scratch or the scores)."""
    return compute_capability >= PDL_MIN_CC and _switch(env, ENV_PDL) is not False


def cluster_wide(env: Mapping[str, str]) -> bool | None:
    """``QSA_CLUSTER_WIDE``: True, the cluster top-k takes 16 CTAs a query wherever such clusters run; False,
    always 8; None (unset), the launcher's rule (launch/topk_cluster.py). Their bits cannot differ."""
    return _switch(env, ENV_CLUSTER_WIDE)
