"""Integrity checks in every run (qsa_cli/core/integrity.py, stages/common.py), on the CPU backend: a variant
that writes into a guard zone, changes an input, or gives another output on a later call fails, and
the failure names the variant and the buffer. The guard zones' own tests run on the device's arrays too."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qsa_cli import sanitize
from qsa_cli.catalog import qsa_catalog
from qsa_cli.cli import main
from qsa_cli.core.integrity import GUARD_BYTES, GuardedBuffers, Pristine, fingerprint
from qsa_cli.stages import scores as scores_stage
from qsa_cli.stages import topk as topk_stage


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request: pytest.FixtureRequest) -> Any:
    """NumPy, and CuPy on a device (its zones checked by one reduction kernel each, core/integrity.py)."""
    return np if request.param == "numpy" else request.getfixturevalue("cupy")


def allocation(array: Any) -> Any:
    """The whole allocation a guarded array was carved from (a CuPy view's base may be another view)."""
    while array.base is not None:
        array = array.base
    return array


def test_guard_zones_see_a_write_on_either_side_and_rearm(xp: Any, rng: np.random.Generator) -> None:
    buffers = GuardedBuffers(xp)
    ids = buffers.empty("ids", (3, 5), np.int32)
    ids[...] = xp.asarray(rng.integers(-5, 5, ids.shape, dtype=np.int32))
    assert buffers.breaches() == []
    raw = allocation(ids)
    assert raw.dtype == np.uint8 and raw.size >= 2 * GUARD_BYTES + ids.nbytes
    raw[GUARD_BYTES + ids.nbytes] ^= 0xFF  # the byte just past the array
    raw[GUARD_BYTES - 3] ^= 0xFF  # three bytes before it
    found = buffers.breaches()
    assert found == ["ids: 1 guard byte(s) before it written, the nearest 3 byte(s) before it",
                     "ids: 1 guard byte(s) after it written, the nearest 1 byte(s) after it"]
    assert buffers.breaches() == []  # re-armed: the next variant is judged on its own


def test_guard_zones_name_only_the_buffers_written_around(xp: Any) -> None:
    """Every zone is looked at in one read; only the buffers with a zone written are named, each zone once."""
    assert GuardedBuffers(xp).breaches() == []
    buffers = GuardedBuffers(xp)
    arrays = [buffers.empty(name, (size,), np.uint8) for name, size in (("a", 5), ("b", 13), ("c", 8), ("d", 1))]
    assert buffers.breaches() == []
    allocation(arrays[1])[GUARD_BYTES + 13 + 6] ^= 1  # 7 bytes past b
    allocation(arrays[3])[0] ^= 1  # d's first guard byte, the farthest before it
    assert buffers.breaches() == ["b: 1 guard byte(s) after it written, the nearest 7 byte(s) after it",
                                  f"d: 1 guard byte(s) before it written, the nearest {GUARD_BYTES} byte(s) before it"]
    assert buffers.breaches() == []


def test_guarded_arrays_keep_alignment_and_contents(rng: np.random.Generator) -> None:
    buffers = GuardedBuffers(np)
    host = rng.standard_normal((7, 129)).astype(np.float32)
    copy = buffers.asarray("scores", host)
    assert copy.tobytes() == host.tobytes() and copy.flags.c_contiguous
    zeros = buffers.zeros("counts", (3, 17), np.uint64)
    assert not zeros.any() and zeros.dtype == np.uint64
    assert (copy.ctypes.data - copy.base.ctypes.data) % 256 == 0


def test_fingerprint_changes_with_one_bit(rng: np.random.Generator) -> None:
    a = rng.standard_normal(100).astype(np.float32)
    before = fingerprint({"a": a})
    a.view(np.uint32)[17] ^= 1
    assert fingerprint({"a": a}) != before


def test_pristine_sees_any_one_byte_changed_in_arrays_of_any_size() -> None:
    """Compared in words as wide as each array's size allows: every byte of every size counts, the last ones
    of a size no word divides too."""
    for size in range(1, 26):
        for dtype in (np.uint8, np.int32, np.float32):
            if size % np.dtype(dtype).itemsize:
                continue
            placed = np.arange(size, dtype=np.uint8).view(dtype)
            pristine = Pristine(np, {"a": placed})
            assert pristine.changed({"a": placed}) == []
            for at in range(size):
                placed.view(np.uint8)[at] ^= 0x80
                assert pristine.changed({"a": placed}) == ["a"], (size, dtype, at)
                placed.view(np.uint8)[at] ^= 0x80
    nan = np.array([np.nan, 0.0], np.float32)  # bits, not values: a NaN kept is unchanged, -0 for +0 is a change
    pristine = Pristine(np, {"a": nan})
    assert pristine.changed({"a": nan}) == []
    nan[1] = -0.0
    assert pristine.changed({"a": nan}) == ["a"]


# The integrity checks' work on a device, as a run does it: the guard zones' own tests above on CuPy's arrays
# (armed, checked clean, written around, found, re-armed), then an input compared with its copy, unchanged and
# changed
CHECKS_ON_THE_DEVICE = """
import sys
import cupy, numpy as np
sys.path.insert(0, {tests!r})
import test_integrity
from qsa_cli.core.integrity import Pristine
print("{marker} 0", flush=True)
rng = np.random.default_rng(7)
test_integrity.test_guard_zones_see_a_write_on_either_side_and_rearm(cupy, rng)
test_integrity.test_guard_zones_name_only_the_buffers_written_around(cupy)
scores = cupy.asarray(rng.standard_normal((3, 1000), dtype=np.float32))
pristine = Pristine(cupy, {{"scores": scores}})
assert pristine.changed({{"scores": scores}}) == []
scores[1, 2] += 1
assert pristine.changed({{"scores": scores}}) == ["scores"]
cupy.cuda.Device().synchronize()
"""


@pytest.mark.gpu
@pytest.mark.slow  # a CuPy process started under each of compute-sanitizer's four tools in turn
def test_the_checks_kernels_are_clean_under_compute_sanitizer(cupy: Any, tmp_path: Path) -> None:
    """The guard zones' reduction and the inputs' comparison run in every run, beside the variants' kernels:
    memcheck, racecheck, synccheck and initcheck must find nothing in them."""
    try:
        tool = sanitize.find_sanitizer()
    except sanitize.SanitizerError as missing:
        pytest.skip(str(missing))
    script = tmp_path / "checks.py"
    script.write_text(CHECKS_ON_THE_DEVICE.format(tests=str(Path(__file__).resolve().parent), marker=sanitize.MARKER))
    case = sanitize.SanitizeCase("integrity", 1000, 3, 1000, variant="guard zones")
    for name in sanitize.TOOLS:
        output, code, seconds = sanitize.run_tool(sanitize.tool_command(tool, name, [sys.executable, str(script)]),
                                                   dict(os.environ))
        (row,) = sanitize.judge([case], name, output, code, [], seconds)
        assert row.passed and row.errors == 0, f"{name}: {output[-3000:]}"


def _wrap_model(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, variant: str,
                harm: Any) -> None:
    """Make ``module.name`` (a CPU model) misbehave for ``variant`` only: ``harm(inputs, result, calls)``."""
    real = getattr(module, name)
    calls = {"n": 0}

    def model(inputs: Any, which: str, *rest: Any) -> np.ndarray:
        result = real(inputs, which, *rest)
        if which == variant:
            calls["n"] += 1
            result = harm(inputs, result, calls["n"])
        return result

    monkeypatch.setattr(module, name, model)


def _overwrite_an_input(inputs: Any, result: np.ndarray, call: int) -> np.ndarray:
    inputs.scores[0, 5] += np.float32(1)  # the guarded copy the model reads
    return result


def _write_past_the_scores(inputs: Any, result: np.ndarray, call: int) -> np.ndarray:
    raw = inputs.scores.base
    raw[GUARD_BYTES + inputs.scores.nbytes + 8] ^= 0x5A
    return result


def _differ_on_a_later_call(inputs: Any, result: np.ndarray, call: int) -> np.ndarray:
    if call > 1:
        result = result.copy()
        result[0, 0] ^= 1
    return result


@pytest.mark.parametrize(("harm", "message"), [
    (_overwrite_an_input, "split vs inputs: scores changed by the run"),
    (_write_past_the_scores, "split vs guard zones: scores: 1 guard byte(s) after it written"),
    (_differ_on_a_later_call, "split (last timed call) vs split: query 0 position 0"),
])
def test_topk_parity_fails_a_variant_that_breaks_integrity(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch, harm: Any,
                                                           message: str) -> None:
    _wrap_model(monkeypatch, topk_stage, "topk_ids", "split", harm)
    code, out, err = run(capsys, "topk-parity", "9001", "2", "3", "20000", "0", "--backend", "cpu")
    assert code == 1, err
    assert message in " ".join(out.split()), out


def test_select_bench_fails_a_scorer_that_changes_its_keys(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def touch_keys(inputs: Any, result: np.ndarray, call: int) -> np.ndarray:
        inputs.pooled[3, 3] = np.float32(7)
        return result

    _wrap_model(monkeypatch, scores_stage, "score_blocks", "halve", touch_keys)
    code, out, err = run(capsys, "select-bench", "9001", "2", "2", "20000", "--backend", "cpu")
    assert code == 1, err
    assert "halve vs inputs: pooled changed by the run" in " ".join(out.split()), out


def test_a_sound_run_passes_every_integrity_check(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    import json

    js = tmp_path / "r.json"
    code, out, err = run(capsys, "topk-parity", "9001", "2", "2", "20000", "0", "--backend", "cpu", "--json", str(js))
    assert code == 0, err
    rows = json.loads(js.read_text())["parity"]
    every = set(qsa_catalog().names("topk"))  # the CPU backend runs each one's model
    for against in ("guard zones", "inputs"):
        judged = {p["subject"] for p in rows if p["against"] == against}
        assert judged == every, against
    assert {p["subject"] for p in rows if p["subject"].endswith("(last timed call)")} == {
        f"{v} (last timed call)" for v in every}
    assert all(p["equal"] for p in rows)
