"""--format table|markdown|csv|json on every command that prints results, --json - (the record on stdout),
a reader that closes the pipe early, and the progress lines of a run in a log."""

from __future__ import annotations

import contextlib
import csv
import importlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from record_factory import seed_record

from qsa_cli.cli import main
from qsa_cli.output.progress import QUIET_FOR_S, PlainProgress, progress_on
from qsa_cli.record.load import load_record
from qsa_cli.runs import selftest as selftest_runs

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
SMALL = ("select-bench", "4099", "2", "2", "8192", "--backend", "cpu")
TINY_SWEEP = "iterations: 2\nwarmup: 0\nstages: [scores]\ncontexts: [4099]\nqueries: [1, 2, 3]\ncapacity: 8192\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(ended.value.code or 0), out, err


def test_csv_is_a_line_per_stage_case_and_variant(capsys, tmp_path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, *SMALL, "--format", "csv", "--json", str(js))
    assert code == 0 and err.rstrip().splitlines()[-1] == "PASS"  # the verdict: on stderr, beside CSV
    lines = list(csv.DictReader(io.StringIO(out)))
    record = load_record(js)
    assert [(x["stage"], x["variant"]) for x in lines] == [("scores", m.variant) for m in record.measurements]
    assert [float(x["median_us"]) for x in lines] == [m.median_us for m in record.measurements]
    compared = {name: h for c in record.parity for name, h in c.hashes.items() if name not in ("inputs", "output")}
    assert all(x["checks"] == "PASS" and x["hash"] == compared[x["variant"]] for x in lines)  # the scores' hash


def test_json_is_the_record_itself(capsys, tmp_path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, *SMALL, "--format", "json", "--json", str(js))
    assert code == 0 and json.loads(out) == json.loads(js.read_text()) and err.rstrip().endswith("PASS")


def test_json_dash_writes_the_record_to_stdout_and_everything_else_to_stderr(capsys) -> None:
    code, out, err = run(capsys, *SMALL, "--json", "-")
    record = json.loads(out)
    assert code == 0 and record["schema"] == "qsa.run" and record["command"] == "select-bench"
    assert "Scorer: every variant" in err and err.rstrip().splitlines()[-1] == "PASS"
    assert not Path("-").exists()
    code, out, err = run(capsys, *SMALL, "--json", "-", "--format", "json")
    assert code == 0 and json.loads(out)["command"] == "select-bench" and err.strip() == "PASS"  # the record once


@pytest.mark.parametrize("fmt", ["markdown", "--markdown"])
def test_markdown_and_its_alias(capsys, fmt: str) -> None:
    code, out, _ = run(capsys, *SMALL, *(["--format", fmt] if fmt == "markdown" else [fmt]))
    assert code == 0 and "| case | variant | role | median µs | p10-p90 µs |" in out and out.rstrip().endswith("PASS")
    assert "┃" not in out


