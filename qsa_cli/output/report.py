"""Rendering a run record: its result rows as sheets (a row per variant and case), the before / after
of the run's roles, thresholds, compute-sanitizer runs and selftest checks; the clocks in words; CSV;
and the verdict lines a command ends with. Reads the record only (output/rows.py's model of it).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ..core.geometry import NEW_KERNELS_CC
from ..record.limits import LIMITS
from ..record.schema import Agreement, LimitVerdict, Measurement, ParityCheck, RunRecord, StopOutcome
from ..record.vocabulary import SCORES, STAGES, TOPK, WINDOW
from .layout import MISSING, Block, Column, Prose, Sheet, csv_text
from .rows import (
    ResultRow,
    before_after,
    case_label,
    result_rows,
    sample_problem,
)

THROTTLED_MARK = "*"
THROTTLED_NOTE = f"{THROTTLED_MARK} throttled: a thermal, power or hardware slowdown was reported around these samples"
STAGE_TITLES = {SCORES: "Scorer", TOPK: "Top-k", WINDOW: "Window (scores then top-k as one CUDA graph)"}
HASH_DIGITS = 12  # a hash in a table: enough to tell outputs apart (the record keeps it whole)


# ---- cells ------------------------------------------------------------------------------------------------------


def time_cell(m: Measurement | None) -> str:
    """A median in µs, marked when throttled; ``BAD (why)`` for unusable samples; – when not timed."""
    if m is None:
        return MISSING
    problem = sample_problem(m)
    if problem is not None:
        return f"BAD ({problem})"
    return f"{m.median_us:.1f}" + (THROTTLED_MARK if m.throttled else "")


def number_cell(value: float | None, form: str) -> str:
    return MISSING if value is None else form.format(value)


def check_cell(p: ParityCheck | None) -> str:
    """``yes``, ``NO`` (with the rows that differ, where counted), or – when not checked."""
    if p is None:
        return MISSING
    if p.equal:
        return "yes"
    return "NO" + (f" ({p.rows_equal}/{p.rows} rows equal)" if p.rows is not None and p.rows_equal is not None else "")


def agreement_cell(a: Agreement | None) -> str:
    """An inexact variant's measures where a bitwise row has ``yes`` / ``NO``: ``inexact: 12 of 4100 differ, max
    3 ulp, abs 2.4e-07, rel 1.1e-07; ids 99.8% min, 3/4 same`` (– when not measured)."""
    if a is None:
        return MISSING
    parts = []
    if a.scores is not None:
        e = a.scores
        scores = f"{e['differing']} of {e['entries']} differ"
        if e["differing"] > e["mismatched"]:
            scores += f", max {e['max_ulps']} ulp, abs {e['max_abs_error']:.2g}, rel {e['max_rel_error']:.2g}"
        parts.append(scores + (f", {e['mismatched']} mismatched" if e["mismatched"] else ""))
    if a.selection is not None:
        sel = a.selection
        low, mean = f"{sel['min_id_fraction']:.1%}", f"{sel['mean_id_fraction']:.1%}"
        parts.append(f"ids {low} min" + (f" {mean} mean" if mean != low else "")
                     + f", {sel['identical_queries']}/{sel['queries']} same")
    return "inexact: " + "; ".join(parts)


def limit_text(v: LimitVerdict) -> str:
    """``max_ulps 37, not <= 8`` (and why, where a value does not say it)."""
    sense = "<=" if LIMITS[v["measure"]].ceiling else ">="
    shown = (lambda x: f"{x:.0f}") if v["measure"] == "max_ulps" else (lambda x: f"{x:.4g}")  # ulps: whole
    return f"{v['measure']} {shown(v['value'])}, not {sense} {shown(v['limit'])}" + (
        f" ({v['detail']})" if v["detail"] else "")


def limit_failure(a: Agreement, v: LimitVerdict) -> str:
    return f"{a.subject} vs {a.against}: {limit_text(v)}"


def short_hash(value: str | None) -> str:
    return MISSING if value is None else value[:HASH_DIGITS]


def failure_detail(p: ParityCheck) -> str:
    return f"{p.subject} vs {p.against}: {p.detail or 'differs'}"


# ---- the result rows as sheets ------------------------------------------------------------------------------------

RESULT_COLUMNS = (
    Column("variant", bare=True), Column("role", bare=True), Column("median", "µs", numeric=True),
    Column("p10-p90", "µs", numeric=True), Column("n", numeric=True), Column("rule"), Column("noise", numeric=True),
    Column("batch", "µs", numeric=True), Column("GB/s", numeric=True),
    Column("/ floor", numeric=True), Column("hash"), Column("= reference"), Column("= model"), Column("= pair"),
    Column("checks"), Column("detail"),
)


def samples_cell(m: Measurement | None) -> str:
    """How many samples were taken; – when not timed."""
    return MISSING if m is None else str(len(m.samples_us))


def rule_cell(stop: StopOutcome | None) -> str:
    """Whether the stopping rule was met (``NOT MET (timeout)``, ``NOT MET (sample cap)``); – for a count."""
    if stop is None:
        return MISSING
    return "met" if stop["met"] else f"NOT MET ({stop['reason']})"


def rule_not_met(m: Measurement | None, whose: str) -> str | None:
    """``whose stopping rule NOT MET (why)`` for a verdict's detail; None when it was met or ITERS was a count."""
    stop = m.stop if m is not None else None
    return None if stop is None or stop["met"] else f"{whose} stopping rule {rule_cell(stop)}"


