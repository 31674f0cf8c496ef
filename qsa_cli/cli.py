"""The ``qsa`` command line: parse, validate, call the library, render. No measurement logic here.

Imports are deferred into the commands so that ``qsa --help`` loads neither numpy nor CuPy.
Every error a user can cause (arguments, YAML, input files, output paths, a missing device) is one
line on stderr and exit status 2; a parity failure, a broken threshold or a failed gate is exit status 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import click

# none of these imports numpy, CuPy or rich at import
from .core.errors import EngineError, KernelError, QsaError
from .output import FORMATS
from .record.vocabulary import DEFAULT_KEYS, SCORER_KEYS
from .timing import DEFAULT_WARMUP

EXIT_PARITY = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # the shell's code for a command ended by SIGINT
DEFAULT_ITERS = 50
# "-3" among CTX Q ITERS CAP is a (bad) number, not an unknown option: let the range checks name it.
POSITIONAL_NEGATIVES = {"ignore_unknown_options": True}


class UsageProblem(click.ClickException):
    exit_code = EXIT_USAGE


class OutputPath(click.ParamType):
    """A file the command writes: checked as the arguments are parsed, so before anything is measured."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from .core.files import check_writable

        check_writable(value, "/".join(param.opts) if param else "output")
        return str(value)


OUTPUT = OutputPath()
STDOUT = "-"  # --json -: the record on stdout


