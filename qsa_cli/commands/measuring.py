"""What the measuring commands share: the session one opens from its run options, its record kept if the
run is interrupted; the YAML sweep that sweep, select-bench --config and topk-parity --config run in one;
a selftest's checks into its record."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, NoReturn

import click

from .. import session
from ..clocks import parse_lock_spec
from ..config import SweepConfig, config_path, load_config
from ..core.errors import NoDeviceError
from ..core.memory import CaseSize
from ..interrupts import exit_status, interrupted_by, signal_of
from ..output.printed import of_selftest
from ..output.progress import progress_on
from ..record.schema import RunRecord, SelftestCheck
from ..record.vocabulary import QSA_TIMER
from ..runs.sweep import sweep, sweep_sizes
from ..session import CHILD_ENV, ChildCasesRun, Session, SwitchedChild
from ..sides import SideSpec
from ..timing import Iters
from .exit_status import UsageProblem
from .finish import STDOUT, Presentation, finish, finish_record, write_record
from .options import check_distinct
from .run_options import check_run_options, stopping_rule


def _counted(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def recorded(record: RunRecord) -> str:
    """What a record holds, counted: its measurements, parity checks, inexact variants' measured comparisons,
    selftest checks, sanitizer runs."""
    counts = [(len(record.measurements), "measurement"), (len(record.parity), "parity check"),
              (len(record.agreements), "measured comparison"),
              (len(record.checks), "selftest check"), (len(record.sanitizer), "sanitizer run")]
    return ", ".join(_counted(n, what) for n, what in counts if n) or "nothing measured yet"


def keep_interrupted(record: RunRecord, json_path: str, stop: KeyboardInterrupt) -> NoReturn:
    """An interrupted run's record, with what it measured so far, written marked incomplete; then one line
    and the signal's exit status (130 for Ctrl-C, 143 for SIGTERM)."""
    signum = signal_of(stop)
    record.incomplete = True
    record.notes.append("interrupted: the run stopped here, so this record holds only what was measured before")
    write_record(record.to_dict(), json_path)
    click.echo(err=True)  # closes the terminal's ^C echo, as click does when it sees the interrupt
    where = "stdout" if json_path == STDOUT else json_path
    click.echo(f"{interrupted_by(signum)}: the record so far ({recorded(record)}) is in {where}, marked incomplete",
               err=True)
    raise click.exceptions.Exit(exit_status(signum)) from None


def command_line() -> list[str]:
    """The command line the running command was given (main() hands it down as click's context's obj)."""
    return list(click.get_current_context().obj)


def child_of_run(json_path: str | None) -> SwitchedChild | None:
    """What this process runs as a child of a run (runs/switched.py), as its environment says (None: it is
    none); such a child writes its record with --json."""
    child = SwitchedChild.of_environment(os.environ)
    if child is not None and not json_path:
        raise UsageProblem(f"{CHILD_ENV} makes this a child of a run, which writes its record with --json")
    return child


@contextlib.contextmanager
def kept_if_interrupted(opened: AbstractContextManager[Session], json_path: str | None) -> Iterator[Session]:
    """A measuring session whose record is written (--json) where the command stops short: on Ctrl-C or
    SIGTERM, with what was measured so far, marked incomplete (keep_interrupted); in a child of a run, as soon
    as it has run the cases its run gave it, whole, the command ending there (exit status 0)."""
    s = None
    try:
        with opened as s:
            yield s
    except KeyboardInterrupt as stop:
        if s is None or not json_path:
            raise
        keep_interrupted(s.record, json_path, stop)
    except ChildCasesRun:
        assert s is not None and json_path is not None
        write_record(s.record.to_dict(), json_path)
        raise click.exceptions.Exit(0) from None
    if s is not None and s.settings.child is not None:  # the command ended before the cases its run gave it
        raise RuntimeError(f"a child of a run ran {len(s.ran_as_child)} of the {len(s.settings.child.cases)} "
                           "cases it was given before its command ended: it did not meet the others as its run did")


