"""Reading records back: a file's size and nesting checked before it is parsed, an older version migrated
to this one, every field checked against the schema; and many runs merged into one record.

A record is trusted by everything that renders it, so nothing reaches the renderers unchecked: a file
that is not a record, is too large or too deep, or has a field of the wrong type is one InputError
naming the file and what is wrong.
"""

from __future__ import annotations

import gzip
import json
import lzma
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..core.geometry import HALVE_MAX_QUERIES, MAX_QUERIES
from .schema import SCHEMA, SCHEMA_VERSION, RunRecord
from .vocabulary import QSA_TIMER, RENAMED_L2, SCORES, TOPK

# The largest shipped record is under 1 MB; a sweep keeping every sample of a thousand cases is tens of
# MB. Past this the file is not a record, and reading it would only cost memory.
MAX_RECORD_BYTES = 256 * 2**20
# A record nests about six levels deep (the record, its settings, an engine's sources); json and the
# schema check recurse once per level, so a file nested deeper is refused before either sees it.
MAX_DEPTH = 32

# The roles the registry gave every run before runs recorded them (settings["roles"], since version 2's
# later records): a record without them ran these.
ROLES_BEFORE_RECORDED: dict[str, dict[str, str]] = {
    SCORES: {"reference": "reference", "baseline": "multi", "candidate": "halve"},
    TOPK: {"reference": "reference", "baseline": "wide", "candidate": "split"},
}


