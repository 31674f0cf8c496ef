"""Every command's output, rendered from real records (the shipped H200 runs in docs/results, the older schema
versions' in tests/data/records, and runs on the CPU backend made here) at 60, 80, 120 and 250 columns and piped
(rich's 80): no median, hash, verdict or name is ever split or cut, and no line is wider than the width unless it
is one word longer than it."""

from __future__ import annotations

import contextlib
import functools
import io
import re
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_results import SHIPPED
from record_factory import stop_outcome
from rich.cells import cell_len

from qsa_cli.catalog import qsa_catalog
from qsa_cli.cli import main
from qsa_cli.output import compare, gate, printed
from qsa_cli.output.layout import MISSING, Sheet
from qsa_cli.output.rows import result_rows
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import InfoReport, RunRecord
from qsa_cli.runs.info import ARCHITECTURES, architectures, catalog_entries

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
WIDTHS = (60, 80, 120, 250, None)  # None: piped, no COLUMNS (rich's 80)
TINY_SWEEP = ("iterations: 2\nwarmup: 0\nstages: [scores, topk]\ncontexts: [4099]\nqueries: [1, 2]\ncapacity: 8192\n"
              "score_sets: [continuous, adversarial]\nkeys: [synthetic, adversarial]\n")
BORDERS = "│┃"


def _run(*argv: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(list(argv))
        except SystemExit as ended:
            return int(ended.code or 0)
    raise AssertionError("main() did not exit")


@pytest.fixture(scope="module")
def cpu_records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunRecord]:
    """Records the commands write on the CPU backend: a scorer call (ITERS auto), a top-k call, a sweep, a
    selftest."""
    folder = tmp_path_factory.mktemp("records")
    (folder / "sweep.yaml").write_text(TINY_SWEEP)
    runs = {"select-bench": ("select-bench", "9003", "5", "auto", "16384", "--keys", "adversarial", "--min-samples", "10",
                             "--max-noise", "100"),  # the stopping rule's columns
            "topk-parity": ("topk-parity", "9001", "3", "3", "20000", "0"),
            "sweep": ("sweep", str(folder / "sweep.yaml")),
            "selftest": ("selftest",)}
    out = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("qsa_cli.runs.selftest.SELFTEST_SCORER_CASES", ((4099, 2, 8192),))
        patch.setattr("qsa_cli.runs.selftest.SELFTEST_TOPK_CASES", ((4099, 8192),))
        for name, argv in runs.items():
            path = folder / f"{name}.json"
            backend = () if name == "selftest" else ("--backend", "cpu")
            assert _run(*argv, *backend, "--json", str(path)) == 0, name
            out[name] = load_record(path)
    return out


def _name(path: Path) -> str:
    """A shipped record's name: under docs/results, its path there; else its path in the repository."""
    return str(path.relative_to(RESULTS if path.is_relative_to(RESULTS) else ROOT))


@functools.cache
def _loaded() -> tuple[tuple[str, RunRecord], ...]:
    return tuple((_name(p), load_record(p)) for p in SHIPPED)


def _shipped(command: str) -> list[tuple[str, RunRecord]]:
    return [(name, r) for name, r in _loaded() if r.command.split()[0] == command]


ARCHITECTURES_SHOWN = [f"sm_{cc}" for cc in ARCHITECTURES]


def _info(record: RunRecord) -> InfoReport:
    """What ``qsa info`` shows, from a record's device and dispatch (an H200 run's); the one kernel entry is
    this test's own (no record keeps kernel resources)."""
    dispatch = record.settings["dispatch"]
    return InfoReport(record.device, None, [{"name": "block_scores_halve_kernel<4>", "registers": 40, "shared_bytes": 0,
                                             "local_bytes": 0, "max_threads": 1024}],
                      {dispatch["kind"]: dispatch}, ["cluster top-k: capacities up to 1048576 cells fit 232448 B"])


Output = tuple[str, Any, list[str]]  # what, its Printed, the words it must show whole


