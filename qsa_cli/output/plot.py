"""Plotting run records: median time per call in small multiples, of one record or of a before/after.

A panel per stage, its inputs (score set, keys) and its query count. Across a sweep's contexts each
variant is a line against context; a record of one context puts the stage's inputs on the x axis
instead, the variants side by side at each. Every variant keeps one colour, marker and line style in
every panel and is named once, in a legend outside the axes. The read floor is a black dashed line,
the variant the engine dispatches for the panel's kind of call is ringed in gold, bars span the 10th to
90th percentile of the samples, throttled points are ringed in red; an axis is logarithmic where its
data spans a decade or more.

A before/after (two records, or a ``qsa compare`` record's base and candidate sides) draws the before
hollow and the after filled, and under each panel the ratio after / before of every case both measured.
matplotlib is an optional extra (``pip install 'qsa[plot]'``) and is imported only here.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import PlotError
from ..core.files import atomic_write
from ..record.load import load_record
from ..record.schema import Case, Measurement, RunRecord, case_key
from ..record.vocabulary import ARGPARTITION, DEFAULT_KEYS, READ_FLOOR, SCORES, STAGES, TOPK, WINDOW
from .rows import MAX_SAMPLE_US, dispatched_variant

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

STAGE_TITLES = {SCORES: "Scorer", TOPK: "Top-k", WINDOW: "Window: scores then top-k"}
# Case fields besides the context and the call that tell a stage's panels (or, at one context, its x
# positions) apart, with how a value is written.
INPUT_FIELDS: dict[str, Callable[[Any], str]] = {
    "score_set": str, "keys": lambda v: f"{v} keys", "capacity": lambda v: f"capacity {v:,}", "l2": lambda v: f"{v} L2"}
BEFORE, AFTER = "before", "after"
OUTPUT_OPTIONS = ("--json", "--dump", "--junit")  # a title's command line leaves out the files a run wrote
# A variant's marker and line style: 9 markers by 4 line styles, coprime, so the first 36 variants each
# get a pair of their own. The reference points have theirs, apart from every variant's.
MARKERS = ("o", "s", "^", "D", "v", "P", "*", "h", "<")
LINESTYLES = ("-", "--", "-.", ":")
# tab10 without its grey (the library's reference point is grey), then tab20's light shades.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
           "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5")
REFERENCE_STYLES = {READ_FLOOR: ("black", "", "--"), ARGPARTITION: ("0.45", "x", ":")}
DISPATCH_COLOUR = "gold"
PANEL_WIDTH, PANEL_HEIGHT, RATIO_HEIGHT, LEGEND_WIDTH = 4.4, 3.3, 1.5, 3.4  # inches
MIN_PANELS_WIDTH = 6.6  # room for the title's lines
TITLE_CHARS_PER_INCH = 13  # at the title's 10 points
LEGEND_CHARS = 34  # a legend line's length in the legend's width
PANELS_PER_ROW = 3  # where every row would hold one panel, the panels are laid out in rows of this many


@dataclass(frozen=True)
class Point:
    """One measurement as the figure draws it: under a series' name, on a side of a before/after."""

    series: str  # the legend's name: a variant, or a compare pair's common name
    side: str | None  # BEFORE or AFTER in a before/after; None in one record (and a compare's unpaired variants)
    m: Measurement
    record: RunRecord  # the record it came from (its dispatch)


@dataclass(frozen=True)
class Panel:
    stage: str
    inputs: tuple[Any, ...]  # the values of the stage's varying input fields (by context; empty at one context)
    kind: str
    nq: int


@dataclass(frozen=True)
class StageLayout:
    """How a stage's measurements are drawn: by context, or at one context with its inputs on the x axis."""

    by_context: bool
    fields: tuple[str, ...]  # the input fields that vary in the stage
    categories: tuple[tuple[Any, ...], ...]  # at one context: the x positions' input values

    def inputs(self, case: Case) -> tuple[Any, ...]:
        return tuple(_field(case, f) for f in self.fields)


def _field(case: Case, name: str) -> Any:
    return case.get(name, DEFAULT_KEYS) if name == "keys" else case.get(name)


