"""Every git call qsa makes: the commit of qsa's own checkout for a record (core/source.py), an engine
checkout's commit, and a revision of a folder checked out into a temporary worktree (``--engine PATH@REV``,
``qsa compare`` sides). git missing, hung or failing is an answer (None), never a traceback."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import RevisionError

GIT_TIMEOUT_S = 60
COMMIT_TIMEOUT_S = 5  # qsa's own commit, asked at every record's creation: a slow git must not hold a run


def git(path: str | os.PathLike[str], *args: str,
        timeout: float = GIT_TIMEOUT_S) -> subprocess.CompletedProcess[str] | None:
    """``git -C path ARGS``, its output captured; None when git cannot be run or does not finish in time."""
    try:
        return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def checked_out(folder: Path, tracked: str, paths: tuple[str, ...] = (".",),
                timeout: float = GIT_TIMEOUT_S) -> tuple[str, bool] | None:
    """(the commit checked out at ``folder``, whether the files of ``paths`` there differ from it: changed,
    added or untracked); None outside git, and None where the repository around the folder does not track
    ``tracked`` (a path in the folder): a copy in an ignored folder of another repository is not described
    by that one's commit."""
    head = git(folder, "rev-parse", "HEAD", timeout=timeout)
    if head is None or head.returncode != 0:
        return None
    found = git(folder, "ls-files", "--error-unmatch", "--", tracked, timeout=timeout)
    if found is None or found.returncode != 0:
        return None
    status = git(folder, "status", "--porcelain", "--", *paths, timeout=timeout)
    dirty = status is None or status.returncode != 0 or status.stdout.strip() != ""
    return head.stdout.strip(), dirty


def tracked_commit(folder: Path, tracked: str) -> str | None:
    """``checked_out``'s commit of ``folder`` (its files), with ``-dirty`` when they differ from it."""
    found = checked_out(folder, tracked)
    return None if found is None else found[0] + ("-dirty" if found[1] else "")


@contextlib.contextmanager
def folder_at_revision(folder: str | os.PathLike[str], revision: str) -> Iterator[Path]:
    """``folder`` (a repository, or a folder inside one) as it is at ``revision``: its place in a temporary
    ``git worktree`` of the repository at that commit (detached), removed on the way out."""
    folder = Path(folder)
    if revision.startswith("-"):
        raise RevisionError(f"{folder}: {revision!r} is not a revision")
    top = git(folder, "rev-parse", "--show-toplevel")
    if top is None or top.returncode != 0:
        raise RevisionError(f"{folder}: not a git repository, so it has no revision {revision!r}")
    commit = git(folder, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if commit is None or commit.returncode != 0:
        raise RevisionError(f"{folder}: unknown revision {revision!r}")
    prefix = git(folder, "rev-parse", "--show-prefix")
    inside = prefix.stdout.strip() if prefix is not None and prefix.returncode == 0 else ""
    parent = Path(tempfile.mkdtemp(prefix="qsa-engine-"))
    tree = parent / "checkout"
    try:
        added = git(folder, "worktree", "add", "--detach", "--quiet", str(tree), commit.stdout.strip())
        if added is None or added.returncode != 0:
            detail = " ".join(added.stderr.split()) if added is not None else "git did not run"
            raise RevisionError(f"{folder}: cannot check out {revision!r} into a worktree ({detail})")
        yield tree / inside
    finally:
        git(folder, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(parent, ignore_errors=True)
        git(folder, "worktree", "prune")
