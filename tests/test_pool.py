"""A run's CPU work in worker processes (runs/pool.py): the same results in the same order as made in the
run's own process, an error raised at its task's turn, and no wait for work left when the run stops early;
qsa selftest's and topk-parity --selftest's records the same, bit for bit, either way."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from qsa_cli.catalog import qsa_catalog
from qsa_cli.config import load_config
from qsa_cli.core.geometry import Call
from qsa_cli.core.progress import no_progress
from qsa_cli.inputs import SCORE_SETS, synthetic_scorer_inputs, synthetic_scores
from qsa_cli.interrupts import Interrupted, interruptions, signal_of
from qsa_cli.model.scores import score_blocks
from qsa_cli.model.topk import topk_ids
from qsa_cli.record.schema import SelftestCheck
from qsa_cli.record.vocabulary import CPU_MODEL, CPU_ORACLE
from qsa_cli.runs import pool
from qsa_cli.runs import selftest as selftest_run
from qsa_cli.runs import topk_selftest as topk_selftest_run
from qsa_cli.runs.made import topk_score_set
from qsa_cli.runs.stages import topk_parity, topk_score_sets
from qsa_cli.session import Opening, Settings, session
from qsa_cli.stages import scores as scores_stage
from qsa_cli.stages import topk as topk_stage
from qsa_cli.stages.common import Measurer

CALLS = [Call(4099, 8, 8192), Call(2051, 5, 4096, prompt=True), Call(9002, 3, 16384)]
SMALL_TOPK_MATRIX = """description: a small top-k matrix
iterations: 0
seed: 0
stages: [topk]
score_sets: [continuous, levels64, equal, adversarial]
contexts: [4099, 2051]
capacity: [8192, 4096]
matrix:
  - kind: decode
    queries: 8
  - kind: prompt
    queries: 64
"""


def _fails_at(value: int) -> int:
    if value == 3:
        raise ValueError("task 3 failed")
    return value * value


def test_worker_processes_hand_back_what_this_process_makes_in_the_tasks_order() -> None:
    tasks = [(topk_score_set, (call, name, 7, True)) for call in CALLS for name in SCORE_SETS]
    with pool.in_order(tasks, workers=3) as made:
        got = list(made)
    assert len(got) == len(tasks)
    for (_, (call, name, seed, _)), (inputs, oracle) in zip(tasks, got):
        expected = synthetic_scores(call, name, seed)
        assert inputs.score_set == name
        assert inputs.scores.tobytes() == expected.scores.tobytes()
        assert inputs.steps.tobytes() == expected.steps.tobytes()
        assert oracle.tobytes() == topk_ids(expected, "oracle").tobytes()


def test_the_workers_come_from_the_server_not_from_this_process() -> None:
    """This process may hold a CUDA context, which a forked child must never touch: its workers are forked by the
    server, which has the tasks' modules imported."""
    from multiprocessing import forkserver

    with pool.in_order([(os.getppid, ())] * 4, workers=2) as made:
        parents = set(made)
    server = forkserver._forkserver._forkserver_pid
    assert parents == {server} and server != os.getpid()


def _arrays(seed: int) -> dict[str, object]:
    base = np.random.default_rng(seed).standard_normal((512, 1024), dtype=np.float32)
    return {"c": base, "fortran": np.asfortranarray(base[:, :100]), "strided": base[::3, 1::2],
            "empty": np.empty((0, 5), np.int32), "big": np.arange(1 << 20, dtype=np.int64), "text": "and the rest"}


def test_arrays_come_back_whole_in_any_layout() -> None:
    """An answer's contiguous arrays travel beside its pickle (protocol 5): each comes back the same bits, shape,
    order and dtype as the worker made it, writable, whatever its layout."""
    with pool.in_order([(_arrays, (seed,)) for seed in range(3)], workers=2) as made:
        got = list(made)
    for seed, answer in enumerate(got):
        for name, want in _arrays(seed).items():
            if not isinstance(want, np.ndarray):
                assert answer[name] == want
                continue
            array = answer[name]
            assert array.dtype == want.dtype and array.shape == want.shape and array.tobytes() == want.tobytes()
            assert array.flags.f_contiguous == want.flags.f_contiguous and array.flags.writeable


def test_an_error_in_a_worker_is_raised_at_its_tasks_turn() -> None:
    with pool.in_order([(_fails_at, (i,)) for i in range(6)], workers=2) as made:
        assert [next(made) for _ in range(3)] == [0, 1, 4]
        with pytest.raises(ValueError, match="task 3 failed") as failed:
            next(made)
    assert isinstance(failed.value.__cause__, pool.WorkerTraceback)  # where it failed, in the worker
    assert "in _fails_at" in str(failed.value.__cause__)


