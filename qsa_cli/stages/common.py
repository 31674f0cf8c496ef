"""What every stage runner shares: timing a variant with the clocks read around it, and parity rows."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.geometry import STEP_NKV
from ..core.integrity import GuardedBuffers, Pristine, digest
from ..inputs import ScorerInputs
from ..launch.shape import launch_records
from ..record.assembly import CaseRows
from ..record.schema import Measurement, ParityCheck
from ..record.vocabulary import DEFAULT_KEYS, GUARD_ZONES, INPUTS, INPUTS_HASH, OUTPUT_HASH, last_call
from ..timing import AUTO, ClockSource, DeviceTimer, HostTimer, Iters, Launch, StoppingRule, Timer, TimingJob


def call_case(steps: np.ndarray, capacity: int, kind: str, l2: str, **extra: Any) -> dict[str, Any]:
    """The case a measurement or check belongs to: the call's context (its last query's n_kv), queries,
    capacity, kind and L2 state, plus what the stage adds (the top-k's score set, the scorer's keys kind)."""
    return {"ctx": int(steps[:, STEP_NKV].max()), "nq": int(steps.shape[0]), "capacity": capacity, "kind": kind,
            **extra, "l2": l2}


def keys_case(inputs: ScorerInputs) -> dict[str, str]:
    """A scorer case's keys kind, named only when not the synthetic keys (results.CASE_FIELDS)."""
    return {} if inputs.keys == DEFAULT_KEYS else {"keys": inputs.keys}


def decode_call_case(inputs: ScorerInputs, l2: str) -> dict[str, Any]:
    """The case of a decode call on ``inputs``' keys and queries (a scorer's, a window's)."""
    return call_case(inputs.steps, inputs.capacity, "decode", l2, **keys_case(inputs))


@dataclass
class StageOutcome(CaseRows):
    """A stage's results on one case: its rows for the record, and every variant's output (for --dump)."""

    outputs: dict[str, np.ndarray] = field(default_factory=dict)

    def ran(self, variants: tuple[str, ...]) -> tuple[str, ...]:
        """Those of ``variants`` that gave an output (an engine variant may refuse a call)."""
        return tuple(v for v in variants if v in self.outputs)

    def refused(self, variant: str, why: Exception) -> None:
        self.notes.append(f"{variant} not run: {why}")

    def failures(self) -> list[str]:
        """Each parity row that differs, a line (what a selftest's row says of its first)."""
        return [f"{p.key}: {p.subject} vs {p.against}: {p.detail}" for p in self.parity if not p.equal]

    def add(self, measurement: Measurement | None) -> None:
        if measurement is not None:
            self.measurements.append(measurement)

    def extend(self, other: CaseRows, prefix: str = "") -> None:
        """``other``'s rows after these, and its outputs (a stage's, not a child's record's rows) named with
        ``prefix``."""
        super().extend(other)
        if isinstance(other, StageOutcome):
            self.outputs.update({prefix + k: v for k, v in other.outputs.items()})


@dataclass
class Measurer:
    """Times the variants of a run by its one ``timer`` (qsa's on the GPU, the host's for the CPU backend's models,
    or nvbench's), with the clocks read around each measurement (nvbench's: around its one run): ``iters``
    samples, or with ITERS ``auto`` as many as ``rule`` takes. ``gpu``: the GPU's own timer, whose read floor every timer times there (None: the CPU
    backend). A deferred timer's (nvbench's) measurements are pending until ``complete``, the end of the run's
    cases (Session.measuring).

    With ``iters == 0`` nothing is timed: the runners still run every variant once and check parity.
    """

    iters: Iters
    timer: Timer = field(default_factory=HostTimer)
    clocks: ClockSource | None = None
    rule: StoppingRule = field(default_factory=StoppingRule)
    gpu: DeviceTimer | None = None
    # the reference points timed beside the variants (the read floor, cupy.argpartition): not by a switched run's
    # child, whose run times them itself
    reference_points: bool = True

    @property
    def l2(self) -> str:
        return self.timer.l2

    @property
    def on_gpu(self) -> bool:
        return self.gpu is not None

    @property
    def deferred(self) -> bool:
        """Whether a measurement is timed after the stage has run (in the timer's batch), so that no last timed
        call is there to check as the stage runs."""
        return self.timer.deferred

    def measure(
        self,
        stage: str,
        variant: str,
        case: dict[str, Any],
        run: Launch | Callable[[], object],
        *,
        bytes_read: int | None = None,
        before_last: Launch | None = None,
        synchronizes: bool = False,
    ) -> Measurement | None:
        """``variant``'s measurement on ``case``: timed now, or a deferred timer's, its samples to come in its
        batch (``complete``); None: this run times nothing (ITERS 0)."""
        if self.iters == 0:
            return None
        job = TimingJob(stage, variant, dict(case), run, self.rule if self.iters == AUTO else self.iters,
                        bytes_read, before_last, synchronizes, launch_records(run))
        return self.timer.time(job, self.clocks)

    def complete(self) -> None:
        """Every measurement the timer has pending timed (a deferred timer's one batch)."""
        self.timer.complete(self.clocks)


