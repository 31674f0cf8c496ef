"""qsa gate --confirm: a SLOW row's case measured again before the gate fails, on the CPU backend. The CPU's
times are never judged, so each test judges them (output/gate.py's ``times_judged``) and slows one row in the
baseline's favour: the run's row is SLOW, and the rerun (the real one, or one made to agree with the baseline)
decides. The re-measuring itself runs the same code on the GPU."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from qsa_cli import session
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import Measurement, RunRecord
from qsa_cli.runs import sweep

SWEEP = """iterations: 5
seed: 0
capacity: 16K
matrix:
  - stages: [scores]
    contexts: [3001]
    queries: [2]
  - stages: [topk]
    contexts: [3001]
    queries: [2]
    score_sets: [continuous, equal]
"""
FLAGGED = "topk ctx=3001 nq=2 capacity=16384 kind=decode score_set=equal l2=host"  # the row made SLOW
VARIANT = "split"
FASTER = 0.01  # the baseline's row this much of the run's: SLOW whatever the host's noise
SLOWER = 100.0  # every other row of the baseline: never SLOW, however loaded the host that runs the test


def cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    from qsa_cli.cli import main

    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    out, err = capsys.readouterr()
    return ended.value.code, out, err


@pytest.fixture
def runs(capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A small sweep on the CPU backend as the baseline, its FLAGGED row's samples made FASTER and every other
    row's SLOWER (so that no other row is SLOW by the host's noise); the gate's own run on the CPU backend too,
    its times judged."""
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    config, base = tmp_path / "small.yaml", tmp_path / "base.json"
    config.write_text(SWEEP)
    code, out, err = cli(capsys, "sweep", str(config), "--backend", "cpu", "--quiet", "--json", str(base))
    assert code == 0, out + err
    data = json.loads(base.read_text())
    flagged = [m for m in data["measurements"] if m["variant"] == VARIANT and
               load_record(base).measurements[data["measurements"].index(m)].key == FLAGGED]
    assert len(flagged) == 1
    for m in data["measurements"]:
        m["samples_us"] = [s * (FASTER if m is flagged[0] else SLOWER) for s in m["samples_us"]]
    base.write_text(json.dumps(data))
    monkeypatch.setattr(session, "Settings", functools.partial(session.Settings, backend="cpu"))
    monkeypatch.setattr("qsa_cli.output.gate.times_judged", lambda backend: True)
    return {"config": config, "base": base, "run": tmp_path / "run.json"}


def gate(capsys: Any, runs: dict[str, Path], *more: str) -> tuple[int, str, str]:
    return cli(capsys, "gate", "--baseline", str(runs["base"]), "--config", str(runs["config"]), "--quiet",
               "--json", str(runs["run"]), *more)


def rows_of(out: str, verdict: str) -> list[str]:
    return [line for line in out.splitlines() if f"{verdict}: " in line]


def test_a_slow_row_measured_again_and_slow_again_fails(capsys: Any, runs: dict[str, Path]) -> None:
    code, out, err = gate(capsys, runs)
    assert code == 1, out + err
    assert "1 case(s) hold a SLOW row: measuring them again (round 1 of 1)" in err
    failing = rows_of(out, "SLOW")
    assert len(failing) == 1 and FLAGGED in failing[0] and "confirmed: measured again (round 1)" in failing[0]
    record = load_record(runs["run"])
    [round_] = record.confirmations
    assert round_.round == 1 and {m.key for m in round_.measurements} == {FLAGGED}  # only the flagged case
    assert {m.variant for m in round_.measurements} == {m.variant for m in record.measurements if m.key == FLAGGED}
    assert len(record.measurements) == len(load_record(runs["base"]).measurements)  # the sweep's, as they were
    assert record.passed  # the rerun's checks passed and were not added again


def test_each_round_measures_again_what_is_still_slow(capsys: Any, runs: dict[str, Path]) -> None:
    code, out, err = gate(capsys, runs, "--confirm", "3")
    assert code == 1, out + err
    assert [c.round for c in load_record(runs["run"]).confirmations] == [1, 2, 3]
    assert "round 3): " in rows_of(out, "SLOW")[0]


def test_confirm_0_fails_at_once(capsys: Any, runs: dict[str, Path]) -> None:
    code, out, err = gate(capsys, runs, "--confirm", "0")
    assert code == 1 and "measuring them again" not in err
    assert load_record(runs["run"]).confirmations == []
    assert "measured again" not in rows_of(out, "SLOW")[0]


