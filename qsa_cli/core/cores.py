"""How many processes a run may keep busy at once."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (a container's or a CPU set's, not the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
