"""``qsa topk-parity``: a call's top-k variants on the same score sets (synthetic, an .npz file's, a sweep's
top-k cases, or spec section 6's matrix with --selftest)."""

from __future__ import annotations

from typing import Any

import click

from ..core.geometry import Call, blocks_read, check_capacity, check_queries
from ..core.memory import CaseSize
from ..inputs import SCORE_SETS, load_topk_inputs, save_npz_atomic
from ..output.progress import progress_on
from ..runs.topk_selftest import topk_selftest
from ..runs.stages import topk_parity, topk_score_sets
from ..timing import Iters
from .exit_status import UsageProblem
from .finish import finish_record, presentation
from .measuring import finish_selftest, open_session, run_sweep
from .options import CI_FLAGS, CI_OPTIONS, OUTPUT, check_distinct, given
from .positional import DEFAULT_ITERS, ITERATIONS, POSITIONAL_NEGATIVES, check_given_with_inputs, check_iters, integers
from .run_options import RUN_OPTIONS, TIMER_OPTION


@click.command("topk-parity", context_settings=POSITIONAL_NEGATIVES)
@click.argument("args", nargs=-1, metavar="[CTX Q ITERS CAP [COUNT]]")
@click.option("--selftest", is_flag=True, help="Run docs/spec.md section 6's case matrix (parity only).")
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False),
              help="Replay the scores of an .npz file (scores, steps), NaN and infinities included.")
@click.option("--iters", "iters_opt", type=ITERATIONS, default=DEFAULT_ITERS, show_default=True,
              help="ITERS with --inputs (a count, or auto).")
@click.option("--count", "count_opt", type=click.IntRange(0, 1), default=1, show_default=True,
              help="COUNT with --inputs (0: decode call, 1: prompt call with the active block count).")
@click.option("--dump", "dump_path", type=OUTPUT,
              help="Write every variant's ids (and the CPU oracle's) to this .npz file.")
@click.option("--config", "config_name", metavar="CONFIG", help="Run the top-k cases of a YAML sweep instead.")
@TIMER_OPTION
@RUN_OPTIONS
@CI_OPTIONS
def command(args: tuple[str, ...], selftest: bool, inputs_path: str | None, iters_opt: Iters, count_opt: int,
            dump_path: str | None, config_name: str | None, **opts: Any) -> int:
    """A call's top-k: every variant's ids against the reference and each other, and their times.

    COUNT 0 is a decode call (no active block count); 1, the default, the prompt path's call.
    """
    ci_given = next((flag for name, flag in CI_FLAGS.items() if given(name)), None)
    if ci_given is not None and not selftest:
        raise UsageProblem(f"{ci_given} goes with --selftest: the matrix's verdict is what topk-parity gives CI")
    shown = presentation(opts, judging=selftest)
    check_given_with_inputs(inputs_path, {"iters_opt": "ITERS", "count_opt": "COUNT"})
    check_distinct({"--json": opts["json_path"], "--dump": dump_path, **shown.outputs()},
                   {"--inputs": inputs_path, "--config": config_name})
    if config_name:
        if args or inputs_path or dump_path or selftest:
            raise UsageProblem("--config takes no CTX Q ITERS CAP [COUNT], --inputs, --dump or --selftest")
        return run_sweep(config_name, "topk", opts, shown, "topk-parity --config")
    if selftest:
        if args or inputs_path or dump_path:
            raise UsageProblem("--selftest takes no CTX Q ITERS CAP, --inputs or --dump")
        with progress_on(opts["quiet"]) as progress:
            record, rows = topk_selftest(open_session(opts, "topk-parity --selftest", 0), progress=progress)
        return finish_selftest(record, rows, shown, opts["json_path"])
    if inputs_path:
        if args:
            raise UsageProblem("give CTX Q ITERS CAP [COUNT] or --inputs FILE, not both")
        iters, count = iters_opt, count_opt
        loaded = load_topk_inputs(inputs_path)
        check_queries(loaded.nq, prompt=bool(count))
        active = blocks_read(loaded.steps) if count else 0
        sets = [loaded]
        size = CaseSize("topk", loaded.nq, loaded.max_blocks, active)
    else:
        ints = integers(args, ["CTX", "Q", "ITERS", "CAP", "COUNT", "?"])
        if len(args) not in (4, 5):
            raise UsageProblem(f"topk-parity takes CTX Q ITERS CAP [COUNT] (got {len(args)} argument(s))")
        ctx, nq, iters, cap, *rest = ints
        count = rest[0] if rest else 1
        if count not in (0, 1):
            raise UsageProblem(f"COUNT must be 0 (decode call) or 1 (prompt call with the count) (got {count})")
        call = Call(ctx, nq, cap, prompt=bool(count))
        check_capacity(cap)
        check_queries(nq, prompt=bool(count))
        active = call.active_blocks
        sets = None
        size = CaseSize.of("topk", call, held=len(SCORE_SETS))  # topk_score_sets makes them at once
    check_iters(iters)
    with open_session(opts, "topk-parity", iters, sizes=[size]) as s, progress_on(opts["quiet"]) as progress:
        sets = sets if sets is not None else topk_score_sets(call, opts["seed"])
        outcome = topk_parity(s, sets, active, progress)
        if dump_path:
            save_npz_atomic(dump_path, **{k.replace("-", "_").replace(".", "__"): v
                                          for k, v in outcome.outputs.items()})
    return finish_record(s.record, shown, opts["json_path"])
