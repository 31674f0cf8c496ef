"""A record's timings in the formats of the dashboards teams already run, so qsa's figures can feed them:

- ``gab``: github-action-benchmark's ``customSmallerIsBetter`` input, a JSON list of ``{"name", "unit",
  "value", "range", "extra"}`` (``value`` a number; ``range`` and ``extra`` strings the chart's tooltip shows).
- ``bmf``: the Bencher Metric Format, ``{benchmark name: {measure slug: {"value", "lower_value",
  "upper_value"}}}``, under Bencher's built-in ``latency`` measure, whose unit is the nanosecond.

One entry per timed (stage, case, variant): the median, and the 10th to 90th percentile of the samples (the
spread the gate and the history weigh a change against) as the range or the lower and upper values. A
benchmark's name is the case as the gate keys it and the variant, so one (case, variant) keeps its name from
run to run and the dashboard draws its line across commits.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.errors import InputError
from ..record.schema import Measurement, RunRecord
from . import EXPORTS
from .judged import run_of

GAB, BMF = EXPORTS
GAB_UNIT = "µs"
BMF_MEASURE = "latency"  # Bencher's built-in measure of time: nanoseconds
NS_PER_US = 1000.0


@dataclass(frozen=True)
class Metric:
    """A timed (case, variant) as the dashboards take it: its name, median and spread (µs), and whence."""

    name: str
    median_us: float
    p10_us: float
    p90_us: float
    samples: int
    whence: str  # the commits and date of its run


def metric_name(m: Measurement) -> str:
    """``scores ctx=32768 nq=1 capacity=524288 kind=decode l2=clean halve``: the gate's case key, then the variant."""
    return f"{m.key} {m.variant}"


def metrics(named: Sequence[tuple[str | None, RunRecord]]) -> list[Metric]:
    """Every timed measurement of the records; a record given with a name (several records at once) prefixes
    its metrics' names with it, so two runs of one case stay two benchmarks. A measurement without samples
    has no median to give and is left out; records that time nothing at all are an InputError."""
    out = []
    for name, record in named:
        for m in record.measurements:
            if not m.samples_us or not math.isfinite(m.median_us):
                continue
            p10, p90 = m.spread_us
            out.append(Metric(f"{name}: {metric_name(m)}" if name else metric_name(m), m.median_us, p10, p90,
                              len(m.samples_us), run_of(record)))
    if not out:
        which = ", ".join(name for name, _ in named if name) or "the record"
        raise InputError(f"{which}: no timed measurement to export")
    return out


def gab(items: Sequence[Metric]) -> list[dict[str, object]]:
    """github-action-benchmark's customSmallerIsBetter entries (module docstring)."""
    return [{"name": m.name, "unit": GAB_UNIT, "value": m.median_us,
             "range": f"± {(m.p90_us - m.p10_us) / 2:.4g}",
             "extra": f"p10 {m.p10_us:.4g} µs, p90 {m.p90_us:.4g} µs, {m.samples} samples\n{m.whence}"}
            for m in items]


def bmf(items: Sequence[Metric]) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format (module docstring): the median, the 10th and 90th percentiles, in nanoseconds."""
    return {m.name: {BMF_MEASURE: {"value": m.median_us * NS_PER_US, "lower_value": m.p10_us * NS_PER_US,
                                   "upper_value": m.p90_us * NS_PER_US}} for m in items}


def export_text(fmt: str, items: Sequence[Metric]) -> str:
    """``items`` as ``fmt`` (gab or bmf), a JSON document ending in a newline."""
    data = gab(items) if fmt == GAB else bmf(items)
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"
