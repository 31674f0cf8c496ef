"""The options of every command that prints or writes, each checked as the arguments are parsed (so before
anything is measured): output files, --json, --format/--markdown, --quiet, --device. They reach nothing
that measures, so ``qsa report`` and ``qsa plot`` load no runner."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from ..core.files import check_writable
from ..output import FORMATS
from .finish import STDOUT

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


class OutputPath(click.ParamType):
    """A file the command writes: checked as the arguments are parsed, so before anything is measured."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        check_writable(value, "/".join(param.opts) if param else "output")
        return str(value)


OUTPUT = OutputPath()


class RecordPath(OutputPath):
    """--json's file, or ``-`` for stdout."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        return STDOUT if value == STDOUT else super().convert(value, param, ctx)


RECORD = RecordPath()

DEVICE_OPTION = click.option("--device", "device_id", type=click.IntRange(min=0), default=0, show_default=True)

QUIET_OPTION = click.option("--quiet", is_flag=True, help="No progress on stderr.")

# numpy seeds its generators with non-negative integers only, as a sweep's ``seed`` is
SEED_OPTION = click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                           help="Seed of the synthetic inputs.")


def with_options(options: list[Decorator]) -> Decorator:
    """The decorators of ``options`` as one, in the order given (the first listed first in the help)."""
    return lambda f: functools.reduce(lambda acc, opt: opt(acc), reversed(options), f)


FORMAT_OPTION_LIST = [
    click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                 help="How to print the results: tables (the default; folded to the width where a table "
                      "does not fit), pull-request markdown, CSV (a line per stage, case and variant) or "
                      "the JSON record."),
    click.option("--markdown", is_flag=True, help="The same as --format markdown."),
]
FORMAT_OPTIONS = with_options(FORMAT_OPTION_LIST)  # --format and --markdown: how a command prints its results
