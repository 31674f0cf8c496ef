"""The one way every command ends: the record written (--json), then a judging command's CI files (--junit,
--comment, GitHub's step summary), then the results in the chosen --format (in a log, a judging command's
summary in place of its tables), its annotations, then the verdict lines, then the exit status."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..core.files import append_whole, atomic_write, check_writable
from ..core.streams import printing
from ..output import ci
from ..output.judged import Judgement
from ..output.layout import PipeConsole, print_blocks
from ..output.printed import Printed, of_record
from ..record.schema import RunRecord, write_json
from .exit_status import EXIT_PARITY, UsageProblem

STDOUT = "-"  # --json -: the record on stdout


@dataclass(frozen=True)
class CiEnvironment:
    """What a CI runner's environment asks of a judging command, read once where the command line is parsed:
    GitHub's step summary file (GITHUB_STEP_SUMMARY), and its annotations (GITHUB_ACTIONS=true)."""

    step_summary: str | None = None
    annotations: bool = False

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> CiEnvironment:
        return cls(environ.get("GITHUB_STEP_SUMMARY") or None, environ.get("GITHUB_ACTIONS") == "true")


@dataclass(frozen=True)
class Presentation:
    """How a command presents its results: the --format; and for a judging command (``judging``: one that
    gives a verdict for CI) --verbose, --junit, --comment and what its CI environment asks."""

    fmt: str
    judging: bool = False
    verbose: bool = False
    junit: str | None = None
    comment: str | None = None
    ci: CiEnvironment = field(default_factory=CiEnvironment)

    def outputs(self) -> dict[str, str | None]:
        """Its files, by option, for check_distinct."""
        return {"--junit": self.junit, "--comment": self.comment}

    def summarised(self, stream: TextIO) -> bool:
        """Whether a judging command's tables give way to its summary on ``stream``: in a log (not a terminal,
        where the tables stay) unless --verbose."""
        return self.judging and self.fmt == "table" and not self.verbose and not stream.isatty()


def presentation(opts: dict[str, Any], judging: bool = True, environ: Mapping[str, str] | None = None) -> Presentation:
    """--format (or markdown for --markdown) and, on a judging command (one that has --junit, and judges in
    this run: ``judging``), --verbose, --junit and --comment, taken out of ``opts``; the CI environment read
    from ``environ`` (the process's by default). Checked before anything runs: the step summary's path as an
    output's."""
    fmt, markdown = opts.pop("fmt"), opts.pop("markdown")
    if markdown and fmt not in (None, "markdown"):
        raise UsageProblem(f"--markdown is --format markdown: give one, not --markdown and --format {fmt}")
    chosen = "markdown" if markdown else fmt or "table"
    if "junit_path" not in opts:
        return Presentation(chosen)
    verbose, junit, comment = opts.pop("verbose"), opts.pop("junit_path"), opts.pop("comment_path")
    if not judging:  # the command refused them if given
        return Presentation(chosen)
    environment = CiEnvironment.of(os.environ if environ is None else environ)
    if environment.step_summary is not None:
        check_writable(environment.step_summary, "GITHUB_STEP_SUMMARY")
    return Presentation(chosen, True, verbose, junit, comment, environment)


def write_record(data: dict[str, Any], json_path: str) -> None:
    """The record to its file (whole or not at all), or to stdout for ``-``."""
    if json_path == STDOUT:
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        sys.stdout.flush()
        return
    write_json(json_path, data)


def write_ci_files(judgement: Judgement, shown: Presentation) -> None:
    """--junit and --comment, each whole or not at all; the step summary appended (GitHub gathers a step's
    summary from what its commands append to the file)."""
    if shown.junit:
        with atomic_write(shown.junit) as fh:
            fh.write(ci.junit_xml(judgement))
    body = ci.comment(judgement) if shown.comment or shown.ci.step_summary else ""
    if shown.comment:
        with atomic_write(shown.comment) as fh:
            fh.write(body)
    if shown.ci.step_summary:
        append_whole(shown.ci.step_summary, body + "\n")


def finish(printed: Printed, shown: Presentation, json_path: str | None = None, record_at: str | None = None) -> int:
    """Every command ends here. The record is written first (--json), so that nothing the printing meets
    can lose it, then a judging command's CI files; then the results in ``shown.fmt`` (a judging command's
    summary in a log, saying where the record is: ``record_at``, else --json's file), its annotations,
    then the verdict lines, then the exit status. With ``--json -`` stdout is the record and everything
    else goes to stderr; a csv or json stdout gets no verdict lines or annotations (they go to stderr).
    A reader that closes its end early (``| head -1``) ends the printing quietly, and the exit status is
    still the run's verdict; a file system that fills under stdout is one line and exit status 2 (the files,
    written first, are whole)."""
    results = sys.stderr if json_path == STDOUT else sys.stdout
    verdicts = results if shown.fmt in ("table", "markdown") else sys.stderr
    judgement = printed.judgement() if shown.judging and printed.judgement is not None else None
    files_written = False
    with printing(sys.stdout, results, verdicts) as cut:
        if json_path:
            write_record(printed.data(), json_path)
        if judgement is not None:
            write_ci_files(judgement, shown)
        files_written = True
        if judgement is not None and shown.summarised(results):
            where = record_at or ("stdout" if json_path == STDOUT else json_path)
            print_blocks(PipeConsole(file=results), ci.summary_blocks(judgement, where))
        elif not (json_path == STDOUT and shown.fmt == "json"):  # the record is on stdout already
            printed.write(shown.fmt, results)
        annotations = ci.annotations(judgement) if judgement is not None and shown.ci.annotations else []
        for line in [*annotations, *printed.verdict]:
            verdicts.write(line + "\n")
        verdicts.flush()
    if cut.short and not files_written and judgement is not None:
        write_ci_files(judgement, shown)  # the record's reader (--json -) went away before they were written
    return 0 if printed.passed else EXIT_PARITY


def finish_record(record: RunRecord, shown: Presentation, json_path: str | None) -> int:
    return finish(of_record(record), shown, json_path)
