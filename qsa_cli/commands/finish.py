"""The one way every command ends: the record written (--json), then the results in the chosen --format,
then the verdict lines, then the exit status."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from ..output.printed import Printed, of_record
from ..record.schema import RunRecord, write_json
from .exit_status import EXIT_PARITY, UsageProblem

STDOUT = "-"  # --json -: the record on stdout


def chosen_format(opts: dict[str, Any]) -> str:
    """--format, or markdown for --markdown (taken out of ``opts``); checked before anything runs."""
    fmt, markdown = opts.pop("fmt"), opts.pop("markdown")
    if markdown and fmt not in (None, "markdown"):
        raise UsageProblem(f"--markdown is --format markdown: give one, not --markdown and --format {fmt}")
    return "markdown" if markdown else fmt or "table"


def write_record(data: dict[str, Any], json_path: str) -> None:
    """The record to its file (whole or not at all), or to stdout for ``-``."""
    if json_path == STDOUT:
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        sys.stdout.flush()
        return
    write_json(json_path, data)


def finish(printed: Printed, fmt: str, json_path: str | None = None,
           then_write: Callable[[], None] | None = None) -> int:
    """Every command ends here. The record is written first (--json), so that nothing the printing meets
    can lose it, then the command's other files (``then_write``: the gate's JUnit); then the results in
    ``fmt``, then the verdict lines, then the exit status. With ``--json -`` stdout is the record and
    everything else goes to stderr; a csv or json stdout gets no verdict lines (they go to stderr). A
    reader that closes its end early (``| head -1``) ends the printing quietly, and the exit status is
    still the run's verdict."""
    results = sys.stderr if json_path == STDOUT else sys.stdout
    verdicts = results if fmt in ("table", "markdown") else sys.stderr
    files_written = False
    try:
        if json_path:
            write_record(printed.data, json_path)
        if then_write is not None:
            then_write()
        files_written = True
        if not (json_path == STDOUT and fmt == "json"):  # the record is on stdout already
            printed.write(fmt, results)
        for line in printed.verdict:
            verdicts.write(line + "\n")
        verdicts.flush()
    except BrokenPipeError:
        # whatever is still buffered for the closed pipe goes nowhere, so exiting flushes without an error
        for stream in {sys.stdout, results, verdicts}:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        if not files_written and then_write is not None:
            then_write()  # the record's reader (--json -) went away before the other files were written
    return 0 if printed.passed else EXIT_PARITY


def finish_record(record: RunRecord, fmt: str, json_path: str | None) -> int:
    return finish(of_record(record), fmt, json_path)