# ---- what is drawn: records as points ------------------------------------------------------------------


def _check(record: RunRecord, name: str) -> None:
    """A PlotError naming the first measurement whose samples cannot stand for a time (none, NaN, inf, <= 0)."""
    if not record.measurements:
        raise PlotError(f"{name}: the record has no timed measurements to plot (a parity-only run?)")
    for i, m in enumerate(record.measurements):
        where = f"{name}: measurements[{i}] ({m.variant}, {case_key(m.stage, m.case)})"
        if not m.samples_us:
            raise PlotError(f"{where} has no samples")
        bad = [s for s in m.samples_us if not (math.isfinite(s) and 0 < s <= MAX_SAMPLE_US)]
        if bad:
            raise PlotError(f"{where}: {len(bad)} of {len(m.samples_us)} samples are not a time > 0 and <= "
                            f"{MAX_SAMPLE_US:g} µs (the first: {bad[0]!r})")


def _strip_side(variant: str, side: str) -> str:
    return "+".join(part.removeprefix(f"{side}.") for part in variant.split("+"))  # a window pair names two


def _compare_points(record: RunRecord) -> list[Point]:
    """A compare record's points: each pair's base before, its candidate after, under one name."""
    settings = record.settings["compare"]
    sides = {}
    for pair in settings["pairs"]:
        base, candidate = pair["base"], pair["candidate"]
        common = _strip_side(base, settings["base"])
        sides[pair["stage"], base] = (BEFORE, common, candidate)
        sides[pair["stage"], candidate] = (AFTER, common, base)
    unpaired = {m.variant for m in record.measurements if (m.stage, m.variant) not in sides}
    points = []
    for m in record.measurements:
        side, common, other = sides.get((m.stage, m.variant), (None, m.variant, ""))
        if side and (common != _strip_side(other, settings["candidate" if side == BEFORE else "base"])
                     or common in unpaired):
            common = f"{m.variant} → {other}" if side == BEFORE else f"{other} → {m.variant}"
        points.append(Point(common, side, m, record))
    return points


def _points(records: Sequence[RunRecord]) -> list[Point]:
    if len(records) == 2:
        return [Point(m.variant, side, m, r) for side, r in zip((BEFORE, AFTER), records) for m in r.measurements]
    record = records[0]
    if "compare" in record.settings:
        return _compare_points(record)
    return [Point(m.variant, None, m, record) for m in record.measurements]


def _ratios(points: Sequence[Point]) -> dict[tuple[str, str, str], tuple[Point, Point]]:
    """(stage, case, series) -> its (before, after) points, for every case both sides measured."""
    halves: dict[str, dict[tuple[str, str, str], Point]] = {BEFORE: {}, AFTER: {}}
    for p in points:
        if p.side and p.series not in REFERENCE_STYLES:
            halves[p.side][p.m.stage, case_key(p.m.stage, p.m.case), p.series] = p
    return {k: (b, halves[AFTER][k]) for k, b in halves[BEFORE].items() if k in halves[AFTER]}


# ---- layout ---------------------------------------------------------------------------------------------


def _layouts(points: Sequence[Point]) -> dict[str, StageLayout]:
    cases: dict[str, dict[str, Case]] = {}
    for p in points:
        cases.setdefault(p.m.stage, {})[case_key(p.m.stage, p.m.case)] = p.m.case
    out = {}
    for stage, by_key in cases.items():
        stage_cases = list(by_key.values())
        by_context = len({c["ctx"] for c in stage_cases}) > 1
        fields = [f for f in INPUT_FIELDS if len({_field(c, f) for c in stage_cases}) > 1]
        if by_context and "capacity" in fields and _capacity_per_context(stage_cases):
            fields.remove("capacity")  # it goes with the x axis, not a panel of its own
        categories = () if by_context else tuple(dict.fromkeys(tuple(_field(c, f) for f in fields)
                                                              for c in stage_cases))
        out[stage] = StageLayout(by_context, tuple(fields), categories)
    return out