def _slept(index: int, seconds: float) -> tuple[int, int]:
    time.sleep(seconds)
    return index, os.getpid()


def test_the_longest_tasks_start_at_once_in_workers_of_their_own() -> None:
    """A task given ``first`` goes to a worker before the tasks ahead of it in the order, and that worker takes
    no other until it has answered (in the order, the first worker would have taken task 0 and the second task
    1); its result still comes at its turn."""
    tasks = [*((_slept, (i, 0.0)) for i in range(6)), (_slept, (6, 1.0)), (_slept, (7, 0.0))]
    with pool.in_order(tasks, workers=2, first=[6]) as made:
        got = list(made)
    assert [index for index, _ in got] == list(range(8))
    assert all(pid != got[6][1] for _, pid in got[:6])


def _touched(path: str) -> str:
    Path(path).touch()
    return path


def test_the_workers_are_given_their_first_tasks_before_the_first_result_is_asked_for(tmp_path) -> None:
    """A selftest enters ``in_order`` and then opens its device's session: the workers make the first tasks
    meanwhile, not from the first ``next`` on."""
    tasks = [(_touched, (str(tmp_path / f"{i}"),)) for i in range(4)]
    with pool.in_order(tasks, workers=2) as made:
        deadline = time.monotonic() + 60
        while not (tmp_path / "0").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (tmp_path / "0").exists(), "no task was given before the first result was asked for"
        assert list(made) == [str(tmp_path / f"{i}") for i in range(4)]


def test_leaving_early_waits_for_no_work_left() -> None:
    t0 = time.monotonic()
    with pool.in_order([(time.sleep, (60,)), (time.sleep, (60,))], workers=2):
        time.sleep(0.5)
    assert time.monotonic() - t0 < 20


def test_a_signal_while_the_workers_start_ends_them(monkeypatch) -> None:
    """A SIGTERM while the workers start (in their starter thread) is raised in the main thread, in the block,
    and cuts no start short: every worker, those started after it too, is ended as the block is left (one
    once escaped before the pool's try, leaving the workers to the exit, where a run could hang)."""
    started: list = []
    start = pool._start

    def starting(context, folder):
        started.append(start(context, folder))
        if len(started) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # handled in the main thread, while this one starts the next
        return started[-1]

    monkeypatch.setattr(pool, "_start", starting)
    with interruptions() as release:
        release()
        with pytest.raises(Interrupted) as stop:
            with pool.in_order([(abs, (-1,)), (abs, (-2,))], workers=2):
                time.sleep(30)  # the signal ends it
                pytest.fail("the block ran on")
        assert signal_of(stop.value) == signal.SIGTERM
    assert [w.process.exitcode for w in started] == [-signal.SIGKILL] * 2


def _big(size: int) -> bytes:
    return bytes(size)


def test_leaving_early_ends_workers_that_write_results_nobody_reads() -> None:
    """Results larger than a pipe holds, made ahead and never taken: the workers are blocked writing them when
    the block is left, and are killed there (multiprocessing.Pool's terminate() could wait for ever on the
    lock such a writer held)."""
    ended = threading.Event()

    def leave_early() -> None:
        with pool.in_order([(_big, (1 << 24,))] * 8, workers=2) as made:
            assert len(next(made)) == 1 << 24
            time.sleep(0.5)  # the workers meanwhile make the next results and block writing them
        ended.set()

    leaving = threading.Thread(target=leave_early, daemon=True)
    leaving.start()
    leaving.join(20)  # far beyond a kill and a join: past it, the block hung
    assert ended.is_set()


def _dies(status: int) -> None:
    os._exit(status)


def test_a_worker_that_dies_is_an_error_at_its_tasks_turn() -> None:
    with pool.in_order([(abs, (-1,)), (_dies, (3,)), (abs, (-2,))], workers=2) as made:
        assert next(made) == 1
        with pytest.raises(pool.WorkerError, match=r"exit status 3\) before the result of task 1"):
            next(made)


def _signalled() -> str:
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)
    return "still here"


def test_workers_ignore_ctrl_c_and_sigterm() -> None:
    """What a terminal or a CI runner sends the whole process group: the parent alone handles it."""
    with pool.in_order([(_signalled, ())] * 3, workers=2) as made:
        assert list(made) == ["still here"] * 3


