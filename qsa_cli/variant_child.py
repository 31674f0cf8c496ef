"""Engine variants under switches: each switch setting's variants run in a child process of their own.

The engine reads its ``STRATA_*`` switches once per process, so ``NAME.scores[STRATA_SCORES_RS=0]``
cannot run in the process that ran ``NAME.scores``. ``run_switched`` writes the case's inputs to a
folder, starts ``python -m qsa_cli.variant_child JOB`` with the switches in its environment, and reads
back what the stage runner measured and checked there: the same runner (guard zones, integrity, the
timer and the clock reads around each measurement) on the same bits, qsa's reference beside the switched
variants so that each is checked against it and the CPU model. The child loads the checkouts' libraries
the parent built; it measures nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .catalog import Catalog, Launcher, qsa_catalog
from .clocks import ClockMonitor
from .core.errors import SwitchedRunError
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
JOB_FILE, INPUTS_FILE, RECORD_FILE = "job.json", "inputs.npz", "record.json"


def switches_of(catalog: Catalog, stage: str, name: str) -> tuple[tuple[str, str], ...]:
    """The switches ``name`` runs under (a window pair: its top-k's, which its scorer shares)."""
    v = catalog.get("topk", name.split("+", 1)[1]) if stage == "window" else catalog.get(stage, name)
    return v.engine.switches if v.engine is not None else ()


def run_switched(catalog: Catalog, stage: str, switches: tuple[tuple[str, str], ...], variants: tuple[str, ...],
                 inputs: ScorerInputs | TopkInputs, measurer: Measurer, job: dict[str, Any]) -> StageOutcome:
    """``variants`` of ``stage`` (window pairs ``scorer+topk`` for the window) of the run's ``catalog``, all under
    ``switches``, run by a child on ``inputs`` with qsa's reference beside them (not in the window); the rows
    it wrote, less the reference's and the read floor's (this process has them). ``job``: what the child runs
    them with (the roles, the model check, the call's active blocks, the device, the kernels folder)."""
    reference = job["roles"]["reference"]
    names = [reference, *variants] if stage != "window" else list(variants)
    switched = sorted({part for name in variants for part in name.split("+") if "[" in part})
    with tempfile.TemporaryDirectory(prefix="qsa-switched-") as folder:
        work = Path(folder)
        arrays = ({"scores": inputs.scores, "steps": inputs.steps} if isinstance(inputs, TopkInputs) else
                  {"pooled": inputs.pooled, "dead": inputs.dead, "q": inputs.q, "steps": inputs.steps})
        np.savez(work / INPUTS_FILE, **arrays)
        label = inputs.score_set if isinstance(inputs, TopkInputs) else inputs.keys
        (work / JOB_FILE).write_text(json.dumps({
            **job, "stage": stage, "variants": names, "switched": switched, "label": label,
            "iters": measurer.iters, "rule": measurer.rule.to_dict(), "l2": measurer.timer.l2,
            "warmup": measurer.timer.warmup, "locked_sm_mhz": measurer.timer.locked_sm_mhz,
            "engines": engine_builds(catalog.libraries.values())}))
        env = {**os.environ, **dict(switches),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                            os.environ.get("PYTHONPATH")]))}
        try:
            done = subprocess.run([sys.executable, "-m", "qsa_cli.variant_child", str(work)], env=env,
                                  capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SwitchedRunError(f"the child running {', '.join(variants)} did not finish in {CHILD_TIMEOUT_S} s")
        if done.returncode != 0 or not (work / RECORD_FILE).is_file():
            tail = (done.stdout + done.stderr).strip().splitlines()[-12:]
            raise SwitchedRunError(f"the child running {', '.join(variants)} failed (exit {done.returncode}):\n"
                                   + "\n".join(tail))
        record = load_record(work / RECORD_FILE)
    # the switched variants' rows only: the reference, the read floor and the rest are this process's
    ours = lambda subject: any(subject == v or subject.startswith(f"{v} (") for v in variants)  # noqa: E731
    return StageOutcome([m for m in record.measurements if m.variant in variants],
                        [p for p in record.parity if ours(p.subject)], notes=record.notes,
                        agreements=[a for a in record.agreements if ours(a.subject)])


def main(argv: list[str]) -> int:
    import cupy

    work = Path(argv[0])
    job = json.loads((work / JOB_FILE).read_text())
    stage, variants = job["stage"], tuple(job["variants"])
    record = RunRecord(command="variant-child", argv=argv, backend="gpu")
    with cupy.cuda.Device(job["device_id"]):
        engines = attach_builds(job["engines"])
        catalog = qsa_catalog(Path(job["kernels"])).adding(engines.variants, engines.libraries)
        cc = int(cupy.cuda.Device().compute_capability)
        catalog = catalog.adding([switched_variant(name, engines.libraries.values(), cc) for name in job["switched"]])
        launcher = Launcher(catalog, read_switches())  # this process's: the parent's and the variants' switches
        monitor = ClockMonitor.for_pci_bus_id(job["pci_bus_id"])
        timer = DeviceTimer(l2=job["l2"], warmup=job["warmup"], kernels=catalog.kernel_folder,
                            locked_sm_mhz=job["locked_sm_mhz"])
        measurer = Measurer(job["iters"], timer, monitor if monitor.available else None, StoppingRule(**job["rule"]))
        with np.load(work / INPUTS_FILE) as a:
            arrays = {k: a[k] for k in a.files}
        if stage == "topk":
            inputs_t = TopkInputs(arrays["scores"], arrays["steps"], job["label"])
            out = topk_stage.run_topk(inputs_t, measurer, tuple(catalog.get(stage, n) for n in variants),
                                      job["roles"], launcher, job["active_blocks"], job["check_model"])
        else:
            inputs = ScorerInputs(arrays["pooled"], arrays["dead"], arrays["q"], arrays["steps"], job["label"])
            if stage == "scores":
                out = scores_stage.run_scores(inputs, measurer, tuple(catalog.get(stage, n) for n in variants),
                                              job["roles"], launcher, job["check_model"])
            else:
                pairs = tuple(window_stage.WindowPair(catalog.get("scores", scorer), catalog.get("topk", topk))
                              for scorer, topk in (p.split("+", 1) for p in variants))
                out = window_stage.run_window(inputs, measurer, pairs, launcher)
        monitor.close()
    record.measurements, record.parity, record.notes = out.measurements, out.parity, out.notes
    record.agreements = out.agreements
    record.write(work / RECORD_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
