"""What a run will take of this machine's memory, said before it starts when it is large, and refused (one line,
exit status 2, before anything is measured) when it cannot fit: the host's on both backends (the inputs and the
CPU models live there) and, on the GPU backend, the device's.

A run makes its cases one at a time (runs/stages.run_cases: a case's arrays are dropped when it ends), so its
largest case decides: ``CaseSize`` says what a case is by size, and the run passes every case it will make
(session.Settings.sizes). The figures are upper bounds, not guesses that may fall short:

- Host: measured peaks of CPU-backend runs (the largest resident set, less the interpreter's, over the arrays'
  bytes) rounded up; the CPU backend runs every variant's model where the GPU backend runs one, so they bound a
  GPU run's host too, with CUDA's and CuPy's own (HOST_GPU_BASE_BYTES) on top.
- Device: what the stages allocate (stages/base.run_stage, core/integrity.py): every input, output and scratch
  array between its two guard zones; a copy of each input (integrity.Pristine) and of each output's poison
  (stages/base.poisoned); the comparison's boolean array, one a word (integrity.word_bytes) of an input; each top-k
  variant's scratch as its launch shape sizes it (launch/shape.TopkShape.scratch_bytes); cupy.argpartition's
  sort where a top-k case times it; then the timer's L2 flush buffer with what making it takes, and
  DEVICE_SLACK_BYTES for the compiled modules, CUDA graphs and CuPy's rounding. A run with variants under an
  engine's switches has their child process's context, flush buffer and case on top of the parent's (whose
  CuPy pool keeps the case it freed). An engine checkout's own allocations (none in its ABI) are not counted.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import MemoryNeedError
from .geometry import IDX_DIM, SELECT_CAP, STEP_INTS, Call, capacity_of
from .integrity import guarded_bytes, word_bytes

KEY_BYTES = IDX_DIM * 4  # a block's pooled key, a query: 128 float32
WORD = 4  # a score, an id, a step record's int

# Host, measured on the CPU backend (2026-12-06, GNU time's largest resident set): a scorer case took 581 MB at
# 1M cells and 1 query (134 MB of keys), 629 MB at 8 queries (8.4 MB of scores); a top-k case 364 MB at 4M
# cells and 8 queries with its 4 score sets made at once (34 MB each), 260 MB for one set (a sweep's case),
# 309 MB at 8192 cells and 1024 prompt queries (8.4 MB each of scores and ids), 661 MB at 8M and 8 queries.
HOST_BASE_BYTES = 64 << 20  # the interpreter, numpy and qsa themselves (48 MB measured)
HOST_GPU_BASE_BYTES = 1 << 30  # CUDA's and CuPy's own host memory on the GPU backend: an allowance, not measured
HOST_KEY_FACTOR = 4  # a scorer case: the keys, the integrity check's copy, the CPU models' working arrays
HOST_SCORES_FACTOR = 10  # ... and each variant's scores kept, the model's, the poison
HOST_TOPK_FACTOR = 6  # a top-k case, over its score sets' bytes: the placed and pristine copies, the models'
HOST_IDS_FACTOR = 24  # ... and over its ids' bytes: each variant's kept, the models' per-query working
# Device: cupy.argpartition sorts what it partitions (CuPy's argsort through Thrust): a copy of the scores (4
# B), int64 indices (8 B) and int64 row keys (8 B), and the merge sort's buffers of all three (20 B); rounded up.
ARGPARTITION_BYTES_PER_SCORE = 48
# The timer's L2 flush buffer (timing.DeviceTimer): twice the L2, so that none of what the previous call left
# survives the flush; making it takes as much again (the random numbers it is made of)
FLUSH_L2_MULTIPLE = 2
FLUSH_MAKING_FACTOR = 2
DEVICE_SLACK_BYTES = 256 << 20  # compiled modules, CUDA graphs, CuPy's rounding of each allocation
CHILD_CONTEXT_BYTES = 512 << 20  # a child process's own CUDA context (runs/stages.py's switched variants)
TELL_FROM_BYTES = 1 << 30  # a run this large is said before it starts
GB = 1e9


@dataclass(frozen=True)
class CaseSize:
    """A case a run will make, by what its memory depends on: its stage (scores, topk or window), queries and
    blocks; ``active_blocks``: a prompt top-k call's (what its top-k reads; 0: a decode call, all of them);
    ``held``: how many inputs of this size the run makes at once (topk-parity's score sets)."""

    stage: str
    nq: int
    max_blocks: int
    active_blocks: int = 0
    held: int = 1

    @classmethod
    def of(cls, stage: str, call: Call, held: int = 1) -> CaseSize:
        return cls(stage, call.nq, call.max_blocks, call.active_blocks, held)

    @property
    def blocks(self) -> int:
        """The blocks a query's top-k reads at most."""
        return self.active_blocks or self.max_blocks

    def label(self) -> str:
        kind = "prompt" if self.active_blocks else "decode"
        return f"{self.stage} nq={self.nq} capacity={capacity_of(self.max_blocks)} {kind}"

    def _scorer_inputs(self) -> list[int]:
        """The bytes of a scorer's inputs: the keys (pooled), the dead key, the queries, the step records."""
        return [self.max_blocks * KEY_BYTES, KEY_BYTES, self.nq * KEY_BYTES, self.nq * STEP_INTS * WORD]

    @property
    def scores_bytes(self) -> int:
        return self.nq * self.max_blocks * WORD

    @property
    def ids_bytes(self) -> int:
        return self.nq * SELECT_CAP * WORD

    def arrays(self) -> tuple[list[int], list[int]]:
        """The bytes of the case's inputs and of its outputs, as its stage places them."""
        steps = self.nq * STEP_INTS * WORD
        if self.stage == "scores":
            return self._scorer_inputs(), [self.scores_bytes]
        if self.stage == "topk":
            return [self.scores_bytes, steps], [self.ids_bytes]
        return self._scorer_inputs(), [self.scores_bytes, self.ids_bytes]


def host_base_bytes(on_gpu: bool) -> int:
    """What every run takes of the host: the interpreter's and, on the GPU backend, CUDA's and CuPy's."""
    return HOST_BASE_BYTES + (HOST_GPU_BASE_BYTES if on_gpu else 0)


def host_bytes(case: CaseSize, on_gpu: bool) -> int:
    """The host memory ``case`` takes at most (the figures measured: HOST_KEY_FACTOR and the others)."""
    base = host_base_bytes(on_gpu)
    if case.stage == "topk":
        return base + (case.held + HOST_TOPK_FACTOR) * case.scores_bytes + HOST_IDS_FACTOR * case.ids_bytes
    keys = case.max_blocks * KEY_BYTES
    ids = HOST_IDS_FACTOR * case.ids_bytes if case.stage == "window" else 0
    return base + HOST_KEY_FACTOR * keys + HOST_SCORES_FACTOR * case.scores_bytes + ids


def device_case_bytes(case: CaseSize, scratch: Sequence[int], argpartition: bool) -> int:
    """The device memory ``case`` takes at most: its arrays between guard zones (``scratch``: every scratch
    array its variants take), the integrity check's copies and comparison, the poisons and (``argpartition``:
    the case times cupy.argpartition) that sort's."""
    inputs, outputs = case.arrays()
    placed = sum(guarded_bytes(n) for n in (*inputs, *outputs, *scratch))
    compared = max(n // word_bytes(n) for n in inputs)  # integrity.Pristine's comparison: a boolean a word
    copies = sum(inputs) + sum(outputs) + compared
    sort = ARGPARTITION_BYTES_PER_SCORE * case.nq * case.blocks if argpartition else 0
    return placed + copies + sort


def flush_bytes(l2_bytes: int, warm: bool) -> int:
    """The timer's L2 flush buffer with what making it takes; none warm."""
    return 0 if warm else FLUSH_MAKING_FACTOR * FLUSH_L2_MULTIPLE * l2_bytes


def device_run_bytes(case_bytes: int, flush: int, children: bool) -> int:
    """What a run takes of the device while a case of ``case_bytes`` runs: the timer's ``flush`` buffer and
    DEVICE_SLACK_BYTES besides; with switched variants (``children``), as much again in their child process and its
    context."""
    one = flush + DEVICE_SLACK_BYTES + case_bytes
    return 2 * one + CHILD_CONTEXT_BYTES if children else one


def available_host_bytes() -> int | None:
    """What this process can still take of the host without swapping or being refused: the least of the system's
    MemAvailable, the room its cgroups leave (a container's limit, which MemAvailable does not see) and the room
    its address-space and data ulimits leave; None where none of them says."""
    rooms = [room for room in (_mem_available(), cgroup_room(), *_ulimit_rooms()) if room is not None]
    return min(rooms) if rooms else None


def _mem_available() -> int | None:
    """MemAvailable (what can be had without swapping), or None where the system does not say."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


UNLIMITED = 1 << 60  # a cgroup limit this large is none (v1 writes 2^63 rounded to a page)
# (controller's mount under the cgroup root, its limit file, its usage file, memory.stat's reclaimable cache line)
CGROUP_V2 = ("", "memory.max", "memory.current", "inactive_file")
CGROUP_V1 = ("memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


def cgroup_room(root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")) -> int | None:
    """The least room this process's memory cgroups leave: each one's limit less its usage, less the file cache
    it could drop, from its own folder up to the controller's root; None where no limit is set."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        layout = CGROUP_V2 if controllers == "" else CGROUP_V1 if "memory" in controllers.split(",") else None
        if layout is None:
            continue
        mount, limit_file, usage_file, cache = layout
        base = root / mount
        folder = base / path.lstrip("/")
        for level in (folder, *folder.parents):
            room = _cgroup_level_room(level, limit_file, usage_file, cache)
            if room is not None:
                rooms.append(room)
            if level == base:
                break
    return min(rooms) if rooms else None


def _cgroup_level_room(folder: Path, limit_file: str, usage_file: str, cache: str) -> int | None:
    try:
        limit = (folder / limit_file).read_text().strip()
        if limit == "max" or int(limit) >= UNLIMITED:
            return None
        usage = int((folder / usage_file).read_text())
        stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines() if line.count(" ") == 1)
    except (OSError, ValueError):
        return None
    return max(0, int(limit) - usage + int(stat.get(cache, 0)))


def _ulimit_rooms() -> list[int | None]:
    """The room the address-space (ulimit -v) and data (ulimit -d) limits leave this process, each less what it
    has of them now (its VmSize, VmData); None where unlimited."""
    try:
        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    except OSError:
        return []
    rooms: list[int | None] = []
    for limit, field in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData")):
        soft = resource.getrlimit(limit)[0]
        if soft == resource.RLIM_INFINITY or field not in status:
            rooms.append(None)
            continue
        rooms.append(max(0, soft - int(status[field].split()[0]) * 1024))
    return rooms


def free_device_bytes() -> tuple[int, int]:
    """(free, total) bytes of the current CUDA device, as the driver says now."""
    import cupy

    free, total = cupy.cuda.runtime.memGetInfo()
    return int(free), int(total)


def largest(needs: Sequence[tuple[CaseSize, int]]) -> tuple[CaseSize, int]:
    """The case of ``needs`` (each with its bytes) that needs the most (the first such)."""
    return max(needs, key=lambda need: need[1])


def _told(need: int, base: int, of: str, where: str) -> str | None:
    """The line a run that fits says before it starts, when its cases take TELL_FROM_BYTES or more (beyond the
    ``base`` every run takes); None otherwise."""
    if need - base >= TELL_FROM_BYTES:
        return f"qsa: this run needs about {need / GB:.1f} GB of {where}{of}"
    return None


def tell(*lines: str | None) -> None:
    """The lines ``check_host`` and ``check_device`` gave, on stderr: said once every check has passed, so that a
    run refused by the last is one line, its error."""
    for line in filter(None, lines):
        print(line, file=sys.stderr, flush=True)


def check_host(command: str, sizes: Sequence[CaseSize], on_gpu: bool) -> str | None:
    """A MemoryNeedError when the run's largest case needs more host memory than this machine has available; the
    line to ``tell`` when its case takes TELL_FROM_BYTES or more and fits (or the system does not say)."""
    if not sizes:
        return None
    case, need = largest([(c, host_bytes(c, on_gpu)) for c in sizes])
    have = available_host_bytes()
    backend = "GPU" if on_gpu else "CPU"
    if have is not None and need > have:
        raise MemoryNeedError(f"{command} needs about {need / GB:.1f} GB of host memory on the {backend} backend "
                              f"(its largest case: {case.label()}); this machine has {have / GB:.1f} GB available")
    of = f" of the {have / GB:.1f} GB available" if have is not None else ""
    return _told(need, host_base_bytes(on_gpu), of, "host memory")


def check_device(command: str, needs: Sequence[tuple[CaseSize, int]], device: str) -> str | None:
    """A MemoryNeedError when the largest of ``needs`` (each case with all the device bytes the run takes while
    it runs) is more than the current device has free; the line to ``tell`` when it takes TELL_FROM_BYTES or
    more and fits. ``device``: how the line names the card."""
    if not needs:
        return None
    case, need = largest(needs)
    free, total = free_device_bytes()
    if need > free:
        raise MemoryNeedError(f"{command} needs about {need / GB:.1f} GB of device memory (its largest case: "
                              f"{case.label()}); {device} has {free / GB:.1f} GB free of {total / GB:.1f} GB")
    return _told(need, DEVICE_SLACK_BYTES, f" of the {free / GB:.1f} GB free on {device}", "device memory")