def _without_times(record: dict) -> dict:
    for key in ("created", "environment", "argv"):
        record.pop(key)
    for check in record["checks"]:
        check.pop("seconds")
    return record


def test_topk_parity_selftest_records_the_same_with_worker_processes(monkeypatch, tmp_path) -> None:
    (tmp_path / "selftest.yaml").write_text(SMALL_TOPK_MATRIX)
    monkeypatch.setattr(topk_selftest_run, "SELFTEST_CONFIG", str(tmp_path / "selftest.yaml"))
    records = []
    for workers in (1, 2):
        monkeypatch.setattr(pool, "worker_count", lambda n=workers: n)
        settings = Settings(backend="cpu", seed=3, iters=0)
        record, rows = topk_selftest_run.topk_selftest(Opening(settings, session(settings, "topk-parity --selftest", [])))
        records.append(_without_times({**record.to_dict(), "checks": [vars(r) for r in rows]}))
    assert records[0] == records[1] and all(r["passed"] for r in records[0]["checks"])
    assert len(records[0]["parity"]) > 0


@pytest.mark.parametrize("check_model", [True, False])
def test_topk_parity_selftest_on_the_cpu_records_what_topk_parity_records_in_this_process(monkeypatch, tmp_path,
                                                                                         check_model) -> None:
    """On the CPU backend the workers run the models too: the record is topk-parity's, call by call, as this
    process alone makes it (the oracle's rows only with the model's check)."""
    (tmp_path / "selftest.yaml").write_text(SMALL_TOPK_MATRIX)
    monkeypatch.setattr(topk_selftest_run, "SELFTEST_CONFIG", str(tmp_path / "selftest.yaml"))
    monkeypatch.setattr(pool, "worker_count", lambda: 2)
    settings = Settings(backend="cpu", seed=3, iters=0, check_model=check_model)
    workers, rows = topk_selftest_run.topk_selftest(Opening(settings, session(settings, "topk-parity --selftest", [])))
    with session(settings, "topk-parity --selftest", []) as here:
        for call in dict.fromkeys(c.call for c in load_config(tmp_path / "selftest.yaml").cases("topk")):
            topk_parity(here, topk_score_sets(call, 3), call.active_blocks)
    assert [dataclasses.asdict(p) for p in workers.parity] == [dataclasses.asdict(p) for p in here.record.parity]
    assert workers.settings == here.record.settings
    assert len(rows) == 4 and all(r.passed for r in rows)
    assert any(p.against == CPU_ORACLE for p in here.record.parity) == check_model


def test_selftest_records_the_same_with_worker_processes(monkeypatch) -> None:
    monkeypatch.setattr(selftest_run, "SELFTEST_SCORER_CASES", ((4099, 2, 8192), (2049, 3, 2049)))
    monkeypatch.setattr(selftest_run, "SELFTEST_TOPK_CASES", ((4099, 8192),))
    records = []
    for workers in (1, 2):
        monkeypatch.setattr(pool, "worker_count", lambda n=workers: n)
        record, rows = selftest_run.selftest(Settings(seed=5), False, [])
        records.append(_without_times({**record.to_dict(), "checks": [vars(r) for r in rows]}))
    assert records[0] == records[1]
    assert [r["passed"] for r in records[0]["checks"]] == [True, True, True, None]  # no device here


def test_selftests_kernels_rows_run_each_case_made_once_for_both_rows(monkeypatch) -> None:
    """With a device, a worker makes each case's inputs and CPU models once, for the models' row and the
    kernels' row, which runs the case as it comes. A second CPU session stands for the GPU's here (its
    "kernels" are the models): its rows and parity rows are the models' rows, check for check."""
    monkeypatch.setattr(selftest_run, "SELFTEST_SCORER_CASES", ((4099, 2, 8192),))
    monkeypatch.setattr(selftest_run, "SELFTEST_TOPK_CASES", ((4099, 8192),))
    monkeypatch.setattr(selftest_run, "DISPATCH_CALL", Call(8201, 4, 16384))  # made and left, as 420K would be
    rows: list[SelftestCheck] = []
    with session(Settings(backend="cpu", seed=5, iters=0), "selftest", []) as s, \
            session(Settings(backend="cpu", seed=5, iters=0), "selftest", []) as gpu:
        tasks = selftest_run._tasks(s, 5, on_gpu=True)
        with pool.in_order(tasks, workers=2) as made:
            selftest_run._models_rows(s, gpu, made, rows, no_progress, 8)
            dispatch = list(made)
    assert len(tasks) == 2 + 2 * len(SCORE_SETS) + len(dispatch)  # each case once: 1 scorer call x 2 keys, 2 top-k calls
    # every function the selftests give the workers (topk-parity --selftest's are two of these) is in a module
    # the workers' server has imported before it forks them
    assert {function.__module__ for function, _ in tasks} <= set(pool.PRELOADED)
    assert len(dispatch) == 2 + len(SCORE_SETS)  # left for the dispatch's row
    assert [r.check.split(" (")[0] for r in rows] == ["scorer models", "top-k models", "scorer kernels", "top-k kernels"]
    assert [r.cases for r in rows[2:]] == [r.cases for r in rows[:2]] and all(r.passed for r in rows)
    assert rows[0].cases > 0 and rows[1].cases > 0
    assert [dataclasses.asdict(p) for p in gpu.record.parity] == [dataclasses.asdict(p) for p in s.record.parity]


