"""Programmatic dependent launches (qsa_cli/launch/driver.py) and when the split uses them: no device needed.

The ctypes structures must match cuda.h's CUlaunchAttribute / CUlaunchConfig byte for byte, or the
driver would read a wrong grid, stream or attribute.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from qsa_cli.dispatch import ENV_PDL, PDL_MIN_CC, programmatic_launches
from qsa_cli.launch import driver


def test_launch_structures_match_cuda_h() -> None:
    # CUlaunchAttribute: enum id, 4 bytes of padding, a 64-byte value union (the int value first)
    assert ctypes.sizeof(driver._Attribute) == 72
    assert driver._Attribute.value.offset == 8
    # CUlaunchConfig: 7 unsigned, then the stream pointer (8-aligned), the attrs pointer, numAttrs
    assert driver._Config.grid.offset == 0 and driver._Config.block.offset == 12
    assert driver._Config.shared_bytes.offset == 24
    assert driver._Config.stream.offset == 32 and driver._Config.attrs.offset == 40
    assert driver._Config.num_attrs.offset == 48 and ctypes.sizeof(driver._Config) == 56
    attribute = driver._Attribute(id=driver._PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
    raw = bytes(attribute)
    assert raw[:4] == (6).to_bytes(4, "little") and raw[8:12] == (1).to_bytes(4, "little")


class _DevicePointer:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class _FakeArray:
    def __init__(self, ptr: int) -> None:
        self.data = _DevicePointer(ptr)


def test_kernel_params_by_address_and_by_value() -> None:
    assert driver.kernel_param(_FakeArray(0x7F0012345600)).value == 0x7F0012345600
    for value, ctype in ((np.int32(-3), ctypes.c_int32), (np.uint32(7), ctypes.c_uint32),
                         (np.int64(1 << 40), ctypes.c_int64), (np.uint64(5), ctypes.c_uint64)):
        param = driver.kernel_param(value)
        assert isinstance(param, ctype) and param.value == int(value)


@pytest.mark.parametrize("value", [3, 2.5, np.float32(1.0), np.int16(2), np.zeros(2, np.int32)])
def test_kernel_params_refuse_what_the_kernels_never_take(value: object) -> None:
    with pytest.raises(TypeError, match="unsupported kernel argument"):
        driver.kernel_param(value)


@pytest.mark.parametrize("cc", [70, 75, 80, 86, 89, 90, 100, 120])
def test_programmatic_launches_on_sm90_and_newer_unless_switched_off(cc: int) -> None:
    assert programmatic_launches(cc, {}) == (cc >= PDL_MIN_CC)
    assert programmatic_launches(cc, {ENV_PDL: "1"}) == (cc >= PDL_MIN_CC)
    assert programmatic_launches(cc, {ENV_PDL: "0"}) is False