def outputs(cpu: dict[str, RunRecord]) -> Iterator[Output]:
    """(what, its Printed, the words it must show whole): every command, from every real record of it."""
    for command in ("select-bench", "topk-parity", "window-bench", "sweep"):
        for name, r in [*_shipped(command), *([(f"cpu {command}", cpu[command])] if command in cpu else [])]:
            yield f"{command} {name}", printed.of_record(r), record_words(r)
    for name, r in [*_shipped("compare"), *[(f"{name} by the rule", by_the_rule(r)) for name, r in _shipped("compare")[:1]]]:
        result = compare.judge(r)
        yield f"compare {name}", printed.of_compare(result, r), record_words(r) + compare_words(result)
    ci, ci_2, slowed = (dict(_loaded())[f"h200-2026-11-30/{f}"] for f in ("ci.json", "ci-2.json", "ci-slowed.json"))
    sweep = cpu["sweep"]
    slower = RunRecord.from_dict(sweep.to_dict())
    for m in slower.measurements:
        m.samples_us = [s * 3 for s in m.samples_us]
    auto = cpu["select-bench"]
    for name, (run, base) in {"ci-2 vs ci": (ci_2, ci), "ci vs ci-slowed": (ci, slowed),
                              "cpu sweep vs a faster baseline": (slower, sweep),
                              "cpu select-bench (ITERS auto) vs itself": (by_the_rule(auto), auto),
                              "ci by the rule vs ci-slowed": (by_the_rule(ci), slowed)}.items():
        result = gate.compare(run, base, force=True)
        yield f"gate {name}", printed.of_gate(result, run, base), gate_words(result)
    for name, r in [*_shipped("selftest"), ("cpu selftest", cpu["selftest"])]:
        yield f"selftest {name}", printed.of_selftest(r), record_words(r) + [w for c in r.checks for w in c.check.split()]
    for name, r in _shipped("sanitize"):
        words = [w for s in r.sanitizer for w in (s.variant, s.tool, str(s.errors), *s.first_report.split())]
        yield f"sanitize {name}", printed.of_sanitize(r), words
    h200 = dict(_loaded())["h200-2026-12-01/engine-real/real-topk-524288-8.json"]
    info = _info(h200)
    yield "info", printed.of_info(info), [*info.device["name"].split(), info.device["compute_capability"],
                                          *(d[k] for d in info.dispatch.values() for k in ("scores", "topk"))]
    catalog = qsa_catalog()
    bare = InfoReport({}, None, [], {}, [], no_device="CuPy is not installed (cupy); install qsa[cuda12] or qsa[cuda13]",
                      catalog=catalog_entries(catalog), architectures=architectures(catalog, {}),
                      switches={"STRATA_TOPK_SPLIT": "1"})
    yield "info without a device", printed.of_info(bare), [*(v.name for v in catalog.variants), *ARCHITECTURES_SHOWN,
                                                           "STRATA_TOPK_SPLIT=1."]
    several = [(name, r, compare.judge(r) if "compare" in r.settings else None)
               for name, r in [*_shipped("compare")[:1], *_shipped("select-bench")[:2], *_shipped("window-bench")[:1]]]
    yield "report", printed.of_saved(several), [w for _, r, _ in several for w in record_words(r)]


@pytest.fixture(scope="module")
def every_output(cpu_records: dict[str, RunRecord]) -> list[Output]:
    """outputs(), made once: each width renders the same outputs."""
    return list(outputs(cpu_records))


def by_the_rule(record: RunRecord) -> RunRecord:
    """The record as if every measurement had been taken by the stopping rule, every other one's rule not met."""
    out = RunRecord.from_dict(record.to_dict())
    for i, m in enumerate(out.measurements):
        m.stop = stop_outcome("met" if i % 2 else "sample cap" if i % 4 else "timeout", noise_pct=1.5 + i)
    return out


def _median_word(samples: list[float], throttled: bool) -> str:
    finite = samples and all(x == x and abs(x) != float("inf") for x in samples)
    if not finite or statistics.median(samples) <= 0:
        return "BAD"
    return f"{statistics.median(samples):.1f}" + ("*" if throttled else "")


def record_words(r: RunRecord) -> list[str]:
    """What a record's tables must show, read from its JSON form: every median, every variant's hash in 12
    digits (the one its checks compared, else its whole output's), every variant's name, and every check's
    verdict."""
    data = r.to_dict()
    words = [_median_word(m["samples_us"], m["throttled"]) for m in data["measurements"]]
    words += [m["variant"] for m in data["measurements"]]
    compared = {name: h for p in data["parity"] for name, h in p["hashes"].items() if name not in ("inputs", "output")}
    for p in data["parity"]:
        if p["against"] == "inputs" and "output" in p["hashes"]:
            words.append(compared.get(p["subject"], p["hashes"]["output"])[:12])
        words += [h[:12] for name, h in p["hashes"].items() if name == p["subject"]]
        words.append("PASS" if p["equal"] else "FAIL")
    return words


