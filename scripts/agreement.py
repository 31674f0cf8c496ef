"""qsa's timer against NVIDIA's two references on the same launchers, inputs and card, with the GPU's own
timestamps beside them (run on a machine with the card, from the repository root, with cuda-bench and
cupti-python installed and ncu on PATH). Each reference times the same calls as qsa's timer, in the same process,
on the buffers one command placed, in alternating rounds (scripts/paired_timers.py): a call can sit on levels
that change from one process's buffers to the next (docs/timing.md), so two processes' medians are two draws.

- ``--l2 dirty`` (qsa's median) against nvbench's cold samples' median, ROUNDS rounds of SAMPLES samples each
  in turn, within TOLERANCE; both means are kept beside;
- ``--l2 clean`` (qsa's median) against Nsight Compute's durations of the call's kernels plus the launch overhead
  (what qsa's events time around an overhead call beyond ncu's durations of the same, measured the same way: as
  many empty kernels launched as the call's are, or for a cluster top-k the row's own launcher on an idle
  context, IDLE_CTX), within TOLERANCE, for every call whose launches do not overlap. qsa's rounds
  run outside the profiler's range, and after each, PROFILED of qsa's timed calls inside it (the kernels between
  the timer's two clock stamps of a sample, its batches off) with ncu's cache control off, so each kernel meets
  the L2 as qsa's flush before the sample, or the kernel before it in the call, left it: the state qsa times in.
  How many kernels a call launches, and whether one is a programmatic dependent launch (which ncu, replaying
  each kernel alone, cannot observe), is read from qsa's own record of the call (``launches``);
- beside them, not judged: CUPTI's kernel activity records of a clean run (scripts/call_trace.py), each timed
  call's span from its first kernel's start to its last one's end as the GPU ran them in the stream, plus what
  qsa's events time beyond the span of the row's overhead call. It observes every call, overlapped
  launches included, and shows which kernels a call ran.

A command that times several cases with the same kernels (a top-k's score sets) is judged on its row's case
alone (the continuous scores): the CUPTI trace's and ncu's calls are told apart by case from the record's
measurements, in the order they were taken (a trace or profile that holds other calls than those is refused).

Usage: python3 scripts/agreement.py [--rejudge] OUT_DIR [LABEL ...]   (only the rows whose label holds a LABEL;
writes each command's record, the paired samples, the traces, the ncu logs, agreement.jsonl (the summary, then a
row a line) and agreement.md there; --rejudge runs nothing and judges again what an earlier run wrote to OUT_DIR;
exits 1 when a row disagrees, 2 before anything runs when a tool, a package or the folder is wrong). Never
changes the card's clocks (``ncu --clock-control none``).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from collections.abc import Callable, Sequence
from pathlib import Path

TOLERANCE = 0.03
# --cache-control none: ncu neither flushes nor invalidates a cache before a kernel, so a kernel of a timed call
# meets the caches as qsa's call does (ncu's own flush, `all`, also empties caches qsa's flush leaves alone, and
# costs a small kernel more than it costs an empty one: docs/timing.md)
# --profile-from-start off: ncu profiles only inside the paired rounds' profiler ranges
NCU = ["ncu", "--clock-control", "none", "--cache-control", "none", "--profile-from-start", "off", "--metrics",
       "gpu__time_duration.sum", "--csv", "--print-units", "base"]
PAIRED = [sys.executable, str(Path(__file__).with_name("paired_timers.py"))]
ROUNDS = 5  # rounds of each timer in turn
SAMPLES = 100  # qsa's samples a round, and nvbench's
# qsa's timed calls ncu profiles after each round, each after qsa's flush (paired_timers.py: not judged by its
# hold, which ncu's serialisation always times out, nor measured again)
PROFILED = 2
# The context of the overhead call of a row whose call launches clusters (the cluster top-k): the row's own launch
# on at most a selection's width of cells, so that every query selects its whole context and its cluster leaves at
# once (kernels/topk_cluster.cu), the launch otherwise unchanged (a decode call's grid, cluster and shared memory
# follow the capacity): the launch itself, doing next to nothing, where an empty kernel would have to imitate what
# a cluster's CTAs do before they exit.
IDLE_CTX = 2048


@dataclass(frozen=True)
class Row:
    label: str
    command: tuple[str, ...]  # qsa's command and case, ITERS left out
    variant: str
    ctx: int
    nq: int
    cap: int
    kernel: str  # the regex of its kernels' names (ncu's filter)
    pdl: bool = True  # False: the call's launches one after another (QSA_PDL=0)

    def env(self) -> dict[str, str]:
        return {**os.environ, **({} if self.pdl else {"QSA_PDL": "0"})}

    @property
    def tag(self) -> str:
        """Its part of the output files' names."""
        return f"{self.variant}-{self.ctx}-{self.nq}{'' if self.pdl else '-nopdl'}"

    def idle_row(self) -> Row:
        """The row's own launcher on IDLE_CTX cells: the overhead call of a call that launches clusters."""
        return replace(self, label=f"{self.label}, idle", ctx=IDLE_CTX)

    def args(self, iters: str) -> list[str]:
        name, *rest = self.command
        return [name, str(self.ctx), str(self.nq), iters, str(self.cap), *rest, "--variants", self.variant]