def _result_cells(r: ResultRow) -> tuple[str, ...]:
    spread = r.spread_us
    stop = r.stop
    return (
        r.variant, r.role + (", dispatched" if r.dispatched else "") + ("" if r.exact else ", inexact"),
        time_cell(r.measurement),
        MISSING if spread is None else f"{spread[0]:.1f}-{spread[1]:.1f}", samples_cell(r.measurement),
        rule_cell(stop), MISSING if stop is None else f"{stop['noise_pct']:.2f}%", number_cell(r.batch_us, "{:.1f}"),
        number_cell(r.gbps, "{:.0f}" if (r.gbps or 0) >= 100 else "{:.3g}"), number_cell(r.floor_ratio, "{:.2f}x"), short_hash(r.shown_hash),
        *_compared_cells(r), r.verdict or MISSING,
        row_failures(r) or MISSING,
    )


def row_failures(r: ResultRow) -> str:
    """Why a row fails: its checks that differ, then the limits its measures broke ("" when none)."""
    return "; ".join([*(failure_detail(p) for p in r.failed), *(limit_failure(a, v) for a, v in r.broken_limits)])


def _compared_cells(r: ResultRow) -> tuple[str, str, str]:
    """Its ``= reference``, ``= model`` and ``= pair`` cells: bit for bit, or an inexact variant's measures."""
    pair, measured_pair = r.vs_pair, r.measured_pair
    if measured_pair is not None:
        pair_cell = f"{measured_pair.against}: {agreement_cell(measured_pair)}"
    else:
        pair_cell = MISSING if pair is None else f"{pair.against}: {check_cell(pair)}"
    if r.exact:
        return check_cell(r.vs_reference), check_cell(r.vs_model), pair_cell
    return agreement_cell(r.measured_reference), agreement_cell(r.measured_model), pair_cell


def without_empty_columns(sheet: Sheet, among: Sequence[Column] | None = None) -> Sheet:
    """The sheet less the columns (of ``among``; all when None) no row has a value in (a top-k has no read
    floor, a parity-only run no times, a run of ITERS counts no stopping rule)."""
    keep = [i for i, col in enumerate(sheet.columns)
            if (among is not None and col not in among) or any(row[i] != MISSING for row in sheet.rows)]
    return Sheet(sheet.title, tuple(sheet.columns[i] for i in keep), [tuple(row[i] for i in keep) for row in sheet.rows],
                 sheet.groups, sheet.group_header, sheet.notes)


# The CPU backend has no card: its dispatch is the engine's on sm_75, where the new kernels default
# (session.Session.dispatch).
CPU_DISPATCH_NOTE = f"dispatched: what the engine runs on sm_{NEW_KERNELS_CC} (the CPU backend has no card)"


