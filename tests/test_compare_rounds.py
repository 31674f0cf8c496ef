"""qsa compare --rounds: the run made N times over in one session, each (case, variant)'s samples pooled and each
round's median kept, on the CPU backend's compare session (tests/test_session.py) of two copies of qsa's
kernels. compare itself needs the GPU backend; its rounds are this same code there."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_session import compare_session

from qsa_cli.config import load_config
from qsa_cli.record.schema import RunRecord
from qsa_cli.runs.compare import compare_run
from qsa_cli.runs.rounds import in_rounds

SWEEP = "iterations: 3\nstages: [scores, topk]\ncontexts: [4099]\nqueries: [2]\ncapacity: 8192\n"


def compared(tmp_path: Path, rounds: int) -> tuple[RunRecord, list[list[str]]]:
    """The compare run in ``rounds`` rounds (ITERS 1: a sample a variant a round), and each round's measured
    variants in the order they ran."""
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP)
    order: list[list[str]] = []
    with compare_session(tmp_path) as s:
        def once() -> None:
            start = len(s.record.measurements)
            compare_run(s, None, load_config(sweep))
            order.append([m.variant for m in s.record.measurements[start:]])
        in_rounds(s.record, rounds, once)
        return s.record, order


@pytest.mark.parametrize("rounds", [1, 3])
def test_each_variants_samples_are_pooled_across_rounds_with_each_rounds_median(tmp_path: Path, rounds: int) -> None:
    record, _ = compared(tmp_path, rounds)
    assert record.measurements
    rows = [(m.key, m.variant) for m in record.measurements]
    assert len(rows) == len(set(rows))  # one measurement a (case, variant), whatever the rounds
    for m in record.measurements:
        assert len(m.samples_us) == rounds
        if rounds == 1:
            assert m.round_medians_us is None
        else:
            assert len(m.round_medians_us) == rounds
            assert min(m.round_medians_us) <= m.median_us <= max(m.round_medians_us)
    checks = [(p.key, p.subject, p.against) for p in record.parity]
    assert len(checks) == len(set(checks)) and all(p.equal for p in record.parity)  # a round's passes not repeated


def test_the_sides_take_turns_round_after_round(tmp_path: Path) -> None:
    """Each round runs both sides in the same order as the first: base, candidate, base, candidate, ..."""
    _, order = compared(tmp_path, 3)
    assert len(order) == 3 and order[0] == order[1] == order[2]
    sides = [v.split(".")[0] for v in order[0] if "." in v]
    assert {"base", "cand"} <= set(sides)
