"""An engine checkout as variants (docs/spec.md section 8, docs/engine.md).

A checkout's ``src/kernels/cuda/qsa_select.cu`` is built by nvcc together with qsa's own ``extern "C"``
shim (``engine_shim.cu``) into a shared library, cached on disk and loaded with ctypes. Its host
functions then run as variants beside qsa's kernels: ``engine_scorer_launcher`` and
``engine_topk_launcher`` return closures that only enqueue the engine's work on the current CuPy stream,
as qsa's launchers do, so they can be captured into a CUDA graph.

CuPy is imported inside the functions that launch, never at import.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .core.files import atomic_write
from .core.geometry import BLOCK_CELLS, IDX_DIM, IDX_HEADS, MAX_QUERIES, SELECT_CAP, TOP_K, GeometryError
from .core.integrity import Allocator
from .dispatch import CLUSTER_MIN_CC
from .inputs import ScorerInputs
from .kernels import KernelError, cache_dir
from .variants import ENGINE_KINDS, ENGINE_SCORER, EngineEntry, Variant, engine_kinds, engine_variant, registered

SOURCE = "src/kernels/cuda/qsa_select.cu"
HEADER = "include/strata/kernels/qsa_select.hpp"
ENGINE_FILES = (SOURCE, HEADER, "include/strata/kernels/qsa.hpp", "include/strata/core/emulate.hpp")
INCLUDE_DIR = "include"
SHIM = Path(__file__).with_name("engine_shim.cu")

HOST_FUNCTIONS = ("qsa_block_scores", "qsa_block_topk", "qsa_block_topk_cluster", "qsa_topk_split_bytes",
                  "qsa_block_topk_split", "qsa_block_topk_ref")
# The engine's build of this file (spec section 8): nvcc's defaults otherwise (fmad on, no ftz).
BUILD_FLAGS = ("-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC")
BUILD_TIMEOUT_S = 900
NO_ACTIVE_COUNT = -1  # the engine's "no active block count": a decode call

# The documented domains of the bool functions (spec section 8), as the engine's host side answers them.
ENV_EMULATE_CC = "STRATA_EMULATE_CC"
ENV_CLUSTER = "STRATA_QSA_CLUSTER"
SPLIT_MIN_CC, SPLIT_END_CC = 70, 90  # the split top-k: sm_70 to sm_89; the cluster's is dispatch.CLUSTER_MIN_CC
CLUSTER_MAX_QUERIES = 16

# The shim's results other than 1, "launched" (engine_shim.cu)
REFUSED, THREW = 0, -1

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


class EngineError(ValueError):
    """A checkout qsa cannot build or run: one line (a build failure's nvcc log: EngineBuildError)."""


class EngineBuildError(EngineError, KernelError):
    """nvcc failed on a checkout: the message carries its whole log, printed as the kernels' logs are."""


class EngineRefused(ValueError):
    """An engine variant that does not run this call on this card: one line saying which function and why.

    Not a failure: the variant is reported as not run and nothing is compared for it."""


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


def _git(path: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None


class EngineCheckout:
    """A checkout of the engine's source at ``path`` (its four files checked), named ``name`` in records.

    ``origin`` and ``revision`` are the repository and revision a temporary worktree was made from
    (``open_engine`` with ``PATH@REV``), recorded in place of the worktree's own path.
    """

    def __init__(self, path: str | os.PathLike[str], name: str | None = None, *,
                 origin: str | os.PathLike[str] | None = None, revision: str | None = None) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_dir():
            raise EngineError(f"engine checkout {path}: no such directory")
        for relative in ENGINE_FILES:
            if not (self.path / relative).is_file():
                raise EngineError(f"engine checkout {self.path}: missing {relative}")
        self.name = name or self.path.name
        self.origin = Path(origin).resolve() if origin is not None else self.path
        self.revision = revision

    def declared_functions(self) -> tuple[str, ...]:
        """The host functions (of HOST_FUNCTIONS) that the checkout's qsa_select.hpp declares outside comments."""
        text = _COMMENT.sub(" ", (self.path / HEADER).read_text(errors="replace"))
        return tuple(name for name in HOST_FUNCTIONS if re.search(rf"\b{name}\s*\(", text))

    def build_files(self) -> dict[str, Path]:
        """Every file the build reads that the checkout provides, by its path in the checkout: the four files
        and what qsa_select.cu and they include, transitively (an include by absolute path too, named by it).
        The toolkit's and the system's headers are not listed: the nvcc version stands for them."""
        include = self.path / INCLUDE_DIR
        found: dict[str, Path] = {}

        def visit(path: Path) -> None:
            label = str(path.relative_to(self.path)) if path.is_relative_to(self.path) else str(path)
            if label in found:
                return
            found[label] = path
            for quote, name in _INCLUDE.findall(path.read_text(errors="replace")):
                if os.path.isabs(name):
                    candidates = [Path(name)]
                else:
                    candidates = ([path.parent / name] if quote == '"' else []) + [include / name]
                for candidate in candidates:
                    if candidate.is_file():
                        visit(candidate.resolve())
                        break

        for relative in ENGINE_FILES:
            visit(self.path / relative)
        return dict(sorted(found.items()))

    def commit(self) -> str | None:
        """The checked-out commit, with ``-dirty`` when the checkout's files differ from it; None outside git,
        and None where the repository around the folder does not track its ``qsa_select.cu`` (a copy in an
        ignored folder of another repository: that repository's commit says nothing of it)."""
        head = _git(self.path, "rev-parse", "HEAD")
        if head is None or head.returncode != 0:
            return None
        tracked = _git(self.path, "ls-files", "--error-unmatch", "--", SOURCE)
        if tracked is None or tracked.returncode != 0:
            return None
        status = _git(self.path, "status", "--porcelain", "--", ".")
        dirty = status is None or status.returncode != 0 or status.stdout.strip() != ""
        return head.stdout.strip() + ("-dirty" if dirty else "")

    def load(self, arch: int, nvcc: Path | None = None) -> EngineLibrary:
        """Built for sm_``arch`` (or taken from the cache) and loaded."""
        return load_engine(build_engine(self, arch, nvcc))


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


def _shim_defines(functions: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"-DQSA_SHIM_HAS_{name.upper()}={int(name in functions)}" for name in HOST_FUNCTIONS)


def build_engine(checkout: EngineCheckout, arch: int, nvcc: Path | None = None) -> EngineBuild:
    """The checkout's library for sm_``arch``, compiled with the shim or taken from the cache.

    The cache key is sha256 over every file of ``checkout.build_files()`` (path and bytes), the shim's
    text, ``nvcc --version`` and the flags (the arch's included). A cached library is used only when its
    bytes still have the sha256 stored beside it; otherwise it is built again.
    """
    nvcc = nvcc or find_nvcc()
    version = nvcc_version(nvcc)
    functions = checkout.declared_functions()
    flags = (*BUILD_FLAGS, f"-arch=sm_{arch}", *_shim_defines(functions))
    files = checkout.build_files()
    sources = {label: _sha256(path.read_bytes()) for label, path in files.items()}
    shim = SHIM.read_bytes()
    key = hashlib.sha256(json.dumps({"sources": sources, "shim": _sha256(shim), "nvcc": version, "flags": flags},
                                    sort_keys=True).encode()).hexdigest()
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
        "cache_key": key,
    }
    digest = _cached_digest(library, record)
    compiled = digest is None
    if compiled:
        digest = _compile(checkout, nvcc, flags, library, arch)
        try:
            with atomic_write(record) as fh:
                json.dump({"key": key, "library_sha256": digest, "sources": sources, "nvcc": version,
                           "flags": list(flags)}, fh, indent=1)
        except OSError as exc:
            raise EngineError(f"cannot write {record} ({exc}): set QSA_CACHE_DIR to a writable folder") from None
    provenance["library_sha256"] = digest
    return EngineBuild(checkout.name, library, arch, provenance, compiled)


def _cached_digest(library: Path, record: Path) -> str | None:
    """The cached library's sha256 when its bytes still match the one recorded at its build, else None."""
    try:
        stored = json.loads(record.read_text())["library_sha256"]
        actual = _sha256(library.read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return actual if actual == stored else None


def _compile(checkout: EngineCheckout, nvcc: Path, flags: tuple[str, ...], library: Path, arch: int) -> str:
    """nvcc into a temporary folder of the cache, then renamed into place; the library's sha256."""
    try:
        library.parent.mkdir(parents=True, exist_ok=True)
        build_dir = Path(tempfile.mkdtemp(prefix=".build-", dir=library.parent))
    except OSError as exc:
        raise EngineError(f"cannot write the engine cache {library.parent} ({exc}): "
                          "set QSA_CACHE_DIR to a writable folder") from None
    try:
        out = build_dir / library.name
        cmd = [str(nvcc), *flags, "-I", str(checkout.path / INCLUDE_DIR), str(checkout.path / SOURCE), str(SHIM),
               "-o", str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise EngineError(f"{checkout.name}: nvcc did not finish building {SOURCE} for sm_{arch} "
                              f"in {BUILD_TIMEOUT_S} s") from None
        if proc.returncode != 0 or not out.is_file():
            raise EngineBuildError(f"{checkout.name}: {checkout.path / SOURCE} with qsa's shim failed to compile for "
                                   f"sm_{arch}:\n{' '.join(cmd)}\n{proc.stdout}{proc.stderr}".rstrip())
        digest = _sha256(out.read_bytes())
        os.replace(out, library)
        return digest
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)


# ---- the loaded library ---------------------------------------------------------------------------------

_P, _I = ctypes.c_void_p, ctypes.c_int64
# The shim's wrapper of each host function: its arguments (engine_shim.cu).
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "qsa_block_scores": (_P, _P, _P, _P, _I, _I, _P, _P, _I),  # pooled dead q steps nq mb scores stream active
    "qsa_block_topk": (_P, _P, _I, _I, _I, _P, _P, _I),  # scores steps nq mb cap ids stream active
    "qsa_block_topk_cluster": (_P, _P, _I, _I, _I, _P, _P),  # scores steps nq mb cap ids stream
    "qsa_topk_split_bytes": (_I, ctypes.POINTER(ctypes.c_uint64)),  # nq, the bytes out
    "qsa_block_topk_split": (_P, _P, _I, _I, _I, _P, _P, _P),  # scores steps nq mb cap ids scratch stream
    "qsa_block_topk_ref": (_P, _P, _I, _I, _I, _P, _P),  # scores steps nq mb cap ids stream
}
# The shim's own functions: (arguments, result)
_SHIM_FUNCTIONS: dict[str, tuple[tuple[Any, ...], Any]] = {
    "qsa_shim_functions": ((), ctypes.c_char_p),
    "qsa_shim_index_shapes": ((ctypes.POINTER(ctypes.c_int64),), ctypes.c_int),
    "qsa_shim_exception": ((), ctypes.c_char_p),
    "qsa_shim_last_error": ((ctypes.c_int,), ctypes.c_int),
    "qsa_shim_error_name": ((ctypes.c_int,), ctypes.c_char_p),
    "qsa_shim_error_string": ((ctypes.c_int,), ctypes.c_char_p),
}
INDEX_SHAPES = (IDX_HEADS, IDX_DIM, BLOCK_CELLS, TOP_K)  # qsa_real_shapes()'s idx_n_head, idx_dim, idx_block, idx_top_k


def shim_symbol(function: str) -> str:
    """The shim's wrapper of a host function: qsa_block_scores -> qsa_shim_block_scores."""
    return "qsa_shim_" + function.removeprefix("qsa_")


class EngineLibrary:
    """A built checkout loaded with ctypes: its host functions through the shim, each call checked."""

    def __init__(self, build: EngineBuild) -> None:
        self.build = build
        self.name = build.name
        self.arch = build.arch
        self.provenance = build.provenance
        try:
            self._dll = ctypes.CDLL(str(build.library))
        except OSError as exc:
            raise EngineError(f"{self.name}: cannot load {build.library} ({exc})") from None
        for symbol, (args, result) in _SHIM_FUNCTIONS.items():
            getattr(self._dll, symbol).argtypes = args
            getattr(self._dll, symbol).restype = result
        self.functions = tuple(f for f in self._dll.qsa_shim_functions().decode().split(",") if f)
        self._wrappers = {}
        for function in self.functions:
            wrapper = getattr(self._dll, shim_symbol(function))
            wrapper.argtypes, wrapper.restype = _SIGNATURES[function], ctypes.c_int
            self._wrappers[function] = wrapper
        shapes = self.index_shapes()
        if shapes != INDEX_SHAPES:
            raise EngineError(f"{self.name}: qsa_real_shapes() has idx_n_head, idx_dim, idx_block, idx_top_k = "
                              f"{shapes}, not the spec's {INDEX_SHAPES}")

    def index_shapes(self) -> tuple[int, ...]:
        out = (ctypes.c_int64 * 4)()
        self._checked("qsa_real_shapes", self._dll.qsa_shim_index_shapes(out))
        return tuple(int(v) for v in out)

    def split_bytes(self, nq: int) -> int:
        out = ctypes.c_uint64()
        self._checked("qsa_topk_split_bytes", self._wrappers["qsa_topk_split_bytes"](nq, ctypes.byref(out)))
        return int(out.value)

    def _checked(self, function: str, result: int) -> int:
        if result == THREW:
            message = self._dll.qsa_shim_exception().decode(errors="replace")
            raise EngineError(f"{self.name}: {function} threw: {' '.join(message.split())}")
        return result

    def launch(self, function: str, *args: Any) -> None:
        """Call ``function`` through the shim: EngineError on an exception or a CUDA error it left,
        EngineRefused when it returned false (it launched nothing)."""
        result = self._checked(function, self._wrappers[function](*args))
        code = self._dll.qsa_shim_last_error(1)
        if code:
            name = self._dll.qsa_shim_error_name(code).decode()
            text = self._dll.qsa_shim_error_string(code).decode()
            raise EngineError(f"{self.name}: {function} left CUDA error {code} {name} ({text})")
        if result == REFUSED:
            raise EngineRefused(f"{self.name}: {function} returned false: it launched nothing for this call "
                                "(outside its domain, e.g. a capacity it cannot hold)")


def load_engine(build: EngineBuild) -> EngineLibrary:
    """The library of ``build``, loaded (a library already loaded in this process is the same handle)."""
    return EngineLibrary(build)


# ---- variants -------------------------------------------------------------------------------------------


def answered_cc(compute_capability: int, env: Mapping[str, str]) -> int:
    """The compute capability the engine's host side answers: ``STRATA_EMULATE_CC`` where it is set."""
    value = env.get(ENV_EMULATE_CC, "")
    if value == "":
        return compute_capability
    if not value.isdigit():
        raise EngineError(f"{ENV_EMULATE_CC} must be a compute capability such as 86 (got {value!r})")
    return int(value)


def variant_refusal(lib: EngineLibrary, variant: str, compute_capability: int,
                    env: Mapping[str, str] | None = None, nq: int | None = None) -> str | None:
    """Why ``variant`` of ``lib`` does not run on an sm_``compute_capability`` card (one line), or None.

    From the functions the checkout has and the documented domains of its bool functions (spec section 8),
    under the switches of ``env`` (default: this process's environment, which the engine reads once).
    """
    if variant not in ENGINE_KINDS:
        raise ValueError(f"unknown engine variant {variant!r} (expected one of {', '.join(ENGINE_KINDS)})")
    missing = [f for f in ENGINE_KINDS[variant].functions if f not in lib.functions]
    if missing:
        return f"{lib.name}: its qsa_select.hpp declares no {' or '.join(missing)}"
    env = os.environ if env is None else env
    cc = answered_cc(compute_capability, env)
    card = f"sm_{cc}" + (f" ({ENV_EMULATE_CC}={cc})" if cc != compute_capability else "")
    if variant == "topk-split" and not SPLIT_MIN_CC <= cc < SPLIT_END_CC:
        return (f"{lib.name}: qsa_block_topk_split runs on sm_{SPLIT_MIN_CC} to sm_{SPLIT_END_CC - 1} only; "
                f"the card is {card}")
    if variant == "topk-cluster":
        if cc < CLUSTER_MIN_CC:
            return f"{lib.name}: qsa_block_topk_cluster needs sm_{CLUSTER_MIN_CC} or newer; the card is {card}"
        if env.get(ENV_CLUSTER) == "0":
            return f"{lib.name}: qsa_block_topk_cluster is off ({ENV_CLUSTER}=0)"
        if nq is not None and nq > CLUSTER_MAX_QUERIES:
            return f"{lib.name}: qsa_block_topk_cluster takes at most {CLUSTER_MAX_QUERIES} queries (got {nq})"
    return None


def engine_variants(lib: EngineLibrary, compute_capability: int,
                    env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The variants of ``lib`` that run on an sm_``compute_capability`` card (the arch it was built for)."""
    return tuple(v for v in ENGINE_KINDS if variant_refusal(lib, v, compute_capability, env) is None)


# ---- a run's checkouts: built, loaded, their variants registered ------------------------------------------

_ATTACHED: dict[str, EngineLibrary] = {}


def library(name: str) -> EngineLibrary:
    """The loaded library of the attached checkout ``name``."""
    try:
        return _ATTACHED[name]
    except KeyError:
        raise EngineError(f"no engine checkout named {name!r} is attached to this run") from None


@contextlib.contextmanager
def attached(specs: tuple[str | EngineSpec, ...], compute_capability: int,
             env: Mapping[str, str] | None = None) -> Iterator[list[dict[str, Any]]]:
    """Each checkout of ``specs`` (``[NAME=]PATH[@REV]``) built for this card, loaded, and its variants that
    the checkout and the card run registered, for the block's length. Yields each checkout's provenance
    (the record's ``engines``: what its library was built from, and the variants it gave)."""
    parsed = [parse_engine_spec(spec) if isinstance(spec, str) else spec for spec in specs]
    names = [spec.name for spec in parsed]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise EngineError(f"two engine checkouts are named {twice!r}: name them (--engine NAME=PATH)")
    with contextlib.ExitStack() as stack:
        provenance = []
        for spec in parsed:
            checkout = stack.enter_context(open_engine(spec))
            provenance.append(_attach(stack, checkout.load(compute_capability), compute_capability, env))
        yield provenance


def _attach(stack: contextlib.ExitStack, lib: EngineLibrary, compute_capability: int,
            env: Mapping[str, str] | None) -> dict[str, Any]:
    """``lib``'s variants that run here registered, and ``lib`` findable by name, until ``stack`` closes;
    its provenance, with the variants it gave."""
    here = engine_variants(lib, compute_capability, env)
    variants = [engine_variant(lib.name, kind) for kind in here]
    if ENGINE_SCORER not in here:  # nothing to follow in a window
        variants = [dataclasses.replace(v, window_scorer=None) for v in variants]
    stack.enter_context(registered(variants))
    _ATTACHED[lib.name] = lib
    stack.callback(_ATTACHED.pop, lib.name, None)
    return {**lib.provenance, "variants": [v.name for v in variants]}


def engine_builds() -> list[dict[str, Any]]:
    """The attached checkouts' libraries, as a child process attaches them again (``attach_builds``)."""
    return [{"name": lib.name, "library": str(lib.build.library), "arch": lib.arch, "provenance": lib.provenance}
            for lib in _ATTACHED.values()]


@contextlib.contextmanager
def attach_builds(builds: list[dict[str, Any]]) -> Iterator[None]:
    """The libraries ``engine_builds`` listed in another process, attached here (a switched variants' child)."""
    with contextlib.ExitStack() as stack:
        for b in builds:
            lib = load_engine(EngineBuild(b["name"], Path(b["library"]), int(b["arch"]), b["provenance"], False))
            _attach(stack, lib, lib.arch, None)
        yield


# The engine's switches (docs/spec.md section 8), each read once per process.
ENGINE_SWITCHES = ("STRATA_SCORES_MULTI", "STRATA_SCORES_RS", "STRATA_TOPK_SPLIT", "STRATA_QSA_CLUSTER",
                   "STRATA_TOPK_OLD", "STRATA_TOPK_WIDE", "STRATA_TOPK_ACTIVE_ANY", ENV_EMULATE_CC)
_SWITCHED = re.compile(r"^(?P<base>[^\[\]]+)\[(?P<switches>[^\[\]]*)\]$")


def parse_switched(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``NAME.KIND[K=V,...]`` -> (``NAME.KIND``, ((K, V), ...)); a name without switches -> (name, ())."""
    m = _SWITCHED.match(name)
    if m is None:
        return name, ()
    switches = []
    for item in m["switches"].split(","):
        key, eq, value = item.strip().partition("=")
        if not eq or key not in ENGINE_SWITCHES:
            raise EngineError(f"variant {name!r}: {item.strip()!r} is not a switch K=V of the engine's "
                              f"({', '.join(ENGINE_SWITCHES)})")
        switches.append((key, value.strip()))
    return m["base"], tuple(sorted(switches))


def switched_variant(name: str, compute_capability: int) -> Variant | None:
    """The attached checkout's variant ``NAME.KIND[K=V,...]`` runs under those switches (None when ``name``
    has none): an EngineError when no checkout has it, or it does not run on this card under them."""
    base, switches = parse_switched(name)
    if not switches:
        return None
    found = next(((lib, base[len(lib.name) + 1:]) for lib in _ATTACHED.values()
                  if base.startswith(lib.name + ".") and base[len(lib.name) + 1:] in ENGINE_KINDS), None)
    if found is None:
        raise EngineError(f"variant {name!r}: no attached engine checkout has a variant {base!r}")
    lib, kind = found
    refusal = variant_refusal(lib, kind, compute_capability, dict(switches))
    if refusal is not None:
        raise EngineError(f"variant {name!r} does not run here: {refusal}")
    return engine_variant(lib.name, kind, switches=switches)


def require_switches(entry: EngineEntry, env: Mapping[str, str] | None = None) -> None:
    """A variant with switches runs only in a process whose environment has them (the engine reads each
    once per process): anywhere else its launcher would measure the switches' defaults."""
    env = os.environ if env is None else env
    wrong = [f"{k}={v}" for k, v in entry.switches if env.get(k) != v]
    if wrong:
        raise EngineError(f"{entry.checkout}.{entry.kind} under {', '.join(wrong)} runs in a child process with "
                          "those switches set, not in this one")


def _require_runs(lib: EngineLibrary, variant: str, nq: int) -> None:
    import cupy

    cc = int(cupy.cuda.Device().compute_capability)
    if cc != lib.arch:
        raise EngineError(f"{lib.name} was built for sm_{lib.arch}; this device is sm_{cc}")
    refusal = variant_refusal(lib, variant, cc, nq=nq)
    if refusal is not None:
        raise EngineRefused(refusal)


def _require(name: str, a: Any, shape: tuple[int, ...], dtype: Any) -> None:
    """The engine gets bare pointers: each array must be exactly what they point at."""
    if a.dtype != dtype or tuple(a.shape) != shape or not a.flags.c_contiguous:
        raise GeometryError(f"{name} must be C-contiguous {np.dtype(dtype).name} {list(shape)} "
                            f"(got {a.dtype} {list(a.shape)})")


@dataclass(frozen=True, eq=False)
class EngineCall:
    """One host function call on the current CuPy stream: ``before`` the stream argument, then ``after``.

    ``arrays`` holds every array whose address is among the arguments, so none is freed while the call
    (or a graph that captured it) can still reach it.
    """

    lib: EngineLibrary
    function: str
    before: tuple[int, ...]
    after: tuple[int, ...]
    arrays: tuple[Any, ...]

    def __call__(self) -> None:
        import cupy

        self.lib.launch(self.function, *self.before, cupy.cuda.get_current_stream().ptr, *self.after)


def engine_scorer_launcher(lib: EngineLibrary, variant: str, dev: ScorerInputs, out: Any) -> Callable[[], None]:
    """A closure calling ``lib``'s qsa_block_scores on ``dev`` (cupy arrays) into ``out`` (float32
    [nq, max_blocks], poisoned by the caller).

    "scores": no active count (-1), the engine's decode scorer, at most 8 queries; "scores-ref": an active
    count of max_blocks, its per-block reference kernel over every block.
    """
    if variant not in engine_kinds("scores"):
        raise ValueError(f"unknown engine scorer variant {variant!r} (expected one of {', '.join(engine_kinds('scores'))})")
    nq, mb = dev.nq, dev.max_blocks
    if variant == "scores" and nq > MAX_QUERIES:
        raise GeometryError(f"the engine's decode scorer takes at most {MAX_QUERIES} queries (got {nq})")
    for name, a, shape, dtype in (("pooled", dev.pooled, (mb, IDX_DIM), np.float32),
                                  ("dead", dev.dead, (IDX_DIM,), np.float32),
                                  ("q", dev.q, (nq, IDX_HEADS, IDX_DIM), np.float32),
                                  ("steps", dev.steps, (nq, 4), np.int32),
                                  ("scores", out, (nq, mb), np.float32)):
        _require(name, a, shape, dtype)
    _require_runs(lib, variant, nq)
    arrays = (dev.pooled, dev.dead, dev.q, dev.steps, out)
    pointers = tuple(a.data.ptr for a in arrays)
    active = NO_ACTIVE_COUNT if variant == "scores" else mb
    return EngineCall(lib, "qsa_block_scores", (*pointers[:4], nq, mb, pointers[4]), (active,), arrays)


def engine_topk_launcher(lib: EngineLibrary, variant: str, scores: Any, steps: Any, ids: Any, active_blocks: int = 0,
                         scratch: Allocator | None = None) -> Callable[[], None]:
    """A callable calling ``lib``'s top-k ``variant`` on ``scores`` (float32 [nq, max_blocks]) and ``steps``
    (int32 [nq, 4]) into ``ids`` (int32 [nq, SELECT_CAP], poisoned by the caller).

    "topk": qsa_block_topk, what the engine dispatches (passing ``active_blocks``, a prompt call's count;
    0, a decode call, passes none); "topk-ref", "topk-split", "topk-cluster": those functions alone. The
    split's scratch, ``qsa_topk_split_bytes(nq)`` bytes, is taken zeroed from ``scratch`` (default: a plain
    CuPy array) once; every call leaves it zero. EngineRefused when the variant is outside its domain here.
    """
    if variant not in engine_kinds("topk"):
        raise ValueError(f"unknown engine top-k variant {variant!r} (expected one of {', '.join(engine_kinds('topk'))})")
    from .launch.topk import TopkLaunch, _check

    nq, mb = _check(scores, steps, ids, active_blocks)
    _require_runs(lib, variant, nq)
    arrays: tuple[Any, ...] = (scores, steps, ids)
    head = (scores.data.ptr, steps.data.ptr, nq, mb, SELECT_CAP, ids.data.ptr)
    if variant == "topk":
        return TopkLaunch((EngineCall(lib, "qsa_block_topk", head, (active_blocks or NO_ACTIVE_COUNT,), arrays),))
    if variant != "topk-split":
        function = "qsa_block_topk_ref" if variant == "topk-ref" else "qsa_block_topk_cluster"
        return TopkLaunch((EngineCall(lib, function, head, (), arrays),))
    if scratch is None:
        import cupy

        from .core.integrity import PlainAllocator

        scratch = PlainAllocator(cupy)
    buffer = scratch.zeros(f"{lib.name} split scratch", (lib.split_bytes(nq),), np.uint8)
    call = EngineCall(lib, "qsa_block_topk_split", (*head, buffer.data.ptr), (), (*arrays, buffer))
    return TopkLaunch((call,), accumulators=(buffer,))


# ---- naming a checkout: [NAME=]PATH[@REV] -----------------------------------------------------------------


@dataclass(frozen=True)
class EngineSpec:
    name: str
    path: Path
    revision: str | None = None


_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # no "+": it joins a window pair's names


def parse_engine_spec(text: str) -> EngineSpec:
    """``[NAME=]PATH[@REV]`` (``--engine base=../strata@origin/main``): the name defaults to the folder's
    name, with ``@REV`` when a revision is given. A PATH that exists as written (an ``@`` in a folder's
    name) has no revision."""
    name, sep, rest = text.partition("=")
    if not sep or not _NAME.fullmatch(name):
        name, rest = "", text
    path, at, revision = rest.rpartition("@")
    if not at or Path(rest).exists():
        path, at, revision = rest, "", ""
    if not path:
        raise EngineError(f"engine {text!r}: no path (expected [NAME=]PATH[@REV])")
    if at and not revision:
        raise EngineError(f"engine {text!r}: no revision after '@' (expected [NAME=]PATH[@REV])")
    name = name or Path(path).resolve().name + (f"@{revision}" if revision else "")
    return EngineSpec(name, Path(path), revision or None)


@contextlib.contextmanager
def revision_worktree(repo: str | os.PathLike[str], revision: str) -> Iterator[Path]:
    """A temporary ``git worktree`` of ``repo`` at ``revision`` (detached), removed on the way out."""
    repo = Path(repo)
    if revision.startswith("-"):
        raise EngineError(f"{repo}: {revision!r} is not a revision")
    top = _git(repo, "rev-parse", "--show-toplevel")
    if top is None or top.returncode != 0:
        raise EngineError(f"{repo}: not a git repository, so it has no revision {revision!r}")
    commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if commit is None or commit.returncode != 0:
        raise EngineError(f"{repo}: unknown revision {revision!r}")
    parent = Path(tempfile.mkdtemp(prefix="qsa-engine-"))
    tree = parent / "checkout"
    try:
        added = _git(repo, "worktree", "add", "--detach", "--quiet", str(tree), commit.stdout.strip())
        if added is None or added.returncode != 0:
            detail = " ".join(added.stderr.split()) if added is not None else "git did not run"
            raise EngineError(f"{repo}: cannot check out {revision!r} into a worktree ({detail})")
        yield tree
    finally:
        _git(repo, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(parent, ignore_errors=True)
        _git(repo, "worktree", "prune")


@contextlib.contextmanager
def open_engine(spec: str | EngineSpec) -> Iterator[EngineCheckout]:
    """The checkout ``spec`` names; a ``PATH@REV`` one lives in a temporary worktree for the block's length
    (build it inside the block: the library stays in the cache)."""
    spec = parse_engine_spec(spec) if isinstance(spec, str) else spec
    if spec.revision is None:
        yield EngineCheckout(spec.path, spec.name)
        return
    with revision_worktree(spec.path, spec.revision) as tree:
        relative = Path(".")
        top = _git(spec.path, "rev-parse", "--show-prefix")
        if top is not None and top.returncode == 0:
            relative = Path(top.stdout.strip() or ".")  # PATH may be a folder inside its repository
        yield EngineCheckout(tree / relative, spec.name, origin=spec.path, revision=spec.revision)