def results_sheet(rows: Sequence[ResultRow], stage: str) -> Sheet:
    """One stage's rows: per case, every variant and reference point the run timed or checked."""
    per = "replay" if stage == WINDOW else "call"
    sheet = Sheet(f"{STAGE_TITLES[stage]}: every variant, median µs per {per}", RESULT_COLUMNS)
    for r in rows:
        sheet.add(*_result_cells(r), group=case_label(r.case))
    if any(r.throttled for r in rows):
        sheet.notes.append(THROTTLED_NOTE)
    return without_empty_columns(sheet)


SUMMARY_COLUMNS = (Column("case", bare=True), Column("before"), Column("before", "µs", numeric=True, bare=True),
                   Column("after"), Column("after", "µs", numeric=True, bare=True), Column("speedup", numeric=True))


def summary_sheet(rows: Sequence[ResultRow], stage: str) -> Sheet:
    """Per case, the run's baseline -> candidate (a window: their pairs) and the speedup."""
    sheet = Sheet(f"{STAGE_TITLES[stage]}: before / after, median µs", SUMMARY_COLUMNS)
    for ba in before_after(list(rows)):
        sheet.add(case_label(ba.case), ba.baseline.variant, time_cell(ba.baseline.measurement), ba.candidate.variant,
                  time_cell(ba.candidate.measurement), number_cell(ba.speedup, "{:.2f}x"))
    return sheet


def checks_prose(record: RunRecord, stage: str) -> Prose | None:
    """How a stage's checks went: every one held, or how many differ and the first."""
    checks = [p for p in record.parity if p.stage == stage]
    measured = [a for a in record.agreements if a.stage == stage]
    if not checks and not measured:
        return None
    failed = [p for p in checks if not p.equal]
    if not failed:
        text = f"{STAGE_TITLES[stage]}: the same bits in every check ({len(checks)} checks)"
    else:
        p = failed[0]
        text = (f"{STAGE_TITLES[stage]}: FAIL: {len(failed)} of {len(checks)} checks differ; the first: "
                f"{case_label(p.case)}: {failure_detail(p)}")
    return Prose(text + (f"; {_measured_text(measured)}" if measured else "") + ".")


def _measured_text(measured: list[Agreement]) -> str:
    """The inexact variants' rows of a stage: how many, and their limits (how many broken, and the first)."""
    variants = sorted({a.subject for a in measured})
    text = (f"{', '.join(variants)} {'is' if len(variants) == 1 else 'are'} inexact, measured (not checked bit for "
            f"bit) in {len(measured)} comparisons")
    judged = [(a, v) for a in measured for v in a.limits]
    broken = [(a, v) for a, v in judged if not v["passed"]]
    if broken:
        a, v = broken[0]
        return text + f"; FAIL: {len(broken)} of {len(judged)} limits broken; the first: {case_label(a.case)}: " \
            + limit_failure(a, v)
    return text + (f"; every limit holds ({len(judged)} limits)" if judged else "; no limits set")


THRESHOLD_FORMS = {"min_speedup": ("{:.2f}x", ">="), "max_floor_ratio": ("{:.2f}", "<=")}


def thresholds_sheet(record: RunRecord) -> Sheet:
    sheet = Sheet("Thresholds", (Column("stage", bare=True), Column("case", bare=True), Column("threshold", bare=True),
                                 Column("value", numeric=True), Column("limit", numeric=True), Column("result")))
    for t in record.thresholds:
        form, sense = THRESHOLD_FORMS[t.name]
        sheet.add(t.stage, case_label(t.case), t.name, form.format(t.value), f"{sense} {form.format(t.limit)}",
                  "holds" if t.passed else "BROKEN")
    return sheet


def sanitizer_sheet(record: RunRecord) -> Sheet:
    """``qsa sanitize``: every (variant, case, tool) with its reports, those explained, and the first."""
    sheet = Sheet("compute-sanitizer", (Column("variant", bare=True), Column("tool", bare=True), Column("errors", numeric=True),
                                        Column("explained", numeric=True), Column("result"), Column("first report")))
    for r in record.sanitizer:
        result = "clean" if r.errors == 0 else "explained" if r.passed else "FAIL"
        sheet.add(r.variant, r.tool, str(r.errors), str(r.explained), result, r.first_report or MISSING,
                  group=f"{r.stage} {case_label(r.case)}")
    return sheet