def _to_version_2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added ``incomplete`` and ``sanitizer``: every version 1 run ran to its end, and none ran
    compute-sanitizer."""
    return {"incomplete": False, "sanitizer": [], **data}


def _to_version_3(data: dict[str, Any]) -> dict[str, Any]:
    """Version 3 added ``checks`` (a selftest's checks, which no earlier record kept); an earlier record
    without ``settings["roles"]`` ran the registry's roles of the time."""
    out = {"checks": [], **data}
    settings = out.get("settings")
    if isinstance(settings, dict) and "roles" not in settings:
        out["settings"] = {**settings, "roles": {stage: dict(r) for stage, r in ROLES_BEFORE_RECORDED.items()}}
    return out


def _renamed_l2(holder: Any) -> Any:
    """A settings or case mapping whose ``l2`` is called by its version 4 name (anything else as it was)."""
    if isinstance(holder, dict) and isinstance(holder.get("l2"), str) and holder["l2"] in RENAMED_L2:
        return {**holder, "l2": RENAMED_L2[holder["l2"]]}
    return holder


def _to_version_4(data: dict[str, Any]) -> dict[str, Any]:
    """Version 4 named the L2 states: what earlier runs called "cold" (a read of twice the L2's size before
    each sample) is "clean", beside the new "dirty"; and a measurement gained ``batch`` and ``stop``, which no
    earlier run took (it timed no batches, and ITERS was always a count)."""
    out = {**data}
    if "settings" in out:
        out["settings"] = _renamed_l2(out["settings"])
    for rows in ("measurements", "parity", "thresholds", "sanitizer"):
        if isinstance(out.get(rows), list):
            out[rows] = [{**row, "case": _renamed_l2(row["case"])} if isinstance(row, dict) and "case" in row
                         else row for row in out[rows]]
    if isinstance(out.get("measurements"), list):
        out["measurements"] = [{"batch": None, "stop": None, **m} if isinstance(m, dict) else m
                               for m in out["measurements"]]
    return out


def _to_version_5(data: dict[str, Any]) -> dict[str, Any]:
    """Version 5 added ``agreements``, the measures of variants declared not bitwise: no earlier run had one
    (every variant's output was checked bit for bit); and a measurement's ``rounds`` (its holds and SM clocks
    judged), which no earlier run kept (its holds ran for a guessed time, unchecked), and the ``timer`` that
    timed it with ``nvbench``'s summary: every earlier measurement was qsa's timer's."""
    out = {"agreements": [], **data}
    if isinstance(out.get("measurements"), list):
        out["measurements"] = [{"rounds": None, "timer": QSA_TIMER, "nvbench": None, **m} if isinstance(m, dict)
                               else m for m in out["measurements"]]
    return out


def _to_version_6(data: dict[str, Any]) -> dict[str, Any]:
    """Version 6 times each sample alone, after the stream is drained, behind a hold of its own; its fields are
    version 5's, and a version 5 record's ``rounds`` keep what they said then (a round of 32 samples)."""
    return data


def _by_queries(choice: Any) -> Any:
    """A version 6 dispatch with ``scores_wide`` (the scorer of 5-8 queries) as version 7's ``scores_by_queries``."""
    if not isinstance(choice, dict) or "scores_wide" not in choice:
        return choice
    out = {k: v for k, v in choice.items() if k != "scores_wide"}
    out["scores_by_queries"] = [choice.get("scores")] * HALVE_MAX_QUERIES + [choice["scores_wide"]] * (MAX_QUERIES - HALVE_MAX_QUERIES)
    if isinstance(out.get("reasons"), dict) and "scores_wide" in out["reasons"]:
        out["reasons"] = {("scores_by_queries" if k == "scores_wide" else k): v for k, v in out["reasons"].items()}
    return out


def _to_version_7(data: dict[str, Any]) -> dict[str, Any]:
    """Version 7 records a decode call's scorer by its queries (``scores_by_queries``, 1-8) where version 6 had
    ``scores_wide``, the scorer of 5-8 queries (1-4 took ``scores``)."""
    settings = data.get("settings")
    if not isinstance(settings, dict) or not isinstance(settings.get("dispatch"), dict):
        return data
    d = settings["dispatch"]
    d = _by_queries(d) if "scores" in d else {kind: _by_queries(c) for kind, c in d.items()}
    return {**data, "settings": {**settings, "dispatch": d}}


def _to_version_8(data: dict[str, Any]) -> dict[str, Any]:
    """Version 8 added a measurement's ``launches`` (the kernels qsa's launcher enqueued a call), which no
    earlier run recorded."""
    if not isinstance(data.get("measurements"), list):
        return data
    return {**data, "measurements": [{"launches": None, **m} if isinstance(m, dict) else m
                                     for m in data["measurements"]]}


def _to_version_9(data: dict[str, Any]) -> dict[str, Any]:
    """Version 9 added ``confirmations`` (qsa gate --confirm's measurements again) and a measurement's
    ``round_medians_us`` (qsa compare --rounds), which no earlier run made."""
    out = {"confirmations": [], **data}
    if isinstance(out.get("measurements"), list):
        out["measurements"] = [{"round_medians_us": None, **m} if isinstance(m, dict) else m
                               for m in out["measurements"]]
    return out


# version -> the step that makes a record of that version one of the next
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _to_version_2, 2: _to_version_3,
                                                                     3: _to_version_4, 4: _to_version_5,
                                                                     5: _to_version_6, 6: _to_version_7,
                                                                     7: _to_version_8, 8: _to_version_9}

# a string (its run of plain characters taken at once: a record's many strings are most of its text) or a bracket
_BRACKET_OR_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def nesting_depth(text: str) -> int:
    """How deep a JSON text's arrays and objects nest (brackets inside strings do not count)."""
    depth = deepest = 0
    for match in _BRACKET_OR_STRING.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """A record's JSON form of any supported version as this version's; an InputError for another version."""
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SCHEMA_VERSION:
        raise InputError(f"result schema version {version} is not supported (this qsa reads 1 to {SCHEMA_VERSION})")
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](data)
        version += 1
    return {**data, "schema_version": SCHEMA_VERSION}


# a record kept compressed (as docs/results keeps its larger ones) is read as it is: its suffix names the format
UNPACKERS: dict[str, Callable[..., Any]] = {".xz": lzma.open, ".gz": gzip.open}


def _text(path: Path, what: str) -> str:
    """The file's text, refused when larger than any ``what`` can be (a compressed one: once unpacked)."""
    unpack = UNPACKERS.get(path.suffix)
    if unpack is None:
        size = path.stat().st_size
        if size > MAX_RECORD_BYTES:
            raise InputError(f"{path}: {size} bytes, larger than any {what} ({MAX_RECORD_BYTES} at most)")
        return path.read_text()
    with unpack(path, "rb") as packed:
        data = packed.read(MAX_RECORD_BYTES + 1)  # never more: a small file may unpack to gigabytes
    if len(data) > MAX_RECORD_BYTES:
        raise InputError(f"{path}: unpacks to more than any {what} ({MAX_RECORD_BYTES} bytes at most)")
    return data.decode()


