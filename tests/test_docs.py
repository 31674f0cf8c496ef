"""The docs hold to the repository and the command line: every relative link reaches a file (and its
anchor a heading), every `qsa ...` line shown (README.md's and docs/*.md's) names a command and options that exist, and
docs/commands.md's option table names exactly the options each command has."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

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


def _help(*argv: str) -> str:
    env = {**os.environ, "COLUMNS": "200"}
    res = subprocess.run([sys.executable, "-m", "qsa_cli", *argv, "--help"], capture_output=True, text=True,
                         env=env, cwd=ROOT, check=True)
    return res.stdout


@cache
def commands() -> tuple[str, ...]:
    listing = _help().split("Commands:", 1)[1]
    return tuple(re.findall(r"^  ([a-z][a-z-]*)", listing, re.M))


@cache
def options(command: str) -> frozenset[str]:
    """Every option ``qsa COMMAND --help`` lists (``-o, --output`` gives both)."""
    listing = _help(command).split("Options:", 1)[1]
    found = set()
    for line in listing.splitlines():
        names = re.match(r"^  ((?:-{1,2}[a-z][a-z0-9-]*(?:, )?)+)", line)
        if names:
            found.update(names.group(1).replace(",", " ").split())
    return frozenset(found)


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


RESULTS = "docs/results/h200-2026-11-30"
SHIPPED_RUNS = (  # what the README shows of the shipped H200 records, as qsa prints it into a pipe
    ("report", f"{RESULTS}/scores-420000-4.json"),
    ("report", f"{RESULTS}/topk-524288-8.json"),
    ("gate", "--baseline", f"{RESULTS}/ci.json", "--results", f"{RESULTS}/ci-2.json"),
    ("gate", "--baseline", f"{RESULTS}/ci-slowed.json", "--results", f"{RESULTS}/ci.json"),
)


@cache
def shipped_output(argv: tuple[str, ...]) -> str:
    env = {**os.environ, "COLUMNS": "80"}
    res = subprocess.run([sys.executable, "-m", "qsa_cli", *argv], capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode in (0, 1), res.stderr
    return res.stdout + res.stderr


def _readme_blocks_of_records() -> list[str]:
    """The README's code blocks of output from a shipped record: those that are no shell lines and no run of
    this machine's (a run's own first line, or the self-test's summary)."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    return [b for b in blocks if not b.startswith(("$ ", "qsa selftest", "python3 "))]


def test_the_readme_shows_the_shipped_records_as_qsa_prints_them() -> None:
    blocks = _readme_blocks_of_records()
    assert len(blocks) == len(SHIPPED_RUNS)
    for block, argv in zip(blocks, SHIPPED_RUNS):
        printed = shipped_output(argv)
        at = 0
        for part in re.split(r"^\.\.\.\n", block, flags=re.M):  # "..." marks lines left out
            found = printed.find(part, at)
            assert found >= 0, f"qsa {' '.join(argv)} no longer prints, where the README shows it:\n{part}"
            at = found + len(part)
