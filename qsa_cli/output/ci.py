"""What a CI system reads of a judging command (output/judged.py's Judgement): JUnit XML, GitHub's workflow
annotations, a pull-request comment (also what the step summary gets), and the short summary a log shows
in place of every row.

The comment stays under GitHub's limit on a comment's body whatever the run's size: the rows that are not
routine (a SLOW, a failure, a FAST, a warning) first, in a table, the routine ones folded in a ``<details>``
block, and whatever would pass the limit left out with a note saying how many rows and where they are.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from .judged import FAILED, PASSED, ROUTINE, WARNED, Judgement, JudgedRow
from .layout import Block, Prose

COMMENT_LIMIT = 65_536  # GitHub refuses a comment body of this many characters or more
SUMMARY_NOTES = 3  # the notes a log's summary shows (a forced comparison's, what was not applied): it stays short
SUMMARY_WARNED = 3  # and the rows not judged (a skipped check, CPU times) it names


# ---- JUnit XML ------------------------------------------------------------------------------------------------


def junit_xml(j: Judgement) -> str:
    """One testsuite of one testcase per row: a failed row has a <failure> (its verdict the type), a warned one
    is <skipped>, a passed one says its verdict in <system-out>; the run's card, clocks and commits are
    the suite's properties."""
    counts = {"tests": str(len(j.rows)), "failures": str(len(j.of(FAILED))), "errors": "0",
              "skipped": str(len(j.of(WARNED)))}
    suites = ET.Element("testsuites", name=f"qsa {j.command}", **counts)
    suite = ET.SubElement(suites, "testsuite", name=f"qsa {j.command}", **counts)
    props = ET.SubElement(suite, "properties")
    for name, value in [*j.properties, ("card", j.card), ("clocks", j.clocks), *j.runs, *(("note", n) for n in j.notes)]:
        ET.SubElement(props, "property", name=name, value=value)
    for r in j.rows:
        attrs = {"classname": f"qsa.{r.stage}", "name": " :: ".join(part for part in (r.case, r.name) if part)}
        if r.seconds is not None:
            attrs["time"] = f"{r.seconds:.9f}"
        case = ET.SubElement(suite, "testcase", **attrs)
        said = _said(r)
        if r.outcome == FAILED:
            ET.SubElement(case, "failure", type=r.verdict, message=said)
        elif r.outcome == WARNED:
            ET.SubElement(case, "skipped", message=said)
        else:
            ET.SubElement(case, "system-out").text = said
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _said(r: JudgedRow) -> str:
    """``SLOW: 12.3 → 16.0 µs (+30%); 1.30x the baseline, outside both runs' spread``."""
    said = "; ".join(part for part in (r.measured, r.detail) if part)
    return f"{r.verdict}: {said}" if said else r.verdict


# ---- GitHub workflow commands ---------------------------------------------------------------------------------


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does (@actions/core, escapeData)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (title=...), escaped as GitHub's toolkit does (escapeProperty)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotations(j: Judgement) -> list[str]:
    """``::error title=...::...`` for each failed row and ``::warning title=...::...`` for each warned one
    (not judged, or shown instead of failed)."""
    out = []
    for r in j.rows:
        if r.outcome not in (FAILED, WARNED):
            continue
        level = "error" if r.outcome == FAILED else "warning"
        title = f"qsa {j.command}: {r.verdict} {r.stage} {r.name}"
        message = ", ".join(part for part in (r.case, _said(r)) if part)
        out.append(f"::{level} title={escape_property(title)}::{escape_data(message)}")
    return out


# ---- the pull-request comment and the step summary -----------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "–"


TABLE_HEAD = ["| stage | case | name | verdict | time | detail |", "|---|---|---|---|---|---|"]


def _table_line(r: JudgedRow) -> str:
    return "| " + " | ".join(_cell(c) for c in (r.stage, r.case, r.name, r.verdict, r.measured, r.detail)) + " |"


def _fitted(lines: Sequence[str], budget: int) -> tuple[list[str], int]:
    """The first of ``lines`` whose characters (each with its newline) fit in ``budget``, and how many did not."""
    kept, used = [], 0
    for i, line in enumerate(lines):
        used += len(line) + 1
        if used > budget:
            return kept, len(lines) - i
        kept.append(line)
    return kept, 0


