"""``qsa baseline``: baselines kept per card in a folder (record/baselines.py): ``promote RUN.json --dir DIR``
stores a passing run as its card's current baseline, ``list DIR`` shows each card's; ``qsa gate
--baseline-dir`` takes them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..core.errors import BaselineError
from ..core.streams import printing
from ..device import probe
from ..output.printed import of_baselines
from ..record import baselines
from ..record.load import load_record
from .exit_status import UsageProblem
from .finish import finish, presentation
from .options import DEVICE_OPTION, FORMAT_OPTIONS, given

PROMOTE, LIST = "promote", "list"


def _promote(run_path: str, folder: Path, device_id: int) -> int:
    """RUN.json stored in ``folder`` as its card's current baseline; refused for a run of another card than this
    machine's device (where it has one: a run copied from another runner is not this one's baseline)."""
    record = load_record(run_path)
    key = baselines.check_promotable(record, run_path)
    here = probe(device_id)
    if here.available:
        ours = baselines.card_key(here.info, baselines.engine_names(record))
        if ours != key:
            raise BaselineError(f"{run_path}: the run's card is {key}, this machine's device {device_id} is {ours}: "
                                "promote a run on the runner of its own card")
    else:
        click.echo(f"qsa: baseline: no device here to check the run's card against ({here.reason}): stored under "
                   "the card it names", err=True)
    before = baselines.current(folder, key)
    stored = baselines.promote(record, run_path, folder)
    was = f"; it was {before.name}" if before is not None and before != stored else ""
    with printing(sys.stdout):
        click.echo(f"{stored}: the current baseline of card {key}{was}")
    return 0


@click.command("baseline")
@click.argument("action", type=click.Choice([PROMOTE, LIST]))
@click.argument("path", metavar="(RUN.json --dir DIR | DIR)", type=click.Path())
@click.option("--dir", "folder", metavar="DIR", type=click.Path(file_okay=False),
              help="promote: the folder of baselines (made if missing); the run goes to DIR/CARD-KEY/ and becomes "
                   "the card's current one.")
@DEVICE_OPTION
@FORMAT_OPTIONS
def command(action: str, path: str, folder: str | None, device_id: int, **opts: Any) -> int:
    """Baselines kept per card: promote a passing run to be its card's, list each card's (qsa gate
    --baseline-dir takes them).

    promote RUN.json --dir DIR stores the run as the current baseline of its card (the device's name, compute
    capability and memory size, and its engine checkouts), never replacing an earlier one; an interrupted,
    failing or CPU-backend run is refused, and one from another card than this machine's device. list DIR
    shows each card's current baseline with its date, commits and clocks.
    """
    shown = presentation(opts)
    if action == PROMOTE:
        if folder is None:
            raise UsageProblem("promote RUN.json needs --dir DIR: the folder of baselines it goes to")
        named = next((flag for name, flag in (("fmt", "--format"), ("markdown", "--markdown")) if given(name)), None)
        if named is not None:
            raise UsageProblem(f"{named} is list's: promote prints the one file it stored")
        return _promote(path, Path(folder), device_id)
    named = next((flag for name, flag in (("folder", "--dir"), ("device_id", "--device")) if given(name)), None)
    if named is not None:
        raise UsageProblem(f"{named} is promote's: list takes the folder as DIR")
    if not Path(path).is_dir():
        raise UsageProblem(f"list {path}: no such folder")
    return finish(of_baselines(baselines.kept(Path(path)), path), shown)
