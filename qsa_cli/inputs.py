"""Inputs of a selection call: synthetic and seeded (spec section 5), or loaded from ``.npz``.

Also the poison values every output buffer is filled with before a kernel runs, so that a test can
check that exactly the entries that must be written were written.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import atomic_write
from .geometry import (
    BLOCK_CELLS,
    IDX_DIM,
    IDX_HEADS,
    STEP_NBID,
    STEP_NKV,
    TAIL_BONUS,
    Call,
    GeometryError,
    blocks_read,
    capacity_of,
    validate_steps,
)

SCORE_POISON_BITS = 0x7FBADBAD  # a NaN no arithmetic produces (payload kept by copies, not by math)
ID_POISON = -0x2BADBAD  # an id no selection produces
# NaNs of every kind, as adversarial inputs hold them: quiet, negative, with a payload, signalling, all bits set
ADVERSARIAL_NANS = np.array([0x7FC00000, 0xFFC00000, 0x7FC01234, 0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)

SCORE_SETS = ("continuous", "levels64", "equal")


class InputError(ValueError):
    """An input file or array that does not match the spec; the message is one line."""


def score_poison(shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, SCORE_POISON_BITS, dtype=np.uint32).view(np.float32)


def id_poison(shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, ID_POISON, dtype=np.int32)


@dataclass(frozen=True)
class ScorerInputs:
    pooled: np.ndarray  # float32 [max_blocks, IDX_DIM]
    dead: np.ndarray  # float32 [IDX_DIM]
    q: np.ndarray  # float32 [nq, IDX_HEADS, IDX_DIM]
    steps: np.ndarray  # int32 [nq, 4]

    @property
    def nq(self) -> int:
        return int(self.q.shape[0])

    @property
    def max_blocks(self) -> int:
        return int(self.pooled.shape[0])

    @property
    def capacity(self) -> int:
        return capacity_of(self.max_blocks)

    def key_bytes(self) -> int:
        """Bytes of keys a decode call must read once: blocks 0..max n_bid (the tail reads ``dead``)."""
        return blocks_read(self.steps) * IDX_DIM * 4


@dataclass(frozen=True)
class TopkInputs:
    scores: np.ndarray  # float32 [nq, max_blocks]; only blocks 0..n_bid of each row are read
    steps: np.ndarray  # int32 [nq, 4]
    score_set: str = "given"

    @property
    def nq(self) -> int:
        return int(self.scores.shape[0])

    @property
    def max_blocks(self) -> int:
        return int(self.scores.shape[1])

    @property
    def capacity(self) -> int:
        return capacity_of(self.max_blocks)


def rng_for(seed: int, *labels: int) -> np.random.Generator:
    """An independent stream per (seed, case labels), so cases do not depend on their order."""
    return np.random.default_rng([seed, *labels])


def synthetic_scorer_inputs(call: Call, seed: int) -> ScorerInputs:
    """Keys with a shared direction plus noise (spec section 5), so scores spread like an indexer's."""
    rng = rng_for(seed, call.ctx, call.nq, call.capacity)
    mb = call.max_blocks
    direction = rng.standard_normal(IDX_DIM, dtype=np.float32)
    amplitude = rng.standard_normal((mb, 1), dtype=np.float32)
    pooled = np.float32(0.5) * amplitude * direction + rng.standard_normal((mb, IDX_DIM), dtype=np.float32)
    dead = rng.standard_normal(IDX_DIM, dtype=np.float32)
    noise = rng.standard_normal((call.nq, IDX_HEADS, IDX_DIM), dtype=np.float32)
    q = np.float32(0.2) * direction + np.float32(0.1) * noise
    return ScorerInputs(pooled.astype(np.float32), dead, q.astype(np.float32), call.steps)