def agreeing(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """The gate's rerun made to agree with the baseline (the first run's SLOW a runner's hiccup); the keys each
    call was asked for."""
    asked: list[set[str]] = []

    def remeasured(s: Any, config: Any, keys: set[str], progress: Any) -> list[Measurement]:
        asked.append(set(keys))
        again = sweep.remeasure(s, config, keys, progress)
        for m in again:
            if m.key == FLAGGED and m.variant == VARIANT:  # a hundred times below the baseline's FASTER row:
                m.samples_us = [x * FASTER * FASTER for x in m.samples_us]  # not SLOW, however loaded the host
        return again

    monkeypatch.setattr("qsa_cli.commands.gate.remeasure", remeasured)
    return asked


def test_a_slow_row_not_slow_again_is_unconfirmed_and_passes_with_a_warning(
        capsys: Any, runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    asked = agreeing(monkeypatch)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    junit = tmp_path / "gate.xml"
    code, out, err = gate(capsys, runs, "--confirm", "3", "--junit", str(junit))
    assert code == 0, out + err
    assert asked == [{FLAGGED}]  # one round: the row was not SLOW in it
    assert "GATE PASS (" in out and "1 UNCONFIRMED" in out, out
    warnings = [line for line in out.splitlines() if line.startswith("::warning ") and "UNCONFIRMED" in line]
    assert len(warnings) == 1 and VARIANT in warnings[0]
    assert not any(line.startswith("::error") for line in out.splitlines())
    assert "UNCONFIRMED" in junit.read_text()
    record = load_record(runs["run"])
    assert [c.round for c in record.confirmations] == [1]
    # both measurements stay in the record: the sweep's (slow) and the round's
    first = next(m for m in record.measurements if m.key == FLAGGED and m.variant == VARIANT)
    again = next(m for m in record.confirmations[0].measurements if m.key == FLAGGED and m.variant == VARIANT)
    assert again.median_us < first.median_us
    # the saved run, judged later, reads its own rounds: the same verdict
    code, later, err = cli(capsys, "gate", "--baseline", str(runs["base"]), "--results", str(runs["run"]), "-v")
    assert code == 0, later + err
    assert "UNCONFIRMED" in later and "measured again (round 1)" in later


def test_a_saved_run_is_not_measured_again(capsys: Any, runs: dict[str, Path]) -> None:
    code, out, err = cli(capsys, "sweep", str(runs["config"]), "--backend", "cpu", "--quiet", "--json",
                         str(runs["run"]))
    assert code == 0, out + err
    code, out, err = cli(capsys, "gate", "--baseline", str(runs["base"]), "--results", str(runs["run"]), "-v")
    assert code == 1
    assert "a saved run is not measured again" in " ".join(out.split())
    code, out, err = cli(capsys, "gate", "--baseline", str(runs["base"]), "--results", str(runs["run"]),
                         "--confirm", "2")
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1].endswith("--confirm measures again in the run the gate makes; with --results "
                                                 "it makes none")


def test_the_sweeps_cases_are_named_as_the_record_names_them(capsys: Any, runs: dict[str, Path]) -> None:
    """remeasure finds a case by its record key: every case of the sweep, the shipped CI sweep's too (its top-k
    prompt case, its score sets), as a real record of it names them."""
    from qsa_cli.config import config_path, load_config

    for config, record in ((runs["config"], runs["base"]), (config_path("ci"), Path("docs/results/h200-2026-11-30/ci.json"))):
        keys = {m.key.rsplit(" l2=", 1)[0] for m in load_record(Path(__file__).parents[1] / record).measurements}
        assert {sweep.sweep_case_key(c) for c in load_config(config).cases()} == keys


def test_each_round_is_judged_against_the_same_baseline_and_an_unusable_one_refutes_nothing() -> None:
    """On records made by hand: a round as slow confirms, one as fast as the baseline is UNCONFIRMED, one of
    NaN samples says so and refutes nothing."""
    import copy

    from record_factory import seed_record

    from qsa_cli.output.gate import compare
    from qsa_cli.record.schema import Confirmation

    baseline, run = seed_record(seed=1, noise=0.02), seed_record(seed=2, noise=0.02, scale=1.3)
    slow = {(r.key, r.variant) for r in compare(run, baseline).rows if r.verdict == "SLOW"}
    assert slow

    def with_round(*made: RunRecord) -> RunRecord:
        out = copy.deepcopy(run)
        out.confirmations = [Confirmation(i + 1, [m for m in r.measurements if (m.key, m.variant) in slow])
                             for i, r in enumerate(made)]
        return out

    nan = copy.deepcopy(run)
    for m in nan.measurements:
        m.samples_us = [math.nan] * len(m.samples_us)
    verdicts = lambda record: {r.verdict for r in compare(record, baseline).rows if (r.key, r.variant) in slow}  # noqa: E731
    assert verdicts(with_round(seed_record(seed=3, noise=0.02, scale=1.3))) == {"SLOW"}
    assert verdicts(with_round(seed_record(seed=3, noise=0.02))) == {"UNCONFIRMED"}
    assert compare(with_round(seed_record(seed=3, noise=0.02)), baseline).passed
    assert verdicts(with_round(seed_record(seed=3, noise=0.02, scale=1.3), seed_record(seed=4, noise=0.02))) == {
        "UNCONFIRMED"}  # the second round refuted it
    rows = [r for r in compare(with_round(nan), baseline).rows if (r.key, r.variant) in slow]
    assert {r.verdict for r in rows} == {"SLOW"} and all("its samples" in r.detail for r in rows)
