"""Variants from elsewhere in a run's catalog (an engine checkout's, a compare side's, under switches), the
sweep file's engine: block, roles from --baseline / --candidate, and qsa compare's sides: all without a GPU."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fake_engine import NEWER, SWITCHES, write_fake_engine

from qsa_cli.catalog import QSA_VARIANTS, STAGES, Catalog, Variant, qsa_catalog
from qsa_cli.cli import main
from qsa_cli.config import ConfigError, load_config
from qsa_cli.core.errors import EngineError
from qsa_cli.engine.attach import attached, check_engines
from qsa_cli.engine.domains import check_engine_switch
from qsa_cli.engine.kinds import ENGINE_KINDS
from qsa_cli.engine.launch import ENGINE_SHAPES
from qsa_cli.engine.switches import check_switched, engine_variant, parse_switched
from qsa_cli.kernels import kernel_dir
from qsa_cli.sides import SideSpec, side_kind
from qsa_cli.runs.switched import switches_of


def test_an_engine_variant_is_named_by_its_checkout_kind_and_switches() -> None:
    v = engine_variant("base", "topk-split", 90, switches=(("STRATA_EMULATE_CC", "86"),))
    assert v.name == "base.topk-split[STRATA_EMULATE_CC=86]" and v.stage == "topk" and v.launch.engine
    assert v.window_scorer == "base.scores[STRATA_EMULATE_CC=86]" and not v.qsa_own
    assert v.engine.switches == (("STRATA_EMULATE_CC", "86"),) and v.exact
    assert engine_variant("base", "topk-ref", 90).window_scorer is None  # the reference is no decode path
    assert engine_variant("base", "scores-ref", 90).stage == "scores"
    assert not engine_variant("base", "scores-tc", 90).exact


def test_a_kind_that_implies_switches_runs_under_them_in_a_child() -> None:
    """NAME.scores-dx is the dx scorer, NAME.topk-multi the multi-CTA top-k: their names carry no switch, their
    entries the switches their paths are taken under (on sm_90, past the cluster: STRATA_QSA_CLUSTER=0 too)."""
    dx = engine_variant("new", "scores-dx", 90)
    assert dx.name == "new.scores-dx" and dx.engine.switches == (("STRATA_SCORES_DX", "1"),)
    multi = engine_variant("new", "topk-multi", 90)
    assert multi.name == "new.topk-multi" and multi.window_scorer == "new.scores"
    assert multi.engine.switches == (("STRATA_QSA_CLUSTER", "0"), ("STRATA_TOPK_MULTI", "1"))
    assert engine_variant("new", "topk-multi", 86).engine.switches == (("STRATA_TOPK_MULTI", "1"),)
    emulated = engine_variant("new", "topk-multi", 90, (("STRATA_EMULATE_CC", "86"),))
    assert emulated.name == "new.topk-multi[STRATA_EMULATE_CC=86]"
    assert emulated.engine.switches == (("STRATA_EMULATE_CC", "86"), ("STRATA_TOPK_MULTI", "1"))
    catalog = qsa_catalog().adding([dx, multi, engine_variant("new", "scores", 90)])
    assert switches_of(catalog, "scores", "new.scores-dx") == (("STRATA_SCORES_DX", "1"),)
    assert switches_of(catalog, "window", "new.scores+new.topk-multi") == multi.engine.switches
    assert switches_of(catalog, "scores", "new.scores") == ()


def test_a_switch_must_be_one_the_checkout_reads_and_fit_its_kind() -> None:
    reads = SWITCHES[NEWER]
    check_switched("new.topk[STRATA_TOPK_MULTI_N=4,STRATA_QSA_EARLY_EXIT=0]", "new", reads)
    with pytest.raises(EngineError, match=r"^variant 'new.scores\[STRATA_SCORES_RS=0\]': checkout new reads no "
                                          r"STRATA_SCORES_RS \(its sources read STRATA_EMULATE_CC, STRATA_QSA_CLUSTER, "
                                          r"STRATA_QSA_EARLY_EXIT, STRATA_SCORES_DX, STRATA_SCORES_MULTI, "
                                          r"STRATA_TOPK_MULTI, STRATA_TOPK_MULTI_N\)$"):
        check_switched("new.scores[STRATA_SCORES_RS=0]", "new", reads)
    with pytest.raises(EngineError, match="topk-multi runs under STRATA_TOPK_MULTI=1 .its path., so it cannot set "
                                          "STRATA_TOPK_MULTI=0"):
        check_switched("new.topk-multi[STRATA_TOPK_MULTI=0]", "new", reads)
    check_switched("new.topk-multi[STRATA_QSA_CLUSTER=1]", "new", reads, 86)  # no cluster to hide it on sm_86
    with pytest.raises(EngineError, match="cannot set STRATA_QSA_CLUSTER=1"):
        check_switched("new.topk-multi[STRATA_QSA_CLUSTER=1]", "new", reads, 90)


def test_switched_names_are_checked_against_the_checkouts_sources_before_a_build(tmp_path: Path) -> None:
    seed, new = write_fake_engine(tmp_path / "seed"), write_fake_engine(tmp_path / "new", generation=NEWER)
    specs = (f"old={seed}", f"new={new}")
    check_engines(specs, env={}, variants=("old.scores[STRATA_SCORES_RS=0]", "new.scores-dx", "halve",
                                           "new.topk-multi[STRATA_EMULATE_CC=86]"))
    with pytest.raises(EngineError, match=r"'old.scores-dx\[STRATA_SCORES_DX=1\]': checkout old reads no "
                                          r"STRATA_SCORES_DX \(its sources read STRATA_EMULATE_CC, "):
        check_engines(specs, env={}, variants=("old.scores-dx[STRATA_SCORES_DX=1]",))
    check_engines(specs, env={}, variants=("other.scores[STRATA_ANY=1]",))  # no such checkout: named later


def test_a_checkouts_variants_are_in_the_catalog_built_with_them_only() -> None:
    own = qsa_catalog()
    added = own.adding([engine_variant("pr", kind, 90) for kind in ENGINE_KINDS])
    assert "pr.scores" in added.names("scores") and "pr.topk-cluster" in added.names("topk")
    assert ("pr.scores", "pr.topk") in added.window_pairs()
    assert switches_of(added, "window", "pr.scores+pr.topk") == ()
    assert not any(n.startswith("pr.") for stage in STAGES for n in own.names(stage))


def test_variants_that_contradict_the_catalog_are_refused() -> None:
    with pytest.raises(ValueError, match="already in the catalog"):
        qsa_catalog().adding([engine_variant("pr", "scores", 90), engine_variant("pr", "scores", 90)])
    wrong = Variant("scores", "odd", "variant", "scores.cu", ("k",), "butterfly", ENGINE_SHAPES["scores"])
    with pytest.raises(ValueError, match="an engine checkout's variants, and only they"):
        Catalog((*QSA_VARIANTS, wrong))


def test_a_side_is_every_variant_of_qsas_from_another_folder() -> None:
    own = qsa_catalog()
    side = own.side("new", kernel_dir())
    assert [v.name for v in side] == [f"new.{v.name}" for v in own.variants if v.qsa_own]
    assert all(v.role == "variant" and v.folder == kernel_dir() and not v.qsa_own for v in side)
    split = next(v for v in side if v.name == "new.split")
    assert split.window_scorer == "new.halve"
    both = own.adding(side)
    # the folder's kernels are one compile per file of that folder, apart from the installed ones
    assert both.kernels_of("topk.cu", kernel_dir()) == both.kernels_of("topk.cu")


def test_switches_are_parsed_sorted_and_checked() -> None:
    assert parse_switched("b.topk[STRATA_TOPK_OLD=1, STRATA_EMULATE_CC=86]") == (
        "b.topk", (("STRATA_EMULATE_CC", "86"), ("STRATA_TOPK_OLD", "1")))
    assert parse_switched("b.topk") == ("b.topk", ())
    assert parse_switched("b.topk[STRATA_FAST=on-2.5]") == ("b.topk", (("STRATA_FAST", "on-2.5"),))  # read or not: later
    with pytest.raises(EngineError, match="'FAST=1' is not a switch K=V"):
        parse_switched("b.topk[FAST=1]")
    with pytest.raises(EngineError, match="'STRATA_TOPK_OLD' is not a switch K=V"):
        parse_switched("b.topk[STRATA_TOPK_OLD]")
    with pytest.raises(EngineError, match=r"^variant 'b.topk\[STRATA_TOPK_OLD=2\]': STRATA_TOPK_OLD must be 0 or 1 "
                                          r"\(got '2'\)$"):
        parse_switched("b.topk[STRATA_TOPK_OLD=2]")
    with pytest.raises(EngineError, match="STRATA_EMULATE_CC must be a compute capability such as 86 .got 'sm_86'."):
        parse_switched("b.topk[STRATA_EMULATE_CC=sm_86]")
    with pytest.raises(EngineError, match="STRATA_TOPK_MULTI_N must be a positive count .got '0'."):
        parse_switched("b.topk[STRATA_TOPK_MULTI_N=0]")


@pytest.mark.parametrize("value", ["a b", "x+y", "$(id)", "é", "9" * 65])
def test_a_switch_qsa_does_not_know_takes_a_value_of_a_safe_form(value: str) -> None:
    with pytest.raises(EngineError, match="^STRATA_NEW must be 1-64 letters, digits, '_', '.' or '-' "):
        check_engine_switch("STRATA_NEW", value)
    check_engine_switch("STRATA_NEW", "fast-2.5_x")


@pytest.mark.parametrize(("name", "value"), [("STRATA_QSA_CLUSTER", "banana"), ("STRATA_SCORES_RS", "2"),
                                             ("STRATA_EMULATE_CC", "eighty-six")])
def test_the_engines_switches_in_the_environment_are_checked_before_a_checkout_is_opened(name, value) -> None:
    """The engine reads them in this process; a value outside its domain would run the engine's reading of it."""
    with pytest.raises(EngineError, match=f"^{name} must be"):
        with attached(("no/such/checkout",), 90, env={name: value}):
            pytest.fail("attached")


