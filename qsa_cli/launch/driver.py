"""Programmatic dependent launches through the CUDA driver's ``cuLaunchKernelEx`` (ctypes), and the
driver's count of a cluster kernel's clusters the device runs at once.

CuPy launches a raw kernel without launch attributes, so a launch that carries one goes to the driver
directly. The only attribute used is programmatic stream serialization (sm_90 and newer): the launch
may start once every CTA of the launch before it in the stream has called ``qsa_allow_next_grid`` (or
exited), and its kernel calls ``qsa_wait_prior_grid`` (kernels/qsa_common.cuh) before it touches what
that launch writes or reads. The launch overheads of a chain of short kernels then overlap.
Captured into a CUDA graph, such a launch becomes a programmatic edge of the graph.

A driver launch takes its arguments as untyped bytes at addresses, so two things are checked here that
CuPy's own launches check for us: a launch owns the arrays it passes (the driver sees only their
addresses: an array freed after the launch was built would be written after its memory went to another
allocation), and, where the driver can say (``cuFuncGetParamInfo``, CUDA 12.4), the packed arguments
have exactly the count, offsets and sizes of the compiled kernel's parameters. NVIDIA's ``cuda.bindings``
would take the same (value, type) pairs and check neither, so ctypes it stays: no extra dependency.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (cuda.h)
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cuda.h)
_PORTABLE_CLUSTER_CTAS = 8  # the largest cluster every card with clusters runs (CUDA's portable size)
_CUDA_ERROR_INVALID_VALUE = 1  # cuFuncGetParamInfo past the last parameter (without cuFuncGetParamCount)
_CTYPES = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.uint32): ctypes.c_uint32,
           np.dtype(np.int64): ctypes.c_int64, np.dtype(np.uint64): ctypes.c_uint64}


class LaunchError(RuntimeError):
    """The driver refused a launch, or its arguments do not match the kernel's parameters."""


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
def device_property(device_id: int, name: str) -> int:
    """A field of the device's ``cudaDeviceProp``, read once a process: CuPy's getDeviceProperties reads every
    field (about 1 ms), and a launcher is built for every call a selftest runs."""
    import cupy

    return int(cupy.cuda.runtime.getDeviceProperties(device_id)[name])


@functools.cache
def _driver() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.cuLaunchKernelEx.restype = ctypes.c_int
    lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.cuGetErrorName.restype = ctypes.c_int
    if hasattr(lib, "cuFuncGetParamInfo"):
        lib.cuFuncGetParamInfo.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                                           ctypes.POINTER(ctypes.c_size_t)]
        lib.cuFuncGetParamInfo.restype = ctypes.c_int
    lib.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.cuFuncSetAttribute.restype = ctypes.c_int
    if hasattr(lib, "cuOccupancyMaxActiveClusters"):
        lib.cuOccupancyMaxActiveClusters.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                                     ctypes.POINTER(_Config)]
        lib.cuOccupancyMaxActiveClusters.restype = ctypes.c_int
    if hasattr(lib, "cuFuncGetParamCount"):
        lib.cuFuncGetParamCount.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        lib.cuFuncGetParamCount.restype = ctypes.c_int
    return lib


def _error_name(lib: Any, status: int) -> str:
    name = ctypes.c_char_p()
    lib.cuGetErrorName(status, ctypes.byref(name))
    return (name.value or b"error %d" % status).decode()


def kernel_param(value: Any) -> ctypes._SimpleCData:
    """A kernel argument as the driver takes it: a device array by its address, a NumPy scalar by value."""
    if hasattr(value, "data") and hasattr(value.data, "ptr"):
        return ctypes.c_void_p(int(value.data.ptr))
    ctype = _CTYPES.get(value.dtype) if isinstance(value, np.generic) else None  # a width, not a Python int
    if ctype is None:
        raise TypeError(f"unsupported kernel argument {value!r}: a device array or a NumPy 32/64-bit integer")
    return ctype(int(value))


