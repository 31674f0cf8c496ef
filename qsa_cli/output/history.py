"""``qsa history``: a card's runs across commits (record/history.py reads them), per (case, variant) the latest
median, its change against the previous run and the first, and the steps: the commits where the median moved
beyond the noise of the runs around it, and whether the output's bits changed there.

The rule (docs/history.md states it with its numbers). A (case, variant)'s runs, oldest first, each give a
median m and a noise u: the standard error of that median from the run's own samples (their 10th to 90th
percentile range as a normal's 2.563 sigma, times 1.2533 / sqrt(n)). A step may fall only where the measured
commits change. At such a boundary k, the ``WINDOW`` runs before and the ``WINDOW`` from k on (fewer at either
end) each give a level, the median of their medians, and a noise sigma: the larger of the runs' scatter (the
median absolute difference of consecutive medians on each side, as a normal's sigma: x 1.4826 / sqrt(2)) and
the root mean square of their own u, where the runs' scatter is the larger of the whole series' and the
window's. The boundary is a candidate when the levels differ by at least
``MIN_STEP`` of the level before and by ``Z_MIN`` standard errors of their difference, sigma x sqrt(v(before) +
v(after)), where v(n), the variance of the median of n runs, is 1/n up to two and pi/(2n) from three on.
Candidates closer than ``WINDOW`` runs are one change: it is placed at the boundary, among those whose windows
overlap the candidates', where two levels fit the runs around them best (the least sum of absolute deviations
from each side's median; the earliest on a tie), and its z is the largest of the candidates'. A step with fewer than ``WINDOW`` runs
after it is provisional: a single slow run at the end looks like one until the next runs say otherwise.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

from ..record.baselines import engine_names
from ..record.history import QSA, commits_of
from ..record.schema import Case, Measurement, RunRecord, case_key
from .export import Metric, metrics
from .gate import output_hashes, with_engines_renamed
from .judged import run_of
from .layout import MISSING, Block, Column, Prose, Sheet, csv_text

WINDOW = 5  # runs on each side of a boundary whose medians make its levels
Z_MIN = 4.0  # standard errors of the difference of the levels
MIN_STEP = 0.01  # of the level before: smaller moves are not reported, however sure
NORMAL_P10_P90 = 2.5631  # a normal's 10th to 90th percentile range, in sigmas
MEDIAN_SE = 1.2533  # a median's standard error over the mean's (sqrt(pi / 2)), for normal samples
MAD_NORMAL = 1.4826  # a normal's sigma over its median absolute deviation
SCHEMA = "qsa.history"
SHORT = 12  # a commit as the tables show it


@dataclass(frozen=True)
class Run:
    """A kept run: its file, its record (one engine checkout's variants named as throughout the history) and
    the commits it measured, qsa's first."""

    path: Path
    record: RunRecord
    commits: tuple[tuple[str, str], ...]

    @property
    def when(self) -> str:
        return self.record.created.replace("T", " ")


@dataclass(frozen=True)
class Point:
    """A (case, variant)'s figures in one run: ``run`` indexes the card's runs."""

    run: int
    median_us: float
    p10_us: float
    p90_us: float
    samples: int
    inputs: str | None  # the sha256 of its inputs and of its output (the integrity row), where the run kept them
    output: str | None

    @property
    def noise_us(self) -> float:
        """The standard error of the median from the run's own samples (module docstring)."""
        if self.samples < 2:
            return 0.0
        return MEDIAN_SE * (self.p90_us - self.p10_us) / NORMAL_P10_P90 / math.sqrt(self.samples)


@dataclass(frozen=True)
class Step:
    """The median moved from ``before_us`` to ``after_us`` at point ``at`` (from point ``at - 1``)."""

    at: int
    before_us: float
    after_us: float
    z: float  # inf where neither side has any noise
    bits: bool | None  # the output's bits changed at the same boundary (None: no hashes on the same inputs)
    provisional: bool  # fewer than WINDOW runs after it

    @property
    def change(self) -> float:
        return self.after_us / self.before_us - 1


@dataclass
class Series:
    stage: str
    case: Case
    variant: str
    points: list[Point]
    steps: list[Step]
    bits_changed: list[int]  # the points whose output's bits differ from the point before's, on the same inputs

    @property
    def key(self) -> str:
        return case_key(self.stage, self.case)

    @property
    def latest_us(self) -> float:
        return self.points[-1].median_us

    def against(self, index: int) -> float | None:
        """The latest median's change against point ``index``'s; None for a series of one run."""
        if len(self.points) < 2:
            return None
        return self.latest_us / self.points[index].median_us - 1


@dataclass
class CardHistory:
    key: str
    runs: list[Run]
    series: list[Series]

    def latest_metrics(self) -> list[Metric]:
        """The newest run's timings, as the dashboards take them (output/export.py)."""
        return metrics([(None, self.runs[-1].record)])


# ---- the rule ------------------------------------------------------------------------------------------------


def _bits_changed(a: Point, b: Point) -> bool | None:
    if None in (a.inputs, a.output, b.inputs, b.output) or a.inputs != b.inputs:
        return None
    return a.output != b.output


def _scatter(medians: Sequence[float]) -> float:
    """The run-to-run sigma of ``medians`` from their consecutive differences (a step adds one large one, which
    their median ignores); 0 for fewer than two."""
    jumps = [abs(y - x) for x, y in pairwise(medians)]
    return MAD_NORMAL * statistics.median(jumps) / math.sqrt(2) if jumps else 0.0


def _median_variance(n: int) -> float:
    """The variance of the median of ``n`` normal values, in units of one value's: their mean's (1 / n) up to
    two, pi / (2 n) from three on (the median's large-sample variance, a little above the exact one)."""
    return (1 if n <= 2 else MEDIAN_SE ** 2) / n


def _levels(points: Sequence[Point], k: int) -> tuple[float, float, float]:
    """(level before k, level from k, z) at boundary ``k`` (module docstring)."""
    before, after = points[max(0, k - WINDOW):k], points[k:k + WINDOW]
    mb, ma = [p.median_us for p in before], [p.median_us for p in after]
    low, high = statistics.median(mb), statistics.median(ma)
    # the series' scatter steadies the few runs' own; the window's counts where the runs around k are noisier
    scatter = max(_scatter([p.median_us for p in points]), _scatter(mb + ma) if len(mb) > 1 and len(ma) > 1 else 0.0)
    own = math.sqrt(statistics.fmean(p.noise_us ** 2 for p in (*before, *after)))
    error = max(scatter, own) * math.sqrt(_median_variance(len(before)) + _median_variance(len(after)))
    if error > 0:
        z = abs(high - low) / error
    else:
        z = math.inf if high != low else 0.0
    return low, high, z


def _fit_cost(points: Sequence[Point], start: int, k: int, stop: int) -> float:
    """The sum of absolute deviations of points[start:stop] from their side's median, split at ``k``."""
    cost = 0.0
    for side in (points[start:k], points[k:stop]):
        ms = [p.median_us for p in side]
        cost += sum(abs(m - statistics.median(ms)) for m in ms) if ms else 0.0
    return cost


def find_steps(points: Sequence[Point], boundaries: Sequence[bool]) -> list[Step]:
    """The steps of a series (module docstring); ``boundaries[k]``: the commits measured changed from point
    k - 1 to point k (``boundaries[0]`` is never one)."""
    candidates = []
    for k in range(1, len(points)):
        if not boundaries[k]:
            continue
        low, high, z = _levels(points, k)
        if low > 0 and abs(high / low - 1) >= MIN_STEP and z >= Z_MIN:
            candidates.append(k)
    clusters: list[list[int]] = []
    for k in candidates:
        if clusters and k - clusters[-1][-1] < WINDOW:
            clusters[-1].append(k)
        else:
            clusters.append([k])
    steps = []
    for cluster in clusters:
        # a window holding the change a few runs in still sees it: place it by the fit, among every boundary
        # whose windows overlap the candidates'
        start, stop = max(0, cluster[0] - WINDOW), min(len(points), cluster[-1] + WINDOW)
        near = [c for c in range(max(1, cluster[0] - WINDOW + 1), min(len(points), cluster[-1] + WINDOW)) if boundaries[c]]
        k = min(near, key=lambda c: (_fit_cost(points, start, c, stop), c))
        low, high, _ = _levels(points, k)
        z = max(_levels(points, c)[2] for c in cluster)  # the evidence: the surest of the candidates
        steps.append(Step(k, low, high, z, _bits_changed(points[k - 1], points[k]), len(points) - k < WINDOW))
    return steps


# ---- a card's history ------------------------------------------------------------------------------------------


def _one_engine_named(record: RunRecord, name: str) -> RunRecord:
    """A run of one engine checkout with that checkout (its variants, its provenance) named ``name``."""
    names = engine_names(record)
    if len(names) != 1 or names[0] == name:
        return record
    out = with_engines_renamed(record, {names[0]: name})
    engines = [{**e, "name": name} for e in out.settings.get("engines") or []]
    return replace(out, settings={**out.settings, "engines": engines})


def _of_engine(variant: str, engine: str) -> bool:
    return any(part.startswith(f"{engine}.") for part in variant.split("+"))


def card_history(key: str, kept: Sequence[tuple[Path, RunRecord]], engine: str | None = None) -> CardHistory:
    """The history of one card from its kept runs, oldest first. A card of one engine checkout names its
    variants by one name throughout (``engine``, else the newest run's), as the gate matches them whatever the
    name typed; ``engine`` keeps that engine's variants only, and its commit and qsa's mark the boundaries."""
    newest = engine_names(kept[-1][1]) if kept else []
    name = engine or (newest[0] if len(newest) == 1 else None)
    runs = [Run(path, r, commits_of(r)) for path, r in
            ((path, _one_engine_named(record, name) if name else record) for path, record in kept)]
    found: dict[tuple[str, str], tuple[Measurement, list[Point]]] = {}
    for i, run in enumerate(runs):
        hashes = output_hashes(run.record)
        for m in run.record.measurements:
            if not m.samples_us or (engine is not None and not _of_engine(m.variant, engine)):
                continue
            p10, p90 = m.spread_us
            inputs, output = hashes.get((m.key, m.variant), (None, None))
            first = found.setdefault((m.key, m.variant), (m, []))
            first[1].append(Point(i, m.median_us, p10, p90, len(m.samples_us), inputs, output))
    series = []
    for m, points in found.values():
        marks = [False] + [_measured(runs[a.run], engine) != _measured(runs[b.run], engine)
                           for a, b in pairwise(points)]
        bits = [i + 1 for i, (a, b) in enumerate(pairwise(points)) if _bits_changed(a, b)]
        series.append(Series(m.stage, m.case, m.variant, points, find_steps(points, marks), bits))
    return CardHistory(key, runs, series)


def _measured(run: Run, engine: str | None) -> tuple[tuple[str, str], ...]:
    """The commits whose change may move a series: with --engine, that engine's and qsa's; else all."""
    return tuple(c for c in run.commits if engine is None or c[0] in (QSA, engine))


# ---- what it prints ------------------------------------------------------------------------------------------


def short(commit: str) -> str:
    """A full commit as its first 12 digits (``-dirty`` kept); anything else as it is."""
    return commit[:SHORT] + commit[40:] if re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit) else commit


