"""Finding the CUDA sources in ``kernels/``, compiling them through CuPy for this device, caching.

The sources are read once, their local ``#include "..."`` lines inlined, so that the text CuPy
compiles (and hashes for its on-disk cache) is the whole program: editing the header changes the
cache key. Modules are compiled once per (source, device) in a process; CuPy's disk cache keeps
the binaries between runs. CuPy is imported only here, and only when a kernel is first needed.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

# Fixed NVRTC options: no fast math, no contraction of separate multiplies and adds; the kernels
# use explicit round-to-nearest intrinsics where the spec fixes the arithmetic.
COMPILE_OPTIONS: tuple[str, ...] = ("-std=c++17", "--fmad=false", "--ftz=false", "--prec-div=true")

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)


class KernelError(RuntimeError):
    """A kernel source that is missing or does not compile; the message carries the compiler's log."""


def kernel_dir() -> Path:
    """``kernels/`` beside the package in a checkout, else the copy the wheel carries."""
    checkout = Path(__file__).resolve().parent.parent / "kernels"
    if (checkout / "qsa_common.cuh").is_file():
        return checkout
    installed = Path(str(resources.files("qsa_cli.kernel_src")))
    if (installed / "qsa_common.cuh").is_file():
        return installed
    raise KernelError(f"kernel sources not found (looked in {checkout} and {installed})")


def source_files() -> list[Path]:
    d = kernel_dir()
    return sorted([*d.glob("*.cuh"), *d.glob("*.cu")])


@functools.cache
def source_text(name: str) -> str:
    """The source ``kernels/<name>`` with its local includes inlined (each header once)."""
    d = kernel_dir()
    seen: set[str] = set()

    def expand(file: str) -> str:
        path = d / file
        if not path.is_file():
            raise KernelError(f"kernel source {path} not found")
        seen.add(file)
        return _INCLUDE.sub(lambda m: "" if m.group(1) in seen else expand(m.group(1)), path.read_text())

    return expand(name)


_DEFINE = re.compile(r"^#define\s+(QSA_\w+)\s+(\S+)", re.MULTILINE)


def header_defines() -> dict[str, str]:
    """The ``#define QSA_*`` constants of ``qsa_common.cuh``, as written (for the agreement check)."""
    return dict(_DEFINE.findall((kernel_dir() / "qsa_common.cuh").read_text()))


@functools.cache
def sources_hash() -> str:
    """sha256 over every file in ``kernels/`` (names and bytes): the results' kernel source hash."""
    h = hashlib.sha256()
    for path in source_files():
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

    def __init__(self, raw: Any, source: str, names: tuple[str, ...]) -> None:
        self._raw = raw
        self.source = source
        self.names = names

    def function(self, name: str) -> Any:
        try:
            return self._raw.get_function(name)
        except Exception as exc:  # CuPy raises its compile exception lazily, at first use
            raise KernelError(_compile_message(self.source, exc)) from exc

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


@functools.cache
def load(source: str, names: tuple[str, ...], device_id: int | None = None) -> Module:
    """Compile ``kernels/<source>`` for the current (or given) device, once per process."""
    import cupy

    device = cupy.cuda.Device(device_id) if device_id is not None else cupy.cuda.Device()
    with device:
        try:
            raw = cupy.RawModule(code=source_text(source), options=COMPILE_OPTIONS, name_expressions=names)
            module = Module(raw, source, names)
            for name in names:
                module.function(name)  # compile now, so errors surface here with the log
        except KernelError:
            raise
        except Exception as exc:
            raise KernelError(_compile_message(source, exc)) from exc
    return module
