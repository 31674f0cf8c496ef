"""A stand-in for ``python -m qsa_cli.variant_child JOB`` (tests/test_variant_child.py starts it in its place):
no device, no engine. It reads the job and each case's inputs as the real child does, and writes each case's
record as the real child would, a row for every variant it was given (qsa's reference too, which the parent
drops) marked as its own; each start logged to ``FAKE_CHILD_LOG`` and each case's inputs as read saved under
``FAKE_CHILD_INPUTS``, so that the test sees how many children ran and what they were given. With
``FAKE_CHILD_FAIL`` set it fails after printing a little."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from qsa_cli.inputs import TopkInputs
from qsa_cli.record.schema import Measurement, ParityCheck, RunRecord
from qsa_cli.record.vocabulary import last_call
from qsa_cli.stages.common import call_case
from qsa_cli.variant_child import JOB_FILE, read_inputs

SETTING = "QSA_FAKE_SETTING"  # the switch the test's switched variants run under
CHILD_ROW = "fake child"  # what each of its parity rows is checked against


def main(argv: list[str]) -> int:
    work = Path(argv[0])
    job = json.loads((work / JOB_FILE).read_text())
    setting = os.environ.get(SETTING, "")
    if os.environ.get("FAKE_CHILD_FAIL"):
        print("fake child: attaching the builds")
        print(f"fake child: setting {setting} refused", file=sys.stderr)
        return 3
    with open(os.environ["FAKE_CHILD_LOG"], "a") as log:
        log.write(json.dumps({"setting": setting, "cases": [e["variants"] for e in job["cases"]]}) + "\n")
    for i, entry in enumerate(job["cases"]):
        inputs = read_inputs(entry)
        arrays = {k: v for k, v in vars(inputs).items() if isinstance(v, np.ndarray)}
        np.savez(Path(os.environ["FAKE_CHILD_INPUTS"]) / f"{setting}-{i}.npz", **arrays)
        kind = "prompt" if entry["active_blocks"] else "decode"
        extra = {"score_set": inputs.score_set} if isinstance(inputs, TopkInputs) else {}
        case = call_case(inputs.steps, inputs.capacity, kind, job["l2"], **extra)
        record = RunRecord(command="variant-child", argv=argv, backend="gpu")
        for v in entry["variants"]:
            record.measurements.append(Measurement(entry["stage"], v, dict(case), [1.0]))
            record.parity += [ParityCheck(entry["stage"], dict(case), v, CHILD_ROW, True),
                              ParityCheck(entry["stage"], dict(case), last_call(v), v, True)]
        record.notes.append(f"fake child {setting} on {entry['label']}")
        record.write(work / entry["record"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
