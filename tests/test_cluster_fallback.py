"""A capacity the cluster top-k cannot hold: left out of the variants, and the dispatch falls back."""

import pytest

from qsa_cli.core.geometry import max_blocks
from qsa_cli.dispatch import dispatch
from qsa_cli.record.schema import RunRecord
from qsa_cli.runs import Session, Settings, dispatch_for, topk_variants

H200_OPTIN = 232448  # sharedMemPerBlockOptin of the H200 (read by qsa info on the lent card)


def gpu_session(cc: str) -> Session:
    record = RunRecord("topk-parity", [], "gpu", device={"compute_capability": cc, "shared_optin_bytes": H200_OPTIN})
    return Session(Settings(backend="gpu"), record)


def test_a_capacity_that_fits_keeps_the_cluster():
    s = gpu_session("9.0")
    assert "cluster" in topk_variants(s, max_blocks(1 << 20))
    assert dispatch_for(s, "decode", max_blocks(1 << 20)).topk == "cluster"
    assert s.record.notes == []


def test_a_capacity_too_large_falls_back_with_a_reason(monkeypatch):
    monkeypatch.delenv("STRATA_TOPK_SPLIT", raising=False)
    s = gpu_session("9.0")
    big = max_blocks(4 << 20)
    assert topk_variants(s, big) == ("reference", "wide", "split")
    assert len(s.record.notes) == 1 and "cluster top-k left out" in s.record.notes[0]
    d = dispatch_for(s, "decode", big)
    assert d.topk == "wide" and "cannot hold capacity 4194304 cells" in d.reasons["topk"]
    monkeypatch.setenv("STRATA_TOPK_SPLIT", "1")
    assert dispatch_for(s, "decode", big).topk == "split"


def test_cards_without_clusters_never_mention_them():
    s = gpu_session("8.0")
    assert topk_variants(s, max_blocks(4 << 20)) == ("reference", "wide", "split")
    assert s.record.notes == []


@pytest.mark.parametrize("cc", [90, 100, 120])
def test_dispatch_fallback_rule(cc):
    refusal = "the cluster top-k cannot hold capacity 9 cells"
    assert dispatch(cc, "decode", {}, refusal).topk == "wide"
    assert dispatch(cc, "decode", {"STRATA_TOPK_SPLIT": "1"}, refusal).topk == "split"
    assert dispatch(cc, "decode", {}).topk == "cluster"
    assert dispatch(cc, "prompt", {}, refusal).topk == "reference"
