"""Laying out what a command prints: sheets (rows of named cells) and prose, as text that fits the width,
as markdown, and as CSV.

Text is laid out by measuring, so that no number, hash, verdict or name is ever split or cut: a sheet
is a rich table of unwrapped columns when the table fits the width, otherwise a folded layout, one block
per row of ``header value`` tokens wrapped between tokens (a token that is longer than a line has a
line of its own, whole). Prose wraps between words. Cells are plain text; verdict words are coloured
on a terminal only.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

MISSING = "–"
ROW_INDENT, WRAP_INDENT = "  ", "      "  # a folded row's first line, and its next lines
TOKEN_GAP = "  "  # between a folded row's tokens, so that a token's own spaces read as inside it
STYLES = {  # a cell's first word -> its colour on a terminal
    **dict.fromkeys(("PASS", "yes", "same", "equal", "holds", "clean", "FAST"), "green"),
    **dict.fromkeys(("FAIL", "NO", "DIFFERS", "DIFFER", "BROKEN", "SLOW", "BAD", "MISSING", "PARITY-FAIL", "THRESHOLD",
                     "BAD-SAMPLES", "NOTHING-COMPARED", "BITS-CHANGED", "INCOMPLETE", "NOT MET"), "red"),
    **dict.fromkeys(("SKIP", "explained", "MISSING-ALLOWED", "BITS-CHANGED-ALLOWED"), "yellow"),
    "NEW": "cyan", "REFERENCE": "dim", "UNTIMED": "dim",
}
_WORDS = re.compile(r"(?<![\w-])(" + "|".join(sorted(map(re.escape, STYLES), key=len, reverse=True)) + r")(?![\w-])")


@dataclass(frozen=True)
class Column:
    header: str
    unit: str = ""  # "µs": in the header ("median µs"), and after the value in a folded row
    numeric: bool = False  # right-justified in a table
    bare: bool = False  # in a folded row, its value without its header (a name; a time its neighbour names)

    @property
    def title(self) -> str:
        return f"{self.header} {self.unit}".strip()


@dataclass
class Sheet:
    """A table of cells: ``rows`` of plain strings, one per column; each row may belong to a group (its
    case), whose label a table shows once for its rows and a folded layout as their heading."""

    title: str
    columns: tuple[Column, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)
    groups: list[str] | None = None  # a label per row
    group_header: str = "case"
    notes: list[str] = field(default_factory=list)  # under it: what a mark means, the tolerance

    def add(self, *cells: str, group: str | None = None) -> None:
        assert len(cells) == len(self.columns), (self.title, cells)
        self.rows.append(cells)
        if group is not None:
            self.groups = (self.groups or [""] * (len(self.rows) - 1)) + [group]


@dataclass(frozen=True)
class Prose:
    """A paragraph: wrapped between words in text; ``markdown`` is its pull-request form, when other.
    ``phrased``: a list of phrases (``36-37 °C, L2 clean, `qsa ...```) wrapped between them, so that no
    phrase is split where it fits a line."""

    text: str
    markdown: str | None = None
    phrased: bool = False


# a ", " outside backquotes: where a phrased paragraph may break (a quoted command may hold one)
_PHRASE_BREAK = re.compile(r"(?<=,) (?=(?:[^`]*`[^`]*`)*[^`]*$)")


def prose_lines(block: Prose, width: int) -> list[str]:
    """A paragraph's lines at ``width``: between phrases where it is phrased (a phrase longer than a line
    between its words), else between words."""
    return fold(_PHRASE_BREAK.split(block.text) if block.phrased else block.text.split(" "), width)


Block = Sheet | Prose


# ---- text ----------------------------------------------------------------------------------------------------


def fold(tokens: Iterable[str], width: int, first: str = "", rest: str = "", gap: str = " ") -> list[str]:
    """``tokens`` joined by ``gap`` into lines of at most ``width`` cells, broken only between tokens; a
    token too long for any line starts a line and is broken between its words, and a word longer than a
    line stands whole."""
    lines: list[str] = []
    line, empty = first, True
    for token in tokens:
        words = token.split(" ") if cell_len(rest + token) > width and " " in token else [token]
        if len(words) > 1 and not empty:
            lines.append(line)
            line, empty = rest, True
        for i, word in enumerate(words):
            joined = word if empty else line + (gap if i == 0 else " ") + word
            if empty:
                line, empty = line + word, False
            elif cell_len(joined) > width:
                lines.append(line)
                line = rest + word
            else:
                line = joined
    return lines + ([line] if not empty else [])


class PipeConsole(Console):
    """A console whose reader may go away (``| head``): a closed pipe raises BrokenPipeError for the
    caller, whose record is already written, instead of rich's exit with status 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def _table(sheet: Sheet) -> Table:
    table = Table(box=box.HEAVY_HEAD, pad_edge=True)
    if sheet.groups is not None:
        table.add_column(sheet.group_header, no_wrap=True)
    for col in sheet.columns:
        table.add_column(col.title, justify="right" if col.numeric else "left", no_wrap=True)
    previous = None
    for i, cells in enumerate(sheet.rows):
        group = sheet.groups[i] if sheet.groups is not None else None
        last_of_group = sheet.groups is not None and (i + 1 == len(sheet.rows) or sheet.groups[i + 1] != group)
        label = [group if group != previous else ""] if sheet.groups is not None else []
        table.add_row(*(_styled(c) for c in [*label, *cells]), end_section=last_of_group)
        previous = group
    return table


