"""The variants every engine checkout may have (docs/spec.md section 8): ``NAME.KIND`` for a checkout named
NAME. Plain data, read by the rest of the engine package (attach.py makes a run's catalog entries of them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineKind:
    """A variant every engine checkout may have (docs/spec.md section 8): its stage, the host paths it calls
    (engine/checkout.py's HOST_PATHS: functions and optional parameters; a checkout without one lacks the
    variant), the CPU model its bits must equal, whether it follows the checkout's decode scorer in a window,
    and whether it is bitwise at all (``exact``; False: the engine documents another arithmetic).

    ``implies``: the engine's switches its path is taken under (set in the child process it runs in, so that
    the name means the path); ``past_cluster``: a path of qsa_block_topk that the cluster kernel, dispatched
    first, hides on a card that runs it, so that ``STRATA_QSA_CLUSTER=0`` is implied there too; ``decode_only``:
    a top-k path the engine takes for decode calls only (no active count), so a prompt call is refused."""

    stage: str
    functions: tuple[str, ...]
    model: str
    in_window: bool = False
    exact: bool = True
    implies: tuple[tuple[str, str], ...] = ()
    past_cluster: bool = False
    decode_only: bool = False


# NAME.KIND for an engine checkout named NAME. "scores": qsa_block_scores with no active count (the
# decode scorer); "scores-ref": with an active count of max_blocks (its per-block reference kernel);
# "scores-dx": with no active count and decode_dx = true (the shuffle-free decode scorer); "scores-tc":
# qsa_block_scores_tc, the TF32 tensor-core scorer (not bitwise); "topk": qsa_block_topk, what the engine
# dispatches; "topk-multi": qsa_block_topk with a multi_scratch (several CTAs a query); the others, one
# function each.
ENGINE_KINDS: dict[str, EngineKind] = {
    "scores": EngineKind("scores", ("qsa_block_scores",), "butterfly"),
    "scores-ref": EngineKind("scores", ("qsa_block_scores",), "butterfly"),
    "scores-dx": EngineKind("scores", ("qsa_block_scores.decode_dx",), "butterfly",
                            implies=(("STRATA_SCORES_DX", "1"),)),
    "scores-tc": EngineKind("scores", ("qsa_block_scores_tc",), "butterfly", exact=False),
    "topk": EngineKind("topk", ("qsa_block_topk",), "reference", in_window=True),
    "topk-ref": EngineKind("topk", ("qsa_block_topk_ref",), "reference"),
    "topk-split": EngineKind("topk", ("qsa_topk_split_bytes", "qsa_block_topk_split"), "split", in_window=True),
    "topk-cluster": EngineKind("topk", ("qsa_block_topk_cluster",), "cluster", in_window=True),
    "topk-multi": EngineKind("topk", ("qsa_topk_multi_scratch_ints", "qsa_block_topk.multi_scratch"), "reference",
                             in_window=True, implies=(("STRATA_TOPK_MULTI", "1"),), past_cluster=True,
                             decode_only=True),
}
ENGINE_SCORER = "scores"  # the kind an engine's top-k kinds follow in a window


def engine_kinds(stage: str) -> tuple[str, ...]:
    """The engine variants of ``stage``."""
    return tuple(k for k, v in ENGINE_KINDS.items() if v.stage == stage)


@dataclass(frozen=True)
class EngineEntry:
    """Where an engine variant's code is: the checkout's name (engine.attach), the kind, and the
    ``STRATA_*`` switches it runs under (read once per process by the engine: a child process runs it),
    those its name gives and those its kind implies, sorted."""

    checkout: str
    kind: str
    switches: tuple[tuple[str, str], ...] = ()
