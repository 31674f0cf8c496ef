"""A run's rows into its record: the one way a run's record is assembled.

Every row a run takes comes in through ``add_rows``: a case's rows as the case ends (session.Session.take),
its notes once each. So do the rows of the child qsa processes that run its variants under an engine's
switches (runs/switched.py): a child's record is read back, checked to be of the same run (``check_child``),
and its rows of the variants it ran for the run are taken (``InCaseOrder.take_child``) and placed among the
run's, so that the record reads as if each case had run alone in one process: a case's rows together, those
of this process first, then each child's in the order the case names its switch settings; the cases in the
run's order, whichever child ran when.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import SwitchedRunError
from .schema import Agreement, Measurement, ParityCheck, RunRecord
from .vocabulary import last_call

ROW_LISTS = ("measurements", "parity", "agreements")  # a record's rows of its cases, each list in the order taken
Start = dict[str, int]  # each row list's length at a point of a run


def start_of(record: RunRecord) -> Start:
    return {name: len(getattr(record, name)) for name in ROW_LISTS}


@dataclass
class CaseRows:
    """What one process made of one case (or of several, one after another): its rows and its notes."""

    measurements: list[Measurement] = field(default_factory=list)
    parity: list[ParityCheck] = field(default_factory=list)
    agreements: list[Agreement] = field(default_factory=list)  # inexact variants' outputs measured
    notes: list[str] = field(default_factory=list)  # e.g. an engine variant that refused this call

    def extend(self, other: CaseRows) -> None:
        _append_rows(self, other)
        self.notes += other.notes


def _append_rows(into: CaseRows | RunRecord, rows: CaseRows) -> None:
    for name in ROW_LISTS:
        getattr(into, name).extend(getattr(rows, name))


def add_rows(record: RunRecord, rows: CaseRows) -> None:
    """``rows`` into ``record`` after those it holds, each note once."""
    _append_rows(record, rows)
    record.notes += [n for n in dict.fromkeys(rows.notes) if n not in record.notes]


def _made(record: RunRecord) -> dict[str, Any]:
    """What a record's rows were made by: the backend and card, qsa's code and kernel sources, the engine builds."""
    return {"backend": record.backend, "card": (record.device.get("pci_bus_id"), record.device.get("name")),
            "qsa": (record.tool_version, record.git_commit), "kernel sources": record.kernel_source_hash,
            "engine builds": [(e.get("name"), e.get("commit"), e.get("library_sha256"))
                              for e in record.settings.get("engines", [])]}


def check_child(run: RunRecord, child: RunRecord, what: str) -> None:
    """``child`` (the record of ``what``, a child of the run) made as the run's own rows are: the same backend and
    card, qsa's code and kernel sources, and engine builds (the child builds nothing: the cache has the run's);
    a SwitchedRunError naming the first that differs. Its rows then need no provenance of their own but the
    switches they ran under, which their variants' names and kinds say."""
    ours, theirs = _made(run), _made(child)
    differs = next((name for name in ours if ours[name] != theirs[name]), None)
    if differs is not None:
        raise SwitchedRunError(f"{what} ran with other {differs} than this run: {theirs[differs]} (this run: "
                               f"{ours[differs]})")


def _rows_of(child: RunRecord, wanted: Mapping[str, tuple[str, ...]]) -> dict[str, CaseRows]:
    """``child``'s rows of the variants ``wanted`` names for each case (its key -> those variants), by case: their
    measurements and the checks of their outputs (their last timed calls' too), not those of what the child ran
    beside them to check them against (qsa's reference). A SwitchedRunError where the child
    holds a case it was not given."""
    strange = next((row.key for name in ROW_LISTS for row in getattr(child, name) if row.key not in wanted), None)
    if strange is not None:
        raise SwitchedRunError(f"a child's record holds a case its run did not give it: {strange}")
    subjects = {key: {*names, *map(last_call, names)} for key, names in wanted.items()}
    taken = {key: CaseRows() for key in wanted}
    for m in child.measurements:
        if m.variant in wanted[m.key]:
            taken[m.key].measurements.append(m)
    for p in child.parity:
        if p.subject in subjects[p.key]:
            taken[p.key].parity.append(p)
    for a in child.agreements:
        if a.subject in subjects[a.key]:
            taken[a.key].agreements.append(a)
    return taken


class InCaseOrder:
    """The rows a run's cases take into its record from now on, in the run's order of its cases whichever process
    made them: a case's rows together, those of this process first (taken as each case ends, ``add_rows``), then
    each child's (``take_child``) in the order the case names the children's switch settings."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self.start = start_of(record)
        self.part: dict[int, int] = {}  # a child's row (by id) -> its place among its case's parts (this process's: 0)

    def take_child(self, child: RunRecord, cases: Sequence[str],
                   parts: Mapping[str, tuple[int, tuple[str, ...]]]) -> dict[str, CaseRows]:
        """The rows ``child`` made of the variants ``parts`` names for each case it ran (its key -> (the child's
        part in that case: 1, 2, ... in the order the case names the settings; those variants)), each placed
        after the case's earlier parts, the cases in the order of ``cases`` (each one's key); its notes after the
        run's, once each. Returns them by case."""
        taken = _rows_of(child, {key: names for key, (_, names) in parts.items()})
        for key, rows in taken.items():
            for row in (*rows.measurements, *rows.parity, *rows.agreements):
                self.part[id(row)] = parts[key][0]
            add_rows(self.record, rows)
        add_rows(self.record, CaseRows(notes=child.notes))
        place = {key: i for i, key in enumerate(cases)}
        for name in ROW_LISTS:
            rows = getattr(self.record, name)
            rows[self.start[name]:] = sorted(rows[self.start[name]:],
                                             key=lambda row: (place[row.key], self.part.get(id(row), 0)))
        return taken
