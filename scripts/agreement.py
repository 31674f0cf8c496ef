"""qsa's timer against NVIDIA's two references on the same launchers, inputs and card (run on a machine with
the card, from the repository root, with cuda-bench installed and ncu on PATH):

- ``--l2 dirty`` (qsa's median) against nvbench's cold mean (``--timer nvbench``: the same launchers timed by
  cuda.bench in the same kind of process), within TOLERANCE;
- ``--l2 clean`` (qsa's median) against Nsight Compute's kernel durations (``ncu --cache-control all``: every
  kernel run alone on flushed caches; a call of several launches is the sum of its kernels) plus the launch
  overhead, measured in the same run: what qsa's events time around an empty kernel (a wave of blocks) beyond
  what ncu gives its duration; within TOLERANCE.

Usage: python3 scripts/agreement.py OUT_DIR [LABEL ...]   (only the rows whose label holds a LABEL; writes
each command's record, the ncu logs, agreement.jsonl (the summary, then a row a line) and agreement.md
there; exits 1 when a row disagrees). Never changes the card's clocks (``ncu --clock-control none``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

TOLERANCE = 0.03
NCU = ["ncu", "--clock-control", "none", "--cache-control", "all", "--metrics", "gpu__time_duration.sum", "--csv",
       "--print-units", "base"]
NCU_LAUNCHES = 12  # profiled launches of the measured kernels: the first calls (parity run, warm-up), continuous scores
QSA = [sys.executable, "-m", "qsa_cli"]


@dataclass(frozen=True)
class Row:
    label: str
    command: tuple[str, ...]  # qsa's command and case, ITERS left out
    variant: str
    ctx: int
    nq: int
    cap: int
    kernel: str  # the regex of its kernels' names (ncu's filter)
    launches: int  # kernel launches one call makes

    def args(self, iters: str) -> list[str]:
        name, *rest = self.command
        return [name, str(self.ctx), str(self.nq), iters, str(self.cap), *rest, "--variants", self.variant]


ROWS = (
    Row("multi scorer 420K x 4", ("select-bench", "--no-model"), "multi", 420000, 4, 524288, "block_scores_multi", 1),
    Row("halve scorer 420K x 4", ("select-bench", "--no-model"), "halve", 420000, 4, 524288, "block_scores_halve", 1),
    Row("halve scorer 524K x 8", ("select-bench", "--no-model"), "halve", 524288, 8, 524288, "block_scores_halve", 2),
    Row("halve scorer 32K x 1", ("select-bench", "--no-model"), "halve", 32768, 1, 65536, "block_scores_halve", 1),
    Row("wide top-k 524K x 8", ("topk-parity", "0", "--no-model"), "wide", 524288, 8, 524288, "block_topk_wide", 1),
    Row("split top-k 524K x 8", ("topk-parity", "0", "--no-model"), "split", 524288, 8, 524288, "block_topk_split", 6),
    Row("cluster top-k 524K x 8", ("topk-parity", "0", "--no-model"), "cluster", 524288, 8, 524288,
        "block_topk_cluster", 1),
    Row("split top-k 131K x 1", ("topk-parity", "0", "--no-model"), "split", 131072, 1, 262144, "block_topk_split", 6),
    Row("cluster top-k 9000 x 1", ("topk-parity", "0", "--no-model"), "cluster", 9000, 1, 16384, "block_topk_cluster",
        1),
)


def measurement(record: Path, variant: str) -> dict:
    data = json.loads(record.read_text())
    found = [m for m in data["measurements"] if m["variant"] == variant and m["case"].get("score_set", "continuous")
             == "continuous"]
    if not found:
        raise SystemExit(f"{record}: no measurement of {variant}")
    return found[0]


def qsa_run(row: Row, out: Path, tag: str, *extra: str) -> dict:
    record = out / f"{tag}-{row.variant}-{row.ctx}-{row.nq}.json"
    done = subprocess.run([*QSA, *row.args("auto"), *extra, "--json", str(record), "--quiet"], capture_output=True,
                          text=True)
    if done.returncode not in (0, 1):  # 1: a threshold or check failed, and the record was written
        raise SystemExit(f"{row.label} ({tag}): qsa exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return measurement(record, row.variant)


def ncu_durations_us(argv: list[str], log: Path, kernel_regex: str) -> list[tuple[str, float]]:
    """(kernel, gpu__time_duration in µs) of the first NCU_LAUNCHES launches matching ``kernel_regex``."""
    proc = subprocess.run([*NCU, "-k", f"regex:{kernel_regex}", "--launch-count", str(NCU_LAUNCHES), *argv],
                          capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"ncu failed ({proc.returncode}), see {log}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    return [(r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1e3) for r in rows if r["Metric Name"] == "gpu__time_duration.sum"]


def per_call_us(durations: list[tuple[str, float]], launches: int) -> tuple[float, list[str]]:
    """The median duration of one call (its ``launches`` summed) and the kernels of the first call."""
    calls = len(durations) // launches
    if calls == 0:
        raise SystemExit(f"ncu profiled {len(durations)} launches, fewer than a call's {launches}")
    sums = [sum(us for _, us in durations[c * launches:(c + 1) * launches]) for c in range(calls)]
    return statistics.median(sums), [name for name, _ in durations[:launches]]


EMPTY = r'''extern "C" __global__ void empty_kernel() {}'''
# The empty kernel's launch: a wave of 256-thread blocks over every SM (the measured kernels' grids are waves
# of such blocks; a launch's fixed cost grows a little with its grid), and one warp, recorded beside it.
EMPTY_LAUNCHES = {"wave": "(cupy.cuda.Device().attributes['MultiProcessorCount'] * 8,), (256,)", "warp": "(1,), (32,)"}
EMPTY_SAMPLES = 2000  # an exact count: the stopping rule's 0.5 % is below the events' step for a 3 µs median


def empty_kernel_qsa_us(out: Path, shape: str) -> float:
    """qsa's timer (--l2 clean) on an empty kernel's launch of ``shape``, in a process of its own."""
    code = f"""
