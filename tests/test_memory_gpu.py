"""On a card: a run no card holds is refused by the device's check, one line, before anything is made; the
estimate the check weighs (core/memory.py) bounds what each kind of case really takes of CuPy's pool; and the
scratch it weighs for each top-k variant is what that variant's launcher takes."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from fake_builds import OWN, FakeBuilds

from qsa_cli import session
from qsa_cli.catalog import qsa_catalog
from qsa_cli.cli import main
from qsa_cli.core import memory
from qsa_cli.core.errors import ClusterUnavailable, EngineRefused
from qsa_cli.core.geometry import SELECT_CAP, Call
from qsa_cli.core.memory import CaseSize
from qsa_cli.engine.attach import attached
from qsa_cli.inputs import synthetic_scores

pytestmark = pytest.mark.gpu


def test_a_call_no_card_holds_is_refused_before_anything_is_made(cupy: Any, capsys, tmp_path, monkeypatch) -> None:
    """16M cells and 1024 prompt queries: 17 GB of scores a copy, 206 GB of cupy.argpartition's sort, on the
    real card's free memory (the host's check passed, so that the device's is what answers, in one line: the
    host's need is said only once every check has passed)."""
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
def test_the_estimate_bounds_what_a_run_takes_of_the_pool(cupy: Any, capsys, monkeypatch,
                                                           argv: tuple[str, ...]) -> None:
    """CuPy's pool keeps every block it took from the driver, so what it holds after the run (less what was in
    use before) is the most the run had at once, fragments included: the need weighed must be at least that."""
    import cupy

    weighed: list[int] = []

    def weigh(command: str, needs: Sequence[tuple[CaseSize, int]], device: str) -> str | None:
        weighed.append(memory.largest(needs)[1])
        return memory.check_device(command, needs, device)

    monkeypatch.setattr(session, "check_device", weigh)
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    before = pool.used_bytes()
    with pytest.raises(SystemExit) as ended:
        main([*argv, "--quiet"])
    assert ended.value.code == 0, capsys.readouterr().err
    took = pool.total_bytes() - before
    assert len(weighed) == 1 and took <= weighed[0], (took, weighed)


class Taken:
    """An allocator that keeps the bytes of each scratch array a launcher takes from it."""

    def __init__(self, cupy: Any) -> None:
        self.cupy, self.sizes = cupy, []

    def zeros(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        array = self.cupy.zeros(shape, dtype=dtype)
        self.sizes.append(array.nbytes)
        return array


@pytest.mark.parametrize("tree", ["newer", "own"], ids=["engine split and multi-CTA", "adapter's staged top-k"])
def test_each_top_k_variants_scratch_is_what_its_launcher_takes(cupy: Any, fake_builds: FakeBuilds, monkeypatch,
                                                                 tree: str) -> None:
    """What the check weighs of a variant's scratch (launch/shape.TopkShape.scratch_bytes) against what its
    launcher allocates, for qsa's split and an engine checkout's and an adapter's variants."""
    device = cupy.cuda.Device()
    cc, sms = int(device.compute_capability), int(device.attributes["MultiProcessorCount"])
    path = fake_builds.root / OWN if tree == "own" else fake_builds.engine(tree)
    with attached((f"fake={path}",), cc) as found:
        catalog = qsa_catalog().adding(found.variants, found.libraries)
        weighed = 0
        for call in (Call(1 << 20, 8, 1 << 20), Call(5000, 3, 8192)):
            made = synthetic_scores(call, "continuous", 0)
            scores, steps = cupy.asarray(made.scores), cupy.asarray(made.steps)
            ids = cupy.empty((call.nq, SELECT_CAP), dtype=np.int32)
            for v in catalog.stage("topk"):
                for name, value in v.engine.switches if v.engine is not None else ():
                    monkeypatch.setenv(name, value)  # the process a switched variant runs in has them
                taken = Taken(cupy)
                try:
                    catalog.build(v, scores, steps, ids, active_blocks=0, scratch=taken, switches={})
                except (EngineRefused, ClusterUnavailable):
                    continue
                sizes = v.launch.scratch_bytes(v, functools.partial(catalog.code, v), call.nq, call.max_blocks, sms)
                assert taken.sizes == list(sizes), (v.name, call)
                weighed += bool(sizes)
        assert weighed >= 2  # qsa's split, and the checkout's or the adapter's own
