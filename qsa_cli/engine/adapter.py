"""A user's own adapter: host paths qsa does not know, written as small ``extern "C"`` functions in qsa's
variant ABI (``qsa_cli/qsa_adapter.h``) with a table naming them, built with the checkout (engine/build.py)
and run as the variants ``NAME.ENTRY`` of the checkout NAME (engine/attach.py, engine/adapter_launch.py).

The adapter is ``--adapter FILE.cu``, else the checkout's own ``qsa_adapter.cu`` at its root. Its table is
read from the loaded library and checked before anything runs: a bad entry is one line naming it.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import EngineError
from .checkout import INCLUDE_DIR, EngineCheckout, included_files
from .kinds import ENGINE_KINDS, engine_kinds

ADAPTER_INCLUDE = Path(__file__).resolve().parent.parent  # the folder of qsa_adapter.h
ADAPTER_HEADER = ADAPTER_INCLUDE / "qsa_adapter.h"
CHECKOUT_ADAPTER = "qsa_adapter.cu"  # a checkout's own adapter, at its root
TABLE_SYMBOL = "qsa_adapter_entries"
MAX_ENTRIES = 64  # a table without its ending entry is refused rather than read on through memory
MODELS = {"scores": "butterfly", "topk": "reference"}  # the model an entry's stage checks it against
_ENTRY_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")  # no '.', '[', ',' or '+': NAME.ENTRY[K=V] and pairs parse

_P, _I = ctypes.c_void_p, ctypes.c_int64
# qsa_adapter.h's function types (their results: 1 launched, 0 refused, -1 failed; the scratch size: bytes)
SCORER = ctypes.CFUNCTYPE(ctypes.c_int, _P, _P, _P, _P, _I, _I, _P, _P)  # pooled dead q steps nq mb scores stream
TOPK = ctypes.CFUNCTYPE(ctypes.c_int, _P, _P, _I, _I, _I, _P, _P, _P)  # scores steps nq mb cap ids scratch stream
SCRATCH_BYTES = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)


class TableEntry(ctypes.Structure):
    """qsa_adapter.h's QsaAdapterEntry, field for field."""

    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_char_p), ("exact", ctypes.c_int32),
                ("needs_scratch", ctypes.c_int32), ("scorer", ctypes.c_void_p), ("topk", ctypes.c_void_p),
                ("scratch_bytes", ctypes.c_void_p), ("window_scorer", ctypes.c_char_p)]


@dataclass(frozen=True)
class AdapterEntry:
    """An entry of an adapter's table, checked: its variant's stage and exactness, the address of its
    function, of its scratch size (None: it takes no scratch) and the scorer it follows in a window."""

    name: str
    stage: str
    exact: bool
    function: int
    scratch_bytes: int | None = None
    window_scorer: str | None = None

    def record(self) -> dict[str, Any]:
        """As the record's engine build entry lists it."""
        return {"name": self.name, "kind": self.stage, "exact": self.exact, "scratch": self.scratch_bytes is not None,
                "window_scorer": self.window_scorer}


def check_adapter_file(path: Path, what: str = "adapter") -> Path:
    """``path`` resolved, as a readable ``.cu`` file of UTF-8 text; an EngineError (one line, the file named
    as ``what`` names it) saying why not."""
    named = f"{what} {path}"
    if not path.exists():
        raise EngineError(f"{named}: no such file")
    if not path.is_file():
        raise EngineError(f"{named}: not a file")
    if path.suffix != ".cu":
        raise EngineError(f"{named}: not a .cu file (nvcc compiles it as CUDA by its suffix)")
    try:
        path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise EngineError(f"{named}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise EngineError(f"{named}: not UTF-8 text (byte {exc.start})") from None
    return path.resolve()


@dataclass(frozen=True)
class AdapterSource:
    """The adapter a checkout's build compiles: its file, where it came from (``--adapter`` or the
    checkout), and every file it reads that qsa can hash (it, its own includes, qsa_adapter.h)."""

    path: Path
    origin: str
    files: dict[str, Path]

    def build_failure(self, log: str) -> str | None:
        """The first line of a failed build when nvcc's first error is in one of the adapter's files, naming
        the adapter; None when the first error is elsewhere (the checkout's own)."""
        first = next((line.strip() for line in log.splitlines() if "error" in line), None)
        if first is None or not any(str(p) in first for p in self.files.values() if p != ADAPTER_HEADER):
            return None
        return f"adapter {self.path} failed to compile: {first}"


def adapter_source(checkout: EngineCheckout, given: Path | None) -> AdapterSource | None:
    """The adapter ``checkout``'s build compiles: ``given`` (``--adapter``), else the checkout's own
    ``qsa_adapter.cu``, else None."""
    if given is not None:
        path, origin = check_adapter_file(given), "--adapter"
    elif (checkout.path / CHECKOUT_ADAPTER).exists():
        path, origin = check_adapter_file(checkout.path / CHECKOUT_ADAPTER), "checkout"
    else:
        return None
    files = included_files([path, ADAPTER_HEADER], (checkout.path / INCLUDE_DIR, ADAPTER_INCLUDE), path.parent)
    return AdapterSource(path, origin, files)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="replace")


