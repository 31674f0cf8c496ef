"""On a card: a run no card holds is refused by the device's check, one line, before anything is made; and the
estimate the check weighs (core/memory.py) bounds what each kind of case really takes of CuPy's pool."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from qsa_cli import session
from qsa_cli.cli import main
from qsa_cli.core import memory
from qsa_cli.core.memory import CaseSize

pytestmark = pytest.mark.gpu


def test_a_call_no_card_holds_is_refused_before_anything_is_made(capsys, tmp_path, monkeypatch) -> None:
    """16M cells and 1024 prompt queries: 17 GB of scores a copy, 206 GB of cupy.argpartition's sort, on the
    real card's free memory (the host's check passed, so that the device's is what answers)."""
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 10**15)

    def made(*args: object) -> None:
        raise AssertionError("inputs made before the device was weighed")

    monkeypatch.setattr("qsa_cli.commands.topk_parity.topk_score_sets", made)
    with pytest.raises(SystemExit) as ended:
        main(["topk-parity", "16M", "1024", "1", "16M", "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert (ended.value.code, out) == (2, "") and list(tmp_path.iterdir()) == [], err
    assert err.startswith("qsa: error: topk-parity needs about ") and err.count("\n") == 1, err
    assert " GB of device memory (its largest case: topk nq=1024 capacity=16777216 prompt); device 0 (" in err, err
    assert " GB free of " in err and "Traceback" not in err


RUNS = [("select-bench", "1M", "8", "2", "1M"), ("topk-parity", "1M", "8", "2", "1M", "0"),
        ("topk-parity", "256K", "64", "2", "256K"), ("window-bench", "1M", "8", "2", "1M")]


@pytest.mark.parametrize("argv", RUNS, ids=[" ".join(a) for a in RUNS])
def test_the_estimate_bounds_what_a_run_takes_of_the_pool(capsys, monkeypatch, argv: tuple[str, ...]) -> None:
    """CuPy's pool keeps every block it took from the driver, so what it holds after the run (less what was in
    use before) is the most the run had at once, fragments included: the need weighed must be at least that."""
    import cupy

    weighed: list[int] = []

    def weigh(command: str, needs: Sequence[tuple[CaseSize, int]], device: str) -> None:
        weighed.append(memory.largest(needs)[1])
        memory.check_device(command, needs, device)

    monkeypatch.setattr(session, "check_device", weigh)
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    before = pool.used_bytes()
    with pytest.raises(SystemExit) as ended:
        main([*argv, "--quiet"])
    assert ended.value.code == 0, capsys.readouterr().err
    took = pool.total_bytes() - before
    assert len(weighed) == 1 and took <= weighed[0], (took, weighed)
