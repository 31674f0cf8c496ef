"""Engine variants under switches, each switch setting's run by ONE child qsa process of the run over all of its
cases (runs/stages.run_cases, runs/switched.py): the same command on the same command line, the setting in its
environment, its cases and variants beside it, its record the only way back, placed among the run's rows by
the record layer (record/assembly.py). On the CPU, some of qsa's own variants stand in for switched ones (this
process takes them for switched; a child is given them by name and runs them as any other), and the children
are real: qsa on the CPU backend.

What the runs keep: one child per setting however many cases (a sweep's stages too), each given its cases and
variants and the setting; the record's rows of a case together in the order they have when each case runs
alone, the child's reference and read floor left out; the child on the same inputs (the same seed); a
failing child one error with the tail of its output, exit 2; an interrupted run keeping every case run here.
What a child is: it runs what it was given with qsa's reference and ends there, its record written."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from record_factory import topk_case

from qsa_cli.cli import main
from qsa_cli.config import load_config
from qsa_cli.core.errors import SwitchedRunError
from qsa_cli.core.geometry import Call
from qsa_cli.inputs import SCORE_SETS
from qsa_cli.record.assembly import CaseRows, InCaseOrder, add_rows, check_child
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import Measurement, ParityCheck, RunRecord
from qsa_cli.record.vocabulary import CPU_ORACLE, HOST_L2, INPUTS, INPUTS_HASH, last_call
from qsa_cli.runs import stages
from qsa_cli.runs.switched import _with_record_at, run_child
from qsa_cli.runs.sweep import sweep
from qsa_cli.session import CHILD_ENV, Session, Settings, SwitchedChild, session

A, B = (("STRATA_TOPK_SPLIT", "1"),), (("QSA_TEST_SETTING", "b"),)  # A is a switch the child's record shows
SWITCHED = {("topk", "split"): A, ("topk", "cluster"): B, ("scores", "halve"): A}  # as if NAME.KIND[K=V]
CALL = Call(4099, 3, 8192)
TOPK_PARITY = ["topk-parity", "4099", "3", "1", "8192", "0", "--backend", "cpu"]  # CALL, one sample a variant


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> list[tuple[SwitchedChild, RunRecord]]:
    """Some of qsa's variants as if under switches (in this process: a child runs what it is given); each child
    the run starts, with what it was given and the record it wrote, in the order started."""
    monkeypatch.setattr(stages, "switches_of", lambda catalog, stage, name: SWITCHED.get((stage, name), ()))
    started: list[tuple[SwitchedChild, RunRecord]] = []
    real = stages.run_child

    def logged(command_line: list[str], child: SwitchedChild, what: str) -> RunRecord:
        record = real(command_line, child, what)
        started.append((child, record))
        return record

    monkeypatch.setattr(stages, "run_child", logged)
    return started


@pytest.fixture
def opened() -> Iterator[Any]:
    """Sessions on the CPU of a command line (what their children run)."""
    def opening(command_line: list[str], **settings: Any) -> Session:
        return stack.enter_context(session(Settings(backend="cpu", seed=0, **settings), command_line[0], command_line))

    with contextlib.ExitStack() as stack:
        yield opening


def setting_of(subject: str) -> tuple[tuple[str, str], ...]:
    stage_of = {"split": "topk", "cluster": "topk", "halve": "scores"}
    name = subject.split(" (")[0]
    return SWITCHED.get((stage_of.get(name, ""), name), ())


def test_topk_parity_starts_one_child_per_setting_for_every_score_set(children: list[Any], opened: Any) -> None:
    s = opened(TOPK_PARITY, iters=1)
    told: list[tuple[int, int, str]] = []
    out = stages.topk_parity(s, stages.topk_score_sets(CALL, 0), 0, lambda *step: told.append(step))
    given = [(dict(child.switches), [names for _, names in child.cases]) for child, _ in children]
    assert given == [(dict(A), [("split",)] * len(SCORE_SETS)), (dict(B), [("cluster",)] * len(SCORE_SETS))]
    assert children[0][1].environment["switches"] == dict(A)  # the setting is the child's environment's
    assert [key.split("score_set=")[1].split()[0] for key, _ in children[0][0].cases] == list(SCORE_SETS)
    # each score set's rows together, in order: this process's, then setting A's, then B's
    sections = [(p.case["score_set"], setting_of(p.subject)) for p in s.record.parity]
    assert list(dict.fromkeys(sections)) == [(ss, setting) for ss in SCORE_SETS for setting in ((), A, B)]
    assert [m.variant for m in s.record.measurements] == ["reference", "wide", "split", "cluster"] * len(SCORE_SETS)
    # the children's reference (run beside their variants, to check them against) is not the run's
    assert sum(p.subject == "reference" and p.against == INPUTS for p in s.record.parity) == len(SCORE_SETS)
    for v in ("split", "cluster"):
        checked = {(p.case["score_set"], p.against) for p in s.record.parity if p.subject == v}
        assert checked >= {(ss, against) for ss in SCORE_SETS for against in ("reference", CPU_ORACLE, INPUTS)}
        assert {p.subject for p in s.record.parity if p.against == v} == {last_call(v)}
    assert all(p.equal for p in s.record.parity)
    # the children made each score set as the run did (the same seed): the adversarial one's NaNs and signed zeros too
    hashes = {(p.case["score_set"], p.subject): p.hashes[INPUTS_HASH] for p in s.record.parity if p.against == INPUTS}
    assert all(hashes[(ss, v)] == hashes[(ss, "wide")] for ss in SCORE_SETS for v in ("split", "cluster"))
    assert {k.split(".")[1] for k in out.outputs} == {"reference", "wide", CPU_ORACLE}  # a child's outputs stay there
    assert len(out.parity) == len(s.record.parity)  # the run's outcome holds the children's rows too
    # progress: each score set named as it starts, each child, then the end; never backwards
    messages = [m for _, _, m in told]
    assert [m for m in messages if m.startswith("topk ")] == [
        *(f"topk {ss}" for ss in SCORE_SETS), *(f"topk {v} (a child process, {len(SCORE_SETS)} cases)"
                                                for v in ("split", "cluster"))]
    assert told[-1] == (told[-1][1], told[-1][1], "done") and [d for d, _, _ in told] == sorted(d for d, _, _ in told)


def test_a_sweep_starts_one_child_per_setting_over_its_stages(children: list[Any], opened: Any,
                                                             tmp_path: Path) -> None:
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text("iterations: 0\nseed: 0\nstages: [scores, topk]\ncontexts: [4099, 9002]\n"
                          "capacity: 16384\nqueries: [2]\nscore_sets: [continuous, equal]\n"
                          "variants:\n  scores: [reference, multi, halve]\n")
    config = load_config(sweep_file)
    s = opened(["sweep", str(sweep_file), "--backend", "cpu"], iters=0)
    told: list[tuple[int, int, str]] = []
    sweep(s, config, progress=lambda *step: told.append(step))
    cases = len(config.cases())
    assert [step[:2] for step in told] == [(i, cases + 2) for i in range(cases + 3)]  # each case, each child
    assert [m for _, _, m in told][cases:] == [f"scores/topk halve, split (a child process, {cases} cases)",
                                               f"topk cluster (a child process, {cases - 2} cases)", "done"]
    assert [(dict(child.switches), len(child.cases)) for child, _ in children] == [(dict(A), cases), (dict(B), cases - 2)]
    keys = [p.key for p in s.record.parity]
    runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    assert len(runs) == len(set(keys)) == cases  # each case's rows together, the children's among them
    assert {p.subject for p in s.record.parity} >= {"halve", "split", "cluster", "multi"}


def test_a_child_runs_on_the_same_inputs(children: list[Any], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A child makes its case's inputs as the run does (the same command, the same seed): the hash of the inputs
    its variant ran on is the run's own variants' (adversarial keys: NaNs, infinities, signed zeros)."""
    js = tmp_path / "r.json"
    with pytest.raises(SystemExit) as ended:
        main(["select-bench", "9002", "3", "1", "16384", "--keys", "adversarial", "--seed", "7", "--backend", "cpu",
              "--variants", "multi,halve", "--json", str(js)])
    assert ended.value.code == 0, capsys.readouterr()
    (child, _), = children
    assert child.cases == ((load_record(js).measurements[0].key, ("halve",)),)
    hashes = {p.subject: p.hashes[INPUTS_HASH] for p in load_record(js).parity if p.against == INPUTS}
    assert set(hashes) == {"multi", "halve"} and hashes["multi"] == hashes["halve"]