ROWS = (
    Row("multi scorer 420K x 4", ("select-bench", "--no-model"), "multi", 420000, 4, 524288, "block_scores_multi"),
    Row("halve scorer 420K x 4", ("select-bench", "--no-model"), "halve", 420000, 4, 524288, "block_scores_halve"),
    Row("halve scorer 524K x 8", ("select-bench", "--no-model"), "halve", 524288, 8, 524288, "block_scores_halve"),
    Row("halve scorer 32K x 1", ("select-bench", "--no-model"), "halve", 32768, 1, 65536, "block_scores_halve"),
    Row("wide top-k 524K x 8", ("topk-parity", "0", "--no-model"), "wide", 524288, 8, 524288, "block_topk_wide"),
    Row("split top-k 524K x 8", ("topk-parity", "0", "--no-model"), "split", 524288, 8, 524288, "block_topk_split"),
    Row("split top-k 524K x 8, PDL off", ("topk-parity", "0", "--no-model"), "split", 524288, 8, 524288,
        "block_topk_split", pdl=False),
    Row("cluster top-k 524K x 8", ("topk-parity", "0", "--no-model"), "cluster", 524288, 8, 524288,
        "block_topk_cluster"),
    Row("split top-k 131K x 1", ("topk-parity", "0", "--no-model"), "split", 131072, 1, 262144, "block_topk_split"),
    Row("split top-k 131K x 1, PDL off", ("topk-parity", "0", "--no-model"), "split", 131072, 1, 262144,
        "block_topk_split", pdl=False),
    Row("cluster top-k 9000 x 1", ("topk-parity", "0", "--no-model"), "cluster", 9000, 1, 16384, "block_topk_cluster"),
)


REJUDGING = False  # --rejudge: what each process printed and wrote is read from the folder an earlier run filled