def table_width(sheet: Sheet) -> int:
    """The width of the sheet as a table with no cell wrapped: each column's widest cell, its padding,
    and the borders."""
    columns = ([[sheet.group_header, *(sheet.groups or [])]] if sheet.groups is not None else []) + [
        [col.title, *(row[i] for row in sheet.rows)] for i, col in enumerate(sheet.columns)]
    return sum(max(map(cell_len, cells)) + 2 for cells in columns) + len(columns) + 1


def _token(col: Column, cell: str) -> str:
    unit = f" {col.unit}" if col.unit and cell[:1].isdigit() else ""
    return f"{cell}{unit}" if col.bare else f"{col.header} {cell}{unit}"


def folded(sheet: Sheet, width: int) -> list[str]:
    """The sheet as blocks of lines: a group's label, then each row's ``header value`` tokens (a bare
    column's value alone; missing values left out), wrapped between tokens."""
    lines: list[str] = []
    previous = None
    for i, cells in enumerate(sheet.rows):
        group = sheet.groups[i] if sheet.groups is not None else None
        if group is not None and group != previous:
            lines += fold(group.split(" "), width)
        previous = group
        tokens = [_token(col, cell) for col, cell in zip(sheet.columns, cells) if cell not in (MISSING, "")]
        lines += fold(tokens, width, ROW_INDENT, WRAP_INDENT, TOKEN_GAP)
    return lines


def _styled(text: str) -> Text:
    out = Text(text)
    for match in _WORDS.finditer(text):
        out.stylize(STYLES[match.group(1)], match.start(1), match.end(1))
    return out


def print_blocks(console: Console, blocks: Sequence[Block]) -> None:
    """Every block as text at the console's width: a sheet as a table when it fits, else folded."""
    width = console.width
    for block in blocks:
        if isinstance(block, Sheet) and not block.rows:
            continue
        if isinstance(block, Prose):
            for line in prose_lines(block, width):
                console.print(_styled(line), soft_wrap=True)
            continue
        for line in fold(block.title.split(" "), width):
            console.print(Text(line, style="bold"), soft_wrap=True)
        if table_width(block) <= width:
            console.print(_table(block), width=width)
        else:
            for line in folded(block, width):
                console.print(_styled(line), soft_wrap=True)
        for note in block.notes:
            for line in fold(note.split(" "), width):
                console.print(Text(line, style="dim"), soft_wrap=True)


def text_of(blocks: Sequence[Block], width: int) -> str:
    """The blocks as plain text at ``width`` columns (what a log at that width shows)."""
    out = io.StringIO()
    print_blocks(Console(file=out, width=width, color_system=None, force_terminal=False, legacy_windows=False), blocks)
    return out.getvalue()


# ---- markdown ------------------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(sheet: Sheet) -> list[str]:
    """The sheet as a pipe table (a group's label on its first row), numbers right-aligned."""
    columns = ([Column(sheet.group_header)] if sheet.groups is not None else []) + list(sheet.columns)
    lines = ["| " + " | ".join(c.title for c in columns) + " |",
             "|" + "|".join("---:" if c.numeric else "---" for c in columns) + "|"]
    previous = None
    for i, cells in enumerate(sheet.rows):
        label = []
        if sheet.groups is not None:
            label = [sheet.groups[i] if sheet.groups[i] != previous else ""]
            previous = sheet.groups[i]
        lines.append("| " + " | ".join(_md_cell(c) for c in [*label, *cells]) + " |")
    return lines


def markdown(blocks: Sequence[Block]) -> str:
    """The blocks as pull-request markdown: a sheet as a heading, a table and its notes; prose as a paragraph."""
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, Prose):
            lines += [block.markdown if block.markdown is not None else block.text, ""]
        elif block.rows:
            lines += [f"### {block.title}", "", *markdown_table(block), ""]
            lines += [f"{note}." if not note.endswith(".") else note for note in block.notes]
            lines += [""] if block.notes else []
    return "\n".join(lines).rstrip() + "\n"


# ---- CSV -----------------------------------------------------------------------------------------------------


def csv_text(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A header and rows as CSV (None as an empty field)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([("" if v is None else v) for v in row] for row in rows)
    return out.getvalue()