class RecordPath(OutputPath):
    """--json's file, or ``-`` for stdout."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        return STDOUT if value == STDOUT else super().convert(value, param, ctx)


RECORD = RecordPath()


def _err(message: str) -> None:
    click.echo(f"qsa: error: {message}", err=True)


def main(argv: list[str] | None = None) -> None:
    try:
        code = cli.main(args=argv, prog_name="qsa", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:
        _err(" ".join(exc.format_message().split()))
        code = EXIT_USAGE
    except (click.Abort, KeyboardInterrupt):
        click.echo("qsa: interrupted", err=True)
        code = EXIT_INTERRUPTED
    except QsaError as exc:
        message = str(exc)
        # A compiler log is many lines by nature; every other error is one line.
        _err(message if isinstance(exc, KernelError) else " ".join(message.split()))
        code = EXIT_USAGE
    sys.exit(code or 0)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="qsa", prog_name="qsa")
def cli() -> None:
    """Benchmark and bitwise parity harness for the QSA decode selection kernels."""


def _kernels_folder(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """--kernels DIR: qsa's kernel sources from a copy, checked now (the run's catalog compiles from it)."""
    if value is None:
        return None
    from pathlib import Path

    from .catalog import check_kernels

    try:
        return check_kernels(Path(value))
    except KernelError as bad:
        raise UsageProblem(str(bad)) from None


def _engine_specs(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """--engine [NAME=]PATH[@REV], each parsed now: a malformed one is exit 2 before anything runs."""
    from .engine.checkout import parse_engine_spec

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


def output_options() -> list[Callable[..., Any]]:
    """--format and --markdown: how a command prints its results."""
    return [
        click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                     help="How to print the results: tables (the default; folded to the width where a table "
                          "does not fit), pull-request markdown, CSV (a line per stage, case and variant) or "
                          "the JSON record."),
        click.option("--markdown", is_flag=True, help="The same as --format markdown."),
    ]


QUIET_OPTION = click.option("--quiet", is_flag=True, help="No progress on stderr.")


def with_options(options: list[Callable[..., Any]]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return lambda f: functools.reduce(lambda acc, opt: opt(acc), reversed(options), f)


def run_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options every measuring command shares."""
    options = [
        click.option("--backend", type=click.Choice(["gpu", "cpu"]), default="gpu", show_default=True,
                     help="gpu: the CUDA kernels; cpu: the exact CPU models of the same arithmetic."),
        click.option("--l2", type=click.Choice(["cold", "warm"]), default="cold", show_default=True,
                     help="cold: flush the L2 before every sample; warm: repeat on the same data."),
        click.option("--warmup", type=click.IntRange(min=0), default=DEFAULT_WARMUP, show_default=True,
                     help="Untimed runs first."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic inputs."),
        click.option("--no-model", is_flag=True, help="Skip the check against the exact CPU model."),
        click.option("--device", "device_id", type=click.IntRange(min=0), default=0, show_default=True),
        click.option("--lock-clocks", "lock_spec", metavar="SM_MHZ[,MEM_MHZ]",
                     help="Lock the GPU clocks for the run (needs the permission); restored on every way out."),
        click.option("--lock-clocks-optional", is_flag=True, help="Warn and go on unlocked when locking is refused."),
        click.option("--json", "json_path", type=RECORD,
                     help="Write the run's result record (every sample) to this file (- for stdout: then the "
                          "tables go to stderr); on Ctrl-C, what was measured so far, marked incomplete."),
        *output_options(),
        QUIET_OPTION,
        KERNELS_OPTION,
        ENGINE_OPTION,
        click.option("--variants", "variants", metavar="V,V,...", callback=_names,
                     help="Run only these variants (names as qsa info and the tables show them; an engine "
                          "checkout's are NAME.scores, NAME.topk-split, ...)."),
        click.option("--baseline", metavar="V", help="The \"before\" of the tables and thresholds (default: the "
                     "registry's baseline of the stage)."),
        click.option("--candidate", metavar="V", help="The \"after\" (default: the registry's candidate)."),
    ]
    return functools.reduce(lambda acc, opt: opt(acc), reversed(options), f)


def keys_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """The scorer's synthetic inputs (select-bench, window-bench)."""
    return click.option("--keys", type=click.Choice(SCORER_KEYS), default=DEFAULT_KEYS, show_default=True,
                        help="Synthetic keys and queries: spec section 5's, or adversarial (magnitudes 1e-30..1e30, "
                             "NaN, infinities, signed zeros, products that cancel).")(f)


def _ints(args: tuple[str, ...], names: list[str]) -> list[int]:
    values = []
    for raw in args:
        if raw.startswith("-") and not raw[1:].isdigit():
            raise UsageProblem(f"no such option: {raw}")
    for name, raw in zip(names, args):
        try:
            values.append(int(raw))
        except ValueError:
            raise UsageProblem(f"{name} must be an integer (got {raw!r})") from None
    return values


def _decode_call(args: tuple[str, ...], command: str) -> tuple[Any, int]:
    """CTX Q ITERS CAP of a decode call (1-8 queries): the call and ITERS, or a one-line usage error."""
    from .core.geometry import Call, check_queries

    ints = _ints(args, ["CTX", "Q", "ITERS", "CAP"])
    if len(args) != 4:
        raise UsageProblem(f"{command} takes CTX Q ITERS CAP (got {len(args)} argument(s))")
    ctx, nq, iters, cap = ints
    call = Call(ctx, nq, cap)
    check_queries(nq, prompt=False)
    _check_iters(iters)
    return call, iters


def _check_iters(iters: int) -> None:
    if iters <= 0:
        raise UsageProblem(f"ITERS must be > 0 (got {iters})")


@contextlib.contextmanager
def _kept_if_interrupted(opened: AbstractContextManager[Any], json_path: str | None) -> Iterator[Any]:
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
        _write_record(s.record.to_dict(), json_path)
        click.echo(err=True)  # closes the terminal's ^C echo, as click does when it sees the interrupt
        where = "stdout" if json_path == STDOUT else json_path
        click.echo(f"qsa: interrupted: the {len(s.record.measurements)} measurements taken are in {where}, "
                   "marked incomplete", err=True)
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


def _open(opts: dict[str, Any], command: str, config: Any = None, sides: Any = None) -> AbstractContextManager[Any]:
    """A session from the run options; a sweep config's l2, warm-up and seed take the place of theirs."""
    from .session import Settings, session

    lock = None
    if opts["lock_spec"]:
        from .clocks import parse_lock_spec

        lock = parse_lock_spec(opts["lock_spec"])
    settings = Settings(backend=opts["backend"], l2=opts["l2"], warmup=opts["warmup"], seed=opts["seed"],
                        check_model=not opts["no_model"], device_id=opts["device_id"], engines=opts["engines"],
                        variants=opts["variants"], baseline=opts["baseline"], candidate=opts["candidate"],
                        kernels=opts["kernels"], sides=sides)
    if config is not None:
        settings = dataclasses.replace(settings, l2=config.l2, warmup=config.warmup, seed=config.seed,
                                       engines=(*config.engines, *settings.engines))
    warn = lambda msg: click.echo(f"qsa: warning: {msg}", err=True)  # noqa: E731
    return _kept_if_interrupted(session(settings, command, sys.argv[1:], lock, opts["lock_clocks_optional"], warn),
                                opts["json_path"])


# ---- the one finish path: the record written, the results printed, the verdict, the exit status --------------


def _chosen_format(opts: dict[str, Any]) -> str:
    """--format, or markdown for --markdown (taken out of ``opts``); checked before anything runs."""
    fmt, markdown = opts.pop("fmt"), opts.pop("markdown")
    if markdown and fmt not in (None, "markdown"):
        raise UsageProblem(f"--markdown is --format markdown: give one, not --markdown and --format {fmt}")
    return "markdown" if markdown else fmt or "table"


def _write_record(data: dict[str, Any], json_path: str) -> None:
    """The record to its file (whole or not at all), or to stdout for ``-``."""
    if json_path == STDOUT:
        import json

        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        sys.stdout.flush()
        return
    from .record.schema import write_json

    write_json(json_path, data)


def _finish(printed: Any, fmt: str, json_path: str | None = None, then_write: Callable[[], None] | None = None) -> int:
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
            _write_record(printed.data, json_path)
        if then_write is not None:
            then_write()
        files_written = True
        if not (json_path == STDOUT and fmt == "json"):  # the record is on stdout already
            printed.write(fmt, results)
        for line in printed.verdict:
            verdicts.write(line + "\n")
        verdicts.flush()
    except BrokenPipeError:
        import os

        # whatever is still buffered for the closed pipe goes nowhere, so exiting flushes without an error
        for stream in {sys.stdout, results, verdicts}:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        if not files_written and then_write is not None:
            then_write()  # the record's reader (--json -) went away before the other files were written
    return 0 if printed.passed else EXIT_PARITY


def _finish_record(record: Any, fmt: str, json_path: str | None) -> int:
    from .output.printed import of_record

    return _finish(of_record(record), fmt, json_path)


@cli.command("select-bench", context_settings=POSITIONAL_NEGATIVES)
@click.argument("args", nargs=-1, metavar="CTX Q ITERS CAP")
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False),
              help="Replay the tensors of an .npz file (pooled, dead, q, steps) instead of synthetic ones.")
