"""A checkout built by nvcc with qsa's shim (``engine_shim.cu``) into a shared library, kept in a cache
that is used only while the library's bytes still have the sha256 stored at its build."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import EngineBuildError, EngineError
from ..core.files import atomic_write
from ..kernels import cache_dir
from .adapter import ADAPTER_INCLUDE, AdapterSource
from .checkout import HOST_PATHS, INCLUDE_DIR, SOURCE, EngineCheckout

SHIM = Path(__file__).resolve().parent.parent / "engine_shim.cu"
# The engine's build of this file (spec section 8): nvcc's defaults otherwise (fmad on, no ftz).
BUILD_FLAGS = ("-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC")
BUILD_TIMEOUT_S = 900


def find_nvcc() -> Path:
    """nvcc on PATH, else in ``$CUDA_HOME/bin``."""
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    home = os.environ.get("CUDA_HOME")
    if home and os.access(Path(home) / "bin" / "nvcc", os.X_OK):
        return Path(home) / "bin" / "nvcc"
    raise EngineError("nvcc not found on PATH or in $CUDA_HOME/bin: building an engine checkout needs the CUDA toolkit")


@functools.cache
def nvcc_version(nvcc: Path) -> str:
    """``nvcc --version``'s whole output (part of the cache key)."""
    proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise EngineError(f"{nvcc} --version failed: {' '.join((proc.stdout + proc.stderr).split())}")
    return proc.stdout.strip()


def nvcc_release(version: str) -> str:
    """The line of ``nvcc --version`` naming the release, e.g. "Cuda compilation tools, release 13.0, V13.0.88"."""
    lines = [line for line in version.splitlines() if "release" in line] or version.splitlines()[-1:]
    return lines[0].strip() if lines else ""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, eq=False)
class EngineBuild:
    """A checkout's shared library in the cache, and what it was built from (the run record's provenance)."""

    name: str
    library: Path
    arch: int
    provenance: dict[str, Any]
    compiled: bool  # False when the cache had it


def engine_cache_dir() -> Path:
    return cache_dir() / "engines"


def shim_macro(path: str) -> str:
    """The shim's switch for a host path: qsa_block_scores.decode_dx -> QSA_SHIM_HAS_QSA_BLOCK_SCORES_DECODE_DX."""
    return "QSA_SHIM_HAS_" + path.upper().replace(".", "_")


def _shim_defines(declared: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"-D{shim_macro(path)}={int(path in declared)}" for path in HOST_PATHS)


def build_engine(checkout: EngineCheckout, arch: int, nvcc: Path | None = None,
                 adapter: AdapterSource | None = None) -> EngineBuild:
    """The checkout's library for sm_``arch``, compiled with the shim (and ``adapter``, a user's own host
    paths: engine/adapter.py) or taken from the cache.

    The cache key is sha256 over every file of ``checkout.build_files()`` (path and bytes), the shim's
    text, the adapter's files, ``nvcc --version`` and the flags (the arch's included). A cached library is
    used only when its bytes still have the sha256 stored beside it; otherwise it is built again.
    """
    nvcc = nvcc or find_nvcc()
    version = nvcc_version(nvcc)
    functions = checkout.declared_functions()
    flags = (*BUILD_FLAGS, f"-arch=sm_{arch}", *_shim_defines(functions))
    files = checkout.build_files()
    sources = {label: _sha256(path.read_bytes()) for label, path in files.items()}
    shim = SHIM.read_bytes()
    keyed: dict[str, Any] = {"sources": sources, "shim": _sha256(shim), "nvcc": version, "flags": flags}
    if adapter is not None:  # only then: a build without one keeps its key
        keyed["adapter"] = {label: _sha256(path.read_bytes()) for label, path in adapter.files.items()}
    key = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()
    directory = engine_cache_dir()
    library, record = directory / f"{key}.so", directory / f"{key}.json"
    provenance = {
        "name": checkout.name,
        "path": str(checkout.origin),
        "revision": checkout.revision,
        "commit": checkout.commit(),
        "sources": sources,
        "shim_sha256": _sha256(shim),
        "nvcc": nvcc_release(version),
        "arch": f"sm_{arch}",
        "flags": list(flags),
        "functions": list(functions),
        "switches": list(checkout.switches()),
        "cache_key": key,
    }
    if adapter is not None:
        provenance["adapter"] = {"path": str(adapter.path), "origin": adapter.origin,
                                 "sha256": _sha256(adapter.path.read_bytes()), "sources": keyed["adapter"]}
    with _building(directory, key):  # a second process building the same key waits, then finds it
        digest = _cached_digest(library, record)
        compiled = digest is None
        if compiled:
            digest = _compile(checkout, nvcc, flags, library, arch, adapter)
            try:
                with atomic_write(record) as fh:
                    json.dump({"key": key, "library_sha256": digest, "sources": sources, "nvcc": version,
                               "flags": list(flags), "functions": list(functions),
                               "switches": provenance["switches"]}, fh, indent=1)
            except OSError as exc:
                raise EngineError(f"cannot write {record} ({exc}): set QSA_CACHE_DIR to a writable folder") from None
    provenance["library_sha256"] = digest
    return EngineBuild(checkout.name, library, arch, provenance, compiled)


