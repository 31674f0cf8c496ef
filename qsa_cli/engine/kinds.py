"""The variants every engine checkout may have (docs/spec.md section 8): ``NAME.KIND`` for a checkout named
NAME. Plain data, read by the rest of the engine package (attach.py makes a run's catalog entries of them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineKind:
    """A variant every engine checkout may have (docs/spec.md section 8): its stage, the host functions it
    calls (a checkout without one lacks the variant), the CPU model its bits must equal, and whether it
    follows the checkout's decode scorer in a window."""

    stage: str
    functions: tuple[str, ...]
    model: str
    in_window: bool = False
    exact: bool = True


# NAME.KIND for an engine checkout named NAME. "scores": qsa_block_scores with no active count (the
# decode scorer); "scores-ref": with an active count of max_blocks (its per-block reference kernel);
# "topk": qsa_block_topk, what the engine dispatches; the others, one function each.
ENGINE_KINDS: dict[str, EngineKind] = {
    "scores": EngineKind("scores", ("qsa_block_scores",), "butterfly"),
    "scores-ref": EngineKind("scores", ("qsa_block_scores",), "butterfly"),
    "topk": EngineKind("topk", ("qsa_block_topk",), "reference", in_window=True),
    "topk-ref": EngineKind("topk", ("qsa_block_topk_ref",), "reference"),
    "topk-split": EngineKind("topk", ("qsa_topk_split_bytes", "qsa_block_topk_split"), "split", in_window=True),
    "topk-cluster": EngineKind("topk", ("qsa_block_topk_cluster",), "cluster", in_window=True),
}
ENGINE_SCORER = "scores"  # the kind an engine's top-k kinds follow in a window


def engine_kinds(stage: str) -> tuple[str, ...]:
    """The engine variants of ``stage``."""
    return tuple(k for k, v in ENGINE_KINDS.items() if v.stage == stage)


@dataclass(frozen=True)
class EngineEntry:
    """Where an engine variant's code is: the checkout's name (engine.attach), the kind, and the
    ``STRATA_*`` switches it runs under (read once per process by the engine: a child process runs it)."""

    checkout: str
    kind: str
    switches: tuple[tuple[str, str], ...] = ()
