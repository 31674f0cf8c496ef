"""An engine checkout: named ``[NAME=]PATH[@REV]``, its files checked, the files its build reads, its
commit; a ``PATH@REV`` one is a temporary worktree for a run's length (core/git.py)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import EngineError
from ..core.git import folder_at_revision, tracked_commit

SOURCE = "src/kernels/cuda/qsa_select.cu"
HEADER = "include/strata/kernels/qsa_select.hpp"
ENGINE_FILES = (SOURCE, HEADER, "include/strata/kernels/qsa.hpp", "include/strata/core/emulate.hpp")
INCLUDE_DIR = "include"

HOST_FUNCTIONS = ("qsa_block_scores", "qsa_block_topk", "qsa_block_topk_cluster", "qsa_topk_split_bytes",
                  "qsa_block_topk_split", "qsa_block_topk_ref", "qsa_block_scores_tc", "qsa_topk_multi_scratch_ints")


@dataclass(frozen=True)
class HostParameter:
    """An optional parameter of a host function that opens a path of its own (a newer generation's): at
    ``position`` in the declaration's parameter list (from 0), of ``type`` (spaces and ``std::`` dropped)."""

    function: str
    position: int
    type: str
    name: str

    @property
    def path(self) -> str:
        """What a checkout that declares it is said to declare: ``function.name``."""
        return f"{self.function}.{self.name}"


# The optional parameters qsa drives (spec section 8): the shim passes each explicitly, so each must sit where
# qsa's wrapper puts it, after the active block count.
HOST_PARAMETERS = {p.path: p for p in (HostParameter("qsa_block_scores", 10, "bool", "decode_dx"),
                                       HostParameter("qsa_block_topk", 9, "int32_t*", "multi_scratch"))}
HOST_PATHS = (*HOST_FUNCTIONS, *HOST_PARAMETERS)  # what a checkout may declare: functions, then parameters

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
# what the header's brackets are checked without: comments, literals, preprocessor lines (a macro may open a brace)
_NOT_CODE = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'"
                       r"|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.DOTALL | re.MULTILINE)
_PAIRS = {")": "(", "}": "{", "]": "["}
# comments and literals, one token each (a "//" inside a literal opens no comment); group 1: a literal's text
_TOKENS = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)|\"((?:\\.|[^\"\\\n])*)\"|'(?:\\.|[^'\\\n])*'", re.DOTALL)
SWITCH_NAME = re.compile(r"STRATA_[A-Z0-9_]+")


def header_problem(text: str) -> str | None:
    """Why the text of a checkout's qsa_select.hpp is not a header qsa can read (one line), or None: a comment
    left open, a bracket that does not close or was never opened, no host function of qsa's declared."""
    left_open: list[int] = []  # the line of a /* comment that runs to the end

    def blank(m: re.Match[str]) -> str:
        found = m.group()
        if found.startswith("/*") and (len(found) < 4 or not found.endswith("*/")):
            left_open.append(text[:m.start()].count("\n") + 1)
        return "\n" * found.count("\n")

    code = _NOT_CODE.sub(blank, text)
    if left_open:
        return f"line {left_open[0]}: a /* comment is never closed"
    opened: list[tuple[str, int]] = []
    for line_number, line in enumerate(code.splitlines(), 1):
        for char in line:
            if char in "({[":
                opened.append((char, line_number))
            elif char in _PAIRS:
                if not opened:
                    return f"line {line_number}: {char!r} closes nothing"
                if opened[-1][0] != _PAIRS[char]:
                    return f"line {line_number}: {char!r} closes the {opened[-1][0]!r} of line {opened[-1][1]}"
                opened.pop()
    if opened:
        return f"line {opened[-1][1]}: {opened[-1][0]!r} is never closed"
    if not declared_in(text):
        return f"it declares none of qsa's host functions ({', '.join(HOST_FUNCTIONS)})"
    return None


def _parameters(code: str, opening: int) -> list[str]:
    """The parameters of the list whose "(" is at ``opening`` in ``code`` (comments blanked), split at its
    top-level commas; [] when the list does not close."""
    depth, start, found = 0, opening + 1, []
    for i in range(opening, len(code)):
        char = code[i]
        if char in "(<[{":
            depth += 1
        elif char in ")>]}":
            depth -= 1
            if depth == 0:
                return [*found, code[start:i]] if code[start:i].strip() or found else found
        elif char == "," and depth == 1:
            found.append(code[start:i])
            start = i + 1
    return []


def _typed_name(parameter: str) -> tuple[str, str]:
    """(type, name) of one parameter's text: its default dropped, the type without spaces or ``std::``."""
    declared = parameter.split("=", 1)[0].strip()
    m = re.search(r"([A-Za-z_]\w*)\s*$", declared)
    if m is None:
        return "".join(declared.split()), ""
    kind = declared[:m.start()].replace("std::", "")
    return "".join(kind.split()), m.group(1)


def declared_in(header: str) -> tuple[str, ...]:
    """The host paths (of HOST_PATHS) that the text of a qsa_select.hpp declares outside comments: each host
    function, and each optional parameter its first declaration has at qsa's position with qsa's type."""
    code = _COMMENT.sub(" ", header)
    lists: dict[str, list[str]] = {}
    for name in HOST_FUNCTIONS:
        m = re.search(rf"\b{name}\s*\(", code)
        if m is not None:
            lists[name] = _parameters(code, m.end() - 1)
    declared = [p.path for p in HOST_PARAMETERS.values() if p.function in lists and len(lists[p.function]) > p.position
                and _typed_name(lists[p.function][p.position]) == (p.type, p.name)]
    return (*lists, *declared)


