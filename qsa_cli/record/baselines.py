"""Baselines kept per card: a folder that holds, for each card key, every run promoted to be that card's
baseline and which of them is current.

    DIR/KEY/DATE-COMMIT.json   a promoted run, named by its date and qsa commit; written once, never replaced
    DIR/KEY/current            the file name of the card's current baseline (replaced whole on each promote)

A card key is what makes two runs' times comparable: the device's name, compute capability and memory
size, and the engine checkouts the run had: one (whatever its name: the gate matches its variants
``NAME.KIND`` by their kind), or several by their names. Every promoted run stays, so a card's history is
its folder; ``current`` moves forward only by a promote.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import BaselineError
from ..core.files import atomic_write, made_folder
from .load import load_record
from .schema import DeviceInfo, RunRecord, write_json

CURRENT = "current"
_UNSAFE = re.compile(r"[^a-z0-9.]+")


def _slug(text: str) -> str:
    return _UNSAFE.sub("-", text.lower()).strip("-") or "unnamed"


def engine_names(record: RunRecord) -> list[str]:
    """The names of the engine checkouts whose variants the run had."""
    return [e["name"] for e in record.settings.get("engines") or [] if "name" in e]


def card_key(device: DeviceInfo, engines: Sequence[str]) -> str | None:
    """``nvidia-h200-sm90-140gib``, with ``+engine`` for a run of one engine checkout (the gate matches its
    variants by their kind, whatever its name) and ``+NAME`` for each of several (matched by their names);
    None where the device is not named whole (no name, compute capability or memory size: a CPU-backend
    run, or a hand-made record)."""
    if not all(device.get(k) for k in ("name", "compute_capability", "memory_bytes")):
        return None
    gib = round(device["memory_bytes"] / 2**30)
    cc = device["compute_capability"].replace(".", "")
    named = ["engine"] if len(engines) == 1 else sorted(engines)
    return f"{_slug(device['name'])}-sm{cc}-{gib}gib" + "".join(f"+{_slug(e)}" for e in named)


def record_key(record: RunRecord) -> str | None:
    return card_key(record.device, engine_names(record))


def run_name(record: RunRecord) -> str:
    """``2026-11-30T005332Z-528ef52dfd0b.json``: when it ran (UTC) and the qsa commit it ran at."""
    when = record.created.replace(":", "").replace("+0000", "Z")
    return f"{when}-{_slug(record.git_commit or 'no-commit')}.json"


def current(folder: Path, key: str) -> Path | None:
    """The current baseline file of ``key`` in ``folder``; None where the card has none."""
    pointer = folder / key / CURRENT
    if not pointer.is_file():
        return None
    name = pointer.read_text().strip()
    if not name or "/" in name or not (folder / key / name).is_file():
        raise BaselineError(f"{pointer}: names {name!r}, which is no baseline file beside it")
    return folder / key / name


def check_promotable(record: RunRecord, path: str) -> str:
    """The card key of a run that may become its card's baseline; a BaselineError for one that may not: an
    incomplete (interrupted) run, a failing one, the CPU backend's, one whose card is not named whole."""
    if record.incomplete:
        raise BaselineError(f"{path}: the run was interrupted (incomplete): a baseline is a whole run")
    if record.backend != "gpu":
        raise BaselineError(f"{path}: a {record.backend}-backend run: its times are not a card's, so no baseline")
    if not record.passed:
        raise BaselineError(f"{path}: the run fails its own checks: a baseline must pass them")
    if not record.measurements:
        raise BaselineError(f"{path}: the run timed nothing: a baseline's times are what the gate compares")
    key = record_key(record)
    if key is None:
        raise BaselineError(f"{path}: the run's device has no name, compute capability or memory size recorded")
    return key


def promote(record: RunRecord, path: str, folder: Path) -> Path:
    """``record`` (read from ``path``) stored as its card's newest baseline in ``folder`` and made current: the
    run's file first (whole or not at all; one of that name already there must hold the same run), then
    the pointer; where the pointer cannot be written, the run's file (and a folder) this call made go again.
    Returns the stored file."""
    key = check_promotable(record, path)
    stored = folder / key / run_name(record)
    made = not stored.exists()
    if not made and load_record(stored).to_dict() != record.to_dict():
        raise BaselineError(f"{stored} holds another run of the same date and commit: it is never replaced")
    with made_folder(stored.parent):
        if made:
            write_json(stored, record.to_dict())
        try:
            with atomic_write(folder / key / CURRENT) as fh:
                fh.write(stored.name + "\n")
        except BaseException:
            if made:  # a run stored but never current would show in the card's history: it goes too
                stored.unlink()
            raise
    return stored


@dataclass(frozen=True)
class Kept:
    """A card's current baseline: its key, its file and the run."""

    key: str
    path: Path
    record: RunRecord


def kept(folder: Path) -> list[Kept]:
    """Every card's current baseline in ``folder``, by key."""
    out = []
    for entry in sorted(folder.iterdir()):
        found = current(folder, entry.name) if entry.is_dir() else None
        if found is not None:
            out.append(Kept(entry.name, found, load_record(found)))
    return out
