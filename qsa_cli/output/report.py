"""Rendering a run record: rich tables, a clocks line and pull-request markdown. Never measures.

Contexts are labelled the way the seed's tables do (``32K`` for 32768, ``131K`` for 131072, ``524K``
for 524288: thousands, rounded down); where a label is not the exact number of cells, the tables
show the number beside it and the markdown lists them under its tables.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from rich.table import Table

from ..catalog import qsa_catalog
from ..core.geometry import BLOCK_CELLS
from ..record.schema import Measurement, ParityCheck, RunRecord
from ..record.vocabulary import DEFAULT_KEYS
from ..stages import scores as scores_stage
from ..stages import topk as topk_stage
from ..stages import window as window_stage

THROTTLED_MARK = "*"
THROTTLED_NOTE = f"{THROTTLED_MARK} throttled: a thermal, power or hardware slowdown was reported around these samples"
MISSING = "–"
LABEL_COLUMNS = {"context", "kind", "score set", "verdict", "stage", "case", "subject", "against", "result", "detail",
                 "threshold", "what", "value here", "kernel", "scorer", "top-k", "why", "variant", "tool", "first report", "keys"}

Index = dict[tuple[str, str], Measurement]


# ---- looking things up in a record ----------------------------------------------------------------


def measurement_index(record: RunRecord) -> Index:
    """(case key, variant) -> measurement; a later measurement of the same pair replaces an earlier one."""
    return {(m.key, m.variant): m for m in record.measurements}


def stage_cases(record: RunRecord, stage: str) -> dict[str, dict[str, Any]]:
    """Case key -> case of every case a stage measured or checked, in the record's order."""
    out: dict[str, dict[str, Any]] = {}
    for row in [*record.measurements, *record.parity]:
        if row.stage == stage:
            out.setdefault(row.key, row.case)
    return out


def parity_of(record: RunRecord, key: str) -> list[ParityCheck]:
    return [p for p in record.parity if p.key == key]


def case_label(case: dict[str, Any]) -> str:
    """One line naming a case for people: ``131K (131072), 4 queries, capacity 524288, prompt, equal``
    (a scorer case: ``..., adversarial keys``)."""
    parts = [context_cell(case["ctx"]), f"{case['nq']} quer{'y' if case['nq'] == 1 else 'ies'}",
             f"capacity {case['capacity']}"]
    parts += [str(case[k]) for k in ("kind", "score_set") if case.get(k) not in (None, "decode")]
    parts += [f"{case['keys']} keys"] if "keys" in case else []
    return ", ".join(parts)


def _with_keys(cases: Iterable[dict[str, Any]]) -> bool:
    """Whether a table of these scorer cases needs a keys column (a case names its keys when not synthetic)."""
    return any("keys" in c for c in cases)


# ---- formatting -----------------------------------------------------------------------------------------


def context_label(ctx: int) -> str:
    """The seed's short form: thousands rounded down (9000 -> 9K, 131072 -> 131K), millions to 0.1M."""
    if ctx < 1000:
        return str(ctx)
    if ctx < 1_000_000:
        return f"{ctx // 1000}K"
    return f"{ctx // 100_000 / 10:g}M"


def context_cell(ctx: int) -> str:
    label = context_label(ctx)
    return label if _label_is_exact(label, ctx) else f"{label} ({ctx})"


def _label_is_exact(label: str, ctx: int) -> bool:
    scale = {"K": 1000, "M": 1_000_000}.get(label[-1], 1)
    return float(label.rstrip("KM")) * scale == ctx


def _time(m: Measurement | None, fmt: str = ".1f", scale: float = 1.0) -> str:
    """A median (µs times ``scale``), marked when the samples were throttled."""
    if m is None:
        return MISSING
    return format(m.median_us * scale, fmt) + (THROTTLED_MARK if m.throttled else "")


def _ratio(a: Measurement | None, b: Measurement | None, template: str) -> str:
    return template.format(a.median_us / b.median_us) if a is not None and b is not None else MISSING


