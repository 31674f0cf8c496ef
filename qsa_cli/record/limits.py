"""Limits on the measures of inexact variants (record/schema.py Agreement): their names, how one is given
(``[VARIANT:]MEASURE=VALUE`` on a command line, a sweep's ``limits:``), and how a row is judged by them.

A limit is scoped to one variant by its name, or to every inexact variant (``inexact``); a variant's own
limit on a measure takes the place of the ``inexact`` one. A window pair is judged by the limits of each of
its parts that is inexact. Only a row against the stage's reference variant or CPU model is judged (a row
against another variant, a pair's, is shown). Without limits an inexact variant fails nothing. Read by the
run (session.py judges each row as it is recorded) and by ``qsa gate``, which may judge a saved record by
limits of its own; record/ and core/ only, so the gate's output module may import it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ..core.errors import LimitError
from .schema import Agreement, LimitVerdict, ScoreErrors, SelectionAgreement
from .vocabulary import CPU_MODEL, CPU_ORACLE, SCORES, TOPK, WINDOW

ALL_INEXACT = "inexact"  # a limit's scope: every variant declared not bitwise
Limits = Mapping[str, Mapping[str, float]]  # scope (a variant, or ALL_INEXACT) -> limit name -> value


@dataclass(frozen=True)
class Limit:
    """A limit's name, the measure it bounds, whether it is a ceiling (``max_``) or a floor (``min_``), and the
    largest value it may take (a fraction's 1)."""

    name: str
    measured: str  # "scores" (ScoreErrors) or "selection" (SelectionAgreement)
    ceiling: bool
    most: float = math.inf

    def value(self, row: Agreement) -> float | None:
        """The row's value of the limit's measure; None when the row has no such measure."""
        if self.measured == "scores":
            return None if row.scores is None else float(_score_value(row.scores, self.name))
        return None if row.selection is None else _selection_value(row.selection, self.name)


def _score_value(errors: ScoreErrors, name: str) -> float:
    return float(errors[name])  # type: ignore[literal-required]


def _selection_value(agreement: SelectionAgreement, name: str) -> float:
    if name == "min_identical_fraction":
        return agreement["identical_queries"] / agreement["queries"] if agreement["queries"] else 1.0
    return agreement["mean_id_fraction" if name == "min_mean_id_fraction" else "min_id_fraction"]


LIMITS: dict[str, Limit] = {limit.name: limit for limit in (
    Limit("max_abs_error", "scores", True),  # ScoreErrors' max_abs_error
    Limit("max_rel_error", "scores", True),
    Limit("max_ulps", "scores", True),
    Limit("min_id_fraction", "selection", False, 1.0),  # the least fraction of the reference's ids a query holds
    Limit("min_mean_id_fraction", "selection", False, 1.0),  # their mean over the queries
    Limit("min_identical_fraction", "selection", False, 1.0),  # the queries whose selection is identical
)}
STAGE_MEASURES = {SCORES: ("scores", "selection"), TOPK: ("selection",), WINDOW: ("selection",)}  # where measured


def limit_value(name: str, value: float) -> float:
    """``value`` as the limit ``name`` takes it: a LimitError for an unknown name or a value out of range."""
    limit = LIMITS.get(name)
    if limit is None:
        raise LimitError(f"no measure {name!r} to limit (expected one of {', '.join(LIMITS)})")
    if not (math.isfinite(value) and 0 <= value <= limit.most):
        upper = f"between 0 and {limit.most:g}" if math.isfinite(limit.most) else "a finite number >= 0"
        raise LimitError(f"limit {name} must be {upper} (got {value!r})")
    return value


def parse_limit(text: str) -> tuple[str, str, float]:
    """``[VARIANT:]MEASURE=VALUE`` (a command line's ``--limit``) as (scope, measure, value); no VARIANT: every
    inexact variant (``inexact``). A LimitError (one line) for anything else."""
    left, eq, number = text.rpartition("=")
    scope, colon, name = left.rpartition(":")
    if not eq or not name.strip() or (colon and not scope.strip()):
        raise LimitError(f"limit {text!r}: expected [VARIANT:]MEASURE=VALUE, e.g. max_ulps=8 or "
                         "NAME.scores-tc:min_id_fraction=0.99")
    try:
        value = float(number)
    except ValueError:
        raise LimitError(f"limit {text!r}: {number!r} is not a number") from None
    return (scope.strip() or ALL_INEXACT), name.strip(), limit_value(name.strip(), value)


def merged(*given: Limits) -> dict[str, dict[str, float]]:
    """Limits of several sources as one, a later source's value of a (scope, measure) taking the place of an
    earlier's (a command line's after a sweep file's)."""
    out: dict[str, dict[str, float]] = {}
    for limits in given:
        for scope, named in limits.items():
            out.setdefault(scope, {}).update(named)
    return out


def check_scopes(limits: Limits, inexact: Mapping[str, str], known: Collection[str]) -> None:
    """Every scope of ``limits`` an inexact variant of the run (``inexact``: name -> stage) whose stage
    measures what it limits; ``known``: every variant of the run. A LimitError naming the first that is not."""
    for scope, named in limits.items():
        if scope == ALL_INEXACT:
            continue
        if scope not in known:
            raise LimitError(f"a limit for {scope!r}: the run has no such variant")
        if scope not in inexact:
            raise LimitError(f"a limit for {scope!r}: it is exact (checked bit for bit, never measured); limits "
                             "apply to variants declared not bitwise")
        unmeasured = next((n for n in named if LIMITS[n].measured not in STAGE_MEASURES[inexact[scope]]), None)
        if unmeasured is not None:
            raise LimitError(f"a limit {unmeasured} for {scope!r}: a {inexact[scope]} variant's output has no "
                             f"{LIMITS[unmeasured].measured.replace('scores', 'score errors')} to limit")


def judged_against(against: str, reference: str | None) -> bool:
    """Whether a row against ``against`` is judged by the limits: the stage's reference variant, or its CPU model."""
    return against in (CPU_MODEL, CPU_ORACLE) or (reference is not None and against == reference)


def limits_for(subject: str, inexact: Collection[str], limits: Limits) -> dict[str, float]:
    """The limits on ``subject`` (a window pair: on each of its inexact parts, the later part's taking the
    place of the earlier's): every inexact variant's, then its own; none when no part is inexact."""
    parts = [part for part in subject.split("+") if part in inexact]
    out = dict(limits.get(ALL_INEXACT, {})) if parts else {}
    for part in parts:
        out.update(limits.get(part, {}))
    return out


def verdicts(row: Agreement, reference: str | None, inexact: Collection[str], limits: Limits) -> list[LimitVerdict]:
    """``row`` judged by the limits on its subject, when it is against the stage's ``reference`` variant or its
    CPU model (else none): what a run records in ``row.limits``, and what ``qsa gate --limit`` judges a saved
    record by."""
    return judge(row, limits_for(row.subject, inexact, limits)) if judged_against(row.against, reference) else []


def judge(row: Agreement, limits: Mapping[str, float]) -> list[LimitVerdict]:
    """``row`` judged by ``limits`` (limit name -> value; those of a measure the row lacks are not judged). A
    score limit fails where an entry is mismatched (a NaN or infinity against a number): its error is no number."""
    out = []
    for name, bound in limits.items():
        limit = LIMITS[name]
        value = limit.value(row)
        if value is None:
            continue
        mismatched = row.scores["mismatched"] if limit.measured == "scores" and row.scores else 0
        passed = (value <= bound if limit.ceiling else value >= bound) and not mismatched
        detail = f"{mismatched} entries mismatched (a NaN or infinity against another value)" if mismatched else ""
        out.append(LimitVerdict(measure=name, value=value, limit=bound, passed=passed, detail=detail))
    return out
