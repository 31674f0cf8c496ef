"""What a record says each of qsa's variants launched (``Measurement.launches``), on the GPU (``-m gpu``;
skipped without CuPy or a device): the kernels the launcher picked for the call, their grids, CTAs,
clusters, shared memory and programmatic launches, as they ran."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from qsa_cli.catalog import qsa_catalog
from qsa_cli.cli import main
from qsa_cli.core.geometry import (
    CLUSTER_CTAS,
    CLUSTER_SIZES,
    CLUSTER_WIDE_CTAS,
    MAX_QUERIES,
    QUARTERS_THREADS,
    RADIX_PASSES,
    max_blocks,
)
from qsa_cli.dispatch import ENV_CLUSTER_WIDE, ENV_PDL, fastest_decode_scorer
from qsa_cli.launch.topk_cluster import CLUSTER_WIDE_MIN_BLOCKS, THREADS
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import RunRecord
from qsa_cli.record.vocabulary import pair_name

QSA = qsa_catalog()


def run_record(capsys: Any, tmp_path: Path, *argv: str) -> RunRecord:
    js = tmp_path / "r.json"
    with pytest.raises(SystemExit) as ended:
        main([*argv, "--json", str(js), "--quiet"])
    assert (ended.value.code or 0) == 0, capsys.readouterr().out
    return load_record(js)


def launches_of(record: RunRecord, variant: str) -> list[dict[str, Any]]:
    """What ``variant`` launched a call, the same in each of the record's cases (a top-k run's score sets)."""
    each = [m.launches for m in record.measurements if m.variant == variant]
    assert each and all(launches is not None for launches in each), f"{variant}: no launches recorded"
    assert all(launches == each[0] for launches in each), f"{variant}: its launches differ between cases"
    return [dict(launch) for launch in each[0]]


@pytest.mark.gpu
def test_a_scorer_records_each_kernel_it_launched(cupy: Any, capsys: Any, tmp_path: Path) -> None:
    """6 queries: halve in two launches (4, then 2 queries), quarters and paired in one of 6."""
    record = run_record(capsys, tmp_path, "select-bench", "131072", "6", "3", "131072",
                        "--variants", "reference,halve,paired,quarters")
    halve = launches_of(record, "halve")
    names = QSA.get("scores", "halve").kernels
    assert [launch["kernel"] for launch in halve] == [names[3], names[1]]
    for variant in ("paired", "quarters"):
        (one,) = launches_of(record, variant)
        assert one["kernel"] == QSA.get("scores", variant).kernels[5] and one["cluster"] == 0
        assert one["grid"][0] >= 1 and one["block"] == [QUARTERS_THREADS]  # paired: 4 warps, as many
    (reference,) = launches_of(record, "reference")
    assert reference["grid"][1] == 6 and not reference["programmatic"]
    floor = [m for m in record.measurements if m.variant == "read-floor"]
    assert floor and floor[0].launches == [{"kernel": "read_floor_kernel", "grid": floor[0].launches[0]["grid"],
                                            "block": [256], "cluster": 0, "shared_bytes": 0, "programmatic": False}]
    assert 1 <= floor[0].launches[0]["grid"][0] <= 8 * record.device["sms"]  # the read's grid: at most 8 CTAs an SM


@pytest.mark.gpu
@pytest.mark.parametrize("queries", [4, 8])
def test_the_cluster_records_its_size_a_call(cupy: Any, capsys: Any, tmp_path: Path, monkeypatch: Any,
                                             queries: int) -> None:
    """A capacity of 524288 (131,074 blocks a query, over CLUSTER_WIDE_MIN_BLOCKS): 16 CTAs a query where
    every query's cluster of 16 fits at once (4 queries on an H200), else 8; QSA_CLUSTER_WIDE=0 always 8.
    The split records its five launches, those after the first programmatic on sm_90."""
    assert max_blocks(524288) >= CLUSTER_WIDE_MIN_BLOCKS
    cluster = QSA.get("topk", "cluster")
    sizes = {}
    for wide in ("", "0"):
        if wide:
            monkeypatch.setenv(ENV_CLUSTER_WIDE, wide)
        record = run_record(capsys, tmp_path, "topk-parity", "9000", str(queries), "3", "524288", "0",
                            "--variants", "split,cluster")
        (launch,) = launches_of(record, "cluster")
        ctas = launch["cluster"]
        assert ctas in CLUSTER_SIZES and launch["kernel"] == cluster.kernels[CLUSTER_SIZES.index(ctas)]
        assert launch["grid"] == [ctas, queries] and launch["block"] == [THREADS] and launch["shared_bytes"] > 0
        sizes[wide or "rule"] = ctas
        split = launches_of(record, "split")
        assert len(split) == RADIX_PASSES + 1 and len({tuple(s["grid"]) for s in split}) == 1
        assert [s["programmatic"] for s in split] == [False] + [True] * RADIX_PASSES  # sm_90: PDL on
    print(f"{queries} queries: {sizes}")
    assert sizes["0"] == CLUSTER_CTAS
    assert sizes["rule"] == (CLUSTER_WIDE_CTAS if queries == 4 else CLUSTER_CTAS)  # an H200 holds 7 of 16


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", ["1", "0"])
def test_a_window_records_its_scorers_then_its_top_ks_launches(cupy: Any, capsys: Any, tmp_path: Path,
                                                               monkeypatch: Any, pdl: str) -> None:
    """The pair's launches in the graph's order; the cluster after qsa's scorer a programmatic dependent
    launch, unless QSA_PDL=0."""
    monkeypatch.setenv(ENV_PDL, pdl)
    record = run_record(capsys, tmp_path, "window-bench", "131072", "4", "3", "262144")
    fastest = fastest_decode_scorer(QSA, 4)
    (scorer, topk) = launches_of(record, pair_name(fastest, "cluster"))
    assert scorer["kernel"] == QSA.get("scores", fastest).kernels[3]
    assert topk["kernel"] in QSA.get("topk", "cluster").kernels and topk["programmatic"] == (pdl == "1")
    halve_split = launches_of(record, "halve+split")
    assert len(halve_split) == 1 + RADIX_PASSES + 1


@pytest.mark.gpu
def test_qsa_info_says_how_many_wide_clusters_run_at_once_as_the_launcher_finds(cupy: Any, capsys: Any,
                                                                                tmp_path: Path) -> None:
    """``qsa info``'s count of clusters of 16 at once, the same at both ends of the wide capacities (on an
    H200), is the most queries a 524288-cell call runs wide: that many go to 16 CTAs, one more to 8."""
    with pytest.raises(SystemExit) as ended:
        main(["info", "--format", "json"])
    assert (ended.value.code or 0) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    (wide,) = [n for n in notes if n.startswith(f"cluster top-k: {CLUSTER_WIDE_CTAS} CTAs a query")]
    counts = {int(c) for c in re.findall(r"(\d+) at capacity \d+ cells", wide)}
    print(wide)
    assert len(counts) == 1, wide
    (at_once,) = counts
    assert 1 <= at_once < MAX_QUERIES
    for queries, ctas in ((at_once, CLUSTER_WIDE_CTAS), (at_once + 1, CLUSTER_CTAS)):
        record = run_record(capsys, tmp_path, "topk-parity", "9000", str(queries), "3", "524288", "0",
                            "--variants", "cluster")
        (launch,) = launches_of(record, "cluster")
        assert launch["cluster"] == ctas, f"{queries} queries"