def _rows_equal(p: ParityCheck) -> str:
    if p.rows is None or p.rows_equal is None:
        return "yes" if p.equal else "NO"
    return f"{p.rows_equal}/{p.rows}"


def _identical(checks: list[ParityCheck]) -> str:
    """The worst of a case's checks, e.g. "7/8" when one query's ids differ."""
    # an integrity check (no rows) only where it failed and no row count says more
    worst = min(checks, key=lambda p: (p.equal, p.rows_equal if p.rows is not None else float("inf")), default=None)
    return _rows_equal(worst) if worst else MISSING


def _verdict(checks: list[ParityCheck]) -> str:
    if not checks:
        return MISSING
    failed = [f"{p.subject} vs {p.against}" for p in checks if not p.equal]
    return "[red]FAIL[/red] " + ", ".join(failed) if failed else "[green]PASS[/green]"


def _table(title: str, columns: Iterable[str]) -> Table:
    table = Table(title=title)
    for col in columns:
        # a variant's name is folded over lines, never cut: an engine's names are long
        table.add_column(col, justify="left" if col in LABEL_COLUMNS else "right", overflow="fold")
    return table


def _footnote(table: Table, measurements: Iterable[Measurement | None]) -> Table:
    if any(m is not None and m.throttled for m in measurements):
        table.caption = THROTTLED_NOTE
    return table


# ---- tables ---------------------------------------------------------------------------------------------


REFERENCE_POINTS = {scores_stage.READ_FLOOR: "read floor", topk_stage.ARGPARTITION: topk_stage.ARGPARTITION}
ROLE_MARKS = {"baseline": " (old)", "candidate": " (new)"}


def roles_of(record: RunRecord, stage: str) -> dict[str, str]:
    """A stage's variants by role (reference, baseline, candidate) as the run used them.

    The roles are the record's (``settings["roles"]``): the variants it ran may be an engine checkout's or
    a compare side's, unknown to this registry. A record from before roles were recorded ran the
    registry's. A window pair is named by its scorer and top-k, so the window's roles are the pairs of
    the scorer's and the top-k's variant in the same role.
    """
    if stage == window_stage.STAGE:
        scorer, topk = roles_of(record, scores_stage.STAGE), roles_of(record, topk_stage.STAGE)
        return {role: window_stage.pair_name(name, topk[role]) for role, name in scorer.items() if role in topk}
    recorded = record.settings.get("roles") or {}
    return dict(recorded[stage]) if stage in recorded else qsa_catalog().roles(stage)


def _measured(record: RunRecord, stage: str) -> list[str]:
    """Every variant (and reference point) ``stage`` measured in the record, in the order first measured."""
    return list(dict.fromkeys(m.variant for m in record.measurements if m.stage == stage))


def variant_columns(record: RunRecord, stage: str) -> list[tuple[str, str]]:
    """(variant, column label) of every variant ``stage`` measured, the baseline's label ending " (old)" and
    the candidate's " (new)". A reference point (the read floor, cupy.argpartition) is no variant: each
    table places its own."""
    marks = {roles_of(record, stage).get(role): mark for role, mark in ROLE_MARKS.items()}
    return [(v, v + marks.get(v, "")) for v in _measured(record, stage) if v not in REFERENCE_POINTS]


def _before_after(record: RunRecord, stage: str) -> tuple[str, str]:
    """A stage's "before" and "after": the run's baseline and candidate."""
    roles = roles_of(record, stage)
    return roles.get("baseline", MISSING), roles.get("candidate", MISSING)


