"""``qsa selftest``: every check this machine can run."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..output.progress import progress_on
from ..runs.selftest import selftest
from ..session import Settings
from .finish import chosen_format
from .measuring import finish_selftest
from .options import DEVICE_OPTION, FORMAT_OPTIONS, QUIET_OPTION, RECORD, SEED_OPTION
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
@QUIET_OPTION
def command(require_gpu: bool, seed: int, device_id: int, json_path: str | None, engines: tuple[str, ...],
            **opts: Any) -> int:
    """Every check this machine can run: the CPU models always, the kernels (an engine checkout's too) when
    a device is found."""
    fmt = chosen_format(opts)
    settings = Settings(seed=seed, device_id=device_id, engines=engines, kernels=opts["kernels"])
    with progress_on(opts["quiet"]) as progress:
        record, rows = selftest(settings, require_gpu, sys.argv[1:], progress)
    return finish_selftest(record, rows, fmt, json_path)
