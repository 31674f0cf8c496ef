"""``qsa sanitize``: compute-sanitizer over one call of every variant on every case kind."""

from __future__ import annotations

from typing import Any

import click

from .. import session
from ..engine.attach import check_engines
from ..output.printed import of_sanitize
from ..output.progress import progress_on
from ..runs.sanitizer import sanitize_run, sanitize_variants
from ..sanitize import MAX_DEFAULT_JOBS, TOOLS, default_jobs, find_sanitizer, load_known
from .exit_status import UsageProblem
from .finish import finish, presentation
from .measuring import command_line, kept_if_interrupted
from .options import CI_OPTIONS, DEVICE_OPTION, FORMAT_OPTIONS, QUIET_OPTION, RECORD, SEED_OPTION, check_distinct
from .run_options import ENGINE_OPTION, KERNELS_OPTION


@click.command("sanitize")
@KERNELS_OPTION
@ENGINE_OPTION
@click.option("--tools", default="memcheck,racecheck,synccheck,initcheck", show_default=True,
              help="compute-sanitizer tools, comma-separated.")
@click.option("--variants", "variants_opt", metavar="V,V,...",
              help="Only these variants (default: every variant this device runs).")
@click.option("--quick", is_flag=True, help="One small decode call of each variant (what qsa selftest runs).")
@click.option("--known", "known_path", type=click.Path(dir_okay=False),
              help="A YAML list of known hazards (variant, tool, match, reason): listed, not failed.")
@click.option("--jobs", type=click.IntRange(1, 64), default=None,
              help=f"Children at a time (default: one a CPU core, at most {MAX_DEFAULT_JOBS}).")
@SEED_OPTION
@DEVICE_OPTION
@click.option("--json", "json_path", type=RECORD,
              help="Write the run's record (every row) to this file (- for stdout).")
@FORMAT_OPTIONS
@CI_OPTIONS
@QUIET_OPTION
def command(tools: str, variants_opt: str | None, quick: bool, known_path: str | None, jobs: int | None, seed: int,
            device_id: int, json_path: str | None, engines: tuple[str, ...], **opts: Any) -> int:
    """compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over one call of every variant on every
    case kind, each (variant, case, tool) in its own child process with CuPy's memory pool off."""
    shown = presentation(opts)
    check_distinct({"--json": json_path, **shown.outputs()}, {"--known": known_path})
    chosen_tools = tuple(dict.fromkeys(t.strip() for t in tools.split(",")))
    unknown = [t for t in chosen_tools if t not in TOOLS]
    if unknown or not chosen_tools:
        raise UsageProblem(f"--tools: unknown tool {unknown[0] if unknown else tools!r} (expected {', '.join(TOOLS)})")
    chosen = tuple(dict.fromkeys(v.strip() for v in variants_opt.split(","))) if variants_opt else None
    known = load_known(known_path) if known_path else []
    if engines or opts["adapter"]:  # a checkout's own problem first, before the tools or the device are looked for
        check_engines(engines, adapter=opts["adapter"])
    sanitizer = find_sanitizer()
    settings = session.Settings(seed=seed, device_id=device_id, engines=engines, adapter=opts["adapter"],
                                kernels=opts["kernels"])
    with kept_if_interrupted(session.session(settings, "sanitize", command_line()), json_path) as s:
        if chosen is not None:
            runnable = {v for names in sanitize_variants(s).values() for v in names}
            missing = [v for v in chosen if v not in runnable]
            if missing:
                raise UsageProblem(f"--variants: {missing[0]!r} is not a variant this device runs "
                                   f"({', '.join(sorted(runnable))})")
        with progress_on(opts["quiet"]) as progress:
            sanitize_run(s, chosen_tools, chosen, known, sanitizer, quick, jobs or default_jobs(), progress)
    return finish(of_sanitize(s.record), shown, json_path)
