"""The timer on the GPU (``-m gpu``; skipped without CuPy or a device): select-bench under each L2 state and
the stopping rule, its record's fields; the flushes' states; a rule that cannot be met ends at its timeout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from qsa_cli.cli import main
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import RunRecord
from qsa_cli.record.vocabulary import L2_STATES, READ_FLOOR
from qsa_cli.timing import BATCH_LAUNCHES, BATCHES, DeviceTimer, StoppingRule


def bench(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[RunRecord, str]:
    js = tmp_path / "r.json"
    with pytest.raises(SystemExit) as ended:
        main(["select-bench", "131072", "4", *argv, "--json", str(js), "--quiet"])
    out = capsys.readouterr().out
    assert (ended.value.code or 0) == 0, out
    return load_record(js), out


@pytest.mark.gpu
@pytest.mark.parametrize("l2", L2_STATES)
def test_select_bench_under_each_l2_state_records_it_with_batches(cupy: Any, capsys, tmp_path: Path, l2: str) -> None:
    record, out = bench(capsys, tmp_path, "30", "524288", "--l2", l2)
    assert record.settings["l2"] == l2 and "stopping" not in record.settings
    variants = {m.variant for m in record.measurements}
    assert {"multi", "halve", READ_FLOOR} <= variants  # the read floor under the same state
    for m in record.measurements:
        assert m.case["l2"] == l2 and len(m.samples_us) == 30 and m.stop is None
        assert m.batch is not None and m.batch["launches"] == BATCH_LAUNCHES and len(m.batch["means_us"]) == BATCHES
        assert all(0 < x < 1e6 for x in m.batch["means_us"])
    assert f"L2 {l2}" in " ".join(out.split()) and " batch " in out


@pytest.mark.gpu
def test_select_bench_auto_stops_by_the_rule_and_records_how(cupy: Any, capsys, tmp_path: Path) -> None:
    record, out = bench(capsys, tmp_path, "auto", "524288", "--min-samples", "15", "--max-noise", "1", "--timeout",
                        "20")
    assert record.settings["stopping"] == {"min_samples": 15, "max_noise_pct": 1.0, "min_time_s": 0.0,
                                           "timeout_s": 20.0}
    for m in record.measurements:
        assert m.stop is not None and len(m.samples_us) >= 15 and m.batch is not None
        if m.stop["met"]:
            assert m.stop["reason"] == "met" and m.stop["noise_pct"] <= 1.0
        else:
            assert m.stop["reason"] == "timeout" and m.stop["wall_s"] >= 20.0
    assert " rule " in out


@pytest.mark.gpu
def test_a_rule_that_cannot_be_met_ends_at_its_timeout_and_says_so(cupy: Any, capsys, tmp_path: Path) -> None:
    record, out = bench(capsys, tmp_path, "auto", "524288", "--max-noise", "0.000001", "--timeout", "0.5",
                        "--variants", "halve")
    (m,) = [m for m in record.measurements if m.variant == "halve"]  # the read floor is timed beside it
    assert m.stop is not None and not m.stop["met"] and m.stop["reason"] == "timeout"
    assert 0.5 <= m.stop["wall_s"] < 10 and len(m.samples_us) >= 20
    assert "NOT MET (timeout)" in out


@pytest.mark.gpu
@pytest.mark.parametrize("l2", L2_STATES)
def test_each_state_times_a_read_and_its_rule(cupy: Any, l2: str) -> None:
    """The timer itself, in each state, on a plain read: samples, batches and the rule's outcome."""
    timer = DeviceTimer(l2=l2, warmup=2)
    data = cupy.random.default_rng(1).random(4 * 2**20, dtype=cupy.float32)
    timed = timer.measure(timer.read_launcher(data), StoppingRule(min_samples=10, max_noise_pct=5.0, timeout_s=10.0))
    assert timed.stop is not None and len(timed.samples_us) >= 10
    assert all(x > 0 for x in timed.samples_us) and timed.batch is not None and len(timed.batch["means_us"]) == BATCHES