def _left_out(n: int, what: str) -> str:
    return (f"_{n} more {what} left out to keep this under GitHub's {COMMENT_LIMIT:,} characters: the record "
            "(`--json`), the JUnit XML and `--format markdown` have every row._")


def comment(j: Judgement, limit: int = COMMENT_LIMIT) -> str:
    """The verdict, the card, its clocks and the commits; a table of the rows that are not routine; the routine
    ones folded in a ``<details>`` block; under ``limit`` characters, whatever the run's size."""
    head = [f"### qsa {j.command}: {'PASS' if j.passed else 'FAIL'}", "", f"**{j.verdict}**", "",
            "| | |", "|---|---|", f"| card | {_cell(j.card)} |", f"| clocks | {_cell(j.clocks)} |",
            *(f"| {_cell(which)} | {_cell(what)} |" for which, what in j.runs), "", *shown_notes(j), ""]
    notable: list[JudgedRow] = []
    routine: list[JudgedRow] = []
    for r in j.rows:
        (routine if r.verdict in ROUTINE and r.outcome == PASSED else notable).append(r)
    # room for the notes a cut adds, and the <details> block's own lines
    reserve = 2 * len(_left_out(len(j.rows), "rows")) + 200
    budget = limit - 1 - reserve - sum(len(line) + 1 for line in head)
    body = list(head)
    if notable:
        shown, cut = _fitted([*TABLE_HEAD, *map(_table_line, notable)], budget)
        body += [f"{len(notable)} of {len(j.rows)} rows need a look:", "", *shown]
        body += ["", _left_out(cut, "rows that are not routine")] if cut else []
        budget -= sum(len(line) + 1 for line in shown)
    elif j.rows:
        body += [f"Every one of the {len(j.rows)} rows is {'/'.join(sorted({r.verdict for r in j.rows}))}."]
    else:
        body += ["No row was judged."]
    if routine:
        verdicts = ", ".join(f"{sum(r.verdict == v for r in routine)} {v}" for v in dict.fromkeys(r.verdict for r in routine))
        shown, cut = _fitted([*TABLE_HEAD, *map(_table_line, routine)], max(budget, 0))
        body += ["", f"<details><summary>The other {len(routine)} rows ({verdicts})</summary>", "", *shown,
                 *(["", _left_out(cut, "routine rows")] if cut else []), "", "</details>"]
    return "\n".join(body) + "\n"


# ---- the summary a log shows ---------------------------------------------------------------------------------


def shown_notes(j: Judgement) -> list[str]:
    """The first notes (what a forced comparison overrode, what a run did not apply), and how many more."""
    notes = [note if note.endswith(".") else f"{note}." for note in j.notes[:SUMMARY_NOTES]]
    more = len(j.notes) - SUMMARY_NOTES
    return notes + ([f"{more} more notes: the record has them, and -v prints them."] if more > 0 else [])


def per_stage(j: Judgement) -> list[str]:
    """``scores: 48 SAME``: each stage's rows counted by verdict, in the order first met."""
    stages: dict[str, dict[str, int]] = {}
    for r in j.rows:
        counts = stages.setdefault(r.stage, {})
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    return [f"{stage}: " + ", ".join(f"{n} {v}" for v, n in counts.items()) for stage, counts in stages.items()]


def summary_blocks(j: Judgement, record_at: str | None) -> list[Block]:
    """What a log shows of a judging command in place of its tables: the card and clocks, the commits, the rows
    counted per stage and verdict, and where every row is (``record_at``: where the record went, if anywhere).
    The verdict lines follow it."""
    if record_at is None:
        where = "every row: -v prints them, --json FILE keeps the record"
    else:
        where = f"record: {record_at}; every row: -v prints them"
    warned = j.of(WARNED)
    named = [f"{r.verdict}: " + ", ".join(part for part in (r.stage, r.case, r.name, r.detail) if part)
             for r in warned[:SUMMARY_WARNED]]
    more = len(warned) - SUMMARY_WARNED
    named += [f"{more} more rows not judged: -v prints them."] if more > 0 else []
    lines = [f"qsa {j.command} on {j.card}, clocks: {j.clocks}",
             "; ".join(f"{which}: {what}" for which, what in j.runs), *shown_notes(j), *per_stage(j), *named, where]
    return [Prose(line) for line in lines]