def test_gate_selftest_info_and_sanitize_have_every_format(capsys, tmp_path) -> None:
    ci, ci_2 = RESULTS / "h200-2026-11-30" / "ci.json", RESULTS / "h200-2026-11-30" / "ci-2.json"
    code, out, _ = run(capsys, "gate", "--baseline", str(ci), "--results", str(ci_2), "--format", "markdown")
    assert code == 0 and "### Gate: PASS against the baseline" in out and "| case | variant | baseline µs | baseline n | median µs | n |" in out
    code, out, err = run(capsys, "gate", "--baseline", str(ci), "--results", str(ci_2), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and {r["verdict"] for r in rows} >= {"SAME"} and err.startswith("GATE PASS")
    code, out, _ = run(capsys, "gate", "--baseline", str(ci), "--results", str(ci_2), "--format", "json")
    assert json.loads(out) == load_record(ci_2).to_dict()  # the run gated: the record itself
    code, out, _ = run(capsys, "report", "--format", "json", str(ci), str(ci_2))
    assert [r["created"] for r in json.loads(out)] == [load_record(p).created for p in (ci, ci_2)]


def test_selftest_records_its_checks_and_prints_them_in_every_format(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("qsa_cli.runs.selftest.SELFTEST_SCORER_CASES", ((4099, 2, 8192),))
    monkeypatch.setattr("qsa_cli.runs.selftest.SELFTEST_TOPK_CASES", ((4099, 8192),))
    js = tmp_path / "s.json"
    code, out, _ = run(capsys, "selftest", "--format", "markdown", "--json", str(js))
    checks = load_record(js).checks
    assert code == 0 and [c.passed for c in checks] == [True, True, True, None] and checks[-1].check == "GPU checks"
    assert "### qsa selftest" in out and "| GPU checks | 0 | SKIP |" in out
    code, out, _ = run(capsys, "selftest", "--format", "csv")
    assert [r["check"] for r in csv.DictReader(io.StringIO(out))] == [c.check for c in checks]
    code, out, _ = run(capsys, "report", str(js))
    assert code == 0 and "GPU checks" in out


def test_a_format_is_checked_before_anything_runs(capsys) -> None:
    code, out, err = run(capsys, *SMALL, "--format", "xml")
    assert code == 2 and out == "" and "--format" in err and err.count("\n") == 1


def _piped(argv: list[str], cwd: Path, close_at_once: bool) -> tuple[int, str]:
    """``qsa ARGV | head -1`` (or a reader that closes before anything is written): the exit status and stderr."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "qsa_cli", *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if not close_at_once:
        proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    return proc.wait(timeout=600), err


@pytest.mark.parametrize("close_at_once", [True, False], ids=["closed-at-once", "head-1"])
def test_a_closed_pipe_loses_nothing(tmp_path: Path, close_at_once: bool) -> None:
    (tmp_path / "sweep.yaml").write_text(TINY_SWEEP)
    code, err = _piped(["sweep", "sweep.yaml", "--backend", "cpu", "--json", "run.json"], tmp_path, close_at_once)
    assert code == 0 and "Traceback" not in err and "Error" not in err, err
    assert load_record(tmp_path / "run.json").measurements  # the record was written before the printing
    slowed = seed_record(scale=1.3)
    slowed.write(tmp_path / "slower.json")
    seed_record().write(tmp_path / "base.json")
    code, err = _piped(["gate", "--baseline", "base.json", "--results", "slower.json"], tmp_path, close_at_once)
    assert code == 1 and "Traceback" not in err and "Error" not in err, err  # the verdict is the exit status


def test_a_reader_that_closes_mid_report_ends_it_quietly(tmp_path: Path) -> None:
    """Enough output to fill the pipe after the reader has gone: the writes that fail are the ones stopped."""
    records = [str(RESULTS / "h200-2026-11-30" / "topk-524288-8.json")] * 40
    res = subprocess.run([sys.executable, "-m", "qsa_cli", "report", *records], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"PYTHONPATH": str(ROOT)})
    assert res.returncode == 0 and len(res.stdout.encode()) > 65536  # more than a Linux pipe holds
    code, err = _piped(["report", *records], tmp_path, close_at_once=False)
    assert code == 0 and err == ""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_progress_lines_after_the_first_seconds() -> None:
    stream, clock = io.StringIO(), Clock()
    progress = PlainProgress(stream, clock)
    progress(0, 4, "scores ctx=4099 q=1")
    clock.now += QUIET_FOR_S - 0.5
    progress(1, 4, "scores ctx=4099 q=2")
    assert stream.getvalue() == ""  # a run this short shows no progress
    clock.now += 10.5
    progress(2, 4, "scores ctx=4099 q=3")
    clock.now += 12
    progress(3, 4, "topk ctx=4099 q=1")
    clock.now += 6
    progress(4, 4, "done")
    assert stream.getvalue().splitlines() == ["[3/4] scores ctx=4099 q=3, elapsed 12 s, about 12 s left",
                                              "[4/4] topk ctx=4099 q=1, elapsed 24 s, about 8 s left",
                                              "[4/4] done, elapsed 30 s"]


def test_a_runner_that_counts_no_steps_still_shows_progress() -> None:
    stream, clock = io.StringIO(), Clock()
    clock.now += 0
    progress = PlainProgress(stream, clock)
    clock.now += 5
    progress(0, 0, "top-k decode ctx=9000 cap=9000")
    progress(1, 0, "top-k split in a CUDA graph")
    assert stream.getvalue().splitlines() == ["[1] top-k decode ctx=9000 cap=9000, elapsed 5 s",
                                              "[2] top-k split in a CUDA graph, elapsed 5 s"]


def test_quiet_is_silent_and_a_log_gets_plain_lines() -> None:
    log = io.StringIO()
    with progress_on(True, log) as progress:
        progress(1, 2, "anything")
    with progress_on(False, log) as progress:
        assert isinstance(progress, PlainProgress)  # a StringIO is no terminal
    assert log.getvalue() == ""


def test_a_sweep_longer_than_a_couple_of_seconds_reports_its_cases(capsys, tmp_path, monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr("qsa_cli.output.progress.time.monotonic", clock)
    real = PlainProgress.__call__

    def later(self, done, total, message):  # every step a minute after the last
        clock.now += 60
        real(self, done, total, message)

    monkeypatch.setattr(PlainProgress, "__call__", later)
    (tmp_path / "sweep.yaml").write_text(TINY_SWEEP)
    code, out, err = run(capsys, "sweep", str(tmp_path / "sweep.yaml"), "--backend", "cpu")
    assert code == 0 and err.splitlines() == ["[1/3] scores ctx=4099 q=1 cap=8192 decode, elapsed 60 s",
                                              "[2/3] scores ctx=4099 q=2 cap=8192 decode, elapsed 120 s, about 240 s left",
                                              "[3/3] scores ctx=4099 q=3 cap=8192 decode, elapsed 180 s, about 90 s left",
                                              "[3/3] done, elapsed 240 s"]
    assert "elapsed" not in out
    code, out, err = run(capsys, "sweep", str(tmp_path / "sweep.yaml"), "--backend", "cpu", "--quiet")
    assert code == 0 and err == ""


@pytest.mark.parametrize("command, argv", [
    ("select_bench", SMALL),
    ("topk_parity", ("topk-parity", "4099", "2", "2", "8192", "0", "--backend", "cpu")),
    ("selftest", ("selftest",)),
])
def test_every_measuring_command_reports_its_progress(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch, command: str,
                                                      argv: tuple[str, ...]) -> None:
    """select-bench, topk-parity and selftest hand the runner a progress callback, which it calls up to
    done == total (window-bench's is the same line, but it needs a GPU)."""
    calls: list[tuple[int, int, str]] = []

    @contextlib.contextmanager
    def recorder(quiet: bool, stream: object = None):  # type: ignore[no-untyped-def]
        assert not quiet
        yield lambda done, total, message: calls.append((done, total, message))

    monkeypatch.setattr(importlib.import_module(f"qsa_cli.commands.{command}"), "progress_on", recorder)
    if command == "selftest":  # the wiring, not the matrix (README's sample runs it whole): a case of each stage
        for cases in ("_scorer_calls", "_topk_calls"):
            whole = getattr(selftest_runs, cases)
            monkeypatch.setattr(selftest_runs, cases, lambda whole=whole: whole()[:1])
    code, _, _ = run(capsys, *argv)
    assert code == 0 and calls, calls
    assert calls[-1][0] == calls[-1][1] and all(0 <= d <= t for d, t, _ in calls)