@click.option("--iters", "iters_opt", type=int, default=DEFAULT_ITERS, show_default=True, help="ITERS with --inputs.")
@click.option("--dump", "dump_path", type=OUTPUT,
              help="Write every variant's scores (and the CPU model's) to this .npz file.")
@click.option("--config", "config_name", metavar="CONFIG", help="Run the scorer cases of a YAML sweep instead.")
@keys_option
@run_options
def select_bench(args: tuple[str, ...], inputs_path: str | None, iters_opt: int, dump_path: str | None,
                 config_name: str | None, keys: str, **opts: Any) -> int:
    """A decode call's scorer, old (multi) and new (halve), on the same inputs: hashes and times."""
    from .core.geometry import check_queries
    from .inputs import load_scorer_inputs, save_npz_atomic
    from .runs.stages import scorer_inputs
    from .runs.stages import select_bench as run

    fmt = _chosen_format(opts)
    if keys != DEFAULT_KEYS and (config_name or inputs_path):
        raise UsageProblem("--keys applies to synthetic inputs, not to --inputs or --config (a sweep's cases name "
                           "their keys)")
    if config_name:
        if args or inputs_path or dump_path:
            raise UsageProblem("--config takes no CTX Q ITERS CAP, --inputs or --dump")
        return _sweep(config_name, "scores", opts, fmt, "select-bench --config")
    if inputs_path:
        if args:
            raise UsageProblem("give CTX Q ITERS CAP or --inputs FILE, not both")
        iters = iters_opt
        given = load_scorer_inputs(inputs_path)
        check_queries(given.nq, prompt=False)
        _check_iters(iters)
        call = None
    else:
        call, iters = _decode_call(args, "select-bench")  # checks ITERS too
        given = None
    with _open(opts, "select-bench") as s:
        inputs = given if given is not None else scorer_inputs(call, opts["seed"], keys)
        outcome = run(s, inputs, iters)
        if dump_path:
            save_npz_atomic(dump_path, steps=inputs.steps, **{k.replace("-", "_"): v for k, v in outcome.outputs.items()})
    return _finish_record(s.record, fmt, opts["json_path"])


@cli.command("topk-parity", context_settings=POSITIONAL_NEGATIVES)
@click.argument("args", nargs=-1, metavar="[CTX Q ITERS CAP [COUNT]]")
@click.option("--selftest", is_flag=True, help="Run docs/spec.md section 6's case matrix (parity only).")
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False),
              help="Replay the scores of an .npz file (scores, steps), NaN and infinities included.")