import cupy, json
from qsa_cli.timing import DeviceTimer
kernel = cupy.RawKernel({EMPTY!r}, "empty_kernel")
timed = DeviceTimer(l2="clean").measure(lambda: kernel({EMPTY_LAUNCHES[shape]}, ()), {EMPTY_SAMPLES})
print(json.dumps(timed.samples_us))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    samples = json.loads(proc.stdout.strip().splitlines()[-1])
    (out / f"empty-{shape}-qsa.json").write_text(json.dumps(samples))
    return statistics.median(samples)


def empty_kernel_ncu_us(out: Path, shape: str) -> float:
    code = f"""
import cupy
kernel = cupy.RawKernel({EMPTY!r}, "empty_kernel")
for _ in range({NCU_LAUNCHES}):
    kernel({EMPTY_LAUNCHES[shape]}, ())
cupy.cuda.Device().synchronize()
"""
    durations = ncu_durations_us([sys.executable, "-c", code], out / f"empty-{shape}-ncu.log", "empty_kernel")
    return statistics.median(us for _, us in durations)


def main(out: Path, only: list[str]) -> int:
    """The rows whose label holds one of ``only`` (every row when empty)."""
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONPATH", ".")
    empty = {shape: {"qsa_us": empty_kernel_qsa_us(out, shape), "ncu_us": empty_kernel_ncu_us(out, shape)}
             for shape in EMPTY_LAUNCHES}
    overhead = empty["wave"]["qsa_us"] - empty["wave"]["ncu_us"]
    results = []
    for row in (r for r in ROWS if not only or any(o in r.label for o in only)):
        dirty = qsa_run(row, out, "dirty", "--l2", "dirty")
        nvbench = qsa_run(row, out, "nvbench", "--timer", "nvbench")
        clean = qsa_run(row, out, "clean", "--l2", "clean")
        ncu_call, kernels = per_call_us(ncu_durations_us(
            [*QSA, *row.args("3"), "--l2", "clean", "--warmup", "0", "--quiet"],
            out / f"ncu-{row.variant}-{row.ctx}-{row.nq}.log", row.kernel), row.launches)
        dirty_us, clean_us = statistics.median(dirty["samples_us"]), statistics.median(clean["samples_us"])
        nv_mean = nvbench["nvbench"]["cold_mean_us"]
        expected = ncu_call + overhead
        results.append({
            "row": row.label, "qsa_dirty_median_us": dirty_us, "qsa_dirty_mean_us": statistics.fmean(dirty["samples_us"]),
            "qsa_dirty_samples": len(dirty["samples_us"]), "nvbench_cold_mean_us": nv_mean,
            "nvbench_samples": nvbench["nvbench"]["samples"], "dirty_vs_nvbench": dirty_us / nv_mean - 1,
            "qsa_clean_median_us": clean_us, "ncu_call_us": ncu_call, "ncu_launches": row.launches,
            "ncu_kernels": kernels,
            "ncu_plus_overhead_us": expected, "clean_vs_ncu": clean_us / expected - 1,
        })
        print(json.dumps(results[-1]), flush=True)
    agree = all(abs(r["dirty_vs_nvbench"]) <= TOLERANCE and abs(r["clean_vs_ncu"]) <= TOLERANCE for r in results)
    summary = {"tolerance": TOLERANCE, "empty_kernel": empty, "launch_overhead_us": overhead, "agree": agree,
               "row_definitions": [asdict(r) for r in ROWS]}
    # JSON lines (the summary, then a row a line): not a qsa record, which a results folder's .json files are
    (out / "agreement.jsonl").write_text("".join(json.dumps(x) + "\n" for x in (summary, *results)))
    lines = ["| launcher | qsa dirty median | nvbench cold mean | diff | qsa clean median | ncu + overhead | diff |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['row']} | {r['qsa_dirty_median_us']:.2f} | {r['nvbench_cold_mean_us']:.2f} | "
              f"{100 * r['dirty_vs_nvbench']:+.1f}% | {r['qsa_clean_median_us']:.2f} | {r['ncu_plus_overhead_us']:.2f} "
              f"({r['ncu_launches']} launch{'es' if r['ncu_launches'] > 1 else ''}) | {100 * r['clean_vs_ncu']:+.1f}% |"
              for r in results]
    lines.append("\nLaunch overhead: an empty kernel " + "; ".join(
        f"as a {shape}: {e['qsa_us']:.2f} µs under qsa's timer, {e['ncu_us']:.2f} µs under ncu" for shape, e in empty.items())
        + f". The wave's difference, {overhead:.2f} µs, is added to ncu's durations.")
    (out / "agreement.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if agree else 1


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    raise SystemExit(main(Path(sys.argv[1]), sys.argv[2:]))