def scores_table(record: RunRecord) -> Table:
    """A decode call's scorer per case: every variant's median, the baseline (old) vs the candidate (new),
    their hashes, and the read floor."""
    (old, new), floor = _before_after(record, scores_stage.STAGE), scores_stage.READ_FLOOR
    columns = variant_columns(record, scores_stage.STAGE)
    index = measurement_index(record)
    cases = stage_cases(record, scores_stage.STAGE)
    with_keys = _with_keys(cases.values())
    table = _table(f"Scorer: a decode call, {old} (old) vs {new} (new), µs",
                   ["context", "capacity", "queries", *(["keys"] if with_keys else []), "blocks", "hash old",
                    "hash new", "equal", *(label for _, label in columns), REFERENCE_POINTS[floor], "speedup",
                    "GB/s (new)", "new / read floor"])
    shown: list[Measurement | None] = []
    for key, case in cases.items():
        row = [index.get((key, v)) for v, _ in columns]
        m_old, m_new, m_floor = (index.get((key, v)) for v in (old, new, floor))
        shown += [*row, m_floor]
        checks = parity_of(record, key)
        hashes = {name: h for p in checks for name, h in p.hashes.items()}
        pair = next((p for p in checks if {p.subject, p.against} == {old, new}), None)
        equal = MISSING if pair is None else ("[green]yes[/green]" if pair.equal else "[red]NO[/red]")
        gbps = m_new.gbps if m_new is not None else None
        table.add_row(
            context_cell(case["ctx"]), str(case["capacity"]), str(case["nq"]),
            *([case.get("keys", DEFAULT_KEYS)] if with_keys else []), str(case["ctx"] // BLOCK_CELLS + 1),
            hashes.get(old, MISSING), hashes.get(new, MISSING), equal, *(_time(m) for m in row), _time(m_floor),
            _ratio(m_old, m_new, "{:.2f}x"), f"{gbps:.0f}" if gbps is not None else MISSING,
            _ratio(m_new, m_floor, "{:.2f}"),
        )
    return _footnote(table, shown)


def dispatch_of(record: RunRecord, kind: str) -> dict[str, Any] | None:
    """The engine's choice for ``kind`` calls as the run recorded it: one summary, or one per kind (a sweep)."""
    d = record.settings.get("dispatch") or {}
    if kind in d:
        return d[kind]
    return d if d.get("kind", kind) == kind and "topk" in d else None


def topk_table(record: RunRecord) -> Table:
    """A call's top-k per case: every variant's median, the dispatched one's, cupy.argpartition's as a
    reference point, identical ids against the references, verdict."""
    columns, lib = variant_columns(record, topk_stage.STAGE), topk_stage.ARGPARTITION
    index = measurement_index(record)
    table = _table("Top-k: median µs per call", ["context", "capacity", "queries", "kind", "score set",
                   *(label for _, label in columns), "dispatched", REFERENCE_POINTS[lib], "identical", "verdict"])
    shown: list[Measurement | None] = []
    for key, case in stage_cases(record, topk_stage.STAGE).items():
        row = [index.get((key, v)) for v, _ in columns]
        dispatched = (dispatch_of(record, case["kind"]) or {}).get("topk")
        m_disp = index.get((key, dispatched)) if dispatched else None
        m_lib = index.get((key, lib))
        shown += [*row, m_disp, m_lib]
        checks = parity_of(record, key)
        table.add_row(
            context_cell(case["ctx"]), str(case["capacity"]), str(case["nq"]), case["kind"], case.get("score_set", ""),
            *(_time(m) for m in row), f"{_time(m_disp)} {dispatched}" if m_disp else MISSING, _time(m_lib),
            _identical(checks), _verdict(checks),
        )
    return _footnote(table, shown)


def window_table(record: RunRecord) -> Table:
    """A decode window's selection (scores then top-k, one CUDA graph) per kernel pair, and its ids; the
    speedup is the before pair's over the after pair's, or over the dispatched pair's where the after
    pair was not measured."""
    before, after = _before_after(record, window_stage.STAGE)
    columns = variant_columns(record, window_stage.STAGE)
    index = measurement_index(record)
    cases = stage_cases(record, window_stage.STAGE)
    with_keys = _with_keys(cases.values())
    table = _table("Window: scores then top-k as one graph, median µs per replay",
                   ["context", "capacity", "queries", *(["keys"] if with_keys else []), *(label for _, label in columns),
                    "dispatched", "speedup", "identical", "verdict"])
    shown: list[Measurement | None] = []
    for key, case in cases.items():
        row = [index.get((key, p)) for p, _ in columns]
        d = dispatch_of(record, case["kind"])
        dispatched = window_stage.pair_name(d["scores"], d["topk"]) if d else None
        m_disp = index.get((key, dispatched)) if dispatched else None
        shown += row
        checks = parity_of(record, key)
        table.add_row(
            context_cell(case["ctx"]), str(case["capacity"]), str(case["nq"]),
            *([case.get("keys", DEFAULT_KEYS)] if with_keys else []), *(_time(m) for m in row),
            f"{_time(m_disp)} {dispatched}" if m_disp else MISSING,
            _ratio(index.get((key, before)), index.get((key, after)) or m_disp, "{:.2f}x"),
            _identical(checks), _verdict(checks),
        )
    return _footnote(table, shown)


THRESHOLD_FORMS = {"min_speedup": ("{:.2f}x", ">="), "max_floor_ratio": ("{:.2f}", "<=")}


def thresholds_table(record: RunRecord) -> Table:
    """A sweep's thresholds checked on each case (``record.thresholds``)."""
    table = _table("Thresholds", ["stage", "case", "threshold", "value", "limit", "result"])
    for t in record.thresholds:
        fmt, sense = THRESHOLD_FORMS[t.name]
        result = "[green]holds[/green]" if t.passed else "[red]BROKEN[/red]"
        table.add_row(t.stage, case_label(t.case), t.name, fmt.format(t.value), f"{sense} {fmt.format(t.limit)}", result)
    return table


def parity_table(record: RunRecord) -> Table:
    """Every bitwise check of the run, with the first difference of those that fail."""
    table = _table("Parity (bitwise)", ["stage", "case", "subject", "against", "identical", "result", "detail"])
    for p in record.parity:
        result = "[green]equal[/green]" if p.equal else "[red]DIFFERS[/red]"
        table.add_row(p.stage, case_label(p.case), p.subject, p.against, _rows_equal(p), result, p.detail)
    return table


def sanitizer_table(record: RunRecord) -> Table:
    """``qsa sanitize``: every (variant, case, tool) with its reports, the explained ones, and the first."""
    table = _table("compute-sanitizer", ["variant", "case", "tool", "errors", "explained", "result", "first report"])
    for r in record.sanitizer:
        result = "[green]clean[/green]" if r.errors == 0 else ("[yellow]explained[/yellow]" if r.passed else "[red]FAIL[/red]")
        table.add_row(r.variant, case_label(r.case), r.tool, str(r.errors), str(r.explained), result, r.first_report)
    return table


STAGE_TABLES = {scores_stage.STAGE: scores_table, topk_stage.STAGE: topk_table, window_stage.STAGE: window_table}


def tables(record: RunRecord) -> list[Table]:
    """Every table a record has rows for: one per stage it ran, then its thresholds."""
    stages = {row.stage for row in [*record.measurements, *record.parity]}
    out = [render(record) for stage, render in STAGE_TABLES.items() if stage in stages]
    return (out + ([thresholds_table(record)] if record.thresholds else [])
            + ([sanitizer_table(record)] if record.sanitizer else []))


# ---- qsa info -----------------------------------------------------------------------------------------------


def _value(name: str, value: Any) -> str:
    if name.endswith("_bytes") and isinstance(value, int):
        return f"{value / 2**20:,.0f} MiB" if value >= 2**20 else f"{value / 2**10:,.0f} KiB"
    return MISSING if value is None else str(value)


def _reading(clocks: dict[str, Any]) -> str:
    forms = (("sm_mhz", "SM {} MHz"), ("mem_mhz", "memory {} MHz"), ("temperature_c", "{} °C"), ("power_w", "{:.0f} W"))
    parts = [form.format(clocks[name]) for name, form in forms if clocks.get(name) is not None]
    return ", ".join([*parts, "reasons: " + (", ".join(clocks["event_reasons"]) or "none")])


def info_tables(info: Any) -> list[Table]:
    """``qsa info``: the device (with NVML's view and its clocks now), the kernels as compiled, the dispatch.

    ``info`` is a ``runs.DeviceReport`` (device, clocks, kernels, dispatch, notes).
    """
    device = _table("Device", ["what", "value here"])
    for name, value in info.device.items():
        if name == "nvml":
            for k, v in value.items():
                device.add_row(f"nvml {k}", _value(k, v))
        else:
            device.add_row(name, _value(name, value))
    device.add_row("clocks now", _reading(info.clocks) if info.clocks else "unavailable")
    kernels = _table("Kernels as compiled for this device",
                     ["kernel", "registers", "shared bytes", "local bytes", "max threads"])
    for k in info.kernels:
        kernels.add_row(k.name, str(k.registers), str(k.shared_bytes), str(k.local_bytes), str(k.max_threads))
    kernels.caption = "; ".join(n for n in info.notes if n) or None
    dispatch = _table("What the engine dispatches here", ["kind", "scorer", "top-k", "why"])
    for kind, d in info.dispatch.items():
        dispatch.add_row(kind, d["scores"], d["topk"], "; ".join(d["reasons"].values()))
    return [device, kernels, dispatch]


# ---- clocks -----------------------------------------------------------------------------------------------


def _span(values: list[float], fmt: str, unit: str) -> str | None:
    if not values:
        return None
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return f"{lo} {unit}" if lo == hi else f"{lo}-{hi} {unit}"


def clocks_text(record: RunRecord) -> str:
    """The clocks of a run in words: the lock, the ranges read around the samples, throttling."""
    readings = [r for m in record.measurements for r in (m.clocks_before, m.clocks_after) if r]
    nvml = record.device.get("nvml") or {}
    lock = record.settings.get("clock_lock")
    if not readings:
        if "unavailable" in nvml:
            return f"unavailable ({nvml['unavailable']})"
        return "not recorded" + (" (CPU backend)" if record.backend == "cpu" else "")

    def seen(field: str, fmt: str, unit: str) -> str | None:
        return _span([r[field] for r in readings if r.get(field) is not None], fmt, unit)

    if lock and lock.get("locked", True):
        mem = f", memory {lock['mem_mhz']} MHz" if lock.get("mem_mhz") else ""
        state = f"locked at SM {lock['sm_mhz']} MHz{mem}"
    else:
        state = f"not locked ({lock.get('reason') or 'refused'})" if lock else "not locked"
    spans = [("SM", seen("sm_mhz", "d", "MHz")), ("memory", seen("mem_mhz", "d", "MHz")),
             ("", seen("temperature_c", "d", "°C")), ("", seen("power_w", ".0f", "W"))]
    parts = [state, "read: " + ", ".join(f"{name} {text}".strip() for name, text in spans if text)]
    throttled = sum(m.throttled for m in record.measurements)
    parts.append(f"throttled in {throttled} of {len(record.measurements)} measurements")
    return ", ".join(parts)


def clocks_line(record: RunRecord) -> str:
    """``clocks: locked at SM 1650 MHz, read: SM 1650 MHz, memory 7000 MHz, 45-61 °C, 90-240 W, throttled in 0 of 24 ...``"""
    return f"clocks: {clocks_text(record)}"


# ---- markdown -----------------------------------------------------------------------------------------------


def _header(record: RunRecord) -> str:
    if record.backend == "cpu":
        card = "CPU backend (the exact models; times are the host's)"
    else:
        cc = str(record.device.get("compute_capability", "?")).replace(".", "")
        card = f"{record.device.get('name', 'unknown GPU')} (sm_{cc})"
    command = shlex.join(["qsa", *record.argv]) if record.argv else f"qsa {record.command}"
    return f"**{card}**, clocks: {clocks_text(record)}, {record.created.replace('T', ' ')}, `{command}`"


def _groups(cases: dict[str, dict[str, Any]], fields: tuple[str, ...]) -> dict[tuple[Any, ...], dict[str, dict[str, Any]]]:
    out: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for key, case in cases.items():
        out.setdefault(tuple(case.get(f) for f in fields), {})[key] = case
    return out


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _unit_first(cells: list[str], unit: str) -> list[str]:
    """The seed writes the unit once, in the first cell that has a figure."""
    for i, c in enumerate(cells):
        if c != MISSING:
            return cells[:i] + [f"{c} {unit}"] + cells[i + 1:]
    return cells


def _parity_summary(checks: list[ParityCheck], ok: str) -> str:
    failed = [p for p in checks if not p.equal]
    if not failed:
        return f"{ok} ({len(checks)} checks)."
    p = failed[0]
    return f"**FAIL**: {len(failed)} of {len(checks)} checks differ; first: {case_label(p.case)}: {p.subject} vs {p.against}: {p.detail}"


def _scores_markdown(record: RunRecord, index: Index) -> list[str]:
    old, new = _before_after(record, scores_stage.STAGE)
    cases = stage_cases(record, scores_stage.STAGE)
    out: list[str] = []
    for (capacity, l2, keys), group in _groups(cases, ("capacity", "l2", "keys")).items():
        by_ctx: dict[int, list[tuple[int, str]]] = {}
        for key, case in sorted(group.items(), key=lambda kc: (kc[1]["ctx"], kc[1]["nq"])):
            if (key, old) in index or (key, new) in index:
                by_ctx.setdefault(case["ctx"], []).append((case["nq"], key))
        if not by_ctx:
            continue
        rows = []
        for ctx, entries in by_ctx.items():
            cells = [[_time(index.get((key, v))) for _, key in entries] for v in (old, new)]
            rows.append([context_label(ctx), " / ".join(str(nq) for nq, _ in entries), *(" / ".join(c) for c in cells)])
        rows[0][2] += " µs"
        out += [f"### Scorer: a decode call, before ({old}) / after ({new}), capacity {capacity}, L2 {l2}"
                + (f", {keys} keys" if keys else ""), ""]
        out += _md_table(["context", "queries", "before", "after"], rows) + [""]
    checks = [p for p in record.parity if p.stage == scores_stage.STAGE]
    if checks:
        out += [_parity_summary(checks, "The same bits in every case, old, new and the CPU model"), ""]
    return out


def _topk_markdown(record: RunRecord, index: Index) -> list[str]:
    old, new = _before_after(record, topk_stage.STAGE)
    cases = stage_cases(record, topk_stage.STAGE)
    out: list[str] = []
    for (kind, score_set, capacity, l2), group in _groups(cases, ("kind", "score_set", "capacity", "l2")).items():
        cells: dict[int, dict[int, str]] = {}
        for key, case in group.items():
            m_old, m_new = index.get((key, old)), index.get((key, new))
            if m_old or m_new:
                cells.setdefault(case["ctx"], {})[case["nq"]] = f"{_time(m_old, '.3f', 1e-3)} → {_time(m_new, '.3f', 1e-3)}"
        if not cells:
            continue
        queries = sorted({nq for row in cells.values() for nq in row})
        head = ["context"] + [f"{nq} quer{'y' if nq == 1 else 'ies'}" if i == 0 else str(nq) for i, nq in enumerate(queries)]
        rows = [[context_label(ctx), *_unit_first([row.get(nq, MISSING) for nq in queries], "ms")]
                for ctx, row in sorted(cells.items())]
        out += [f"### Top-k: a {kind} call, {score_set} scores, {old} → {new}, capacity {capacity}, L2 {l2}", ""]
        out += _md_table(head, rows) + [""]
    checks = [p for p in record.parity if p.stage == topk_stage.STAGE]
    if checks:
        out += [_parity_summary(checks, "Identical ids in every query of every case"), ""]
    return out


STAGE_TITLES = {
    scores_stage.STAGE: "Scorer, every variant",
    topk_stage.STAGE: "Top-k, every variant",
    window_stage.STAGE: "Window (scores then top-k as one CUDA graph), every pair",
}


def _variants_markdown(record: RunRecord, index: Index, stage: str) -> list[str]:
    """One row per case, one column per variant measured (median µs) as the stage's table labels it, then
    the reference point where measured, grouped like the seed's tables; the scorer's rows add the
    candidate's ratio to the read floor."""
    cases = stage_cases(record, stage)
    measured = _measured(record, stage)
    if not measured:
        return []
    columns = variant_columns(record, stage) + [(v, REFERENCE_POINTS[v]) for v in measured if v in REFERENCE_POINTS]
    candidate = _before_after(record, stage)[1]
    ratio = scores_stage.READ_FLOOR in measured and candidate in measured
    out: list[str] = []
    for (kind, capacity, l2), group in _groups(cases, ("kind", "capacity", "l2")).items():
        with_set = any(c.get("score_set") for c in group.values())
        with_keys = _with_keys(group.values())
        head = ["context", "queries", *(["score set"] if with_set else []), *(["keys"] if with_keys else []),
                *(label for _, label in columns), *(["new / read floor"] if ratio else [])]
        rows = []
        order = lambda kc: (kc[1]["ctx"], kc[1]["nq"], kc[1].get("score_set", ""), kc[1].get("keys", ""))  # noqa: E731
        for key, case in sorted(group.items(), key=order):
            row = [context_label(case["ctx"]), str(case["nq"]), *([case.get("score_set", "")] if with_set else []),
                   *([case.get("keys", DEFAULT_KEYS)] if with_keys else [])]
            row += [_time(index.get((key, v))) for v, _ in columns]
            if ratio:
                row.append(_ratio(index.get((key, candidate)), index.get((key, scores_stage.READ_FLOOR)), "{:.2f}"))
            rows.append(row)
        out += [f"### {STAGE_TITLES[stage]}: a {kind} call, median µs, capacity {capacity}, L2 {l2}", ""]
        out += _md_table(head, rows) + [""]
    return out


def markdown(record: RunRecord) -> str:
    """The run as pull-request markdown in the seed's style (µs for the scorer, ms for the top-k), then
    every variant's medians per case."""
    index = measurement_index(record)
    lines = [_header(record), ""]
    lines += _scores_markdown(record, index)
    lines += _topk_markdown(record, index)
    for stage in STAGE_TITLES:
        lines += _variants_markdown(record, index, stage)
    windows = [p for p in record.parity if p.stage == window_stage.STAGE]
    if windows:
        lines += [_parity_summary(windows, "Identical ids after the replays, every pair against the CPU oracle"), ""]
    broken = [t for t in record.thresholds if not t.passed]
    if broken:
        t = broken[0]
        fmt, sense = THRESHOLD_FORMS[t.name]
        lines += [f"**FAIL**: {len(broken)} of {len(record.thresholds)} thresholds broken; first: {case_label(t.case)}: "
                  f"{t.name} {fmt.format(t.value)}, not {sense} {fmt.format(t.limit)}", ""]
    elif record.thresholds:
        lines += [f"Every threshold holds ({len(record.thresholds)} checks).", ""]
    contexts = sorted({row.case["ctx"] for row in [*record.measurements, *record.parity]})
    loose = [f"{context_label(c)} = {c}" for c in contexts if not _label_is_exact(context_label(c), c)]
    if loose:
        lines += ["Contexts in cells: " + ", ".join(loose) + ".", ""]
    if any(m.throttled for m in record.measurements):
        lines += [f"{THROTTLED_NOTE}.", ""]
    lines += [f"{note}." for note in record.notes]
    return "\n".join(lines).rstrip() + "\n"
