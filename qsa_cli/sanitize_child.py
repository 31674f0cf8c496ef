"""One ``qsa sanitize`` child: calls of one variant, each in its own plain allocations, under compute-sanitizer.

Run as ``python -m qsa_cli.sanitize_child JOB_JSON`` by ``qsa sanitize`` (qsa_cli/sanitize.py), never by
hand: the job names the cases, the run's folder of kernel sources and its engine checkouts. CuPy's memory
pool is off, so every array is its own allocation and memcheck sees each one's bounds; each case is
announced on stdout (``MARKER``, its index and ``SET_UP``) before it is set up, again (``MARKER`` and its
index) before it runs, and synchronised after, so the parent can attribute every report to its case. Every
case is set up (inputs, output, the variant's module) before any runs, and none runs before the child's
standard input closes: the parent may hold the child there while it times on the card itself
(sanitize.Children). Each case's call runs as many times as the job says (sanitize.TOOL_CALLS: twice where a
second call must find the scratch the first left clean).
"""

from __future__ import annotations

import json
import select
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from .catalog import Launcher, qsa_catalog
from .core.geometry import SELECT_CAP
from .core.integrity import PlainAllocator
from .dispatch import read_switches
from .engine.attach import attached
from .inputs import id_poison, score_poison, synthetic_scorer_inputs, synthetic_scores
from .launch.scores import DeviceScorerInputs
from .sanitize import HOLD_LIMIT_S, MARKER, SET_UP, SanitizeCase


def prepared(cupy: Any, launcher: Launcher, case: dict[str, Any]) -> Callable[[], None]:
    """One case's call of its variant through the child's catalog, its inputs and output on the device."""
    call = SanitizeCase(**case).call
    if case["stage"] == "scores":
        dev = DeviceScorerInputs.from_host(synthetic_scorer_inputs(call, case["seed"], case["keys"]))
        out = cupy.asarray(score_poison((call.nq, call.max_blocks)))
        return launcher.scorer(launcher.catalog.get("scores", case["variant"]), dev, out)
    host_t = synthetic_scores(call, case["score_set"], case["seed"])
    scores, steps = cupy.asarray(host_t.scores), cupy.asarray(host_t.steps)
    out = cupy.asarray(id_poison((call.nq, SELECT_CAP)))
    return launcher.topk(launcher.catalog.get("topk", case["variant"]), scores, steps, out, call.active_blocks,
                         scratch=PlainAllocator(cupy))


def held(parent: TextIO, limit_s: float = HOLD_LIMIT_S) -> None:
    """Until the parent closes ``parent`` (the child's standard input; sanitize.Children), or ``limit_s`` have
    passed: nothing runs on the card before."""
    if select.select([parent], [], [], limit_s)[0]:
        parent.read()


def main(argv: list[str]) -> int:
    import cupy

    cupy.cuda.set_allocator(None)  # every array its own allocation: memcheck sees each one's bounds
    job = json.loads(argv[0])
    adapter = Path(job["adapter"]) if job["adapter"] else None
    with attached(tuple(job["engines"]), int(cupy.cuda.Device().compute_capability), adapter=adapter) as engines:
        catalog = qsa_catalog(Path(job["kernels"])).adding(engines.variants, engines.libraries)
        launcher = Launcher(catalog, read_switches())
        launches = []
        for i, case in enumerate(job["cases"]):
            print(f"{MARKER} {i} {SET_UP}", flush=True)
            launches.append(prepared(cupy, launcher, case))
        held(sys.stdin)
        for i, launch in enumerate(launches):
            print(f"{MARKER} {i}", flush=True)
            for _ in range(job["calls"]):
                launch()
            cupy.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
