"""``qsa info``: the catalog, the engine's dispatch on each card and each engine checkout's header (no device
needed), and the device, its kernels as compiled for it and the engine's dispatch on it where there is one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..device import probe
from ..output.printed import of_info
from ..runs.info import info_report
from ..session import Settings
from .exit_status import UsageProblem
from .finish import finish, presentation
from .options import DEVICE_OPTION, FORMAT_OPTIONS
from .run_options import ENGINE_OPTION, KERNELS_OPTION


@click.command("info")
@KERNELS_OPTION
@ENGINE_OPTION
@DEVICE_OPTION
@FORMAT_OPTIONS
def command(device_id: int, engines: tuple[str, ...], adapter: Path | None, **opts: Any) -> int:
    """The catalog of variants, what the engine dispatches on each card and an engine checkout's functions (no
    device needed); the device, its clocks and limits and every kernel as compiled for it, where there is one."""
    shown = presentation(opts)
    if opts["kernels"] is not None:
        found = probe(device_id)
        if not found.available:  # the folder's kernels are listed as compiled for a device: none would be
            raise UsageProblem(f"--kernels {opts['kernels']}: no device here to compile its kernels ({found.reason}); "
                               "qsa info lists the catalog without one")
    settings = Settings(device_id=device_id, engines=engines, adapter=adapter, kernels=opts["kernels"])
    return finish(of_info(info_report(settings)), shown)