def test_a_failing_child_is_one_error_naming_its_variants_with_its_output(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A setting the child's qsa refuses (a switch of its dispatch out of its domain): exit 2, the error naming
    the variants, then the child's own line; this process's rows of every case are in the record."""
    monkeypatch.setattr(stages, "switches_of", lambda catalog, stage, name: (
        (("STRATA_TOPK_SPLIT", "7"),) if name == "split" else ()))
    s = session(Settings(backend="cpu", seed=0, iters=1), "topk-parity", TOPK_PARITY)
    with s as opened, pytest.raises(SwitchedRunError, match=r"^the child running split failed \(exit 2\):\n") as failed:
        stages.topk_parity(opened, stages.topk_score_sets(CALL, 0), 0)
    assert str(failed.value).splitlines()[-1] == "qsa: error: STRATA_TOPK_SPLIT must be 0 or 1 (got '7')"
    assert {p.case["score_set"] for p in opened.record.parity} == set(SCORE_SETS)
    with pytest.raises(SystemExit) as ended:
        main([*TOPK_PARITY, "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.startswith("qsa: error: the child running split failed (exit 2):\n")


def test_an_interrupted_run_keeps_every_case_run_here(children: list[Any], monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*args: Any) -> RunRecord:
        raise KeyboardInterrupt

    monkeypatch.setattr(stages, "run_child", interrupted)
    js = tmp_path / "r.json"
    with pytest.raises(SystemExit) as ended:
        main([*TOPK_PARITY, "--json", str(js)])
    assert ended.value.code == 130, capsys.readouterr()
    kept = load_record(js)
    assert kept.incomplete and {p.case["score_set"] for p in kept.parity} == set(SCORE_SETS)
    assert {p.subject.split(" (")[0] for p in kept.parity} == {"reference", "wide"}


def test_a_child_runs_what_it_was_given_with_the_reference_and_ends_with_its_record(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A child of a run, as the run starts it: the run's command line, its cases and variants in its
    environment; it runs the variants given with qsa's reference, on the cases given only, once each, writes its
    record and ends (exit 0) before the rest of the command (no --dump written)."""
    levels = "topk ctx=4099 nq=3 capacity=8192 kind=decode score_set=levels64 l2=host"
    child = SwitchedChild(A, (("STRATA_TOPK_SPLIT", None),), None, ((levels, ("split", "cluster")),))
    monkeypatch.setenv(CHILD_ENV, child.encoded())
    js, dump = tmp_path / "child.json", tmp_path / "dump.npz"
    with pytest.raises(SystemExit) as ended:
        main([*TOPK_PARITY, "--dump", str(dump), "--json", str(js)])
    assert ended.value.code == 0, capsys.readouterr()
    record = load_record(js)
    assert [(m.key, m.variant) for m in record.measurements] == [(levels, v) for v in ("reference", "split", "cluster")]
    assert not record.incomplete and not dump.exists()


def test_a_child_that_does_not_meet_its_cases_is_a_programming_error(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    child = SwitchedChild(A, (), None, (("topk ctx=1 nq=1 capacity=1 kind=decode l2=host", ("split",)),))
    monkeypatch.setenv(CHILD_ENV, child.encoded())
    with pytest.raises(RuntimeError, match="ran 0 of the 1 cases it was given"):
        main([*TOPK_PARITY, "--json", str(tmp_path / "child.json")])
    assert not (tmp_path / "child.json").exists()


@pytest.mark.parametrize(("value", "json_given", "said"), [
    ("{", True, f"{CHILD_ENV} does not say what a child of a run runs"),
    (SwitchedChild(A, (), None, ()).encoded(), False, "a child of a run, which writes its record with --json"),
])
def test_a_child_without_its_part_or_its_record_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str], value: str,
                                                                   json_given: bool, said: str) -> None:
    monkeypatch.setenv(CHILD_ENV, value)
    with pytest.raises(SystemExit) as ended:
        main([*TOPK_PARITY, *(["--json", str(tmp_path / "r.json")] if json_given else [])])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and len(err.strip().splitlines()) == 1 and said in err


