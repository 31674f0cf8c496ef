"""topk-parity --selftest, spec section 6's matrix of top-k calls (``topk_selftest``); qsa selftest's own checks
are runs/selftest.py's."""

from __future__ import annotations

import contextlib
import time

from ..config import config_path, load_config
from ..core.geometry import MAX_QUERIES, Call
from ..core.progress import Progress, no_progress
from ..inputs import SCORE_SETS
from ..record.schema import RunRecord, SelftestCheck
from ..session import Opening
from ..stages import topk as topk_stage
from ..stages.common import StageOutcome
from .made import topk_models_case, topk_score_set
from .pool import Task, in_order
from .stages import record_topk_dispatch, topk_parity

SELFTEST_CONFIG = "selftest"  # configs/selftest.yaml: spec section 6's matrix, plus up to 1,048,576 cells
GRAPH_CALL, GRAPH_SCORE_SET = Call(524288, MAX_QUERIES, 524288), "levels64"  # topk-parity --selftest's CUDA graph
# What a score set of a call costs a worker (its scores, digests and oracle's ids) against a continuous set's: on an
# H100 host's CPU, a 1M-cell prompt call's levels64 set 1.1 times, its equal set 1.15, its adversarial set 3.5
SET_COST = {"continuous": 1.0, "levels64": 1.1, "equal": 1.15, "adversarial": 3.5}


def topk_selftest(opening: Opening, progress: Progress = no_progress) -> tuple[RunRecord, list[SelftestCheck]]:
    """Spec section 6's matrix (configs/selftest.yaml): decode calls of 8 queries without the count and
    prompt calls of 64 with it, every score set of the settings' seed, every variant this device runs, and the
    CPU oracle (its rows with the settings' model check), in the session ``opening`` opens; the session's
    record and the rows; ``progress``: each call, then the CUDA graph's replays. Worker processes
    (runs/pool.py) make the score sets and their oracle's ids, for the kernels to run here as they come; on the
    GPU they start before the session opens (0.5 s and more), so the first sets are made meanwhile. On the CPU
    backend, where the variants are the models (which the session names), they run the models too, and their
    rows are taken here."""
    on_gpu, seed, check_model = opening.settings.on_gpu, opening.settings.seed, opening.settings.check_model
    calls = list(dict.fromkeys(c.call for c in load_config(config_path(SELFTEST_CONFIG)).cases("topk")))
    total = len(calls) + on_gpu
    sets = [(call, name) for call in calls for name in SCORE_SETS]
    # the costliest sets first: the matrix ends with the largest calls, and their adversarial sets take longest
    costliest = sorted(range(len(sets)), key=lambda i: -sets[i][0].nq * sets[i][0].max_blocks * SET_COST[sets[i][1]])
    rows = []
    with contextlib.ExitStack() as stack:
        if on_gpu:  # the CUDA graph's set and its oracle last
            tasks: list[Task] = [*((topk_score_set, (call, name, seed, check_model)) for call, name in sets),
                                 (topk_score_set, (GRAPH_CALL, GRAPH_SCORE_SET, seed, True))]
            made = stack.enter_context(in_order(tasks, first=costliest))
            s = stack.enter_context(opening)
        else:  # all of a set's work in a worker: this process would otherwise run the models one set at a time
            s = stack.enter_context(opening)
            here = {call: s.variants("topk", s.here("topk", call.max_blocks, call.active_blocks)) for call in calls}
            tasks = [(topk_models_case, (call, name, seed, here[call], s.roles["topk"], False, check_model))
                     for call, name in sets]
            made = stack.enter_context(in_order(tasks, first=costliest))
        for i, call in enumerate(calls):
            progress(i, total, f"top-k {call.kind} ctx={call.ctx} cap={call.capacity}")
            t0 = time.perf_counter()
            if on_gpu:
                score_sets, oracles = zip(*(next(made) for _ in SCORE_SETS))
                out = topk_parity(s, list(score_sets), call.active_blocks, oracles=list(oracles))
            else:
                record_topk_dispatch(s, call.max_blocks, call.active_blocks)
                out = StageOutcome()
                for _ in SCORE_SETS:
                    out.extend(s.take(next(made).outcome))
            rows.append(SelftestCheck.judged(f"top-k {call.kind} {call.ctx} / {call.capacity}", len(out.parity),
                                             out.failures(), time.perf_counter() - t0))
        if on_gpu:
            candidate = s.roles["topk"]["candidate"]  # the kernel with scratch a call must leave clean
            progress(len(calls), total, f"top-k {candidate} in a CUDA graph")
            t0 = time.perf_counter()
            ok, detail = topk_stage.graph_replay_check(*next(made), 50, s.catalog.get("topk", candidate), s.launcher)
            rows.append(SelftestCheck(f"top-k {candidate}, CUDA graph x50", 1, ok, time.perf_counter() - t0, detail))
    progress(total, total, "done")
    return s.record, rows
