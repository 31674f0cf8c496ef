"""``qsa sweep``: the cases of a YAML sweep."""

from __future__ import annotations

from typing import Any

import click

from ..config import config_path
from .finish import presentation
from .measuring import run_sweep
from .options import CI_OPTIONS, check_distinct
from .run_options import RUN_OPTIONS, TIMER_OPTION


@click.command("sweep")
@click.argument("config_name", metavar="CONFIG")
@TIMER_OPTION
@RUN_OPTIONS
@CI_OPTIONS
def command(config_name: str, **opts: Any) -> int:
    """Run a YAML sweep (a file, or a shipped config by name: ci, selftest, sm75-decode)."""
    shown = presentation(opts)
    check_distinct({"--json": opts["json_path"], **shown.outputs()}, {"--config": str(config_path(config_name))})
    return run_sweep(config_name, None, opts, shown, "sweep")
