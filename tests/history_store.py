"""Synthetic baseline folders for qsa history: runs of one card promoted with qsa baseline's own promote, their
medians at given levels with a known noise (tests/test_history.py's stores). Run as a script, it is
docs/history.md's sample: ``python tests/history_store.py ARGS`` makes that page's folder, ``baselines`` (16
runs: halve 10% slower from the 9th, multi flat), in a temporary folder and runs ``qsa ARGS`` there."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from record_factory import record, samples, scores_case

from qsa_cli.cli import main
from qsa_cli.record import baselines
from qsa_cli.record.schema import Measurement, ParityCheck
from qsa_cli.record.vocabulary import INPUTS, INPUTS_HASH, OUTPUT_HASH

CARD = {"name": "NVIDIA H200", "compute_capability": "9.0", "sms": 132, "memory_bytes": 140 * 2**30}
KEY = "nvidia-h200-sm90-140gib"
CASE = scores_case(420000, 8)
OTHER = scores_case(32768, 1)


def commit(i: int) -> str:
    return f"c{i:02d}" + "0" * 10


def store(folder: Path, levels: dict[str, list[float | None]], run_noise: float = 0.003, noise: float = 0.01,
          seed: int = 0, outputs: dict[str, list[str]] | None = None, engines: list[dict[str, Any]] | None = None,
          commits: list[str] | None = None) -> Path:
    """One run per index of ``levels``' lists (None: the variant not measured in that run), each promoted into
    ``folder``: medians at the level times (1 + run_noise x N(0, 1)), 50 samples spread by ``noise``; every
    variant's output hash ``outputs[v][i]`` (default one hash throughout)."""
    rng = np.random.default_rng(seed)
    n = len(next(iter(levels.values())))
    for i in range(n):
        ms, checks = [], []
        for variant, series in levels.items():
            if series[i] is None:
                continue
            for case, scale in ((CASE, 1.0), (OTHER, 0.1)):
                median = series[i] * scale * (1 + run_noise * rng.standard_normal())
                ms.append(Measurement("scores", variant, dict(case), samples(median, rng, 50, noise)))
                out = (outputs or {}).get(variant, ["o" * 64] * n)[i]
                checks.append(ParityCheck("scores", dict(case), variant, INPUTS, True,
                                          hashes={INPUTS_HASH: "i" * 64, OUTPUT_HASH: out}))
        settings = {"engines": engines[i]} if engines else {}
        rec = record(ms, checks, device=dict(CARD), git_commit=(commits or [commit(j) for j in range(n)])[i],
                     created=f"2026-12-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00", settings=settings)
        baselines.promote(rec, f"run{i}.json", folder)
    return folder


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="qsa-history-") as folder:
        store(Path(folder) / "baselines", {"halve": [100.0] * 8 + [110.0] * 8, "multi": [200.0] * 16})
        os.chdir(folder)
        main(sys.argv[1:])
