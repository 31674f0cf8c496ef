"""The options of every command that prints or writes, each checked as the arguments are parsed (so before
anything is measured): output files, --json, --format/--markdown, --quiet, --device. They reach nothing
that measures, so ``qsa report`` and ``qsa plot`` load no runner."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import click

from ..core.files import check_writable
from ..output import EXPORTS, FORMATS
from .exit_status import UsageProblem
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

DEVICE_OPTION = click.option("--device", "device_id", type=click.IntRange(min=0), default=0, show_default=True,
                             help="The CUDA device to run on, by index as CUDA numbers the visible devices "
                                  "(CUDA_VISIBLE_DEVICES applies).")

# gate's and compare's --tolerance: a fraction of the baseline's median; 1 or more would leave no FAST
TOLERANCE_RANGE = click.FloatRange(0, 1, max_open=True)

QUIET_OPTION = click.option("--quiet", is_flag=True, help="No progress on stderr.")

# numpy seeds its generators with non-negative integers only, as a sweep's ``seed`` is
SEED_OPTION = click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                           help="Seed of the synthetic inputs.")


def given(name: str) -> bool:
    """Whether the current command's parameter ``name`` was given (on the command line or by its environment
    variable), not left at its default: an option that does not apply is refused only when given."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (None, click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP)


def check_distinct(outputs: dict[str, str | None], inputs: dict[str, str | None] | None = None) -> None:
    """No output of a command (option -> path; None: not given) is another of its outputs, or one of the
    files it reads: the second would overwrite the first, or the input it was made from. Inputs may be one
    file (a gate of a record against itself)."""
    read = {os.path.realpath(path): option for option, path in (inputs or {}).items() if path is not None}
    seen: dict[str, str] = {}
    for option, path in outputs.items():
        if path is None or path == STDOUT:
            continue
        real = os.path.realpath(path)
        first = seen.get(real) or read.get(real)
        if first is not None:
            raise UsageProblem(f"{first} and {option} name one file, {path}: give each its own")
        seen[real] = option


def with_options(options: list[Decorator]) -> Decorator:
    """The decorators of ``options`` as one, in the order given (the first listed first in the help)."""
    return lambda f: functools.reduce(lambda acc, opt: opt(acc), reversed(options), f)


_FORMAT_HELP = ("How to print the results: tables (the default; folded to the width where a table does not fit), "
                "pull-request markdown, CSV (a line per stage, case and variant) or the JSON record.")
FORMAT_OPTION_LIST = [
    click.option("--format", "fmt", type=click.Choice(FORMATS), default=None, help=_FORMAT_HELP),
    click.option("--markdown", is_flag=True, help="The same as --format markdown."),
]
FORMAT_OPTIONS = with_options(FORMAT_OPTION_LIST)  # --format and --markdown: how a command prints its results
# a command whose results are timings also exports them to the dashboards' formats (output/export.py)
EXPORT_FORMAT_OPTIONS = with_options([
    click.option("--format", "fmt", type=click.Choice((*FORMATS, *EXPORTS)), default=None,
                 help=_FORMAT_HELP[:-1] + ", or the timings for a dashboard: gab (github-action-benchmark's "
                      "customSmallerIsBetter JSON) or bmf (the Bencher Metric Format)."),
    FORMAT_OPTION_LIST[1],
])

# what a judging command (one that gives a verdict for CI) writes and prints beside its --format (finish.py)
CI_FLAGS = {"junit_path": "--junit", "comment_path": "--comment", "verbose": "--verbose"}
CI_OPTIONS = with_options([
    click.option("--junit", "junit_path", type=OUTPUT, help="Write JUnit XML here: a testcase per row judged."),
    click.option("--comment", "comment_path", type=OUTPUT,
                 help="Write a pull-request comment here (markdown, under GitHub's 65,536 characters): the verdict, "
                      "the card, clocks and commits, the rows that are not SAME; the rest folded."),
    click.option("-v", "--verbose", is_flag=True,
                 help="In a log, every row (as at a terminal) in place of the summary: the verdict, the rows "
                      "counted per stage and verdict, the card, clocks and commits, where the record is."),
])
