"""The integrity of a stage's run, checked in every run on both backends: a kernel must not write outside
its buffers, must not change its inputs, and must give the same output on every call.

- Every input, output and scratch array of a stage is carved out of a larger allocation, between two
  guard zones filled with a pattern (``GuardedBuffers``); after each variant the zones must still
  hold it. (compute-sanitizer's memcheck sees writes past an allocation; a guard zone sees a write
  that lands in a neighbouring tensor of the same pool, which memcheck cannot.)
- Every input is hashed before the stage (``sealed``: once, where the inputs are made; the record keeps it)
  and compared with a copy of itself after each variant (``Pristine``).
- The output of a variant's last timed call is compared with its first (the parity) output.
A violation is a parity failure of the variant, naming the buffer.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, Protocol

import numpy as np

GUARD_BYTES = 4096  # each side; a multiple of 256, so a carved array keeps its allocation's alignment
_ALIGN = 256
GUARD_PATTERN = np.frombuffer(bytes.fromhex("9e3779b97f4a7c15"), dtype=np.uint8)  # no poison, no small number


def guarded_bytes(nbytes: int) -> int:
    """The allocation an array of ``nbytes`` takes between its guard zones (GuardedBuffers)."""
    return 2 * GUARD_BYTES + -(-max(nbytes, 1) // _ALIGN) * _ALIGN


class Allocator(Protocol):
    """Where a launcher takes its scratch from: ``zeros(name, shape, dtype)``."""

    def zeros(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any: ...


class PlainAllocator:
    """Each array its own allocation (``qsa sanitize``: memcheck then sees every array's bounds)."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp

    def zeros(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.xp.zeros(shape, dtype=dtype)


class GuardedBuffers:
    """Arrays of one array module (numpy or cupy), each between two guard zones of GUARD_BYTES."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self._buffers: list[tuple[str, Any, int]] = []  # name, the whole allocation, the array's bytes
        self._patterns: dict[tuple[int, int], Any] = {}  # (bytes, phase): the pattern a zone holds, where it lives

    def empty(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        raw = self.xp.empty(guarded_bytes(nbytes), dtype=self.xp.uint8)
        self._buffers.append((name, raw, nbytes))
        self._arm(raw, nbytes)
        return raw[GUARD_BYTES:GUARD_BYTES + nbytes].view(dtype).reshape(shape)

    def zeros(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        array = self.empty(name, shape, dtype)
        array.fill(0)
        return array

    def asarray(self, name: str, host: np.ndarray) -> Any:
        """A guarded copy of ``host`` (C-contiguous)."""
        array = self.empty(name, host.shape, host.dtype)
        array[...] = self.xp.asarray(np.ascontiguousarray(host))
        return array

    def _zones(self, raw: Any, nbytes: int) -> tuple[Any, Any]:
        return raw[:GUARD_BYTES], raw[GUARD_BYTES + nbytes:]

    def _pattern(self, n: int, start: int) -> Any:
        """The pattern's bytes ``start..start+n`` of the whole allocation (the pattern runs through it); made
        once for each size and phase, as every check compares every zone with it (on the device: a copy each)."""
        phase = start % GUARD_PATTERN.size
        made = self._patterns.get((n, phase))
        if made is None:
            reps = -(-(phase + n) // GUARD_PATTERN.size)
            made = self._patterns[(n, phase)] = self.xp.asarray(np.tile(GUARD_PATTERN, reps)[phase:][:n])
        return made

    def _arm(self, raw: Any, nbytes: int) -> None:
        before, after = self._zones(raw, nbytes)
        before[...] = self._pattern(before.size, 0)
        after[...] = self._pattern(after.size, GUARD_BYTES + nbytes)

    def breaches(self) -> list[str]:
        """Every guard zone written since the last check (the first byte written, named), re-armed so the
        next variant is judged on its own."""
        if not self._buffers:
            return []
        # whether each zone was written, each in one reduction into one array read back at once (a device
        # runs one kernel a zone and waits once a check); only a buffer whose were is looked at byte by byte,
        # on the host: a zone's 4 KB copied there beats another device kernel (CuPy's nonzero is a scan)
        written_to = self.xp.empty(2 * len(self._buffers), dtype=bool)
        zones = (zone_start for _, raw, nbytes in self._buffers
                 for zone_start in zip(self._zones(raw, nbytes), (0, GUARD_BYTES + nbytes)))
        for i, (zone, start) in enumerate(zones):
            _zone_written(self.xp, zone, self._pattern(zone.size, start), written_to[i, ...])
        found = []
        for (name, raw, nbytes), zones_hit in zip(self._buffers, written_to.reshape(-1, 2).tolist()):
            if not any(zones_hit):
                continue
            before, after = self._zones(raw, nbytes)
            hits = []
            for where, zone, start in (("before", before, 0), ("after", after, GUARD_BYTES + nbytes)):
                written = np.flatnonzero(_on_host(zone) != _on_host(self._pattern(zone.size, start)))
                if written.size:
                    nearest = GUARD_BYTES - int(written[-1]) if where == "before" else int(written[0]) + 1
                    hits.append(f"{name}: {int(written.size)} guard byte(s) {where} it written, "
                                f"the nearest {nearest} byte(s) {where} it")
            if hits:
                self._arm(raw, nbytes)
            found += hits
        return found


def _zone_written(xp: Any, zone: Any, pattern: Any, out: Any) -> None:
    """Whether ``zone`` differs from ``pattern`` anywhere, into the 0-d array ``out``: on a device one kernel
    (CuPy's ``!=`` then ``any`` are two, with a temporary array between)."""
    if xp is np:
        out[...] = np.any(zone != pattern)
    else:
        _device_zone_written()(zone, pattern, out=out)


@functools.cache
def _device_zone_written() -> Any:
    import cupy

    return cupy.ReductionKernel("uint8 zone, uint8 pattern", "bool written", "zone != pattern", "a || b",
                                "written = a", "false", "qsa_guard_zone_written")


def _on_host(array: Any) -> np.ndarray:
    """An array on the host: a device's copied there, numpy's as it is (stages/common.to_host copies both)."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


def digest(array: Any) -> str:
    """sha256 of an array's bytes (a device array is copied to the host first)."""
    host = _on_host(array)
    return hashlib.sha256(np.ascontiguousarray(host).view(np.uint8)).hexdigest()  # hashed in place: no copy


def fingerprint(arrays: dict[str, Any]) -> dict[str, str]:
    """The digest of each array."""
    return {name: digest(a) for name, a in arrays.items()}


def sealed(arrays: dict[str, np.ndarray]) -> dict[str, str]:
    """The digest of each host array, each made read-only first: a digest made once (where the arrays are
    made, a worker process) stays the digest of their bytes wherever they go, and a write into them raises."""
    for array in arrays.values():
        array.flags.writeable = False
    return fingerprint(arrays)


class Pristine:
    """Copies of placed arrays, kept where they live (a device's in its memory): whether one changed is a
    comparison of its bytes there, with no copy to the host and no hash (a call's inputs of hundreds of
    MB are compared after every variant)."""

    def __init__(self, xp: Any, arrays: dict[str, Any]) -> None:
        self.xp = xp
        self._copies = {name: xp.array(a, copy=True) for name, a in arrays.items()}

    def changed(self, arrays: dict[str, Any]) -> list[str]:
        """The names of ``arrays`` whose bytes differ from their copy's (a NaN kept bit for bit is unchanged),
        read back at once (a device waits once a check, not once an array)."""
        same = self.xp.stack([self.xp.array_equal(_words(arrays[name]), _words(copy))
                              for name, copy in self._copies.items()]).tolist()
        return [name for name, kept in zip(self._copies, same) if not kept]


def word_bytes(nbytes: int) -> int:
    """The widest unsigned word that tiles ``nbytes``: what Pristine compares an array of that size in."""
    return next(w for w in (8, 4, 2, 1) if nbytes % w == 0)


def _words(array: Any) -> Any:
    """An array's bytes as the widest unsigned words that tile them: the same bytes compared in an eighth of the
    elements (a call's scores are tens of MB, compared after every variant)."""
    flat = array.reshape(-1).view(np.uint8)
    return flat.view(f"u{word_bytes(flat.size)}")
