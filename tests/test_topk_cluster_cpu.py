"""The cluster top-k launcher's shared-memory sizing and refusals (no device needed)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import QSA, topk_launch

from qsa_cli.core.errors import SwitchError
from qsa_cli.core.geometry import (
    CLUSTER_CHUNK_KEYS,
    CLUSTER_CTAS,
    CLUSTER_MIN_CC,
    CLUSTER_SIZES,
    CLUSTER_WIDE_CTAS,
    MAX_CAPACITY,
    SELECT_CAP,
    GeometryError,
    cluster_slice_blocks,
    max_blocks,
    window_steps,
)
from qsa_cli.launch.shape import Card
from qsa_cli.launch.topk_cluster import (
    CLUSTER,
    MAX_CHUNKS,
    STATIC_SMEM_BYTES,
    ClusterUnavailable,
    cluster_ctas,
    cluster_fits,
    cluster_max_capacity,
    cluster_smem_bytes,
    require_cluster,
)

H200_OPTIN = 232448  # sharedMemPerBlockOptin of an H100 / H200: 227 KB
SPEC_CAPACITIES = (9000, 135160, 135176, 262144, 524288, 1 << 20)


def test_smem_is_a_slice_of_keys_padded_to_16_bytes_and_two_words_a_chunk_and_two_more() -> None:
    mb = max_blocks(524288)  # 131074 blocks: slices of 16385 keys, read 4 at a time, in 129 chunks of 128
    assert cluster_smem_bytes(mb) == (16388 + 2 * 130) * 4
    assert cluster_smem_bytes(CLUSTER_CTAS * 100) == (100 + 2 * 2) * 4
    assert cluster_smem_bytes(CLUSTER_CTAS * 100 + 1) == (104 + 2 * 2) * 4
    assert cluster_smem_bytes(CLUSTER_CTAS * 103) == (104 + 2 * 2) * 4
    assert cluster_smem_bytes(CLUSTER_CTAS * 129) == (132 + 2 * 3) * 4


def test_the_emit_scans_at_most_one_chunk_a_thread() -> None:
    huge = 1 << 30  # shared memory no card has: the chunk count bounds the slice
    cap = cluster_max_capacity(huge)
    assert cluster_fits(max_blocks(cap), huge) and not cluster_fits(max_blocks(cap + 1), huge)
    assert cluster_slice_blocks(max_blocks(cap)) == MAX_CHUNKS * CLUSTER_CHUNK_KEYS


@pytest.mark.parametrize("optin", [H200_OPTIN, 101376, 166912, 49152])  # sm_90, sm_86/89, sm_80, a 48 KB card
def test_max_capacity_is_the_fit_boundary(optin: int) -> None:
    cap = cluster_max_capacity(optin)
    assert cluster_fits(max_blocks(cap), optin)
    assert not cluster_fits(max_blocks(cap + 1), optin)


def test_h200_holds_every_spec_capacity_and_refuses_the_largest() -> None:
    cap = cluster_max_capacity(H200_OPTIN)
    assert 1_520_000 < cap < 1_540_000, cap  # about 47.9K keys a CTA, 8 CTAs, 4 cells a block
    for c in SPEC_CAPACITIES:
        assert cluster_fits(max_blocks(c), H200_OPTIN), c
    assert not cluster_fits(max_blocks(MAX_CAPACITY), H200_OPTIN)


def test_require_returns_the_dynamic_bytes() -> None:
    mb = max_blocks(524288)
    assert require_cluster(90, mb, H200_OPTIN) == cluster_smem_bytes(mb)
    assert require_cluster(100, mb, H200_OPTIN, active_blocks=2500) == cluster_smem_bytes(2500)


@pytest.mark.parametrize("cc", [70, 75, 80, 86, 89])
def test_refuses_cards_before_sm90(cc: int) -> None:
    with pytest.raises(ClusterUnavailable, match=f"needs sm_{CLUSTER_MIN_CC} or newer.*sm_{cc}$"):
        require_cluster(cc, max_blocks(9000), H200_OPTIN)


def test_refuses_a_capacity_past_the_limit_in_one_line() -> None:
    cap = cluster_max_capacity(H200_OPTIN) + 1
    mb = max_blocks(cap)
    with pytest.raises(ClusterUnavailable) as err:
        require_cluster(90, mb, H200_OPTIN)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"capacity {cap - cap % 4} cells" in msg  # the capacity max_blocks stands for
    assert f"{cluster_smem_bytes(mb) + STATIC_SMEM_BYTES} B" in msg and f"{H200_OPTIN} B" in msg
    assert f"at most {cluster_max_capacity(H200_OPTIN)} cells" in msg
    assert isinstance(err.value, ValueError)


def test_a_prompt_call_is_sized_by_its_active_blocks() -> None:
    mb = max_blocks(MAX_CAPACITY)  # too large as a decode call ...
    with pytest.raises(ClusterUnavailable, match="capacity"):
        require_cluster(90, mb, H200_OPTIN)
    assert require_cluster(90, mb, H200_OPTIN, active_blocks=2501) == cluster_smem_bytes(2501)  # ... fine as a prompt
    with pytest.raises(ClusterUnavailable, match=f"{mb - 1} active blocks"):
        require_cluster(90, mb, H200_OPTIN, active_blocks=mb - 1)


def test_launcher_checks_arrays_before_touching_a_device() -> None:
    nq, mb = 2, max_blocks(9000)
    steps = window_steps(9000, nq)
    ids = np.zeros((nq, SELECT_CAP), np.int32)
    with pytest.raises(GeometryError, match="scores must be"):
        topk_launch("cluster", np.zeros((nq, mb), np.float64), steps, ids)
    with pytest.raises(GeometryError, match="ids must be"):
        topk_launch("cluster", np.zeros((nq, mb), np.float32), steps, ids[:, :-1])
    with pytest.raises(GeometryError, match="active_blocks"):
        topk_launch("cluster", np.zeros((nq, mb), np.float32), steps, ids, mb + 1)


def test_kernel_names() -> None:
    assert QSA.get("topk", "cluster").kernels == ("block_topk_cluster_kernel", "block_topk_cluster_wide_kernel")
    assert CLUSTER_SIZES == (CLUSTER_CTAS, CLUSTER_WIDE_CTAS) == (8, 16)


H200_WIDE_AT_ONCE = 7  # clusters of 16 1,024-thread CTAs an H200 runs at once (cuOccupancyMaxActiveClusters)


@pytest.mark.parametrize("capacity, nq, ctas", [
    (420000, 4, 16), (524288, 7, 16), (1 << 20, 1, 16), (327672, 2, 16),  # from 81,920 blocks, all clusters at once
    (327668, 2, 8), (262144, 4, 8), (131072, 1, 8),  # fewer blocks: the wide rounds cost what the slices save
    (524288, 8, 8), (1 << 20, 16, 8),  # more queries than clusters of 16 at once: two waves
])
def test_a_call_goes_wide_from_81920_blocks_when_its_clusters_fit_at_once(capacity: int, nq: int, ctas: int) -> None:
    assert cluster_ctas(max_blocks(capacity), nq, H200_WIDE_AT_ONCE, {}) == ctas


def test_the_switch_forces_either_size_where_the_card_runs_the_wide_one() -> None:
    mb = max_blocks(131072)
    assert cluster_ctas(mb, 8, H200_WIDE_AT_ONCE, {"QSA_CLUSTER_WIDE": "1"}) == CLUSTER_WIDE_CTAS
    assert cluster_ctas(max_blocks(524288), 1, H200_WIDE_AT_ONCE, {"QSA_CLUSTER_WIDE": "0"}) == CLUSTER_CTAS
    assert cluster_ctas(max_blocks(524288), 1, H200_WIDE_AT_ONCE, {"QSA_CLUSTER_WIDE": ""}) == CLUSTER_WIDE_CTAS
    for switches in ({}, {"QSA_CLUSTER_WIDE": "1"}):  # a card that runs no cluster of 16
        assert cluster_ctas(max_blocks(524288), 1, 0, switches) == CLUSTER_CTAS
    with pytest.raises(SwitchError, match="QSA_CLUSTER_WIDE must be 0 or 1"):
        cluster_ctas(mb, 1, H200_WIDE_AT_ONCE, {"QSA_CLUSTER_WIDE": "yes"})


def test_a_wide_slice_is_half_as_many_keys() -> None:
    mb = max_blocks(524288)
    assert cluster_smem_bytes(mb, CLUSTER_WIDE_CTAS) == (8196 + 2 * 66) * 4  # ceil(131074 / 16) = 8193 keys, 65 chunks
    assert cluster_smem_bytes(mb, CLUSTER_WIDE_CTAS) < cluster_smem_bytes(mb) // 2 + 64


def test_the_shape_refuses_what_require_cluster_refuses() -> None:
    """The cluster's launch shape carries its refusal: the oldest card, and a capacity past the card's memory."""
    card = Card(90, H200_OPTIN)
    assert CLUSTER.min_cc == CLUSTER_MIN_CC and QSA.get("topk", "cluster").min_cc == CLUSTER_MIN_CC
    assert CLUSTER.refusal(card, max_blocks(1 << 20)) is None
    assert "cannot hold capacity 4194304 cells" in CLUSTER.refusal(card, max_blocks(4 << 20))
    assert "cannot hold 2501 active blocks" in CLUSTER.refusal(Card(90, 8192), max_blocks(9000), 2501)
    assert "needs sm_90 or newer" in CLUSTER.refusal(Card(80, H200_OPTIN), max_blocks(9000))
