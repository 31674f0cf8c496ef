"""The GPU tests' builds made beforehand (tests/fake_builds.py), on the CPU: each option set names its own
tree, the trees are the checkouts their options write, and builds made at once are the cache hits of the
same files written elsewhere, as the GPU tests write them."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fake_adapter import ADAPTER, write_adapter
from fake_builds import BESIDE, ENGINES, OWN, build_all, write_fake_builds
from fake_engine import NEWER, SEED, write_fake_engine
from fake_nvcc import compiles, write_fake_nvcc

from qsa_cli.engine.adapter import CHECKOUT_ADAPTER, adapter_source
from qsa_cli.engine.build import build_engine
from qsa_cli.engine.checkout import ENGINE_FILES, EngineCheckout


def files_of(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}


def test_each_option_set_names_the_tree_it_writes(tmp_path: Path) -> None:
    builds = write_fake_builds(tmp_path / "builds")
    assert builds.with_options() == builds.with_options(generation=SEED, flip="") == builds.engine("plain")
    assert builds.with_options(flip="topk-multi", generation=NEWER) == builds.engine("newer-flip-multi")
    for name, options in ENGINES.items():
        assert files_of(builds.engine(name)) == files_of(write_fake_engine(tmp_path / "again" / name, **options))
    assert len({files_of(builds.engine(name))[ENGINE_FILES[0]] for name in ENGINES}) == len(ENGINES)
    with pytest.raises(KeyError, match="add it to fake_builds.ENGINES"):
        builds.with_options(flip="topk-ref")
    assert builds.adapter_file.read_text() == ADAPTER and builds.adapter_file.parent == builds.adapter_checkout.parent
    assert (builds.own_adapter_checkout / CHECKOUT_ADAPTER).read_text() == ADAPTER
    jobs = builds.jobs()
    assert set(jobs) == {*ENGINES, BESIDE, OWN}
    assert jobs[BESIDE][1] is not None and jobs[BESIDE][1].origin == "--adapter"
    assert jobs[OWN][1] is not None and jobs[OWN][1].origin == "checkout"
    assert all(adapter is None for name, (_, adapter) in jobs.items() if name in ENGINES)


def test_builds_made_at_once_are_found_by_the_same_files_elsewhere(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Two builds at once for sm_90 (one with its own adapter), the caller's work done meanwhile in its own
    thread; the same files written in other folders, as a GPU test writes them, are then cache hits. The
    cache's keys are the rule here, so nvcc's stand-in builds (tests/fake_nvcc.py)."""
    monkeypatch.setenv("QSA_CACHE_DIR", str(tmp_path / "cache"))
    nvcc = write_fake_nvcc(tmp_path / "fake-nvcc")
    jobs = write_fake_builds(tmp_path / "builds").jobs()
    ran_in: list[threading.Thread] = []
    made = build_all([jobs["newer"], jobs[OWN]], 90, meanwhile=lambda: ran_in.append(threading.current_thread()),
                     nvcc=nvcc)
    assert [b.compiled for b in made] == [True, True] and ran_in == [threading.current_thread()]
    newer = EngineCheckout(write_fake_engine(tmp_path / "elsewhere" / "newer", generation=NEWER), "new")
    assert not build_engine(newer, 90, nvcc).compiled
    own = write_fake_engine(tmp_path / "elsewhere" / "own")
    write_adapter(own / CHECKOUT_ADAPTER, ADAPTER)
    checkout = EngineCheckout(own, "own")
    again = build_engine(checkout, 90, nvcc, adapter=adapter_source(checkout, None))
    assert not again.compiled and again.library == made[1].library
    assert compiles(nvcc) == 2
