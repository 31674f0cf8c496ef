"""A scorer call on the CPU backend says what host memory it needs before it starts when that is large, and is
refused, one line and exit 2, when this machine has not that much available."""

from __future__ import annotations

import pytest

from qsa_cli.cli import main
from qsa_cli.core import memory
from qsa_cli.core.errors import GeometryError
from qsa_cli.core.geometry import MAX_CAPACITY, Call


def test_the_estimate_is_four_times_the_keys_and_the_interpreter() -> None:
    call = Call(MAX_CAPACITY, 1, MAX_CAPACITY)
    keys = (MAX_CAPACITY // 4 + 2) * 512
    assert memory.scorer_host_bytes(call) == 4 * keys + (64 << 20)
    assert 8.5e9 < memory.scorer_host_bytes(call) < 8.8e9  # the run took 8.5 GB


def test_a_run_past_the_available_memory_is_one_line_before_anything_runs(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 4 * 10**9)
    with pytest.raises(SystemExit) as ended:
        main(["select-bench", "16M", "1", "1", "16M", "--backend", "cpu", "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert (ended.value.code, out) == (2, "") and list(tmp_path.iterdir()) == []
    assert err == ("qsa: error: select-bench at capacity 16777216 needs about 8.7 GB of host memory on the CPU "
                   "backend (4x its 2.1 GB of keys); this machine has 4.0 GB available\n")


def test_a_large_run_that_fits_is_said_and_a_small_one_is_not(capsys, monkeypatch) -> None:
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 64 * 10**9)
    memory.check_scorer_fits(Call(4096, 2, 8192), "select-bench")
    assert capsys.readouterr().err == ""
    memory.check_scorer_fits(Call(MAX_CAPACITY, 1, MAX_CAPACITY), "select-bench")
    assert capsys.readouterr().err == ("qsa: this run needs about 8.7 GB of host memory of the 64.0 GB available on "
                                       "the CPU backend\n")
    monkeypatch.setattr(memory, "available_host_bytes", lambda: None)  # a system that does not say: never refused
    memory.check_scorer_fits(Call(MAX_CAPACITY, 1, MAX_CAPACITY), "compare")
    assert "needs about 8.7 GB" in capsys.readouterr().err
    with pytest.raises(GeometryError):
        monkeypatch.setattr(memory, "available_host_bytes", lambda: 10**9)
        memory.check_scorer_fits(Call(MAX_CAPACITY, 1, MAX_CAPACITY), "compare")
