"""window-bench on the GPU (``-m gpu``; skipped without CuPy or a device): qsa's top-k variants that follow its
candidate scorer also follow the fastest scorer at the call's count (dispatch.FASTEST_DECODE_SCORERS), each pair
the CPU oracle's ids on the CPU model's scores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from qsa_cli.catalog import qsa_catalog
from qsa_cli.cli import main
from qsa_cli.dispatch import fastest_decode_scorer
from qsa_cli.record.load import load_record
from qsa_cli.record.vocabulary import CPU_ORACLE, pair_name


@pytest.mark.gpu
@pytest.mark.parametrize("queries", [4, 5])
def test_window_bench_pairs_qsas_top_k_with_the_fastest_scorer_at_the_count(cupy: Any, capsys, tmp_path: Path,
                                                                            queries: int) -> None:
    js = tmp_path / "w.json"
    with pytest.raises(SystemExit) as ended:
        main(["window-bench", "131072", str(queries), "3", "262144", "--json", str(js), "--quiet"])
    assert (ended.value.code or 0) == 0, capsys.readouterr().out
    record = load_record(js)
    catalog = qsa_catalog()
    fastest = fastest_decode_scorer(catalog, queries)
    here = set(catalog.runs_on("topk", int(record.device["compute_capability"].replace(".", ""))))
    followers = {topk for scorer, topk in catalog.window_pairs() if scorer == "halve"} & here
    wanted = {pair_name(fastest, topk) for topk in followers} | {pair_name("halve", topk) for topk in followers}
    assert followers and wanted <= {m.variant for m in record.measurements}
    for pair in wanted:
        checks = [p for p in record.parity if p.subject == pair]
        assert {p.against for p in checks} >= {CPU_ORACLE, "guard zones", "inputs"} and all(p.equal for p in checks)
