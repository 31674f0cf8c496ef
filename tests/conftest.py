import fcntl
import os
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_builds import FakeBuilds, build_all, write_fake_builds

from qsa_cli.catalog import Launcher, qsa_catalog
from qsa_cli.core.errors import EngineError
from qsa_cli.engine.build import find_nvcc
from qsa_cli.kernels import kernel_dir
from qsa_cli.timing import DeviceTimer

QSA = qsa_catalog()  # qsa's own variants, from the installed kernels


# Every test this run collected, before ``-m`` deselected any: nodeid -> its marks' names (tests/test_markers.py
# checks the suites' marks on them, with no second collection)
COLLECTED: pytest.StashKey[dict[str, set[str]]] = pytest.StashKey()


# The suite's longest CPU tests (14-17 s of a worker each on CI's 2 cores): run first, so that no worker is left
# idle at the end while another compiles (at their files' places in the order, the README's test command took 3.6-6.2 %
# longer, three runs of each in turns)
LONGEST_FIRST = "compiles_for_every_card"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[COLLECTED] = {item.nodeid: {mark.name for mark in item.iter_markers()} for item in items}
    items.sort(key=lambda item: LONGEST_FIRST not in item.name)  # stable: the rest keep their order


# the quick GPU suite's workers (pytest-xdist): they share one card, whose kernels are short next to each
# test's CPU work (the models, the oracle, the builds' loading); a test that times the card takes it alone
# (``alone``, below), so more workers only queue behind it
GPU_WORKERS = 4


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The CPU tests (the default ``-m 'not gpu'``) over every core, as pytest-xdist's ``-n auto`` would, and
    the quick GPU suite (``-m 'gpu and not slow'``) over GPU_WORKERS: they share no state but the files they
    make in their own temporary folders (and the card, which the ``alone`` tests take for themselves). A run
    that names its workers (``-n``), selects other tests (the slow GPU suite: the sanitizer's children) or
    debugs (``--pdb``) is left as it is, and so is a machine without pytest-xdist. A worker (``workerinput``)
    runs its tests itself."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return
    if config.option.numprocesses is not None or config.option.usepdb:
        return
    selected = config.option.markexpr.replace(" ", "")
    if selected == "notgpu":
        config.option.numprocesses = "auto"
    elif selected == "gpuandnotslow":
        config.option.numprocesses = GPU_WORKERS


@pytest.fixture(autouse=True)
def the_device_shared_or_alone(request: pytest.FixtureRequest,
                               tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A GPU test holds the device's lock shared, an ``alone`` one exclusive, so that a test that times the
    card never shares it with another worker's kernels. A turnstile taken before the lock lets a waiting
    ``alone`` test in before the shared holders that come after it (flock alone would let them starve it)."""
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    folder = tmp_path_factory.getbasetemp().parent  # the run's, shared by its workers
    alone = request.node.get_closest_marker("alone") is not None
    with open(folder / "qsa-device.turnstile", "a") as turnstile, open(folder / "qsa-device.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


def older_kernels(folder: Path) -> Path:
    """A copy of the installed kernels older than the quarters scorer: its source defines no quarters kernel."""
    folder.mkdir()
    for path in kernel_dir().iterdir():
        if path.is_file():
            (folder / path.name).write_bytes(path.read_bytes())
    onepass = folder / "scores_onepass.cu"
    onepass.write_text(onepass.read_text().replace("block_scores_quarters_kernel", "block_scores_later_kernel"))
    return folder


@pytest.fixture(autouse=True)
def work_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's CPU work made in the test's own process (runs/pool.py), where a test's monkeypatch of a model
    or an input reaches it; tests/test_pool.py runs the worker processes."""
    monkeypatch.setattr("qsa_cli.runs.pool.worker_count", lambda: 1)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A fresh generator per test, seeded from QSA_TEST_SEED or the test's name (its CRC: the same in every run
    and worker, where Python's hash of a string is not); the seed is printed."""
    seed = int(os.environ.get("QSA_TEST_SEED", zlib.crc32(request.node.nodeid.encode()) % 2**31))
    print(f"seed={seed} (rerun with QSA_TEST_SEED={seed})")
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def cupy():
    """CuPy with a CUDA device, else the GPU test is skipped (never failed) on this machine."""
    cupy = pytest.importorskip("cupy")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, no device: whatever CuPy raises
        pytest.skip(f"no CUDA device ({exc})")
    if count == 0:
        pytest.skip("no CUDA device")
    return cupy


def compile_qsa_kernels(compute_capability: int) -> None:
    """qsa's kernels of every variant this card runs, and the timer's, compiled for it (NVRTC; kept in this
    process and in the disk cache, where a run's child finds them)."""
    for variant in {v.source: v for v in QSA.variants if v.runs_on(compute_capability)}.values():
        QSA.compiled(variant)
    DeviceTimer(l2="warm")


@pytest.fixture(scope="session")
def fake_builds(cupy: Any, tmp_path_factory: pytest.TempPathFactory) -> FakeBuilds:
    """Every fake engine build the GPU tests make (tests/fake_builds.py), made for this device at once: nvcc a
    build a core, and qsa's kernels compiled meanwhile; later builds of the same files are cache hits. Skipped
    without nvcc."""
    try:
        find_nvcc()
    except EngineError as exc:
        pytest.skip(str(exc))
    builds = write_fake_builds(tmp_path_factory.mktemp("fake-builds"))
    cc = int(cupy.cuda.Device().compute_capability)
    build_all(list(builds.jobs().values()), cc, meanwhile=lambda: compile_qsa_kernels(cc))
    return builds


def fresh_seed() -> int:
    """A new seed per call (``QSA_TEST_SEED`` replays one), printed so a failure can be replayed."""
    seed = int(os.environ.get("QSA_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
    print(f"seed {seed} (QSA_TEST_SEED={seed} replays it)")
    return seed


def scorer_launch(name: str, dev: Any, out: Any) -> Any:
    """qsa's scorer ``name`` launched as a run launches it (catalog.Launcher: its launch shape's build)."""
    return Launcher(QSA, {}).scorer(QSA.get("scores", name), dev, out)


def topk_launch(name: str, scores: Any, steps: Any, ids: Any, active_blocks: int = 0, scratch: Any = None,
                switches: Mapping[str, str] | None = None) -> Any:
    """qsa's top-k ``name`` launched as a run launches it, under ``switches`` (default: none set)."""
    return Launcher(QSA, switches or {}).topk(QSA.get("topk", name), scores, steps, ids, active_blocks, scratch)
