"""A card's history: every run promoted into a baseline folder (record/baselines.py keeps each one under its
card's key, named by its date and commit, never rewriting one), read back in the order they ran.

A run names the commits it measured: qsa's own (``git_commit``) and, for an ``--engine`` run, each engine
checkout's (``settings.engines[].commit``); ``commits_of`` reads them.
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import InputError
from .load import load_record
from .schema import RunRecord

QSA = "qsa"
NO_COMMIT = "no commit"


def commits_of(record: RunRecord) -> tuple[tuple[str, str], ...]:
    """(what, commit) of the code a run measured: qsa's first, then each engine checkout's by its name."""
    engines = record.settings.get("engines") or []
    return ((QSA, record.git_commit or NO_COMMIT),
            *((e["name"], e.get("commit") or e.get("revision") or NO_COMMIT) for e in engines if "name" in e))


def cards(folder: Path) -> list[str]:
    """The card keys of ``folder`` that hold a run; an InputError for no such folder, or one with no run."""
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder (qsa baseline promote RUN.json --dir {folder} keeps runs there)")
    keys = [d.name for d in sorted(folder.iterdir()) if d.is_dir() and any(d.glob("*.json"))]
    if not keys:
        raise InputError(f"{folder}: no run kept in it (qsa baseline promote RUN.json --dir {folder} keeps them)")
    return keys


def runs(folder: Path, key: str) -> list[tuple[Path, RunRecord]]:
    """Every run kept for card ``key`` in ``folder``, oldest first (by when it ran, then by file name); a file
    that is not a record is the InputError load_record makes of it."""
    kept = [(path, load_record(path)) for path in sorted((folder / key).glob("*.json"))]
    return sorted(kept, key=lambda pr: (pr[1].created, pr[0].name))
