"""What the measuring commands share: the session one opens from its run options, its record kept if the
run is interrupted; the YAML sweep that sweep, select-bench --config and topk-parity --config run in one;
a selftest's checks into its record."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import click

from .. import session
from ..clocks import parse_lock_spec
from ..config import SweepConfig, config_path, load_config
from ..output.printed import of_selftest
from ..output.progress import progress_on
from ..record.schema import RunRecord, SelftestCheck
from ..runs.selftest import SelftestRow
from ..runs.sweep import sweep
from ..session import Session
from ..sides import SideSpec
from .exit_status import EXIT_INTERRUPTED, UsageProblem
from .finish import STDOUT, finish, finish_record, write_record


@contextlib.contextmanager
def kept_if_interrupted(opened: AbstractContextManager[Session], json_path: str | None) -> Iterator[Session]:
    """A measuring session whose record, on Ctrl-C with --json, is written with what was measured so
    far, marked incomplete; then one line and exit status 130."""
    s = None
    try:
        with opened as s:
            yield s
    except KeyboardInterrupt:
        if s is None or not json_path:
            raise
        s.record.incomplete = True
        s.record.notes.append("interrupted: the run stopped here, so this record holds only what was measured before")
        write_record(s.record.to_dict(), json_path)
        click.echo(err=True)  # closes the terminal's ^C echo, as click does when it sees the interrupt
        where = "stdout" if json_path == STDOUT else json_path
        click.echo(f"qsa: interrupted: the {len(s.record.measurements)} measurements taken are in {where}, "
                   "marked incomplete", err=True)
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


def open_session(opts: dict[str, Any], command: str, config: SweepConfig | None = None,
                 sides: tuple[SideSpec, SideSpec] | None = None) -> AbstractContextManager[Session]:
    """A session from the run options (and qsa compare's ``sides``); a sweep config's l2, warm-up and seed
    take the place of theirs."""
    lock = parse_lock_spec(opts["lock_spec"]) if opts["lock_spec"] else None
    settings = session.Settings(backend=opts["backend"], l2=opts["l2"], warmup=opts["warmup"], seed=opts["seed"],
                                check_model=not opts["no_model"], device_id=opts["device_id"],
                                engines=opts["engines"], variants=opts["variants"], baseline=opts["baseline"],
                                candidate=opts["candidate"], kernels=opts["kernels"], sides=sides)
    if config is not None:
        settings = dataclasses.replace(settings, l2=config.l2, warmup=config.warmup, seed=config.seed,
                                       engines=(*config.engines, *settings.engines))
    warn = lambda msg: click.echo(f"qsa: warning: {msg}", err=True)  # noqa: E731
    opened = session.session(settings, command, sys.argv[1:], lock, opts["lock_clocks_optional"], warn)
    return kept_if_interrupted(opened, opts["json_path"])


def run_sweep(config_name: str, stage: str | None, opts: dict[str, Any], fmt: str, command: str) -> int:
    """The cases of a YAML sweep (only ``stage``'s, when given), measured and finished."""
    config = load_config(config_path(config_name))
    if stage is not None and not config.cases(stage):
        raise UsageProblem(f"{config.source} has no {stage} cases")
    with open_session(opts, command, config) as s, progress_on(opts["quiet"]) as progress:
        sweep(s, config, stage, progress)
    return finish_record(s.record, fmt, opts["json_path"])


def finish_selftest(record: RunRecord, rows: list[SelftestRow], fmt: str, json_path: str | None) -> int:
    """A selftest's checks into its record (the runner returns them beside it), then the one finish path."""
    record.checks = [SelftestCheck(r.check, r.cases, r.passed, r.seconds, r.detail) for r in rows]
    return finish(of_selftest(record), fmt, json_path)
