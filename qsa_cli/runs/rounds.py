"""A run's rows made again in the same session: the gate's confirmation of a SLOW row (runs/sweep.remeasure)
and qsa compare's rounds (``--rounds N``: the whole run N times over, each (case, variant)'s samples pooled)."""

from __future__ import annotations

from collections.abc import Callable

from ..record.assembly import Start, start_of
from ..record.schema import Measurement, RunRecord


def taken_back(record: RunRecord, start: Start) -> list[Measurement]:
    """The measurements taken into ``record`` since ``start``, taken back out of it (the caller keeps them as it
    must). The checks since stay only where one fails: on the same inputs a pass repeats one already in the
    record, and a failure is news that fails the run."""
    again = record.measurements[start["measurements"]:]
    del record.measurements[start["measurements"]:]
    record.parity[start["parity"]:] = [p for p in record.parity[start["parity"]:] if not p.equal]
    record.agreements[start["agreements"]:] = [a for a in record.agreements[start["agreements"]:] if not a.passed]
    return again


def in_rounds(record: RunRecord, rounds: int, run_once: Callable[[], None]) -> None:
    """``run_once`` (which takes its rows into ``record``) ``rounds`` times in a row, so that in each case the
    variants run in the same order round after round (base, candidate, base, candidate, ... in qsa compare):
    each (case, variant)'s samples pooled into its first round's measurement, with each round's median in
    ``round_medians_us`` (the spread across rounds: a drift between them shows there). The pooled
    measurement keeps the first round's clocks before, stopping rule and launches, and the last round's
    clocks after; it is throttled if any round was."""
    run_once()
    if rounds == 1:
        return
    pooled = {(m.key, m.variant): m for m in record.measurements}
    medians = {row: [m.median_us] for row, m in pooled.items()}
    for _ in range(rounds - 1):
        start = start_of(record)
        run_once()
        for m in taken_back(record, start):
            first = pooled[(m.key, m.variant)]  # a round runs what the first ran
            first.samples_us = [*first.samples_us, *m.samples_us]
            first.clocks_after = m.clocks_after
            first.throttled = first.throttled or m.throttled
            medians[(m.key, m.variant)].append(m.median_us)
    for row, m in pooled.items():
        m.round_medians_us = medians[row]
