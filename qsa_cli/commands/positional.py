"""The positional CTX Q ITERS CAP of a call, each a one-line usage error when it is not a number in range."""

from __future__ import annotations

from ..core.geometry import Call, check_capacity, check_queries
from ..timing import MAX_ITERATIONS
from .exit_status import UsageProblem

DEFAULT_ITERS = 50  # ITERS of a call whose inputs come from a file (--iters)
# "-3" among CTX Q ITERS CAP is a (bad) number, not an unknown option: let the range checks name it.
POSITIONAL_NEGATIVES = {"ignore_unknown_options": True}


def integers(args: tuple[str, ...], names: list[str]) -> list[int]:
    """``args`` as integers, each named by ``names`` in its error; an unknown option among them (which
    POSITIONAL_NEGATIVES lets through) named as click would name it."""
    values = []
    for raw in args:
        if raw.startswith("-") and not raw[1:].isdigit():
            raise UsageProblem(f"no such option: {raw}")
    for name, raw in zip(names, args):
        try:
            values.append(int(raw))
        except ValueError:
            raise UsageProblem(f"{name} must be an integer (got {raw!r})") from None
    return values


def decode_call(args: tuple[str, ...], command: str) -> tuple[Call, int]:
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


def check_iters(iters: int) -> None:
    if iters <= 0:
        raise UsageProblem(f"ITERS must be > 0 (got {iters})")
    if iters > MAX_ITERATIONS:
        raise UsageProblem(f"ITERS must be <= {MAX_ITERATIONS} (got {iters})")