def _capacity_per_context(cases: list[Case]) -> bool:
    """Whether each context has one capacity (a sweep's ``capacity`` list paired with its contexts)."""
    capacities: dict[int, set[int]] = {}
    for c in cases:
        capacities.setdefault(c["ctx"], set()).add(c["capacity"])
    return all(len(caps) == 1 for caps in capacities.values())


def _panel(p: Point, layout: StageLayout) -> Panel:
    return Panel(p.m.stage, layout.inputs(p.m.case) if layout.by_context else (), p.m.case["kind"], p.m.case["nq"])


def _rows(panels: Iterable[Panel]) -> list[list[Panel]]:
    """The figure's rows: one per stage and inputs, its panels by kind of call and query count."""
    def stage_order(stage: str) -> int:
        return STAGES.index(stage) if stage in STAGES else len(STAGES)

    rows: dict[tuple[str, tuple[Any, ...]], list[Panel]] = {}
    for panel in panels:
        rows.setdefault((panel.stage, panel.inputs), []).append(panel)
    ordered = [sorted(row, key=lambda p: (p.kind != "decode", p.nq))
               for _, row in sorted(rows.items(), key=lambda kv: stage_order(kv[0][0]))]
    if len(ordered) > 1 and all(len(row) == 1 for row in ordered):
        flat = [row[0] for row in ordered]
        ordered = [flat[i:i + PANELS_PER_ROW] for i in range(0, len(flat), PANELS_PER_ROW)]
    return ordered


# ---- styles and words ------------------------------------------------------------------------------------


def _styles(points: Sequence[Point]) -> dict[str, tuple[str, str, str]]:
    """series -> (colour, marker, line style), the same in every panel."""
    names = dict.fromkeys(p.series for p in sorted(points, key=lambda p: p.series in REFERENCE_STYLES))
    styles = {}
    for i, name in enumerate(n for n in names if n not in REFERENCE_STYLES):
        styles[name] = (COLOURS[i % len(COLOURS)], MARKERS[i % len(MARKERS)], LINESTYLES[i % len(LINESTYLES)])
    return styles | {name: REFERENCE_STYLES[name] for name in names if name in REFERENCE_STYLES}


def _dispatched_name(p: Point) -> str | None:
    """The series name the engine's choice has among these points: a compare side's own copy of it."""
    choice = dispatched_variant(p.record, p.m.stage, p.m.case)
    if choice is None:
        return None
    compare = p.record.settings.get("compare")
    if compare and p.side:
        return p.series if _strip_side(p.m.variant, compare["base" if p.side == BEFORE else "candidate"]) == choice \
            else None
    return p.series if p.m.variant == choice else None


def _dispatch_words(records: Sequence[RunRecord]) -> str:
    said = []
    for record in records:
        recorded = record.settings.get("dispatch") or {}
        each = [recorded] if "topk" in recorded else list(recorded.values())
        said.append(", ".join(f"{d['kind']}: {d[SCORES]} + {d[TOPK]}" for d in each))
    if not any(said):
        return ""
    if len(set(said)) == 1:
        return said[0]
    return "; ".join(f"{side} {words or 'none recorded'}" for side, words in zip((BEFORE, AFTER), said))


def _span(values: list[float], unit: str) -> str | None:
    if not values:
        return None
    lo, hi = min(values), max(values)
    return f"{lo:.0f} {unit}" if lo == hi else f"{lo:.0f}-{hi:.0f} {unit}"


def _clocks_line(record: RunRecord) -> str:
    """A title's line on the clocks: locked or not, the SM and memory clocks read around the samples, throttling."""
    readings = [r for m in record.measurements for r in (m.clocks_before, m.clocks_after) if r]
    if not readings:
        return "clocks not recorded" + (" (CPU backend)" if record.backend == "cpu" else "")
    lock = record.settings.get("clock_lock")
    locked = f"locked at {lock['sm_mhz']} MHz" if lock and lock.get("locked") else "not locked"
    seen = [f"{name} {text}" for name, field in (("SM", "sm_mhz"), ("memory", "mem_mhz"))
            if (text := _span([r[field] for r in readings if r.get(field) is not None], "MHz"))]
    throttled = sum(m.throttled for m in record.measurements)
    return (f"clocks {locked}, read {', '.join(seen) or 'nothing'}; "
            f"throttled in {throttled} of {len(record.measurements)} measurements")


