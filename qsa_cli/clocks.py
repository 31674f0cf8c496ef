"""GPU clocks through NVML: reads around each measurement, clocks-event reasons, an optional lock.

Timings mean little without the clocks they ran at, so every measurement records a reading before
and after it. NVML is optional: without a driver (or without ``pynvml``) the monitor says why it is
unavailable and the harness runs on, recording ``clocks: unavailable (reason)``.

A clock lock changes the card's state beyond this process, so ``lock_clocks`` undoes it on every
way out: a normal exit, an exception, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from .core.errors import ClockLockError

# NVML's clocks-event reason bits (nvml.h; the older "throttle reasons" use the same bits and add
# board_limit and reliability).
EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "user_defined_clocks"),  # application clocks or a clock lock
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
# The reasons that mean the card ran slower than asked: thermal, power or hardware slowdown.
SLOWDOWN_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


def decode_reasons(mask: int) -> list[str]:
    """The names of the bits set in a clocks-event reason mask; unknown bits as ``unknown_0x...``."""
    names = [name for bit, name in EVENT_REASONS if mask & bit]
    known = sum(bit for bit, _ in EVENT_REASONS)
    rest = mask & ~known
    names += [f"unknown_0x{1 << i:x}" for i in range(rest.bit_length()) if rest >> i & 1]
    return names


@dataclass(frozen=True)
class ClockReading:
    """One look at the card; a field NVML cannot read on this card is None."""

    sm_mhz: int | None
    mem_mhz: int | None
    temperature_c: int | None
    power_w: float | None
    event_reasons: list[str]
    throttled: bool  # a thermal, power or hardware slowdown among the reasons

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pynvml() -> Any:
    import pynvml  # only when a run opens a device: the CPU backend and the renderers never load NVML

    return pynvml


class ClockMonitor:
    """NVML for one device: ``read()`` around measurements, ``device_info()`` for the record.

    ``nvml`` is the ``pynvml`` module (or a stand-in with its names, in tests). When NVML cannot be
    used, ``available`` is False and ``unavailable`` says why: making a monitor never raises.
    """

    def __init__(self, nvml: Any | None = None, index: int = 0, pci_bus_id: str | None = None) -> None:
        self.handle: Any = None
        self.unavailable: str | None = None
        try:
            self.nvml = nvml if nvml is not None else _pynvml()
        except ImportError:
            self.nvml = None
            self.unavailable = "pynvml is not installed (pip install nvidia-ml-py)"
            return
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            self.unavailable = f"NVML cannot be initialised: {exc}"
            return
        try:
            # The CUDA ordinal need not be NVML's index (CUDA_VISIBLE_DEVICES, ordering); the bus id is one device.
            if pci_bus_id is not None:
                self.handle = self.nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
            else:
                self.handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        except self.nvml.NVMLError as exc:
            self.nvml.nvmlShutdown()
            which = f"PCI bus id {pci_bus_id}" if pci_bus_id is not None else f"index {index}"
            self.unavailable = f"NVML has no device at {which}: {exc}"

    @classmethod
    def for_pci_bus_id(cls, pci_bus_id: str, nvml: Any | None = None) -> ClockMonitor:
        """The monitor of the CUDA device at ``pci_bus_id`` (e.g. CuPy's ``Device(i).pci_bus_id``)."""
        return cls(nvml, pci_bus_id=pci_bus_id)

    @property
    def available(self) -> bool:
        return self.unavailable is None

    def close(self) -> None:
        if self.available:
            self.nvml.nvmlShutdown()
            self.unavailable = "closed"

    def __enter__(self) -> ClockMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(handle, *args)``, or None where this card does not report it (NotSupported and the like)."""
        try:
            return fn(self.handle, *args)
        except self.nvml.NVMLError:
            return None

    def _reason_mask(self) -> int:
        # pynvml >= 12.535 names them clocks-event reasons; older drivers only have the throttle-reasons call.
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn = getattr(self.nvml, name, None)
            mask = self._get(fn) if fn is not None else None
            if mask is not None:
                return int(mask)
        return 0

    def read(self) -> ClockReading:
        """The SM and memory clocks, temperature, power draw and clocks-event reasons, now."""
        if not self.available:
            raise RuntimeError(f"NVML unavailable ({self.unavailable})")
        n = self.nvml
        power_mw = self._get(n.nvmlDeviceGetPowerUsage)
        reasons = decode_reasons(self._reason_mask())
        return ClockReading(
            sm_mhz=self._get(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM),
            mem_mhz=self._get(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_MEM),
            temperature_c=self._get(n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU),
            power_w=power_mw / 1000 if power_mw is not None else None,
            event_reasons=reasons,
            throttled=bool(SLOWDOWN_REASONS.intersection(reasons)),
        )

    def device_info(self) -> dict[str, Any]:
        """Name, driver, maximum clocks, power limit and persistence mode; ``{"unavailable": reason}`` without
        NVML."""
        if not self.available:
            return {"unavailable": self.unavailable}
        n = self.nvml
        name = self._get(n.nvmlDeviceGetName)
        try:
            driver = n.nvmlSystemGetDriverVersion()
        except n.NVMLError:
            driver = None
        limit_mw = self._get(n.nvmlDeviceGetEnforcedPowerLimit)
        # out of persistence mode, the driver initialises the card for each process that opens it: a run's start,
        # not its samples, pays for it
        persistent = self._get(n.nvmlDeviceGetPersistenceMode)
        return {
            "name": name.decode() if isinstance(name, bytes) else name,
            "driver": driver.decode() if isinstance(driver, bytes) else driver,
            "max_sm_mhz": self._get(n.nvmlDeviceGetMaxClockInfo, n.NVML_CLOCK_SM),
            "max_mem_mhz": self._get(n.nvmlDeviceGetMaxClockInfo, n.NVML_CLOCK_MEM),
            "power_limit_w": limit_mw / 1000 if limit_mw is not None else None,
            "persistence_mode": bool(persistent) if persistent is not None else None,
        }


# ---- locking --------------------------------------------------------------------------------------


def parse_lock_spec(spec: str) -> tuple[int, int | None]:
    """``"1650"`` -> (1650, None); ``"1650,3201"`` -> (1650, 3201): SM and memory clocks in MHz."""
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) > 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ClockLockError(f"clock lock {spec!r}: expected SM_MHZ or SM_MHZ,MEM_MHZ in MHz (e.g. 1650 or 1650,3201)")
    return int(parts[0]), int(parts[1]) if len(parts) == 2 else None


@dataclass(frozen=True)
class ClockLock:
    """What ``lock_clocks`` did, for the record's settings."""

    sm_mhz: int
    mem_mhz: int | None
    locked: bool
    reason: str | None = None  # why the clocks are not locked

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _refusal(nvml: Any, exc: Exception) -> str:
    if isinstance(exc, nvml.NVMLError_NoPermission):
        return f"no permission ({exc}); locking clocks needs root"
    if isinstance(exc, nvml.NVMLError_NotSupported):
        return f"not supported on this card ({exc})"
    return str(exc)


@contextlib.contextmanager
def lock_clocks(
    monitor: ClockMonitor,
    sm_mhz: int,
    mem_mhz: int | None = None,
    optional: bool = False,
    warn: Callable[[str], None] = _warn_stderr,
) -> Iterator[ClockLock]:
    """Lock the SM clock (and the memory clock) for the block; reset them on every way out.

    A refusal raises ClockLockError on entry, before anything is measured, unless ``optional``: then
    ``warn`` is told and the block runs unlocked. While locked, SIGTERM resets the clocks, then goes to
    the handler that was set before (qsa's main(): an interruption) or, where there was none, exits with
    status 143 (128 + SIGTERM) through SystemExit, so outer ``finally`` blocks still run; the previous
    handler is put back afterwards. (Signal handlers can only be set from the main thread; elsewhere
    SIGTERM is left alone.)
    """
    what = f"SM {sm_mhz} MHz" + (f", memory {mem_mhz} MHz" if mem_mhz is not None else "")
    nvml, handle = monitor.nvml, monitor.handle
    resets: list[tuple[str, str, Callable[[Any], None]]] = []  # (clock, nvidia-smi flag, reset), last lock last

    def restore() -> None:
        while resets:  # popped before each call, so a SIGTERM during restore() never resets twice
            name, flag, reset = resets.pop()
            try:
                reset(handle)
            except nvml.NVMLError as exc:
                warn(f"could not reset the locked {name} clock ({exc}); reset it with nvidia-smi {flag}")

    reason = None
    if not monitor.available:
        reason = f"NVML unavailable ({monitor.unavailable})"
    else:
        try:
            nvml.nvmlDeviceSetGpuLockedClocks(handle, sm_mhz, sm_mhz)
            resets.append(("SM", "-rgc", nvml.nvmlDeviceResetGpuLockedClocks))
            if mem_mhz is not None:
                nvml.nvmlDeviceSetMemoryLockedClocks(handle, mem_mhz, mem_mhz)
                resets.append(("memory", "-rmc", nvml.nvmlDeviceResetMemoryLockedClocks))
        except nvml.NVMLError as exc:
            restore()
            reason = _refusal(nvml, exc)
    if reason is not None:
        if not optional:
            raise ClockLockError(f"cannot lock clocks at {what}: {reason}")
        warn(f"clocks not locked at {what}: {reason}; measuring at the card's own clocks")
        yield ClockLock(sm_mhz, mem_mhz, locked=False, reason=reason)
        return

    def on_sigterm(signum: int, frame: object) -> None:
        restore()
        if callable(previous):  # the program's own handling of SIGTERM (qsa's: the record so far, exit 143)
            previous(signum, frame)
            return
        raise SystemExit(128 + signum)

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_sigterm) if in_main else None
    try:
        yield ClockLock(sm_mhz, mem_mhz, locked=True)
    finally:
        try:
            restore()
        finally:
            if in_main:  # None: a handler not set from Python, which cannot be put back
                signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