def read_json(path: str | os.PathLike[str], what: str) -> Any:
    """A JSON file (or one compressed, ``UNPACKERS``) parsed, refused first if it is larger or nested deeper than
    any ``what`` can be."""
    path = Path(path)
    try:
        text = _text(path, what)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, EOFError, lzma.LZMAError) as exc:  # gzip's BadGzipFile is an OSError
        raise InputError(f"{path}: not a JSON {what} ({exc})") from None
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise InputError(f"{path}: nested {depth} levels deep, deeper than any {what} ({MAX_DEPTH} at most)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not a JSON {what} ({exc})") from None


def load_record(path: str | os.PathLike[str]) -> RunRecord:
    """Read a record written by ``RunRecord.write`` (any version since 1); a bad file is an InputError
    naming the file and what is wrong."""
    data = read_json(path, "result record")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise InputError(f"{path}: not a qsa result record (no \"schema\": \"{SCHEMA}\")")
    try:
        return RunRecord.from_dict(migrate(data))
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None


def _row_names(record: RunRecord) -> dict[tuple[str, str], str]:
    """What each of a record's rows is about, as (case, variant) -> how a message names it: a measurement's
    or parity row's variant, a sanitizer row's variant and tool, a selftest check."""
    out: dict[tuple[str, str], str] = {}
    for m in record.measurements:
        out.setdefault((m.key, m.variant), f"{m.variant} on {m.key}")
    for p in [*record.parity, *record.agreements]:
        out.setdefault((p.key, p.subject), f"{p.subject} on {p.key}")
    for s in record.sanitizer:
        out.setdefault((s.key, f"{s.variant} {s.tool}"), f"{s.variant} under {s.tool} on {s.key}")
    for c in record.checks:
        out.setdefault(("selftest", c.check), f"the check {c.check!r}")
    return out


def merge_records(named: list[tuple[str, RunRecord]]) -> RunRecord:
    """Many runs of one device as one record (e.g. a benchmark table built from one command per case), each
    given with its file's name.

    Refuses runs of different devices or backends, and two runs that both hold a (case, variant): the merged
    table would show one of them by the order of the files, or both counted twice (a file given twice).
    Runs of different kernel sources are merged with a note naming each hash, since a table of them
    compares more than one version.
    """
    first = named[0][1]
    for _, r in named[1:]:
        if (r.backend, r.device.get("name"), r.device.get("compute_capability")) != (
                first.backend, first.device.get("name"), first.device.get("compute_capability")):
            raise InputError(f"cannot merge runs of {first.device.get('name', first.backend)} and "
                             f"{r.device.get('name', r.backend)}")
    held: dict[tuple[str, str], str] = {}  # (case, variant) -> the file that holds it
    for path, r in named:
        for row, what in _row_names(r).items():
            if row in held:
                files = f"{path} is given twice" if held[row] == path else f"{held[row]} and {path} both hold it"
                raise InputError(f"cannot merge: {what} twice ({files}); give each (case, variant) once")
            held[row] = path
    merged = RunRecord.from_dict(first.to_dict())
    merged.command, merged.argv = "report", []
    merged.notes = [f"merged from {len(named)} runs, the first: `qsa {' '.join(first.argv)}`"]
    hashes = sorted({r.kernel_source_hash for _, r in named})
    if len(hashes) > 1:
        merged.notes.append("kernel sources differ between the merged runs: " + ", ".join(h[:12] for h in hashes))
    for _, r in named[1:]:
        merged.measurements += r.measurements
        merged.parity += r.parity
        merged.thresholds += r.thresholds
        merged.sanitizer += r.sanitizer
        merged.checks += r.checks
        merged.agreements += r.agreements
        merged.confirmations += r.confirmations
    merged.created = max(r.created for _, r in named)
    return merged
