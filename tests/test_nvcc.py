"""Every kernels/*.cu compiles with nvcc for each target card, with no register spills; every kernel
name a launcher uses is defined in the sources and emitted by nvcc. Each file is compiled once a run: the
files the fake engine includes (fake_engine.QSA_KERNEL_FILES) in test_engine's every-card compile of it,
which makes these checks with this module's helpers; the others here.

A source may declare ``// qsa-min-arch: NN`` (e.g. a cluster kernel: 90) to be compiled only for
archs >= NN. Skipped when no nvcc is on PATH.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_engine import QSA_KERNEL_FILES

from qsa_cli.catalog import STAGES, qsa_catalog
from qsa_cli.core.geometry import CLUSTER_MIN_CC
from qsa_cli.kernels import kernel_dir

ARCHS = (75, 80, 86, 90)
_MIN_ARCH = re.compile(r"^\s*//\s*qsa-min-arch:\s*(\d+)\s*$", re.MULTILINE)
_FUNCTION = re.compile(r"Function properties for (\S+)\s*\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")


def _sources() -> list[Path]:
    return sorted(kernel_dir().glob("*.cu"))


def compiled_here() -> list[str]:
    """The kernel files this module compiles: those the fake engine does not include."""
    return [s.name for s in _sources() if s.name not in QSA_KERNEL_FILES]


def min_arch(source: Path) -> int:
    m = _MIN_ARCH.search(source.read_text())
    return int(m.group(1)) if m else 0


def archs(source: str) -> tuple[int, ...]:
    """The cards a kernel file is compiled for: ARCHS from its ``qsa-min-arch`` on."""
    return tuple(a for a in ARCHS if a >= min_arch(kernel_dir() / source))


@dataclass(frozen=True)
class Compiled:
    returncode: int
    log: str


def compiled(source: str, arch: int) -> Compiled:
    """nvcc's cubin of ``source`` for sm_``arch``, with ptxas's report."""
    nvcc = shutil.which("nvcc")
    assert nvcc is not None
    kdir = kernel_dir()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, "-std=c++17", f"-arch=sm_{arch}", "-cubin", "-Xptxas", "-v",
               "-o", str(Path(tmp) / "out.cubin"), str(kdir / source), "-I", str(kdir)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return Compiled(proc.returncode, proc.stdout + proc.stderr)


@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("c++filt") is None, reason="no nvcc or c++filt")
@pytest.mark.parametrize("source", compiled_here())
def test_compiles_for_every_card_without_spills_and_emits_its_launchers_kernels(source: str) -> None:
    """A test a file (its cards one after another), so that the suite's workers share out the files and no
    two compile the same one. Each launcher name of the file, template instantiations included, is an entry
    function nvcc emits for its newest card (so NVRTC's name expressions resolve too): ptxas's, demangled."""
    logs = []
    for arch in archs(source):
        result = compiled(source, arch)
        logs.append(result.log)
        assert result.returncode == 0, f"nvcc failed on {source} for sm_{arch}:\n{result.log}"
        assert _ENTRY.findall(result.log), f"ptxas reported no entry function for {source} on sm_{arch}:\n{result.log}"
        assert not spills(result.log), f"{source} on sm_{arch} spills registers:\n" + "\n".join(spills(result.log))
    missing = unemitted_launcher_kernels((source,), logs[-1])
    assert not missing, f"kernels {source} does not emit:\n" + "\n".join(missing)


def spills(log: str) -> list[str]:
    """Each function of ptxas's report (``-Xptxas -v``) that spills registers, with its stores and loads; an
    AssertionError where an entry function has no report (the report's form not understood)."""
    functions = _FUNCTION.findall(log)
    assert {fn for fn, *_ in functions} >= set(_ENTRY.findall(log)), f"ptxas -v output not understood:\n{log}"
    return [f"{fn}: {st} B spill stores, {ld} B spill loads" for fn, _, st, ld in functions if st != "0" or ld != "0"]


def unemitted_launcher_kernels(sources: tuple[str, ...], log: str, arch: int | None = None) -> list[str]:
    """The launcher kernel names of ``sources`` that are no entry function of ptxas's ``log`` (for ``arch``'s
    card alone when given: a log of several cards'), demangled."""
    entries = _ENTRY.findall(log) if arch is None else re.findall(rf"{_ENTRY.pattern} for 'sm_{arch}'", log)
    demangled = subprocess.run(["c++filt"], input="\n".join(sorted(set(entries))), capture_output=True, text=True,
                               check=True)
    emitted = {re.sub(r"^void ", "", line.partition("(")[0]) for line in demangled.stdout.splitlines()}
    return [f"{file}: {name}" for file, name in _launcher_kernel_names() if file in sources and name not in emitted]


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