def synthetic_scores(call: Call, score_set: str, seed: int) -> TopkInputs:
    """One of the three score sets; blocks past each query's n_bid hold +inf, which no correct kernel reads."""
    if score_set not in SCORE_SETS:
        raise InputError(f"unknown score set {score_set!r} (expected one of {', '.join(SCORE_SETS)})")
    rng = rng_for(seed, call.ctx, call.nq, call.capacity, SCORE_SETS.index(score_set))
    steps = call.steps
    s = rng.standard_normal((call.nq, call.max_blocks), dtype=np.float32)
    if score_set == "levels64":
        s = np.floor(s * np.float32(8)) / np.float32(8)
    elif score_set == "equal":
        s = np.full_like(s, np.float32(rng.standard_normal()))
    rows = np.arange(call.nq)
    n_kv, n_bid = steps[:, STEP_NKV], steps[:, STEP_NBID]
    has_tail = n_kv % BLOCK_CELLS != 0
    if score_set == "continuous":
        s[rows[has_tail], n_bid[has_tail]] += TAIL_BONUS
    past = np.arange(call.max_blocks)[None, :] > n_bid[:, None]
    s[past] = np.inf
    return TopkInputs(s.astype(np.float32), steps, score_set)


# ---- .npz files -----------------------------------------------------------------------------

_SCORER_ARRAYS = {"pooled": np.float32, "dead": np.float32, "q": np.float32, "steps": np.int32}
_TOPK_ARRAYS = {"scores": np.float32, "steps": np.int32}


def _read_npz(path: Path, expected: dict[str, type]) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npz file ({exc})") from None
    missing = [n for n in expected if n not in arrays]
    if missing:
        raise InputError(f"{path}: missing array(s) {', '.join(missing)} (has {', '.join(sorted(arrays)) or 'none'})")
    for name, dtype in expected.items():
        if arrays[name].dtype != dtype:
            raise InputError(f"{path}: array {name!r} must be {np.dtype(dtype).name} (got {arrays[name].dtype})")
    return arrays


def _check_shape(path: Path, name: str, array: np.ndarray, shape: tuple[object, ...]) -> None:
    ok = array.ndim == len(shape) and all(s is None or a == s for a, s in zip(array.shape, shape))
    if not ok:
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise InputError(f"{path}: array {name!r} must have shape {want} (got {list(array.shape)})")


def _check_steps(path: Path, steps: np.ndarray, nq: int, max_blocks_: int) -> None:
    _check_shape(path, "steps", steps, (nq, 4))
    try:
        validate_steps(steps, max_blocks_)
    except GeometryError as exc:
        raise InputError(f"{path}: {exc}") from None


def load_scorer_inputs(path: str | os.PathLike[str]) -> ScorerInputs:
    path = Path(path)
    a = _read_npz(path, _SCORER_ARRAYS)
    _check_shape(path, "pooled", a["pooled"], (None, IDX_DIM))
    mb = a["pooled"].shape[0]
    if mb < 3:
        raise InputError(f"{path}: array 'pooled' needs at least 3 rows (max_blocks = capacity / 4 + 2)")
    _check_shape(path, "dead", a["dead"], (IDX_DIM,))
    _check_shape(path, "q", a["q"], (None, IDX_HEADS, IDX_DIM))
    nq = a["q"].shape[0]
    if nq == 0:
        raise InputError(f"{path}: array 'q' has no queries")
    _check_steps(path, a["steps"], nq, mb)
    return ScorerInputs(*(np.ascontiguousarray(a[n]) for n in ("pooled", "dead", "q", "steps")))


def load_topk_inputs(path: str | os.PathLike[str]) -> TopkInputs:
    path = Path(path)
    a = _read_npz(path, _TOPK_ARRAYS)
    _check_shape(path, "scores", a["scores"], (None, None))
    nq, mb = a["scores"].shape
    if nq == 0 or mb < 3:
        raise InputError(f"{path}: array 'scores' must be [nq >= 1, max_blocks >= 3] (got {[nq, mb]})")
    _check_steps(path, a["steps"], nq, mb)
    return TopkInputs(np.ascontiguousarray(a["scores"]), np.ascontiguousarray(a["steps"]), "given")


def save_npz_atomic(path: str | os.PathLike[str], **arrays: np.ndarray) -> None:
    with atomic_write(path, "wb") as fh:
        np.savez(fh, **arrays)
