"""qsa info on a machine without a GPU: the catalog, the engine's dispatch on each card and an engine
checkout's header, which need no device, and a device section that says why there is none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_engine import FUNCTIONS, NEWER, SEED, SWITCHES, write_fake_engine

from qsa_cli.catalog import qsa_catalog
from qsa_cli.cli import main
from qsa_cli.core.geometry import CLUSTER_CTAS, CLUSTER_WIDE_CTAS, capacity_of, max_blocks
from qsa_cli.device import probe
from qsa_cli.dispatch import dispatch
from qsa_cli.engine.checkout import HOST_PATHS
from qsa_cli.kernels import kernel_dir
from qsa_cli.launch import topk_cluster
from qsa_cli.output.info import info_blocks, info_csv, kernel_names
from qsa_cli.output.layout import text_of
from qsa_cli.record.schema import InfoReport
from qsa_cli.runs.info import wide_cluster_note

no_device = pytest.mark.skipif(probe().available, reason="a machine without a CUDA device")
CARDS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")


def info(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    with pytest.raises(SystemExit) as ended:
        main(["info", "--format", "json", *args])
    out, err = capsys.readouterr()
    assert ended.value.code == 0 and err == "", err
    return json.loads(out)


@no_device
def test_info_without_a_device_lists_the_catalog_and_the_dispatch_of_every_card(capsys, monkeypatch) -> None:
    for name in ("STRATA_SCORES_HALVE", "STRATA_TOPK_SPLIT", "QSA_PDL"):
        monkeypatch.delenv(name, raising=False)
    report = info(capsys)
    assert report["no_device"] == probe().reason and report["no_device"].startswith(("CuPy is not installed",
                                                                                       "no CUDA device"))
    # nothing of a device is claimed: no device, clocks, compiled kernels or dispatch "here"
    assert (report["device"], report["clocks"], report["kernels"], report["dispatch"]) == ({}, None, [], {})
    catalog = qsa_catalog()
    assert [(v["stage"], v["name"], v["role"], v["kernels"], v["launch"], v["min_cc"]) for v in report["catalog"]] == [
        (v.stage, v.name, v.role, list(v.kernels), v.launch.name, v.min_cc) for v in catalog.variants]
    assert set(CARDS) <= set(report["architectures"])
    for card, kinds in report["architectures"].items():
        cc = int(card.removeprefix("sm_"))
        assert kinds == {kind: dispatch(catalog, cc, kind, {}).summary(kind) for kind in ("decode", "prompt")}
    assert report["architectures"]["sm_75"]["decode"]["topk"] == "split"
    assert report["architectures"]["sm_90"]["decode"]["topk"] == "cluster"
    assert report["engines"] == [] and report["switches"] == {}


@no_device
def test_the_switches_set_change_the_dispatch_shown_and_are_recorded(capsys, monkeypatch) -> None:
    monkeypatch.setenv("STRATA_TOPK_SPLIT", "1")
    report = info(capsys)
    assert report["switches"] == {"STRATA_TOPK_SPLIT": "1"}
    assert report["architectures"]["sm_86"]["decode"]["topk"] == "split"
    assert "STRATA_TOPK_SPLIT=1 turns the split top-k on" in report["architectures"]["sm_86"]["decode"]["reasons"]["topk"]


@no_device
def test_info_reads_an_engine_checkouts_header_without_building_it(capsys, monkeypatch, tmp_path: Path) -> None:
    root = write_fake_engine(tmp_path / "strata", without=("qsa_block_topk_split", "qsa_topk_split_bytes"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc: info needs none to read the header
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("STRATA_QSA_CLUSTER", "0")
    report = info(capsys, "--engine", f"pr={root}")
    (engine,) = report["engines"]
    assert (engine["name"], engine["path"], engine["revision"], engine["nvcc"]) == ("pr", str(root), None, None)
    assert engine["functions"] == [f for f in FUNCTIONS[SEED] if "split" not in f]
    assert engine["lacks"] == [f for f in HOST_PATHS if f not in engine["functions"]]
    assert engine["switches"] == list(SWITCHES[SEED]) and engine["implies"] == {card: {} for card in engine["variants"]}
    # no split (the header lacks it) and no cluster (STRATA_QSA_CLUSTER=0) on any card
    assert set(CARDS) <= set(engine["variants"])
    assert all(v == ["pr.scores", "pr.scores-ref", "pr.topk", "pr.topk-ref"] for v in engine["variants"].values())
    assert report["switches"] == {"STRATA_QSA_CLUSTER": "0"}
    assert "engine checkout pr: no nvcc found on PATH or in $CUDA_HOME/bin to build it" in report["notes"]
    monkeypatch.delenv("STRATA_QSA_CLUSTER")
    sm90 = info(capsys, "--engine", f"pr={root}")["engines"][0]["variants"]["sm_90"]
    assert sm90 == ["pr.scores", "pr.scores-ref", "pr.topk", "pr.topk-ref", "pr.topk-cluster"]


@no_device
def test_kernels_without_a_device_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["info", "--kernels", str(kernel_dir())])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"qsa: error: --kernels {kernel_dir()}: no device here to compile its kernels"), err


def test_without_a_device_the_text_says_so_and_lists_the_catalog() -> None:
    catalog = [{"stage": "topk", "name": "cluster", "role": "variant", "source": "topk_cluster.cu",
                "kernels": ["block_topk_cluster_kernel"], "launch": "cluster", "min_cc": 90, "model": "cluster",
                "exact": True}]
    decode = {"kind": "decode", "scores": "multi", "topk": "wide", "reasons": {"scores": "old scorer", "topk": "old"}}
    report = InfoReport({}, None, [], {}, [], no_device="CuPy is not installed (cupy)", catalog=catalog,
                        architectures={"sm_86": {"decode": decode}}, switches={"QSA_PDL": "0"})
    text = text_of(info_blocks(report), 100)
    assert text.startswith("Device: none here: CuPy is not installed (cupy). What follows needs none.\n")
    assert "Kernels as compiled" not in text and "dispatches here" not in text
    rows = [line.split("│")[1:-1] for line in text.splitlines() if line.startswith("│")]
    assert [c.strip() for c in rows[0]] == ["topk", "cluster", "variant", "block_topk_cluster_kernel", "cluster",
                                            "sm_90", "cluster"]
    assert [c.strip() for c in rows[1]] == ["sm_86", "decode", "multi", "wide", "old scorer; old"]
    assert text.rstrip().endswith("Switches set: QSA_PDL=0.")


def test_an_inexact_variant_is_listed_as_measured() -> None:
    catalog = [{"stage": "scores", "name": "e.scores-tc", "role": "variant", "source": "", "kernels": [],
                "launch": "engine-scores", "min_cc": 0, "model": "butterfly", "exact": False}]
    report = InfoReport({}, None, [], {}, [], no_device="CuPy is not installed (cupy)", catalog=catalog)
    assert "model butterfly (inexact: measured)" in " ".join(text_of(info_blocks(report), 80).split())
    assert "variant,scores e.scores-tc,exact,False" in info_csv(report)


def test_a_templates_instances_are_named_once() -> None:
    assert kernel_names([f"k<{n}>" for n in range(1, 5)]) == "k<1..4>"
    assert kernel_names(["p<0>", "p<1>", "count", "emit"]) == "p<0..1>, count, emit"
    assert kernel_names(["a<1>", "a<3>", "b"]) == "a<1>, a<3>, b"
    assert kernel_names([]) == ""


@no_device
def test_info_names_a_newer_checkouts_paths_switches_and_what_each_variant_implies(capsys, monkeypatch,
                                                                                  tmp_path: Path) -> None:
    root = write_fake_engine(tmp_path / "strata", generation=NEWER)
    for name in ("STRATA_QSA_CLUSTER", "STRATA_EMULATE_CC", "STRATA_SCORES_DX", "STRATA_TOPK_MULTI"):
        monkeypatch.delenv(name, raising=False)
    report = info(capsys, "--engine", f"new={root}")
    (engine,) = report["engines"]
    assert engine["lacks"] == ["qsa_topk_split_bytes", "qsa_block_topk_split"]
    assert "qsa_block_scores.decode_dx" in engine["functions"] and "qsa_block_topk.multi_scratch" in engine["functions"]
    assert engine["switches"] == list(SWITCHES[NEWER])
    assert engine["variants"]["sm_90"] == ["new.scores", "new.scores-ref", "new.scores-dx", "new.scores-tc", "new.topk",
                                           "new.topk-ref", "new.topk-cluster", "new.topk-multi"]
    assert engine["implies"]["sm_90"] == {"new.scores-dx": ["STRATA_SCORES_DX=1"],
                                          "new.topk-multi": ["STRATA_TOPK_MULTI=1", "STRATA_QSA_CLUSTER=0"]}
    assert engine["implies"]["sm_86"] == {"new.scores-dx": ["STRATA_SCORES_DX=1"],
                                          "new.topk-multi": ["STRATA_TOPK_MULTI=1"]}
    text = text_of(info_blocks(InfoReport(**{k: v for k, v in report.items() if k not in ("schema", "schema_version")})),
                   100)
    said = " ".join(text.split())  # the prose folds at 100 columns
    assert ("its qsa_select.hpp declares qsa_block_scores, qsa_block_topk, qsa_block_topk_cluster, qsa_block_topk_ref, "
            "qsa_block_scores_tc, qsa_topk_multi_scratch_ints, qsa_block_scores.decode_dx, "
            "qsa_block_topk.multi_scratch; it lacks qsa_topk_split_bytes, qsa_block_topk_split (no variant of "
            "theirs); its sources read the switches STRATA_EMULATE_CC, STRATA_QSA_CLUSTER, STRATA_QSA_EARLY_EXIT, "
            "STRATA_SCORES_DX, STRATA_SCORES_MULTI, STRATA_TOPK_MULTI, STRATA_TOPK_MULTI_N;") in said
    assert all(len(line) <= 100 for line in text.splitlines())
    assert ("sm_90 variants new.scores, new.scores-ref, new.scores-dx (STRATA_SCORES_DX=1), new.scores-tc, new.topk, "
            "new.topk-ref, new.topk-cluster, new.topk-multi (STRATA_TOPK_MULTI=1, STRATA_QSA_CLUSTER=0) ") in said
    assert ("sm_75 variants new.scores, new.scores-ref, new.scores-dx (STRATA_SCORES_DX=1), new.topk, new.topk-ref, "
            "new.topk-multi (STRATA_TOPK_MULTI=1) ") in said


def test_the_wide_cluster_note_names_the_count_at_both_ends_or_none(monkeypatch) -> None:
    """runs/info.py's note on the cluster's 16 CTAs a query: the count at the first capacity that may go wide
    and at the largest the cluster holds (as the driver answers: faked here), or none where it never may."""
    asked = []
    monkeypatch.setattr(topk_cluster, "wide_clusters_at_once",
                        lambda module, variant, blocks: asked.append(blocks) or (7 if blocks < 200000 else 5))
    first = topk_cluster.CLUSTER_WIDE_MIN_BLOCKS
    note = wide_cluster_note(None, None, 1048579)
    assert asked == [first, max_blocks(1048579)]
    assert note.endswith(f"this device runs at once 7 at capacity {capacity_of(first)} cells, "
                         "5 at capacity 1048579 cells"), note
    assert note.startswith(f"cluster top-k: {CLUSTER_WIDE_CTAS} CTAs a query (else {CLUSTER_CTAS}) from {first} ")
    asked.clear()
    assert wide_cluster_note(None, None, capacity_of(first) - 1).endswith("no capacity the cluster holds here reaches that many blocks")
    assert asked == []
