"""Programmatic dependent launches through the CUDA driver's ``cuLaunchKernelEx`` (ctypes).

CuPy launches a raw kernel without launch attributes, so a launch that carries one goes to the driver
directly. The only attribute used is programmatic stream serialization (sm_90 and newer): the launch
may start once every CTA of the launch before it in the stream has called ``qsa_allow_next_grid`` (or
exited), and its kernel calls ``qsa_wait_prior_grid`` (kernels/qsa_common.cuh) before it touches what
that launch writes or reads. The launch overheads of a chain of short kernels then overlap.
Captured into a CUDA graph, such a launch becomes a programmatic edge of the graph.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (cuda.h)
_CTYPES = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.uint32): ctypes.c_uint32,
           np.dtype(np.int64): ctypes.c_int64, np.dtype(np.uint64): ctypes.c_uint64}


class LaunchError(RuntimeError):
    """The driver refused a launch; the message carries its error name."""


class _Attribute(ctypes.Structure):  # CUlaunchAttribute: an enum, padding to 8 bytes, a 64-byte union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int), ("rest", ctypes.c_char * 60)]


class _Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_bytes", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_Attribute)),
        ("num_attrs", ctypes.c_uint),
    ]


@functools.cache
def _driver() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.cuLaunchKernelEx.restype = ctypes.c_int
    lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.cuGetErrorName.restype = ctypes.c_int
    return lib


def kernel_param(value: Any) -> ctypes._SimpleCData:
    """A kernel argument as the driver takes it: a device array by its address, a NumPy scalar by value."""
    if hasattr(value, "data") and hasattr(value.data, "ptr"):
        return ctypes.c_void_p(int(value.data.ptr))
    ctype = _CTYPES.get(value.dtype) if isinstance(value, np.generic) else None  # a width, not a Python int
    if ctype is None:
        raise TypeError(f"unsupported kernel argument {value!r}: a device array or a NumPy 32/64-bit integer")
    return ctype(int(value))


class ProgrammaticLaunch:
    """One kernel launch with programmatic stream serialization, on the stream current at each call."""

    def __init__(self, kernel: Any, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
        self._function = ctypes.c_void_p(int(kernel.kernel.ptr))  # CuPy RawKernel -> its CUfunction
        self._params = [kernel_param(a) for a in args]  # kept alive: the driver reads them at each launch
        self._pointers = (ctypes.c_void_p * len(args))(*(ctypes.addressof(p) for p in self._params))
        self._attribute = _Attribute(id=_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
        dims = lambda d: (ctypes.c_uint * 3)(*(tuple(d) + (1, 1, 1))[:3])
        self._config = _Config(grid=dims(grid), block=dims(block), shared_bytes=0,
                               attrs=ctypes.pointer(self._attribute), num_attrs=1)

    def __call__(self) -> None:
        import cupy

        self._config.stream = cupy.cuda.get_current_stream().ptr or None
        lib = _driver()
        status = lib.cuLaunchKernelEx(ctypes.byref(self._config), self._function, self._pointers, None)
        if status != 0:
            name = ctypes.c_char_p()
            lib.cuGetErrorName(status, ctypes.byref(name))
            raise LaunchError(f"cuLaunchKernelEx failed: {(name.value or b'error %d' % status).decode()}")