def selftest_sheet(record: RunRecord) -> Sheet:
    sheet = Sheet("qsa selftest", (Column("check", bare=True), Column("cases", numeric=True), Column("result"),
                                   Column("time", "s", numeric=True), Column("detail")))
    for c in record.checks:
        result = "PASS" if c.passed else "SKIP" if c.passed is None else "FAIL"
        sheet.add(c.check, str(c.cases), result, f"{c.seconds:.2f}", c.detail or MISSING)
    return sheet


# ---- clocks -------------------------------------------------------------------------------------------------------


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

    def seen(name: str, fmt: str, unit: str) -> str | None:
        return _span([r[name] for r in readings if r.get(name) is not None], fmt, unit)

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


# ---- a record's blocks ------------------------------------------------------------------------------------------


def card(record: RunRecord) -> str:
    if record.backend == "cpu":
        return "CPU backend (the exact models; times are the host's)"
    cc = str(record.device.get("compute_capability", "?")).replace(".", "")
    return f"{record.device.get('name', 'unknown GPU')} (sm_{cc})"


def header(record: RunRecord) -> Prose:
    """The card, the clocks, when, and the command, as one paragraph."""
    command = shlex.join(["qsa", *record.argv]) if record.argv else f"qsa {record.command}"
    when = record.created.replace("T", " ")
    incomplete = ", INCOMPLETE (interrupted)" if record.incomplete else ""
    return Prose(f"{card(record)}, {clocks_line(record)}, {when}, `{command}`{incomplete}",
                 f"**{card(record)}**, {clocks_line(record)}, {when}, `{command}`{incomplete}", phrased=True)


def blocks(record: RunRecord, with_header: bool = True) -> list[Block]:
    """Everything a record holds, as sheets and prose: per stage its rows, its before / after and how its
    checks went; then thresholds, sanitizer runs, selftest checks, and the record's notes."""
    out: list[Block] = [header(record)] if with_header else []
    rows = result_rows(record)
    for stage in STAGES:
        mine = [r for r in rows if r.stage == stage]
        if not mine:
            continue
        sheet = results_sheet(mine, stage)
        if record.backend == "cpu" and any(r.dispatched for r in mine):
            sheet.notes.append(CPU_DISPATCH_NOTE)
        out.append(sheet)
        summary = summary_sheet(mine, stage)
        out += [summary] if summary.rows else []
        prose = checks_prose(record, stage)
        out += [prose] if prose is not None else []
    out += [thresholds_sheet(record)] if record.thresholds else []
    out += [sanitizer_sheet(record)] if record.sanitizer else []
    out += [selftest_sheet(record)] if record.checks else []
    out += [Prose(f"{note}.") for note in record.notes]
    return out


# ---- CSV ----------------------------------------------------------------------------------------------------------

# an inexact row's measures against the reference (else the CPU model): ScoreErrors', then SelectionAgreement's
MEASURE_CSV = ("differing", "mismatched", "max_abs_error", "max_rel_error", "max_ulps", "min_id_fraction",
               "mean_id_fraction", "identical_queries")
RESULT_CSV = ("stage", "ctx", "nq", "capacity", "kind", "score_set", "keys", "l2", "variant", "role", "dispatched",
              "median_us", "p10_us", "p90_us", "samples", "rule_met", "noise_pct", "batch_us", "throttled", "gbps",
              "floor_ratio", "hash",
              "vs_reference", "vs_model", "pair", "vs_pair", "checks", "bad_samples", "detail",
              "exact", *MEASURE_CSV, "limits")


def _equal(p: ParityCheck | None) -> bool | None:
    return None if p is None else p.equal


def _measure_values(r: ResultRow) -> list[object]:
    """The row's MEASURE_CSV values (None where it has none), then its limits: passed, broken, or None (none set)."""
    a = r.measured
    measures: dict[str, object] = {**((a.scores or {}) if a else {}), **((a.selection or {}) if a else {})}
    judged = any(a.limits for a in r.agreements)
    return [*(measures.get(k) for k in MEASURE_CSV), ("broken" if r.broken_limits else "passed") if judged else None]