def compare_words(result: compare.CompareResult) -> list[str]:
    return [w for row in result.rows for w in (row.pair, row.verdict, *(str(len(m.samples_us))
                                                                        for m in (row.base, row.candidate) if m))]


def gate_words(result: gate.GateResult) -> list[str]:
    words = []
    for row in result.rows:
        words += [row.variant, row.verdict, *row.key.split(), *(str(len(m.samples_us)) for m in row.measured if m)]
        words += [f"{v:.1f}" for v, bad in ((row.baseline_us, row.baseline_bad), (row.median_us, row.run_bad))
                  if v is not None and not bad]
    return words


def _rendered(out: Any, width: int | None, monkeypatch: pytest.MonkeyPatch) -> str:
    if width is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(width))
    stream = io.StringIO()
    out.write("table", stream)  # what the finish path prints: the console takes its width from COLUMNS
    return stream.getvalue()


def _tokens(lines: list[str]) -> set[str]:
    """Every token the lines show whole: what lies between spaces and table borders."""
    return set(re.split(rf"[\s{BORDERS}]+", "\n".join(lines)))


def _cell_words(out: Any) -> list[str]:
    return [w for block in out.blocks() if isinstance(block, Sheet) for cells in block.rows for cell in cells
            for w in cell.split(" ") if w and cell != MISSING]  # a folded row leaves out what is missing


@pytest.mark.parametrize("width", WIDTHS, ids=lambda w: "piped" if w is None else f"COLUMNS={w}")
def test_no_number_hash_verdict_or_name_is_split_or_cut(width: int | None, every_output: list[Output],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    limit = width or 80
    seen = set()
    for what, out, words in every_output:
        seen.add(what.split()[0])
        lines = _rendered(out, width, monkeypatch).splitlines()
        shown = _tokens(lines)
        broken = [word for word in dict.fromkeys([*words, *_cell_words(out)]) if word not in shown]
        assert not broken, f"{what} at {width}: {broken[:5]} not whole"
        for line in lines:
            assert cell_len(line) <= limit or " " not in line.strip(), f"{what} at {width}: {line!r}"
    assert seen == {"select-bench", "topk-parity", "window-bench", "sweep", "compare", "gate", "selftest", "sanitize",
                    "info", "report"}


def test_every_shipped_record_is_rendered(every_output: list[Output]) -> None:
    rendered = {what.split(" ", 1)[1] for what, _, _ in every_output if what.split()[0] not in ("report", "info")}
    shipped = {_name(p) for p in SHIPPED}
    assert shipped - rendered == {_name(p) for p in SHIPPED
                                  if load_record(p).command.split()[0] in ("gate", "topk-parity --selftest")}


def test_a_wide_console_draws_tables_and_a_narrow_one_folds(cpu_records: dict[str, RunRecord],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    out = printed.of_record(cpu_records["select-bench"])
    assert "┃ case" in _rendered(out, 250, monkeypatch)
    narrow = _rendered(out, 60, monkeypatch)
    assert "┃" not in narrow and "  multi  baseline  median " in narrow
    rows = result_rows(cpu_records["select-bench"])
    assert all(f"hash {r.shown_hash[:12]}" in narrow for r in rows)


@pytest.mark.parametrize("width", (60, 80, 250))
def test_the_cli_prints_at_the_width_and_ends_with_whole_verdict_lines(capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    ci, slowed = RESULTS / "h200-2026-11-30" / "ci.json", RESULTS / "h200-2026-11-30" / "ci-slowed.json"
    monkeypatch.setenv("COLUMNS", str(width))
    with pytest.raises(SystemExit) as ended:
        main(["gate", "--baseline", str(slowed), "--results", str(ci), "-v"])  # every row: the table
    out = capsys.readouterr().out.splitlines()
    result = gate.compare(load_record(ci), load_record(slowed))
    assert ended.value.code == 1 and out[-len(gate.gate_verdict(result)):] == gate.gate_verdict(result)
    body = out[:-len(gate.gate_verdict(result))]
    assert all(cell_len(line) <= width or " " not in line.strip() for line in body)
    assert set(gate_words(result)) <= _tokens(body)
