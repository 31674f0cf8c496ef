"""Engine variants under switches: each switch setting's variants run in one child process of their own.

The engine reads its ``STRATA_*`` switches once per process, so ``NAME.scores[STRATA_SCORES_RS=0]``
cannot run in the process that ran ``NAME.scores``. Given the inputs of every case a setting's variants
run on (one .npz each, ``save_inputs``), ``run_switched`` starts ONE ``python -m qsa_cli.variant_child JOB``
with the switches in its environment for all of them (its start-up, the imports and attaching the builds,
costs seconds: once per setting, not once per case), and reads back what the stage runner measured and
checked there, one record per case: the same runner (guard zones, integrity, the timer and the clock reads
around each measurement) on the same bits, qsa's reference beside the switched variants so that each is
checked against it and the CPU model. The child loads the checkouts' libraries the parent built; it
measures nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .catalog import Catalog, Launcher, qsa_catalog
from .clocks import ClockMonitor
from .core.errors import SwitchedRunError
from .core.files import written
from .dispatch import read_switches
from .engine.attach import attach_builds, engine_builds
from .engine.switches import switched_variant
from .inputs import ScorerInputs, TopkInputs
from .record.load import load_record
from .record.schema import RunRecord
from .stages import scores as scores_stage
from .stages import topk as topk_stage
from .stages import window as window_stage
from .stages.common import Measurer, StageOutcome
from .timing import DeviceTimer, StoppingRule

CHILD_TIMEOUT_S = 1800
CHILD_MODULE = "qsa_cli.variant_child"  # what the parent starts (a test starts a fake in its place)
JOB_FILE = "job.json"


def switches_of(catalog: Catalog, stage: str, name: str) -> tuple[tuple[str, str], ...]:
    """The switches ``name`` runs under (a window pair: its top-k's, which its scorer shares)."""
    v = catalog.get("topk", name.split("+", 1)[1]) if stage == "window" else catalog.get(stage, name)
    return v.engine.switches if v.engine is not None else ()


def roles_stage(stage: str) -> str:
    """The stage whose roles a stage's case runs with (the window's pairs: the scorer's reference)."""
    return "scores" if stage == "window" else stage


@dataclass(frozen=True)
class SwitchedCase:
    """One case of a child: ``variants`` of ``stage`` (window pairs ``scorer+topk`` for the window) on the
    inputs ``save_inputs`` wrote to ``inputs``, ``label`` their score set or keys; ``active_blocks``: the
    top-k call's."""

    stage: str
    variants: tuple[str, ...]
    inputs: Path
    label: str
    active_blocks: int = 0


def save_inputs(inputs: ScorerInputs | TopkInputs, path: Path) -> str:
    """A case's inputs into ``path`` (.npz) for a child; their label (score set, keys), which the job carries. A
    temporary folder that fills is an OutputError (one line)."""
    with written(path):
        if isinstance(inputs, TopkInputs):
            np.savez(path, scores=inputs.scores, steps=inputs.steps)
            return inputs.score_set
        np.savez(path, pooled=inputs.pooled, dead=inputs.dead, q=inputs.q, steps=inputs.steps)
    return inputs.keys


def read_inputs(entry: dict[str, Any]) -> ScorerInputs | TopkInputs:
    """A job's case's inputs as the parent saved them (``entry``: the case in the job)."""
    with np.load(entry["inputs"]) as a:
        arrays = {k: a[k] for k in a.files}
    if entry["stage"] == "topk":
        return TopkInputs(arrays["scores"], arrays["steps"], entry["label"])
    return ScorerInputs(arrays["pooled"], arrays["dead"], arrays["q"], arrays["steps"], entry["label"])


def run_switched(catalog: Catalog, switches: tuple[tuple[str, str], ...], cases: list[SwitchedCase],
                 measurer: Measurer, job: dict[str, Any]) -> list[StageOutcome]:
    """Each case's ``variants`` of the run's ``catalog``, all under ``switches``, run by one child, with qsa's
    reference beside them (not in the window); per case, in order, the rows it wrote less the reference's
    and the read floor's (this process has them). ``job``: what the child runs them with (the roles by
    stage, the model check, the device, the kernels folder)."""
    every = list(dict.fromkeys(v for c in cases for v in c.variants))
    switched = sorted({part for name in every for part in name.split("+") if "[" in part})
    entries = []
    for i, case in enumerate(cases):
        reference = job["roles"][roles_stage(case.stage)]["reference"]
        names = [reference, *case.variants] if case.stage != "window" else list(case.variants)
        entries.append({"stage": case.stage, "variants": names, "label": case.label, "inputs": str(case.inputs),
                        "active_blocks": case.active_blocks, "record": f"record-{i}.json"})
    with tempfile.TemporaryDirectory(prefix="qsa-switched-") as folder:
        work = Path(folder)
        with written(work / JOB_FILE):
            (work / JOB_FILE).write_text(json.dumps({
                **job, "cases": entries, "switched": switched,
                "iters": measurer.iters, "rule": measurer.rule.to_dict(), "l2": measurer.timer.l2,
                "warmup": measurer.timer.warmup, "locked_sm_mhz": measurer.timer.locked_sm_mhz,
                "engines": engine_builds(catalog.libraries.values())}))
        env = {**os.environ, **dict(switches),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                            os.environ.get("PYTHONPATH")]))}
        try:
            done = subprocess.run([sys.executable, "-m", CHILD_MODULE, str(work)], env=env,
                                  capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SwitchedRunError(f"the child running {', '.join(every)} did not finish in {CHILD_TIMEOUT_S} s")
        if done.returncode != 0 or not all((work / e["record"]).is_file() for e in entries):
            tail = (done.stdout + done.stderr).strip().splitlines()[-12:]
            raise SwitchedRunError(f"the child running {', '.join(every)} failed (exit {done.returncode}):\n"
                                   + "\n".join(tail))
        return [_switched_rows(load_record(work / e["record"]), c.variants) for e, c in zip(entries, cases)]


def _switched_rows(record: RunRecord, variants: tuple[str, ...]) -> StageOutcome:
    """The switched variants' rows only: the reference, the read floor and the rest are the parent's."""
    ours = lambda subject: any(subject == v or subject.startswith(f"{v} (") for v in variants)  # noqa: E731
    return StageOutcome([m for m in record.measurements if m.variant in variants],
                        [p for p in record.parity if ours(p.subject)], notes=record.notes,
                        agreements=[a for a in record.agreements if ours(a.subject)])


def main(argv: list[str]) -> int:
    import cupy

    work = Path(argv[0])
    job = json.loads((work / JOB_FILE).read_text())
    with cupy.cuda.Device(job["device_id"]):
        engines = attach_builds(job["engines"])
        catalog = qsa_catalog(Path(job["kernels"])).adding(engines.variants, engines.libraries)
        cc = int(cupy.cuda.Device().compute_capability)
        catalog = catalog.adding([switched_variant(name, engines.libraries.values(), cc) for name in job["switched"]])
        launcher = Launcher(catalog, read_switches())  # this process's: the parent's and the variants' switches
        monitor = ClockMonitor.for_pci_bus_id(job["pci_bus_id"])
        timer = DeviceTimer(l2=job["l2"], warmup=job["warmup"], kernels=catalog.kernel_folder,
                            locked_sm_mhz=job["locked_sm_mhz"])
        measurer = Measurer(job["iters"], timer, monitor if monitor.available else None, StoppingRule(**job["rule"]),
                            gpu=timer)
        for entry in job["cases"]:  # each case's record written as it ends
            stage, variants = entry["stage"], tuple(entry["variants"])
            inputs = read_inputs(entry)
            roles = job["roles"][roles_stage(stage)]
            if stage == "topk":
                out = topk_stage.run_topk(inputs, measurer, tuple(catalog.get(stage, n) for n in variants), roles,
                                          launcher, entry["active_blocks"], job["check_model"])
            elif stage == "scores":
                out = scores_stage.run_scores(inputs, measurer, tuple(catalog.get(stage, n) for n in variants),
                                              roles, launcher, job["check_model"])
            else:
                pairs = tuple(window_stage.WindowPair(catalog.get("scores", scorer), catalog.get("topk", topk))
                              for scorer, topk in (p.split("+", 1) for p in variants))
                out = window_stage.run_window(inputs, measurer, pairs, launcher)
            record = RunRecord(command="variant-child", argv=argv, backend="gpu")
            record.measurements, record.parity, record.notes = out.measurements, out.parity, out.notes
            record.agreements = out.agreements
            record.write(work / entry["record"])
        monitor.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
