"""The docs hold to the repository and the command line: every sample output is what its command prints now
(scripts/update_doc_samples.py), every relative link reaches a file (and its anchor a heading), every `qsa ...`
line shown (README.md's and docs/*.md's) names a command and options that exist, and docs/commands.md's option
table names exactly the options each command has."""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import cache
from pathlib import Path

import click
import pytest

from qsa_cli.cli import cli, load_command
from qsa_cli.device import probe

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-z])\b")


def _text_outside_code(text: str) -> str:
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(_text_outside_code(page.read_text()))
            if not re.match(r"[a-z]+:", t)]  # http:, https:, mailto: are not the repository's


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_link_check_sees_links_and_anchors() -> None:
    readme = ROOT / "README.md"
    assert "docs/commands.md" in links(readme) and "docs/gate.md" in links(readme)
    assert "4-dispatch" in anchors(ROOT / "docs" / "spec.md")
    assert slug("3. `qsa gate --baseline BASE.json`: the CI gate") == "3-qsa-gate---baseline-basejson-the-ci-gate"


@cache
def commands() -> tuple[str, ...]:
    """Every command ``qsa --help`` lists."""
    with click.Context(cli, info_name="qsa") as ctx:
        return tuple(cli.list_commands(ctx))


@cache
def options(command: str) -> frozenset[str]:
    """Every option ``qsa COMMAND --help`` lists (``-o, --output`` gives both): the command's click options, in
    this process (its help would list the same, at a subprocess a command)."""
    loaded = load_command(command)
    with click.Context(loaded, info_name=command) as ctx:
        return frozenset(name for p in loaded.get_params(ctx) if isinstance(p, click.Option) and not p.hidden
                         for name in (*p.opts, *p.secondary_opts))


def command_lines(text: str) -> list[str]:
    """Every `qsa ...` command shown: a line of a code block, or an inline code span, split at && and |,
    a leading `$ ` and a trailing `# comment` dropped."""
    pieces = [line for block in FENCE.findall(text) for line in block.splitlines()[1:-1]]
    pieces += INLINE_CODE.findall(FENCE.sub("", text))
    found = []
    for piece in pieces:
        for part in re.split(r"&&|\|(?![^\[]*\])", piece):
            part = part.split(" # ", 1)[0].strip().removeprefix("$ ")
            if part.startswith("qsa ") or part == "qsa":
                found.append(part)
    return found


README_COMMANDS = command_lines((ROOT / "README.md").read_text())
SHOWN = sorted({(page.relative_to(ROOT).as_posix(), line) for page in PAGES for line in command_lines(page.read_text())})


def test_the_readme_shows_the_three_commands_and_the_set_up() -> None:
    shown = {line.split()[1] for line in README_COMMANDS if len(line.split()) > 1}
    assert {"select-bench", "topk-parity", "gate", "selftest", "report"} <= shown
    assert "qsa select-bench 4096 2 3 8192 --backend cpu" in README_COMMANDS


@pytest.mark.parametrize(("page", "line"), SHOWN)
def test_every_qsa_line_shown_names_a_command_and_its_options(page: str, line: str) -> None:
    words = line.split()
    if len(words) == 1 or words[1].startswith("-"):  # qsa, qsa --help, qsa --version
        assert set(OPTION.findall(line)) <= {"--help", "-h", "--version"}, line
        return
    command = words[1]
    assert command in commands(), f"{page}: {line}: no command {command} (qsa --help lists {', '.join(commands())})"
    unknown = sorted(set(OPTION.findall(line)) - options(command) - {"--help", "-h"})
    assert not unknown, f"{page}: {line}: qsa {command} has no {', '.join(unknown)}"


def test_the_command_line_check_sees_a_wrong_option() -> None:
    assert "--backend" in options("select-bench") and "-o" in options("plot")
    assert "--junit" not in options("select-bench") and "sweep" in commands()


