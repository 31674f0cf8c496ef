"""A user's own adapter end to end on the GPU (``--engine ... --adapter ...``): the example adapter
(tests/fake_adapter.py) built with the fake engine (tests/fake_engine.py), its exact entries bit for bit
against qsa's reference and the CPU models through select-bench, topk-parity and window-bench, its scratch
guarded, and its inexact entry never reported as the same bits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import fresh_seed
from fake_adapter import ENTRIES, write_adapter
from fake_builds import FakeBuilds
from fake_engine import write_fake_engine
from test_engine import needs_nvcc
from test_engine_cli_gpu import run

from qsa_cli.engine.adapter import CHECKOUT_ADAPTER

pytestmark = [pytest.mark.gpu, needs_nvcc]


@pytest.fixture(autouse=True)
def piped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(scope="module")
def tree(fake_builds: FakeBuilds) -> dict[str, Path]:
    """The fake engine and the example adapter beside it (built beforehand)."""
    return {"engine": fake_builds.adapter_checkout, "adapter": fake_builds.adapter_file}


def checks_of(rec: dict[str, Any], subject: str) -> dict[str, list[bool]]:
    """Each check of ``subject`` by what it was against: its results."""
    out: dict[str, list[bool]] = {}
    for p in rec["parity"]:
        if p["subject"] == subject:
            out.setdefault(p["against"], []).append(p["equal"])
    return out


def test_select_bench_runs_the_adapters_exact_scorer_bit_for_bit(capsys: Any, tree: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "select-bench", "131072", "4", "5", "262144", "--seed", str(fresh_seed() % 1000),
                         "--engine", f"fake={tree['engine']}", "--adapter", str(tree["adapter"]),
                         "--variants", "reference,multi,fake.scores,fake.scores-all", "--json", str(js))
    assert code == 0, out + err
    rec = json.loads(js.read_text())
    checks = checks_of(rec, "fake.scores-all")
    assert {"reference", "cpu-model", "guard zones", "inputs"} <= set(checks)
    assert all(all(results) for results in checks.values())
    assert any(m["variant"] == "fake.scores-all" and m["samples_us"] for m in rec["measurements"])
    engine = rec["settings"]["engines"][0]
    assert engine["adapter"]["path"] == str(tree["adapter"].resolve()) and engine["adapter"]["origin"] == "--adapter"
    assert [e["name"] for e in engine["adapter"]["entries"]] == list(ENTRIES)
    assert {f"fake.{e}" for e in ENTRIES} <= set(engine["variants"])


def test_an_inexact_entry_is_not_reported_as_the_same_bits(capsys: Any, tree: dict[str, Path],
                                                           tmp_path: Path) -> None:
    """The bfloat16 scorer differs from the reference almost everywhere: no check may call its bits the
    reference's or the model's (how its error is judged is the measures' part)."""
    js = tmp_path / "r.json"
    run(capsys, "select-bench", "131072", "4", "3", "262144", "--engine", f"fake={tree['engine']}",
        "--adapter", str(tree["adapter"]), "--variants", "reference,fake.scores-bf16", "--json", str(js))
    rec = json.loads(js.read_text())
    assert any(m["variant"] == "fake.scores-bf16" for m in rec["measurements"])
    checks = checks_of(rec, "fake.scores-bf16")
    assert not any(checks.get("reference", [])) and not any(checks.get("cpu-model", []))
    assert all(checks["guard zones"]) and all(checks["inputs"])


def test_topk_parity_runs_the_adapters_top_k_with_its_scratch(capsys: Any, tree: dict[str, Path],
                                                              tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    for count in ("0", "1"):  # a decode call and a prompt call (the ABI passes no active count)
        code, out, err = run(capsys, "topk-parity", "131072", "3", "5", "262144", count, "--engine",
                             f"fake={tree['engine']}", "--adapter", str(tree["adapter"]),
                             "--variants", "reference,fake.topk-ref,fake.topk-staged", "--json", str(js))
        assert code == 0, out + err
        checks = checks_of(json.loads(js.read_text()), "fake.topk-staged")
        assert {"reference", "cpu-oracle", "guard zones", "inputs"} <= set(checks)
        assert all(all(results) for results in checks.values())


def test_window_bench_follows_the_entry_its_top_k_names(capsys: Any, tree: dict[str, Path], tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "window-bench", "131072", "4", "5", "262144", "--engine", f"fake={tree['engine']}",
                         "--adapter", str(tree["adapter"]), "--json", str(js))
    assert code == 0, out + err
    rec = json.loads(js.read_text())
    pair = "fake.scores-all+fake.topk-staged"
    assert pair in {m["variant"] for m in rec["measurements"]}
    checks = checks_of(rec, pair)
    assert {"cpu-oracle", "guard zones", "inputs"} <= set(checks) and all(all(r) for r in checks.values())


def test_the_checkouts_own_adapter_is_picked_up(capsys: Any, tree: dict[str, Path], tmp_path: Path) -> None:
    own = write_fake_engine(tmp_path / "own")
    write_adapter(own / CHECKOUT_ADAPTER, tree["adapter"].read_text())
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "topk-parity", "131072", "3", "3", "262144", "0", "--engine", f"own={own}",
                         "--variants", "reference,own.topk-staged", "--json", str(js))
    assert code == 0, out + err
    rec = json.loads(js.read_text())
    assert rec["settings"]["engines"][0]["adapter"]["origin"] == "checkout"
    assert all(all(r) for r in checks_of(rec, "own.topk-staged").values())