def open_session(opts: dict[str, Any], command: str, iters: Iters, config: SweepConfig | None = None,
                 sides: tuple[SideSpec, SideSpec] | None = None,
                 cpu_runs: bool = True, sizes: Sequence[CaseSize] = ()) -> session.Opening:
    """A session from the run options (and qsa compare's ``sides``) for a run of ``iters`` samples a case (a
    sweep's iterations); a sweep config's l2, warm-up and seed take the place of theirs. The run options that
    would not be applied are refused first; ``cpu_runs``: the command runs on --backend cpu too, so a missing
    device's message says so; ``sizes``: the cases the run will make, weighed against this machine's memory as
    the session opens (core/memory.py)."""
    lock = parse_lock_spec(opts["lock_spec"]) if opts["lock_spec"] else None
    check_run_options(opts, iters)
    settings = session.Settings(backend=opts["backend"], l2=opts["l2"], warmup=opts["warmup"],
                                stopping=stopping_rule(opts), seed=opts["seed"],
                                check_model=not opts["no_model"], device_id=opts["device_id"],
                                engines=opts["engines"], adapter=opts["adapter"], variants=opts["variants"],
                                baseline=opts["baseline"], candidate=opts["candidate"], kernels=opts["kernels"],
                                sides=sides, limits=opts["limits"], timer=opts.get("timer", QSA_TIMER), iters=iters,
                                sizes=tuple(sizes), child=child_of_run(opts["json_path"]))
    if config is not None:  # the command line's limits after the file's, so they take their place
        settings = dataclasses.replace(settings, l2=config.l2, warmup=config.warmup, seed=config.seed,
                                       engines=(*config.engines, *settings.engines),
                                       limits=(*config.limits, *settings.limits))
    warn = lambda msg: click.echo(f"qsa: warning: {msg}", err=True)  # noqa: E731
    opened = session.session(settings, command, command_line(), lock, opts["lock_clocks_optional"], warn)
    # an engine checkout's kernels need the GPU: --backend cpu would only be refused
    advised = cpu_runs and not settings.engines
    return session.Opening(settings, kept_if_interrupted(_cpu_advised(opened) if advised else opened,
                                                         opts["json_path"]))


@contextlib.contextmanager
def _cpu_advised(opened: AbstractContextManager[Session]) -> Iterator[Session]:
    """A session that, when it finds no device to open, says that --backend cpu runs the CPU models."""
    entered = False
    try:
        with opened as s:
            entered = True
            yield s
    except NoDeviceError as missing:
        if entered:
            raise
        raise NoDeviceError(f"{missing} (use --backend cpu to run the CPU models)") from None


def run_sweep(config_name: str, stage: str | None, opts: dict[str, Any], shown: Presentation, command: str) -> int:
    """The cases of a YAML sweep (only ``stage``'s, when given), measured and finished."""
    check_distinct({"--json": opts["json_path"]}, {"--config": str(config_path(config_name))})
    config = load_config(config_path(config_name))
    if stage is not None and not config.cases(stage):
        raise UsageProblem(f"{config.source} has no {stage} cases")
    with (open_session(opts, command, config.iterations, config, sizes=sweep_sizes(config, stage)) as s,
          progress_on(opts["quiet"]) as progress):
        sweep(s, config, stage, progress)
    return finish_record(s.record, shown, opts["json_path"])


def with_checks(record: RunRecord, rows: list[SelftestCheck]) -> RunRecord:
    """A selftest's checks into its record (the runner returns them beside it)."""
    record.checks = list(rows)
    return record


def finish_selftest(record: RunRecord, rows: list[SelftestCheck], shown: Presentation, json_path: str | None) -> int:
    """A selftest's checks into its record, then the one finish path."""
    return finish(of_selftest(with_checks(record, rows)), shown, json_path)