def switches_read(text: str) -> set[str]:
    """The ``STRATA_*`` names that a source's string literals spell whole (``getenv("STRATA_X")``, a helper's
    ``env_flag("STRATA_X")``): its comments and a literal that only mentions one in a sentence do not count."""
    return {m.group(1) for m in _TOKENS.finditer(text) if m.group(1) and SWITCH_NAME.fullmatch(m.group(1))}


def included_files(roots: list[Path], include_dirs: tuple[Path, ...], base: Path) -> dict[str, Path]:
    """``roots`` and every file they include, transitively, that exists (a quoted name beside its includer
    first, then in ``include_dirs``; an absolute name as it is), by its path relative to ``base`` (else its
    absolute path). A header of the toolkit's or the system's is not found here: the nvcc version stands for them."""
    found: dict[str, Path] = {}

    def visit(path: Path) -> None:
        label = str(path.relative_to(base)) if path.is_relative_to(base) else str(path)
        if label in found:
            return
        found[label] = path
        for quote, name in _INCLUDE.findall(path.read_text(errors="replace")):
            if os.path.isabs(name):
                candidates = [Path(name)]
            else:
                candidates = ([path.parent / name] if quote == '"' else []) + [folder / name for folder in include_dirs]
            for candidate in candidates:
                if candidate.is_file():
                    visit(candidate.resolve())
                    break

    for root in roots:
        visit(root)
    return dict(sorted(found.items()))


class EngineCheckout:
    """A checkout of the engine's source at ``path`` (its four files checked), named ``name`` in records.

    ``origin`` and ``revision`` are the repository and revision a temporary worktree was made from
    (``open_engine`` with ``PATH@REV``), recorded in place of the worktree's own path.
    """

    def __init__(self, path: str | os.PathLike[str], name: str | None = None, *,
                 origin: str | os.PathLike[str] | None = None, revision: str | None = None) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_dir():
            raise EngineError(f"engine checkout {path}: no such directory")
        for relative in ENGINE_FILES:
            if not (self.path / relative).is_file():
                raise EngineError(f"engine checkout {self.path}: missing {relative}")
        try:
            self._header = (self.path / HEADER).read_bytes().decode()
        except (OSError, UnicodeDecodeError) as exc:
            raise EngineError(f"engine checkout {self.path}: cannot read {HEADER} ({exc})") from None
        problem = header_problem(self._header)
        if problem is not None:
            raise EngineError(f"engine checkout {self.path}: {HEADER}: {problem}")
        self.name = name or self.path.name
        self.origin = Path(origin).resolve() if origin is not None else self.path
        self.revision = revision

    def declared_functions(self) -> tuple[str, ...]:
        """The host paths (of HOST_PATHS: functions, then optional parameters) that the checkout's qsa_select.hpp
        declares outside comments."""
        return declared_in(self._header)

    def switches(self) -> tuple[str, ...]:
        """The ``STRATA_*`` switches the build's files read (``switches_read``), sorted: those a variant
        ``NAME.KIND[K=V]`` of this checkout may set."""
        return tuple(sorted(set().union(*(switches_read(path.read_text(errors="replace"))
                                          for path in self.build_files().values()))))

    def build_files(self) -> dict[str, Path]:
        """Every file the build reads that the checkout provides, by its path in the checkout: the four files
        and what qsa_select.cu and they include, transitively (an include by absolute path too, named by it).
        The toolkit's and the system's headers are not listed: the nvcc version stands for them."""
        return included_files([self.path / relative for relative in ENGINE_FILES], (self.path / INCLUDE_DIR,),
                              self.path)

    def commit(self) -> str | None:
        """The checked-out commit, with ``-dirty`` when the checkout's files differ from it; None outside git,
        and None where the repository around the folder does not track its ``qsa_select.cu`` (a copy in an
        ignored folder of another repository: that repository's commit says nothing of it)."""
        return tracked_commit(self.path, SOURCE)


# ---- naming a checkout: [NAME=]PATH[@REV] -----------------------------------------------------------------


@dataclass(frozen=True)
class EngineSpec:
    name: str
    path: Path
    revision: str | None = None


_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # no "+": it joins a window pair's names


def parse_engine_spec(text: str) -> EngineSpec:
    """``[NAME=]PATH[@REV]`` (``--engine base=../strata@origin/main``): the name defaults to the folder's
    name, with ``@REV`` when a revision is given. A PATH that exists as written (an ``@`` in a folder's
    name) has no revision."""
    name, sep, rest = text.partition("=")
    if not sep or not _NAME.fullmatch(name):
        name, rest = "", text
    path, at, revision = rest.rpartition("@")
    if not at or Path(rest).exists():
        path, at, revision = rest, "", ""
    if not path:
        raise EngineError(f"engine {text!r}: no path (expected [NAME=]PATH[@REV])")
    if at and not revision:
        raise EngineError(f"engine {text!r}: no revision after '@' (expected [NAME=]PATH[@REV])")
    name = name or Path(path).resolve().name + (f"@{revision}" if revision else "")
    return EngineSpec(name, Path(path), revision or None)


@contextlib.contextmanager
def open_engine(spec: str | EngineSpec) -> Iterator[EngineCheckout]:
    """The checkout ``spec`` names; a ``PATH@REV`` one lives in a temporary worktree for the block's length
    (build it inside the block: the library stays in the cache)."""
    spec = parse_engine_spec(spec) if isinstance(spec, str) else spec
    if spec.revision is None:
        yield EngineCheckout(spec.path, spec.name)
        return
    with folder_at_revision(spec.path, spec.revision) as folder:  # PATH may be a folder inside its repository
        yield EngineCheckout(folder, spec.name, origin=spec.path, revision=spec.revision)
