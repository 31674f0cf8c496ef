import numpy as np
import pytest

from qsa_cli.core import geometry as g
from qsa_cli.kernels import header_defines


def test_header_constants_agree_with_geometry():
    defines = header_defines()
    assert g.header_mismatches(defines) == []
    # every geometry constant the kernels need is defined in the header
    for name in ("IDX_DIM", "IDX_HEADS", "BLOCK_CELLS", "TOP_K", "SELECT_CAP", "SPLIT_CHUNK_BLOCKS",
                 "SPLIT_MIN_CHUNK_BLOCKS", "CLUSTER_CTAS", "CLUSTER_WIDE_CTAS", "CLUSTER_LANE_KEYS",
                 "CLUSTER_CHUNK_KEYS", "CLUSTER_HIST_BUFFERS", "CLUSTER_GATHER_BLOCKS", "CLUSTER_GATHER_ALIGN",
                 "CLUSTER_GATHER_CHUNKS", "PDL_MIN_CC", "CLUSTER_MIN_CC"):
        assert f"QSA_{name}" in defines


def test_header_mismatch_is_reported():
    assert g.header_mismatches({"QSA_TOP_K": "1024"}) == ["QSA_TOP_K = 1024 but geometry.TOP_K = 2048"]


def test_selection_width_and_max_blocks():
    assert g.SELECT_CAP == 2051
    assert g.selection_width(100) == 100
    assert g.selection_width(2051) == 2051
    assert g.selection_width(524288) == 2051
    assert g.max_blocks(524288) == 131074
    assert g.capacity_of(g.max_blocks(9000)) == 9000


def test_window_steps_follow_the_spec():
    steps = g.window_steps(9003, 4)
    assert steps.dtype == np.int32
    assert steps.tolist() == [
        [8999, 9000, 2250, 2051],
        [9000, 9001, 2250, 2051],
        [9001, 9002, 2250, 2051],
        [9002, 9003, 2250, 2051],
    ]
    g.validate_steps(steps, g.max_blocks(9003))
    small = g.window_steps(5, 2)
    assert small.tolist() == [[3, 4, 1, 4], [4, 5, 1, 5]]


def test_call_active_blocks():
    assert g.Call(9000, 8, 9000).active_blocks == 0
    assert g.Call(9001, 64, 9001, prompt=True).active_blocks == 9001 // 4 + 1


def test_cluster_slices_are_ceil_of_an_eighth_or_a_sixteenth():
    assert [g.cluster_slice_blocks(b) for b in (1, 8, 9, 131073)] == [1, 1, 2, 16385]
    assert [g.cluster_slice_blocks(b, g.CLUSTER_WIDE_CTAS) for b in (1, 16, 17, 131073)] == [1, 1, 2, 8193]


def test_blocks_read_is_the_largest_n_bid_plus_one():
    assert g.blocks_read(g.window_steps(9003, 4)) == 2251  # n_bid 2250 in every query: its tail block too
    assert g.blocks_read(g.window_steps(9004, 2)) == 2252  # 9003 -> n_bid 2250, 9004 -> 2251
    prompt = g.Call(9001, 64, 9001, prompt=True)
    assert g.blocks_read(prompt.steps) == prompt.active_blocks


@pytest.mark.parametrize(
    "ctx,nq,cap,message",
    [
        (0, 1, 10, "context must be > 0"),
        (10, 0, 10, "queries must be > 0"),
        (3, 4, 10, "context must be >= queries"),
        (100, 1, 99, "capacity must be >= context"),
        (100, 1, (1 << 24) + 4, "capacity must be <="),
    ],
)
def test_bad_calls(ctx, nq, cap, message):
    with pytest.raises(g.GeometryError, match=message):
        g.Call(ctx, nq, cap)


def test_query_limits():
    g.check_queries(8, prompt=False)
    with pytest.raises(g.GeometryError, match="at most 8"):
        g.check_queries(9, prompt=False)
    g.check_queries(64, prompt=True)


@pytest.mark.parametrize(
    "column,value,rule",
    [(1, 7, "n_kv == pos \\+ 1"), (2, 5, "n_bid == n_kv // 4"), (3, 9, "width == min"), (0, -1, "pos >= 0")],
)
def test_validate_steps_names_the_broken_rule(column, value, rule):
    steps = g.window_steps(9000, 3)
    steps[1, column] = value
    with pytest.raises(g.GeometryError, match=rf"steps\[1\] = .* breaks {rule}"):
        g.validate_steps(steps, g.max_blocks(9000))


def test_validate_steps_capacity_rule():
    steps = g.window_steps(9000, 1)
    with pytest.raises(g.GeometryError, match="n_bid < max_blocks - 1"):
        g.validate_steps(steps, g.max_blocks(8000))


def test_block_weights():
    assert g.block_weights(10, 4).tolist() == [4, 4, 2, 0]
    assert g.block_weights(8, 4).tolist() == [4, 4, 0, 0]
    for n_kv in range(0, 23):  # every tail, with blocks to spare, just enough, and too few for the cells
        for n_blocks in range(0, 8):
            want = [min(max(n_kv - b * g.BLOCK_CELLS, 0), g.BLOCK_CELLS) for b in range(n_blocks)]
            got = g.block_weights(n_kv, n_blocks)
            assert got.dtype == np.int32 and got.tolist() == want, (n_kv, n_blocks)
