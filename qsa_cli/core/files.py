"""Atomic file writing: every file a command writes appears whole or not at all.

A command checks each of its output paths (``check_writable``) before it measures anything, so a
path that cannot be written costs a line of error, not a run.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .errors import OutputError


# Writing through a link would replace the file it names (often an earlier run's record, latest.json ->
# run-41.json), and replacing the link would break the habit that made it: neither, the user chooses.
_LINK = "is a symbolic link (qsa writes no file through a link: name its target, or remove the link first)"


def _write_protected(path: Path) -> bool:
    """Not writable by this user, or writable by nobody under its mode (root could write it anyway, but
    a file or folder made read-only says it is not to be replaced)."""
    return not os.access(path, os.W_OK) or not path.stat().st_mode & 0o222


def check_writable(path: str | os.PathLike[str], what: str) -> None:
    """An OutputError, ``{what} {path}: why``, unless ``atomic_write(path)`` can create or replace it."""
    try:
        why = _why_not_writable(Path(path))
    except OSError as exc:  # a name too long, a loop of links: what the system says of the path
        why = exc.strerror or str(exc)
    if why:
        raise OutputError(f"{what} {path}: {why}")


def _why_not_writable(path: Path) -> str:
    """Why ``atomic_write(path)`` cannot create or replace it, or "" when it can."""
    folder = path.parent
    if path.is_dir():
        why = "is a folder"
    elif not folder.exists():
        why = f"no such folder {folder}"
    elif not folder.is_dir():
        why = f"{folder} is not a folder"
    elif _write_protected(folder) or not os.access(folder, os.X_OK):
        why = f"folder {folder} is not writable"
    elif path.exists() and not path.is_file():
        why = "not a regular file"  # /dev/null and the like: a rename would replace the node itself
    elif path.is_symlink():
        why = _LINK
    elif path.exists() and _write_protected(path):
        why = "read-only"
    else:
        why = ""
    return why


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def cannot_write(path: str | os.PathLike[str], exc: OSError) -> OutputError:
    """The one line of a write the system refused (a full file system, a file too large, a folder gone)."""
    return OutputError(f"{path}: cannot write ({exc.strerror or exc})")


@contextlib.contextmanager
def written(path: str | os.PathLike[str]) -> Iterator[None]:
    """Writes to ``path`` in the block: an OSError there is an OutputError naming it (one line)."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        raise cannot_write(path, exc) from None


@contextlib.contextmanager
def made_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """``path`` made (and the folders above it) for the block's files; if the block fails, the folders it made
    are taken back where they are still empty, so a failed command leaves no folder behind."""
    folder = Path(path)
    missing = [p for p in (folder, *folder.parents) if not p.exists()]  # the deepest first
    with written(folder):
        folder.mkdir(parents=True, exist_ok=True)
    try:
        yield folder
    except BaseException:
        for made in missing:
            with contextlib.suppress(OSError):  # not empty (another writer's file): it stays
                made.rmdir()
        raise


def append_whole(path: str | os.PathLike[str], text: str) -> None:
    """``text`` appended to ``path`` whole or not at all: a write that fails part-way (a full file system) is cut
    back to the file's length before it, and is an OutputError."""
    with written(path), open(path, "ab", buffering=0) as fh:
        start = fh.seek(0, os.SEEK_END)
        left = memoryview(text.encode("utf-8"))
        try:
            while left:  # an unbuffered write may take part of it, then refuse the rest
                left = left[fh.write(left):]
        except OSError:
            os.ftruncate(fh.fileno(), start)
            raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path``; rename it over ``path`` only if the block succeeds.

    The file gets the permissions ``open()`` would give it: an existing file's, else 0o666 less the
    umask. A read-only existing file is refused; every failure to write is an OutputError.
    """
    path = Path(path)
    if path.is_symlink():
        raise OutputError(f"{path}: {_LINK}")
    if path.is_file() and _write_protected(path):
        raise OutputError(f"{path}: read-only")
    permissions = path.stat().st_mode & 0o777 if path.is_file() else 0o666 & ~_umask()
    with written(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, mode) as fh:
                os.fchmod(fh.fileno(), permissions)  # mkstemp makes it 0o600
                yield fh
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
