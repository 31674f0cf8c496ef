"""``qsa compare``: two sides (engine checkouts, kernel folders or revisions of either) on the same inputs
in one run, judged by the gate's rule."""

from __future__ import annotations

from typing import Any

import click

from ..config import config_path, load_config
from ..core.memory import CaseSize
from ..inputs import SCORE_SETS
from ..output import compare
from ..output.printed import of_compare
from ..runs.compare import compare_run
from ..runs.rounds import in_rounds
from ..runs.sweep import sweep_sizes
from ..sides import SIDE_NAMES, SideSpec
from .exit_status import UsageProblem
from .finish import finish, presentation
from .measuring import open_session
from .options import CI_OPTIONS, TOLERANCE_RANGE, check_distinct
from .positional import POSITIONAL_NEGATIVES, decode_call
from .run_options import RUN_OPTIONS


@click.command("compare", context_settings=POSITIONAL_NEGATIVES)
@click.argument("base_side", metavar="BASE")
@click.argument("candidate_side", metavar="CANDIDATE")
@click.argument("args", nargs=-1, metavar="(CTX Q ITERS CAP | --config C)")
@click.option("--config", "config_name", metavar="CONFIG", help="Run the cases of a YAML sweep instead of one call.")
@click.option("--tolerance", type=TOLERANCE_RANGE, default=0.05, show_default=True,
              help="A candidate median slower than the base's by more than this (and outside both spreads) is SLOW.")
@click.option("--rounds", type=click.IntRange(1, 100), default=1, show_default=True, metavar="N",
              help="Run it all N times over, base and candidate in turn each round (ABAB...), and pool each "
                   "variant's samples; each round's median is in the record.")
@RUN_OPTIONS
@CI_OPTIONS
def command(base_side: str, candidate_side: str, args: tuple[str, ...], config_name: str | None, tolerance: float,
            rounds: int, **opts: Any) -> int:
    """BASE against CANDIDATE on the same inputs in one run: the candidate's bits against the base's (the
    change's promise), both against qsa's reference and the CPU model, and before / after times, FAST /
    SLOW / SAME by the gate's rule. Exit 1 on any difference in bits or a SLOW row.

    Each side is [NAME=]PATH[@REV]: an engine checkout, a folder of qsa's kernel sources (or a checkout of
    qsa), or a git revision of either (checked out into a temporary worktree). A call CTX Q ITERS CAP
    runs the scorer, the top-k on four score sets and the window; --config runs a sweep's cases.
    """
    shown = presentation(opts)
    check_distinct({"--json": opts["json_path"], **shown.outputs()}, {"--config": config_name})
    if opts["backend"] != "gpu":
        raise UsageProblem("compare runs the sides' kernels: it needs --backend gpu")
    taken = [o for o in ("engines", "variants", "baseline", "candidate") if opts[o]]
    if taken:
        raise UsageProblem(f"compare takes its variants from BASE and CANDIDATE, not --{taken[0].rstrip('s')}")
    sides = tuple(SideSpec.parse(text, name) for text, name in zip((base_side, candidate_side), SIDE_NAMES))
    config = None
    if config_name:
        if args:
            raise UsageProblem("--config takes no CTX Q ITERS CAP")
        config = load_config(config_path(config_name))
        call, iters = None, config.iterations
        sizes = sweep_sizes(config)
    else:
        call, iters = decode_call(args, "compare")
        # runs/compare.compare_run: the scorer, the top-k on every score set (made at once), the window
        sizes = (CaseSize.of("scores", call), CaseSize.of("topk", call, held=len(SCORE_SETS)),
                 CaseSize.of("window", call))
    with open_session(opts, "compare", iters, config, sides, cpu_runs=False, sizes=sizes) as s:
        if rounds > 1:
            s.record_settings(rounds=rounds)
        in_rounds(s.record, rounds, lambda: compare_run(s, call, config, tolerance))
    return finish(of_compare(compare.judge(s.record), s.record), shown, opts["json_path"])