@click.option("--iters", "iters_opt", type=int, default=DEFAULT_ITERS, show_default=True, help="ITERS with --inputs.")
@click.option("--count", "count_opt", type=click.IntRange(0, 1), default=1, show_default=True,
              help="COUNT with --inputs (0: decode call, 1: prompt call with the active block count).")
@click.option("--dump", "dump_path", type=OUTPUT,
              help="Write every variant's ids (and the CPU oracle's) to this .npz file.")
@click.option("--config", "config_name", metavar="CONFIG", help="Run the top-k cases of a YAML sweep instead.")
@run_options
def topk_parity(args: tuple[str, ...], selftest: bool, inputs_path: str | None, iters_opt: int, count_opt: int,
                dump_path: str | None, config_name: str | None, **opts: Any) -> int:
    """A call's top-k: every variant's ids against the reference and each other, and their times.

    COUNT 0 is a decode call (no active block count); 1, the default, the prompt path's call.
    """
    from .core.geometry import Call, blocks_read, check_queries
    from .inputs import load_topk_inputs, save_npz_atomic
    from .runs.selftest import topk_selftest
    from .runs.stages import topk_parity as run
    from .runs.stages import topk_score_sets

    fmt = _chosen_format(opts)
    if config_name:
        if args or inputs_path or dump_path or selftest:
            raise UsageProblem("--config takes no CTX Q ITERS CAP [COUNT], --inputs, --dump or --selftest")
        return _sweep(config_name, "topk", opts, fmt, "topk-parity --config")
    if selftest:
        if args or inputs_path:
            raise UsageProblem("--selftest takes no CTX Q ITERS CAP and no --inputs")
        from .output.progress import progress_on

        with _open(opts, "topk-parity --selftest") as s, progress_on(opts["quiet"]) as progress:
            rows = topk_selftest(s, opts["seed"], progress=progress)
        return _finish_selftest(s.record, rows, fmt, opts["json_path"])
    if inputs_path:
        if args:
            raise UsageProblem("give CTX Q ITERS CAP [COUNT] or --inputs FILE, not both")
        iters, count = iters_opt, count_opt
        given = load_topk_inputs(inputs_path)
        check_queries(given.nq, prompt=bool(count))
        active = blocks_read(given.steps) if count else 0
        sets = [given]
    else:
        ints = _ints(args, ["CTX", "Q", "ITERS", "CAP", "COUNT", "?"])
        if len(args) not in (4, 5):
            raise UsageProblem(f"topk-parity takes CTX Q ITERS CAP [COUNT] (got {len(args)} argument(s))")
        ctx, nq, iters, cap, *rest = ints
        count = rest[0] if rest else 1
        if count not in (0, 1):
            raise UsageProblem(f"COUNT must be 0 (decode call) or 1 (prompt call with the count) (got {count})")
        call = Call(ctx, nq, cap, prompt=bool(count))
        check_queries(nq, prompt=bool(count))
        active = call.active_blocks
        sets = None
    _check_iters(iters)
    with _open(opts, "topk-parity") as s:
        sets = sets if sets is not None else topk_score_sets(call, opts["seed"])
        outcome = run(s, sets, iters, active)
        if dump_path:
            save_npz_atomic(dump_path, **{k.replace("-", "_").replace(".", "__"): v for k, v in outcome.outputs.items()})
    return _finish_record(s.record, fmt, opts["json_path"])


def _finish_selftest(record: Any, rows: list[Any], fmt: str, json_path: str | None) -> int:
    """A selftest's checks into its record (the runner returns them beside it), then the one finish path."""
    from .output.printed import of_selftest
    from .record.schema import SelftestCheck

    record.checks = [SelftestCheck(r.check, r.cases, r.passed, r.seconds, r.detail) for r in rows]
    return _finish(of_selftest(record), fmt, json_path)


