"""Programmatic dependent launches (qsa_cli/launch/driver.py) and when the split uses them: no device needed.

The ctypes structures must match cuda.h's CUlaunchAttribute / CUlaunchConfig byte for byte, or the
driver would read a wrong grid, stream or attribute; a launch must own its arrays and pack exactly
the parameters its kernel declares.
"""

from __future__ import annotations

import ctypes
import gc
import re
import weakref

import numpy as np
import pytest

from qsa_cli import kernels
from qsa_cli.catalog import qsa_catalog
from qsa_cli.core.geometry import PDL_MIN_CC, SPLIT_CHUNK_SIZES
from qsa_cli.dispatch import ENV_PDL, programmatic_launches
from qsa_cli.launch import driver, topk


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


# ---- the launch owns its arguments, and packs them as the kernels declare them ----------------------

class _FakeKernel:
    """What ProgrammaticLaunch reads of a CuPy RawKernel: its CUfunction and its name."""

    def __init__(self, name: str) -> None:
        self.kernel = _DevicePointer(0x1000)
        self.name = name


def test_a_launch_keeps_its_arrays_alive() -> None:
    # the split's counts were only in launches 5 and 6: held by address alone, the array was freed when
    # the launcher returned, and the count kernel wrote into whatever took its memory next
    arrays = [_FakeArray(0x7F0000000000 + 256 * i) for i in range(3)]
    alive = [weakref.ref(a) for a in arrays]
    launch = driver.ProgrammaticLaunch(_FakeKernel("k"), (1,), (32,), (*arrays, np.int32(3)))
    del arrays
    gc.collect()
    assert all(ref() is not None for ref in alive)
    del launch
    gc.collect()
    assert all(ref() is None for ref in alive)


def test_packed_layout_aligns_each_argument_to_its_size() -> None:
    params = [driver.kernel_param(v) for v in (_FakeArray(8), np.int32(1), np.int32(2), _FakeArray(16), np.int32(3),
                                                 np.uint64(4))]
    assert driver.packed_layout(params) == [(0, 8), (8, 4), (12, 4), (16, 8), (24, 4), (32, 8)]


def test_a_layout_other_than_the_kernels_is_refused() -> None:
    packed = [(0, 8), (8, 4), (16, 8)]
    driver.check_layout("k", packed, None)  # the driver cannot tell: nothing to compare
    driver.check_layout("k", packed, list(packed))
    with pytest.raises(driver.LaunchError, match="3 arguments packed for a kernel of 2 parameters"):
        driver.check_layout("k", packed, packed[:2])
    with pytest.raises(driver.LaunchError, match="argument 1 packed at offset 8, 4 bytes; the kernel's parameter is at 8, 8 bytes"):
        driver.check_layout("k", packed, [(0, 8), (8, 8), (16, 8)])


_SIZES = {"int": 4, "unsigned": 4, "float": 4, "topk_counts": 8, "long long": 8, "unsigned long long": 8}


def declared_layout(source: str, kernel: str) -> list[tuple[int, int]]:
    """(offset, size) of each parameter of ``__global__ ... kernel(...)`` as the source declares it."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", kernels.source_text(source), flags=re.S)
    name = kernel.split("<")[0]
    m = re.search(rf"__global__[^;{{]*?\b{name}\s*\(([^)]*)\)\s*\{{", text)
    assert m, f"{source} declares no kernel {name}"
    sizes = []
    for param in m.group(1).split(","):
        words = param.replace("__restrict__", "").replace("const", "").split()
        if "*" in param:
            sizes.append(8)
        else:
            base = " ".join(words[:-1]) if len(words) > 1 else words[0]
            sizes.append(_SIZES[base])
    layout, offset = [], 0
    for size in sizes:
        offset = -(-offset // size) * size
        layout.append((offset, size))
        offset += size
    return layout


def test_every_split_launch_packs_its_kernels_parameters() -> None:
    common = (_FakeArray(256), _FakeArray(512), _FakeArray(768), np.int32(8), np.int32(131074), np.int32(0))
    scratch = topk.SplitScratch(_FakeArray(1024), _FakeArray(2048), _FakeArray(4096), _FakeArray(5120))
    args = topk.split_kernel_args(common, scratch)
    names = qsa_catalog().get("topk", "split").kernels
    assert len(args) == 5 and len(names) == 5 * len(SPLIT_CHUNK_SIZES)
    for at in range(0, len(names), len(args)):  # each chunk size's five launches
        for name, a in zip(names[at:at + len(args)], args):
            packed = driver.packed_layout([driver.kernel_param(v) for v in a])
            assert packed == declared_layout(topk.SOURCE, name), name


def test_the_declared_layout_reader_sees_a_wrong_type() -> None:
    # the check above can fail: a uint64 where the kernel takes an int shifts every later parameter
    a = (_FakeArray(256), _FakeArray(512), _FakeArray(768), np.uint64(8), np.int32(131074), np.int32(0),
         _FakeArray(1024), _FakeArray(4096), _FakeArray(5120))
    packed = driver.packed_layout([driver.kernel_param(v) for v in a])
    assert packed != declared_layout(topk.SOURCE, qsa_catalog().get("topk", "split").kernels[0])
