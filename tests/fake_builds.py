"""Every fake engine build the GPU tests make, written once and compiled at once (nvcc, a build a core).

Each nvcc build of a fake checkout (tests/fake_engine.py, with tests/fake_adapter.py's adapter) takes seconds;
made one after another as each test first used them, they were most of the quick GPU suite's time.
engine/build.py keys its cache by the files' bytes and their paths within the checkout (an adapter's by
their paths from the adapter's folder), not by the folder, so a tree written again elsewhere (a test's own,
a ``PATH@REV`` worktree) finds the build made here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fake_adapter import write_adapter
from fake_engine import NEWER, write_fake_engine

from qsa_cli.core.cores import usable_cores
from qsa_cli.engine.adapter import CHECKOUT_ADAPTER, AdapterSource, adapter_source
from qsa_cli.engine.build import EngineBuild, build_engine
from qsa_cli.engine.checkout import EngineCheckout

# write_fake_engine's options of each fake checkout a GPU test builds, by the name the tests give it
ENGINES: dict[str, dict[str, Any]] = {
    "plain": {},
    "slow": {"slow": "scores"},
    "slow-topk-ref": {"slow": "topk-ref"},
    "slow-topk-split": {"slow": "topk-split"},
    "flip-topk": {"flip": "topk"},
    "flip-scores": {"flip": "scores"},
    "newer": {"generation": NEWER},
    "newer-flip-dx": {"generation": NEWER, "flip": "scores-dx"},
    "newer-flip-multi": {"generation": NEWER, "flip": "topk-multi"},
}
# the two adapter layouts: the plain checkout with the example adapter beside it (--adapter), and with its own
BESIDE, OWN = "adapter", "own"
ADAPTER_FILE = "my_adapter.cu"
_DEFAULTS = {name: p.default for name, p in inspect.signature(write_fake_engine).parameters.items()
             if p.kind is p.KEYWORD_ONLY}

Job = tuple[EngineCheckout, AdapterSource | None]  # a checkout and the adapter its build compiles


@dataclass(frozen=True)
class FakeBuilds:
    """The trees ``write_fake_builds`` wrote under ``root``: each of ENGINES at ``root/NAME``; the plain
    checkout at ``root/adapter/strata`` with the example adapter beside it, ``root/adapter/my_adapter.cu``;
    the plain checkout with the example adapter as its own at ``root/own``."""

    root: Path

    def engine(self, name: str) -> Path:
        return self.root / name

    def with_options(self, **options: Any) -> Path:
        """The tree of ENGINES written with these write_fake_engine options (a default given or left out)."""
        given = {k: v for k, v in options.items() if v != _DEFAULTS[k]}
        name = next((n for n, o in ENGINES.items() if o == given), None)
        if name is None:
            raise KeyError(f"no fake engine of options {options} is built beforehand: add it to fake_builds.ENGINES")
        return self.engine(name)

    @property
    def adapter_checkout(self) -> Path:
        return self.root / BESIDE / "strata"

    @property
    def adapter_file(self) -> Path:
        return self.root / BESIDE / ADAPTER_FILE

    @property
    def own_adapter_checkout(self) -> Path:
        return self.root / OWN

    def jobs(self) -> dict[str, Job]:
        """Every build, by its tree's name (ENGINES', BESIDE, OWN)."""
        jobs: dict[str, Job] = {name: (EngineCheckout(self.engine(name), "fake"), None) for name in ENGINES}
        beside = EngineCheckout(self.adapter_checkout, "fake")
        jobs[BESIDE] = (beside, adapter_source(beside, self.adapter_file))
        own = EngineCheckout(self.own_adapter_checkout, "own")
        jobs[OWN] = (own, adapter_source(own, None))
        return jobs


def write_fake_builds(root: Path) -> FakeBuilds:
    """Every tree of the GPU tests' builds written under ``root`` (FakeBuilds says where)."""
    builds = FakeBuilds(root)
    for name, options in ENGINES.items():
        write_fake_engine(builds.engine(name), **options)
    write_fake_engine(builds.adapter_checkout)
    write_adapter(builds.adapter_file)
    write_adapter(write_fake_engine(builds.own_adapter_checkout) / CHECKOUT_ADAPTER)
    return builds


def build_all(jobs: list[Job], arch: int, meanwhile: Callable[[], None] = lambda: None,
              nvcc: Path | None = None) -> list[EngineBuild]:
    """Each job built for sm_``arch`` (or taken from the cache) by ``nvcc`` (None: the toolkit's), a thread a
    core, ``meanwhile()`` run in this thread as they build; their builds, in the jobs' order."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), usable_cores()))) as pool:
        started = [pool.submit(build_engine, checkout, arch, nvcc, adapter=adapter) for checkout, adapter in jobs]
        meanwhile()
        return [build.result() for build in started]