@cli.command("selftest")
@KERNELS_OPTION
@ENGINE_OPTION
@click.option("--require-gpu", is_flag=True,
              help="A missing CUDA device is an error, exit 2 (default: skip the GPU checks).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", "device_id", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--json", "json_path", type=RECORD, help="Write the run's record (every check) to this file (- for stdout).")
@with_options(output_options())
@QUIET_OPTION
def selftest(require_gpu: bool, seed: int, device_id: int, json_path: str | None, engines: tuple[str, ...],
             **opts: Any) -> int:
    """Every check this machine can run: the CPU models always, the kernels (an engine checkout's too) when
    a device is found."""
    from .runs.selftest import selftest as run
    from .session import Settings

    fmt = _chosen_format(opts)
    record, rows = run(Settings(seed=seed, device_id=device_id, engines=engines, kernels=opts["kernels"]), require_gpu,
                       sys.argv[1:])
    return _finish_selftest(record, rows, fmt, json_path)


def _sweep(config_name: str, stage: str | None, opts: dict[str, Any], fmt: str, command: str) -> int:
    from .config import config_path, load_config
    from .output.progress import progress_on
    from .runs.sweep import sweep

    config = load_config(config_path(config_name))
    if stage is not None and not config.cases(stage):
        raise UsageProblem(f"{config.source} has no {stage} cases")
    with _open(opts, command, config) as s, progress_on(opts["quiet"]) as progress:
        sweep(s, config, stage, progress)
    return _finish_record(s.record, fmt, opts["json_path"])


@cli.command("sweep")
@click.argument("config_name", metavar="CONFIG")
@run_options
def sweep_cmd(config_name: str, **opts: Any) -> int:
    """Run a YAML sweep (a file, or a shipped config by name: ci, selftest, sm75-decode)."""
    return _sweep(config_name, None, opts, _chosen_format(opts), "sweep")


@cli.command("window-bench", context_settings=POSITIONAL_NEGATIVES)
@click.argument("args", nargs=-1, metavar="CTX Q ITERS CAP")
@keys_option
@run_options
def window_bench(args: tuple[str, ...], keys: str, **opts: Any) -> int:
    """A decode window's selection (scores, then top-k) as one CUDA graph per kernel pair, replays timed."""
    from .runs.stages import window_bench as run

    fmt = _chosen_format(opts)
    call, iters = _decode_call(args, "window-bench")
    if opts["backend"] != "gpu":
        raise UsageProblem("window-bench replays CUDA graphs: it needs --backend gpu")
    with _open(opts, "window-bench") as s:
        run(s, call, iters, keys)
    return _finish_record(s.record, fmt, opts["json_path"])


@cli.command("compare", context_settings=POSITIONAL_NEGATIVES)
@click.argument("base_side", metavar="BASE")
@click.argument("candidate_side", metavar="CANDIDATE")
@click.argument("args", nargs=-1, metavar="(CTX Q ITERS CAP | --config C)")
@click.option("--config", "config_name", metavar="CONFIG", help="Run the cases of a YAML sweep instead of one call.")
@click.option("--tolerance", type=click.FloatRange(0, 1, max_open=True), default=0.05, show_default=True,
              help="A candidate median slower than the base's by more than this (and outside both spreads) is SLOW.")
@run_options
def compare_cmd(base_side: str, candidate_side: str, args: tuple[str, ...], config_name: str | None, tolerance: float,
                **opts: Any) -> int:
    """BASE against CANDIDATE on the same inputs in one run: the candidate's bits against the base's (the
    change's promise), both against qsa's reference and the CPU model, and before / after times, FAST /
    SLOW / SAME by the gate's rule. Exit 1 on any difference in bits or a SLOW row.

    Each side is [NAME=]PATH[@REV]: an engine checkout, a folder of qsa's kernel sources (or a checkout of
    qsa), or a git revision of either (checked out into a temporary worktree). A call CTX Q ITERS CAP
    runs the scorer, the top-k on four score sets and the window; --config runs a sweep's cases.
    """
    from .config import config_path, load_config
    from .output import compare
    from .output.printed import of_compare
    from .runs.compare import compare_run
    from .sides import SIDE_NAMES, SideSpec

    fmt = _chosen_format(opts)
    if opts["backend"] != "gpu":
        raise UsageProblem("compare runs the sides' kernels: it needs --backend gpu")
    taken = [o for o in ("engines", "variants", "baseline", "candidate") if opts[o]]
    if taken:
        raise UsageProblem(f"compare takes its variants from BASE and CANDIDATE, not --{taken[0].rstrip('s')}")
    sides = tuple(SideSpec.parse(text, name) for text, name in zip((base_side, candidate_side), SIDE_NAMES))
    config = None
    if config_name:
        if args:
            raise UsageProblem("--config takes no CTX Q ITERS CAP")
        config = load_config(config_path(config_name))
        call, iters = None, config.iterations
    else:
        call, iters = _decode_call(args, "compare")
    with _open(opts, "compare", config, sides) as s:
        compare_run(s, call, iters, config, tolerance)
    return _finish(of_compare(compare.judge(s.record), s.record), fmt, opts["json_path"])


@cli.command("report")
@click.argument("paths", nargs=-1, required=True, metavar="FILE...")
@click.option("--merge", is_flag=True, help="Render the runs as one (same device): one table across them.")
@with_options(output_options())
def report_cmd(paths: tuple[str, ...], merge: bool, **opts: Any) -> int:
    """Re-render saved result records (a qsa compare run's with its before / after table first)."""
    from .output import compare
    from .output.printed import of_saved
    from .record.load import load_record, merge_records

    fmt = _chosen_format(opts)
    records = [load_record(path) for path in paths]
    named = [("merged", merge_records(records))] if merge else list(zip(paths, records))
    judged = [(name, r, compare.judge(r) if "compare" in r.settings else None) for name, r in named]
    return _finish(of_saved(judged), fmt)


@cli.command("gate")
@KERNELS_OPTION
@ENGINE_OPTION
@click.option("--baseline", "baseline_path", required=True, type=click.Path(dir_okay=False), help="The baseline record.")
@click.option("--results", "results_path", type=click.Path(dir_okay=False),
              help="Compare this saved record instead of running the config.")
@click.option("--config", "config_name", default="ci", show_default=True, help="The sweep to run when no --results.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=0.05, show_default=True,
              help="A median slower than the baseline's by more than this (and outside both spreads) is SLOW.")
@click.option("--force", is_flag=True, help="Compare with a baseline from another device (or, when it holds no output "
              "hashes, other kernel sources).")
@click.option("--allow-missing", is_flag=True,
              help="A (case, variant) of the baseline that the run lacks is shown, not a failure.")
@click.option("--allow-bit-changes", is_flag=True,
              help="An output with other bits than the baseline's on the same inputs is shown, not a failure.")
@click.option("--junit", "junit_path", type=OUTPUT, help="Write JUnit XML here.")
@click.option("--device", "device_id", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--json", "json_path", type=RECORD,
              help="Write the record of the run the gate makes (- for stdout; not with --results: that run is "
                   "recorded).")
@with_options(output_options())
@QUIET_OPTION
def gate_cmd(baseline_path: str, results_path: str | None, config_name: str, tolerance: float, force: bool,
             allow_missing: bool, allow_bit_changes: bool, junit_path: str | None, device_id: int,
             json_path: str | None, engines: tuple[str, ...], **opts: Any) -> int:
    """CI regression gate: parity must hold, thresholds too, and every timing of the baseline must be in
    the run and not SLOW."""
    from .config import config_path, load_config
    from .core.files import atomic_write
    from .output import gate
    from .output.printed import of_gate
    from .output.progress import progress_on
    from .record.load import load_record
    from .runs.sweep import sweep
    from .session import Settings, session

    fmt = _chosen_format(opts)
    if results_path and (json_path or engines):
        raise UsageProblem(f"{'--json records' if json_path else '--engine adds variants to'} the run the gate makes; "
                           "with --results it makes none")
    baseline = load_record(baseline_path)
    if results_path:
        record = load_record(results_path)
        gate.check_comparable(record, baseline, force)
    else:
        config = load_config(config_path(config_name))
        settings = Settings(l2=config.l2, warmup=config.warmup, seed=config.seed, device_id=device_id,
                            engines=(*config.engines, *engines), kernels=opts["kernels"])
        with (_kept_if_interrupted(session(settings, "gate", sys.argv[1:]), json_path) as s,
              progress_on(opts["quiet"]) as progress):
            gate.check_comparable(s.record, baseline, force)  # refuse before measuring
            sweep(s, config, progress=progress)
            record = s.record
    result = gate.compare(record, baseline, tolerance=tolerance, force=force, allow_missing=allow_missing,
                          allow_bit_changes=allow_bit_changes)
    def junit() -> None:
        if junit_path:
            with atomic_write(junit_path) as fh:
                fh.write(gate.junit_xml(result))

    return _finish(of_gate(result, record, baseline), fmt, json_path, junit)


@cli.command("plot")
@click.argument("paths", metavar="FILE.json [AFTER.json]", nargs=-1, required=True)
@click.option("-o", "--output", "out_path", required=True, type=OUTPUT)
def plot_cmd(paths: tuple[str, ...], out_path: str) -> int:
    """Median time per call in small multiples (a panel per stage, inputs and query count), the read floor
    and the engine's dispatch marked; two records, or one `qsa compare` record, draw a before / after
    with the ratio after / before under each panel."""
    from .output.plot import plot_files

    if len(paths) > 2:
        raise UsageProblem(f"plot takes one record, or two (before, after); got {len(paths)}")
    plot_files(paths, out_path)
    click.echo(out_path)
    return 0


@cli.command("sanitize")
@KERNELS_OPTION
@ENGINE_OPTION
@click.option("--tools", default="memcheck,racecheck,synccheck,initcheck", show_default=True,
              help="compute-sanitizer tools, comma-separated.")
@click.option("--variants", "variants_opt", metavar="V,V,...",
              help="Only these variants (default: every variant this device runs).")
@click.option("--quick", is_flag=True, help="One small decode call of each variant (what qsa selftest runs).")
@click.option("--known", "known_path", type=click.Path(dir_okay=False),
              help="A YAML list of known hazards (variant, tool, match, reason): listed, not failed.")
@click.option("--jobs", type=click.IntRange(1, 64), default=4, show_default=True, help="Children at a time.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic inputs.")
@click.option("--device", "device_id", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--json", "json_path", type=RECORD, help="Write the run's record (every row) to this file (- for stdout).")
@with_options(output_options())
@QUIET_OPTION
def sanitize_cmd(tools: str, variants_opt: str | None, quick: bool, known_path: str | None, jobs: int, seed: int,
                 device_id: int, json_path: str | None, engines: tuple[str, ...], **opts: Any) -> int:
    """compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over one call of every variant on every
    case kind, each (variant, case, tool) in its own child process with CuPy's memory pool off."""
    from .output.printed import of_sanitize
    from .output.progress import progress_on
    from .runs.sanitizer import sanitize_run, sanitize_variants
    from .sanitize import TOOLS, find_sanitizer, load_known
    from .session import Settings, session

    fmt = _chosen_format(opts)
    chosen_tools = tuple(dict.fromkeys(t.strip() for t in tools.split(",")))
    unknown = [t for t in chosen_tools if t not in TOOLS]
    if unknown or not chosen_tools:
        raise UsageProblem(f"--tools: unknown tool {unknown[0] if unknown else tools!r} (expected {', '.join(TOOLS)})")
    chosen = tuple(dict.fromkeys(v.strip() for v in variants_opt.split(","))) if variants_opt else None
    known = load_known(known_path) if known_path else []
    sanitizer = find_sanitizer()
    with session(Settings(seed=seed, device_id=device_id, engines=engines, kernels=opts["kernels"]), "sanitize",
                 sys.argv[1:]) as s:
        if chosen is not None:
            runs = {v for names in sanitize_variants(s).values() for v in names}
            missing = [v for v in chosen if v not in runs]
            if missing:
                raise UsageProblem(f"--variants: {missing[0]!r} is not a variant this device runs "
                                   f"({', '.join(sorted(runs))})")
        with progress_on(opts["quiet"]) as progress:
            sanitize_run(s, chosen_tools, chosen, known, sanitizer, quick, jobs, progress)
    return _finish(of_sanitize(s.record), fmt, json_path)


@cli.command("info")
@KERNELS_OPTION
@ENGINE_OPTION
@click.option("--device", "device_id", type=click.IntRange(min=0), default=0, show_default=True)
@with_options(output_options())
def info_cmd(device_id: int, engines: tuple[str, ...], **opts: Any) -> int:
    """The device, its clocks and limits, every kernel as compiled for it, and what the engine dispatches here."""
    from .output.printed import of_info
    from .record.schema import InfoReport
    from .runs.info import device_report
    from .session import Settings

    fmt = _chosen_format(opts)
    found = device_report(Settings(device_id=device_id, engines=engines, kernels=opts["kernels"]))
    info = InfoReport(found.device, found.clocks, [dict(name=k.name, registers=k.registers, shared_bytes=k.shared_bytes,
                                                        local_bytes=k.local_bytes, max_threads=k.max_threads)
                                                   for k in found.kernels], found.dispatch, found.notes)
    return _finish(of_info(info), fmt)
