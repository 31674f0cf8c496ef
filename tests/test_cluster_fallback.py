"""A capacity the cluster top-k cannot hold: its launch shape refuses the call, so it is left out of the
variants with a note, and the dispatch falls back."""

import pytest

from qsa_cli.catalog import qsa_catalog
from qsa_cli.core.geometry import max_blocks
from qsa_cli.dispatch import dispatch
from qsa_cli.launch.shape import Card
from qsa_cli.record.schema import RunRecord
from qsa_cli.session import Session, Settings

H200_OPTIN = 232448  # sharedMemPerBlockOptin of the H200 (read by qsa info on the lent card)
NOT_CLUSTER = tuple(n for n in qsa_catalog().names("topk") if n != "cluster")


def gpu_session(cc: int, switches: dict[str, str] | None = None) -> Session:
    record = RunRecord("topk-parity", [], "gpu", device={"compute_capability": f"{cc // 10}.{cc % 10}",
                                                        "shared_optin_bytes": H200_OPTIN})
    return Session(Settings(backend="gpu"), record, qsa_catalog(), switches=switches or {}, card=Card(cc, H200_OPTIN))


def test_a_capacity_that_fits_keeps_the_cluster():
    s = gpu_session(90)
    assert "cluster" in s.here("topk", max_blocks(1 << 20))
    assert s.dispatch("decode", max_blocks(1 << 20)).topk == "cluster"
    assert s.record.notes == []


def test_a_capacity_too_large_falls_back_with_a_reason():
    s = gpu_session(90)
    big = max_blocks(4 << 20)
    assert s.here("topk", big) == NOT_CLUSTER
    assert len(s.record.notes) == 1 and "cluster top-k left out" in s.record.notes[0]
    d = s.dispatch("decode", big)
    assert d.topk == "wide" and "cannot hold capacity 4194304 cells" in d.reasons["topk"]
    assert gpu_session(90, {"STRATA_TOPK_SPLIT": "1"}).dispatch("decode", big).topk == "split"


def test_cards_without_clusters_never_mention_them():
    s = gpu_session(80)
    assert s.here("topk", max_blocks(4 << 20)) == NOT_CLUSTER
    assert s.record.notes == []


@pytest.mark.parametrize("cc", [90, 100, 120])
def test_dispatch_fallback_rule(cc):
    refusal = "the cluster top-k cannot hold capacity 9 cells"
    catalog = qsa_catalog()
    assert dispatch(catalog, cc, "decode", {}, refusal).topk == "wide"
    assert dispatch(catalog, cc, "decode", {"STRATA_TOPK_SPLIT": "1"}, refusal).topk == "split"
    assert dispatch(catalog, cc, "decode", {}).topk == "cluster"
    assert dispatch(catalog, cc, "prompt", {}, refusal).topk == "reference"

