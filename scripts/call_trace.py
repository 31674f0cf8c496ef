"""The GPU's own timestamps of the calls qsa times: a qsa command run in this process with CUPTI's kernel activity
on (the cupti-python package), each kernel's start and end as the GPU recorded them, in the stream as qsa
queued it (no replay, no serialisation beyond the stream's own).

qsa's timer queues each sample behind a hold: [hold] [clock stamp] event, the call's kernels, event [clock stamp];
so the kernels between two clock stamps are one timed call (a batch's: BATCH_LAUNCHES calls). For each call of
``--launches`` kernels this writes its span (the first kernel's start to the last one's end), the sum of its
kernels' durations, the gaps between them, and the intervals from the start stamp to the call and from the call
to the end stamp, where qsa's events sit (lead and trail); scripts/agreement.py sets them beside qsa's samples of
the same calls and beside Nsight Compute's durations of the same kernels replayed one at a time. The calls another timer
timed in the same process (nvbench's, scripts/paired_timers.py) are summed up the same way (``unstamped``).

Usage: python3 scripts/call_trace.py TRACE.json LAUNCHES KERNEL_REGEX -- QSA_ARGS...
(QSA_ARGS: a measuring command with --json, e.g. topk-parity 524288 8 50 524288 0 --variants split --json r.json;
or -c CODE: Python that times its calls with qsa's DeviceTimer, as agreement.py's empty kernels)
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

STAMP = "clock_stamp_kernel"  # qsa's timer's stamps around each timed call (kernels/bench.cu)
K = TypeVar("K", bound=tuple)
Traced = tuple[str, int, int]  # a kernel of a CUPTI trace: its name, start and end (ns)


def bracketed_calls(kernels: Sequence[K], launches: int, pattern: str) -> list[tuple[K, list[K], K]]:
    """The timed calls among ``kernels`` (each a tuple whose first item is its name, in the order they ran), each
    with the stamps around it: the kernels between a hold's two stamps, its start's and its end's, where there are
    exactly ``launches`` and each matches ``pattern``. The stamps come in pairs, so what runs between one end and
    the next start (the next case's parity run) is no call, and a batch (BATCH_LAUNCHES calls in one pair) is none
    either."""
    matcher = re.compile(pattern)
    calls: list[tuple[K, list[K], K]] = []
    opened: K | None = None
    current: list[K] = []
    for kernel in kernels:
        if re.search(rf"\b{STAMP}\b", kernel[0]):
            if opened is None:
                opened, current = kernel, []
                continue
            if len(current) == launches and all(matcher.search(k[0]) for k in current):
                calls.append((opened, current, kernel))
            opened = None
        elif opened is not None:
            current.append(kernel)
    return calls


def stamped_calls(kernels: Sequence[K], launches: int, pattern: str) -> list[list[K]]:
    """The timed calls among ``kernels``: bracketed_calls without their stamps."""
    return [call for _, call, _ in bracketed_calls(kernels, launches, pattern)]


def calls_between_stamps(kernels: list[Traced], launches: int,
                         pattern: str) -> list[tuple[Traced, list[Traced], Traced]]:
    """The timed calls of a CUPTI trace (name, start, end) with their stamps: bracketed_calls in the order the
    kernels started."""
    return bracketed_calls(sorted(kernels, key=lambda k: k[1]), launches, pattern)


def unstamped_calls(kernels: list[tuple[str, int, int]], launches: int,
                    pattern: str) -> list[list[tuple[str, int, int]]]:
    """The calls of a trace that another timer timed (nvbench's cold samples, each behind its blocking kernel):
    runs of exactly ``launches`` kernels matching ``pattern``, each between kernels that do not, outside qsa's
    stamps (in the order the kernels started). Back-to-back calls (a warm-up, a batch) make a longer run: none."""
    matcher = re.compile(pattern)
    calls: list[list[tuple[str, int, int]]] = []
    run: list[tuple[str, int, int]] = []
    stamped = False
    for kernel in sorted(kernels, key=lambda k: k[1]):
        if re.search(rf"\b{STAMP}\b", kernel[0]):
            stamped = not stamped  # a start stamp, then its end stamp
        elif not stamped and matcher.search(kernel[0]):
            run.append(kernel)
            continue
        if len(run) == launches:
            calls.append(run)
        run = []
    return calls


# A summary's lists of a value per call, each with the key of its median (of each launch's, for a list of lists)
PER_CALL = {"span_us": "median_span_us", "kernels_sum_us": "median_kernels_sum_us", "kernel_us": "median_kernel_us",
            "gap_us": "median_gap_us", "lead_us": "median_lead_us", "trail_us": "median_trail_us"}


def medians(per_call: dict[str, list]) -> dict:
    """``per_call``'s lists (PER_CALL's keys) and the median of each: of a value, or of each launch's values."""
    found = {}
    for key, values in per_call.items():
        if values and isinstance(values[0], list):
            found[PER_CALL[key]] = [statistics.median(v) for v in zip(*values)]
        else:
            found[PER_CALL[key]] = statistics.median(values) if values else None
    return {"calls": len(next(iter(per_call.values()), [])), **per_call, **found}


def summary(calls: list[list[tuple[str, int, int]]]) -> dict:
    """Per call: its span, its kernels' summed durations, each kernel's duration and the gaps between them (µs);
    their medians."""
    return {**medians({"span_us": [(c[-1][2] - c[0][1]) / 1e3 for c in calls],
                       "kernels_sum_us": [sum(end - start for _, start, end in c) / 1e3 for c in calls],
                       "kernel_us": [[(end - start) / 1e3 for _, start, end in c] for c in calls],
                       "gap_us": [[(c[i + 1][1] - c[i][2]) / 1e3 for i in range(len(c) - 1)] for c in calls]}),
            "kernels": [name for name, _, _ in calls[0]] if calls else []}


def sliced(found: dict, indices: Sequence[int]) -> dict:
    """A summary (``summary``'s or ``bracketed_summary``'s) of the calls at ``indices`` only: one case's, where a
    command timed several cases (a top-k's score sets) with the same kernels. Lists a trace of an earlier
    version lacks (each kernel's duration, the gaps) are left out."""
    per_call = {key: [found[key][i] for i in indices] for key in PER_CALL if key in found}
    return {**{k: v for k, v in found.items() if k not in PER_CALL and k not in PER_CALL.values()},
            **medians(per_call)}


def bracketed_summary(bracketed: list[tuple[Traced, list[Traced], Traced]]) -> dict:
    """summary of the calls, and where each sits between its stamps (µs): the lead from its start stamp's end to
    its first kernel's start, the trail from its last kernel's end to its end stamp's start. qsa's events are
    recorded in those two intervals, so they split what the events time beyond the span into before the call's
    kernels and after them."""
    return {**summary([call for _, call, _ in bracketed]),
            **medians({"lead_us": [(call[0][1] - opened[2]) / 1e3 for opened, call, _ in bracketed],
                       "trail_us": [(closed[1] - call[-1][2]) / 1e3 for _, call, closed in bracketed]})}


def run_qsa(args: list[str]) -> int:
    """``args`` (qsa's, or -c CODE) run in this process: its exit status (a message it exits with is printed,
    status 1, as Python does)."""
    try:
        if args[:1] == ["-c"]:
            exec(compile(args[1], "<code>", "exec"), {"__name__": "__main__"})
        else:
            from qsa_cli.__main__ import main as qsa_main  # holds Ctrl-C until the command runs, as `qsa` does

            qsa_main(args)
    except SystemExit as ended:
        if isinstance(ended.code, str):
            print(ended.code, file=sys.stderr)
            return 1
        return ended.code or 0
    return 0


def main(argv: list[str]) -> int:
    if "--" not in argv or len(argv[:argv.index("--")]) != 3:
        raise SystemExit(__doc__)
    (trace, launches, pattern), qsa_args = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    from cupti import cupti

    kernels: list[tuple[str, int, int]] = []

    def completed(activities: list) -> None:
        kernels.extend((a.name, a.start, a.end) for a in activities
                       if a.kind == cupti.ActivityKind.CONCURRENT_KERNEL)

    cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
    cupti.activity_register_callbacks(lambda: (8 * 1024 * 1024, 0), completed)
    code = run_qsa(qsa_args)
    cupti.activity_flush_all(1)
    result = {"argv": qsa_args, "exit": code, "kernels_traced": len(kernels),
              **bracketed_summary(calls_between_stamps(kernels, int(launches), pattern)),
              "unstamped": summary(unstamped_calls(kernels, int(launches), pattern))}
    Path(trace).write_text(json.dumps(result) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
