"""The one runner of every stage: what a stage's run is, written once; a stage says only what differs.

``run_stage`` runs a stage's variants on the same inputs. Each variant's first call writes an output
poisoned before it, between guard zones; its timed calls follow (the clocks read around them), then its
integrity rows (stages/common.py, Integrity); an engine variant that refuses the call is noted, not run.
Then the stage's reference points are timed beside the variants, and the outputs are checked bit for
bit: every variant against the reference and against the CPU model, and the roles' baseline and
candidate (and any other pairs a run names) against each other. Where either side of a comparison is
declared not bitwise (catalog.Variant.exact), it is measured instead (the stage's ``measure``: an
Agreement row, model/agreement.py), never a bitwise pass or failure.

A ``Stage`` (stages/scores.py, topk.py, window.py) is one case of one stage: its inputs and how they are
placed and guarded, how a variant is launched (a kernel, or the CPU model of its arithmetic), the CPU
model every variant must equal, how a difference is described, and its reference points.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..core.errors import EngineRefused
from ..core.integrity import GuardedBuffers
from ..core.progress import Progress, no_progress
from ..record.schema import Agreement, Measurement, ScoreErrors, SelectionAgreement
from ..timing import Launch
from .common import Integrity, Measurer, StageOutcome, array_module, bitwise_check, to_host


class Runnable(Protocol):
    """What a stage runs: a variant (catalog.Variant), or the window's pair of them."""

    @property
    def name(self) -> str: ...

    @property
    def exact(self) -> bool: ...  # False: declared not bitwise, measured instead


@dataclass
class Placed:
    """A stage's arrays between guard zones: each input with the host array it was copied from (what the
    integrity rows watch) and the host arrays' digests (inputs.TopkInputs.digests), the output the variants
    write, and how to poison it again before a call."""

    inputs: dict[str, tuple[Any, np.ndarray]]
    digests: dict[str, str]
    output: Any
    repoison: Callable[[], None]


class Stage(Protocol):
    """One case of one stage: what differs between the stages (the runner does the rest)."""

    name: str  # the record's stage
    model_name: str  # what the CPU model's output is called (record/vocabulary.py)
    bytes_read: int | None  # a measurement's bytes read, where its GB/s means something

    def case(self, l2: str) -> dict[str, Any]:
        """The case the rows belong to (stages/common.call_case)."""

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """Where the stage's arrays and launches live (the window: a non-blocking stream of its own)."""

    def place(self, buffers: GuardedBuffers) -> Placed:
        """The inputs copied into ``buffers`` and the output carved from them, poisoned."""

    def launch(self, variant: Any, buffers: GuardedBuffers, on_gpu: bool) -> Launch:
        """What runs ``variant`` on the placed arrays: its kernels, or its CPU model on the CPU backend.
        EngineRefused when an engine variant does not take the call."""

    def host(self, output: Any) -> np.ndarray:
        """A host copy of the output."""

    def model(self) -> np.ndarray:
        """The CPU model's output on the inputs: the bits every variant must give."""

    def describe(self, a: np.ndarray, b: np.ndarray) -> str:
        """Where two outputs first differ, and how."""

    def measure(self, subject: np.ndarray, against: np.ndarray) -> tuple[ScoreErrors | None, SelectionAgreement | None]:
        """How far ``subject``'s output is from ``against``'s (an inexact variant's): the scores' errors, the
        selection's agreement, each None where the stage has no such output."""

    def output_hash(self, output: np.ndarray) -> str | None:
        """The hash a parity row keeps of an output (None: the stage keeps none)."""

    def reference_points(self, measurer: Measurer, case: dict[str, Any], on_gpu: bool) -> Iterator[Measurement | None]:
        """Timed beside the variants, never checked (the read floor, cupy.argpartition)."""


class StageBase:
    """The defaults most stages keep."""

    bytes_read: int | None = None

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def host(self, output: Any) -> np.ndarray:
        return to_host(output)

    def output_hash(self, output: np.ndarray) -> str | None:
        return None

    def reference_points(self, measurer: Measurer, case: dict[str, Any], on_gpu: bool) -> Iterator[Measurement | None]:
        return iter(())