def test_a_sweep_names_its_checkouts_relative_to_its_folder(tmp_path: Path) -> None:
    sweep = tmp_path / "configs" / "pr.yaml"
    sweep.parent.mkdir()
    sweep.write_text("stages: [scores, topk]\ncontexts: [9000]\nqueries: [2]\ncapacity: 16384\n"
                     "engine:\n  base: ../strata\n  pr: /abs/strata@my-branch\n"
                     "variants:\n  scores: [reference, base.scores, pr.scores]\n  topk: [pr.topk-split]\n")
    config = load_config(sweep)
    assert config.engines == (f"base={(tmp_path / 'configs').resolve() / '../strata'}", "pr=/abs/strata@my-branch")
    assert config.variants == {"scores": ("reference", "base.scores", "pr.scores"), "topk": ("pr.topk-split",)}


def test_a_sweep_may_not_name_an_engine_it_lacks(tmp_path: Path) -> None:
    sweep = tmp_path / "s.yaml"
    sweep.write_text("stages: [scores]\ncontexts: [9000]\nqueries: [2]\ncapacity: 16384\n"
                     "variants:\n  scores: [base.scores]\n")
    with pytest.raises(ConfigError, match=r"s.yaml:6: a scores variant must be one of .*\(got 'base.scores'\)"):
        load_config(sweep)


