"""``qsa sweep``: the cases of a YAML sweep."""

from __future__ import annotations

from typing import Any

import click

from .finish import chosen_format
from .measuring import run_sweep
from .run_options import RUN_OPTIONS, TIMER_OPTION


@click.command("sweep")
@click.argument("config_name", metavar="CONFIG")
@TIMER_OPTION
@RUN_OPTIONS
def command(config_name: str, **opts: Any) -> int:
    """Run a YAML sweep (a file, or a shipped config by name: ci, selftest, sm75-decode)."""
    return run_sweep(config_name, None, opts, chosen_format(opts), "sweep")
