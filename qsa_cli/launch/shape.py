"""Launch shapes: how a variant's kernels are launched, on which cards, and which calls they refuse.

Every catalog entry (qsa_cli/catalog.py) names its variant's shape. A shape carries its own refusal: the
oldest card it runs on (``min_cc``: an older card runs none of its variants, and no note says so), and a
call it cannot take on a card it runs on (``refusal``: the variant is left out of that call, and the
record's notes say why). It builds the launch: the kernels, grid, block and shared memory resolved once,
and a callable returned that only enqueues launches on the current CuPy stream (no host sync, no
allocation), so a CUDA graph can capture it and replay it while the context grows.

A new shape is one module with its shape object, and the catalog entries that name it
(docs/adding-a-variant.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.integrity import Allocator
from ..inputs import ScorerInputs
from ..record.schema import KernelLaunchRecord
from ..timing import Launch


@dataclass(frozen=True)
class KernelCall:
    """One kernel launch a shape enqueues for a call, as the record names it (``Measurement.launches``)."""

    kernel: str  # the name the spec and the catalog give it (a template instance: ``name<8>``)
    grid: tuple[int, ...]
    block: tuple[int, ...]
    cluster: int = 0  # CTAs a thread-block cluster (0: none)
    shared_bytes: int = 0  # dynamic shared memory a CTA
    programmatic: bool = False  # a programmatic dependent launch: it may start as the grid before it drains

    def to_dict(self) -> KernelLaunchRecord:
        return {"kernel": self.kernel, "grid": list(self.grid), "block": list(self.block), "cluster": self.cluster,
                "shared_bytes": self.shared_bytes, "programmatic": self.programmatic}


@dataclass(frozen=True)
class Described:
    """A launch and the kernel launches it enqueues, in order (what a record says ran)."""

    launch: Launch
    calls: tuple[KernelCall, ...]

    def __call__(self) -> None:
        self.launch()


def kernel_calls(launch: object) -> tuple[KernelCall, ...] | None:
    """What ``launch`` enqueues when qsa's launcher built it (a Described, or a TopkLaunch that knows); None
    for any other (an engine checkout's host functions, a model, a library)."""
    calls = getattr(launch, "calls", None)
    return calls if isinstance(calls, tuple) else None


def launch_records(launch: object) -> list[KernelLaunchRecord] | None:
    """``kernel_calls(launch)`` as the record holds them."""
    calls = kernel_calls(launch)
    return None if calls is None else [call.to_dict() for call in calls]


@dataclass(frozen=True)
class Card:
    """What a shape's refusal reads of a device (the record's device fields)."""

    compute_capability: int  # major * 10 + minor
    shared_optin_bytes: int  # the opt-in shared memory a CTA may have


class LaunchShape(ABC):
    """What every shape says of itself; a shape of one stage builds as ScorerShape or TopkShape does."""

    name: str  # what the catalog finds a variant of this shape by (Catalog.with_launch)
    title: str  # how the record's notes name a variant of this shape left out of a call
    stage: str
    min_cc: int = 0  # the oldest card (major * 10 + minor) it runs on
    engine: bool = False  # an engine checkout's host functions: its variants carry an EngineEntry

    def refusal(self, card: Card, max_blocks: int, active_blocks: int = 0) -> str | None:
        """Why a call of ``max_blocks`` (a prompt call's ``active_blocks``) cannot run on ``card``, or None."""
        return None

    def __repr__(self) -> str:
        return f"<{self.stage} launch shape {self.name!r}>"


class ScorerShape(LaunchShape):
    stage = "scores"

    @abstractmethod
    def build(self, variant: Any, code: Callable[[], Any], dev: ScorerInputs, out: Any) -> Launch:
        """``variant`` (catalog.Variant) on ``dev`` (device arrays) into ``out`` (float32 [nq, max_blocks],
        poisoned by the caller): blocks 0..n_bid of each query's row written, no others. ``code()`` gives the
        variant's compiled kernels (kernels.Module) or its engine checkout's loaded library; it is called
        once the arrays passed their checks, so a bad argument is refused before any device is touched."""


class TopkShape(LaunchShape):
    stage = "topk"

    @abstractmethod
    def build(self, variant: Any, code: Callable[[], Any], scores: Any, steps: Any, ids: Any, *,
              active_blocks: int, scratch: Allocator | None, switches: Mapping[str, str],
              follows_kernel: bool = False) -> Launch:
        """``variant`` (``code()`` as for a scorer) on ``scores`` (float32 [nq, max_blocks]) and ``steps``
        (int32 [nq, 4]) into ``ids`` (int32 [nq, SELECT_CAP], poisoned by the caller): each query's entries
        0..width-1.

        ``active_blocks`` is a prompt call's largest n_bid + 1 (0: a decode call, sized by max_blocks);
        ``scratch`` allocates any scratch (the stages give guarded buffers; None: plain CuPy arrays);
        ``switches``: the run's environment switches (dispatch.SWITCHES), read once where it began;
        ``follows_kernel``: the call comes right after a kernel in the stream (the window's scorer), so a shape
        whose first kernel waits for the grid before it (qsa_wait_prior_grid) may launch it as a programmatic
        dependent launch, which overlaps its start with that grid's end (dispatch.programmatic_launches)."""

    def scratch_bytes(self, variant: Any, code: Callable[[], Any], nq: int, blocks: int, sms: int) -> tuple[int, ...]:
        """The bytes of each scratch array ``build`` takes for a call of ``nq`` queries over ``blocks`` blocks a
        query (a prompt call's active blocks, else max_blocks) on a card of ``sms`` SMs: what a run's memory
        check weighs before it starts (core/memory.py). ``code()`` as for ``build``, called only by a shape
        whose code says its sizes. None by default."""
        return ()
