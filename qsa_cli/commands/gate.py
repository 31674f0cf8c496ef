"""``qsa gate``: a run (or a saved record) against a baseline record, for CI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from .. import session
from ..config import config_path, load_config
from ..core.errors import BaselineError
from ..core.progress import Progress
from ..output import gate
from ..output.printed import of_gate
from ..output.progress import progress_on
from ..record import baselines
from ..record.load import load_record
from ..record.schema import Confirmation, RunRecord
from ..runs.sweep import remeasure, sweep, sweep_sizes
from .exit_status import UsageProblem
from .finish import finish, presentation
from .measuring import child_of_run, command_line, kept_if_interrupted
from .options import (
    CI_OPTIONS,
    DEVICE_OPTION,
    FORMAT_OPTIONS,
    QUIET_OPTION,
    RECORD,
    TOLERANCE_RANGE,
    check_distinct,
    given,
)
from .run_options import ENGINE_OPTION, KERNELS_OPTION, LIMIT_OPTION


def card_baseline(record: RunRecord, folder: Path, config_name: str) -> RunRecord:
    """The current baseline of ``record``'s card in ``folder`` (--baseline-dir), named on stderr; a card without
    one is a BaselineError saying how to make it."""
    key = baselines.record_key(record)
    if key is None:
        raise BaselineError(f"--baseline-dir {folder}: the run has no card to pick a baseline by (a {record.backend}-"
                            "backend run, or no device name, compute capability or memory size recorded)")
    found = baselines.current(folder, key)
    if found is None:
        engines = "".join(f" --engine {name}=PATH" for name in baselines.engine_names(record))
        config = record.settings.get("config", config_name)
        raise BaselineError(f"--baseline-dir {folder}: no baseline for this card ({key}): make one from a passing run "
                            f"on it: qsa sweep {config}{engines} --json run.json && qsa baseline promote run.json "
                            f"--dir {folder}")
    click.echo(f"qsa: gate: baseline {found} (the current one of card {key})", err=True)
    return load_record(found)


@click.command("gate")
@KERNELS_OPTION
@ENGINE_OPTION
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False),
              help="The baseline record (or --baseline-dir).")
@click.option("--baseline-dir", "baseline_dir", metavar="DIR", type=click.Path(file_okay=False),
              help="A folder of baselines kept per card (qsa baseline promote): the gate takes this run's card's "
                   "current one, and says which file it took.")
@click.option("--results", "results_path", type=click.Path(dir_okay=False),
              help="Compare this saved record instead of running the config.")
@click.option("--config", "config_name", default="ci", show_default=True, help="The sweep to run when no --results.")
@click.option("--tolerance", type=TOLERANCE_RANGE, default=0.05, show_default=True,
              help="A median slower than the baseline's by more than this (and outside both spreads) is SLOW.")
@click.option("--force", is_flag=True, help="Compare with a baseline from another device (or, when it holds no output "
              "hashes, other kernel sources).")
@click.option("--allow-missing", is_flag=True,
              help="A (case, variant) of the baseline that the run lacks is shown, not a failure.")
@click.option("--allow-bit-changes", is_flag=True,
              help="An output with other bits than the baseline's on the same inputs is shown, not a failure.")
@click.option("--confirm", "confirm", type=click.IntRange(0, 10), default=1, show_default=True, metavar="N",
              help="Before failing, measure the cases holding a SLOW row again, up to N times: a row fails only if "
                   "SLOW each time, else it is UNCONFIRMED and passes (0: fail at once).")
@CI_OPTIONS
@LIMIT_OPTION
@DEVICE_OPTION
@click.option("--json", "json_path", type=RECORD,
              help="Write the record of the run the gate makes (- for stdout; not with --results: that run is "
                   "recorded).")
@FORMAT_OPTIONS
@QUIET_OPTION
def command(baseline_path: str | None, baseline_dir: str | None, results_path: str | None, config_name: str,
            tolerance: float, force: bool, allow_missing: bool, allow_bit_changes: bool, confirm: int,
            limits: tuple[tuple[str, str, float], ...], device_id: int, json_path: str | None,
            engines: tuple[str, ...], **opts: Any) -> int:
    """CI regression gate: parity must hold, thresholds too, and every timing of the baseline must be in
    the run and not SLOW."""
    shown = presentation(opts)
    if baseline_path is None and baseline_dir is None:
        raise UsageProblem("Missing option '--baseline': give --baseline FILE or --baseline-dir DIR")
    if baseline_path is not None and baseline_dir is not None:
        raise UsageProblem("give --baseline FILE or --baseline-dir DIR, not both")
    if baseline_dir is not None and not Path(baseline_dir).is_dir():
        raise UsageProblem(f"--baseline-dir {baseline_dir}: no such folder")
    if results_path:
        named = next((what for what, on in (("--json records", json_path), ("--engine adds variants to", engines),
                                            ("--adapter adds variants to", opts["adapter"]),
                                            ("--kernels compiles the kernels of", given("kernels")),
                                            ("--config names the sweep of", given("config_name")),
                                            ("--device picks the device of", given("device_id")),
                                            ("--confirm measures again in", given("confirm"))) if on), None)
        if named is not None:
            raise UsageProblem(f"{named} the run the gate makes; with --results it makes none")
    check_distinct({"--json": json_path, **shown.outputs()},
                   {"--baseline": baseline_path, "--results": results_path, "--config": config_name})
    baseline = load_record(baseline_path) if baseline_path is not None else None

    def judged(record: RunRecord, baseline: RunRecord) -> gate.GateResult:
        return gate.compare(record, baseline, tolerance=tolerance, force=force, allow_missing=allow_missing,
                            allow_bit_changes=allow_bit_changes, limits=limits)

    if results_path:
        record = load_record(results_path)
        baseline = baseline or card_baseline(record, Path(str(baseline_dir)), config_name)
        gate.check_comparable(record, baseline, force)
        gate.check_limits(record, limits)
        result = judged(record, baseline)  # by the record's own rounds, where the gate that ran it made some
        if any(r.verdict == "SLOW" for r in result.rows):
            result = replace(result, notes=(*result.notes, "a saved run is not measured again: a SLOW row fails "
                                            "unless its record holds a round of the gate that ran it (--confirm)"))
    else:
        config = load_config(config_path(config_name))
        settings = session.Settings(l2=config.l2, warmup=config.warmup, seed=config.seed, device_id=device_id,
                                    engines=(*config.engines, *engines), adapter=opts["adapter"],
                                    kernels=opts["kernels"], limits=(*config.limits, *limits), iters=config.iterations,
                                    sizes=sweep_sizes(config), child=child_of_run(json_path))
        with (kept_if_interrupted(session.session(settings, "gate", command_line()), json_path) as s,
              progress_on(opts["quiet"]) as progress):
            baseline = baseline or card_baseline(s.record, Path(str(baseline_dir)), config_name)
            gate.check_comparable(s.record, baseline, force)  # refuse before measuring
            sweep(s, config, progress=progress)
            record = s.record
            result = confirmed(s, config, lambda: judged(record, baseline), confirm, progress)
    return finish(of_gate(result, record, baseline), shown, json_path, record_at=results_path)


def confirmed(s: session.Session, config: Any, judge: Callable[[], gate.GateResult], rounds: int,
              progress: Progress) -> gate.GateResult:
    """The gate's result once each SLOW row's case was measured again (``--confirm``), round by round while a
    row is still SLOW, up to ``rounds``: each round's measurements kept in the record's ``confirmations``, which
    the judging reads (output/gate.py), so a saved record is judged the same later."""
    result = judge()
    for round_ in range(1, rounds + 1):
        slow = {r.key for r in result.rows if r.verdict == "SLOW"}
        if not slow:
            break
        click.echo(f"qsa: gate: {len(slow)} case(s) hold a SLOW row: measuring them again (round {round_} of "
                   f"{rounds})", err=True)
        s.record.confirmations.append(Confirmation(round_, remeasure(s, config, slow, progress)))
        result = judge()
    return result
