"""A history made from real runs on this machine's card (docs/history.md): the fake engine (tests/fake_engine.py)
as a git repository of COMMITS commits, the one at SLOWED_AT with its decode scorer (`scores`) busy-waiting
SLOW_NS before its kernels and every commit after it keeping that, the others changing only a note. Each commit
is measured as the CI recipe's main-branch path measures it (`qsa sweep ci --engine strata=REPO@COMMIT`) and
promoted into a baseline store (`qsa baseline promote`); then `qsa history` of the store prints its steps
(markdown and json), draws the PNG and writes the HTML page.

It also times a pull request's check with the engine build cache warm: the recipe's `qsa compare` of a commit
against the next (both builds, bits and speed), for the unchanged pair and for the slowed one.

Usage (on a machine with the card, from the repository root):
    python3 scripts/fake_engine_history.py OUT
Writes OUT/engine (the repository), OUT/store, OUT/runs/*.json, OUT/history.{md,json,png,html}, OUT/pr-*.json,
OUT/times.json. Never changes the card's clocks.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(Path(__file__).parent)]

from fake_engine import git, write_fake_engine  # noqa: E402
from gate_rates import run  # noqa: E402  (a script beside this one: qsa run, its log kept, its seconds)

COMMITS = 8
SLOWED_AT = 4  # the first slowed commit (1-based): 3 runs before the step, 5 from it on (not provisional)
SLOWED = "scores"
SLOW_NS = 2_000  # +2 µs a decode call: about +25 % at 32K x 1, +3 % at 420K x 8


def engine_repository(at: Path) -> list[str]:
    """The fake engine's COMMITS commits, oldest first: their hashes."""
    write_fake_engine(at)
    git(at, "init", "-q", "-b", "main")
    commits = []
    for n in range(1, COMMITS + 1):
        if n == SLOWED_AT:  # the same files but the scorer's source, slowed
            write_fake_engine(at, slow=SLOWED, slow_ns=SLOW_NS)
        (at / "NOTES.md").write_text(f"commit {n}\n")
        git(at, "add", "-A")
        git(at, "commit", "-qm", f"commit {n}{' (its decode scorer slowed)' if n == SLOWED_AT else ''}")
        commits.append(git(at, "rev-parse", "HEAD"))
    return commits


def qsa(out: Path, name: str, *argv: str) -> float:
    """``qsa argv`` (exit 0 or 1: 1 is a verdict); its seconds, its output in OUT/NAME.log."""
    seconds = run(list(argv), out / f"{name}.log")
    print(f"{name}: {seconds:.1f} s", flush=True)
    return seconds


def main(out: Path) -> int:
    out = out.resolve()
    repo, store, runs = out / "engine", out / "store", out / "runs"
    for folder in (repo, store, runs):
        shutil.rmtree(folder, ignore_errors=True)
    runs.mkdir(parents=True)
    commits = engine_repository(repo)
    times: dict[str, float] = {}
    for n, commit in enumerate(commits, 1):
        run = runs / f"{n}-{commit[:12]}.json"
        times[f"sweep {n}"] = qsa(out, f"sweep-{n}", "sweep", "ci", "--engine", f"strata={repo}@{commit}",
                                  "--quiet", "--json", str(run))
        qsa(out, f"promote-{n}", "baseline", "promote", str(run), "--dir", str(store))
    for fmt, suffix in (("markdown", "md"), ("json", "json")):
        run(["history", str(store), "--engine", "strata", "--format", fmt], out / f"history.{suffix}")
    qsa(out, "history", "history", str(store), "--engine", "strata", "--plot", str(out / "history.png"),
        "--html", str(out / "history.html"))
    # a pull request's check as the recipe runs it, every build a cache hit by now
    for label, (base, head) in (("unchanged", (commits[1], commits[2])),
                                ("slowed", (commits[SLOWED_AT - 2], commits[SLOWED_AT - 1]))):
        times[f"pr {label}"] = qsa(out, f"pr-{label}", "compare", f"base={repo}@{base}", f"head={repo}@{head}",
                                   "--config", "ci", "--quiet", "--json", str(out / f"pr-{label}.json"),
                                   "--comment", str(out / f"pr-{label}.md"))
    (out / "times.json").write_text(json.dumps({"commits": commits, "seconds": times}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    sys.exit(main(Path(sys.argv[1])))
