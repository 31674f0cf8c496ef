"""A run weighs its largest case against this machine's memory before it starts (core/memory.py): the host's on
both backends, the device's on the GPU backend. It says what it needs when that is large, and one that cannot
fit is refused, one line and exit 2, before anything is made or measured. The free memory is faked here: the
host's (MemAvailable) and the device's (memGetInfo, behind memory.free_device_bytes)."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from qsa_cli.catalog import qsa_catalog
from qsa_cli.cli import main
from qsa_cli.config import load_config
from qsa_cli.core import memory
from qsa_cli.core.errors import MemoryNeedError
from qsa_cli.core.geometry import MAX_CAPACITY, Call
from qsa_cli.core.memory import CaseSize
from qsa_cli.launch.shape import Card
from qsa_cli.launch.topk import split_grid
from qsa_cli.record.schema import RunRecord
from qsa_cli.runs.sweep import sweep_sizes
from qsa_cli.session import Session, Settings, check_device_memory

ROOT = Path(__file__).resolve().parent.parent
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "sms": 132, "l2_bytes": 50 * 2**20}
GB = 10**9


def _refused(capsys, tmp_path, argv: list[str]) -> str:
    """The one line a refused run ends with (exit 2, nothing on stdout, nothing written)."""
    with pytest.raises(SystemExit) as ended:
        main([*argv, "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert (ended.value.code, out) == (2, "") and list(tmp_path.iterdir()) == [], err
    assert err.startswith("qsa: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_the_host_estimate_bounds_the_measured_runs() -> None:
    """Above each peak measured on the CPU backend (core/memory.py), and near it."""
    largest = memory.host_bytes(CaseSize.of("scores", Call(MAX_CAPACITY, 1, MAX_CAPACITY)), on_gpu=False)
    assert 8.5e9 < largest < 9.0e9  # the issue's run took 8.5 GB
    measured = [(CaseSize.of("scores", Call(1 << 20, 8, 1 << 20)), 629e6),
                (CaseSize.of("topk", Call(4 << 20, 8, 4 << 20, prompt=False), held=4), 364e6),
                (CaseSize.of("topk", Call(4 << 20, 8, 4 << 20, prompt=False)), 260e6),
                (CaseSize.of("topk", Call(8192, 1024, 8192, prompt=True), held=4), 309e6)]
    for case, peak in measured:
        assert peak < memory.host_bytes(case, on_gpu=False) < 1.6 * peak, case
    small = CaseSize.of("scores", Call(4096, 2, 8192))
    assert memory.host_bytes(small, on_gpu=True) - memory.host_bytes(small, on_gpu=False) == 1 << 30


def test_the_issues_run_past_the_available_memory_is_one_line_before_anything_runs(capsys, tmp_path,
                                                                                 monkeypatch) -> None:
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 4 * GB)
    err = _refused(capsys, tmp_path, ["select-bench", "16777216", "1", "1", "16777216", "--backend", "cpu"])
    assert err == ("qsa: error: select-bench needs about 8.8 GB of host memory on the CPU backend (its largest "
                   "case: scores nq=1 capacity=16777216 decode); this machine has 4.0 GB available\n")


def test_a_top_k_call_is_weighed_with_its_score_sets_made_at_once(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 16 * GB)
    err = _refused(capsys, tmp_path, ["topk-parity", "4M", "1024", "1", "4M", "--backend", "cpu"])
    assert "topk-parity needs about 43.2 GB of host memory on the CPU backend (its largest case: topk nq=1024 " \
           "capacity=4194304 prompt); this machine has 16.0 GB available" in err
    sets = CaseSize.of("topk", Call(1 << 22, 1024, 1 << 22, prompt=True), held=4)
    one = CaseSize.of("topk", Call(1 << 22, 1024, 1 << 22, prompt=True))
    assert memory.host_bytes(sets, False) - memory.host_bytes(one, False) == 3 * sets.scores_bytes


def test_a_sweep_is_weighed_by_its_largest_case(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 2 * GB)
    sweep = tmp_path / "big.yaml"
    sweep.write_text("iterations: 1\nmatrix:\n"
                     "  - {stages: [scores], contexts: [4096], queries: [1], capacity: 8192}\n"
                     "  - {stages: [scores], contexts: [4M], queries: [2], capacity: 4M}\n"
                     "  - {stages: [topk], contexts: [1M], queries: [8], capacity: 4M}\n")
    (tmp_path / "out").mkdir()
    err = _refused(capsys, tmp_path / "out", ["sweep", str(sweep), "--backend", "cpu"])
    assert "qsa: error: sweep needs about 2.3 GB of host memory on the CPU backend (its largest case: scores nq=2 " \
           "capacity=4194304 decode); this machine has 2.0 GB available" in err
    config = load_config(sweep)  # topk-parity --config weighs its top-k case alone, which fits
    assert [c.stage for c in sweep_sizes(config, "topk")] == ["topk"] and len(sweep_sizes(config)) == 3


def test_a_containers_memory_limit_is_what_it_can_have(tmp_path) -> None:
    """A cgroup's limit (a container's, which MemAvailable does not see) less its usage, less the file cache it
    could drop; the least of the process's cgroup and those above it; none where no limit is set."""
    v2 = tmp_path / "v2"
    for folder, limit, usage, cache in ((v2, "max", 9 * GB, 0), (v2 / "ci", 8 * GB, 3 * GB, GB),
                                        (v2 / "ci" / "job", "max", 2 * GB, 0)):
        folder.mkdir(parents=True)
        (folder / "memory.max").write_text(f"{limit}\n")
        (folder / "memory.current").write_text(f"{usage}\n")
        (folder / "memory.stat").write_text(f"anon 5\ninactive_file {cache}\n")
    (tmp_path / "cgroup-v2").write_text("0::/ci/job\n")
    assert memory.cgroup_room(v2, tmp_path / "cgroup-v2") == 6 * GB  # /ci's 8 GB less 3 in use, 1 of it cache
    v1 = tmp_path / "v1" / "memory" / "docker" / "abc"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(4 * GB))
    (v1 / "memory.usage_in_bytes").write_text(str(GB))
    (v1 / "memory.stat").write_text("total_inactive_file 0\n")
    (tmp_path / "cgroup-v1").write_text("5:cpu:/\n4:memory:/docker/abc\n0::/\n")
    assert memory.cgroup_room(tmp_path / "v1", tmp_path / "cgroup-v1") == 3 * GB
    (v1 / "memory.limit_in_bytes").write_text(str(2**63 - 4096))  # v1's "no limit"
    assert memory.cgroup_room(tmp_path / "v1", tmp_path / "cgroup-v1") is None
    assert memory.cgroup_room(tmp_path / "v1", tmp_path / "no-such-file") is None


