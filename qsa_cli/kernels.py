"""Finding the CUDA sources in ``kernels/``, compiling them through CuPy for this device, caching.

The sources are read once, their local ``#include "..."`` lines inlined, so that the text NVRTC
compiles (and the disk cache is keyed by) is the whole program: editing the header changes the key.
Modules are compiled once per (source, device) in a process and kept on disk between runs, in the
manner of CuPy's own kernel cache: keyed by the NVRTC version too, every binary checked against its
checksum as it is loaded. CuPy is imported only here, and only when a kernel is first needed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .core.errors import KernelError
from .core.files import atomic_write, written

# Fixed NVRTC options: no fast math, no contraction of separate multiplies and adds; the kernels
# use explicit round-to-nearest intrinsics where the spec fixes the arithmetic.
COMPILE_OPTIONS: tuple[str, ...] = ("-std=c++17", "--fmad=false", "--ftz=false", "--prec-div=true")
# QSA_LINEINFO=1 adds source line information (no change to the machine code), so that compute-sanitizer
# and ncu name the source line of a report; ``qsa sanitize`` sets it in its children.
ENV_LINEINFO = "QSA_LINEINFO"
LINEINFO_OPTION = "-lineinfo"


def compile_options() -> tuple[str, ...]:
    return COMPILE_OPTIONS + ((LINEINFO_OPTION,) if os.environ.get(ENV_LINEINFO) == "1" else ())


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[ \t]*$', re.MULTILINE)  # one line, its newline kept
_DECLARES = re.compile(r"^[ \t]*//[ \t]*qsa-declares:[ \t]*(\S+)[ \t]*$", re.MULTILINE)  # a trait a line
# A kernel's definition or explicit instantiation: its name after `__global__ void` and any attributes
# (`__launch_bounds__(...)`, `__cluster_dims__(...)`).
_GLOBAL = re.compile(r"__global__\s+void\s+(?:__\w+__\s*\([^)]*\)\s*)*(\w+)\s*[<(]")


HEADER, BENCH = "qsa_common.cuh", "bench.cu"  # every kernel's constants and helpers; the timer's kernels


def kernel_dir() -> Path:
    """The installed kernel sources: the copy of ``kernels/`` an installed wheel carries (``qsa_cli/kernel_src``),
    else the checkout's. A run may compile from another folder (``--kernels DIR``: its catalog's)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "kernel_src", here.parent / "kernels"):
        if (candidate / HEADER).is_file():
            return candidate
    raise KernelError(f"kernel sources not found (looked in {here / 'kernel_src'} and {here.parent / 'kernels'})")


def check_kernel_dir(path: Path, required: tuple[str, ...]) -> Path:
    """``path`` as a folder of kernel sources with the ``required`` files (catalog.kernel_sources): a
    KernelError (one line) naming what it lacks."""
    if not path.is_dir():
        raise KernelError(f"--kernels {path}: no such folder")
    missing = [name for name in required if not (path / name).is_file()]
    if missing:
        raise KernelError(f"--kernels {path}: no {', '.join(missing)} (a copy of qsa's kernels/ folder is expected)")
    return path.resolve()


def source_files(d: Path) -> list[Path]:
    return sorted([*d.glob("*.cuh"), *d.glob("*.cu")])


def source_text(name: str, folder: Path | None = None) -> str:
    """The source ``<name>`` of ``folder`` (default: the installed kernels) with its local includes inlined
    (each header once).

    ``#line`` directives around each inlined header keep every line's file and number, so compiler
    errors and the line information of sanitizer and profiler reports name the file as written.
    """
    return _source_text(folder or kernel_dir(), name)


@functools.cache
def _source_text(d: Path, name: str) -> str:
    seen: set[str] = set()

    def expand(file: str) -> str:
        path = d / file
        if not path.is_file():
            raise KernelError(f"kernel source {path} not found")
        seen.add(file)
        text = path.read_text()

        def inline(m: re.Match[str]) -> str:
            if m.group(1) in seen:
                return ""
            resume = text.count("\n", 0, m.start()) + 2  # the line after the include
            return f'{expand(m.group(1))}\n#line {resume} "{file}"'

        return f'#line 1 "{file}"\n' + _INCLUDE.sub(inline, text)

    return expand(name)


