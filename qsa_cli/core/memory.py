"""What a scorer call will take of the host's memory on the CPU backend, said before it starts when it is
large, and refused when this machine has not that much available (rather than swapping for minutes or
being killed half-way)."""

from __future__ import annotations

import sys

from .errors import GeometryError
from .geometry import IDX_DIM, Call

KEY_BYTES = IDX_DIM * 4  # a block's pooled key: 128 float32
# Peak resident memory of `qsa select-bench CAP 1 1 CAP --backend cpu` over its keys' bytes, measured at 1M and
# 4M cells (581 MB and 2.18 GB for 134 MB and 537 MB of keys): the keys, the inputs' copy the integrity check
# keeps, and the CPU models' working arrays.
HOST_KEY_FACTOR = 4
HOST_BASE_BYTES = 64 << 20  # the interpreter, numpy and qsa themselves
TELL_FROM_BYTES = 1 << 30  # a run this large is said before it starts
GB = 1e9


def scorer_host_bytes(call: Call) -> int:
    """The host memory a scorer call takes on the CPU backend (HOST_KEY_FACTOR)."""
    return HOST_BASE_BYTES + HOST_KEY_FACTOR * call.max_blocks * KEY_BYTES


def available_host_bytes() -> int | None:
    """MemAvailable (what can be had without swapping), or None where the system does not say."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_scorer_fits(call: Call, command: str) -> None:
    """A GeometryError when the call needs more host memory than is available; a line on stderr when it
    needs TELL_FROM_BYTES or more and fits."""
    need = scorer_host_bytes(call)
    have = available_host_bytes()
    if have is not None and need > have:
        raise GeometryError(f"{command} at capacity {call.capacity} needs about {need / GB:.1f} GB of host memory "
                            f"on the CPU backend ({HOST_KEY_FACTOR}x its {call.max_blocks * KEY_BYTES / GB:.1f} GB "
                            f"of keys); this machine has {have / GB:.1f} GB available")
    if need >= TELL_FROM_BYTES:
        of = f" of the {have / GB:.1f} GB available" if have is not None else ""
        print(f"qsa: this run needs about {need / GB:.1f} GB of host memory{of} on the CPU backend",
              file=sys.stderr, flush=True)