def _option_table() -> dict[str, set[str]]:
    """docs/commands.md's option table: each option named in a row's first cell, and the commands of its second."""
    text = (ROOT / "docs" / "commands.md").read_text()
    table = text.split("## Options", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`-"):
            for name in OPTION.findall(cells[0]):
                rows.setdefault(name, set()).update(c.strip() for c in cells[1].split(","))
    return rows


def test_commands_md_names_every_option_of_every_command_and_no_other() -> None:
    table = _option_table()
    have = {(option, command) for command in commands() for option in options(command)} - {
        ("--help", c) for c in commands()} - {("-h", c) for c in commands()}
    told = {(option, command) for option, named in table.items() for command in named}
    assert (sorted(have - told), sorted(told - have)) == ([], []), \
        "docs/commands.md's option table: (options it does not name, options it names that do not exist)"


def test_commands_md_describes_every_command() -> None:
    text = (ROOT / "docs" / "commands.md").read_text()
    assert len(commands()) >= 11
    assert [c for c in commands() if f"| `qsa {c}" not in text] == []


SCRIPT = ROOT / "scripts" / "update_doc_samples.py"


def _samples_module():
    spec = importlib.util.spec_from_file_location("update_doc_samples", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where its dataclass looks itself up
    spec.loader.exec_module(module)
    return module


DOC_SAMPLES = _samples_module()
SAMPLES = [s for page in DOC_SAMPLES.PAGES for s in DOC_SAMPLES.samples(page)]
NO_DEVICE = not probe().available  # the self-test's GPU row is this machine's: its sample is of one without


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_output_block_is_a_checked_sample(page: Path) -> None:
    """A fenced block of output (one that names no language: the README's set-up lines are bash, the sweep
    files yaml, the code python or cpp, each checked where it is made) that is not a sample marked with its
    command would go stale unseen."""
    blocks = re.findall(r"^(<!-- sample[^\n]*-->\n)?```([a-z]*)\n(.*?)^```$", page.read_text(), re.M | re.S)
    assert [body for marker, language, body in blocks if not marker and not language] == []


def test_the_samples_cover_the_readme_and_the_pages_of_made_outputs() -> None:
    assert len(SAMPLES) >= 8
    assert {s.command.split()[1] for s in SAMPLES} >= {"selftest", "select-bench", "report", "gate", "history"}
    assert {s.page.name for s in SAMPLES} >= {"README.md", "checks.md", "history.md"}
    assert {s.runner for s in SAMPLES} >= {None, "tests/inexact_variants.py", "tests/history_store.py"}


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.where())
def test_every_sample_is_what_its_command_prints(sample) -> None:
    if sample.command == "qsa selftest" and not NO_DEVICE:
        pytest.skip("the self-test's sample is of a machine without a device")
    assert DOC_SAMPLES.current(sample), (
        f"{sample.where()} no longer prints its sample; run .venv/bin/python scripts/update_doc_samples.py "
        f"and check the change. It prints now:\n{DOC_SAMPLES.rendered(sample)}")


def test_a_sample_check_sees_a_change() -> None:
    """A hash or a count changed fails; a time or a date is masked, and so is where a line folds."""
    masked = DOC_SAMPLES.masked
    assert masked("median 3433.6 µs\n  hash e60a50fa50b3, 2026-12-01 21:39:42+00:00") == \
        masked("median 12.5 µs hash e60a50fa50b3,\n2026-12-06 05:16:11+00:00")
    assert masked("hash e60a50fa50b3  (13 checks)") != masked("hash 5bef213b31ce  (13 checks)")
    assert masked("(13 checks)") != masked("(9 checks)")
    [made] = DOC_SAMPLES.samples_of("<!-- sample with=tests/history_store.py lines=1-6: qsa history baselines -->\n"
                                    "```\n$ qsa history baselines\n```\n", ROOT / "docs" / "history.md")
    assert (made.runner, made.lines, made.command, made.measures) == ("tests/history_store.py", "1-6",
                                                                        "qsa history baselines", False)
    text = "\n".join(f"line {i}" for i in range(1, 11)) + "\n"
    assert DOC_SAMPLES.kept(text, "1-2,-1") == "line 1\nline 2\n...\nline 10\n"
    assert DOC_SAMPLES.kept(text, "5") == "...\nline 5\n...\n"
