"""The options that choose what a command runs, each checked as the arguments are parsed (so before anything
is measured): --engine, --kernels, --variants, --keys, and the run options every measuring command shares
(the timer's among them: --l2, --warmup, and the stopping rule of ITERS auto)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import click

from ..catalog import check_kernels
from ..core.errors import EngineError, KernelError, LimitError
from ..engine.adapter import check_adapter_file
from ..engine.checkout import parse_engine_spec
from ..record.limits import parse_limit
from ..record.vocabulary import DEFAULT_KEYS, DEFAULT_L2, L2_STATES, QSA_TIMER, RENAMED_L2, SCORER_KEYS, TIMERS
from ..session import GPU_TIMER_SETTINGS
from ..timing import (
    AUTO,
    DEFAULT_MAX_NOISE_PCT,
    DEFAULT_MIN_SAMPLES,
    DEFAULT_MIN_TIME_S,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WARMUP,
    MAX_ITERATIONS,
    MAX_TIMEOUT_S,
    MAX_WARMUP,
    MIN_SAMPLES_LEAST,
    Iters,
    StoppingRule,
)
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


def _adapter_file(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    """--adapter FILE.cu, checked now (a file of UTF-8 text): a bad one is exit 2 before anything runs."""
    if value is None:
        return None
    try:
        return check_adapter_file(Path(value), "--adapter")
    except EngineError as bad:
        raise UsageProblem(str(bad)) from None


def _names(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    """V,V,...: the names, each once; an empty list is a usage error."""
    if value is None:
        return None
    # a comma inside brackets separates an engine variant's switches (NAME.scores[K=V,K=V]), not variants
    names = tuple(dict.fromkeys(v.strip() for v in re.split(r",(?![^\[]*\])", value) if v.strip()))
    if not names:
        raise UsageProblem(f"{'/'.join(param.opts)}: no variant named (expected V,V,...)")
    return names


def _limits(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[tuple[str, str, float], ...]:
    """--limit [VARIANT:]MEASURE=VALUE, each parsed now (its variant is checked once the run's catalog is built)."""
    try:
        return tuple(parse_limit(text) for text in value)
    except LimitError as bad:
        raise UsageProblem(f"--limit: {bad}") from None


LIMIT_OPTION = click.option(
    "--limit", "limits", multiple=True, metavar="[VARIANT:]MEASURE=VALUE", callback=_limits,
    help="A limit on an inexact variant's measures (max_abs_error, max_rel_error, max_ulps, min_id_fraction, "
         "min_mean_id_fraction, min_identical_fraction), for VARIANT or every inexact one; repeat for several.")


class L2State(click.Choice):
    """--l2: a state's name; the name the read flush had before (cold) refused with its new one."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value in RENAMED_L2:
            self.fail(f"{value!r} is now {RENAMED_L2[value]!r} (the read flush; 'dirty' flushes by writing)",
                      param, ctx)
        return super().convert(value, param, ctx)


class FiniteRange(click.FloatRange):
    """A number in a range, NaN refused (click's FloatRange lets it through: no comparison with NaN fails)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


# the stopping rule's options (parameter -> flag): they apply to ITERS auto only
RULE_OPTIONS = {"min_samples": "--min-samples", "max_noise_pct": "--max-noise", "min_time_s": "--min-time",
                "timeout_s": "--timeout"}

ENGINE_OPTION = with_options([
    click.option("--engine", "engines", multiple=True, metavar="[NAME=]PATH[@REV]", callback=_engine_specs,
                 help="An engine checkout (or PATH@REV, a git revision of one) whose variants NAME.scores, NAME.topk, "
                      "... run beside qsa's; repeat for several (--engine base=../strata --engine "
                      "pr=../strata@my-branch)."),
    click.option("--adapter", type=click.Path(), metavar="FILE.cu", callback=_adapter_file,
                 help="Your own host paths in qsa's variant ABI (qsa_adapter.h), built with each --engine checkout "
                      "(in place of a qsa_adapter.cu the checkout carries): its entries run as NAME.ENTRY."),
])

KERNELS_OPTION = click.option(
    "--kernels", type=click.Path(), metavar="DIR", callback=_kernels_folder, is_eager=True,
    help="Compile qsa's kernels from this copy of kernels/ instead of the installed ones (edit the copy).")

TIMER_OPTION = click.option(
    "--timer", type=click.Choice(TIMERS), default=QSA_TIMER, show_default=True,
    help="What times the variants: qsa's timer, or NVIDIA's nvbench on the same launchers (needs cuda-bench: "
         "pip install '.[nvbench]'; its cold state is --l2 dirty).")

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


def stopping_rule(opts: dict[str, Any]) -> StoppingRule:
    return StoppingRule(**{name: opts[name] for name in RULE_OPTIONS})


def check_run_options(opts: dict[str, Any], iters: Iters) -> None:
    """The run options given that would not be applied, refused before anything runs (a record would say
    they were): those of the GPU with --backend cpu, --lock-clocks-optional without --lock-clocks, the
    stopping rule's unless ITERS (a sweep's iterations) is auto; and a rule that could never be met."""
    rule_given = next((flag for name, flag in RULE_OPTIONS.items() if given(name)), None)
    if rule_given is not None and iters != AUTO:
        raise UsageProblem(f"{rule_given} is the stopping rule's: it applies when ITERS is {AUTO} (here ITERS is "
                           f"{iters}, an exact count{', parity only' if iters == 0 else ''})")
    if iters == AUTO and opts["min_time_s"] > opts["timeout_s"]:
        raise UsageProblem(f"--min-time {opts['min_time_s']:g} s is more than --timeout {opts['timeout_s']:g} s: "
                           "the stopping rule could never be met")
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
    click.option("--l2", type=L2State(L2_STATES), default=DEFAULT_L2, show_default=True,
                 help="The L2 before every sample: clean (flushed by a read of twice its size), dirty (flushed by "
                      "a write, as nvbench's cold), warm (as the previous call left it)."),
    click.option("--warmup", type=click.IntRange(0, MAX_WARMUP), default=DEFAULT_WARMUP, show_default=True,
                 help="Untimed runs first."),
    click.option("--min-samples", "min_samples", type=click.IntRange(MIN_SAMPLES_LEAST, MAX_ITERATIONS),
                 default=DEFAULT_MIN_SAMPLES, show_default=True, help="ITERS auto: at least this many samples."),
    click.option("--max-noise", "max_noise_pct", type=FiniteRange(0, 100, min_open=True), metavar="PCT",
                 default=DEFAULT_MAX_NOISE_PCT, show_default=True,
                 help="ITERS auto: sample until the median's noise (its standard error) is at most PCT percent."),
    click.option("--min-time", "min_time_s", type=FiniteRange(0, MAX_TIMEOUT_S), metavar="S",
                 default=DEFAULT_MIN_TIME_S, show_default=True,
                 help="ITERS auto: and until the samples hold S seconds of measured time."),
    click.option("--timeout", "timeout_s", type=FiniteRange(0, MAX_TIMEOUT_S, min_open=True), metavar="S",
                 default=DEFAULT_TIMEOUT_S, show_default=True,
                 help="ITERS auto: stop after S seconds of wall time even if noisy (the record says so)."),
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
    LIMIT_OPTION,
])
