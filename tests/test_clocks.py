"""NVML reads, reason decoding and the clock lock, against a fake NVML module that records every call.

No test here touches a real GPU or the real pynvml's lock calls.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from qsa_cli import clocks
from qsa_cli.clocks import ClockLockError, ClockMonitor, decode_reasons, lock_clocks, parse_lock_spec

SET_GPU, SET_MEM = "nvmlDeviceSetGpuLockedClocks", "nvmlDeviceSetMemoryLockedClocks"
RESET_GPU, RESET_MEM = "nvmlDeviceResetGpuLockedClocks", "nvmlDeviceResetMemoryLockedClocks"


class FakeNvml:
    """The part of pynvml the monitor uses; ``fail`` maps a function name to the error it raises."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    class NVMLError(Exception):
        pass

    class NVMLError_NoPermission(NVMLError):  # noqa: N801 - pynvml's names
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801
        pass

    class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
        pass

    class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
        pass

    def __init__(self, fail: dict[str, Exception] | None = None, reasons: int = 0, echo: bool = False) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail = fail or {}
        self.echo = echo
        self.results: dict[str, Any] = {
            "nvmlDeviceGetHandleByIndex": lambda i: f"handle{i}",
            "nvmlDeviceGetHandleByPciBusId": lambda bus: f"handle@{bus}",
            "nvmlDeviceGetClockInfo": lambda h, clock: {1: 1650, 2: 3201}[clock],
            "nvmlDeviceGetMaxClockInfo": lambda h, clock: {1: 1980, 2: 3201}[clock],
            "nvmlDeviceGetTemperature": lambda h, sensor: 41,
            "nvmlDeviceGetPowerUsage": lambda h: 123456,
            "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700000,
            "nvmlDeviceGetPersistenceMode": lambda h: 1,  # NVML_FEATURE_ENABLED
            "nvmlDeviceGetCurrentClocksEventReasons": lambda h: reasons,
            "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: reasons,
            "nvmlDeviceGetName": lambda h: b"NVIDIA H200",
            "nvmlSystemGetDriverVersion": lambda: "580.65",
        }

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            self.calls.append((name, args))
            if self.echo:  # a raw write: a signal handler may call this while the main thread is inside print()
                os.write(1, (" ".join(map(str, ("call", name, *args))) + "\n").encode())
            if name in self.fail:
                raise self.fail[name]
            result = self.results.get(name)
            return result(*args) if result is not None else None

        return call

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def lock_calls(self) -> list[str]:
        return [n for n in self.names() if "LockedClocks" in n]


def monitor(**kw: Any) -> tuple[FakeNvml, ClockMonitor]:
    fake = FakeNvml(**kw)
    return fake, ClockMonitor(fake)


# ---- reads ---------------------------------------------------------------------------------------


def test_read_reports_clocks_temperature_power_and_reasons() -> None:
    _, m = monitor(reasons=0x1)
    r = m.read()
    assert (r.sm_mhz, r.mem_mhz, r.temperature_c, r.power_w) == (1650, 3201, 41, 123.456)
    assert r.event_reasons == ["gpu_idle"] and not r.throttled
    assert r.to_dict() == {"sm_mhz": 1650, "mem_mhz": 3201, "temperature_c": 41, "power_w": 123.456,
                           "event_reasons": ["gpu_idle"], "throttled": False}


@pytest.mark.parametrize(
    ("mask", "names", "throttled"),
    [
        (0x0, [], False),
        (0x2, ["user_defined_clocks"], False),
        (0x4, ["sw_power_cap"], True),
        (0x8 | 0x1, ["gpu_idle", "hw_slowdown"], True),
        (0x20, ["sw_thermal_slowdown"], True),
        (0x40, ["hw_thermal_slowdown"], True),
        (0x80, ["hw_power_brake_slowdown"], True),
        (0x10 | 0x100, ["sync_boost", "display_clock_setting"], False),
        (0x1000 | 0x2, ["user_defined_clocks", "unknown_0x1000"], False),
    ],
)
def test_reasons_are_decoded_and_slowdowns_flag_throttling(mask: int, names: list[str], throttled: bool) -> None:
    assert decode_reasons(mask) == names
    _, m = monitor(reasons=mask)
    assert m.read().throttled is throttled