def test_an_address_space_ulimit_refuses_the_run_it_would_break(tmp_path) -> None:
    """``ulimit -v``: without the check, numpy's first large array failed with a MemoryError's traceback."""
    limit = 1536 << 20
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}  # its buffers a thread count too
    res = subprocess.run([sys.executable, "-m", "qsa_cli", "select-bench", "4M", "1", "1", "4M", "--backend", "cpu"],
                         cwd=tmp_path, capture_output=True, text=True, env=env,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert (res.returncode, res.stdout) == (2, "") and res.stderr.count("\n") == 1, res.stderr
    assert re.fullmatch(r"qsa: error: select-bench needs about 2\.3 GB of host memory on the CPU backend \(its largest "
                        r"case: scores nq=1 capacity=4194304 decode\); this machine has \d\.\d GB available\n",
                        res.stderr), res.stderr


def test_memory_past_the_estimate_is_one_line(capsys, monkeypatch) -> None:
    """A backstop: an allocation that fails though the run was weighed (numpy's MemoryError, CuPy's
    OutOfMemoryError, which is one) ends in one line, exit 2, no traceback."""
    def refused(*args: object) -> None:
        raise MemoryError("Unable to allocate 2.00 GiB for an array with shape (4194306, 128) and data type float32")

    monkeypatch.setattr("qsa_cli.commands.select_bench.scorer_inputs", refused)
    with pytest.raises(SystemExit) as ended:
        main(["select-bench", "4096", "2", "1", "8192", "--backend", "cpu"])
    out, err = capsys.readouterr()
    assert (ended.value.code, out) == (2, "")
    assert err == ("qsa: error: out of memory: Unable to allocate 2.00 GiB for an array with shape (4194306, 128) "
                   "and data type float32\n")


def test_a_large_run_that_fits_is_said_and_a_small_one_is_not(capsys, monkeypatch) -> None:
    large = [CaseSize.of("scores", Call(MAX_CAPACITY, 1, MAX_CAPACITY))]
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 64 * GB)
    assert memory.check_host("select-bench", [CaseSize.of("scores", Call(4096, 2, 8192))], on_gpu=False) is None
    told = memory.check_host("select-bench", large, on_gpu=False)
    assert told == "qsa: this run needs about 8.8 GB of host memory of the 64.0 GB available"
    memory.tell(told, None)
    assert capsys.readouterr().err == told + "\n"
    monkeypatch.setattr(memory, "available_host_bytes", lambda: None)  # a system that does not say: never refused
    assert memory.check_host("select-bench", large, on_gpu=False) == "qsa: this run needs about 8.8 GB of host memory"
    assert memory.check_host("info", [], on_gpu=False) is None  # a run of no sizes is not weighed
    monkeypatch.setattr(memory, "available_host_bytes", lambda: GB)
    with pytest.raises(MemoryNeedError, match="on the GPU backend"):
        memory.check_host("compare", large, on_gpu=True)


