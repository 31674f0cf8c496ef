"""The engine's dispatch policy (spec section 4) on every card from sm_70 to sm_121."""

from __future__ import annotations

import itertools

import pytest

from qsa_cli.catalog import qsa_catalog
from qsa_cli.core.errors import SwitchError
from qsa_cli.dispatch import (
    ENV_PDL,
    ENV_SCORES_HALVE,
    ENV_TOPK_SPLIT,
    SWITCHES,
    Dispatch,
    dispatch,
    programmatic_launches,
    read_switches,
)

QSA = qsa_catalog()
CARDS = (70, 72, 75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121)
SWITCH = (None, "", "0", "1")  # unset, empty (= unset), off, on


def env_of(halve: str | None, split: str | None) -> dict[str, str]:
    env = {"PATH": "/usr/bin"}  # unrelated variables are ignored
    if halve is not None:
        env[ENV_SCORES_HALVE] = halve
    if split is not None:
        env[ENV_TOPK_SPLIT] = split
    return env


def spec_table(cc: int, kind: str, halve: str | None, split: str | None) -> tuple[str, str]:
    """Section 4 restated: new kernels on sm_75 only; split=1 for any non-cluster card; cluster on sm_90+."""
    if kind == "prompt":
        return "reference", "reference"
    scores = "halve" if cc == 75 and halve != "0" else "multi"
    if cc >= 90:
        topk = "cluster"
    elif split == "1" or (cc == 75 and split != "0"):
        topk = "split"
    else:
        topk = "wide"
    return scores, topk


@pytest.mark.parametrize("kind", ["decode", "prompt"])
@pytest.mark.parametrize("cc", CARDS)
def test_every_card_kind_and_switch(cc: int, kind: str) -> None:
    for halve, split in itertools.product(SWITCH, SWITCH):
        d = dispatch(QSA, cc, kind, env_of(halve, split))
        assert isinstance(d, Dispatch)
        assert (d.scores, d.topk) == spec_table(cc, kind, halve, split), (halve, split)
        assert d.scores in QSA.names("scores") and d.topk in QSA.names("topk")
        # where the halving scorer is dispatched, the count decides: the fastest scorer at each on an H200
        by_queries = ("quarters", "quarters", "quarters", "quarters", "paired", "quarters", "quarters", "quarters") \
            if d.scores == "halve" else ()
        assert d.scores_by_queries == by_queries
        assert set(d.reasons) == {"scores", "topk"} | ({"scores_by_queries"} if by_queries else set())
        assert all(r and "\n" not in r for r in d.reasons.values())
        assert [d.scorer_for(q) for q in range(1, 9)] == list(by_queries or (d.scores,) * 8)


@pytest.mark.parametrize(
    ("cc", "env", "scores", "topk"),
    [
        (75, {}, "halve", "split"),
        (75, {ENV_SCORES_HALVE: "0"}, "multi", "split"),
        (75, {ENV_TOPK_SPLIT: "0"}, "halve", "wide"),
        (75, {ENV_SCORES_HALVE: "0", ENV_TOPK_SPLIT: "0"}, "multi", "wide"),
        (86, {}, "multi", "wide"),
        (86, {ENV_SCORES_HALVE: "1"}, "multi", "wide"),  # the scorer switch only turns the new kernel off
        (86, {ENV_TOPK_SPLIT: "1"}, "multi", "split"),
        (70, {ENV_TOPK_SPLIT: "1"}, "multi", "split"),
        (89, {ENV_TOPK_SPLIT: "0"}, "multi", "wide"),
        (90, {}, "multi", "cluster"),
        (90, {ENV_TOPK_SPLIT: "1"}, "multi", "cluster"),
        (120, {ENV_TOPK_SPLIT: "0"}, "multi", "cluster"),
    ],
)
def test_decode_by_hand(cc: int, env: dict[str, str], scores: str, topk: str) -> None:
    d = dispatch(QSA, cc, "decode", env)
    assert (d.scores, d.topk) == (scores, topk)


def test_reasons_name_the_deciding_switch() -> None:
    assert ENV_SCORES_HALVE in dispatch(QSA, 75, "decode", {ENV_SCORES_HALVE: "0"}).reasons["scores"]
    assert ENV_TOPK_SPLIT in dispatch(QSA, 86, "decode", {ENV_TOPK_SPLIT: "1"}).reasons["topk"]
    assert ENV_TOPK_SPLIT in dispatch(QSA, 75, "decode", {ENV_TOPK_SPLIT: "0"}).reasons["topk"]
    assert "cluster" in dispatch(QSA, 100, "decode", {}).reasons["topk"]
    assert "prompt" in dispatch(QSA, 75, "prompt", {}).reasons["scores"]


@pytest.mark.parametrize("kind", ["decode", "prompt"])
@pytest.mark.parametrize("name", [ENV_SCORES_HALVE, ENV_TOPK_SPLIT])
@pytest.mark.parametrize("value", ["yes", "true", "2", "-1", " 1", "0 ", "on"])
def test_invalid_switch_values(name: str, value: str, kind: str) -> None:
    """Rejected on every card and call kind, even where the switch would not decide."""
    for cc in (75, 86, 90):
        with pytest.raises(ValueError, match=name) as err:
            dispatch(QSA, cc, kind, {name: value})
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", SWITCHES)
@pytest.mark.parametrize("value", ["banana", "2", " 0", "true"])
def test_every_switch_a_record_lists_is_checked(name: str, value: str) -> None:
    """What the record's environment.switches lists: each in its domain, QSA_PDL's too (which decides
    only on sm_90+, where the split top-k runs)."""
    env = {ENV_SCORES_HALVE: "0", ENV_TOPK_SPLIT: "", "PATH": "/usr/bin"}
    assert read_switches(env) == {ENV_SCORES_HALVE: "0", ENV_TOPK_SPLIT: ""}
    with pytest.raises(SwitchError, match=f"^{name} must be 0 or 1 \\(got {value!r}\\)$"):
        read_switches({**env, name: value})


def test_pdl_is_on_unless_it_is_switched_off() -> None:
    assert [programmatic_launches(90, env) for env in ({}, {ENV_PDL: ""}, {ENV_PDL: "1"}, {ENV_PDL: "0"})] == [
        True, True, True, False]
    assert not programmatic_launches(89, {})
    with pytest.raises(SwitchError, match="QSA_PDL must be 0 or 1"):
        programmatic_launches(90, {ENV_PDL: "banana"})


@pytest.mark.parametrize("cc", [7, 0, -75, 7.5, "75", True, 1000])
def test_invalid_compute_capability(cc: object) -> None:
    with pytest.raises(ValueError, match="compute capability"):
        dispatch(QSA, cc, "decode", {})  # type: ignore[arg-type]


def test_invalid_kind() -> None:
    with pytest.raises(ValueError, match="call kind"):
        dispatch(QSA, 75, "verify", {})
