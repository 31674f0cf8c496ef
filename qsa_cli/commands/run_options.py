"""The options that choose what a command runs, each checked as the arguments are parsed (so before anything
is measured): --engine, --kernels, --variants, --keys, and the run options every measuring command shares."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from ..catalog import check_kernels
from ..core.errors import EngineError, KernelError
from ..engine.checkout import parse_engine_spec
from ..record.vocabulary import DEFAULT_KEYS, SCORER_KEYS
from ..session import GPU_TIMER_SETTINGS
from ..timing import DEFAULT_WARMUP, MAX_WARMUP
from .exit_status import UsageProblem
from .options import DEVICE_OPTION, FORMAT_OPTION_LIST, QUIET_OPTION, RECORD, SEED_OPTION, given, with_options


def _kernels_folder(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    """--kernels DIR: qsa's kernel sources from a copy, checked now (the run's catalog compiles from it)."""
    if value is None:
        return None
    try:
        return check_kernels(Path(value))
    except KernelError as bad:
        raise UsageProblem(str(bad)) from None


def _engine_specs(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """--engine [NAME=]PATH[@REV], each parsed now: a malformed one is exit 2 before anything runs."""
    for text in value:
        try:
            parse_engine_spec(text)
        except EngineError as bad:
            raise UsageProblem(f"--engine: {bad}") from None
    return value


def _names(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    """V,V,...: the names, each once; an empty list is a usage error."""
    if value is None:
        return None
    # a comma inside brackets separates an engine variant's switches (NAME.scores[K=V,K=V]), not variants
    names = tuple(dict.fromkeys(v.strip() for v in re.split(r",(?![^\[]*\])", value) if v.strip()))
    if not names:
        raise UsageProblem(f"{'/'.join(param.opts)}: no variant named (expected V,V,...)")
    return names


ENGINE_OPTION = click.option(
    "--engine", "engines", multiple=True, metavar="[NAME=]PATH[@REV]", callback=_engine_specs,
    help="An engine checkout (or PATH@REV, a git revision of one) whose variants NAME.scores, NAME.topk, ... "
         "run beside qsa's; repeat for several (--engine base=../strata --engine pr=../strata@my-branch).")

KERNELS_OPTION = click.option(
    "--kernels", type=click.Path(), metavar="DIR", callback=_kernels_folder, is_eager=True,
    help="Compile qsa's kernels from this copy of kernels/ instead of the installed ones (edit the copy).")

KEYS_OPTION = click.option(
    "--keys", type=click.Choice(SCORER_KEYS), default=DEFAULT_KEYS, show_default=True,
    help="Synthetic keys and queries: spec section 5's, or adversarial (magnitudes 1e-30..1e30, NaN, "
         "infinities, signed zeros, products that cancel).")

# what each run option, given with --backend cpu, would not do there
NOT_ON_THE_CPU = {
    **{name: (f"--{name}", why) for name, why in GPU_TIMER_SETTINGS.items()},
    "lock_spec": ("--lock-clocks", "the CPU backend has no GPU clocks to lock"),
    "lock_clocks_optional": ("--lock-clocks-optional", "the CPU backend has no GPU clocks to lock"),
    "device_id": ("--device", "the CPU backend runs on no CUDA device"),
    "kernels": ("--kernels", "the CPU backend compiles no kernels: it runs the CPU models, so the folder's sources "
                "would not run"),
}


def check_run_options(opts: dict[str, Any]) -> None:
    """The run options given that would not be applied, refused before anything runs (a record would say
    they were): those of the GPU with --backend cpu, --lock-clocks-optional without --lock-clocks."""
    if opts["backend"] == "cpu":
        named = next(((flag, why) for name, (flag, why) in NOT_ON_THE_CPU.items() if given(name)), None)
        if named is not None:
            raise UsageProblem(f"{named[0]} does not apply to --backend cpu: {named[1]}")
    if opts["lock_clocks_optional"] and not opts["lock_spec"]:
        raise UsageProblem("--lock-clocks-optional goes with --lock-clocks SM_MHZ[,MEM_MHZ]: alone it locks nothing")


# the options every measuring command shares
RUN_OPTIONS = with_options([
    click.option("--backend", type=click.Choice(["gpu", "cpu"]), default="gpu", show_default=True,
                 help="gpu: the CUDA kernels; cpu: the exact CPU models of the same arithmetic."),
    click.option("--l2", type=click.Choice(["cold", "warm"]), default="cold", show_default=True,
                 help="cold: flush the L2 before every sample; warm: repeat on the same data."),
    click.option("--warmup", type=click.IntRange(0, MAX_WARMUP), default=DEFAULT_WARMUP, show_default=True,
                 help="Untimed runs first."),
    SEED_OPTION,
    click.option("--no-model", is_flag=True, help="Skip the check against the exact CPU model."),
    DEVICE_OPTION,
    click.option("--lock-clocks", "lock_spec", metavar="SM_MHZ[,MEM_MHZ]",
                 help="Lock the GPU clocks for the run (needs the permission); restored on every way out."),
    click.option("--lock-clocks-optional", is_flag=True, help="Warn and go on unlocked when locking is refused."),
    click.option("--json", "json_path", type=RECORD,
                 help="Write the run's result record (every sample) to this file (- for stdout: then the "
                      "tables go to stderr); on Ctrl-C, what was measured so far, marked incomplete."),
    *FORMAT_OPTION_LIST,
    QUIET_OPTION,
    KERNELS_OPTION,
    ENGINE_OPTION,
    click.option("--variants", "variants", metavar="V,V,...", callback=_names,
                 help="Run only these variants (names as qsa info and the tables show them; an engine "
                      "checkout's are NAME.scores, NAME.topk-split, ...)."),
    click.option("--baseline", metavar="V", help="The \"before\" of the tables and thresholds (default: the "
                 "catalog's baseline of the stage)."),
    click.option("--candidate", metavar="V", help="The \"after\" (default: the catalog's candidate)."),
])