@contextlib.contextmanager
def _building(directory: Path, key: str) -> Iterator[None]:
    """The cache's key held by this process (a file lock, released however the build ends): runs that build
    the same checkout at once, as a CI runner's parallel jobs or test workers do, build it once."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        held = open(directory / f".{key}.lock", "a")  # noqa: SIM115 (closed below, after the lock)
    except OSError as exc:
        raise EngineError(f"cannot write the engine cache {directory} ({exc}): "
                          "set QSA_CACHE_DIR to a writable folder") from None
    with held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def _cached_digest(library: Path, record: Path) -> str | None:
    """The cached library's sha256 when its bytes still match the one recorded at its build, else None."""
    try:
        stored = json.loads(record.read_text())["library_sha256"]
        actual = _sha256(library.read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return actual if actual == stored else None


def _compile(checkout: EngineCheckout, nvcc: Path, flags: tuple[str, ...], library: Path, arch: int,
             adapter: AdapterSource | None) -> str:
    """nvcc into a temporary folder of the cache (made by ``_building``), then renamed into place; the library's
    sha256."""
    try:
        build_dir = Path(tempfile.mkdtemp(prefix=".build-", dir=library.parent))
    except OSError as exc:
        raise EngineError(f"cannot write the engine cache {library.parent} ({exc}): "
                          "set QSA_CACHE_DIR to a writable folder") from None
    try:
        out = build_dir / library.name
        # the adapter, a user's own file, first: nvcc compiles its inputs in turn and stops at the first error,
        # so a mistake there is reported in a fraction of a second, not after the engine's kernels
        cmd = [str(nvcc), *flags, "-I", str(checkout.path / INCLUDE_DIR),
               *(("-I", str(ADAPTER_INCLUDE), str(adapter.path)) if adapter else ()), str(checkout.path / SOURCE),
               str(SHIM), "-o", str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise EngineError(f"{checkout.name}: nvcc did not finish building {SOURCE} for sm_{arch} "
                              f"in {BUILD_TIMEOUT_S} s") from None
        if proc.returncode != 0 or not out.is_file():
            first = adapter.build_failure(proc.stdout + proc.stderr) if adapter else None
            first = first or f"{checkout.path / SOURCE} with qsa's shim failed to compile for sm_{arch}:"
            raise EngineBuildError(f"{checkout.name}: {first}\n{' '.join(cmd)}\n{proc.stdout}{proc.stderr}".rstrip())
        digest = _sha256(out.read_bytes())
        os.replace(out, library)
        return digest
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
