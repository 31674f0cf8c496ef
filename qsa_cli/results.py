"""The result record of a run: plain, versioned, JSON-serialisable data, every sample kept.

Measurement and parity are recorded here and nowhere else; tables, markdown, plots and the gate are
all rendered from a record, so a saved run can be re-rendered or compared later (``qsa report``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import __version__
from .files import atomic_write
from .inputs import InputError

SCHEMA = "qsa.run"
SCHEMA_VERSION = 1

# "keys" is in a scorer case only for keys other than the synthetic ones: the cases of earlier runs keep their key
CASE_FIELDS = ("stage", "ctx", "nq", "capacity", "kind", "score_set", "keys", "l2")


def case_key(stage: str, case: dict[str, Any]) -> str:
    """A stable name for a (stage, case): what the gate matches a run's rows with a baseline's on."""
    parts = [stage] + [f"{k}={case[k]}" for k in CASE_FIELDS[1:] if k in case]
    return " ".join(parts)


class CaseKeyed:
    """A result about one case of one stage; ``key`` is the case as the reports and the gate index it."""

    stage: str
    case: dict[str, Any]

    @property
    def key(self) -> str:
        return case_key(self.stage, self.case)


@dataclass
class Measurement(CaseKeyed):
    """The timed samples of one variant on one case, with the clocks around them."""

    stage: str  # "scores", "topk", "window"
    variant: str  # a kernel variant, "read-floor" or a library reference point
    case: dict[str, Any]
    samples_us: list[float]
    warmup: int = 0
    bytes_read: int | None = None  # bytes the variant must read once (for GB/s)
    clocks_before: dict[str, Any] | None = None
    clocks_after: dict[str, Any] | None = None
    throttled: bool = False  # a clocks-event reason for thermal, power or hardware slowdown was seen

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)

    def percentile_us(self, p: float) -> float:
        s = sorted(self.samples_us)
        return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]

    @property
    def spread_us(self) -> tuple[float, float]:
        """(10th, 90th) percentile: the range the gate requires a regression to fall outside of."""
        return self.percentile_us(10), self.percentile_us(90)

    @property
    def gbps(self) -> float | None:
        if not self.bytes_read:
            return None
        return self.bytes_read / (self.median_us * 1e-6) / 1e9


@dataclass
class ParityCheck(CaseKeyed):
    """One bitwise comparison: ``subject`` against ``against`` on one case."""

    stage: str
    case: dict[str, Any]
    subject: str
    against: str
    equal: bool
    detail: str = ""  # the first difference, when there is one
    hashes: dict[str, str] = field(default_factory=dict)
    rows_equal: int | None = None  # queries whose whole output row is identical
    rows: int | None = None


@dataclass
class ThresholdCheck(CaseKeyed):
    """A sweep's threshold on one case, e.g. new vs old speedup >= 2.5, or new / read floor <= 1.3."""

    stage: str
    case: dict[str, Any]
    name: str  # "min_speedup" or "max_floor_ratio"
    value: float
    limit: float
    passed: bool


@dataclass
class RunRecord:
    command: str
    argv: list[str]
    backend: str  # "gpu" or "cpu"
    device: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    measurements: list[Measurement] = field(default_factory=list)
    parity: list[ParityCheck] = field(default_factory=list)
    thresholds: list[ThresholdCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    tool_version: str = __version__
    git_commit: str | None = field(default_factory=lambda: git_commit())
    kernel_source_hash: str = ""
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(p.equal for p in self.parity) and all(t.passed for t in self.thresholds)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        data = dict(data)
        data.pop("schema", None)
        data.pop("schema_version", None)
        data["measurements"] = [Measurement(**m) for m in data.get("measurements", [])]
        data["parity"] = [ParityCheck(**p) for p in data.get("parity", [])]
        data["thresholds"] = [ThresholdCheck(**t) for t in data.get("thresholds", [])]
        return cls(**data)

    def write(self, path: str | os.PathLike[str]) -> None:
        with atomic_write(path) as fh:
            json.dump(self.to_dict(), fh, indent=1)
            fh.write("\n")


def load_record(path: str | os.PathLike[str]) -> RunRecord:
    """Read a record written by ``RunRecord.write``; a bad file is an InputError naming what is wrong."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a JSON result record ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise InputError(f"{path}: not a qsa result record (no \"schema\": \"{SCHEMA}\")")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InputError(f"{path}: result schema version {version} is not supported (this qsa reads {SCHEMA_VERSION})")
    try:
        return RunRecord.from_dict(data)
    except TypeError as exc:
        raise InputError(f"{path}: malformed result record ({exc})") from None


def git_commit() -> str | None:
    """The checkout's commit (with ``-dirty`` when it has changes), or None outside a checkout."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12", "--match=NONE"],
            capture_output=True, text=True, timeout=5, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def merge_records(records: list[RunRecord]) -> RunRecord:
    """Many runs of one device as one record (e.g. a benchmark table built from one command per case).

    Refuses runs of different devices or backends; runs of different kernel sources are merged with a
    note naming each hash, since a table of them compares more than one version.
    """
    first = records[0]
    for r in records[1:]:
        if (r.backend, r.device.get("name"), r.device.get("compute_capability")) != (
            first.backend, first.device.get("name"), first.device.get("compute_capability")):
            raise InputError(f"cannot merge runs of {first.device.get('name', first.backend)} and "
                             f"{r.device.get('name', r.backend)}")
    merged = RunRecord.from_dict(first.to_dict())
    merged.command, merged.argv = "report", []
    merged.notes = [f"merged from {len(records)} runs, the first: `qsa {' '.join(first.argv)}`"]
    hashes = sorted({r.kernel_source_hash for r in records})
    if len(hashes) > 1:
        merged.notes.append("kernel sources differ between the merged runs: " + ", ".join(h[:12] for h in hashes))
    for r in records[1:]:
        merged.measurements += r.measurements
        merged.parity += r.parity
        merged.thresholds += r.thresholds
    merged.created = max(r.created for r in records)
    return merged
