"""qsa's timer against NVIDIA's two references on the same launchers, inputs and card (run on a machine with
the card, from the repository root, with cuda-bench installed and ncu on PATH):

- ``--l2 dirty`` (qsa's median) against nvbench's cold mean (``--timer nvbench``: the same launchers timed by
  cuda.bench in the same kind of process), within TOLERANCE;
- ``--l2 clean`` (qsa's median) against Nsight Compute's kernel durations plus the launch overhead measured
  in the same run, within TOLERANCE. A call's first kernel is timed by ncu on flushed caches
  (``--cache-control all``), as qsa's clean call starts; its later kernels find the L2 as the kernel before them
  left it (a second ncu run, ``--cache-control none``), as they do in the call. The overhead is what qsa's
  events time around a call of as many empty kernels (Row.empty_launch: a wave of blocks, or the split's own
  grid) beyond ncu's durations of them.
  Nsight Compute serialises a call's launches, so a call whose launches overlap under programmatic dependent
  launch (the split's) is checked against it with PDL off (``QSA_PDL=0``: the same kernels one after another);
  its PDL row is checked against nvbench only.

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
NCU = ["ncu", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv", "--print-units", "base"]
FLUSHED, AS_LEFT = "all", "none"  # ncu's --cache-control: every kernel on flushed caches, or on the L2 as left
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
    pdl: bool = True  # False: the call's launches one after another (QSA_PDL=0)

    @property
    def ncu_observes(self) -> bool:
        """Whether Nsight Compute can time the call: not when its launches overlap (it serialises them)."""
        return self.launches == 1 or not (self.pdl and self.variant == "split")

    def env(self) -> dict[str, str]:
        return {**os.environ, **({} if self.pdl else {"QSA_PDL": "0"})}

    @property
    def tag(self) -> str:
        """Its part of the output files' names."""
        return f"{self.variant}-{self.ctx}-{self.nq}{'' if self.pdl else '-nopdl'}"

    def empty_launch(self) -> tuple[str, str]:
        """(name, grid and block) of the empty kernels its overhead is measured with: the split's call, as many
        launches of its kernels' grid and block (sized by the capacity, often far from a wave: a launch's fixed
        cost and the gap to the next depend on it); the other calls (grids that fill the card), waves."""
        if self.variant != "split":
            return "wave", EMPTY_LAUNCHES["wave"]
        import cupy

        from qsa_cli.core.geometry import TOPK_SPLIT_THREADS, max_blocks
        from qsa_cli.launch.topk import split_grid

        chunks = split_grid(max_blocks(self.cap), self.nq, cupy.cuda.Device().attributes["MultiProcessorCount"]).chunks
        return f"grid{chunks}x{self.nq}", f"({chunks}, {self.nq}), ({TOPK_SPLIT_THREADS},)"

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
    Row("split top-k 524K x 8, PDL off", ("topk-parity", "0", "--no-model"), "split", 524288, 8, 524288,
        "block_topk_split", 6, pdl=False),
    Row("cluster top-k 524K x 8", ("topk-parity", "0", "--no-model"), "cluster", 524288, 8, 524288,
        "block_topk_cluster", 1),
    Row("split top-k 131K x 1", ("topk-parity", "0", "--no-model"), "split", 131072, 1, 262144, "block_topk_split", 6),
    Row("split top-k 131K x 1, PDL off", ("topk-parity", "0", "--no-model"), "split", 131072, 1, 262144,
        "block_topk_split", 6, pdl=False),
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
    record = out / f"{tag}-{row.tag}.json"
    done = subprocess.run([*QSA, *row.args("auto"), *extra, "--json", str(record), "--quiet"], capture_output=True,
                          text=True, env=row.env())
    if done.returncode not in (0, 1):  # 1: a threshold or check failed, and the record was written
        raise SystemExit(f"{row.label} ({tag}): qsa exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return measurement(record, row.variant)


def ncu_durations_us(argv: list[str], log: Path, kernel_regex: str, cache: str,
                     env: dict[str, str] | None = None) -> list[tuple[str, float]]:
    """(kernel, gpu__time_duration in µs) of the first NCU_LAUNCHES launches matching ``kernel_regex``, each
    on the caches ``cache`` (FLUSHED or AS_LEFT) leaves it."""
    proc = subprocess.run([*NCU, "--cache-control", cache, "-k", f"regex:{kernel_regex}", "--launch-count",
                           str(NCU_LAUNCHES), *argv], capture_output=True, text=True, env=env)
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"ncu failed ({proc.returncode}), see {log}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    return [(r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1e3) for r in rows if r["Metric Name"] == "gpu__time_duration.sum"]


def per_call_us(flushed: list[tuple[str, float]], as_left: list[tuple[str, float]],
                launches: int) -> tuple[float, list[str]]:
    """The median duration of one call and the kernels of the first call: each call's first kernel from the
    ``flushed`` run, its later ones from the ``as_left`` run (the same launches in the same order)."""
    calls = min(len(flushed), len(as_left)) // launches
    if calls == 0:
        raise SystemExit(f"ncu profiled {min(len(flushed), len(as_left))} launches, fewer than a call's {launches}")
    names = [name for name, _ in flushed[:calls * launches]]
    if names != [name for name, _ in as_left[:calls * launches]]:
        raise SystemExit("ncu's two runs profiled different kernels")
    sums = [flushed[c * launches][1] + sum(us for _, us in as_left[c * launches + 1:(c + 1) * launches])
            for c in range(calls)]
    return statistics.median(sums), names[:launches]


EMPTY = r'''extern "C" __global__ void empty_kernel() {}'''
# The empty kernel's launches, always measured: a wave of 256-thread blocks over every SM (the single-launch
# kernels' grids are waves of such blocks; a launch's fixed cost grows a little with its grid), and one warp,
# recorded beside it. A run adds the split's grids (Row.empty_launch).
EMPTY_LAUNCHES = {"wave": "(cupy.cuda.Device().attributes['MultiProcessorCount'] * 8,), (256,)", "warp": "(1,), (32,)"}
EMPTY_SAMPLES = 2000  # an exact count: the stopping rule's 0.5 % is below the events' step for a 3 µs median


def empty_kernel_qsa_us(out: Path, shape: str, launch: str, launches: int = 1) -> float:
    """qsa's timer (--l2 clean) on a call of ``launches`` empty kernels of ``shape`` (``launch``: its grid and
    block), in a process of its own."""
    code = f"""
import cupy, json
from qsa_cli.timing import DeviceTimer
kernel = cupy.RawKernel({EMPTY!r}, "empty_kernel")
def call():
    for _ in range({launches}):
        kernel({launch}, ())
timed = DeviceTimer(l2="clean").measure(call, {EMPTY_SAMPLES})
print(json.dumps(timed.samples_us))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    samples = json.loads(proc.stdout.strip().splitlines()[-1])
    (out / f"empty-{shape}-x{launches}-qsa.json").write_text(json.dumps(samples))
    return statistics.median(samples)


def empty_kernel_ncu_us(out: Path, shape: str, launch: str) -> float:
    code = f"""
import cupy
kernel = cupy.RawKernel({EMPTY!r}, "empty_kernel")
for _ in range({NCU_LAUNCHES}):
    kernel({launch}, ())
cupy.cuda.Device().synchronize()
"""
    durations = ncu_durations_us([sys.executable, "-c", code], out / f"empty-{shape}-ncu.log", "empty_kernel", FLUSHED)
    return statistics.median(us for _, us in durations)


def launch_overhead_us(qsa_chain_us: float, ncu_empty_us: float, launches: int) -> float:
    """What qsa's events time around a call of ``launches`` empty kernels beyond ncu's durations of them."""
    return qsa_chain_us - launches * ncu_empty_us


def main(out: Path, only: list[str]) -> int:
    """The rows whose label holds one of ``only`` (every row when empty)."""
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONPATH", ".")
    rows = [r for r in ROWS if not only or any(o in r.label for o in only)]
    # a call of n launches: the overhead of n empty kernels of its shape one after another, measured in this run
    observed = [r for r in rows if r.ncu_observes]
    shapes = {**EMPTY_LAUNCHES, **dict(r.empty_launch() for r in observed)}
    calls = sorted({(r.empty_launch()[0], r.launches) for r in observed})
    empty = {shape: {"qsa_us": empty_kernel_qsa_us(out, shape, launch), "ncu_us": empty_kernel_ncu_us(out, shape, launch)}
             for shape, launch in shapes.items()}
    chains = {f"{shape} x{n}": empty_kernel_qsa_us(out, shape, shapes[shape], n) for shape, n in calls}
    overheads = {f"{shape} x{n}": launch_overhead_us(chains[f"{shape} x{n}"], empty[shape]["ncu_us"], n)
                 for shape, n in calls}
    results = []
    for row in rows:
        dirty = qsa_run(row, out, "dirty", "--l2", "dirty")
        nvbench = qsa_run(row, out, "nvbench", "--timer", "nvbench")
        dirty_us = statistics.median(dirty["samples_us"])
        nv_mean = nvbench["nvbench"]["cold_mean_us"]
        result = {
            "row": row.label, "pdl": row.pdl, "qsa_dirty_median_us": dirty_us,
            "qsa_dirty_mean_us": statistics.fmean(dirty["samples_us"]), "qsa_dirty_samples": len(dirty["samples_us"]),
            "nvbench_cold_mean_us": nv_mean, "nvbench_samples": nvbench["nvbench"]["samples"],
            "dirty_vs_nvbench": dirty_us / nv_mean - 1,
        }
        if row.ncu_observes:
            clean = qsa_run(row, out, "clean", "--l2", "clean")
            argv = [*QSA, *row.args("3"), "--l2", "clean", "--warmup", "0", "--quiet"]
            flushed = ncu_durations_us(argv, out / f"ncu-{row.tag}.log", row.kernel, FLUSHED, row.env())
            as_left = (ncu_durations_us(argv, out / f"ncu-{row.tag}-as-left.log", row.kernel, AS_LEFT, row.env())
                       if row.launches > 1 else flushed)
            ncu_call, kernels = per_call_us(flushed, as_left, row.launches)
            clean_us = statistics.median(clean["samples_us"])
            shape = row.empty_launch()[0]
            overhead = overheads[f"{shape} x{row.launches}"]
            expected = ncu_call + overhead
            result.update({
                "qsa_clean_median_us": clean_us, "ncu_call_us": ncu_call, "ncu_launches": row.launches,
                "ncu_kernels": kernels, "launch_overhead_us": overhead, "empty_shape": shape,
                "ncu_plus_overhead_us": expected, "clean_vs_ncu": clean_us / expected - 1,
            })
        results.append(result)
        print(json.dumps(result), flush=True)
    agree = all(abs(r["dirty_vs_nvbench"]) <= TOLERANCE and abs(r.get("clean_vs_ncu", 0.0)) <= TOLERANCE
                for r in results)
    summary = {"tolerance": TOLERANCE, "empty_kernel": empty, "empty_chain_qsa_us": chains,
               "launch_overhead_us": overheads, "agree": agree, "row_definitions": [asdict(r) for r in ROWS]}
    # JSON lines (the summary, then a row a line): not a qsa record, which a results folder's .json files are
    (out / "agreement.jsonl").write_text("".join(json.dumps(x) + "\n" for x in (summary, *results)))
    lines = ["| launcher | qsa dirty median | nvbench cold mean | diff | qsa clean median | ncu + overhead | diff |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        ncu = (f"{r['qsa_clean_median_us']:.2f} | {r['ncu_plus_overhead_us']:.2f} ({r['ncu_launches']} "
               f"launch{'es' if r['ncu_launches'] > 1 else ''}) | {100 * r['clean_vs_ncu']:+.1f}%"
               if "clean_vs_ncu" in r else "– | – (overlapped launches: see the PDL-off row) | –")
        lines.append(f"| {r['row']} | {r['qsa_dirty_median_us']:.2f} | {r['nvbench_cold_mean_us']:.2f} | "
                     f"{100 * r['dirty_vs_nvbench']:+.1f}% | {ncu} |")
    lines.append("\nLaunch overhead: an empty kernel " + "; ".join(
        f"as a {shape}: {e['qsa_us']:.2f} µs under qsa's timer, {e['ncu_us']:.2f} µs under ncu" for shape, e in empty.items())
        + "; calls of n empty kernels under qsa's timer " + ", ".join(f"{us:.2f} µs ({call})" for call, us in chains.items())
        + ". Added to ncu's durations: " + ", ".join(f"{us:.2f} µs ({call})" for call, us in overheads.items()) + ".")
    (out / "agreement.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if agree else 1


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    raise SystemExit(main(Path(sys.argv[1]), sys.argv[2:]))