def test_a_child_whose_command_did_not_run_as_one_starts_no_child_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that does not take what a child is given (qsa selftest) would run whole again, and start itself
    again: it is one error instead."""
    monkeypatch.setenv(CHILD_ENV, SwitchedChild(A, (), None, ()).encoded())
    with pytest.raises(SwitchedRunError, match=r"^this process is a child of a run, whose command \(selftest\) does "
                                               r"not run as one: it cannot run split under"):
        run_child(["selftest", "--engine", "new=../strata"], SwitchedChild(A, (), None, ()), "split")


def test_a_childs_catalog_is_made_under_the_runs_switches() -> None:
    """The engine's variants a checkout gives depend on its switches (STRATA_EMULATE_CC, STRATA_QSA_CLUSTER):
    a child makes the run's catalog with the run's values of its setting's switches, not its own."""
    child = SwitchedChild((("STRATA_EMULATE_CC", "86"), ("STRATA_QSA_CLUSTER", "0")),
                          (("STRATA_EMULATE_CC", None), ("STRATA_QSA_CLUSTER", "1")), None, ())
    assert child.run_environment({"STRATA_EMULATE_CC": "86", "STRATA_QSA_CLUSTER": "0", "PATH": "/bin"}) == {
        "STRATA_QSA_CLUSTER": "1", "PATH": "/bin"}
    assert SwitchedChild.of_environment({CHILD_ENV: child.encoded()}) == child
    assert SwitchedChild.of_environment({}) is None