def result_csv(records: Sequence[tuple[str | None, RunRecord]]) -> str:
    """One line per (stage, case, variant) of each record, numbers whole; a ``file`` column first when
    the records are several (``qsa report A B``)."""
    with_file = len(records) > 1
    lines = []
    for name, record in records:
        for r in result_rows(record):
            spread = r.spread_us or (None, None)
            pair = r.vs_pair
            stop = r.stop or {}
            lines.append([*([name] if with_file else []), r.stage, *(r.case.get(k) for k in RESULT_CSV[1:8]), r.variant,
                          r.role, r.dispatched, r.median_us, *spread, r.samples, stop.get("met"), stop.get("noise_pct"),
                          r.batch_us, r.throttled, r.gbps, r.floor_ratio,
                          r.shown_hash, _equal(r.vs_reference), _equal(r.vs_model), pair.against if pair else None,
                          _equal(pair), r.verdict, r.problem, row_failures(r) or None,
                          r.exact, *_measure_values(r)])
    return csv_text([*(["file"] if with_file else []), *RESULT_CSV], lines)


def checks_csv(record: RunRecord) -> str:
    return csv_text(("check", "cases", "passed", "seconds", "detail"),
                    [(c.check, c.cases, c.passed, c.seconds, c.detail) for c in record.checks])


def sanitizer_csv(record: RunRecord) -> str:
    return csv_text(("stage", "case", "variant", "tool", "errors", "explained", "passed", "first_report", "seconds"),
                    [(r.stage, r.key, r.variant, r.tool, r.errors, r.explained, r.passed, r.first_report, r.seconds)
                     for r in record.sanitizer])


# ---- the verdict ---------------------------------------------------------------------------------------------------


def numbered(prefix: str, failures: Sequence[str]) -> list[str]:
    """One line per failure, ``PREFIX i/n: what``: the last lines of a failed command, each whole."""
    return [f"{prefix} {i}/{len(failures)}: {why}" for i, why in enumerate(failures, 1)]


def _failures(record: RunRecord) -> tuple[list[str], list[str]]:
    """(the counts, one line per failure) of everything in the record that fails. A selftest's verdict is
    its checks' (each names the first of its parity rows that differs)."""
    if record.checks:
        failed = [c for c in record.checks if c.passed is False]
        return ([f"{len(failed)} of {len(record.checks)} checks"] if failed else []), [f"{c.check}: {c.detail}" for c in failed]
    differ = [p for p in record.parity if not p.equal]
    over = [(a, v) for a in record.agreements for v in a.limits if not v["passed"]]
    broken = [t for t in record.thresholds if not t.passed]
    unexplained = [r for r in record.sanitizer if not r.passed]
    counts = ([f"{len(differ)} checks differ"] if differ else []) + (
        [f"{len(over)} limits broken"] if over else []) + (
        [f"{len(broken)} of {len(record.thresholds)} thresholds broken"] if broken else []) + (
        [f"{len(unexplained)} of {len(record.sanitizer)} runs with unexplained errors"] if unexplained else [])
    lines = [f"{p.key}: {failure_detail(p)}" for p in differ]
    lines += [f"{a.key}: {limit_failure(a, v)}" for a, v in over]
    for t in broken:
        form, sense = THRESHOLD_FORMS[t.name]
        lines.append(f"{t.key}: {t.name} {form.format(t.value)}, not {sense} {form.format(t.limit)}")
    lines += [f"{r.key} {r.variant} {r.tool}: {r.errors} errors, {r.explained} explained: {r.first_report}"
              for r in unexplained]
    return counts, lines


def verdict_lines(record: RunRecord) -> list[str]:
    """``PASS`` (with the known hazards a sanitize run explained), or ``FAIL (counts)`` then one line per
    failure."""
    counts, lines = _failures(record)
    if not counts:
        explained = sum(r.explained for r in record.sanitizer)
        return ["PASS" + (f" ({explained} known hazard(s) explained)" if explained else "")]
    return [f"FAIL ({', '.join(counts)})", *numbered("FAIL", lines)]
