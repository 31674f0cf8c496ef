"""Every kernels/*.cu compiles with nvcc for each target card, with no register spills; every kernel
name a launcher uses is defined in the sources and emitted by nvcc.

A source may declare ``// qsa-min-arch: NN`` (e.g. a cluster kernel: 90) to be compiled only for
archs >= NN. Skipped when no nvcc is on PATH.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from qsa_cli.catalog import STAGES, qsa_catalog
from qsa_cli.core.geometry import CLUSTER_MIN_CC
from qsa_cli.kernels import kernel_dir

ARCHS = (75, 80, 86, 90)
_JOBS = 2  # the CI machine's cores
_MIN_ARCH = re.compile(r"^\s*//\s*qsa-min-arch:\s*(\d+)\s*$", re.MULTILINE)
_FUNCTION = re.compile(r"Function properties for (\S+)\s*\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")


def _sources() -> list[Path]:
    return sorted(kernel_dir().glob("*.cu"))


def min_arch(source: Path) -> int:
    m = _MIN_ARCH.search(source.read_text())
    return int(m.group(1)) if m else 0


def _cases() -> list[tuple[str, int]]:
    return [(s.name, a) for s in _sources() for a in ARCHS if a >= min_arch(s)]


@dataclass(frozen=True)
class Compiled:
    returncode: int
    log: str


@functools.cache
def _compile_all() -> dict[tuple[str, int], Compiled]:
    """All (source, arch) compiles at once, _JOBS at a time; cached for the session's tests."""
    nvcc = shutil.which("nvcc")
    assert nvcc is not None
    kdir = kernel_dir()

    def one(case: tuple[str, int]) -> Compiled:
        name, arch = case
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [nvcc, "-std=c++17", f"-arch=sm_{arch}", "-cubin", "-Xptxas", "-v",
                   "-o", str(Path(tmp) / "out.cubin"), str(kdir / name), "-I", str(kdir)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        return Compiled(proc.returncode, proc.stdout + proc.stderr)

    cases = _cases()
    with ThreadPoolExecutor(_JOBS) as pool:
        return dict(zip(cases, pool.map(one, cases)))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on PATH")
@pytest.mark.parametrize(("source", "arch"), _cases(), ids=[f"{s}-sm_{a}" for s, a in _cases()])
def test_compiles_without_spills(source: str, arch: int) -> None:
    result = _compile_all()[(source, arch)]
    assert result.returncode == 0, f"nvcc failed on {source} for sm_{arch}:\n{result.log}"
    entries = _ENTRY.findall(result.log)
    functions = _FUNCTION.findall(result.log)
    assert entries, f"ptxas reported no entry function for {source} on sm_{arch}:\n{result.log}"
    spilling = [f"{fn}: {st} B spill stores, {ld} B spill loads" for fn, _, st, ld in functions if st != "0" or ld != "0"]
    assert not spilling, f"{source} on sm_{arch} spills registers:\n" + "\n".join(spilling)
    assert {fn for fn, *_ in functions} >= set(entries), f"ptxas -v output not understood:\n{result.log}"


def test_min_arch_rule(tmp_path: Path) -> None:
    plain = tmp_path / "plain.cu"
    plain.write_text("__global__ void k() {}\n")
    cluster = tmp_path / "cluster.cu"
    cluster.write_text("// cluster kernel\n// qsa-min-arch: 90\n__global__ void k() {}\n")
    assert min_arch(plain) == 0
    assert min_arch(cluster) == 90
    # the cluster kernel's marker is the card the header names for it (geometry.CLUSTER_MIN_CC mirrors it)
    assert min_arch(kernel_dir() / "topk_cluster.cu") == CLUSTER_MIN_CC


def _launcher_kernel_names() -> Iterator[tuple[str, str]]:
    """(source, kernel name) of every variant's kernels in qsa's catalog (qsa_cli/catalog.py)."""
    for stage in STAGES:
        for v in qsa_catalog().stage(stage):
            for name in v.kernels:
                yield v.source, name


def _global_def(base: str) -> re.Pattern[str]:
    """``__global__ void [__attr__(...) ...] base(`` (a template's definition included)."""
    return re.compile(r"__global__\s+void\s+(?:__\w+__\s*\([^)]*\)\s*)*" + re.escape(base) + r"\s*\(")


def test_launcher_kernel_names_are_in_sources() -> None:
    pairs = list(_launcher_kernel_names())
    assert {source for source, _ in pairs} >= {"scores.cu", "topk.cu", "topk_cluster.cu"}  # a new file's may join
    for source, name in pairs:
        base = name.partition("<")[0]
        assert _global_def(base).search((kernel_dir() / source).read_text()), f"{source} defines no {base}"


@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("c++filt") is None, reason="no nvcc or c++filt")
def test_launcher_kernels_are_emitted() -> None:
    """Each launcher name, template instantiations included, is an entry function nvcc emits (so
    NVRTC's name expressions resolve too): the names ptxas reports, demangled."""
    mangled = sorted({e for c in _compile_all().values() for e in _ENTRY.findall(c.log)})
    demangled = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True, check=True)
    emitted = {re.sub(r"^void ", "", line.partition("(")[0]) for line in demangled.stdout.splitlines()}
    missing = [f"launch/{mod}.py: {name}" for mod, name in _launcher_kernel_names() if name not in emitted]
    assert not missing, "kernels no source emits:\n" + "\n".join(missing)


_SHARED_FENCES_GUARD = "#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ > 12"


def _cluster_ptx(tmp_path: Path, older_compiler: bool) -> str:
    """topk_cluster.cu as PTX for sm_90; ``older_compiler``: with the guard of its shared-memory fences
    turned off, as a compiler before CUDA 12.8 sees it."""
    source = (kernel_dir() / "topk_cluster.cu").read_text()
    assert source.count(_SHARED_FENCES_GUARD) == 1, "the fences' version guard changed: update this test"
    if older_compiler:
        source = source.replace(_SHARED_FENCES_GUARD, "#if 0 && (0")
    (tmp_path / "topk_cluster.cu").write_text(source)
    out = tmp_path / "cluster.ptx"
    cmd = [shutil.which("nvcc") or "nvcc", "-std=c++17", "-arch=sm_90", "-ptx", "-o", str(out),
           str(tmp_path / "topk_cluster.cu"), "-I", str(kernel_dir())]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out.read_text()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on PATH")
@pytest.mark.parametrize("older_compiler", [False, True], ids=["shared-fences", "plain-arrive"])
def test_cluster_barriers_fence_shared_memory_or_fall_back_to_the_plain_arrive(tmp_path: Path, older_compiler: bool) -> None:
    """CUDA 12.8 and newer: the cluster barriers' fences restricted to shared memory, relaxed arrives;
    an older compiler: the plain (release) arrive, and the kernel still compiles (to PTX)."""
    ptx = _cluster_ptx(tmp_path, older_compiler)
    fences = ("fence.release.sync_restrict::shared::cta.cluster", "fence.acquire.sync_restrict::shared::cluster.cluster")
    if older_compiler:
        assert not any(f in ptx for f in fences) and "barrier.cluster.arrive.relaxed" not in ptx
        assert "barrier.cluster.arrive.aligned" in ptx
    else:
        assert all(f in ptx for f in fences) and "barrier.cluster.arrive.relaxed.aligned" in ptx
        assert "barrier.cluster.arrive.aligned" not in ptx
    assert "barrier.cluster.wait.aligned" in ptx
