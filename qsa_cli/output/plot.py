"""Plotting a run record: median time against context, per variant and query count, log-log.

One panel per stage in the record; the read floor is drawn as a dashed line under the scorer, bars
span the 10th-90th percentile, throttled points are ringed in red. matplotlib is an optional extra
(``pip install 'qsa[plot]'``) and is imported only here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..core.errors import PlotError
from ..core.files import atomic_write
from ..record.schema import Measurement, RunRecord
from ..record.vocabulary import READ_FLOOR
from .report import clocks_text, context_label

STAGE_TITLES = {"scores": "Scorer: a decode call", "topk": "Top-k", "window": "Verify window"}
SERIES_FIELDS = ("kind", "score_set", "keys", "capacity", "l2")  # named in a label only where a panel has several
MARKERS = "os^vDP*Xhp"


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError("plotting needs matplotlib: pip install 'qsa[plot]'") from None
    return Figure


def _series(ms: list[Measurement]) -> dict[tuple[Any, ...], list[Measurement]]:
    """Measurements grouped into lines: (variant, queries, the case fields that vary in the panel)."""
    varying = [f for f in SERIES_FIELDS if len({m.case.get(f) for m in ms}) > 1]
    lines: dict[tuple[Any, ...], list[Measurement]] = {}
    for m in ms:
        nq = None if m.variant == READ_FLOOR else m.case["nq"]  # the floor reads the same bytes for any nq
        lines.setdefault((m.variant, nq, *(m.case.get(f) for f in varying)), []).append(m)
    return lines


def _label(key: tuple[Any, ...]) -> str:
    variant, nq, *rest = key
    parts = [variant] + ([f"{nq} q"] if nq is not None else []) + [str(v) for v in rest]
    return ", ".join(parts)


def _draw(ax: Any, stage: str, ms: list[Measurement], colors: dict[str, str]) -> None:
    lines = _series(ms)
    queries = sorted({k[1] for k in lines if k[1] is not None})
    for key, group in sorted(lines.items(), key=lambda kv: (kv[0][0] == READ_FLOOR, str(kv[0]))):
        by_ctx: dict[int, list[Measurement]] = {}
        for m in group:
            by_ctx.setdefault(m.case["ctx"], []).append(m)
        xs = sorted(by_ctx)
        # only the floor has several per context (one per query count, the same bytes): the lowest stands
        points = [min(by_ctx[x], key=lambda m: m.median_us) for x in xs]
        ys = [m.median_us for m in points]
        spread = [[m.median_us - m.spread_us[0] for m in points], [m.spread_us[1] - m.median_us for m in points]]
        if key[0] == READ_FLOOR:
            ax.plot(xs, ys, color="black", linestyle="--", linewidth=1.2, label="read floor (plain read of the keys)")
        else:
            ax.errorbar(xs, ys, yerr=spread, color=colors[key[0]], marker=MARKERS[queries.index(key[1]) % len(MARKERS)],
                        markersize=4, linewidth=1, capsize=2, label=_label(key))
        hot = [(x, m.median_us) for x, m in zip(xs, points) if m.throttled]
        if hot:
            ax.scatter(*zip(*hot), s=90, facecolors="none", edgecolors="red", linewidths=1.2, zorder=5)
    contexts = sorted({m.case["ctx"] for m in ms})
    crowded = len(contexts) > 6 or any(b < 1.6 * a for a, b in zip(contexts, contexts[1:]))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(contexts, [context_label(c) for c in contexts], rotation=45 if crowded else 0)
    ax.set_xticks([], minor=True)
    ax.set_xlabel("context (cells)")
    ax.set_ylabel("median µs per call")
    ax.set_title(STAGE_TITLES.get(stage, stage))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="x-small", loc="upper left", ncol=2 if len(lines) > 8 else 1)


def plot_record(record: RunRecord, out_path: str | os.PathLike[str]) -> Path:
    """Write the record's timings as an image (.png, .svg or .pdf, by the file's suffix)."""
    Figure = _figure_class()
    path = Path(out_path)
    stages = list(dict.fromkeys(m.stage for m in record.measurements))
    if not stages:
        raise PlotError("the record has no timed measurements to plot (a parity-only run?)")
    fig = Figure(figsize=(7.5 * len(stages), 5.5), layout="constrained")
    supported = fig.canvas.get_supported_filetypes()
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in supported:
        raise PlotError(f"{path}: unknown image type {path.suffix or '(none)'!r} (use one of .png, .svg, .pdf)")
    variants = dict.fromkeys(m.variant for m in record.measurements if m.variant != READ_FLOOR)
    colors = {v: f"C{i % 10}" for i, v in enumerate(variants)}  # one colour per variant in every panel
    for ax, stage in zip(fig.subplots(1, len(stages), squeeze=False)[0], stages):
        _draw(ax, stage, [m for m in record.measurements if m.stage == stage], colors)
    name = record.device.get("name", "CPU backend" if record.backend == "cpu" else "unknown GPU")
    fig.suptitle(f"{name}, {record.created}\nclocks: {clocks_text(record)}", fontsize="small")
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format=fmt, dpi=130)
    return path