def commits_text(commits: Sequence[tuple[str, str]], since: Sequence[tuple[str, str]] | None = None) -> str:
    """``qsa 528ef52dfd0b, strata 9f2c1e0a7b3d``; with ``since``, only the commits that changed from it."""
    changed = [c for c in commits if since is None or c not in since] or list(commits)
    return ", ".join(f"{what} {short(commit)}" for what, commit in changed)


def _pct(x: float | None) -> str:
    return MISSING if x is None else f"{x:+.1%}"


def _bits(changed: bool | None) -> str:
    return {True: "BITS-CHANGED", False: "bits same", None: "bits not compared"}[changed]


def _step_words(h: CardHistory, s: Series, step: Step) -> tuple[str, str, str]:
    """(the change, where: the run it appeared in and the one before it, the bits)."""
    run, before = h.runs[s.points[step.at].run], h.runs[s.points[step.at - 1].run]
    change = f"{step.change:+.1%} ({step.before_us:.4g} → {step.after_us:.4g} µs)"
    where = f"at {commits_text(run.commits, before.commits)} ({run.when}), after {commits_text(before.commits)} ({before.when})"
    return change, where, _bits(step.bits) + (", provisional" if step.provisional else "")


def _span(h: CardHistory) -> str:
    first, last = h.runs[0], h.runs[-1]
    return (f"{len(h.runs)} run{'s' if len(h.runs) != 1 else ''}, from {commits_text(first.commits)} ({first.when}) "
            f"to {commits_text(last.commits)} ({last.when})")


