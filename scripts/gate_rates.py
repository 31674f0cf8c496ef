"""The gate's error rates on this machine's card (docs/gate.md's table): how often an unchanged tree's gate
fails a row (false SLOW), and how many of a kernel's rows a real slowdown of it gets failed, with and without
the confirmation round (``--confirm``).

- a baseline: ``qsa sweep ci --json baseline.json``;
- ``--aa N`` A/A gates: ``qsa gate --baseline baseline.json --confirm 1`` of the same tree, each run's record kept;
- for each slowdown P in ``--slowdowns``, ``--slow-gates M`` gates of a copy of kernels/ whose decode scorer
  (``block_scores_halve_kernel``, the ``halve`` variant: 6 rows of the CI sweep) is P % slower for real: each
  warp, its blocks scored, spins on the SM's clock for P % of the cycles it spent (the scores' bits unchanged,
  so the gate compares the copy with the baseline by its bits and its times).

Each gate's record holds its first measurement and the confirmation round's; judging a record without its
confirmations gives the verdict the gate would have given with ``--confirm 0``, so one gate gives both counts.
A row's true slowdown is its median in a slowed gate against its median over the A/A gates.

Usage (on a machine with the card, from the repository root):
    python3 scripts/gate_rates.py OUT [--aa 20] [--slowdowns 3,5,10] [--slow-gates 3]
Writes OUT/baseline.json, OUT/aa/gate-N.json, OUT/slow-P/gate-N.json, OUT/rates.json and prints the table.
Never changes the card's clocks.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qsa_cli.kernels import kernel_dir  # noqa: E402
from qsa_cli.output.gate import UNCONFIRMED, compare  # noqa: E402
from qsa_cli.record.load import load_record  # noqa: E402
from qsa_cli.record.schema import RunRecord  # noqa: E402

QSA = [sys.executable, "-m", "qsa_cli"]
SLOWED_VARIANT = "halve"
HALVE_BODY = """    const int warps_per_cta = blockDim.x / QSA_WARP;
    halve_warp<NQ>(pooled, dead, q, steps, scores, max_blocks, blockIdx.x * warps_per_cta + threadIdx.x / QSA_WARP,
                   gridDim.x * warps_per_cta);
}"""
SPIN = """    const long long started = clock64();  // gate_rates.py: this warp's cycles, then SLOW_PERCENT % more
    const int warps_per_cta = blockDim.x / QSA_WARP;
    halve_warp<NQ>(pooled, dead, q, steps, scores, max_blocks, blockIdx.x * warps_per_cta + threadIdx.x / QSA_WARP,
                   gridDim.x * warps_per_cta);
    const long long spent = clock64() - started;
    while (clock64() - started < spent + spent * {percent} / 100) {{
    }}
}}"""


def slowed_kernels(out: Path, percent: int) -> Path:
    """A copy of qsa's kernels/ whose halve scorer spins ``percent`` % of each warp's own cycles after its work."""
    folder = out / f"kernels-slow-{percent}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(kernel_dir(), folder)
    source = folder / "scores.cu"
    text = source.read_text()
    if text.count(HALVE_BODY) != 1:
        raise SystemExit(f"{source}: block_scores_halve_kernel's body is not the one this script slows")
    source.write_text(text.replace(HALVE_BODY, SPIN.format(percent=percent)))
    return folder


def run(argv: list[str], log: Path) -> float:
    """``qsa argv``; its seconds. Exit 1 (a failed gate) is an outcome; anything else stops the script."""
    started = time.perf_counter()
    done = subprocess.run([*QSA, *argv], capture_output=True, text=True, cwd=ROOT)
    log.write_text(done.stdout + done.stderr)
    if done.returncode not in (0, 1):
        raise SystemExit(f"qsa {' '.join(argv)}: exit {done.returncode}, see {log}")
    return time.perf_counter() - started


def verdicts(record: RunRecord, baseline: RunRecord) -> dict[tuple[str, str], tuple[str, str]]:
    """Each timed (case, variant): (its verdict with no confirmation, with the record's confirmation round)."""
    unconfirmed = compare(replace(record, confirmations=[]), baseline)
    confirmed = compare(record, baseline)
    first = {(r.key, r.variant): r.verdict for r in unconfirmed.rows if r.median_us is not None}
    return {k: (first[k], r.verdict) for r in confirmed.rows if (k := (r.key, r.variant)) in first}


def gates(out: Path, count: int, baseline: Path, extra: list[str]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for i in range(1, count + 1):
        record = out / f"gate-{i}.json"
        seconds = run(["gate", "--baseline", str(baseline), "--confirm", "1", "--quiet", "--json", str(record),
                       *extra], out / f"gate-{i}.log")
        print(f"{out.name} gate {i}: {seconds:.1f} s", flush=True)
        records.append(record)
    return records


def tally(records: list[Path], baseline: RunRecord, slowed: str | None,
          aa_medians: dict[tuple[str, str], float]) -> dict:
    """Per group of gates: rows judged, SLOW without confirmation, SLOW with it (failing), UNCONFIRMED, for the
    slowed variant's rows and the others apart; the range of the slowed rows' true slowdowns, a row a gate."""
    counts = {side: {"rows": 0, "slow_unconfirmed": 0, "slow_confirmed": 0, "unconfirmed": 0}
              for side in ("slowed", "others")}
    ratios: list[float] = []  # each slowed row's median in its gate against its A/A median
    for path in records:
        record = load_record(path)
        medians = {(m.key, m.variant): m.median_us for m in record.measurements}
        for (key, variant), (first, final) in verdicts(record, baseline).items():
            if first not in ("SAME", "FAST", "SLOW"):
                continue  # a reference point, not judged
            side = counts["slowed" if variant == slowed else "others"]
            side["rows"] += 1
            side["slow_unconfirmed"] += first == "SLOW"
            side["slow_confirmed"] += final == "SLOW"
            side["unconfirmed"] += final == UNCONFIRMED
            if variant == slowed and (key, variant) in aa_medians:
                ratios.append(medians[key, variant] / aa_medians[key, variant] - 1)
    return {**counts, "gates": len(records),
            "true_slowdown": [min(ratios), max(ratios)] if ratios else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--aa", type=int, default=20)
    parser.add_argument("--slowdowns", default="3,5,10")
    parser.add_argument("--slow-gates", type=int, default=3)
    a = parser.parse_args()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    baseline_path = out / "baseline.json"
    if not baseline_path.is_file():
        run(["sweep", "ci", "--quiet", "--json", str(baseline_path)], out / "baseline.log")
    baseline = load_record(baseline_path)
    aa = sorted((out / "aa").glob("gate-*.json")) if (out / "aa").is_dir() else []
    aa = aa if len(aa) >= a.aa else gates(out / "aa", a.aa, baseline_path, [])
    aa_medians: dict[tuple[str, str], list[float]] = {}
    for path in aa:
        for m in load_record(path).measurements:
            aa_medians.setdefault((m.key, m.variant), []).append(m.median_us)
    pooled = {k: statistics.median(v) for k, v in aa_medians.items()}
    result = {"card": baseline.device.get("name") if isinstance(baseline.device, dict) else None,
              "aa": tally(aa, baseline, None, pooled), "slowed_variant": SLOWED_VARIANT, "slowdowns": {}}
    for percent in (int(p) for p in a.slowdowns.split(",") if p):
        kernels = slowed_kernels(out, percent)
        records = gates(out / f"slow-{percent}", a.slow_gates, baseline_path, ["--kernels", str(kernels)])
        result["slowdowns"][str(percent)] = tally(records, baseline, SLOWED_VARIANT, pooled)
    (out / "rates.json").write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return 0


def table(result: dict) -> str:
    aa = result["aa"]["others"]
    lines = ["| gates | rows judged | SLOW, no confirmation | SLOW, confirmed (fails) | UNCONFIRMED |",
             "|---|---:|---:|---:|---:|",
             f"| A/A x {result['aa']['gates']} | {aa['rows']} | {aa['slow_unconfirmed']} | {aa['slow_confirmed']} | "
             f"{aa['unconfirmed']} |"]
    for percent, t in result["slowdowns"].items():
        s, o = t["slowed"], t["others"]
        lo, hi = t["true_slowdown"] or (float("nan"), float("nan"))
        lines.append(f"| {result['slowed_variant']} {percent} % slower (measured {100 * lo:+.1f} to {100 * hi:+.1f} %)"
                     f" x {t['gates']} | {s['rows']} | {s['slow_unconfirmed']} | {s['slow_confirmed']} | "
                     f"{s['unconfirmed']} |")
        lines.append(f"| the other rows of those gates | {o['rows']} | {o['slow_unconfirmed']} | {o['slow_confirmed']} |"
                     f" {o['unconfirmed']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
