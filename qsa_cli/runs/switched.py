"""Variants under an engine's switches, run by child qsa processes of the run.

The engine reads its ``STRATA_*`` switches once per process, so ``NAME.scores[STRATA_SCORES_RS=0]`` (or
``NAME.scores-dx``, whose kind implies its switch) cannot run in the process that ran ``NAME.scores``. Each
switch setting's variants run in ONE child of their own over every case they run on (a child's start costs
seconds: once per setting, not once per case): the same command, on the same command line (so the same seed
and inputs, timer settings, device, kernels and engine checkouts, whose builds the cache holds since the run
built them), with the setting in its environment and, beside it (session.CHILD_ENV), its part of the run: its
cases (each by its record key), the setting's variants of each, which it runs with qsa's reference beside them
to check them against (runs/stages.run_cases). It writes its record with --json and ends as its last case ends.
Its record is the only way back: the record layer takes its rows into the run's (record/assembly.py).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from ..catalog import Catalog
from ..core.children import start_in_group, waited
from ..core.errors import SwitchedRunError
from ..record.load import load_record
from ..record.schema import RunRecord
from ..session import CHILD_ENV, SwitchedChild

CHILD_TIMEOUT_S = 1800
TAIL_LINES = 12  # of a failed child's output, in the run's error


def switches_of(catalog: Catalog, stage: str, name: str) -> tuple[tuple[str, str], ...]:
    """The switches ``name`` runs under (a window pair: its top-k's, which its scorer shares)."""
    v = catalog.get("topk", name.split("+", 1)[1]) if stage == "window" else catalog.get(stage, name)
    return v.engine.switches if v.engine is not None else ()


def _with_record_at(command_line: list[str], path: Path) -> list[str]:
    """``command_line`` writing its record to ``path`` (--json), in place of any it gave (click takes an option's
    last value), before a bare ``--``, after which it would be an argument."""
    end = command_line.index("--") if "--" in command_line else len(command_line)
    return [*command_line[:end], "--json", str(path), *command_line[end:]]


def run_child(command_line: list[str], child: SwitchedChild, what: str) -> RunRecord:
    """``child``'s part of the run whose command line is ``command_line``, run by a child qsa process in a
    process group of its own (ended with the run: an interruption, an error); its record. A SwitchedRunError
    naming ``what`` (the variants it runs) when it fails, with the tail of its output, or runs past
    CHILD_TIMEOUT_S, or when this process is a child of a run itself, whose command did not run as one (it
    would start itself again, and again)."""
    if os.environ.get(CHILD_ENV):
        raise SwitchedRunError(f"this process is a child of a run, whose command ({command_line[0]}) does not run as "
                               f"one: it cannot run {what} under their switches in a child of its own")
    package_parent = str(Path(__file__).resolve().parent.parent.parent)  # so that it runs this qsa
    with tempfile.TemporaryDirectory(prefix="qsa-switched-") as folder:
        record = Path(folder) / "record.json"
        env = {**os.environ, **dict(child.switches), CHILD_ENV: child.encoded(),
               "PYTHONPATH": os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")]))}
        started = start_in_group([sys.executable, "-m", "qsa_cli", *_with_record_at(command_line, record)], env)
        output, code = waited(started, CHILD_TIMEOUT_S)
        if code is None:
            raise SwitchedRunError(f"the child running {what} did not finish in {CHILD_TIMEOUT_S} s")
        if code != 0 or not record.is_file():
            tail = output.strip().splitlines()[-TAIL_LINES:]
            raise SwitchedRunError(f"the child running {what} failed (exit {code}):\n" + "\n".join(tail))
        return load_record(record)
