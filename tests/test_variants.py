"""The variant registry (qsa_cli/variants.py): declared once, read by everything; a variant added with
one entry runs everywhere (here on the CPU backend, where its CPU model stands for its kernel)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qsa_cli import variants
from qsa_cli.cli import main
from qsa_cli.config import load_config
from qsa_cli.kernels import kernel_dir


def test_every_stage_has_one_reference_baseline_and_candidate() -> None:
    for stage in variants.STAGES:
        roles = [v.role for v in variants.stage_variants(stage)]
        for role in ("reference", "baseline", "candidate"):
            assert roles.count(role) == 1, (stage, role)


def test_every_kernel_is_in_its_source() -> None:
    for stage in variants.STAGES:
        for v in variants.stage_variants(stage):
            text = (kernel_dir() / v.source).read_text()
            for name in v.kernels:
                assert name.partition("<")[0] in text, f"{v.name}: {v.source} has no {name}"


def test_window_pairs_and_cards_come_from_the_entries() -> None:
    assert variants.window_pairs() == (("multi", "wide"), ("halve", "split"), ("halve", "cluster"))
    assert "cluster" not in variants.runs_on("topk", 89) and "cluster" in variants.runs_on("topk", 90)


@pytest.mark.parametrize(("change", "message"), [
    ({"stage": "prefill"}, "stage must be one of"),
    ({"model": "bitonic"}, "model must be one of"),
    ({"launch": "warp-per-query"}, "launch must be one of"),
    ({"name": "wide"}, "already registered"),
    ({"role": "candidate"}, "already has its candidate"),
])
def test_an_entry_that_contradicts_the_registry_is_refused(change: dict, message: str) -> None:
    entry = dict(stage="topk", name="wide-copy", role="variant", source="topk.cu", kernels=("block_topk_wide_kernel",),
                 model="wide", launch="one-cta", threads=1024)
    with pytest.raises(ValueError, match=message):
        variants.register(variants.Variant(**{**entry, **change}))


@pytest.fixture
def wide_copy():
    """docs/adding-a-variant.md's example: a second one-CTA top-k of the wide kernel's arithmetic."""
    v = variants.register(variants.Variant("topk", "wide-copy", "variant", "topk.cu", ("block_topk_wide_kernel",),
                                           "wide", "one-cta", 1024, window_scorer="multi"))
    yield v
    variants.unregister("topk", "wide-copy")


def test_an_added_variant_is_run_checked_timed_and_reported(capsys, tmp_path: Path, wide_copy) -> None:
    record = tmp_path / "run.json"
    with pytest.raises(SystemExit) as ended:
        main(["topk-parity", "3001", "2", "2", "4096", "0", "--backend", "cpu", "--json", str(record)])
    out, err = capsys.readouterr()
    assert ended.value.code == 0, err
    data = json.loads(record.read_text())
    assert {m["variant"] for m in data["measurements"]} >= {"wide-copy"}
    against = {p["against"] for p in data["parity"] if p["subject"] == "wide-copy"}
    assert against == {"reference", "cpu-oracle", "guard zones", "inputs"}
    assert variants.window_pairs()[-1] == ("multi", "wide-copy")
    assert variants.kernels_of("topk.cu").count("block_topk_wide_kernel") == 1  # one compile, each kernel once


def test_a_sweep_may_name_an_added_variant(tmp_path: Path, wide_copy) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("stages: [topk]\ncontexts: [3001]\nqueries: [2]\ncapacity: 4096\nvariants:\n  topk: [wide-copy]\n")
    assert load_config(path).variants_for("topk") == ("wide-copy",)
