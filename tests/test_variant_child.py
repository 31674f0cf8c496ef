"""Engine variants under switches run in one child process per switch setting over all of a run's cases
(runs/stages.py ``run_cases``, qsa_cli/variant_child.py), here with a fake child (tests/fake_variant_child.py)
in the real one's place on the CPU: one child per setting however many cases; the record's rows and notes
in the order and with the names they have when each case runs alone (a child per setting per case, as
before); a failing child's error with the tail of its output; each case's inputs read by the child bit for
bit as given; an interrupted run keeping every case's rows that ran in this process."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import fake_variant_child as fake
from qsa_cli import variant_child
from qsa_cli.core.errors import SwitchedRunError
from qsa_cli.config import load_config
from qsa_cli.core.geometry import Call
from qsa_cli.inputs import SCORE_SETS
from qsa_cli.record.vocabulary import CPU_ORACLE, HOST_L2
from qsa_cli.runs import stages
from qsa_cli.runs.stages import run_cases, run_topk_case, scorer_case, scorer_inputs, topk_case, topk_parity, \
    topk_score_sets
from qsa_cli.runs.sweep import sweep
from qsa_cli.session import Session, Settings, session

A, B = ((fake.SETTING, "a"),), ((fake.SETTING, "b"),)
SWITCHED = {("topk", "split"): A, ("topk", "cluster"): B, ("scores", "halve"): A}  # as if NAME.KIND[K=V]
CALL = Call(4099, 3, 8192)


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The fake child in the real one's place, some catalog variants as if under switches; the folder where
    the fake logs its starts (children.log) and saves the inputs it read (inputs/)."""
    monkeypatch.setattr(variant_child, "CHILD_MODULE", "fake_variant_child")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    monkeypatch.setenv("FAKE_CHILD_LOG", str(tmp_path / "children.log"))
    (tmp_path / "inputs").mkdir()
    monkeypatch.setenv("FAKE_CHILD_INPUTS", str(tmp_path / "inputs"))
    monkeypatch.delenv("FAKE_CHILD_FAIL", raising=False)
    monkeypatch.setattr(stages, "switches_of", lambda catalog, stage, name: SWITCHED.get((stage, name), ()))
    # the job names a GPU timer's settings (the CPU's measurer has none; nothing is timed)
    timer = SimpleNamespace(l2=HOST_L2, warmup=1, locked_sm_mhz=None)  # the rows' l2 here
    real = stages.run_switched
    monkeypatch.setattr(stages, "run_switched", lambda catalog, switches, cases, measurer, job: real(
        catalog, switches, cases, dataclasses.replace(measurer, timer=timer), job))
    return tmp_path


@pytest.fixture
def opened() -> Iterator[Any]:
    """Sessions on the CPU, with a bus id as a GPU's has for its child."""
    def opening() -> Session:
        s = stack.enter_context(session(Settings(backend="cpu", seed=0, iters=0), "topk-parity", []))
        s.record.device["pci_bus_id"] = "0000:00:00.0"
        return s

    with contextlib.ExitStack() as stack:
        yield opening


def started(folder: Path) -> list[dict[str, Any]]:
    log = folder / "children.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def rows(s: Session) -> dict[str, Any]:
    record = s.record.to_dict()
    return {k: record[k] for k in ("measurements", "parity", "agreements", "notes")}


def test_topk_parity_starts_one_child_per_setting_for_every_score_set(children: Path, opened: Any) -> None:
    s = opened()
    told: list[tuple[int, int, str]] = []
    out = topk_parity(s, topk_score_sets(CALL, 0), 0, lambda *step: told.append(step))
    assert [(c["setting"], c["cases"]) for c in started(children)] == [
        ("a", [["reference", "split"]] * len(SCORE_SETS)), ("b", [["reference", "cluster"]] * len(SCORE_SETS))]
    # each score set's rows together, in order: this process's, then setting a's, then b's; no child's reference
    sections = [(p.case["score_set"], dict(SWITCHED).get(("topk", p.subject.split(" (")[0]), ()))
                for p in s.record.parity]
    assert list(dict.fromkeys(sections)) == [(ss, setting) for ss in SCORE_SETS for setting in ((), A, B)]
    assert [m.variant for m in s.record.measurements] == ["split", "cluster"] * len(SCORE_SETS)
    assert not any(p.against == fake.CHILD_ROW and p.subject.startswith("reference") for p in s.record.parity)
    assert [n for n in s.record.notes if n.startswith("fake")] == [
        f"fake child {setting} on {ss}" for ss in SCORE_SETS for setting in "ab"]
    assert set(out.outputs) == {f"{ss}.{v}" for ss in SCORE_SETS for v in ("reference", "wide", CPU_ORACLE)}
    # progress: each score set named as it starts, each child, then the end; never backwards
    messages = [m for _, _, m in told]
    assert [m for m in messages if m.startswith("topk ")] == [
        *(f"topk {ss}" for ss in SCORE_SETS), *(f"topk {v} (a child process, {len(SCORE_SETS)} cases)"
                                                for v in ("split", "cluster"))]
    assert told[-1] == (told[-1][1], told[-1][1], "done") and [d for d, _, _ in told] == sorted(d for d, _, _ in told)


