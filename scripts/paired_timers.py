"""qsa's timer and a reference timing the same calls in one process, on the same buffers, in alternating
rounds: a qsa command (or -c CODE) run in this process with qsa's timing patched, for scripts/agreement.py.

Why in one process: a call whose launches run one after another (the split top-k with ``QSA_PDL=0``) sits on
levels about 1 µs apart that change from one process (one placement of its buffers) to the next and, less, within
one; a short call (6 µs) moves by a few tenths. Two processes' medians are then two draws, whichever timer is
right; rounds of each in turn, on the buffers one command placed, meet the same levels (docs/timing.md).

- ``nvbench`` (QSA_ARGS with ``--timer nvbench``): each launcher's nvbench run becomes ROUNDS benchmarks; each
  first times the launcher by qsa's timer (``--l2 dirty``, nvbench's cold state: SAMPLES samples, its usual
  warm-up and batches), then by nvbench's cold measurement (SAMPLES samples, no batch). OUT.json holds both
  timers' samples a round, per launcher; the record holds the last round's nvbench samples.
- ``ncu`` (run under ``ncu --profile-from-start off``): every measurement of qsa's timer becomes ROUNDS rounds of
  SAMPLES samples outside the profiler's range, each followed by PROFILED samples inside it
  (``cudaProfilerStart``/``Stop``; no warm-up, no batch), which Nsight Compute profiles. The record (or the
  printed samples, for -c CODE) holds the unprofiled samples of every round; OUT.json says how many rounds and
  samples were taken.

Usage: python3 scripts/paired_timers.py {nvbench|ncu} ROUNDS SAMPLES PROFILED OUT.json -- QSA_ARGS... | -c CODE
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from call_trace import run_qsa  # a script beside this one


class _TimedFirst:
    """``cuda.bench`` as NvbenchTimer registers its benchmarks with it, each benchmark's function preceded by
    the next of ``before`` (they come in the order the benchmarks are registered)."""

    def __init__(self, bench: Any, before: list[Callable[[], None]]) -> None:
        self._bench, self._before = bench, iter(before)

    def register(self, benchmark: Callable[[Any], None]) -> Any:
        first = next(self._before)

        def both(state: Any) -> None:
            first()
            benchmark(state)

        return self._bench.register(both)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bench, name)


def pair_with_nvbench(rounds: int, samples: int, out: Path) -> None:
    """NvbenchTimer.complete replaced: ``rounds`` rounds a launcher, qsa's samples then nvbench's, into ``out``."""
    from qsa_cli import nvbench_timer
    from qsa_cli.timing import DeviceTimer

    complete = nvbench_timer.NvbenchTimer.complete

    def paired(self: nvbench_timer.NvbenchTimer, clocks: Any) -> None:
        ours = DeviceTimer(l2=nvbench_timer.L2_STATE, warmup=self.warmup)
        launchers = self.queued
        qsa_samples: dict[str, list[list[float]]] = {item.name: [] for item in launchers}
        nvbench_rounds: dict[str, list[nvbench_timer._Queued]] = {item.name: [] for item in launchers}
        before = []
        for r in range(rounds):
            for item in launchers:
                job = dataclasses.replace(item.job, iters=samples)
                last = r == rounds - 1  # the record's measurement: the last round's
                nvbench_rounds[item.name].append(nvbench_timer._Queued(
                    f"round {r}: {item.name}", job, item.measurement if last else job.measurement(self.warmup)))
                before.append(lambda item=item, job=job: qsa_samples[item.name].append(
                    ours.measure(job.launch, samples, synchronizes=job.synchronizes).samples_us))
        # registered round by round, each round's launchers in order: as ``before`` was made
        self.queued = [nvbench_rounds[item.name][r] for r in range(rounds) for item in launchers]
        self.batched, self.bench = False, _TimedFirst(self.bench, before)
        complete(self, clocks)
        calls = [{"name": item.name, "variant": item.job.variant, "case": item.job.case,
                  "qsa_us": qsa_samples[item.name],
                  "nvbench_us": [q.measurement.samples_us for q in nvbench_rounds[item.name]]}
                 for item in launchers]
        out.write_text(json.dumps({"rounds": rounds, "samples": samples, "calls": calls}) + "\n")

    nvbench_timer.NvbenchTimer.complete = paired


# The hold before a profiled sample: ncu serialises the profiled stamp behind it, so it always times out; short,
# that costs nothing (a profiled sample is not judged by its hold, nor measured again)
PROFILED_HOLD_NS = 1_000_000


def pair_with_ncu(rounds: int, samples: int, profiled: int, out: Path) -> None:
    """DeviceTimer.measure replaced: ``rounds`` rounds of ``samples`` unprofiled samples, each followed by
    ``profiled`` samples in the profiler's range (no warm-up, no batch); the unprofiled ones are the
    measurement's."""
    import cupy

    from qsa_cli import timing

    measure = timing.DeviceTimer.measure
    measured: list[int] = []

    def paired(self: timing.DeviceTimer, launch: Any, iters: Any, before_last: Any = None,
               synchronizes: bool = False) -> timing.Timed:
        kept: list[timing.Timed] = []
        for _ in range(rounds):
            kept.append(measure(self, launch, samples, before_last, synchronizes))
            hold_timeout_ns, self.hold_timeout_ns = self.hold_timeout_ns, PROFILED_HOLD_NS
            cupy.cuda.runtime.deviceSynchronize()
            cupy.cuda.runtime.profilerStart()
            try:
                timing.sample(self, launch, profiled, warmup=0, before_last=before_last)
                cupy.cuda.runtime.deviceSynchronize()
            finally:
                cupy.cuda.runtime.profilerStop()
                self.hold_timeout_ns = hold_timeout_ns
        measured.append(rounds * samples)
        out.write_text(json.dumps({"rounds": rounds, "samples": samples, "profiled": profiled,
                                   "measurements": len(measured)}) + "\n")
        return dataclasses.replace(kept[-1], samples_us=[s for timed in kept for s in timed.samples_us])

    timing.DeviceTimer.measure = paired


def main(argv: list[str]) -> int:
    if "--" not in argv or len(argv[:argv.index("--")]) != 5 or argv[0] not in ("nvbench", "ncu"):
        raise SystemExit(__doc__)
    (mode, rounds, samples, profiled, out), qsa_args = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    if mode == "nvbench":
        pair_with_nvbench(int(rounds), int(samples), Path(out))
    else:
        pair_with_ncu(int(rounds), int(samples), int(profiled), Path(out))
    return run_qsa(qsa_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
