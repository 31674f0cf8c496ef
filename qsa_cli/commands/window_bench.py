"""``qsa window-bench``: a decode window's scorer and top-k as one CUDA graph per kernel pair."""

from __future__ import annotations

from typing import Any

import click

from ..core.memory import CaseSize
from ..output.progress import progress_on
from ..runs.stages import window_bench
from .exit_status import UsageProblem
from .finish import finish_record, presentation
from .measuring import open_session
from .positional import POSITIONAL_NEGATIVES, decode_call
from .run_options import KEYS_OPTION, RUN_OPTIONS, TIMER_OPTION


@click.command("window-bench", context_settings=POSITIONAL_NEGATIVES)
@click.argument("args", nargs=-1, metavar="CTX Q ITERS CAP")
@KEYS_OPTION
@TIMER_OPTION
@RUN_OPTIONS
def command(args: tuple[str, ...], keys: str, **opts: Any) -> int:
    """A decode window's selection (scores, then top-k) as one CUDA graph per kernel pair, replays timed."""
    shown = presentation(opts)
    call, iters = decode_call(args, "window-bench")
    if opts["backend"] != "gpu":
        raise UsageProblem("window-bench replays CUDA graphs: it needs --backend gpu")
    with (open_session(opts, "window-bench", iters, cpu_runs=False, sizes=[CaseSize.of("window", call)]) as s,
          progress_on(opts["quiet"]) as progress):
        window_bench(s, call, keys, progress)
    return finish_record(s.record, shown, opts["json_path"])
