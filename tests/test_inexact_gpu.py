"""Variants declared not bitwise on the GPU: copies of qsa's halve scorer and wide top-k, joined to the run's
catalog as an engine checkout's variants join it, declared inexact. Their bits are the reference's, yet they are
measured (never "the same bits"), in select-bench and in window-bench's graph of the pair."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from qsa_cli import session
from qsa_cli.catalog import QSA_VARIANTS, Catalog
from qsa_cli.cli import main
from qsa_cli.record.vocabulary import GUARD_ZONES, INPUTS, LAST_CALL

pytestmark = pytest.mark.gpu

SCORER, TOPK = "approx", "approx-wide"


@pytest.fixture
def inexact_copies(cupy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    of = {(v.stage, v.name): v for v in QSA_VARIANTS}
    copies = (dataclasses.replace(of["scores", "halve"], name=SCORER, role="variant", exact=False),
              dataclasses.replace(of["topk", "wide"], name=TOPK, role="variant", window_scorer=SCORER, exact=False))
    monkeypatch.setattr(session, "qsa_catalog", lambda kernels=None: Catalog(QSA_VARIANTS, kernels).adding(copies))


def run(capsys: Any, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out, err = capsys.readouterr()
    return info.value.code, out + err


def _integrity_only(record: dict[str, Any], subject: str) -> bool:
    return sorted(p["against"] for p in record["parity"] if p["subject"] in (subject, f"{subject} ({LAST_CALL})")) \
        == sorted([GUARD_ZONES, INPUTS, subject])


@pytest.mark.usefixtures("inexact_copies")
def test_an_inexact_scorer_with_the_references_bits_is_measured(capsys: Any, tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out = run(capsys, "select-bench", "32768", "2", "3", "32768", "--variants", f"reference,halve,{SCORER}",
                    "--json", str(js), "--limit", f"{SCORER}:max_ulps=0", "--limit", "min_identical_fraction=1")
    assert code == 0, out
    record = json.loads(js.read_text())
    assert _integrity_only(record, SCORER)
    rows = [a for a in record["agreements"] if a["subject"] == SCORER]
    assert {a["against"] for a in rows} == {"reference", "cpu-model"}
    assert all(a["scores"]["differing"] == 0 and a["selection"]["identical_queries"] == 2 for a in rows)
    assert all(v["passed"] for a in rows for v in a["limits"]) and "inexact: 0 of" in " ".join(out.split())


@pytest.mark.usefixtures("inexact_copies")
def test_window_bench_measures_a_pair_with_an_inexact_part(capsys: Any, tmp_path: Path) -> None:
    js = tmp_path / "w.json"
    code, out = run(capsys, "window-bench", "32768", "2", "3", "32768", "--variants", f"{SCORER},{TOPK}",
                    "--json", str(js), "--limit", "min_id_fraction=1")
    assert code == 0, out
    record = json.loads(js.read_text())
    pair = f"{SCORER}+{TOPK}"
    assert _integrity_only(record, pair)
    (row,) = [a for a in record["agreements"] if a["subject"] == pair]
    assert row["against"] == "cpu-oracle" and row["scores"] is None
    assert row["selection"]["identical_queries"] == 2 and [v["passed"] for v in row["limits"]] == [True]