def _when(record: RunRecord) -> str:
    try:
        return datetime.fromisoformat(record.created).strftime("%Y-%m-%d %H:%M %Z").strip()
    except ValueError:
        return record.created


def _card(record: RunRecord) -> str:
    return record.device.get("name") or ("CPU backend" if record.backend == "cpu" else "unknown GPU")


def _command(record: RunRecord) -> str:
    """The command line a record ran, less the files it wrote (paths on the machine it ran on)."""
    words: list[str] = []
    argv = iter(record.argv)
    for word in argv:
        if word in OUTPUT_OPTIONS:
            next(argv, None)  # the option's path
        elif not word.startswith(tuple(f"{o}=" for o in OUTPUT_OPTIONS)):
            words.append(word)
    return "qsa " + " ".join(words)


def _title(records: Sequence[RunRecord], names: Sequence[str], width: int) -> str:
    """The figure's title: each record's name, command, card, date and clocks, wrapped at ``width`` characters."""
    def about(record: RunRecord, head: str) -> list[str]:
        cut = " (incomplete: interrupted, only what was measured before)" if record.incomplete else ""
        return [f"{head}{_command(record)}{cut}", f"{_card(record)}, {_when(record)}; {_clocks_line(record)}"]

    compare = records[0].settings.get("compare") if len(records) == 1 else None
    if len(records) == 2:
        lines = [line for side, name, r in zip((BEFORE, AFTER), names, records)
                 for line in about(r, f"{side}: {name}: ")]
    elif compare:
        lines = about(records[0], f"{names[0]}: {compare['base']} (before) against {compare['candidate']} (after): ")
    else:
        lines = about(records[0], f"{names[0]}: ")
    return "\n".join(textwrap.fill(line, width, subsequent_indent="    ") for line in lines)


def _panel_title(panel: Panel, layout: StageLayout, context: int | None) -> str:
    inputs = ", ".join(INPUT_FIELDS[f](v) for f, v in zip(layout.fields, panel.inputs))
    call = f"{panel.kind} call, {panel.nq} quer{'y' if panel.nq == 1 else 'ies'}"
    at = f", context {context:,}" if context is not None else ""
    return f"{STAGE_TITLES.get(panel.stage, panel.stage)}{': ' + inputs if inputs else ''}\n{call}{at}"


# ---- drawing --------------------------------------------------------------------------------------------


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError("plotting needs matplotlib: pip install 'qsa[plot]'") from None
    return Figure


