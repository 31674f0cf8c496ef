"""cli.py's table of commands: each command a module of commands/, imported only when it is invoked or asked
for its help, so that ``qsa --help`` loads nothing that measures or renders."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from qsa_cli import cli, commands
from qsa_cli.cli import COMMANDS, load_command, main

# what ``qsa --help`` may load of qsa: the group, what main() maps to exit statuses, and the check of the
# standard streams it prints on (the standard library's alone)
STARTUP_MODULES = {"qsa_cli", "qsa_cli.cli", "qsa_cli.core", "qsa_cli.core.errors", "qsa_cli.core.streams",
                   "qsa_cli.commands", "qsa_cli.commands.exit_status", "qsa_cli.interrupts"}


def _in_a_fresh_interpreter(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "COLUMNS": "80"})


def test_help_loads_no_numpy_rich_or_runner_and_lists_every_command() -> None:
    """What keeps ``qsa --help`` fast (its time is a benchmark, docs/benchmarks.md, not a test)."""
    res = _in_a_fresh_interpreter(
        "import json, sys\nfrom qsa_cli.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit as done:\n    code = done.code\n"
        "print(json.dumps([code, sorted(sys.modules)]), file=sys.stderr)\n")
    code, modules = json.loads(res.stderr)
    assert code == 0
    heavy = [m for m in modules if m.split(".")[0] in ("numpy", "cupy", "rich", "yaml", "pynvml", "matplotlib")]
    assert heavy == []
    assert {m for m in modules if m.split(".")[0] == "qsa_cli"} <= STARTUP_MODULES
    listed = [line.split()[0] for line in res.stdout.split("Commands:\n")[1].splitlines()]
    assert listed == sorted(COMMANDS)


def test_a_commands_help_loads_that_command_only() -> None:
    """``qsa CMD --help`` exits 0 and imports CMD's module and the pieces the commands share, no other command's."""
    modules = {name: f"qsa_cli.commands.{entry.module}" for name, entry in COMMANDS.items()}
    res = _in_a_fresh_interpreter(
        "import json, sys\nfrom qsa_cli.cli import main\n"
        f"modules = {modules!r}\nseen = []\n"
        "for name in sorted(modules):\n"
        "    try:\n        main([name, '--help'])\n    except SystemExit as done:\n        code = done.code\n"
        "    seen.append((name, code, sorted(m for m in modules.values() if m in sys.modules)))\n"
        "print(json.dumps(seen), file=sys.stderr)\n")
    seen = json.loads(res.stderr)
    assert [name for name, _, _ in seen] == sorted(COMMANDS)
    for i, (name, code, loaded) in enumerate(seen):
        assert code == 0, name
        assert loaded == sorted(modules[n] for n, _, _ in seen[:i + 1]), name
    assert res.stdout.count("Usage: qsa ") == len(COMMANDS)


def test_the_table_names_every_command_module_and_nothing_else() -> None:
    defined = {m.name for m in pkgutil.iter_modules(commands.__path__)
               if hasattr(__import__(f"qsa_cli.commands.{m.name}", fromlist=["_"]), "command")}
    assert defined == {entry.module for entry in COMMANDS.values()}
    for name in COMMANDS:
        assert load_command(name).name == name


@pytest.mark.parametrize("name", sorted(COMMANDS))
@pytest.mark.parametrize("limit", [30, 45, 74, 10_000])
def test_the_tables_summary_is_the_commands_own_short_help(name: str, limit: int) -> None:
    """The group's help lists the table's summary as click would shorten the command's help (at any width)."""
    listed = click.Command(name, help=COMMANDS[name].summary).get_short_help_str(limit)
    assert listed == load_command(name).get_short_help_str(limit)


def test_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.cli.get_command(click.Context(cli.cli), "nonsense") is None
    with pytest.raises(SystemExit) as info:
        main(["nonsense"])
    assert info.value.code == 2 and capsys.readouterr().err == "qsa: error: No such command 'nonsense'.\n"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("qsa, version ")



# the runs of other commands: what a plain measuring run never needs
OTHER_RUNS = {"qsa_cli.runs.selftest", "qsa_cli.runs.sanitizer", "qsa_cli.sanitize", "qsa_cli.sanitize_child",
              "qsa_cli.runs.compare", "qsa_cli.runs.info", "qsa_cli.output.plot"}
RUNNERS = {"qsa_cli.runs.stages", "qsa_cli.runs.switched", "qsa_cli.session", "qsa_cli.stages.base", "qsa_cli.timing",
           "qsa_cli.engine.build"}


@pytest.mark.parametrize(("argv", "foreign"), [
    (["select-bench", "64", "1", "1", "128", "--backend", "cpu", "--quiet"], OTHER_RUNS),
    (["topk-parity", "2052", "8", "1", "4096", "0", "--backend", "cpu", "--quiet"], OTHER_RUNS),
    (["report", "docs/results/h200-2026-11-30/ci.json"], OTHER_RUNS | RUNNERS),
], ids=lambda v: v[0] if isinstance(v, list) else "")
def test_a_command_loads_what_it_runs_and_no_other_commands_run(argv: list[str], foreign: set[str]) -> None:
    """The modules of qsa a command loads, counted in a fresh interpreter: its own command module and no other
    command's, and none of another command's runs (plain measuring runs on the CPU backend, topk-parity's
    without qsa selftest's checks; a report, which reads a record and runs nothing)."""
    res = subprocess.run(
        [sys.executable, "-c",
         "import json, sys\nfrom qsa_cli.cli import main\n"
         f"try:\n    main({argv!r})\nexcept SystemExit as done:\n    code = done.code\n"
         "print(json.dumps([code, sorted(m for m in sys.modules if m.startswith('qsa_cli'))]), file=sys.stderr)\n"],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"}, cwd=Path(__file__).resolve().parent.parent)
    code, loaded = json.loads(res.stderr.strip().splitlines()[-1])
    assert code == 0, res.stderr
    command_modules = {f"qsa_cli.commands.{entry.module}" for entry in COMMANDS.values()}
    assert command_modules & set(loaded) == {f"qsa_cli.commands.{COMMANDS[argv[0]].module}"}, len(loaded)
    assert not foreign & set(loaded), f"{len(loaded)} modules of qsa loaded, of them {sorted(foreign & set(loaded))}"