def _refusal(e: TableEntry, earlier: list[AdapterEntry]) -> str | None:
    """What is wrong with a (named) entry of the table, given the entries before it, or None."""
    name = _text(e.name) or ""
    if not _ENTRY_NAME.fullmatch(name):
        return "its name is not a letter then letters, digits, '_' or '-' (at most 40)"
    if name in ENGINE_KINDS:
        return f"its name is a kind every checkout has ({', '.join(ENGINE_KINDS)})"
    if any(a.name == name for a in earlier):
        return "an earlier entry has its name"
    kind = _text(e.kind)
    if kind not in MODELS:
        return f"its kind {kind!r} is not one of {', '.join(MODELS)}"
    for field in ("exact", "needs_scratch"):
        if getattr(e, field) not in (0, 1):
            return f"its {field} is {getattr(e, field)}, not 0 or 1"
    own, other = ("scorer", "topk") if kind == "scores" else ("topk", "scorer")
    if not getattr(e, own):
        return f"a {kind} entry with no {own} function"
    if getattr(e, other):
        return f"a {kind} entry with a {other} function"
    if kind == "scores" and (e.needs_scratch or e.scratch_bytes or e.window_scorer is not None):
        return "a scores entry with a scratch or a window scorer (a top-k's)"
    if e.needs_scratch and not e.scratch_bytes:
        return "needs scratch but has no scratch_bytes function"
    if e.scratch_bytes and not e.needs_scratch:
        return "has a scratch_bytes function but needs_scratch is 0"
    return None


def _window_refusal(entry: AdapterEntry, entries: tuple[AdapterEntry, ...]) -> str | None:
    scorers = (*engine_kinds("scores"), *(e.name for e in entries if e.stage == "scores"))
    if entry.window_scorer is not None and entry.window_scorer not in scorers:
        return f"its window scorer {entry.window_scorer!r} is not one of {', '.join(scorers)}"
    return None


def read_table(address: int, adapter: str) -> tuple[AdapterEntry, ...]:
    """The checked entries of the table at ``address`` (a ``QsaAdapterEntry`` array ended by a null name) of
    the adapter file ``adapter``: an EngineError (one line) naming the first bad entry and what is wrong."""
    table = ctypes.cast(address, ctypes.POINTER(TableEntry))
    entries: list[AdapterEntry] = []
    for index in range(MAX_ENTRIES + 1):
        e = table[index]
        if e.name is None:
            break
        if index == MAX_ENTRIES:
            raise EngineError(f"adapter {adapter}: {TABLE_SYMBOL} has no entry with a null name to end it "
                              f"within {MAX_ENTRIES} entries")
        refusal = _refusal(e, entries)
        if refusal is not None:
            raise EngineError(f"adapter {adapter}: {TABLE_SYMBOL}[{index}] ({_text(e.name)!r}): {refusal}")
        entries.append(AdapterEntry(_text(e.name) or "", _text(e.kind) or "", bool(e.exact),
                                    int(e.scorer or e.topk or 0), e.scratch_bytes or None, _text(e.window_scorer)))
    if not entries:
        raise EngineError(f"adapter {adapter}: {TABLE_SYMBOL} names no entry")
    for index, entry in enumerate(entries):
        refusal = _window_refusal(entry, tuple(entries))
        if refusal is not None:
            raise EngineError(f"adapter {adapter}: {TABLE_SYMBOL}[{index}] ({entry.name!r}): {refusal}")
    return tuple(entries)