def packed_layout(params: list[ctypes._SimpleCData]) -> list[tuple[int, int]]:
    """(offset, size) of each argument in the kernel's parameter buffer: each at its own alignment,
    which is its size for every type ``kernel_param`` makes (as the CUDA ABI lays out parameters)."""
    layout, offset = [], 0
    for p in params:
        size = ctypes.sizeof(p)
        offset = -(-offset // size) * size
        layout.append((offset, size))
        offset += size
    return layout


def kernel_layout(function: int, packed: int) -> list[tuple[int, int]] | None:
    """(offset, size) of each parameter of the compiled kernel, from the driver; None where it cannot
    tell (no driver here, or one older than CUDA 12.4). Without ``cuFuncGetParamCount`` (newer still),
    the first ``packed`` parameters are read: a kernel with fewer fails there, one with more goes unseen.
    No index past the last parameter is asked for (compute-sanitizer reports that as an API error)."""
    try:
        lib = _driver()
    except OSError:
        return None
    if not hasattr(lib, "cuFuncGetParamInfo"):
        return None
    count = ctypes.c_size_t(packed)
    if hasattr(lib, "cuFuncGetParamCount"):
        status = lib.cuFuncGetParamCount(ctypes.c_void_p(function), ctypes.byref(count))
        if status != 0:
            raise LaunchError(f"cuFuncGetParamCount failed: {_error_name(lib, status)}")
    layout: list[tuple[int, int]] = []
    offset, size = ctypes.c_size_t(), ctypes.c_size_t()
    for i in range(count.value):
        status = lib.cuFuncGetParamInfo(ctypes.c_void_p(function), i, ctypes.byref(offset), ctypes.byref(size))
        if status == _CUDA_ERROR_INVALID_VALUE:
            break  # fewer parameters than packed
        if status != 0:
            raise LaunchError(f"cuFuncGetParamInfo failed: {_error_name(lib, status)}")
        layout.append((offset.value, size.value))
    return layout


def check_layout(name: str, packed: list[tuple[int, int]], declared: list[tuple[int, int]] | None) -> None:
    """LaunchError naming the first argument whose place or size differs from the kernel's parameter."""
    if declared is None or packed == declared:
        return
    if len(packed) != len(declared):
        raise LaunchError(f"{name}: {len(packed)} arguments packed for a kernel of {len(declared)} parameters")
    i = next(i for i, (p, d) in enumerate(zip(packed, declared)) if p != d)
    raise LaunchError(f"{name}: argument {i} packed at offset {packed[i][0]}, {packed[i][1]} bytes; "
                      f"the kernel's parameter is at {declared[i][0]}, {declared[i][1]} bytes")


def clusters_at_once(kernel: Any, cluster_ctas: int, threads: int, shared_mem: int) -> int:
    """How many clusters of a kernel compiled with ``__cluster_dims__(cluster_ctas)`` the device runs at once,
    ``threads`` a CTA and ``shared_mem`` dynamic bytes each (``cuOccupancyMaxActiveClusters``; the kernel's
    dynamic shared memory limit must already allow ``shared_mem``). A size over the portable 8 is first
    allowed on the function. 0 where the driver refuses either: no such cluster runs here."""
    lib = _driver()
    function = ctypes.c_void_p(int(kernel.kernel.ptr))
    if cluster_ctas > _PORTABLE_CLUSTER_CTAS and lib.cuFuncSetAttribute(function, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1):
        return 0
    if not hasattr(lib, "cuOccupancyMaxActiveClusters"):
        return 0
    triple = ctypes.c_uint * 3
    config = _Config(grid=triple(cluster_ctas, 1, 1), block=triple(threads, 1, 1), shared_bytes=shared_mem)
    count = ctypes.c_int()
    status = lib.cuOccupancyMaxActiveClusters(ctypes.byref(count), function, ctypes.byref(config))
    return count.value if status == 0 else 0


class ProgrammaticLaunch:
    """One kernel launch with programmatic stream serialization, on the stream current at each call.

    It holds ``args`` (the arrays among them stay allocated while the launch exists) and, before it is
    first used, checks them against the kernel's parameters; ``shared_mem``: its dynamic shared memory bytes."""

    def __init__(self, kernel: Any, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
                 shared_mem: int = 0) -> None:
        self.args = args  # owned: the driver only ever sees the arrays' addresses
        function = int(kernel.kernel.ptr)  # CuPy RawKernel -> its CUfunction
        self._function = ctypes.c_void_p(function)
        self._params = [kernel_param(a) for a in args]  # kept alive: the driver reads them at each launch
        check_layout(getattr(kernel, "name", "kernel"), packed_layout(self._params),
                     kernel_layout(function, len(self._params)))
        self._pointers = (ctypes.c_void_p * len(args))(*(ctypes.addressof(p) for p in self._params))
        self._attribute = _Attribute(id=_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
        dims = lambda d: (ctypes.c_uint * 3)(*(tuple(d) + (1, 1, 1))[:3])
        self._config = _Config(grid=dims(grid), block=dims(block), shared_bytes=shared_mem,
                               attrs=ctypes.pointer(self._attribute), num_attrs=1)

    def __call__(self) -> None:
        import cupy

        self._config.stream = cupy.cuda.get_current_stream().ptr or None
        lib = _driver()
        status = lib.cuLaunchKernelEx(ctypes.byref(self._config), self._function, self._pointers, None)
        if status != 0:
            raise LaunchError(f"cuLaunchKernelEx failed: {_error_name(lib, status)}")