def test_the_record_is_as_when_each_case_runs_alone(children: Path, opened: Any) -> None:
    """Cases whose variants name the settings in different orders: each case's child rows in its own order."""
    sets = topk_score_sets(CALL, 0)[:3]
    orders = [("wide", "split", "cluster"), ("cluster", "wide", "split"), ("split", "cluster")]
    together, alone = opened(), opened()
    run_cases(together, [topk_case(together, lambda inp=inp: inp, v, 0) for inp, v in zip(sets, orders)])
    assert len(started(children)) == 2
    for inp, v in zip(sets, orders):
        run_topk_case(alone, inp, v, 0)
    assert len(started(children)) == 2 + 6
    assert rows(together) == rows(alone) and rows(together)["parity"]


def test_a_sweep_starts_one_child_per_setting_over_its_stages(children: Path, opened: Any, tmp_path: Path) -> None:
    (tmp_path / "sweep.yaml").write_text("iterations: 0\nseed: 0\nstages: [scores, topk]\ncontexts: [4099, 9002]\n"
                                         "capacity: 16384\nqueries: [2]\nscore_sets: [continuous, equal]\n"
                                         "variants:\n  scores: [reference, multi, halve]\n")
    config = load_config(tmp_path / "sweep.yaml")
    s = opened()
    told: list[tuple[int, int, str]] = []
    sweep(s, config, progress=lambda *step: told.append(step))
    cases = len(config.cases())
    assert [step[:2] for step in told] == [(i, cases + 2) for i in range(cases + 3)]  # each case, each child
    assert [m for _, _, m in told][cases:] == [f"scores/topk halve, split (a child process, {cases} cases)",
                                               f"topk cluster (a child process, {cases - 2} cases)", "done"]
    assert [(c["setting"], len(c["cases"])) for c in started(children)] == [("a", cases), ("b", cases - 2)]
    assert [c[0] for c in started(children)[0]["cases"]] == ["reference"] * cases
    keys = [p.key for p in s.record.parity]
    runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    assert len(runs) == len(set(keys)) == cases  # each case's rows together, the child's among them


def test_a_failing_child_raises_with_the_tail_of_its_output(children: Path, opened: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CHILD_FAIL", "1")
    s = opened()
    with pytest.raises(SwitchedRunError, match=r"^the child running split failed \(exit 3\):\n") as failed:
        topk_parity(s, topk_score_sets(CALL, 0), 0)
    assert "fake child: attaching the builds" in str(failed.value) and "setting a refused" in str(failed.value)
    assert {p.case["score_set"] for p in s.record.parity} == set(SCORE_SETS)  # this process's rows, every case's


def test_an_interrupted_run_keeps_every_case_run_here(children: Path, opened: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(stages, "run_switched", interrupted)
    s = opened()
    with pytest.raises(KeyboardInterrupt):
        topk_parity(s, topk_score_sets(CALL, 0), 0)
    assert {p.case["score_set"] for p in s.record.parity} == set(SCORE_SETS)
    assert {p.subject.split(" (")[0] for p in s.record.parity} >= {"reference", "wide"}


def test_each_cases_inputs_reach_the_child_bit_for_bit(children: Path, opened: Any) -> None:
    """A scorer case and a top-k case under one setting: one child for both; the arrays it read are the
    ones given, bytes, dtypes and shapes (a NaN's payload and a negative zero too)."""
    s = opened()
    scorer = scorer_inputs(CALL, 1)
    topk = topk_score_sets(CALL, 2)[0]
    scores = topk.scores.copy()
    scores[0, :3] = [-0.0, np.float32("nan"), np.frombuffer(np.uint32(0x7FC00ABC).tobytes(), np.float32)[0]]
    topk = dataclasses.replace(topk, scores=scores)
    run_cases(s, [scorer_case(s, lambda: scorer, ("halve",)), topk_case(s, lambda: topk, ("split",), 0)])
    assert [c["setting"] for c in started(children)] == ["a"]
    for i, given in enumerate((scorer, topk)):
        with np.load(children / "inputs" / f"a-{i}.npz") as read:
            arrays = {k: v for k, v in vars(given).items() if isinstance(v, np.ndarray)}
            assert sorted(read.files) == sorted(arrays)
            for name, a in arrays.items():
                assert (read[name].dtype, read[name].shape, read[name].tobytes()) == (a.dtype, a.shape, a.tobytes())