def _scale(ax: Axes, axis: str, lo: float, hi: float) -> None:
    """Logarithmic, ticked at 1-2-5 in plain numbers, where [lo, hi] spans a decade or more."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if hi < 10 * lo:
        return
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    if axis == "y":
        target.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
        target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        target.set_minor_formatter(NullFormatter())


class _Drawer:
    """Draws the points of one figure; ``x`` places a point in its panel."""

    def __init__(self, points: Sequence[Point], layouts: dict[str, StageLayout]) -> None:
        self.styles = _styles(points)
        self.layouts = layouts
        self.before_after = any(p.side for p in points)
        self.dispatched: set[str] = set()
        self.throttled = False

    def x(self, p: Point, slots: list[str], sided: bool = True) -> float:
        """A context; or at one context, the place of the point's inputs, the variants (``slots``) side by
        side there and a variant's before left of its after (``sided``)."""
        layout = self.layouts[p.m.stage]
        if layout.by_context:
            return p.m.case["ctx"]
        slot_width = 0.8 / len(slots)
        offset = (slots.index(p.series) - (len(slots) - 1) / 2) * slot_width
        if p.side and sided:
            offset += (-0.22 if p.side == BEFORE else 0.22) * slot_width
        return layout.categories.index(layout.inputs(p.m.case)) + offset

    def times(self, ax: Axes, panel: Panel, points: list[Point], slots: list[str], first_column: bool) -> None:
        lines: dict[tuple[str, str | None], list[Point]] = {}
        for p in points:
            lines.setdefault((p.series, p.side), []).append(p)
        for (series, side), group in lines.items():
            if series == READ_FLOOR:
                self._floor(ax, group, side)
                continue
            group.sort(key=lambda p: self.x(p, slots))
            colour, marker, linestyle = self.styles[series]
            xs = [self.x(p, slots) for p in group]
            ys = [p.m.median_us for p in group]
            spread = [[p.m.median_us - p.m.spread_us[0] for p in group],
                      [p.m.spread_us[1] - p.m.median_us for p in group]]
            hollow = side == BEFORE
            ax.errorbar(xs, ys, yerr=spread, fmt="none", ecolor=colour, elinewidth=0.8, capsize=2,
                        alpha=0.5 if hollow else 0.8)
            ax.plot(xs, ys, color=colour, marker=marker, linestyle=linestyle, linewidth=1.3, markersize=6,
                    markerfacecolor="white" if hollow else colour, alpha=0.6 if hollow else 1.0,
                    label=f"{series}, {side}" if side else series, gid=f"series:{series}:{side or ''}", zorder=3)
            chosen = [(x, p.m.median_us) for x, p in zip(xs, group) if _dispatched_name(p) == series]
            if chosen:
                self.dispatched.add(series)
                ax.scatter(*zip(*chosen), s=260, color=DISPATCH_COLOUR, alpha=0.55, linewidths=0, zorder=2,
                           gid=f"dispatch:{series}:{side or ''}")
            hot = [(x, p.m.median_us) for x, p in zip(xs, group) if p.m.throttled]
            if hot:
                self.throttled = True
                ax.scatter(*zip(*hot), s=130, facecolors="none", edgecolors="red", linewidths=1.4, zorder=4,
                           gid="throttled")
        self._axes(ax, panel, points, "median µs per call\n(bars: 10th-90th percentile)" if first_column else "")

    def _floor(self, ax: Axes, group: list[Point], side: str | None) -> None:
        style = {"color": "black" if side != BEFORE else "0.55", "linestyle": "--", "linewidth": 1.4,
                 "gid": f"read-floor:{side or ''}", "label": f"{READ_FLOOR}, {side}" if side else READ_FLOOR}
        if self.layouts[group[0].m.stage].by_context:
            ax.plot([p.m.case["ctx"] for p in group], [p.m.median_us for p in group], **style)
        else:  # at one context the floor is a level across each input's place, under every variant
            layout = self.layouts[group[0].m.stage]
            at = [layout.categories.index(layout.inputs(p.m.case)) for p in group]
            ax.hlines([p.m.median_us for p in group], [c - 0.45 for c in at], [c + 0.45 for c in at], **style)

    def ratios(self, ax: Axes, panel: Panel, points: list[Point], pairs: list[tuple[Point, Point]],
               slots: list[str], tolerance: float | None, first_column: bool) -> None:
        by_series: dict[str, list[tuple[float, float]]] = {}
        for before, after in pairs:
            x = self.x(after, slots, sided=False)
            by_series.setdefault(after.series, []).append((x, after.m.median_us / before.m.median_us))
        if tolerance:
            ax.axhspan(1 - tolerance, 1 + tolerance, color="0.9", zorder=0, gid="tolerance")
        ax.axhline(1.0, color="black", linewidth=0.8, zorder=1)
        for series, xy in by_series.items():
            colour, marker, linestyle = self.styles[series]
            xy.sort()
            ax.plot(*zip(*xy), color=colour, marker=marker, linestyle=linestyle, linewidth=1.2, markersize=5,
                    label=series, gid=f"ratio:{series}", zorder=3)
        if not pairs:
            ax.text(0.5, 0.5, "no case measured on both sides", transform=ax.transAxes, ha="center", va="center",
                    fontsize="small", color="0.4")
        values = [r for xy in by_series.values() for _, r in xy] + [1.0]
        self._x_axis(ax, panel, points)
        _scale(ax, "y", min(values), max(values))
        ax.set_ylabel("after / before" if first_column else "", fontsize="small")
        ax.grid(True, axis="y", which="major", alpha=0.3)

    def _axes(self, ax: Axes, panel: Panel, points: list[Point], ylabel: str) -> None:
        lows = [p.m.spread_us[0] for p in points]
        highs = [p.m.spread_us[1] for p in points]
        self._x_axis(ax, panel, points)
        _scale(ax, "y", min(lows), max(highs))
        if ax.get_yscale() == "linear":
            ax.set_ylim(bottom=0)  # a linear time axis from zero, so heights compare as ratios
        ax.set_ylabel(ylabel, fontsize="small")
        ax.grid(True, which="major", alpha=0.3)

    def _x_axis(self, ax: Axes, panel: Panel, points: list[Point]) -> None:
        layout = self.layouts[panel.stage]
        if not layout.by_context:
            context = f"{points[0].m.case['ctx']:,} cells"  # the one input there is, where none varies
            labels = [", ".join(INPUT_FIELDS[f](v) for f, v in zip(layout.fields, c)) or context
                      for c in layout.categories]
            ax.set_xticks(range(len(labels)), labels, rotation=20 if len(labels) > 3 else 0,
                          ha="right" if len(labels) > 3 else "center")
            ax.set_xlim(-0.5, len(labels) - 0.5)
            return
        contexts = sorted({p.m.case["ctx"] for p in points})
        _scale(ax, "x", contexts[0], contexts[-1])
        # contexts close on the axis (or many) have their labels turned, so that neighbours do not overlap
        spacing = [b / a if ax.get_xscale() == "log" else (b - a) / (contexts[-1] - contexts[0])
                   for a, b in zip(contexts, contexts[1:])]
        crowded = len(contexts) > 5 or any(s < (1.6 if ax.get_xscale() == "log" else 0.12) for s in spacing)
        ax.set_xticks(contexts, [f"{c:,}" for c in contexts], rotation=60 if crowded else 0,
                      ha="right" if crowded else "center", rotation_mode="anchor" if crowded else "default")
        ax.set_xticks([], minor=True)
        ax.set_xlabel("context (cells)", fontsize="small")
        if len(contexts) == 1:
            ax.set_xlim(contexts[0] / 1.5, contexts[0] * 1.5)