def test_a_case_on_the_device_is_its_guarded_arrays_their_copies_and_its_scratch() -> None:
    """Worked by hand: a scorer case of 2 queries at capacity 8192 (2050 blocks)."""
    case = CaseSize.of("scores", Call(4096, 2, 8192))
    # keys 2050 x 512 = 1049600 B, dead 512, queries 2 x 512, steps 2 x 16, scores 2 x 2050 x 4 = 16400, each
    # between two guard zones of 4096 B and rounded up to 256 B: 1057792 + 8704 + 9216 + 8448 + 24832 B;
    # a pristine copy of each input (1051168 B), the scores' poison (16400 B), the comparison of the keys (a boolean
    # an 8-byte word: 131200 B)
    assert memory.device_case_bytes(case, [], argpartition=False) == 1108992 + 1051168 + 16400 + 131200
    topk = CaseSize.of("topk", Call(4096, 2, 8192, prompt=True))  # 1025 active blocks
    bare = memory.device_case_bytes(topk, [], argpartition=False)
    assert memory.device_case_bytes(topk, [1000], argpartition=False) - bare == 2 * 4096 + 1024
    assert memory.device_case_bytes(topk, [], argpartition=True) - bare == 48 * 2 * 1025
    assert memory.device_run_bytes(100, 10, children=False) == 110 + memory.DEVICE_SLACK_BYTES
    assert memory.device_run_bytes(100, 10, children=True) == 2 * (110 + memory.DEVICE_SLACK_BYTES) + (512 << 20)


def _gpu_session(*sizes: CaseSize, iters: int = 1, l2: str = "clean") -> Session:
    """A GPU session as session() leaves it before it weighs the device: an H100's record, qsa's catalog."""
    record = RunRecord("topk-parity", [], "gpu", device=dict(H100))
    return Session(Settings(backend="gpu", iters=iters, l2=l2, sizes=sizes), record, qsa_catalog(),
                   card=Card(90, 232448))


def test_a_run_past_the_devices_free_memory_is_one_line_naming_both(capsys, monkeypatch) -> None:
    monkeypatch.setattr(memory, "free_device_bytes", lambda: (20 * GB, 85 * GB))
    prompt = CaseSize.of("topk", Call(1 << 22, 1024, 1 << 22, prompt=True), held=4)
    with pytest.raises(MemoryNeedError) as refused:
        check_device_memory(_gpu_session(CaseSize.of("scores", Call(4096, 2, 8192)), prompt), "topk-parity")
    assert str(refused.value) == ("topk-parity needs about 61.7 GB of device memory (its largest case: topk nq=1024 "
                                  "capacity=4194304 prompt); device 0 (NVIDIA H100 80GB HBM3) has 20.0 GB free of "
                                  "85.0 GB")
    monkeypatch.setattr(memory, "free_device_bytes", lambda: (70 * GB, 85 * GB))
    assert check_device_memory(_gpu_session(prompt), "topk-parity") == (
        "qsa: this run needs about 61.7 GB of device memory of the 70.0 GB free on device 0 (NVIDIA H100 80GB HBM3)")


def test_what_the_device_check_weighs(monkeypatch) -> None:
    """The split's scratch in a top-k case (three times in a window's), the sort only where the case is timed,
    the flush buffer only where the L2 is flushed; a run of no sizes, or that runs no stage, is not weighed."""
    seen: list[int] = []
    monkeypatch.setattr("qsa_cli.session.check_device", lambda command, needs, device: seen.append(needs[0][1]))
    call = Call(1 << 20, 8, 1 << 20)
    for size, iters, l2 in [(CaseSize.of("topk", call), 1, "clean"), (CaseSize.of("topk", call), 0, "clean"),
                            (CaseSize.of("topk", call), 0, "warm"), (CaseSize.of("window", call), 1, "clean"),
                            (CaseSize.of("scores", call), 1, "clean")]:
        check_device_memory(_gpu_session(size, iters=iters, l2=l2), "run")
    timed, parity, warm, window, scores = seen
    blocks = (1 << 20) // 4 + 2
    assert timed - parity == 48 * 8 * blocks  # cupy.argpartition's sort, in the timed case only
    assert parity - warm == 2 * 2 * 50 * 2**20  # the flush buffer, twice the L2, and its making
    chunks = split_grid(blocks, 8, H100["sms"]).chunks  # the split's scratch: hist, select, suffix, arrivals
    split = sum(2 * 4096 + -(-n // 256) * 256 for n in (8 * 4 * 256 * 4, 8 * 3 * 2 * 4, 8 * chunks * 257 * 4, 8 * 4))
    ids = 8 * 2051 * 4
    assert window - scores == 3 * split + 2 * 4096 + -(-ids // 256) * 256 + ids  # the ids, their poison, the scratch
    check_device_memory(_gpu_session(), "info")
    check_device_memory(_gpu_session(CaseSize.of("topk", call), iters=None), "info")  # type: ignore[arg-type]
    assert len(seen) == 5