def _counts(h: CardHistory) -> str:
    steps = sum(len(s.steps) for s in h.series)
    bits = sum(len(s.bits_changed) for s in h.series)
    return f"{len(h.series)} series (case, variant), {steps} step{'s' if steps != 1 else ''}, {bits} bits change{'s' if bits != 1 else ''}"


def events(h: CardHistory) -> list[str]:
    """A line per step and per change of bits without a step, in the order of the runs."""
    out = []
    for s in h.series:
        for step in s.steps:
            change, where, bits = _step_words(h, s, step)
            out.append((s.points[step.at].run, f"STEP {change} {s.key} {s.variant}, {where}, {bits}"))
        for at in s.bits_changed:
            if any(step.at == at for step in s.steps):
                continue
            run, before = h.runs[s.points[at].run], h.runs[s.points[at - 1].run]
            out.append((s.points[at].run, f"BITS-CHANGED {s.key} {s.variant}, at {commits_text(run.commits, before.commits)} "
                                          f"({run.when}), its time within the noise"))
    return [line for _, line in sorted(out, key=lambda pair: pair[0])]


def heading(h: CardHistory, folder: str) -> str:
    return f"History of {h.key} in {folder}: {_span(h)}; {_counts(h)}"


def summary_blocks(histories: Sequence[CardHistory], folder: str) -> list[Block]:
    """A CI log's lines: per card its runs and counts, then a line per step and change of bits."""
    out: list[Block] = []
    for h in histories:
        out.append(Prose(heading(h, folder), phrased=True))
        out += [Prose(line, phrased=True) for line in events(h)]
    out.append(Prose("every (case, variant): -v"))
    return out


