"""The catalog of a run's variants (qsa_cli/catalog.py): qsa's own declared once in one table, a run's catalog
built from parts and never changed; a variant added with one entry of that table runs everywhere (here on the
CPU backend, where its CPU model stands for its kernel)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import QSA, older_kernels

from qsa_cli import catalog
from qsa_cli.catalog import QSA_VARIANTS, STAGES, Catalog, Variant, defined_in, qsa_catalog
from qsa_cli.cli import main
from qsa_cli.config import load_config
from qsa_cli.core.errors import VariantError
from qsa_cli.dispatch import fastest_decode_scorer
from qsa_cli.engine.launch import ENGINE_SHAPES
from qsa_cli.kernels import kernel_dir
from qsa_cli.launch.scores import HALVING, STRIDING
from qsa_cli.launch.topk import ONE_CTA

# docs/adding-a-variant.md's examples: a reused kernel each, a second one-CTA wide top-k and a second
# striding scorer
WIDE_COPY = Variant("topk", "wide-copy", "variant", "topk.cu", ("block_topk_wide_kernel",), "wide", ONE_CTA, 1024,
                    window_scorer="multi")
MULTI_COPY = Variant("scores", "multi-copy", "variant", "scores.cu", ("block_scores_multi_kernel",), "butterfly",
                     STRIDING)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    out, err = capsys.readouterr()
    return ended.value.code, out, err


def test_every_stage_has_one_reference_baseline_and_candidate() -> None:
    for stage in STAGES:
        roles = [v.role for v in qsa_catalog().stage(stage)]
        for role in ("reference", "baseline", "candidate"):
            assert roles.count(role) == 1, (stage, role)


def test_every_kernel_is_in_its_source() -> None:
    for v in QSA_VARIANTS:
        text = (kernel_dir() / v.source).read_text()
        for name in v.kernels:
            assert name.partition("<")[0] in text, f"{v.name}: {v.source} has no {name}"


def test_window_pairs_and_cards_come_from_the_entries() -> None:
    own = qsa_catalog()
    # qsa's pairs first; an entry added at the end of the table adds its pair after them (adding-a-variant.md)
    assert own.window_pairs()[:3] == (("multi", "wide"), ("halve", "split"), ("halve", "cluster"))
    assert "cluster" not in own.runs_on("topk", 89) and "cluster" in own.runs_on("topk", 90)
    assert own.with_launch("topk", "cluster") == "cluster" and own.roles("scores")["candidate"] == "halve"


@pytest.mark.parametrize(("change", "message"), [
    ({"stage": "prefill"}, "stage must be one of"),
    ({"model": "bitonic"}, "model must be one of"),
    ({"launch": HALVING}, "its launch shape 'halving' launches a scores kernel"),
    ({"launch": ENGINE_SHAPES["topk"]}, "an engine checkout's variants, and only they"),
    ({"name": "wide"}, "already in the catalog"),
    ({"role": "candidate"}, "already has its candidate"),
])
def test_an_entry_that_contradicts_the_table_is_refused(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Catalog((*QSA_VARIANTS, dataclasses.replace(WIDE_COPY, **change)))


def test_a_catalog_is_built_from_parts_and_never_changed() -> None:
    own = qsa_catalog(kernel_dir())
    bigger = own.adding([WIDE_COPY], {"lib": object()})
    assert "wide-copy" in bigger.names("topk") and "wide-copy" not in own.names("topk")
    assert bigger.kernels == own.kernels == kernel_dir() and set(bigger.libraries) == {"lib"} and not own.libraries
    with pytest.raises(dataclasses.FrozenInstanceError):
        bigger.variants = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        bigger.libraries["other"] = object()  # type: ignore[index]
    with pytest.raises(ValueError, match="unknown topk variant 'fast'"):
        own.get("topk", "fast")


@pytest.fixture
def wide_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """qsa's table, on a copy, with a second one-CTA top-k of the wide kernel's arithmetic."""
    monkeypatch.setattr(catalog, "QSA_VARIANTS", (*QSA_VARIANTS, WIDE_COPY))


def test_an_added_variant_is_run_checked_timed_and_reported(capsys, tmp_path: Path, wide_copy) -> None:
    record = tmp_path / "run.json"
    code, out, err = run(capsys, "topk-parity", "3001", "2", "2", "4096", "0", "--backend", "cpu", "--json", str(record))
    assert code == 0, err
    data = json.loads(record.read_text())
    assert {m["variant"] for m in data["measurements"]} >= {"wide-copy"}
    against = {p["against"] for p in data["parity"] if p["subject"] == "wide-copy"}
    assert against == {"reference", "cpu-oracle", "guard zones", "inputs"}
    assert qsa_catalog().window_pairs()[-1] == ("multi", "wide-copy")
    assert qsa_catalog().kernels_of("topk.cu").count("block_topk_wide_kernel") == 1  # one compile, each kernel once


def test_a_sweep_may_name_an_added_variant(tmp_path: Path, wide_copy) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("stages: [topk]\ncontexts: [3001]\nqueries: [2]\ncapacity: 4096\nvariants:\n  topk: [wide-copy]\n")
    assert load_config(path).variants_for("topk", qsa_catalog()) == ("wide-copy",)


def test_a_reused_kernel_scorer_added_to_the_table_runs_everywhere(capsys, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """One entry, nothing else: the selftest checks it against the model, select-bench and a sweep run it,
    and the default runs (the baseline, the candidate and the dispatched) are what they were."""
    from qsa_cli.runs import selftest

    monkeypatch.setattr(catalog, "QSA_VARIANTS", (*QSA_VARIANTS, MULTI_COPY))
    monkeypatch.setattr(selftest, "SELFTEST_SCORER_CASES", ((4099, 2, 8192),))
    monkeypatch.setattr(selftest, "SELFTEST_TOPK_CASES", ((4099, 8192),))
    js = tmp_path / "selftest.json"
    code, out, err = run(capsys, "selftest", "--json", str(js))
    assert code == 0, err
    assert any(p["subject"] == "multi-copy" and p["against"] == "cpu-model" and p["equal"]
               for p in json.loads(js.read_text())["parity"])
    js = tmp_path / "bench.json"
    code, out, err = run(capsys, "select-bench", "4099", "2", "2", "8192", "--backend", "cpu", "--variants",
                         "reference,multi-copy", "--json", str(js))
    assert code == 0, err
    assert {m["variant"] for m in json.loads(js.read_text())["measurements"]} == {"reference", "multi-copy"}
    code, out, err = run(capsys, "select-bench", "4099", "2", "2", "8192", "--backend", "cpu", "--json", str(js))
    assert code == 0 and {m["variant"] for m in json.loads(js.read_text())["measurements"]} == {"multi", "halve", "quarters"}
    sweep = tmp_path / "s.yaml"
    sweep.write_text("iterations: 2\nwarmup: 0\nstages: [scores]\ncontexts: [4099]\nqueries: [2]\ncapacity: 8192\n"
                     "variants:\n  scores: [multi, multi-copy]\n")
    code, out, err = run(capsys, "sweep", str(sweep), "--backend", "cpu", "--json", str(js))
    assert code == 0, err
    assert {m["variant"] for m in json.loads(js.read_text())["measurements"]} == {"multi", "multi-copy"}


def test_a_kernels_folder_has_every_source_the_table_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qsa_cli.core.errors import KernelError

    sources = catalog.kernel_sources()  # the header, the table's sources (a new file's too), the timer's
    assert sources[0] == "qsa_common.cuh" and sources[-1] == "bench.cu"
    assert set(sources[1:-1]) == {v.source for v in QSA_VARIANTS} >= {"scores.cu", "topk.cu", "topk_cluster.cu"}
    assert catalog.check_kernels(kernel_dir()) == kernel_dir().resolve()
    monkeypatch.setattr(catalog, "QSA_VARIANTS", (*QSA_VARIANTS, dataclasses.replace(WIDE_COPY, source="topk_new.cu")))
    with pytest.raises(KernelError, match="no topk_new.cu"):
        catalog.check_kernels(kernel_dir())


def test_an_older_kernels_folder_holds_the_variants_it_defines(tmp_path: Path) -> None:
    """A run's catalog from a copy that lacks a variant's kernels holds the others (a compare side's too), and
    a dispatch that names the missing one is a VariantError of one line (tests/test_gpu_scores.py runs it)."""
    assert all(defined_in(v, kernel_dir()) for v in QSA_VARIANTS)
    old = older_kernels(tmp_path / "old")
    assert not defined_in(QSA.get("scores", "quarters"), old) and defined_in(QSA.get("scores", "paired"), old)
    assert qsa_catalog(old).names("scores") == tuple(n for n in QSA.names("scores") if n != "quarters")
    assert qsa_catalog(old).names("topk") == QSA.names("topk")
    assert [v.name for v in QSA.side("old", old) if v.stage == "scores"] == ["old.reference", "old.multi", "old.halve",
                                                                             "old.paired"]
    assert fastest_decode_scorer(qsa_catalog(old), 5) == "paired"
    with pytest.raises(VariantError) as missing:
        fastest_decode_scorer(qsa_catalog(old), 4)
    assert str(missing.value) == ("qsa's quarters scores kernels are not in the run's kernel sources (an older copy? "
                                  "name its variants with --variants)")
