"""A run's session (qsa_cli/session.py): what it fixes when it opens (the catalog, the roles, the variants
picked, qsa compare's pairs) and the one place the record's settings are written. qsa compare's sides of
kernels folders are opened as on the GPU, and run on the CPU models."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest

from qsa_cli.catalog import STAGES, qsa_catalog
from qsa_cli.config import load_config
from qsa_cli.kernels import kernel_dir
from qsa_cli.record.schema import RunRecord
from qsa_cli.runs.compare import compare_run
from qsa_cli.session import Session, Settings, _add_parts, _cast
from qsa_cli.sides import SideSpec
from qsa_cli.stages.common import Measurer


def test_the_records_settings_are_written_in_one_place_with_the_schemas_names() -> None:
    s = Session(Settings(backend="cpu"), RunRecord("select-bench", [], "cpu"))
    s.record_settings(dispatch=s.dispatch_summary("decode"))
    assert s.record.settings["dispatch"]["topk"] == "split"  # sm_75 on the CPU backend, where the new kernels default
    with pytest.raises(ValueError, match="no run setting 'dispatched'"):
        s.record_settings(dispatched={})


@contextlib.contextmanager
def compare_session(tmp_path: Path):
    """A compare session of two copies of qsa's kernels, its sides opened as the GPU backend opens them."""
    for side in ("old", "new"):
        shutil.copytree(kernel_dir(), tmp_path / side)
    sides = (SideSpec("base", str(tmp_path / "old"), None), SideSpec("cand", str(tmp_path / "new"), None))
    s = Session(Settings(backend="cpu", warmup=0, sides=sides, iters=1), RunRecord("compare", [], "cpu"),
                run_measurer=Measurer(1))
    with contextlib.ExitStack() as stack:
        _cast(s, _add_parts(s, stack))
        yield s


def test_a_compare_session_pairs_the_sides_and_casts_the_first_pair(tmp_path: Path) -> None:
    with compare_session(tmp_path) as s:
        own = qsa_catalog()
        assert s.compared.pairs["scores"] == tuple((f"base.{n}", f"cand.{n}") for n in own.names("scores"))
        assert s.compared.pairs["window"][0] == ("base.multi+base.wide", "cand.multi+cand.wide")
        assert s.roles["topk"] == {"reference": "reference", "baseline": "base.reference", "candidate": "cand.reference"}
        assert s.record.settings["roles"] == s.roles and [d["name"] for d in s.record.settings["sides"]] == ["base", "cand"]
        assert set(s.picked) == {n for stage in STAGES for pair in s.compared.pairs[stage] for n in pair} | {"reference"}
        assert s.catalog.get("topk", "cand.split").folder == (tmp_path / "new").resolve()


def test_a_compare_run_checks_each_candidate_against_its_base(tmp_path: Path) -> None:
    sweep = tmp_path / "s.yaml"
    sweep.write_text("iterations: 1\nstages: [scores, topk]\ncontexts: [4099]\nqueries: [2]\ncapacity: 8192\n")
    with compare_session(tmp_path) as s:
        compare_run(s, None, load_config(sweep))
        record = s.record
    pairs = {(p["base"], p["candidate"]) for p in record.settings["compare"]["pairs"]}
    checked = {(p.against, p.subject) for p in record.parity if p.equal}
    assert pairs - {p for p in pairs if "+" in p[0]} <= checked  # every stage's pair but the window's (a GPU's)
    assert {m.variant for m in record.measurements} == set(s.picked)