def test_baseline_and_candidate_set_the_runs_roles(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    with pytest.raises(SystemExit) as ended:
        main(["select-bench", "9003", "3", "1", "16384", "--backend", "cpu", "--variants", "reference,halve",
              "--baseline", "reference", "--candidate", "halve", "--json", str(js)])
    out = capsys.readouterr().out
    assert ended.value.code == 0, out
    record = json.loads(js.read_text())
    assert record["settings"]["roles"]["scores"] == {"reference": "reference", "baseline": "reference",
                                                     "candidate": "halve"}
    # a name applies to every stage that has it: "reference" to both, "halve" to the scorer only
    assert record["settings"]["roles"]["topk"] == {"reference": "reference", "baseline": "reference", "candidate": "split"}
    assert {m["variant"] for m in record["measurements"]} == {"reference", "halve"}
    assert any(p["subject"] == "halve" and p["against"] == "reference" for p in record["parity"])
    said = " ".join(out.split())  # whatever the width folded
    assert "before reference" in said and "after halve" in said


def test_a_side_is_an_engine_checkout_a_kernels_folder_or_a_qsa_checkout(tmp_path: Path) -> None:
    engine = write_fake_engine(tmp_path / "strata")
    assert side_kind(engine) == ("engine", engine)
    kernels = tmp_path / "copy"
    shutil.copytree(kernel_dir(), kernels)
    assert side_kind(kernels) == ("kernels", kernels.resolve())
    qsa = tmp_path / "qsa"
    shutil.copytree(kernel_dir(), qsa / "kernels")
    assert side_kind(qsa) == ("kernels", (qsa / "kernels").resolve())
    with pytest.raises(ValueError, match="neither an engine checkout"):
        side_kind(tmp_path)
    with pytest.raises(ValueError, match="no such folder"):
        side_kind(tmp_path / "none")


def test_a_sides_name_is_given_or_its_role() -> None:
    assert SideSpec.parse("pr=../strata@feature", "candidate") == SideSpec("pr", "../strata", "feature")
    assert SideSpec.parse("../strata", "base") == SideSpec("base", "../strata", None)
    assert SideSpec.parse("../strata@HEAD~1", "base").revision == "HEAD~1"