def test_older_drivers_fall_back_to_throttle_reasons() -> None:
    fake = FakeNvml(reasons=0x40, fail={"nvmlDeviceGetCurrentClocksEventReasons": FakeNvml.NVMLError_FunctionNotFound()})
    r = ClockMonitor(fake).read()
    assert r.event_reasons == ["hw_thermal_slowdown"] and r.throttled
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fake.names()


def test_a_field_the_card_does_not_report_is_none() -> None:
    _, m = monitor(fail={"nvmlDeviceGetPowerUsage": FakeNvml.NVMLError_NotSupported()})
    assert m.read().power_w is None and m.read().sm_mhz == 1650


def test_cuda_device_maps_to_nvml_by_pci_bus_id() -> None:
    fake = FakeNvml()
    m = ClockMonitor.for_pci_bus_id("0000:3B:00.0", nvml=fake)
    assert m.available and m.handle == "handle@0000:3B:00.0"
    assert ("nvmlDeviceGetHandleByIndex", (0,)) not in fake.calls
    assert ClockMonitor(FakeNvml(), index=3).handle == "handle3"


def test_device_info() -> None:
    _, m = monitor()
    assert m.device_info() == {"name": "NVIDIA H200", "driver": "580.65", "max_sm_mhz": 1980,
                               "max_mem_mhz": 3201, "power_limit_w": 700.0, "persistence_mode": True}
    fake = FakeNvml(fail={"nvmlDeviceGetPersistenceMode": FakeNvml.NVMLError_NotSupported("not on this card")})
    fake.results["nvmlDeviceGetPersistenceMode"] = lambda h: 0  # NVML_FEATURE_DISABLED
    assert ClockMonitor(fake).device_info()["persistence_mode"] is None
    fake.fail.clear()
    assert ClockMonitor(fake).device_info()["persistence_mode"] is False


# ---- NVML unavailable -------------------------------------------------------------------------------


def test_no_driver_degrades_to_unavailable_with_the_reason() -> None:
    fake, m = monitor(fail={"nvmlInit": FakeNvml.NVMLError_DriverNotLoaded("Driver Not Loaded")})
    assert not m.available and m.unavailable == "NVML cannot be initialised: Driver Not Loaded"
    assert m.device_info() == {"unavailable": m.unavailable}
    with pytest.raises(RuntimeError, match="unavailable"):
        m.read()
    m.close()
    assert "nvmlShutdown" not in fake.names()


def test_unknown_device_degrades_and_shuts_nvml_down() -> None:
    fake, m = monitor(fail={"nvmlDeviceGetHandleByIndex": FakeNvml.NVMLError("Not Found")})
    assert not m.available and "index 0" in m.unavailable and "nvmlShutdown" in fake.names()