def _legend(fig: Figure | SubFigure, drawer: _Drawer, names: Sequence[str], records: Sequence[RunRecord],
            tolerance: float | None) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], color=c, marker=m or None, linestyle=ls, linewidth=1.4, markersize=6, label=name)
               for name, (c, m, ls) in drawer.styles.items()]
    if drawer.before_after:
        compare = records[0].settings.get("compare") if len(records) == 1 else None
        before, after = (compare["base"], compare["candidate"]) if compare else names
        handles += [Line2D([], [], color="0.3", marker="o", linestyle="-", markerfacecolor="white", alpha=0.6,
                           label=f"hollow: before ({before})"),
                    Line2D([], [], color="0.3", marker="o", linestyle="-", label=f"filled: after ({after})")]
    if tolerance:
        handles.append(Patch(color="0.9", label=f"ratio within the compare's tolerance, ±{tolerance:.0%}"))
    dispatch = _dispatch_words(records)
    if dispatch:
        where = "" if drawer.dispatched else " (not among the variants drawn)"
        handles.append(Line2D([], [], color=DISPATCH_COLOUR, marker="o", markersize=14, alpha=0.55, linestyle="",
                              label=f"the engine dispatches {dispatch}{where}"))
    if drawer.throttled:
        handles.append(Line2D([], [], color="red", marker="o", markerfacecolor="none", markersize=10, linestyle="",
                              label="throttled samples"))
    for handle in handles:
        handle.set_label(textwrap.fill(handle.get_label(), LEGEND_CHARS))
    fig.legend(handles=handles, loc="upper left", fontsize="small", frameon=False)


