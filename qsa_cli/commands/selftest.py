"""``qsa selftest``: every check this machine can run."""

from __future__ import annotations

from typing import Any

import click

from ..device import probe
from ..engine.attach import check_engines
from ..output.progress import progress_on
from ..runs.selftest import SelftestSoFar, selftest
from ..session import Settings
from .exit_status import UsageProblem
from .finish import presentation
from .measuring import command_line, finish_selftest, keep_interrupted, with_checks
from .options import CI_OPTIONS, DEVICE_OPTION, FORMAT_OPTIONS, QUIET_OPTION, RECORD, SEED_OPTION, check_distinct
from .run_options import ENGINE_OPTION, KERNELS_OPTION


@click.command("selftest")
@KERNELS_OPTION
@ENGINE_OPTION
@click.option("--require-gpu", is_flag=True,
              help="A missing CUDA device is an error, exit 2 (default: skip the GPU checks).")
@SEED_OPTION
@DEVICE_OPTION
@click.option("--json", "json_path", type=RECORD,
              help="Write the run's record (every check) to this file (- for stdout).")
@FORMAT_OPTIONS
@CI_OPTIONS
@QUIET_OPTION
def command(require_gpu: bool, seed: int, device_id: int, json_path: str | None, engines: tuple[str, ...],
            **opts: Any) -> int:
    """Every check this machine can run: the CPU models always, the kernels (an engine checkout's too) when
    a device is found."""
    shown = presentation(opts)
    check_distinct({"--json": json_path, **shown.outputs()})
    if engines or opts["adapter"]:  # a checkout's own problem first, before any device is looked for
        check_engines(engines, adapter=opts["adapter"])
    named = [*([f"--kernels {opts['kernels']}"] if opts["kernels"] is not None else []),
             *(f"--engine {e}" for e in engines)]
    if named and not require_gpu:
        found = probe(device_id)
        if not found.available:  # the CPU models alone would run: the folder's or checkout's kernels would not
            raise UsageProblem(f"{named[0]}: no device here to compile and run its kernels "
                               f"({found.reason}); the CPU models selftest runs without one do not use them")
    settings = Settings(seed=seed, device_id=device_id, engines=engines, adapter=opts["adapter"],
                        kernels=opts["kernels"])
    so_far = SelftestSoFar()
    try:
        with progress_on(opts["quiet"]) as progress:
            record, rows = selftest(settings, require_gpu, command_line(), progress, so_far)
    except KeyboardInterrupt as stop:
        if so_far.record is None or not json_path:
            raise
        keep_interrupted(with_checks(so_far.record, so_far.rows), json_path, stop)
    return finish_selftest(record, rows, shown, json_path)
