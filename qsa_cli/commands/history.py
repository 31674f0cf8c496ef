"""``qsa history DIR``: each card's runs kept in a baseline folder (``qsa baseline promote`` keeps every one),
read across their commits: the latest median of each (case, variant), its change against the previous run
and the first, and the steps (output/history.py states the rule); ``--plot`` and ``--html`` draw it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..core.errors import InputError
from ..core.files import atomic_write
from ..output import EXPORTS
from ..output.history import card_history
from ..output.history_plot import pictures  # matplotlib itself is imported only to draw
from ..output.printed import of_history
from ..record.baselines import record_key
from ..record.history import cards, runs
from ..record.load import load_record
from .exit_status import UsageProblem
from .finish import finish, presentation
from .options import EXPORT_FORMAT_OPTIONS, OUTPUT, check_distinct


@click.command("history")
@click.argument("folder", metavar="DIR")
@click.option("--card", metavar="KEY", help="Only this card's runs (DIR/KEY; qsa baseline list DIR names the keys); "
                                            "every card's without it.")
@click.option("--card-of", "card_of", metavar="RUN.json", type=click.Path(dir_okay=False),
              help="Only the card this record was measured on (its key as qsa baseline promote keeps it): a CI "
                   "job's runner's card, from the run it just made.")
@click.option("--engine", metavar="NAME",
              help="Only the variants of engine checkout NAME, whose commit (and qsa's) mark where a step may fall; "
                   "a card of one checkout names its variants NAME in every run, whatever name each run gave it.")
@click.option("--plot", "plot_path", metavar="FILE.png", type=OUTPUT,
              help="Draw the card's history here: a panel per case, a line per variant, the steps marked with "
                   "their commits (needs .[plot]).")
@click.option("--html", "html_path", metavar="FILE.html", type=OUTPUT,
              help="Write one self-contained page here (inline CSS and figure, no script, nothing fetched): the "
                   "steps, the figure and every (case, variant), for a CI job to publish as it is (needs .[plot]).")
@click.option("-v", "--verbose", is_flag=True,
              help="In a log, every (case, variant) (as at a terminal) in place of the summary and the steps.")
@EXPORT_FORMAT_OPTIONS
def command(folder: str, card: str | None, card_of: str | None, engine: str | None, plot_path: str | None,
            html_path: str | None, verbose: bool, **opts: Any) -> int:
    """Each card's figures across commits: per (case, variant) the latest median, its change against the
    previous run and the first, and the steps (the commits where the median moved beyond the noise of the
    runs around it, and whether the bits changed there).

    DIR is a folder qsa baseline promote keeps runs in. In a log it prints each card's span and counts and
    a line per step; -v, a terminal or --format markdown every (case, variant). --format gab or bmf export
    the newest run's timings, --plot and --html draw the history: each of one card (--card KEY where DIR
    holds several).
    """
    shown = presentation(opts)
    check_distinct({"--plot": plot_path, "--html": html_path})
    if card_of is not None:
        if card is not None:
            raise UsageProblem("--card and --card-of both name the card: give one")
        card = record_key(load_record(card_of))
        if card is None:
            raise InputError(f"{card_of}: no card measured it (a CPU-backend run or a device not named whole)")
    keys = cards(Path(folder))
    if card is not None and card not in keys:
        raise InputError(f"{folder}: no card {card} (it holds {', '.join(keys)})")
    chosen = [card] if card is not None else keys
    one_card = [what for what, wanted in ((f"--format {shown.fmt}", shown.fmt in EXPORTS), ("--plot", plot_path),
                                          ("--html", html_path)) if wanted]
    if one_card and len(chosen) > 1:
        raise UsageProblem(f"{' and '.join(one_card)}: one card's history; {folder} holds {', '.join(keys)}: give --card KEY")
    histories = [card_history(key, runs(Path(folder), key), engine) for key in chosen]
    if engine is not None and not any(h.series for h in histories):
        raise InputError(f"{folder}: no run timed a variant of engine {engine}")
    if plot_path or html_path:
        png, page = pictures(histories[0], folder, plot_path is not None, html_path is not None)
        for path, content in ((plot_path, png), (html_path, page)):
            if path is not None and content is not None:
                with atomic_write(path, "wb" if isinstance(content, bytes) else "w") as fh:
                    fh.write(content)
                click.echo(f"qsa: history: wrote {path}", err=True)
    full = verbose or shown.fmt == "markdown" or sys.stdout.isatty()
    return finish(of_history(histories, folder, full), shown)