def build_figure(records: Sequence[RunRecord], names: Sequence[str] | None = None) -> Figure:
    """The figure of one record, or of a before/after (two records: before, then after); not written.

    ``names`` (one a record, a file's name) title it. Every record is checked first: a PlotError names
    the first that has no timed measurement or a sample that cannot stand for a time.
    """
    Figure = _figure_class()
    if len(records) not in (1, 2):
        raise PlotError(f"a plot draws one record or a before/after of two (got {len(records)})")
    names = list(names or [f"record {i + 1}" for i in range(len(records))])
    for record, name in zip(records, names):
        _check(record, name)
    points = _points(records)
    pairs = _ratios(points)
    before_after = any(p.side for p in points)
    if before_after and not pairs:
        raise PlotError(f"{' and '.join(names)}: no case and variant measured on both sides (nothing to take "
                        "a ratio of)")
    layouts = _layouts(points)
    by_panel: dict[Panel, list[Point]] = {}
    for p in points:
        by_panel.setdefault(_panel(p, layouts[p.m.stage]), []).append(p)
    rows = _rows(by_panel)
    ncols = max(len(row) for row in rows)
    tall = PANEL_HEIGHT + (RATIO_HEIGHT if before_after else 0)
    panels_width = max(ncols * PANEL_WIDTH, MIN_PANELS_WIDTH)
    fig = Figure(figsize=(panels_width + LEGEND_WIDTH, len(rows) * tall + 1.2), layout="constrained")
    # the panels and their title in one subfigure, the legend in another beside it: neither overlaps the other
    panels_fig, legend_fig = fig.subfigures(1, 2, width_ratios=[panels_width, LEGEND_WIDTH])
    grid = panels_fig.add_gridspec(len(rows) * (2 if before_after else 1), ncols,
                                   height_ratios=[PANEL_HEIGHT, RATIO_HEIGHT] * len(rows) if before_after else None)
    compare = records[0].settings.get("compare") if len(records) == 1 else None
    tolerance = compare["tolerance"] if compare else None
    drawer = _Drawer(points, layouts)
    for r, row in enumerate(rows):
        for c, panel in enumerate(row):
            layout = layouts[panel.stage]
            ax = panels_fig.add_subplot(grid[r * 2 if before_after else r, c], gid=f"panel:{panel.stage}")
            shown = by_panel[panel]
            slots = list(dict.fromkeys(p.series for p in shown if p.series != READ_FLOOR))
            drawer.times(ax, panel, shown, slots, first_column=c == 0)
            ax.set_title(_panel_title(panel, layout, None if layout.by_context else shown[0].m.case["ctx"]),
                         fontsize="medium")
            if before_after:
                ratio_ax = panels_fig.add_subplot(grid[r * 2 + 1, c], sharex=ax, gid=f"ratio:{panel.stage}")
                mine = [pair for pair in pairs.values() if _panel(pair[1], layout) == panel]
                drawer.ratios(ratio_ax, panel, shown, mine, slots, tolerance, first_column=c == 0)
                ax.tick_params(labelbottom=False)
                ax.set_xlabel("")
    _legend(legend_fig, drawer, names, records, tolerance)
    panels_fig.suptitle(_title(records, names, int(panels_width * TITLE_CHARS_PER_INCH)), fontsize="medium")
    return fig


def plot_records(records: Sequence[RunRecord], out_path: str | os.PathLike[str],
                 names: Sequence[str] | None = None) -> Path:
    """Write ``build_figure``'s figure as an image (.png, .svg or .pdf, by the file's suffix): whole or not at all."""
    path = Path(out_path)
    fmt = _image_type(path)
    fig = build_figure(records, names)
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format=fmt, dpi=130)
    return path


def plot_files(paths: Sequence[str | os.PathLike[str]], out_path: str | os.PathLike[str]) -> Path:
    """``qsa plot``: one record, or a before/after of two (before first), read from their files."""
    _image_type(Path(out_path))  # refused before anything is read
    return plot_records([load_record(p) for p in paths], out_path, [Path(p).name for p in paths])


def _image_type(path: Path) -> str:
    supported = _figure_class()().canvas.get_supported_filetypes()
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in supported:
        raise PlotError(f"{path}: unknown image type {path.suffix or '(none)'!r} (use one of .png, .svg, .pdf)")
    return fmt