def declared_traits(folder: Path, source: str) -> frozenset[str]:
    """The traits ``source`` of ``folder`` (its includes inlined) declares, one ``// qsa-declares: TRAIT`` line
    each: what its kernels do that a launcher may rely on."""
    return frozenset(_DECLARES.findall(_source_text(folder, source)))


def defined_kernels(folder: Path, source: str) -> frozenset[str]:
    """The names of the kernels ``source`` of ``folder`` (its includes inlined) defines, templates by their
    name alone: what a variant's kernels must be among for that folder to compile it."""
    return frozenset(_GLOBAL.findall(_source_text(folder, source)))


_DEFINE = re.compile(r"^#define\s+(QSA_\w+)\s+(\S+)", re.MULTILINE)


def header_defines(folder: Path | None = None) -> dict[str, str]:
    """The ``#define QSA_*`` constants of ``folder``'s ``qsa_common.cuh`` (default: the installed kernels'),
    as written (for the agreement check)."""
    return dict(_DEFINE.findall(((folder or kernel_dir()) / HEADER).read_text()))


def sources_hash(folder: Path | None = None) -> str:
    """sha256 over every file of ``folder`` (default: the installed kernels; names and bytes): the results'
    kernel source hash."""
    return _sources_hash(folder or kernel_dir())


@functools.cache
def _sources_hash(d: Path) -> str:
    h = hashlib.sha256()
    for path in source_files(d):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class KernelInfo:
    """What the compiled function reports for this device (``qsa info``)."""

    name: str
    registers: int
    shared_bytes: int
    local_bytes: int
    max_threads: int


class Module:
    """One compiled source: its functions by the names the spec uses (template names included)."""

    def __init__(self, raw: Any, source: str, names: tuple[str, ...], lowered: dict[str, str],
                 traits: frozenset[str] = frozenset()) -> None:
        self._raw = raw
        self.source = source
        self.names = names
        self._lowered = lowered  # name expression (e.g. a template instance) -> its mangled name
        self._traits = traits  # the source's ``// qsa-declares: TRAIT`` lines: read through declares()

    def function(self, name: str) -> Any:
        try:
            return self._raw.get_function(self._lowered.get(name, name))
        except Exception as exc:
            raise KernelError(f"kernels/{self.source} has no function {name!r} ({exc})") from exc

    def declares(self, trait: str) -> bool:
        """Whether the source says ``// qsa-declares: TRAIT`` (what its kernels do, for their launcher)."""
        return trait in self._traits

    def info(self, name: str) -> KernelInfo:
        attrs = self.function(name).attributes
        return KernelInfo(
            name=name,
            registers=int(attrs["num_regs"]),
            shared_bytes=int(attrs["shared_size_bytes"]),
            local_bytes=int(attrs["local_size_bytes"]),
            max_threads=int(attrs["max_threads_per_block"]),
        )


def _compile_message(source: str, exc: Exception) -> str:
    log = exc.get_message() if hasattr(exc, "get_message") else str(exc)
    return f"kernels/{source} failed to compile for this device:\n{log}"


