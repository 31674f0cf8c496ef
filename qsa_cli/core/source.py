"""Where the code that runs came from, as a record states it (``environment.source``, and ``git_commit``):
detected, never guessed. A source is one of three kinds:

- ``git``: qsa's folder is tracked by a git checkout (a clone or a worktree; an editable install runs one):
  the commit checked out, and whether qsa's files there (``CODE_PATHS``) differ from it, untracked ones too.
  A ``.git`` older than the files around it (a tree copied over an earlier clone) reads as dirty: its commit
  names none of the code that ran, and ``files_sha256`` does.
- ``wheel``: qsa is the files of the installed distribution ``qsa`` (its RECORD lists this very package):
  the distribution's version, and the commit its build stamped (``STAMP``, which setup.py writes into a
  wheel built from a git checkout), else none.
- ``tree``: neither (a copy without ``.git``, an unpacked sdist): no commit, and the record says so.

Whatever the kind, ``files_sha256`` hashes qsa's own code as it ran (every ``.py`` of the package and its
engine shim, by path and bytes; the kernels have theirs, ``kernel_source_hash``): the same files hash the
same wherever they run, so ``files_sha256(Path("qsa_cli"))`` in a checkout of a commit tells whether a
record's code was that commit's. ``QSA_SOURCE_COMMIT``, when set, is kept as ``stated_commit``: the commit
that whoever ran it says the code is, recorded as said and not checked.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, TypedDict

from .. import __version__
from .errors import InputError
from .git import COMMIT_TIMEOUT_S, checked_out

DISTRIBUTION = "qsa"
STAMP = "source_stamp.json"  # {"commit": 40 hex digits, "dirty": bool}, in an installed wheel's qsa_cli/
ENV_COMMIT = "QSA_SOURCE_COMMIT"
CODE_PATHS = ("qsa_cli", "kernels", "configs")  # what runs, relative to a checkout's root
ENGINE_SHIM = "engine_shim.cu"
_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_FULL_COMMIT = re.compile(r"[0-9a-f]{40}")


class Source(TypedDict):
    """Where the code of a run came from (module docstring)."""

    kind: Literal["git", "wheel", "tree"]
    commit: str | None  # git's HEAD, or the commit the wheel's build stamped; None where nothing says
    dirty: bool | None  # the files differed from ``commit`` (git: as the run began; a wheel: at its build)
    version: str  # qsa's version (a wheel: its distribution's)
    files_sha256: str
    stated_commit: str | None  # QSA_SOURCE_COMMIT as given


def files_sha256(package: Path) -> str:
    """sha256 over qsa's code in ``package`` (a ``qsa_cli`` folder): each ``.py`` file's path in it and bytes,
    and the engine shim's."""
    files = sorted([*package.rglob("*.py"), package / ENGINE_SHIM])
    h = hashlib.sha256()
    for path in files:
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def source_of(package: Path, stated: str | None = None) -> Source:
    """The source of the ``qsa_cli`` folder ``package`` (module docstring); ``stated``: QSA_SOURCE_COMMIT's value."""
    _check_stated(stated)
    return Source(**_detected(package.resolve()), stated_commit=stated)


def running_source() -> Source:
    """This process's qsa: found once (every record of the process states the same), with the commit
    QSA_SOURCE_COMMIT states now."""
    stated = os.environ.get(ENV_COMMIT) or None
    _check_stated(stated)
    return Source(**_running(), stated_commit=stated)


@functools.cache
def _running() -> dict[str, Any]:
    return _detected(Path(__file__).resolve().parent.parent)


def _detected(package: Path) -> dict[str, Any]:
    """A ``Source`` less its stated commit."""
    found = checked_out(package.parent, f"{package.name}/__init__.py", CODE_PATHS, timeout=COMMIT_TIMEOUT_S)
    kind: Literal["git", "wheel", "tree"] = "tree"
    commit, dirty, version = None, None, __version__
    if found is not None:
        kind, (commit, dirty) = "git", found
    elif (installed := _distribution_of(package)) is not None:
        kind, version = "wheel", installed.version
        commit, dirty = _stamp(package / STAMP)
    return {"kind": kind, "commit": commit, "dirty": dirty, "version": version, "files_sha256": files_sha256(package)}


def _check_stated(stated: str | None) -> None:
    if stated is not None and not _COMMIT.fullmatch(stated):
        raise InputError(f"{ENV_COMMIT}={stated!r} is not a commit (7 to 40 lowercase hex digits)")


def commit_label(source: Source) -> str | None:
    """A record's ``git_commit``: the commit's first 12 digits, ``-dirty`` when the files differed; None
    without a commit."""
    if source["commit"] is None:
        return None
    return source["commit"][:12] + ("-dirty" if source["dirty"] else "")


def _distribution_of(package: Path) -> metadata.Distribution | None:
    """The installed distribution whose files are ``package``, or None (none installed, or an editable
    install, whose files list no module, or another copy)."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    init = package / "__init__.py"
    for file in dist.files or ():
        if file.parts == (package.name, "__init__.py") and Path(str(dist.locate_file(file))).resolve() == init:
            return dist
    return None


def checkout_stamp(root: Path) -> str | None:
    """What a wheel built from the checkout at ``root`` carries as its ``STAMP`` (setup.py writes it): the
    commit and whether qsa's files differed from it, as JSON; None where ``root`` is no git checkout of qsa."""
    found = checked_out(root, "qsa_cli/__init__.py", CODE_PATHS, timeout=COMMIT_TIMEOUT_S)
    return None if found is None else json.dumps({"commit": found[0], "dirty": found[1]}) + "\n"


def _stamp(path: Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) as a build stamped them, or (None, None): no stamp, or one not as setup.py writes it."""
    try:
        stamp = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, None
    commit = stamp.get("commit") if isinstance(stamp, dict) else None
    dirty = stamp.get("dirty") if isinstance(stamp, dict) else None
    if not (isinstance(commit, str) and _FULL_COMMIT.fullmatch(commit) and isinstance(dirty, bool)):
        return None, None
    return commit, dirty
