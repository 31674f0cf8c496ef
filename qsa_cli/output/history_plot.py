"""``qsa history --plot`` and ``--html``: a card's history drawn, and a page that holds it whole.

The figure: a panel per case, a line per variant across the card's runs (oldest left, each tick the commits
that changed at that run), bars from the 10th to the 90th percentile of each run's samples, each step a
dotted line before the run it appeared in with its change and commits, each change of the output's bits a
red cross; the time axis logarithmic where a panel's times span a decade or more (output/plot.py's rule).

The page is one file that needs nothing at view time (no script, no font, no request): inline CSS, the
figure as an inline PNG, and the tables as HTML, so a CI job can publish it as it is.
"""

from __future__ import annotations

import base64
import html
import io
import math
import textwrap
from typing import TYPE_CHECKING

from .history import CardHistory, Series, commits_text, events, full_blocks, heading
from .layout import Sheet
from .plot import COLOURS, MARKERS, _figure_class, _scale

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PANEL_WIDTH, PANEL_HEIGHT, LEGEND_WIDTH = 5.0, 3.6, 3.0  # inches
PANELS_PER_ROW = 3
MAX_TICKS = 24  # more runs than this: every few ticks labelled, so labels do not overlap
DPI = 110


def _tick(h: CardHistory, i: int) -> str:
    """A run's tick: the commits that changed at it (all of the first run's), one a line."""
    since = h.runs[i - 1].commits if i else None
    return commits_text(h.runs[i].commits, since).replace(", ", "\n")


def history_figure(h: CardHistory) -> Figure:
    """The card's figure (module docstring)."""
    figure_class = _figure_class()
    panels: dict[str, list[Series]] = {}
    for s in h.series:
        panels.setdefault(s.key, []).append(s)
    variants = sorted({s.variant for s in h.series})
    style = {v: (COLOURS[i % len(COLOURS)], MARKERS[i % len(MARKERS)]) for i, v in enumerate(variants)}
    cols = min(PANELS_PER_ROW, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = figure_class(figsize=(PANEL_WIDTH * cols + LEGEND_WIDTH, PANEL_HEIGHT * rows + 0.8), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    every = math.ceil(len(h.runs) / MAX_TICKS)
    ticks = list(range(0, len(h.runs), every))
    for ax, (key, series) in zip(axes, panels.items()):
        lo = min(p.p10_us for s in series for p in s.points)
        hi = max(p.p90_us for s in series for p in s.points)
        for s in series:
            colour, marker = style[s.variant]
            xs = [p.run for p in s.points]
            ys = [p.median_us for p in s.points]
            ax.errorbar(xs, ys, yerr=[[p.median_us - p.p10_us for p in s.points], [p.p90_us - p.median_us for p in s.points]],
                        color=colour, marker=marker, markersize=4, linewidth=1.2, capsize=2, label=s.variant)
            for step in s.steps:
                x = s.points[step.at].run - 0.5
                ax.axvline(x, color=colour, linestyle=":", linewidth=1.2)
                ax.annotate(f"{step.change:+.1%} {_tick(h, s.points[step.at].run).splitlines()[0]}", (x, 1.0),
                            xycoords=("data", "axes fraction"), xytext=(2, -2), textcoords="offset points",
                            rotation=90, va="top", ha="left", fontsize="x-small", color=colour)
            for at in s.bits_changed:
                p = s.points[at]
                ax.plot([p.run], [p.median_us], marker="X", color="red", markersize=9, linestyle="none")
        _scale(ax, "y", lo, hi)
        ax.set_title("\n".join(textwrap.wrap(key, 44)), fontsize="small")
        ax.set_ylabel("median µs")
        ax.set_xticks(ticks, [_tick(h, i) for i in ticks], rotation=90, fontsize="x-small")
        ax.set_xlim(-0.6, len(h.runs) - 0.4)
        ax.grid(True, alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles, labels = [], []
    for ax in axes[:len(panels)]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    fig.legend(handles, labels, loc="outside right upper", fontsize="small", title="variant")
    fig.suptitle(f"{h.key}: median per run (bars: 10th to 90th percentile); steps dotted, bits changed: red X",
                 fontsize="medium")
    return fig


def png_bytes(h: CardHistory) -> bytes:
    """The figure as PNG: drawn in memory, so a failure leaves no file."""
    out = io.BytesIO()
    history_figure(h).savefig(out, format="png", dpi=DPI)
    return out.getvalue()


STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #1b1f24; }
h1 { font-size: 20px; margin: 0 0 8px; } h2 { font-size: 16px; margin: 24px 0 8px; }
p.span { color: #444; } ul.events { padding-left: 18px; } ul.events li { margin: 2px 0; }
.step { color: #9a3412; } .bits { color: #b91c1c; font-weight: 600; }
img.figure { max-width: 100%; border: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.group { font-weight: 600; background: #fafbfc; }
"""


def _table(sheet: Sheet) -> str:
    head = "".join(f"<th>{html.escape(c.title)}</th>" for c in sheet.columns)
    rows, previous = [], None
    for i, cells in enumerate(sheet.rows):
        group = sheet.groups[i] if sheet.groups is not None else None
        if group is not None and group != previous:
            rows.append(f'<tr><td class="group" colspan="{len(sheet.columns)}">{html.escape(group)}</td></tr>')
        previous = group
        rows.append("<tr>" + "".join(f'<td{" class=num" if c.numeric else ""}>{html.escape(v)}</td>'
                                     for c, v in zip(sheet.columns, cells)) + "</tr>")
    notes = "".join(f"<p>{html.escape(n)}</p>" for n in sheet.notes)
    return f"<h2>{html.escape(sheet.title)}</h2><table><tr>{head}</tr>{''.join(rows)}</table>{notes}"


def _event(line: str) -> str:
    kind = "step" if line.startswith("STEP") else "bits"
    return f'<li class="{kind}">{html.escape(line)}</li>'


def history_html(h: CardHistory, folder: str, png: bytes) -> str:
    """The page (module docstring): the card's span and counts, its steps and changes of bits, the figure,
    every (case, variant), and the runs."""
    lines = events(h)
    sheets = [b for b in full_blocks([h], folder) if isinstance(b, Sheet)]
    runs = "".join(f"<tr><td>{html.escape(r.path.name)}</td><td>{html.escape(r.when)}</td>"
                   f"<td>{html.escape(commits_text(r.commits))}</td></tr>" for r in h.runs)
    listing = f'<ul class="events">{"".join(map(_event, lines))}</ul>' if lines else "<p>No step and no change of bits.</p>"
    image = base64.b64encode(png).decode("ascii")
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>qsa history: {html.escape(h.key)}</title><style>{STYLE}</style></head><body>"
            f"<h1>qsa history: {html.escape(h.key)}</h1><p class=\"span\">{html.escape(heading(h, folder))}</p>"
            f"<h2>Steps and changes of bits</h2>{listing}"
            f"<img class=\"figure\" alt=\"{html.escape(h.key)}: median per run of each case and variant\" "
            f"src=\"data:image/png;base64,{image}\">"
            f"{''.join(_table(s) for s in sheets)}"
            f"<h2>Runs</h2><table><tr><th>file</th><th>ran</th><th>commits</th></tr>{runs}</table>"
            "</body></html>\n")


def pictures(h: CardHistory, folder: str, want_png: bool, want_html: bool) -> tuple[bytes | None, str | None]:
    """The PNG and the page asked for, made in memory before either is written."""
    png = png_bytes(h) if want_png or want_html else None
    return (png if want_png else None), (history_html(h, folder, png) if want_html and png is not None else None)