def bitwise_check(
    stage: str,
    case: dict[str, Any],
    subject: str,
    against: str,
    outputs: dict[str, np.ndarray],
    describe_difference: Callable[[np.ndarray, np.ndarray], str],
    hashes: dict[str, str] | None = None,
) -> ParityCheck:
    """``bytes ==`` of two whole outputs (unwritten entries keep their poison, so they count too)."""
    a, b = outputs[subject], outputs[against]
    equal = a.shape == b.shape and a.tobytes() == b.tobytes()
    if equal:  # every row is; counted row by row only where they differ (topk-parity --selftest checks 832 pairs)
        rows_equal = a.shape[0]
    else:
        rows_equal = sum(x.tobytes() == y.tobytes() for x, y in zip(a, b)) if a.shape == b.shape else 0
    return ParityCheck(
        stage=stage,
        case=dict(case),
        subject=subject,
        against=against,
        equal=equal,
        detail="" if equal else describe_difference(a, b),
        hashes=hashes or {},
        rows_equal=int(rows_equal),
        rows=int(a.shape[0]),
    )


def array_module(on_gpu: bool) -> Any:
    """CuPy for the GPU backend, NumPy for the CPU backend's models."""
    if on_gpu:
        import cupy

        return cupy
    return np


def to_host(a: Any) -> np.ndarray:
    """A host copy of an array of either backend."""
    return a.get() if hasattr(a, "get") else np.array(a)


class Integrity:
    """The integrity checks of one stage's run (qsa_cli/core/integrity.py): the stage's buffers, its inputs
    (each placed array with the host array it was copied from) and the host arrays' digests, and the rows each
    variant's run gets. Whatever a variant breaks is restored after its check, so the next one is judged on
    its own."""

    def __init__(self, buffers: GuardedBuffers, inputs: dict[str, tuple[Any, np.ndarray]],
                 digests: dict[str, str]) -> None:
        self.buffers = buffers
        self.inputs = inputs
        self.pristine = Pristine(buffers.xp, {name: placed for name, (placed, _) in inputs.items()})
        self.inputs_hash = hashlib.sha256("".join(f"{k}={v};" for k, v in sorted(digests.items())).encode()).hexdigest()

    def checks(self, stage: str, case: dict[str, Any], variant: str, first: np.ndarray, last: np.ndarray | None,
               describe_difference: Callable[[np.ndarray, np.ndarray], str]) -> list[ParityCheck]:
        """After ``variant``'s runs: its guard zones intact, its inputs unchanged and (when it was timed)
        its last timed call's output equal to its first."""
        breaches = self.buffers.breaches()
        moved = self.pristine.changed({name: placed for name, (placed, _) in self.inputs.items()})
        for name in moved:
            placed, host = self.inputs[name]
            placed[...] = self.buffers.xp.asarray(host)
        rows = [
            ParityCheck(stage, dict(case), variant, GUARD_ZONES, not breaches, "; ".join(breaches)),
            ParityCheck(stage, dict(case), variant, INPUTS, not moved,
                        f"{', '.join(moved)} changed by the run" if moved else "",
                        hashes={INPUTS_HASH: self.inputs_hash, OUTPUT_HASH: digest(first)}),
        ]
        if last is not None:
            outputs = {last_call(variant): last, variant: first}
            rows.append(bitwise_check(stage, case, last_call(variant), variant, outputs, describe_difference))
        return rows