def test_a_model_made_beforehand_is_what_every_variant_is_checked_against() -> None:
    """The stages take the CPU model's output made by a worker; a wrong one fails every variant's check."""
    catalog = qsa_catalog()
    roles = {"reference": "reference", "baseline": "wide", "candidate": "split"}
    inputs = synthetic_scores(CALLS[0], "adversarial", 11)
    oracle = topk_ids(inputs, "oracle")
    variants = tuple(catalog.get("topk", n) for n in ("reference", "split"))
    for given, equal in ((oracle, True), (oracle[::-1].copy(), False)):
        out = topk_stage.run_topk(inputs, Measurer(0), variants, roles, None, oracle=given)
        assert [p.equal for p in out.parity if p.against == CPU_ORACLE] == [equal, equal]
    scorer = synthetic_scorer_inputs(Call(4099, 3, 8192), 11, "adversarial")
    model = score_blocks(scorer, "butterfly")
    wrong = model.copy()
    wrong[0, 0] += 1
    scorers = tuple(catalog.get("scores", n) for n in ("multi", "halve"))
    scorer_roles = {"reference": "reference", "baseline": "multi", "candidate": "halve"}
    for given, equal in ((model, True), (wrong, False)):
        out = scores_stage.run_scores(scorer, Measurer(0), scorers, scorer_roles, None, model=given)
        assert [p.equal for p in out.parity if p.against == CPU_MODEL] == [equal, equal]


def test_a_starter_that_cannot_start_raises_its_own_error(monkeypatch) -> None:
    """A machine out of threads: the start's own error leaves in_order, not a join of a thread never started."""
    def refused(self) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(pool._Starter, "start", refused)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        with pool.in_order([(abs, (-1,)), (abs, (-2,))], workers=2):
            pytest.fail("the block ran")


def _memory_of(array: np.ndarray) -> object:
    """What an array received from a worker is made of: the mmap of the file the worker left its data in, or
    the array it was read into from the pipe."""
    base = array.base
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


def test_an_answers_arrays_are_the_pages_of_the_file_the_worker_left_them_in(monkeypatch, tmp_path) -> None:
    """The file is gone once the answer is taken, and the run's folder once the block is left."""
    monkeypatch.setattr(pool, "SHARED_MEMORY", str(tmp_path))
    with pool.in_order([(_arrays, (seed,)) for seed in range(3)], workers=2) as made:
        (folder,) = tmp_path.iterdir()
        got = list(made)
        assert not list(folder.iterdir())
    assert not list(tmp_path.iterdir())
    assert all(type(_memory_of(a[name])).__name__ == "mmap" for a in got for name in ("big", "c"))
    assert [a["fortran"].tobytes() for a in got] == [_arrays(seed)["fortran"].tobytes() for seed in range(3)]


def test_an_answers_arrays_come_through_the_pipe_where_no_file_can_hold_them(monkeypatch, tmp_path) -> None:
    """Where the workers cannot leave an answer's data in a file (a full /dev/shm), it follows the pickle
    through the pipe, the same bits."""
    unwritable = tmp_path / "not-a-folder"  # no file can be made in it, by root either
    unwritable.touch()
    monkeypatch.setattr(pool.tempfile, "mkdtemp", lambda **_: str(unwritable))
    with pool.in_order([(_arrays, (seed,)) for seed in range(3)], workers=2) as made:
        got = list(made)
    assert all(isinstance(_memory_of(a[name]), np.ndarray) for a in got for name in ("big", "c"))
    assert [a["strided"].tobytes() for a in got] == [_arrays(seed)["strided"].tobytes() for seed in range(3)]
