"""core/git.py: a folder inside a repository at a revision (its place in a temporary worktree), and git
missing or failing as an answer, not a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from qsa_cli.core.errors import QsaError, RevisionError
from qsa_cli.core.git import folder_at_revision, git, tracked_commit


def run_git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=qsa", "-c", "user.email=qsa@example.invalid", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def test_a_folder_inside_a_repository_at_a_revision(tmp_path: Path) -> None:
    inner = tmp_path / "repo" / "kernels"
    inner.mkdir(parents=True)
    (inner / "a.cu").write_text("old\n")
    run_git(tmp_path / "repo", "init", "-q")
    run_git(tmp_path / "repo", "add", ".")
    run_git(tmp_path / "repo", "commit", "-q", "-m", "old")
    (inner / "a.cu").write_text("new\n")
    run_git(tmp_path / "repo", "commit", "-q", "-am", "new")

    with folder_at_revision(inner, "HEAD~1") as folder:
        assert folder.name == "kernels" and (folder / "a.cu").read_text() == "old\n"
        assert tracked_commit(folder, "a.cu") == run_git(tmp_path / "repo", "rev-parse", "HEAD~1")
    assert not folder.exists(), "the worktree is removed afterwards"
    assert tracked_commit(inner, "a.cu") == run_git(tmp_path / "repo", "rev-parse", "HEAD")
    for revision, message in (("--all", "is not a revision"), ("no-such-tag", "unknown revision")):
        with pytest.raises(RevisionError, match=message) as info, folder_at_revision(inner, revision):
            pass
        assert isinstance(info.value, QsaError) and "\n" not in str(info.value)


def test_git_missing_is_an_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert git(tmp_path, "status") is None
    assert tracked_commit(tmp_path, "a.cu") is None
    with pytest.raises(RevisionError, match="not a git repository"), folder_at_revision(tmp_path, "HEAD"):
        pass