def poisoned(xp: Any, output: Any, poison: np.ndarray) -> Callable[[], None]:
    """What writes ``poison`` into ``output`` again (before a variant's first call and its last timed one)."""
    placed = xp.asarray(poison)
    return lambda: xp.copyto(output, placed)


def run_stage(stage: Stage, variants: Sequence[Runnable], measurer: Measurer, roles: Mapping[str, str] | None,
              check_model: bool = True, same_bits: tuple[tuple[str, str], ...] = (),
              progress: Progress = no_progress) -> StageOutcome:
    """Every variant of ``variants`` on the stage's inputs, the reference points, then the checks.

    ``roles`` name the reference every variant is checked against (when it ran) and the baseline and
    candidate checked against each other (None: the stage has no roles, as the window's pairs); with
    ``check_model`` every variant is checked against the CPU model too. ``same_bits``: (subject, against)
    pairs checked against each other besides (qsa compare's candidate against its base). ``progress`` is
    told before each variant runs."""
    on_gpu = measurer.on_gpu
    case = stage.case(measurer.l2)
    out = StageOutcome()
    with stage.scope():
        buffers = GuardedBuffers(array_module(on_gpu))
        placed = stage.place(buffers)
        integrity = Integrity(buffers, placed.inputs, placed.digests)
        for i, v in enumerate(variants):
            progress(i, len(variants), f"{stage.name} {v.name}")
            try:
                launch = stage.launch(v, buffers, on_gpu)
                placed.repoison()
                launch()
            except EngineRefused as refused:
                out.refused(v.name, refused)
                continue
            out.outputs[v.name] = stage.host(placed.output)
            timed = measurer.measure(stage.name, v.name, case, launch, bytes_read=stage.bytes_read,
                                     before_last=placed.repoison)
            out.add(timed)
            # what the last timed call left (a deferred timer's calls are still to come: none to check)
            last = stage.host(placed.output) if timed is not None and not measurer.deferred else None
            out.parity += integrity.checks(stage.name, case, v.name, out.outputs[v.name], last, stage.describe)
        if measurer.reference_points:
            for point in stage.reference_points(measurer, case, on_gpu):
                out.add(point)
    inexact = frozenset(v.name for v in variants if not v.exact)
    _checks(stage, case, out, tuple(v.name for v in variants), inexact, roles, check_model, same_bits)
    return out


def _checks(stage: Stage, case: dict[str, Any], out: StageOutcome, names: tuple[str, ...], inexact: frozenset[str],
            roles: Mapping[str, str] | None, check_model: bool, same_bits: tuple[tuple[str, str], ...]) -> None:
    """The checks of the outputs into ``out``: every variant against the reference and the CPU model, then the
    pairs; bit for bit, or measured where either side is ``inexact``. A stage that hashes its outputs keeps
    every variant's hashes in each bitwise row (a row against the CPU model: the variant's and the model's)."""
    ran = out.ran(names)
    hashes = {v: h for v in ran if (h := stage.output_hash(out.outputs[v])) is not None}

    def check(subject: str, against: str, kept: dict[str, str]) -> None:
        if subject in inexact or against in inexact:
            errors, selection = stage.measure(out.outputs[subject], out.outputs[against])
            out.agreements.append(Agreement(stage.name, dict(case), subject, against, errors, selection))
        else:
            out.parity.append(bitwise_check(stage.name, case, subject, against, out.outputs, stage.describe, kept))

    if roles and roles["reference"] in ran:
        reference = roles["reference"]
        for v in ran:
            if v != reference:
                check(v, reference, hashes)
    if check_model:
        model = stage.model_name
        out.outputs[model] = stage.model()
        model_hash = stage.output_hash(out.outputs[model])
        for v in ran:
            check(v, model, {v: hashes[v], model: model_hash} if model_hash is not None else {})
    pairs = (((roles["candidate"], roles["baseline"]),) if roles else ()) + same_bits
    for subject, against in dict.fromkeys(pairs):
        if subject in ran and against in ran:
            check(subject, against, hashes)