SERIES_COLUMNS = (Column("variant", bare=True), Column("runs", numeric=True), Column("latest", "µs", numeric=True),
                  Column("vs previous", numeric=True), Column("vs first", numeric=True), Column("steps"),
                  Column("bits changed at"))


def full_blocks(histories: Sequence[CardHistory], folder: str) -> list[Block]:
    """Per card: its runs, every (case, variant)'s latest median and changes, and its steps."""
    out: list[Block] = []
    for h in histories:
        out.append(Prose(heading(h, folder), phrased=True))
        sheet = Sheet(f"{h.key}: the latest median of each (case, variant) and its steps", SERIES_COLUMNS,
                      notes=[f"a step: the median moved by {MIN_STEP:.0%} or more and {Z_MIN:g} standard errors "
                             "of the runs around it (docs/history.md)"])
        for s in h.series:
            steps = "; ".join(f"{step.change:+.1%} at {commits_text(h.runs[s.points[step.at].run].commits)}"
                              for step in s.steps)
            bits = "; ".join(commits_text(h.runs[s.points[at].run].commits) for at in s.bits_changed)
            sheet.add(s.variant, str(len(s.points)), f"{s.latest_us:.4g}", _pct(s.against(-2)), _pct(s.against(0)),
                      steps or "none", bits or "none", group=s.key)
        out.append(sheet)
        out += [Prose(line, phrased=True) for line in events(h)]
    return out


def history_csv(histories: Sequence[CardHistory]) -> str:
    return csv_text(("card", "case", "variant", "runs", "first_commits", "latest_commits", "latest_us",
                     "vs_previous", "vs_first", "steps", "bits_changed_at"),
                    [(h.key, s.key, s.variant, len(s.points), commits_text(h.runs[s.points[0].run].commits),
                      commits_text(h.runs[s.points[-1].run].commits), f"{s.latest_us:.6g}",
                      None if s.against(-2) is None else f"{s.against(-2):.6f}",
                      None if s.against(0) is None else f"{s.against(0):.6f}",
                      "; ".join(f"{commits_text(h.runs[s.points[t.at].run].commits)} {t.change:+.6f}" for t in s.steps),
                      "; ".join(commits_text(h.runs[s.points[at].run].commits) for at in s.bits_changed))
                     for h in histories for s in h.series])


def _point_data(h: CardHistory, p: Point) -> dict[str, Any]:
    run = h.runs[p.run]
    return {"file": run.path.name, "created": run.record.created, "commits": dict(run.commits),
            "median_us": p.median_us, "p10_us": p.p10_us, "p90_us": p.p90_us, "samples": p.samples,
            "inputs_sha256": p.inputs, "output_sha256": p.output}


def history_data(histories: Sequence[CardHistory]) -> dict[str, Any]:
    """The JSON form: the rule's numbers, then per card its runs and every series with its points and steps."""
    def step_data(h: CardHistory, s: Series, t: Step) -> dict[str, Any]:
        return {"run": h.runs[s.points[t.at].run].path.name, "after_run": h.runs[s.points[t.at - 1].run].path.name,
                "commits": dict(h.runs[s.points[t.at].run].commits), "created": h.runs[s.points[t.at].run].record.created,
                "before_us": t.before_us, "after_us": t.after_us, "change": t.change,
                "z": None if math.isinf(t.z) else t.z, "bits_changed": t.bits, "provisional": t.provisional}

    return {"schema": SCHEMA, "schema_version": 1,
            "rule": {"window": WINDOW, "z_min": Z_MIN, "min_step": MIN_STEP},
            "cards": [{"key": h.key, "runs": [{"file": r.path.name, "created": r.record.created, "commits": dict(r.commits),
                                               "run": run_of(r.record)} for r in h.runs],
                       "series": [{"stage": s.stage, "case": dict(s.case), "variant": s.variant, "key": s.key,
                                   "latest_us": s.latest_us, "vs_previous": s.against(-2), "vs_first": s.against(0),
                                   "points": [_point_data(h, p) for p in s.points],
                                   "steps": [step_data(h, s, t) for t in s.steps],
                                   "bits_changed_at": [h.runs[s.points[at].run].path.name for at in s.bits_changed]}
                                  for s in h.series]}
                      for h in histories]}
