"""Rewrites every sample output of README.md and docs/*.md from the command that prints it.

A sample is a fenced block right after a line ``<!-- sample: qsa ARGS -->`` (``<!-- sample lines=1-12,-3: qsa
ARGS -->`` keeps lines 1 to 12 and the last 3 of the output, a ``...`` line where lines are left out). Its
first line is ``$ qsa ARGS``; the rest is what the command prints on stdout into a pipe at 80 columns, run
from the repository root (stderr, a run's progress, is left out). A sample of what qsa alone has not (the
tests' inexact variants, a baseline folder of many runs) names the script that makes it and then runs qsa
(``<!-- sample with=tests/history_store.py: qsa history baselines -->`` runs ``python tests/history_store.py
history baselines``). tests/test_docs.py checks every sample against the same command, so an output that
changes fails a test until this script is run:

    .venv/bin/python scripts/update_doc_samples.py

A shipped record's rendering (``qsa report``, ``qsa gate --results``) must be the block exactly. A run that
measures (``--backend cpu``, ``selftest``) prints other times and dates each time, which fold its lines
differently: its block's parts must be in its output in order, as words, times and dates masked.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
WIDTH = 80  # a CI log's
SAMPLE = re.compile(r"^<!-- sample(?: with=(?P<runner>\S+))?(?: lines=(?P<lines>[-0-9,]+))?: (?P<command>qsa [^\n]*?) -->"
                    r"\n```\n(?P<body>.*?)^```$", re.M | re.S)
GAP = "..."  # a line that stands for lines left out
# What differs from one run to the next on any host: a decimal (a time, GB/s, a ratio), a date and time, and
# the version of qsa that ran (its commit).
_VARYING = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+00:00|\d+\.\d+|\bqsa [0-9a-f]{12}(?:-dirty)?\b")


@dataclass(frozen=True)
class Sample:
    page: Path
    command: str
    lines: str | None  # the kept lines' spec, None: all
    body: str  # as the page shows it
    runner: str | None = None  # the script that makes what the sample needs and runs qsa (None: qsa itself)

    @property
    def measures(self) -> bool:
        """Whether the command runs (its times and date are this run's), rather than render a shipped record."""
        args = shlex.split(self.command)
        return "--backend" in args or args[1] == "selftest"

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}: `{self.command}`"


def samples(page: Path) -> list[Sample]:
    return samples_of(page.read_text(), page)


def samples_of(text: str, page: Path) -> list[Sample]:
    """The samples of ``text``, a page's."""
    return [Sample(page, m["command"], m["lines"], m["body"], m["runner"]) for m in SAMPLE.finditer(text)]


def printed(command: str, runner: str | None = None) -> str:
    """What ``command`` prints on stdout into a pipe at WIDTH columns, from the repository root (``runner``: run
    by that script of the repository, which runs qsa)."""
    env = {**os.environ, "COLUMNS": str(WIDTH), "PYTHONPATH": str(ROOT)}
    qsa = [str(ROOT / runner)] if runner else ["-m", "qsa_cli"]
    res = subprocess.run([sys.executable, *qsa, *shlex.split(command)[1:]], capture_output=True, text=True,
                         env=env, cwd=ROOT)
    if res.returncode not in (0, 1):  # 1: a gate or a run that fails is a sample too
        raise RuntimeError(f"{command}: exit status {res.returncode}: {res.stderr.strip()}")
    return res.stdout


def kept(text: str, spec: str | None) -> str:
    """The lines of ``text`` that ``spec`` keeps (``1-12,-3``: 1 to 12 and the last 3), a GAP line where lines
    are left out."""
    lines = text.splitlines()
    if spec is None:
        return "\n".join(lines) + "\n"
    chosen: list[int] = []
    for part in spec.split(","):
        if part.startswith("-"):
            chosen.extend(range(max(0, len(lines) + int(part)), len(lines)))
        else:
            first, _, last = part.partition("-")
            chosen.extend(range(int(first) - 1, int(last or first)))
    out: list[str] = [GAP] if chosen[0] else []
    for i, at in enumerate(chosen):
        if i and at != chosen[i - 1] + 1:
            out.append(GAP)
        out.append(lines[at])
    return "\n".join(out + ([GAP] if chosen[-1] != len(lines) - 1 else [])) + "\n"


def rendered(sample: Sample) -> str:
    """The block's text as the command prints it now."""
    return f"$ {sample.command}\n" + kept(printed(sample.command, sample.runner), sample.lines)


def masked(text: str) -> str:
    """``text`` as words, with what varies from run to run (times, dates) masked: equal for two runs of one
    command on any host, different when anything else changed (a hash, a count, a variant, a verdict)."""
    return _VARYING.sub("#", " ".join(text.split()))


def current(sample: Sample) -> bool:
    """Whether the block is what its command prints now (a run's: each part, as words with times masked, in
    its output in order)."""
    if not sample.measures:
        return rendered(sample) == sample.body
    head, _, shown = sample.body.partition("\n")
    output, at = masked(printed(sample.command, sample.runner)), 0
    for part in re.split(rf"^{re.escape(GAP)}\n", shown, flags=re.M):
        found = output.find(masked(part), at) if part.strip() else at
        if found < 0:
            return False
        at = found + len(masked(part))
    return head == f"$ {sample.command}"


def main() -> int:
    changed = []
    for page in PAGES:
        text = page.read_text()
        for sample in samples(page):
            if current(sample):
                continue  # a run's block is rewritten only when more than its times changed
            text = text.replace(f"-->\n```\n{sample.body}```", f"-->\n```\n{rendered(sample)}```", 1)
            changed.append(sample.where())
        page.write_text(text)
    print("\n".join(f"rewrote {c}" for c in changed) or "every sample is as its command prints it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