def test_a_childs_record_is_written_where_the_run_says_whatever_its_command_line_gave() -> None:
    assert _with_record_at(["sweep", "ci", "--json", "-"], Path("/t/r.json")) == [
        "sweep", "ci", "--json", "-", "--json", "/t/r.json"]  # click takes an option's last value
    assert _with_record_at(["select-bench", "--", "9002", "3", "1", "16384"], Path("/t/r.json")) == [
        "select-bench", "--json", "/t/r.json", "--", "9002", "3", "1", "16384"]


# ---- the record layer: a child's rows placed among the run's ----------------------------------------------

def _case(ctx: int) -> dict[str, Any]:
    return topk_case(ctx, 1, 8192, l2=HOST_L2)


def _rows(ctx: int, *variants: str) -> CaseRows:
    """A process's rows of one case: a measurement and an integrity row of each variant (the reference's too)."""
    return CaseRows([Measurement("topk", v, _case(ctx), [1.0]) for v in variants],
                    [ParityCheck("topk", _case(ctx), v, INPUTS, True) for v in variants])


def _child(*cases: tuple[int, tuple[str, ...]], note: str = "") -> RunRecord:
    record = RunRecord("topk-parity", [], "cpu", notes=[note] if note else [])
    for ctx, variants in cases:
        add_rows(record, _rows(ctx, "reference", *variants))
    return record


def test_a_childs_rows_are_placed_after_their_cases_whichever_child_comes_first() -> None:
    """Three cases whose variants name two settings in different orders (case 2: b before a): each case's rows
    as if it had run alone (its own, then each setting's in its order), whichever child's record comes first;
    a child's reference is left out."""
    ctxs = (100, 200, 300)
    keys = [Measurement("topk", "x", _case(ctx), [1.0]).key for ctx in ctxs]
    a = _child((100, ("split",)), (200, ("split",)), (300, ("split",)), note="child a")
    b = _child((200, ("cluster",)), (300, ("cluster",)), note="child b")
    order = {keys[0]: ("split",), keys[1]: ("cluster", "split"), keys[2]: ("split", "cluster")}
    settings = {"split": a, "cluster": b}

    def assembled(children: list[str]) -> RunRecord:
        record = RunRecord("topk-parity", [], "cpu")
        placed = InCaseOrder(record)
        for ctx in ctxs:
            add_rows(record, _rows(ctx, "reference", "wide"))
        for variant in children:
            parts = {key: (1 + names.index(variant), (variant,)) for key, names in order.items() if variant in names}
            taken = placed.take_child(settings[variant], keys, parts)
            assert list(taken) == list(parts)
        return record

    first, second = assembled(["split", "cluster"]), assembled(["cluster", "split"])
    expected = [(k, v) for k in keys for v in ("reference", "wide", *order[k])]
    for record in (first, second):
        assert [(m.key, m.variant) for m in record.measurements] == expected
        assert [(p.key, p.subject) for p in record.parity] == expected
        assert sorted(record.notes) == ["child a", "child b"]


def test_a_child_that_holds_a_case_it_was_not_given_or_ran_elsewhere_is_refused() -> None:
    run = RunRecord("topk-parity", [], "cpu", kernel_source_hash="abc")
    placed = InCaseOrder(run)
    key = Measurement("topk", "x", _case(100), [1.0]).key
    with pytest.raises(SwitchedRunError, match="holds a case its run did not give it: topk ctx=200"):
        placed.take_child(_child((200, ("split",))), [key], {key: (1, ("split",))})
    with pytest.raises(SwitchedRunError, match=r"^the child running split ran with other kernel sources than this "
                                               r"run: def \(this run: abc\)$"):
        check_child(run, RunRecord("topk-parity", [], "cpu", kernel_source_hash="def"), "the child running split")
    check_child(run, RunRecord("topk-parity", ["--json", "x"], "cpu", kernel_source_hash="abc"), "the same")


def test_the_records_argv_is_the_command_line_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a run's children run again: the command line main() was given (not the process's)."""
    argv = ["select-bench", "64", "1", "1", "128", "--backend", "cpu", "--json", str(tmp_path / "r.json")]
    with pytest.raises(SystemExit):
        main(argv)
    capsys.readouterr()
    assert json.loads((tmp_path / "r.json").read_text())["argv"] == argv
