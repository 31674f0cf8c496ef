"""``qsa baseline list``: each card's current baseline, with its date, commits and clocks. Reads the kept
records only (record/baselines.py)."""

from __future__ import annotations

from collections.abc import Sequence

from ..record.baselines import Kept
from .judged import run_of
from .layout import Block, Column, Prose, Sheet, csv_text
from .report import card, clocks_text

COLUMNS = (Column("card key", bare=True), Column("card"), Column("run"), Column("clocks"), Column("file"))


def baseline_blocks(kept: Sequence[Kept], folder: str) -> list[Block]:
    if not kept:
        return [Prose(f"No card has a baseline in {folder}: qsa baseline promote RUN.json --dir {folder} makes one.")]
    sheet = Sheet(f"Baselines in {folder}: the current one of each card", COLUMNS)
    for k in kept:
        sheet.add(k.key, card(k.record), run_of(k.record), clocks_text(k.record), k.path.name)
    return [sheet]


def baseline_csv(kept: Sequence[Kept]) -> str:
    return csv_text(("key", "card", "created", "qsa_commit", "engines", "clocks", "file"),
                    [(k.key, card(k.record), k.record.created, k.record.git_commit,
                      " ".join(f"{e.get('name')}@{e.get('commit')}" for e in k.record.settings.get("engines") or []),
                      clocks_text(k.record), str(k.path)) for k in kept])


def baseline_data(kept: Sequence[Kept]) -> list[dict[str, object]]:
    """The JSON form: each card's key, its baseline's file, and the run as its record has it."""
    return [{"key": k.key, "file": str(k.path), "record": k.record.to_dict()} for k in kept]
