"""The names a record uses for what it holds: stages, reference points, check subjects, the inputs row.

Runners write these names into a record and renderers read them back, so both import them from here
(the record's package), never from each other: an output module needs no stage to know what
``read-floor`` means.
"""

from __future__ import annotations

SCORES, TOPK, WINDOW = "scores", "topk", "window"
STAGES = (SCORES, TOPK, WINDOW)  # in the order the tables show them
KERNEL_STAGES = (SCORES, TOPK)  # the stages whose variants are kernels (the window pairs them)

# Reference points: timed beside the variants, never variants themselves.
READ_FLOOR = "read-floor"  # a plain float4 read of the scorer's key bytes, under the same L2 state
ARGPARTITION = "cupy.argpartition"  # a library's top-k, CuPy's host work included
REFERENCE_POINTS = (READ_FLOOR, ARGPARTITION)

# What a variant's output is checked against besides other variants.
CPU_MODEL = "cpu-model"  # the scorer's exact CPU model
CPU_ORACLE = "cpu-oracle"  # the top-k's stable-sort oracle

# Integrity rows (``against`` names what was checked) and the inputs row's hashes.
GUARD_ZONES = "guard zones"
INPUTS = "inputs"
LAST_CALL = "last timed call"
INPUTS_HASH, OUTPUT_HASH = "inputs", "output"

# The L2's state before each timed call (qsa_cli/timing.py puts it there; docs/timing.md): clean, read
# flushed; dirty, write flushed (nvbench's cold); warm, left as the previous call left it. The CPU backend's
# cases say "host": it has no L2. Records before version 4 called the read flush "cold".
L2_STATES = ("clean", "dirty", "warm")
DEFAULT_L2 = "dirty"
HOST_L2 = "host"
RENAMED_L2 = {"cold": "clean"}

# What timed a measurement (--timer; docs/timing.md): qsa's own timer, or NVIDIA's nvbench (cuda-bench's
# cuda.bench) on the same launchers. Records before version 5 were all qsa's.
QSA_TIMER, NVBENCH_TIMER = "qsa", "nvbench"
TIMERS = (QSA_TIMER, NVBENCH_TIMER)

# The scorer's synthetic keys: spec section 5's, or adversarial. A case names its keys only when they are
# not the default, so a synthetic case keeps the key earlier records have.
SCORER_KEYS = ("synthetic", "adversarial")
DEFAULT_KEYS = SCORER_KEYS[0]

# reference: the arithmetic or selection of record; baseline / candidate: the "before" and "after" of the
# change under review; variant: any other implementation, checked and timed beside them.
ROLES = ("reference", "baseline", "candidate", "variant")

# A run's times are judged (a sweep's thresholds, the gate's SLOW and FAST) only on the GPU backend: the CPU
# backend's are the Python models' on the host, and say nothing of the kernels'.
CPU_TIMES = "not judged: CPU times (the CPU models' on the host"


def times_judged(backend: str) -> bool:
    """Whether the times of a run on ``backend`` (a record's) are judged: the GPU backend's only."""
    return backend == "gpu"


def pair_name(scorer: str, topk: str) -> str:
    """A window pair's name: the scorer it runs, then the top-k."""
    return f"{scorer}+{topk}"


def last_call(variant: str) -> str:
    """The subject of a variant's last-timed-call check."""
    return f"{variant} ({LAST_CALL})"
