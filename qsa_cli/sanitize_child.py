"""One ``qsa sanitize`` child: calls of one variant, each in its own plain allocations, under compute-sanitizer.

Run as ``python -m qsa_cli.sanitize_child CASES_JSON`` by ``qsa sanitize`` (qsa_cli/sanitize.py), never
by hand. CuPy's memory pool is off, so every array is its own allocation and memcheck sees each one's
bounds; each case is announced on stdout (``MARKER`` and its index) before it runs and synchronised
after, so the parent can attribute every report to its case. Each case's call runs twice: a second call
must find the scratch the first left clean.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MARKER = "qsa-sanitize-case"
CALLS = 2
ENV_ENGINES = "QSA_SANITIZE_ENGINES"  # a JSON list of the run's --engine checkouts, attached by each child


def run_case(cupy: Any, case: dict[str, Any]) -> None:
    from .core.geometry import SELECT_CAP
    from .core.integrity import PlainAllocator
    from .inputs import id_poison, score_poison, synthetic_scorer_inputs, synthetic_scores
    from .sanitize import SanitizeCase

    call = SanitizeCase(**case).call
    if case["stage"] == "scores":
        from .launch.scores import DeviceScorerInputs, scorer_launcher

        dev = DeviceScorerInputs.from_host(synthetic_scorer_inputs(call, case["seed"], case["keys"]))
        out = cupy.asarray(score_poison((call.nq, call.max_blocks)))
        launch = scorer_launcher(case["variant"], dev, out)
    else:
        from .launch.topk import topk_launcher

        host_t = synthetic_scores(call, case["score_set"], case["seed"])
        scores, steps = cupy.asarray(host_t.scores), cupy.asarray(host_t.steps)
        out = cupy.asarray(id_poison((call.nq, SELECT_CAP)))
        launch = topk_launcher(case["variant"], scores, steps, out, active_blocks=call.active_blocks,
                               scratch=PlainAllocator(cupy))
    for _ in range(CALLS):
        launch()
    cupy.cuda.Device().synchronize()


def main(argv: list[str]) -> int:
    import cupy

    from .engine.attach import attached

    cupy.cuda.set_allocator(None)  # every array its own allocation: memcheck sees each one's bounds
    engines = tuple(json.loads(os.environ.get(ENV_ENGINES) or "[]"))
    with attached(engines, int(cupy.cuda.Device().compute_capability)):
        for i, case in enumerate(json.loads(argv[0])):
            print(f"{MARKER} {i}", flush=True)
            run_case(cupy, case)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