def test_missing_pynvml_degrades(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(clocks, "_pynvml", missing)
    m = ClockMonitor()
    assert not m.available and "nvidia-ml-py" in m.unavailable


def test_close_shuts_nvml_down_once() -> None:
    fake, m = monitor()
    with m:
        pass
    m.close()
    assert fake.names().count("nvmlShutdown") == 1


# ---- locking ----------------------------------------------------------------------------------------


def test_lock_and_restore_on_normal_exit() -> None:
    fake, m = monitor()
    before = signal.getsignal(signal.SIGTERM)
    with lock_clocks(m, 1650, 3201) as lock:
        assert lock.locked and lock.to_dict() == {"sm_mhz": 1650, "mem_mhz": 3201, "locked": True, "reason": None}
        assert fake.lock_calls() == [SET_GPU, SET_MEM]
        assert signal.getsignal(signal.SIGTERM) is not before
    assert fake.lock_calls() == [SET_GPU, SET_MEM, RESET_MEM, RESET_GPU]
    assert (SET_GPU, ("handle0", 1650, 1650)) in fake.calls
    assert signal.getsignal(signal.SIGTERM) is before


def test_sm_only_lock_leaves_memory_alone() -> None:
    fake, m = monitor()
    with lock_clocks(m, 1410):
        pass
    assert fake.lock_calls() == [SET_GPU, RESET_GPU]


@pytest.mark.parametrize("error", [ValueError("boom"), KeyboardInterrupt()])
def test_restore_on_exception_and_ctrl_c(error: BaseException) -> None:
    fake, m = monitor()
    with pytest.raises(type(error)):
        with lock_clocks(m, 1650, 3201):
            raise error
    assert fake.lock_calls()[-2:] == [RESET_MEM, RESET_GPU]


def test_sigterm_in_process_restores_then_exits_143() -> None:
    fake, m = monitor()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exited:
        with lock_clocks(m, 1650, 3201):
            os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler as os.kill returns
            pytest.fail("SIGTERM did not interrupt the block")
    assert exited.value.code == 128 + signal.SIGTERM
    assert fake.lock_calls() == [SET_GPU, SET_MEM, RESET_MEM, RESET_GPU]
    assert signal.getsignal(signal.SIGTERM) is before


CHILD = """
import sys, time
sys.path[:0] = [{tests!r}, {root!r}]
from test_clocks import FakeNvml
from qsa_cli.clocks import ClockMonitor, lock_clocks
with lock_clocks(ClockMonitor(FakeNvml(echo=True)), 1650, 3201):
    print("locked", flush=True)
    time.sleep(60)
print("not reached", flush=True)
"""


def test_a_real_sigterm_to_a_child_process_restores_the_clocks() -> None:
    tests = Path(__file__).resolve().parent
    code = textwrap.dedent(CHILD.format(tests=str(tests), root=str(tests.parent)))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in child.stdout:
            lines.append(line.strip())
            if line.strip() == "locked":
                break
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
    lines += out.split("\n")
    calls = [line.split()[1] for line in lines if line.startswith("call ")]
    assert child.returncode == 143, err
    assert calls[-2:] == [RESET_MEM, RESET_GPU] and "not reached" not in lines


def test_no_permission_refuses_before_the_block_runs() -> None:
    fake, m = monitor(fail={SET_GPU: FakeNvml.NVMLError_NoPermission("Insufficient Permissions")})
    with pytest.raises(ClockLockError) as refused:
        with lock_clocks(m, 1650):
            pytest.fail("the block ran without the lock")
    message = str(refused.value)
    assert "\n" not in message and "SM 1650 MHz" in message and "root" in message
    assert fake.lock_calls() == [SET_GPU]


def test_a_refused_memory_lock_undoes_the_sm_lock() -> None:
    fake, m = monitor(fail={SET_MEM: FakeNvml.NVMLError_NotSupported("Not Supported")})
    with pytest.raises(ClockLockError, match="not supported"):
        with lock_clocks(m, 1650, 3201):
            pass
    assert fake.lock_calls() == [SET_GPU, SET_MEM, RESET_GPU]


def test_optional_lock_warns_and_runs_unlocked() -> None:
    fake, m = monitor(fail={SET_GPU: FakeNvml.NVMLError_NoPermission("Insufficient Permissions")})
    warnings: list[str] = []
    before = signal.getsignal(signal.SIGTERM)
    ran = False
    with lock_clocks(m, 1650, optional=True, warn=warnings.append) as lock:
        ran = True
        assert signal.getsignal(signal.SIGTERM) is before
    assert ran and not lock.locked and "root" in lock.reason
    assert len(warnings) == 1 and "not locked" in warnings[0]
    assert fake.lock_calls() == [SET_GPU]


def test_lock_without_nvml() -> None:
    _, m = monitor(fail={"nvmlInit": FakeNvml.NVMLError_DriverNotLoaded("Driver Not Loaded")})
    with pytest.raises(ClockLockError, match="NVML unavailable"):
        with lock_clocks(m, 1650):
            pass
    warnings: list[str] = []
    with lock_clocks(m, 1650, optional=True, warn=warnings.append) as lock:
        assert not lock.locked
    assert warnings


def test_a_failed_reset_warns_without_hiding_the_error() -> None:
    fake, m = monitor(fail={RESET_GPU: FakeNvml.NVMLError("Unknown Error")})
    warnings: list[str] = []
    with pytest.raises(ValueError, match="boom"):
        with lock_clocks(m, 1650, warn=warnings.append):
            raise ValueError("boom")
    assert len(warnings) == 1 and "nvidia-smi -rgc" in warnings[0]


# ---- lock spec ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "parsed"), [("1650", (1650, None)), ("1650,3201", (1650, 3201)), (" 1410 , 2619 ", (1410, 2619))])
def test_parse_lock_spec(spec: str, parsed: tuple[int, int | None]) -> None:
    assert parse_lock_spec(spec) == parsed


@pytest.mark.parametrize("spec", ["", "fast", "1650,", "1650,3201,1", "0", "-5", "1650.5", "1650;3201"])
def test_parse_lock_spec_rejects(spec: str) -> None:
    with pytest.raises(ClockLockError, match="SM_MHZ"):
        parse_lock_spec(spec)
