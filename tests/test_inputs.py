import numpy as np
import pytest

from qsa_cli.geometry import Call, max_blocks, window_steps
from qsa_cli.inputs import (
    ID_POISON,
    SCORE_POISON_BITS,
    SCORE_SETS,
    InputError,
    id_poison,
    load_scorer_inputs,
    load_topk_inputs,
    save_npz_atomic,
    score_poison,
    synthetic_scorer_inputs,
    synthetic_scores,
)


def test_synthetic_scorer_inputs_are_seeded_and_shaped(rng):
    seed = int(rng.integers(1 << 30))
    call = Call(9003, 5, 16384)
    a, b = synthetic_scorer_inputs(call, seed), synthetic_scorer_inputs(call, seed)
    assert a.pooled.shape == (max_blocks(16384), 128) and a.pooled.dtype == np.float32
    assert a.dead.shape == (128,) and a.q.shape == (5, 4, 128) and a.steps.dtype == np.int32
    for name in ("pooled", "dead", "q", "steps"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes()
    c = synthetic_scorer_inputs(call, seed + 1)
    assert a.pooled.tobytes() != c.pooled.tobytes()
    assert np.all(a.pooled != 0)
    # the queries share the keys' direction, so scores spread like an indexer's (not centred on 0)
    d = np.einsum("bd,hd->bh", a.pooled[:1000], a.q[0])
    assert np.std(d) > 0.1


@pytest.mark.parametrize("score_set", SCORE_SETS)
def test_synthetic_scores(score_set, rng):
    seed = int(rng.integers(1 << 30))
    call = Call(9002, 8, 16384)
    t = synthetic_scores(call, score_set, seed)
    assert t.scores.shape == (8, max_blocks(16384)) and t.scores.dtype == np.float32
    for i, (pos, n_kv, n_bid, width) in enumerate(t.steps):
        row = t.scores[i]
        assert np.all(np.isposinf(row[n_bid + 1:])), "blocks past n_bid hold +inf that no kernel may read"
        live = row[: n_bid + 1]
        assert np.all(np.isfinite(live))
        if score_set == "continuous" and n_kv % 4:
            assert live[n_bid] > 1e8
        if score_set == "levels64":
            assert np.all(live * 8 == np.floor(live * 8))
        if score_set == "equal":
            assert np.unique(live).size == 1


def test_unknown_score_set():
    with pytest.raises(InputError, match="unknown score set"):
        synthetic_scores(Call(100, 1, 100), "random", 0)


def test_poison_values():
    p = score_poison((2, 3))
    assert np.all(p.view(np.uint32) == SCORE_POISON_BITS) and np.all(np.isnan(p))
    assert np.all(id_poison((2,)) == ID_POISON)


def _scorer_arrays(rng, ctx=9001, nq=3, cap=9100):
    mb = max_blocks(cap)
    return {
        "pooled": rng.standard_normal((mb, 128), dtype=np.float32),
        "dead": rng.standard_normal(128, dtype=np.float32),
        "q": rng.standard_normal((nq, 4, 128), dtype=np.float32),
        "steps": window_steps(ctx, nq),
    }


def test_scorer_npz_round_trip(tmp_path, rng):
    arrays = _scorer_arrays(rng)
    arrays["pooled"][5, 7] = np.nan
    arrays["pooled"][6, 1] = -np.inf
    path = tmp_path / "in.npz"
    save_npz_atomic(path, **arrays)
    got = load_scorer_inputs(path)
    assert got.pooled.tobytes() == arrays["pooled"].tobytes()
    assert got.capacity == 9100 and got.nq == 3
    assert [p.name for p in tmp_path.iterdir()] == ["in.npz"], "no temporary file left behind"


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda a: a.pop("dead"), "missing array\\(s\\) dead"),
        (lambda a: a.update(pooled=a["pooled"].astype(np.float64)), "'pooled' must be float32"),
        (lambda a: a.update(q=a["q"][:, :3]), "'q' must have shape \\[\\*, 4, 128\\]"),
        (lambda a: a.update(steps=a["steps"][:2]), "'steps' must have shape \\[3, 4\\]"),
        (lambda a: a["steps"].__setitem__((0, 1), 5), "breaks n_kv == pos \\+ 1"),
        (lambda a: a.update(pooled=a["pooled"][:100]), "n_bid < max_blocks - 1"),
        (lambda a: a.update(steps=a["steps"].astype(np.int64)), "'steps' must be int32"),
    ],
)
def test_scorer_npz_errors_are_one_line(tmp_path, rng, change, message):
    arrays = _scorer_arrays(rng)
    change(arrays)
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(InputError, match=message) as info:
        load_scorer_inputs(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_topk_npz_round_trip_with_nan_and_inf(tmp_path, rng):
    t = synthetic_scores(Call(9001, 4, 9001), "continuous", int(rng.integers(1 << 30)))
    scores = t.scores.copy()
    scores[0, 3] = np.nan
    scores[1, 4] = -np.inf
    path = tmp_path / "s.npz"
    save_npz_atomic(path, scores=scores, steps=t.steps)
    got = load_topk_inputs(path)
    assert got.scores.tobytes() == scores.tobytes() and got.capacity == 9001 - 9001 % 4


def test_npz_unreadable(tmp_path):
    bad = tmp_path / "x.npz"
    bad.write_text("not a zip")
    with pytest.raises(InputError, match="not a readable .npz"):
        load_topk_inputs(bad)
    with pytest.raises(InputError, match="no such file"):
        load_topk_inputs(tmp_path / "missing.npz")
