"""The positional CTX Q ITERS CAP of a call, each a one-line usage error when it is not a number in range
(ITERS may be ``auto``: as many samples as the stopping rule takes)."""

from __future__ import annotations

from typing import Any

import click

from ..core.geometry import SIZE_EXAMPLES, Call, check_capacity, check_queries, parse_count, parse_size
from ..timing import AUTO, MAX_ITERATIONS, Iters
from .exit_status import UsageProblem
from .options import given

DEFAULT_ITERS = 50  # ITERS of a call whose inputs come from a file (--iters)
# "-3" among CTX Q ITERS CAP is a (bad) number, not an unknown option: let the range checks name it.
POSITIONAL_NEGATIVES = {"ignore_unknown_options": True}


class IterationsType(click.ParamType):
    """--iters: a count, or auto."""

    name = "integer|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Iters:
        if value == AUTO or isinstance(value, int):
            return value
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r} is not an integer or {AUTO}", param, ctx)


ITERATIONS = IterationsType()


SIZES = ("CTX", "CAP")  # cells: written as a sweep file's sizes are (32K), the rest are counts


def integers(args: tuple[str, ...], names: list[str]) -> list[Iters]:
    """``args`` as integers (ITERS may be auto; CTX and CAP are sizes, 32K as in a sweep file), each named by
    ``names`` in its error; an unknown option among them (which POSITIONAL_NEGATIVES lets through) named as
    click would name it."""
    values: list[Iters] = []
    for raw in args:
        if raw.startswith("-") and parse_size(raw) is None:
            raise UsageProblem(f"no such option: {raw}")
    for name, raw in zip(names, args):
        if name == "ITERS" and raw == AUTO:
            values.append(AUTO)
            continue
        value = parse_size(raw) if name in SIZES else parse_count(raw)
        if value is None:
            kind = f"a number of cells such as {SIZE_EXAMPLES}" if name in SIZES else \
                f"an integer{' or ' + AUTO if name == 'ITERS' else ''}"
            raise UsageProblem(f"{name} must be {kind} (got {raw!r})")
        values.append(value)
    return values


def decode_call(args: tuple[str, ...], command: str) -> tuple[Call, Iters]:
    """CTX Q ITERS CAP of a decode call (1-8 queries): the call and ITERS, or a one-line usage error."""
    ints = integers(args, ["CTX", "Q", "ITERS", "CAP"])
    if len(args) != 4:
        raise UsageProblem(f"{command} takes CTX Q ITERS CAP (got {len(args)} argument(s))")
    ctx, nq, iters, cap = ints
    call = Call(ctx, nq, cap)
    check_capacity(cap)
    check_queries(nq, prompt=False)
    check_iters(iters)
    return call, iters


def check_given_with_inputs(inputs_path: str | None, options: dict[str, str]) -> None:
    """``options`` (parameter -> the positional it stands for: {"iters_opt": "ITERS"}) apply to an --inputs
    file's call only: given without --inputs, refused (they would be recorded as applied, and not be)."""
    if inputs_path is None:
        for name, positional in options.items():
            if given(name):
                flag = "--" + name.removesuffix("_opt")
                raise UsageProblem(f"{flag} goes with --inputs FILE (the {positional} of its call): without it, "
                                   f"{flag} would not be used")


def check_iters(iters: Iters) -> None:
    if iters == AUTO:
        return
    if iters <= 0:
        raise UsageProblem(f"ITERS must be > 0 (got {iters})")
    if iters > MAX_ITERATIONS:
        raise UsageProblem(f"ITERS must be <= {MAX_ITERATIONS} (got {iters})")
