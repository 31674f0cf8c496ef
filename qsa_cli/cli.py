"""The ``qsa`` command line: the group, the table of its commands, and ``main()``'s mapping of errors to exit
statuses. Each command is a module of ``commands/``, imported only when that command is invoked (or asked
for its help), so that ``qsa --help`` loads neither numpy, CuPy, rich nor anything that measures.

Every error a user can cause (arguments, YAML, input files, output paths, a missing device, a run larger
than the memory it can have) is one line on stderr and exit status 2; a parity failure, a broken
threshold or a failed gate is exit status 1.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

import click

from .commands.exit_status import EXIT_USAGE
from .core.errors import KernelError, QsaError
from .core.streams import check_stdout, plain_where_needed, silence
from .interrupts import exit_status, interrupted_by, interruptions, signal_of, signals_held


@dataclass(frozen=True)
class Entry:
    """A command of the table: the module of ``commands/`` that defines it (as ``command``), and the first
    sentence of its help, which ``qsa --help`` lists without importing the module."""

    module: str
    summary: str


COMMANDS = {
    "select-bench": Entry("select_bench", "A decode call's scorer, old (multi) and new (halve), on the same inputs: "
                                          "hashes and times."),
    "topk-parity": Entry("topk_parity", "A call's top-k: every variant's ids against the reference and each other, "
                                        "and their times."),
    "window-bench": Entry("window_bench", "A decode window's selection (scores, then top-k) as one CUDA graph per "
                                          "kernel pair, replays timed."),
    "sweep": Entry("sweep", "Run a YAML sweep (a file, or a shipped config by name: ci, selftest, sm75-decode)."),
    "compare": Entry("compare", "BASE against CANDIDATE on the same inputs in one run: the candidate's bits against "
                                "the base's (the change's promise), both against qsa's reference and the CPU model, "
                                "and before / after times, FAST / SLOW / SAME by the gate's rule."),
    "gate": Entry("gate", "CI regression gate: parity must hold, thresholds too, and every timing of the baseline "
                          "must be in the run and not SLOW."),
    "baseline": Entry("baseline", "Baselines kept per card: promote a passing run to be its card's, list each "
                                  "card's (qsa gate --baseline-dir takes them)."),
    "history": Entry("history", "Each card's figures across commits: per (case, variant) the latest median, its change "
                                "against the previous run and the first, and the steps (the commits where the median "
                                "moved beyond the noise of the runs around it, and whether the bits changed there)."),
    "report": Entry("report", "Re-render saved result records (a qsa compare run's with its before / after table "
                              "first)."),
    "plot": Entry("plot", "Median time per call in small multiples (a panel per stage, inputs and query count), the "
                          "read floor and the engine's dispatch marked; two records, or one `qsa compare` record, "
                          "draw a before / after with the ratio after / before under each panel."),
    "sanitize": Entry("sanitize", "compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over one call of "
                                  "every variant on every case kind, each (variant, case, tool) in its own child "
                                  "process with CuPy's memory pool off."),
    "info": Entry("info", "The catalog of variants, what the engine dispatches on each card and an engine checkout's "
                          "functions (no device needed); the device, its clocks and limits and every kernel as compiled "
                          "for it, where there is one."),
    "selftest": Entry("selftest", "Every check this machine can run: the CPU models always, the kernels (an engine "
                                  "checkout's too) when a device is found."),
}


def load_command(name: str) -> click.Command:
    """The click command of the table's ``name``, its module imported now (an interruption meanwhile arrives
    once it is imported)."""
    with signals_held():
        return importlib.import_module(f"{__package__}.commands.{COMMANDS[name].module}").command


class LazyGroup(click.Group):
    """A group whose commands are the table's: a command's module is imported only when it is invoked or asked
    for its help; the group's own help lists the table's summaries, shortened to the width as click shortens
    a command's help."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        rows = [(name, click.Command(name, help=COMMANDS[name].summary).get_short_help_str(limit))
                for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _err(message: str) -> None:
    try:
        click.echo(f"qsa: error: {message}", err=True)
    except OSError:  # stderr itself full or gone: the exit status still says it
        silence(sys.stderr)


def main(argv: list[str] | None = None) -> None:
    with interruptions() as release_signals:
        try:
            release_signals()  # one that came while the command line loaded (qsa_cli.__main__) arrives here
            plain_where_needed()
            check_stdout()
            args = sys.argv[1:] if argv is None else list(argv)
            # the command line handed down as the context's obj: a run's record names it, and its children run it
            code = cli.main(args=args, prog_name="qsa", standalone_mode=False, obj=tuple(args))
        except click.exceptions.Exit as exc:
            code = exc.exit_code
        except click.exceptions.NoArgsIsHelpError:
            # bad input as any other (a CI line whose command came out empty must not pass): one line
            _err(f"no command given (qsa --help says what each does: {', '.join(sorted(COMMANDS))})")
            code = EXIT_USAGE
        except click.ClickException as exc:
            _err(" ".join(exc.format_message().split()))
            code = EXIT_USAGE
        except (click.Abort, KeyboardInterrupt) as stop:  # Ctrl-C or SIGTERM before a record was kept
            signum = signal_of(stop)
            click.echo(interrupted_by(signum), err=True)
            code = exit_status(signum)
        except MemoryError as exc:  # past what the run weighed before it started (core/memory.py): host or device
            _err(f"out of memory: {' '.join(str(exc).split()) or 'an allocation failed'}")
            code = EXIT_USAGE
        except QsaError as exc:
            message = str(exc)
            # A compiler log is many lines by nature; every other error is one line.
            _err(message if isinstance(exc, KernelError) else " ".join(message.split()))
            code = EXIT_USAGE
    sys.exit(code or 0)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="qsa", prog_name="qsa")
def cli() -> None:
    """Benchmark and bitwise parity harness for the QSA decode selection kernels."""
