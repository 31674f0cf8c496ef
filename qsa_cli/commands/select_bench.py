"""``qsa select-bench``: a decode call's scorer variants on the same inputs (synthetic, an .npz file's, or a
sweep's scorer cases)."""

from __future__ import annotations

from typing import Any

import click

from ..core.geometry import check_queries
from ..core.memory import CaseSize
from ..inputs import load_scorer_inputs, save_npz_atomic
from ..output.progress import progress_on
from ..record.vocabulary import DEFAULT_KEYS
from ..runs.stages import scorer_inputs, select_bench
from ..timing import Iters
from .exit_status import UsageProblem
from .finish import finish_record, presentation
from .measuring import open_session, run_sweep
from .options import OUTPUT, check_distinct
from .positional import (
    DEFAULT_ITERS,
    ITERATIONS,
    POSITIONAL_NEGATIVES,
    check_given_with_inputs,
    check_iters,
    decode_call,
)
from .run_options import KEYS_OPTION, RUN_OPTIONS, TIMER_OPTION


@click.command("select-bench", context_settings=POSITIONAL_NEGATIVES)
@click.argument("args", nargs=-1, metavar="CTX Q ITERS CAP")
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False),
              help="Replay the tensors of an .npz file (pooled, dead, q, steps) instead of synthetic ones.")
@click.option("--iters", "iters_opt", type=ITERATIONS, default=DEFAULT_ITERS, show_default=True,
              help="ITERS with --inputs (a count, or auto).")
@click.option("--dump", "dump_path", type=OUTPUT,
              help="Write every variant's scores (and the CPU model's) to this .npz file.")
@click.option("--config", "config_name", metavar="CONFIG", help="Run the scorer cases of a YAML sweep instead.")
@KEYS_OPTION
@TIMER_OPTION
@RUN_OPTIONS
def command(args: tuple[str, ...], inputs_path: str | None, iters_opt: Iters, dump_path: str | None,
            config_name: str | None, keys: str, **opts: Any) -> int:
    """A decode call's scorer, old (multi) and new (halve), on the same inputs: hashes and times."""
    shown = presentation(opts)
    check_given_with_inputs(inputs_path, {"iters_opt": "ITERS"})
    check_distinct({"--json": opts["json_path"], "--dump": dump_path},
                   {"--inputs": inputs_path, "--config": config_name})
    if keys != DEFAULT_KEYS and (config_name or inputs_path):
        raise UsageProblem("--keys applies to synthetic inputs, not to --inputs or --config (a sweep's cases name "
                           "their keys)")
    if config_name:
        if args or inputs_path or dump_path:
            raise UsageProblem("--config takes no CTX Q ITERS CAP, --inputs or --dump")
        return run_sweep(config_name, "scores", opts, shown, "select-bench --config")
    if inputs_path:
        if args:
            raise UsageProblem("give CTX Q ITERS CAP or --inputs FILE, not both")
        iters = iters_opt
        given = load_scorer_inputs(inputs_path)
        check_queries(given.nq, prompt=False)
        check_iters(iters)
        call = None
        size = CaseSize("scores", given.nq, given.max_blocks)
    else:
        call, iters = decode_call(args, "select-bench")  # checks ITERS too
        given = None
        size = CaseSize.of("scores", call)
    with open_session(opts, "select-bench", iters, sizes=[size]) as s, progress_on(opts["quiet"]) as progress:
        inputs = given if given is not None else scorer_inputs(call, opts["seed"], keys)
        outcome = select_bench(s, inputs, progress)
        if dump_path:
            arrays = {k.replace("-", "_"): v for k, v in outcome.outputs.items()}
            save_npz_atomic(dump_path, steps=inputs.steps, **arrays)
    return finish_record(s.record, shown, opts["json_path"])