def logged(argv: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``argv`` run, what it printed (stdout, then stderr) written to ``log``: its exit status and that text;
    when rejudging, ``log`` as the earlier run left it, status 0."""
    if REJUDGING:
        if not log.is_file():
            raise SystemExit(f"{log} is missing: --rejudge reads what a run of this script wrote")
        return 0, log.read_text()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    log.write_text(done.stdout + done.stderr)
    return done.returncode, done.stdout + done.stderr


def measurements(record: Path, variant: str) -> tuple[list[dict], int]:
    """The record's measurements of ``variant``, in the order they were taken, and which is the row's: its
    continuous score set's (a scorer's only case)."""
    found = [m for m in json.loads(record.read_text())["measurements"] if m["variant"] == variant]
    rows = [i for i, m in enumerate(found) if m["case"].get("score_set", "continuous") == "continuous"]
    if not rows:
        raise SystemExit(f"{record}: no measurement of {variant}")
    return found, rows[0]


def measurement(record: Path, variant: str) -> dict:
    found, row = measurements(record, variant)
    return found[row]


def case_indices(counts: Sequence[int], chosen: Sequence[int], calls: int) -> list[int] | None:
    """The indices of the calls of the ``chosen`` groups among consecutive groups of ``counts`` calls (each a
    measurement's, or a round's of one), where ``calls`` were found in all; None when that is not their sum
    (the calls cannot be told apart)."""
    if sum(counts) != calls:
        return None
    starts = list(itertools.accumulate(counts, initial=0))
    return [i for group in chosen for i in range(starts[group], starts[group] + counts[group])]


def timed_calls(m: dict) -> int:
    """The calls a measurement timed one by one, each between two clock stamps: its samples and the samples it
    threw away and measured again (a batch's calls share a pair of stamps: none)."""
    rounds = m.get("rounds") or {}
    return len(m["samples_us"]) + sum(len(d["samples_us"]) for d in rounds.get("discarded", []) if not d["batch"])


def case_trace(trace: dict, found: list[dict], row: int, what: str) -> dict:
    """A CUPTI trace's summary of the calls of the ``row``-th of ``found`` (a record's measurements of the
    traced variant, in order); refused when the trace holds other calls than theirs."""
    indices = case_indices([timed_calls(m) for m in found], [row], trace["calls"])
    if indices is None:
        raise SystemExit(f"{what}: {trace['calls']} calls where the record's measurements timed "
                         f"{sum(timed_calls(m) for m in found)}: its calls cannot be told apart by case")
    return sliced(trace, indices)  # the unstamped calls (another timer's) kept whole, as every key not per call


def paired_args(row: Row, mode: str, record: Path, paired: Path, *extra: str) -> list[str]:
    """scripts/paired_timers.py's arguments for qsa's command of ``row`` (``mode``: nvbench or ncu), its record
    written to ``record`` and the paired samples to ``paired``."""
    return [mode, str(ROUNDS), str(SAMPLES), str(PROFILED), str(paired), "--", *row.args(str(SAMPLES)), *extra,
            "--json", str(record), "--quiet"]


def pooled(rounds: list[list[float]]) -> list[float]:
    """Every round's samples, one list."""
    return [s for samples in rounds for s in samples]


def paired_run(row: Row, out: Path, mode: str, *extra: str,
               under: Sequence[str] = ()) -> tuple[dict, Path, str]:
    """qsa's command for ``row`` in one process of scripts/paired_timers.py (``mode``: nvbench or ncu), run under
    ``under`` (ncu's command line): the record's measurement of the row's variant, the paired samples' file and
    what the process printed."""
    record, paired = out / f"{mode}-{row.tag}.json", out / f"{mode}-{row.tag}-paired.json"
    log = out / f"{mode}-{row.tag}.log"
    code, printed = logged([*under, *PAIRED, *paired_args(row, mode, record, paired, *extra)], log, row.env())
    if code not in (0, 1) or not record.is_file():  # 1: a threshold or check failed, record written
        raise SystemExit(f"{row.label} ({mode}): exited {code}, see {log}")
    return measurement(record, row.variant), paired, printed


def ncu_command(kernel_regex: str) -> list[str]:
    """ncu profiling qsa's clock stamps and ``kernel_regex``'s kernels."""
    return [*NCU, "-k", f"regex:{STAMP}|{kernel_regex}"]


def ncu_durations_us(stdout: str, kernel_regex: str) -> list[tuple[str, float]]:
    """(kernel, gpu__time_duration in µs) of every profiled launch of qsa's clock stamps and of ``kernel_regex``'s
    kernels in ncu's CSV output ``stdout``, in the order they ran."""
    lines = [line for line in stdout.splitlines() if line.startswith('"')]
    rows = [r for r in csv.DictReader(io.StringIO("\n".join(lines))) if r["Metric Name"] == "gpu__time_duration.sum"
            and re.search(rf"{STAMP}|{kernel_regex}", r["Kernel Name"])]
    return [(r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1e3)
            for r in sorted(rows, key=lambda r: int(r["ID"]))]


def ncu_calls(durations: list[tuple[str, float]], launches: int, kernel_regex: str, cases: int = 1,
              case: int = 0) -> tuple[float, list[str], list[float], int]:
    """Of the timed calls among ncu's ``durations`` of the ``case``-th of ``cases`` measurements (each profiled
    ROUNDS x PROFILED of its calls, in turn): the median of a call's summed durations, the kernels of the
    first call, each kernel's median and how many calls there were."""
    every = stamped_calls(durations, launches, kernel_regex)
    indices = case_indices([ROUNDS * PROFILED] * cases, [case], len(every))
    if indices is None:
        raise SystemExit(f"ncu profiled {len(every)} calls of {launches} {kernel_regex} kernels between qsa's stamps, "
                         f"where {cases} measurements profile {ROUNDS * PROFILED} each")
    found = [every[i] for i in indices]
    return (statistics.median(sum(us for _, us in call) for call in found), [name for name, _ in found[0]],
            [statistics.median(us for _, us in kernel) for kernel in zip(*found)], len(found))


# The empty kernel a call's overhead is measured with, launched as the call's kernels are (each one's grid, block
# and dynamic shared memory, as qsa's record lists them): a launch's fixed cost, and where the events sit around
# it, depend on its grid. A call that launches clusters is measured on its own launch instead (IDLE_CTX)
EMPTY = 'extern "C" __global__ void empty_kernel() {}'
EMPTY_SAMPLES = 2000  # an exact count: the stopping rule's 0.5 % is below the events' step for a 3 µs median


TRACE = [sys.executable, str(Path(__file__).with_name("call_trace.py"))]
sys.path.insert(0, str(Path(__file__).parent))
from call_trace import STAMP, sliced, stamped_calls  # noqa: E402  (a script beside this one)


def traced(out: Path, tag: str, launches: int, kernel_regex: str, args: list[str],
           env: dict[str, str] | None = None) -> tuple[dict, str]:
    """``args`` (qsa's, or -c CODE) run under CUPTI's kernel activity (scripts/call_trace.py): the trace's summary
    of the calls of ``launches`` kernels matching ``kernel_regex``, and what the run printed."""
    trace, log = out / f"trace-{tag}.json", out / f"trace-{tag}.log"
    code, printed = logged([*TRACE, str(trace), str(launches), kernel_regex, "--", *args], log, env)
    if code not in (0, 1) or not trace.is_file():
        raise SystemExit(f"the CUPTI trace {tag} failed ({code}), see {log}")
    found = json.loads(trace.read_text())
    if not found["calls"]:
        raise SystemExit(f"the CUPTI trace {tag} found no call of {launches} {kernel_regex} kernels between stamps")
    return found, printed


def beyond_span_us(samples_us: list[float], spans_us: list[float]) -> float:
    """What qsa's events time beyond the GPU's span of the same calls: the median of each call's difference
    when every sample has its traced call (a re-measured round adds calls the samples lack: then the
    difference of the medians)."""
    if len(samples_us) == len(spans_us):
        return statistics.median(s - g for s, g in zip(samples_us, spans_us))
    return statistics.median(samples_us) - statistics.median(spans_us)


def launch_shapes(launches: list[dict]) -> list[tuple[tuple[int, ...], tuple[int, ...], int, int]]:
    """(grid, block, cluster CTAs, dynamic shared bytes) of each of a call's launches, as its record lists them."""
    return [(tuple(k["grid"]), tuple(k["block"]), k["cluster"], k["shared_bytes"]) for k in launches]


def empty_call_name(launches: list[dict]) -> str:
    """A call of empty kernels' name: each launch's shape (shared memory where it has it), a count of each; a
    part of file names."""
    shapes = []
    for grid, block, _, shared in launch_shapes(launches):
        shape = "grid" + "x".join(map(str, grid)) + "-block" + "x".join(map(str, block))
        shapes.append(shape + (f"-shared{shared}" if shared else ""))
    return "+".join(f"{shape}-x{shapes.count(shape)}" for shape in dict.fromkeys(shapes))


def empty_call_code(launches: list[dict], samples: int) -> str:
    """Python that times a call of empty kernels launched as ``launches`` with qsa's timer (--l2 clean) and
    prints its samples."""
    shapes = launch_shapes(launches)
    return f"""
import cupy, json
from qsa_cli.timing import DeviceTimer
LAUNCHES = {shapes!r}
kernels = [cupy.RawKernel({EMPTY!r}, "empty_kernel") for _ in LAUNCHES]
for kernel, (_, _, _, shared) in zip(kernels, LAUNCHES):
    kernel.max_dynamic_shared_size_bytes = shared
def call():
    for kernel, (grid, block, _, shared) in zip(kernels, LAUNCHES):
        kernel(grid, block, (), shared_mem=shared)
timed = DeviceTimer(l2="clean").measure(call, {samples})
print(json.dumps(timed.samples_us))
"""


def last_line_samples(printed: str) -> list[float]:
    """The samples an empty call's code printed: its last line that is a JSON list."""
    return json.loads([line for line in printed.splitlines() if line.startswith("[")][-1])


def empty_call_overhead(out: Path, launches: list[dict]) -> dict[str, float]:
    """A call of empty kernels launched as ``launches`` timed by qsa's timer (--l2 clean): against CUPTI's
    spans of the same calls in one process (what qsa's events time beyond the span), and against ncu's summed
    durations of its calls in rounds with qsa's in another (what they time beyond ncu's)."""
    tag, count = f"empty-{empty_call_name(launches)}", len(launches)
    trace, printed = traced(out, tag, count, "empty_kernel", ["-c", empty_call_code(launches, EMPTY_SAMPLES)])
    traced_samples = last_line_samples(printed)
    per_round = EMPTY_SAMPLES // ROUNDS
    log = out / f"{tag}-ncu.log"
    code, printed = logged([*ncu_command("empty_kernel"), *PAIRED, "ncu", str(ROUNDS), str(per_round), str(PROFILED),
                            str(out / f"{tag}-ncu-paired.json"), "--", "-c", empty_call_code(launches, per_round)], log)
    if code != 0:
        raise SystemExit(f"ncu on {tag} failed ({code}), see {log}")
    qsa_samples = last_line_samples(printed)
    (out / f"{tag}-qsa.json").write_text(json.dumps({"traced": traced_samples, "under_ncu": qsa_samples}))
    ncu_call = ncu_calls(ncu_durations_us(printed, "empty_kernel"), count, "empty_kernel")[0]
    return overhead_found(traced_samples, trace, qsa_samples, ncu_call)


def overhead_found(traced_samples: list[float], trace: dict, qsa_samples: list[float], ncu_call: float) -> dict:
    """An overhead call's figures: qsa's samples of it beside CUPTI's trace of the same calls, and qsa's samples
    in rounds with ncu beside ncu's median summed durations of a call."""
    qsa_us = statistics.median(qsa_samples)
    return {"qsa_us": qsa_us, "qsa_traced_us": statistics.median(traced_samples),
            "beyond_span_us": beyond_span_us(traced_samples, trace["span_us"]), "ncu_call_us": ncu_call,
            "ncu_us": qsa_us - ncu_call, "lead_us": trace["median_lead_us"], "trail_us": trace["median_trail_us"]}


def clustered(launches: list[dict]) -> bool:
    """Whether a call launches clusters, as its record lists its launches: its overhead call is then its own
    launch, idle (IDLE_CTX)."""
    return any(launch["cluster"] for launch in launches)


def overhead_call_name(row: Row, launches: list[dict]) -> str:
    """The name of ``row``'s overhead call: its idle row's, or its call of empty kernels'."""
    return f"idle-{row.idle_row().tag}" if clustered(launches) else empty_call_name(launches)


def idle_call_overhead(out: Path, row: Row, launches: list[dict]) -> dict[str, float]:
    """``row``'s launcher on its idle context (Row.idle_row), measured as an empty call is: its clean calls
    against CUPTI's spans of the same calls, and in rounds with ncu's durations of them. Its launches must be
    the row's (``launches``, grid, block, cluster and shared memory as the records list them)."""
    idle = row.idle_row()
    trace, clean = clean_trace(idle, out, len(launches))
    if launch_shapes(clean["launches"]) != launch_shapes(launches):
        raise SystemExit(f"{idle.label}: launched as {launch_shapes(clean['launches'])}, not as the row "
                         f"({launch_shapes(launches)})")
    m, ncu_call = ncu_row_call(idle, out, len(launches))
    return overhead_found(clean["samples_us"], trace, m["samples_us"], ncu_call[0])


def launch_count(m: dict) -> int:
    """The kernels qsa's launcher enqueued for one call, as the record lists them (a call's count depends on
    the launcher's version and the case: never a constant of this script)."""
    if not m.get("launches"):
        raise SystemExit(f"{m['variant']}: its record lists no launches (a record older than schema 8?)")
    return len(m["launches"])


def overlapped(launches: list[dict]) -> bool:
    """Whether a call's launches overlap (one launched programmatically, PDL), as its record lists them:
    Nsight Compute replays them one after another, so it does not observe such a call."""
    return any(launch["programmatic"] for launch in launches)


def paired_calls(paired: Path, m: dict) -> dict:
    """The paired samples' entry of ``m``'s launcher (its variant and case)."""
    calls = json.loads(paired.read_text())["calls"]
    found = [c for c in calls if c["variant"] == m["variant"] and c["case"] == m["case"]]
    if not found:
        raise SystemExit(f"{paired}: no paired samples of {m['variant']}")
    return found[0]


def nvbench_row(row: Row, out: Path) -> tuple[dict, list[dict]]:
    """qsa (--l2 dirty) against nvbench's cold samples of the same launcher in rounds of each in turn, in one
    process: median against median (the means, and each round's medians, beside); and the call's launches, as
    qsa's record lists them."""
    m, paired, _ = paired_run(row, out, "nvbench", "--timer", "nvbench")
    call = paired_calls(paired, m)
    ours, theirs = pooled(call["qsa_us"]), pooled(call["nvbench_us"])
    dirty_us, nv_median = statistics.median(ours), statistics.median(theirs)
    return {"qsa_dirty_median_us": dirty_us, "qsa_dirty_mean_us": statistics.fmean(ours),
            "qsa_dirty_samples": len(ours), "nvbench_cold_median_us": nv_median,
            "nvbench_cold_mean_us": statistics.fmean(theirs), "nvbench_samples": len(theirs),
            "qsa_dirty_round_medians_us": [statistics.median(r) for r in call["qsa_us"]],
            "nvbench_round_medians_us": [statistics.median(r) for r in call["nvbench_us"]],
            "dirty_vs_nvbench": dirty_us / nv_median - 1, "launches": launch_count(m),
            "overlapped": overlapped(m["launches"])}, m["launches"]


def traced_nvbench_row(row: Row, out: Path, launches: int) -> dict:
    """The paired dirty run again, under CUPTI's kernel activity, not judged: the GPU's spans of qsa's timed
    calls (between its stamps) and of nvbench's (the other lone calls), beside each timer's median. It tells
    whether the two timers differ in the calls as the GPU ran them or in how each brackets a call."""
    record, paired = out / f"nvbench-traced-{row.tag}.json", out / f"nvbench-traced-{row.tag}-paired.json"
    argv = paired_args(row, "nvbench", record, paired, "--timer", "nvbench")
    # call_trace.py runs from scripts/, so paired_timers.py imports as it is
    code = f"import paired_timers; raise SystemExit(paired_timers.main({argv!r}))"
    trace, _ = traced(out, f"nvbench-{row.tag}", launches, row.kernel, ["-c", code], row.env())
    call = paired_calls(paired, measurement(record, row.variant))
    # each round timed every case in turn, qsa's samples then nvbench's: the row's case is one group a round
    cases = [c for c in json.loads(paired.read_text())["calls"] if c["variant"] == row.variant]
    rounds, row_case = len(call["qsa_us"]), cases.index(call)
    chosen = [r * len(cases) + row_case for r in range(rounds)]

    # Each timer's calls are the row's where it is the variant's one case; else they are told apart only where the
    # timer ran none but its samples (a sample qsa threw away, nvbench's warm-ups, add calls): else none is shown
    def row_calls(found: dict, timer: str) -> dict | None:
        if len(cases) == 1:
            return found
        indices = case_indices([len(c[timer][r]) for r in range(rounds) for c in cases], chosen, found["calls"])
        return sliced(found, indices) if indices is not None else None

    qsa_trace, nvbench_trace = row_calls(trace, "qsa_us"), row_calls(trace["unstamped"], "nvbench_us")
    return {"traced_qsa_dirty_median_us": statistics.median(pooled(call["qsa_us"])),
            "cupti_qsa_dirty_span_us": qsa_trace["median_span_us"] if qsa_trace else None,
            "cupti_qsa_dirty_calls": qsa_trace["calls"] if qsa_trace else 0,
            "traced_nvbench_median_us": statistics.median(pooled(call["nvbench_us"])),
            "cupti_nvbench_span_us": nvbench_trace["median_span_us"] if nvbench_trace else None,
            "cupti_nvbench_calls": nvbench_trace["calls"] if nvbench_trace else 0}


def clean_trace(row: Row, out: Path, launches: int) -> tuple[dict, dict]:
    """``row``'s clean run under CUPTI's kernel activity: the trace's summary of its case's calls, and the
    record's measurement of them."""
    record = out / f"clean-{row.tag}.json"
    trace, _ = traced(out, row.tag, launches, row.kernel,
                      [*row.args("auto"), "--l2", "clean", "--json", str(record), "--quiet"], row.env())
    found, at = measurements(record, row.variant)
    return case_trace(trace, found, at, f"the CUPTI trace {row.tag}"), found[at]


def ncu_row_call(row: Row, out: Path, launches: int) -> tuple[dict, tuple[float, list[str], list[float], int]]:
    """``row``'s clean samples in rounds with ncu's: the record's measurement, and ncu_calls of its case."""
    m, _, printed = paired_run(row, out, "ncu", "--l2", "clean", under=ncu_command(row.kernel))
    found, at = measurements(out / f"ncu-{row.tag}.json", row.variant)
    return m, ncu_calls(ncu_durations_us(printed, row.kernel), launches, row.kernel, len(found), at)


def clean_row(row: Row, out: Path, launches: list[dict],
              overhead_of: Callable[[Row, list[dict]], dict[str, float]]) -> dict:
    """qsa (--l2 clean) against Nsight Compute's durations of the call's kernels (the first on flushed caches,
    the later ones on the L2 as the one before left it) plus the overhead beyond ncu's durations of the row's
    overhead call, in rounds of each in turn in one process, where ncu observes the call (no launch
    overlapping another), judged; and beside it, not judged, the GPU's own timestamps of the calls of another
    clean run (CUPTI: the span from the first kernel's start to the last one's end, plus what qsa's events time
    beyond the span of that overhead call)."""
    trace, clean = clean_trace(row, out, len(launches))
    traced_us = statistics.median(clean["samples_us"])
    overhead = overhead_of(row, launches)
    expected = trace["median_span_us"] + overhead["beyond_span_us"]
    result = {"qsa_clean_traced_median_us": traced_us, "qsa_clean_traced_samples": len(clean["samples_us"]),
              "cupti_calls": trace["calls"], "cupti_span_us": trace["median_span_us"],
              "cupti_kernels_sum_us": trace["median_kernels_sum_us"], "cupti_kernel_us": trace.get("median_kernel_us"),
              "cupti_gap_us": trace.get("median_gap_us"), "qsa_beyond_span_us": beyond_span_us(clean["samples_us"],
                                                                                                trace["span_us"]),
              "cupti_lead_us": trace["median_lead_us"], "cupti_trail_us": trace["median_trail_us"],
              "overhead_call": overhead_call_name(row, launches),
              "overhead_beyond_span_us": overhead["beyond_span_us"],
              "cupti_plus_overhead_us": expected, "clean_vs_cupti": traced_us / expected - 1}
    if not overlapped(launches):  # ncu serialises a call's launches: not the call when they overlap
        m, (ncu_call, kernels, per_kernel, calls) = ncu_row_call(row, out, len(launches))
        clean_us = statistics.median(m["samples_us"])
        result.update({"qsa_clean_median_us": clean_us, "qsa_clean_samples": len(m["samples_us"]),
                       "ncu_call_us": ncu_call, "ncu_calls": calls, "ncu_kernels": kernels,
                       "ncu_kernel_us": per_kernel, "ncu_overhead_us": overhead["ncu_us"],
                       "ncu_plus_overhead_us": ncu_call + overhead["ncu_us"]})
        result["clean_vs_ncu"] = clean_us / result["ncu_plus_overhead_us"] - 1
    return result


# What the script needs besides qsa: (how it is found, what provides it)
NEEDED = {"ncu": "Nsight Compute's command line (on PATH)", "cuda.bench": "pip install cuda-bench",
          "cupti": "pip install cupti-python", "cupy": "CuPy for the card's CUDA (qsa's cuda extra)"}


def _found(name: str) -> bool:
    """Whether the command (ncu) or the module ``name`` is here."""
    if name == "ncu":
        return shutil.which(name) is not None
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a dotted name whose package is missing
        return False


def unmet(out: Path, only: list[str], rejudge: bool = False) -> str | None:
    """Why the run cannot start (None when it can): a missing tool or package, an output folder that is a file
    (or, rejudging, none that an earlier run filled), labels that name no row. Checked before anything is
    measured."""
    for name, how in ({} if rejudge else NEEDED).items():
        if not _found(name):
            return f"{name} is missing: {how}"
    if rejudge and not (out / "agreement.jsonl").is_file():
        return f"{out} holds no agreement.jsonl: --rejudge reads the folder of an earlier run"
    if out.exists() and not out.is_dir():
        return f"{out} is a file: the output is a folder"
    if only and not any(o in r.label for r in ROWS for o in only):
        return f"no row's label holds {', '.join(map(repr, only))} (rows: {', '.join(r.label for r in ROWS)})"
    return None


def main(out: Path, only: list[str], rejudge: bool = False) -> int:
    """The rows whose label holds one of ``only`` (every row when empty); ``rejudge``: judged again from what an
    earlier run wrote to ``out``, nothing run."""
    global REJUDGING
    problem = unmet(out, only, rejudge)
    if problem is not None:
        print(f"agreement.py: {problem}", file=sys.stderr)
        return 2
    REJUDGING = rejudge
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONPATH", ".")
    rows = [r for r in ROWS if not only or any(o in r.label for o in only)]
    # a call's overhead: what qsa's events time beyond its overhead call (empty kernels launched as its are, or
    # its own launcher on an idle context), measured in this run against ncu's durations of it and against
    # CUPTI's span of the same calls
    overheads: dict[str, dict[str, float]] = {}

    def overhead_of(row: Row, launches: list[dict]) -> dict[str, float]:
        name = overhead_call_name(row, launches)
        if name not in overheads:
            overheads[name] = (idle_call_overhead(out, row, launches) if clustered(launches)
                               else empty_call_overhead(out, launches))
        return overheads[name]

    results = []
    for row in rows:
        dirty, launches = nvbench_row(row, out)
        result = {"row": row.label, "pdl": row.pdl, **dirty, **traced_nvbench_row(row, out, len(launches)),
                  **clean_row(row, out, launches, overhead_of)}
        results.append(result)
        print(json.dumps(result), flush=True)
    agree = all(abs(r[k]) <= TOLERANCE for r in results for k in ("dirty_vs_nvbench", "clean_vs_ncu") if k in r)
    summary = {"tolerance": TOLERANCE, "rounds": ROUNDS, "samples": SAMPLES, "profiled": PROFILED,
               "overhead_calls": overheads, "agree": agree, "row_definitions": [asdict(r) for r in ROWS]}
    # JSON lines (the summary, then a row a line): not a qsa record, which a results folder's .json files are
    (out / "agreement.jsonl").write_text("".join(json.dumps(x) + "\n" for x in (summary, *results)))
    (out / "agreement.md").write_text(table(results, overheads) + "\n")
    print(table(results, overheads))
    return 0 if agree else 1


def _diff(value: float | None) -> str:
    return f"{100 * value:+.1f}%" if value is not None else "–"


def _beside(median: float, span: float | None) -> str:
    """A timer's calls' span and what its median times beyond it: two cells."""
    return f"{span:.2f} | {median - span:+.2f}" if span is not None else "not told apart by case | –"


def table(results: list[dict], overheads: dict[str, dict[str, float]]) -> str:
    """agreement.md: a row per launcher, the references and their differences, then the overheads."""
    lines = ["| launcher | launches | qsa dirty | nvbench cold | diff | qsa clean | ncu + overhead | diff "
             "| qsa clean, traced | CUPTI span + overhead (not judged) | diff |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        ncu = (f"{r['qsa_clean_median_us']:.2f} | {r['ncu_plus_overhead_us']:.2f} | {_diff(r['clean_vs_ncu'])}"
               if "clean_vs_ncu" in r else "– | not observable (PDL) | –")
        lines.append(f"| {r['row']} | {r['launches']} | {r['qsa_dirty_median_us']:.2f} | "
                     f"{r['nvbench_cold_median_us']:.2f} | {_diff(r['dirty_vs_nvbench'])} | {ncu} | "
                     f"{r['qsa_clean_traced_median_us']:.2f} | {r['cupti_plus_overhead_us']:.2f} | "
                     f"{_diff(r['clean_vs_cupti'])} |")
    lines += ["", "The dirty runs again under CUPTI (not judged): each timer's median, the GPU's span of the calls it "
              "timed, and what it times beyond the span.", "",
              "| launcher | qsa dirty | its calls' span | beyond | nvbench cold | its calls' span | beyond |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        qsa, nvbench = r["traced_qsa_dirty_median_us"], r["traced_nvbench_median_us"]
        qsa_span, nvbench_span = r["cupti_qsa_dirty_span_us"], r["cupti_nvbench_span_us"]
        lines.append(f"| {r['row']} | {qsa:.2f} | {_beside(qsa, qsa_span)} | {nvbench:.2f} | "
                     f"{_beside(nvbench, nvbench_span)} |")
    lines += ["", "Where the clean run's calls sit between the timer's stamps (CUPTI, not judged): qsa's events are "
              "recorded in the lead (the start stamp's end to the call's first kernel) and the trail (its last "
              "kernel's end to the end stamp), beside those of the call its overhead is measured with.", "",
              "| launcher | span | beyond | lead | trail | overhead call | beyond | lead | trail |",
              "|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    for r in results:
        call = overheads[r["overhead_call"]]
        lines.append(f"| {r['row']} | {r['cupti_span_us']:.2f} | {r['qsa_beyond_span_us']:+.2f} | "
                     f"{r['cupti_lead_us']:.2f} | {r['cupti_trail_us']:.2f} | {r['overhead_call']} | "
                     f"{call['beyond_span_us']:+.2f} | {call['lead_us']:.2f} | {call['trail_us']:.2f} |")
    lines.append("\nMedians in µs; qsa's against each reference's in rounds of each in turn, in one process. qsa's "
                 "events beyond the GPU's span of the overhead calls (CUPTI) and beyond ncu's durations: " + "; ".join(
        f"{call}: {o['qsa_us']:.2f} µs under qsa's timer, {o['beyond_span_us']:+.2f} beyond CUPTI's span, "
        f"{o['ncu_us']:+.2f} beyond ncu" for call, o in overheads.items()) + ".")
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    rejudging = args[:1] == ["--rejudge"]
    if len(args) < 1 + rejudging:
        raise SystemExit(__doc__)
    raise SystemExit(main(Path(args[rejudging]), args[1 + rejudging:], rejudging))
