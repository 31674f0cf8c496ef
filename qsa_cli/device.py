"""Finding the CUDA device and describing it for the result record."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Any

import numpy

from . import __version__
from .core.errors import NoDeviceError
from .core.source import running_source
from .kernels import nvrtc_version


@dataclass(frozen=True)
class DeviceProbe:
    available: bool
    reason: str = ""  # why not, when not available
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def compute_capability(self) -> int:
        """As an int, e.g. 90 for sm_90."""
        major, minor = self.info["compute_capability"].split(".")
        return int(major) * 10 + int(minor)


def probe(device_id: int = 0) -> DeviceProbe:
    """Look for CuPy and a CUDA device without failing: the CPU paths run either way."""
    try:
        import cupy
    except ImportError as exc:
        return DeviceProbe(False, f"CuPy is not installed ({exc.name}); install qsa[cuda12] or qsa[cuda13]")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver
        return DeviceProbe(False, f"no CUDA device: {_one_line(exc)}")
    if count == 0:
        return DeviceProbe(False, "no CUDA device: the driver reports none")
    if device_id >= count:
        return DeviceProbe(False, f"no CUDA device {device_id} (the driver reports {count})")
    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    info = {
        "id": device_id,
        "name": name,
        "compute_capability": f"{props['major']}.{props['minor']}",
        "sms": int(props["multiProcessorCount"]),
        "l2_bytes": int(props["l2CacheSize"]),
        "shared_optin_bytes": int(props["sharedMemPerBlockOptin"]),
        "memory_bytes": int(props["totalGlobalMem"]),
        "pci_bus_id": cupy.cuda.Device(device_id).pci_bus_id,
        "driver": _version(cupy.cuda.runtime.driverGetVersion()),
        "cuda_runtime": _version(cupy.cuda.runtime.runtimeGetVersion()),
        "cupy": cupy.__version__,
        "nvrtc": nvrtc_version(),
    }
    return DeviceProbe(True, "", info)


def require(device_id: int = 0) -> DeviceProbe:
    found = probe(device_id)
    if not found.available:
        raise NoDeviceError(found.reason)
    return found


def environment(switches: dict[str, str]) -> dict[str, Any]:
    """Versions, the host, the switches set for this run (session.read_switches: they change what runs,
    never the bits), and where qsa's code came from."""
    return {"python": platform.python_version(), "numpy": numpy.__version__, "qsa": __version__,
            "host": platform.node(), "switches": switches, "source": running_source()}


def _version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
