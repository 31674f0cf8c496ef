"""``qsa plot``: a record's medians drawn, or two records' before / after."""

from __future__ import annotations

import sys

import click

from ..core.streams import printing
from ..output.plot import plot_files
from .exit_status import UsageProblem
from .options import OUTPUT


@click.command("plot")
@click.argument("paths", metavar="FILE.json [AFTER.json]", nargs=-1, required=True)
@click.option("-o", "--output", "out_path", required=True, type=OUTPUT,
              help="Write the figure to this file: .png, .svg or .pdf, by its suffix.")
def command(paths: tuple[str, ...], out_path: str) -> int:
    """Median time per call in small multiples (a panel per stage, inputs and query count), the read floor
    and the engine's dispatch marked; two records, or one `qsa compare` record, draw a before / after
    with the ratio after / before under each panel."""
    if len(paths) > 2:
        raise UsageProblem(f"plot takes one record, or two (before, after); got {len(paths)}")
    plot_files(paths, out_path)
    with printing(sys.stdout):
        click.echo(out_path)
    return 0
