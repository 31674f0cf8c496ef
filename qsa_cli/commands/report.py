"""``qsa report``: saved records rendered again."""

from __future__ import annotations

from typing import Any

import click

from ..output import compare
from ..output.printed import of_saved
from ..record.load import load_record, merge_records
from .finish import finish, presentation
from .options import EXPORT_FORMAT_OPTIONS


@click.command("report")
@click.argument("paths", nargs=-1, required=True, metavar="FILE...")
@click.option("--merge", is_flag=True, help="Render the runs as one (same device): one table across them.")
@EXPORT_FORMAT_OPTIONS
def command(paths: tuple[str, ...], merge: bool, **opts: Any) -> int:
    """Re-render saved result records (a qsa compare run's with its before / after table first)."""
    shown = presentation(opts)
    records = [load_record(path) for path in paths]
    named = [("merged", merge_records(list(zip(paths, records))))] if merge else list(zip(paths, records))
    judged = [(name, r, compare.judge(r) if "compare" in r.settings else None) for name, r in named]
    return finish(of_saved(judged), shown)
