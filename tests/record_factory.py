"""Run records built by hand for the rendering, gate and plot tests (no device, no measuring)."""

from __future__ import annotations

from typing import Any

import numpy as np

from qsa_cli.record.load import ROLES_BEFORE_RECORDED
from qsa_cli.record.schema import Measurement, ParityCheck, RunRecord, StopOutcome

CAPACITY = 524288
KEY_BYTES_PER_BLOCK = 128 * 4

# Spec section 7 / the seed: scorer medians in µs, (context, queries) -> (multi, halve).
SEED_SCORES = {
    (32768, 1): (12.1, 7.7), (32768, 3): (24.8, 14.5), (32768, 4): (31.7, 15.0), (32768, 8): (59.2, 36.0),
    (131072, 1): (41.1, 34.2), (131072, 3): (86.8, 66.2), (131072, 4): (113.6, 67.1), (131072, 8): (217.0, 93.3),
    (420000, 1): (116.7, 100.5), (420000, 3): (264.9, 117.9), (420000, 4): (346.6, 124.5),
    (420000, 6): (509.7, 238.0), (420000, 8): (773.9, 255.1),
}
# Top-k dispatched time per decode call in ms, (context, queries) -> (wide, split).
SEED_TOPK = {
    (9000, 1): (0.034, 0.032), (9000, 3): (0.034, 0.035), (9000, 6): (0.033, 0.042),
    (131072, 1): (0.095, 0.033), (131072, 3): (0.094, 0.039), (131072, 6): (0.095, 0.048),
    (420000, 1): (0.203, 0.033), (420000, 3): (0.209, 0.040), (420000, 6): (0.210, 0.064),
    (524288, 1): (0.243, 0.034), (524288, 3): (0.248, 0.041), (524288, 6): (0.251, 0.066),
}
READ_FLOOR_US = {32768: 9.0, 131072: 13.0, 420000: 20.0}


def scores_case(ctx: int, nq: int, capacity: int = CAPACITY, l2: str = "clean") -> dict[str, Any]:
    return {"ctx": ctx, "nq": nq, "capacity": capacity, "kind": "decode", "l2": l2}


def topk_case(ctx: int, nq: int, capacity: int = CAPACITY, kind: str = "decode", score_set: str = "continuous",
              l2: str = "clean") -> dict[str, Any]:
    return {"ctx": ctx, "nq": nq, "capacity": capacity, "kind": kind, "score_set": score_set, "l2": l2}


def samples(median: float, rng: np.random.Generator, n: int = 50, noise: float = 0.0) -> list[float]:
    """``n`` samples whose median is ``median`` exactly, spread by ``noise`` (relative)."""
    s = median * (1 + noise * rng.standard_normal(n))
    return sorted((s - np.median(s) + median).tolist())


def stop_outcome(reason: str = "met", noise_pct: float = 0.4) -> StopOutcome:
    """How the stopping rule (ITERS auto) ended a measurement: ``met``, or not (``timeout``, ``sample cap``)."""
    return {"met": reason == "met", "reason": reason, "noise_pct": noise_pct, "measured_s": 0.02, "wall_s": 0.5}


def measurement(stage: str, variant: str, case: dict[str, Any], median: float, rng: np.random.Generator,
                noise: float = 0.0, throttled: bool = False, sm_mhz: int = 1650, n: int = 50,
                stop: StopOutcome | None = None) -> Measurement:
    """``n`` samples of ``median``; ``stop``: taken by the stopping rule, which ended so (None: ITERS a count)."""
    clocks = {"sm_mhz": sm_mhz, "mem_mhz": 7000, "temperature_c": 52, "power_w": 180.0,
              "event_reasons": ["sw_thermal_slowdown"] if throttled else [], "throttled": throttled}
    key_bytes = (case["ctx"] // 4 + 1) * KEY_BYTES_PER_BLOCK if stage == "scores" else None
    return Measurement(stage, variant, dict(case), samples(median, rng, n=n, noise=noise), warmup=5,
                       bytes_read=key_bytes, clocks_before=clocks, clocks_after=clocks, throttled=throttled, stop=stop)


def parity(stage: str, case: dict[str, Any], subject: str, against: str, equal: bool = True,
           hashes: dict[str, str] | None = None) -> ParityCheck:
    nq = case["nq"]
    return ParityCheck(stage, dict(case), subject, against, equal, "" if equal else "query 1 position 7: id 12 vs 13",
                       hashes or {}, rows_equal=nq if equal else nq - 1, rows=nq)


def record(measurements: list[Measurement], checks: list[ParityCheck], **kw: Any) -> RunRecord:
    base: dict[str, Any] = {
        "command": "sweep", "argv": ["sweep", "sm75-decode", "--lock-clocks", "1650"], "backend": "gpu",
        "device": {"name": "NVIDIA GeForce RTX 2080 Ti", "compute_capability": "7.5", "sms": 68},
        "settings": {"iterations": 50, "warmup": 5, "l2": "clean", "seed": 0,
                     "clock_lock": {"sm_mhz": 1650, "mem_mhz": None, "locked": True, "reason": None},
                     "dispatch": {"kind": "decode", "scores": "halve", "topk": "split", "reasons": {}},
                     "roles": {stage: dict(r) for stage, r in ROLES_BEFORE_RECORDED.items()}},  # as a session records
        "created": "2026-11-29T18:31:00+00:00", "git_commit": "0123456789ab", "kernel_source_hash": "k" * 16,
    }
    base.update(kw)
    return RunRecord(measurements=measurements, parity=checks, **base)


def roles(scores: tuple[str, str, str], topk: tuple[str, str, str]) -> dict[str, dict[str, str]]:
    """A record's ``settings["roles"]`` (runs.session records them): (reference, baseline, candidate) of each stage."""
    return {stage: dict(zip(("reference", "baseline", "candidate"), names)) for stage, names in
            (("scores", scores), ("topk", topk))}


def seed_record(seed: int = 0, noise: float = 0.0, scale: float = 1.0, throttle: tuple[int, int] | None = None) -> RunRecord:
    """The seed's figures as a record: scorer (multi, halve, read floor) and top-k (reference, wide, split).

    ``scale`` multiplies every new-kernel median (a deliberately slowed or sped-up run); ``throttle``
    marks the halve measurement of one (context, queries) as throttled.
    """
    rng = np.random.default_rng(seed)
    ms, checks = [], []
    for (ctx, nq), (before, after) in SEED_SCORES.items():
        case = scores_case(ctx, nq)
        hashes = {"multi": f"{ctx:08x}{nq:08x}", "halve": f"{ctx:08x}{nq:08x}"}
        ms += [measurement("scores", "multi", case, before, rng, noise),
               measurement("scores", "halve", case, after * scale, rng, noise, throttled=throttle == (ctx, nq)),
               measurement("scores", "read-floor", case, READ_FLOOR_US[ctx], rng, noise)]
        checks += [parity("scores", case, "halve", "multi", hashes=hashes),
                   parity("scores", case, "halve", "cpu-model", hashes={"halve": hashes["halve"], "cpu-model": hashes["halve"]})]
    for (ctx, nq), (before, after) in SEED_TOPK.items():
        case = topk_case(ctx, nq)
        ms += [measurement("topk", "reference", case, before * 2000, rng, noise),
               measurement("topk", "wide", case, before * 1000, rng, noise),
               measurement("topk", "split", case, after * 1000 * scale, rng, noise)]
        checks += [parity("topk", case, v, against) for v, against in
                   (("wide", "reference"), ("split", "reference"), ("split", "wide"), ("split", "cpu-oracle"))]
    return record(ms, checks)