def cache_dir() -> Path:
    """Where compiled kernels are kept between runs (``QSA_CACHE_DIR``, else ``~/.cache/qsa/kernels``)."""
    root = os.environ.get("QSA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "qsa", "kernels")
    return Path(root)


def nvrtc_version() -> str:
    """The version of the NVRTC that CuPy compiles with, ``MAJOR.MINOR`` (the record's and the cache key's)."""
    from cupy.cuda import nvrtc

    major, minor = nvrtc.getVersion()
    return f"{major}.{minor}"


def _compile(source: str, names: tuple[str, ...], arch: str, appended: str, folder: Path) -> tuple[bytes, dict[str, str]]:
    """NVRTC through CuPy's compiler helper, with exactly COMPILE_OPTIONS, through the disk cache.

    Not ``cupy.RawModule(code=...)``: that appends ``-ftz=true`` to every compile, flushing subnormal
    results to zero, which changes the bits of the scorer's products and of the top-k's ``score + 0.0f``
    on tiny values (the engine is built by nvcc, whose default is ``-ftz=false``). The kernels include
    no toolkit header (the cluster kernel writes its three cluster operations in PTX), so NVRTC needs
    no include path and the sources compile wherever CuPy's NVRTC runs.
    """
    import cupy
    from cupy.cuda import compiler

    text = _source_text(folder, source) + appended
    options = compile_options()
    key = hashlib.sha256("\0".join([text, *options, *names, arch, cupy.__version__, nvrtc_version()]).encode())

    def nvrtc() -> tuple[bytes, dict[str, str]]:
        binary, lowered = compiler.compile_using_nvrtc(text, options, name_expressions=list(names), filename=source)
        return binary if isinstance(binary, bytes) else binary.encode(), dict(lowered or {})

    return cached(key.hexdigest(), nvrtc)


def cached(key: str, compile_: Callable[[], tuple[bytes, dict[str, str]]]) -> tuple[bytes, dict[str, str]]:
    """The binary and mangled names cached under ``key``, else ``compile_()``'s, cached for next time.

    An entry is its binary (``KEY.bin``) and its names with the binary's sha256 (``KEY.json``, written last):
    one whose binary does not match its checksum (cut short, overwritten, flipped on disk), or whose names
    file is missing or unreadable, is compiled again and rewritten, never loaded.
    """
    binary_path, entry_path = cache_dir() / f"{key}.bin", cache_dir() / f"{key}.json"
    try:
        entry = json.loads(entry_path.read_text())
        binary = binary_path.read_bytes()
        if (isinstance(entry, dict) and entry.get("sha256") == hashlib.sha256(binary).hexdigest()
                and isinstance(entry.get("names"), dict)):
            return binary, entry["names"]
    except (OSError, ValueError):
        pass
    binary, lowered = compile_()
    try:  # a cache that cannot be written only costs a compile next time
        cache_dir().mkdir(parents=True, exist_ok=True)
        with atomic_write(binary_path, "wb") as fh:
            fh.write(binary)
        with atomic_write(entry_path) as fh:
            json.dump({"sha256": hashlib.sha256(binary).hexdigest(), "names": lowered}, fh)
    except OSError:
        pass
    return binary, lowered


def load(source: str, names: tuple[str, ...], appended: str = "", folder: Path | None = None) -> Module:
    """``<source>`` of ``folder`` (default: the installed kernels) compiled for the current device:
    once per process, cached on disk between runs.

    ``appended`` is code compiled after the source as part of it, so it can call the source's internal
    helpers (a test's probe of the kernels' own arithmetic); ``names`` may name its functions.
    """
    import cupy

    return _load(source, names, cupy.cuda.Device().id, appended, folder or kernel_dir())


@functools.cache
def _load(source: str, names: tuple[str, ...], device_id: int, appended: str, folder: Path) -> Module:
    """Keyed by the kernels' folder too: another --kernels folder is another module."""
    import cupy

    with cupy.cuda.Device(device_id) as device:
        try:
            binary, lowered = _compile(source, names, device.compute_capability, appended, folder)
        except KernelError:
            raise
        except Exception as exc:
            raise KernelError(_compile_message(source, exc)) from exc
        with tempfile.TemporaryDirectory(prefix="qsa-") as tmp:
            path = Path(tmp) / f"{source}.bin"
            with written(path):
                path.write_bytes(binary)
            raw = cupy.RawModule(path=str(path))  # loads the binary as is: no options added
            module = Module(raw, source, names, lowered, declared_traits(folder, source))
            for name in names:
                module.function(name)  # load now, while the file exists, so a bad name surfaces here
    return module
