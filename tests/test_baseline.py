"""Baselines kept per card (record/baselines.py, ``qsa baseline``, ``qsa gate --baseline-dir``): promote
stores a run whole under its card's key and never replaces one, refuses what is no baseline; list shows each
card's; the gate takes the run's card's and says which file, and a card without one is exit 2 with the
command that makes one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from record_factory import measurement, parity, record, scores_case

from qsa_cli.cli import main
from qsa_cli.commands import baseline as baseline_command
from qsa_cli.device import DeviceProbe
from qsa_cli.output.gate import compare, matched_engines, renamed
from qsa_cli.record import baselines
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import RunRecord
from qsa_cli.record.vocabulary import LAST_CALL

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results" / "h200-2026-11-30"
FIRST, SECOND = RESULTS / "ci.json", RESULTS / "ci-2.json"
H200 = "nvidia-h200-sm90-140gib"


@pytest.fixture(autouse=True)
def no_device_here(monkeypatch):
    """This machine's device as promote sees it: none, unless a test gives one."""
    monkeypatch.setattr(baseline_command, "probe", lambda device_id=0: DeviceProbe(False, "no CUDA device: test"))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def edited(tmp_path: Path, source: Path, name: str, **changes) -> Path:
    """A copy of a record with some top-level fields changed."""
    data = json.loads(source.read_text())
    data.update(changes)
    out = tmp_path / name
    out.write_text(json.dumps(data))
    return out


def test_a_card_key_is_the_device_and_its_engines() -> None:
    device = load_record(FIRST).device
    assert baselines.card_key(device, []) == H200
    assert baselines.card_key(device, ["strata@main"]) == baselines.card_key(device, ["pr"]) == f"{H200}+engine"
    assert baselines.card_key(device, ["strata", "Pr Branch"]) == f"{H200}+pr-branch+strata"
    assert baselines.card_key({**device, "memory_bytes": 80 * 2**30, "name": "NVIDIA H100 80GB HBM3"}, []) == \
        "nvidia-h100-80gb-hbm3-sm90-80gib"
    assert baselines.card_key({}, []) is None


def test_promote_stores_each_run_and_moves_current(capsys, tmp_path) -> None:
    folder = tmp_path / "baselines"
    code, out, err = run(capsys, "baseline", "promote", str(FIRST), "--dir", str(folder))
    first = folder / H200 / "2026-11-30T005332Z-528ef52dfd0b-dirty.json"
    assert code == 0 and out == f"{first}: the current baseline of card {H200}\n" and "no device here" in err
    assert load_record(first).to_dict() == load_record(FIRST).to_dict()
    code, out, _ = run(capsys, "baseline", "promote", str(SECOND), "--dir", str(folder))
    second = folder / H200 / "2026-11-30T005343Z-528ef52dfd0b-dirty.json"
    assert code == 0 and out.endswith(f"; it was {first.name}\n")
    assert baselines.current(folder, H200) == second and first.exists()  # the earlier run stays
    assert sorted(p.name for p in (folder / H200).iterdir()) == [first.name, second.name, baselines.CURRENT]
    assert run(capsys, "baseline", "promote", str(SECOND), "--dir", str(folder))[0] == 0  # the same run again: as it was


def test_promote_never_replaces_a_stored_run(capsys, tmp_path) -> None:
    folder = tmp_path / "baselines"
    assert run(capsys, "baseline", "promote", str(FIRST), "--dir", str(folder))[0] == 0
    other = json.loads(FIRST.read_text())
    other["notes"] = ["another run of the same second and commit"]
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other))
    code, _, err = run(capsys, "baseline", "promote", str(path), "--dir", str(folder))
    assert code == 2 and "holds another run of the same date and commit: it is never replaced" in err
    assert load_record(baselines.current(folder, H200)).to_dict() == load_record(FIRST).to_dict()


@pytest.mark.parametrize(("changes", "why"), [
    ({"incomplete": True}, "the run was interrupted (incomplete)"),
    ({"backend": "cpu"}, "a cpu-backend run: its times are not a card's"),
    ({"measurements": []}, "the run timed nothing"),
    ({"device": {"name": "NVIDIA H200"}}, "the run's device has no name, compute capability or memory size"),
])
def test_promote_refuses_what_is_no_baseline(capsys, tmp_path, changes, why) -> None:
    path = edited(tmp_path, FIRST, "run.json", **changes)
    code, out, err = run(capsys, "baseline", "promote", str(path), "--dir", str(tmp_path / "b"))
    assert code == 2 and not out and why in err and err.count("\n") == 1 and not (tmp_path / "b").exists()


def test_promote_refuses_a_failing_run(capsys, tmp_path) -> None:
    data = json.loads(FIRST.read_text())
    data["parity"][0]["equal"] = False
    path = tmp_path / "failing.json"
    path.write_text(json.dumps(data))
    code, _, err = run(capsys, "baseline", "promote", str(path), "--dir", str(tmp_path / "b"))
    assert code == 2 and "the run fails its own checks" in err


def test_promote_refuses_a_run_of_another_card_than_this_machines(capsys, tmp_path, monkeypatch) -> None:
    h100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "memory_bytes": 85 * 10**9}
    monkeypatch.setattr(baseline_command, "probe", lambda device_id=0: DeviceProbe(True, info=h100))
    code, _, err = run(capsys, "baseline", "promote", str(FIRST), "--dir", str(tmp_path / "b"))
    assert code == 2 and f"the run's card is {H200}, this machine's device 0 is nvidia-h100-80gb-hbm3-sm90-79gib" in err
    monkeypatch.setattr(baseline_command, "probe", lambda device_id=0: DeviceProbe(True, info=load_record(FIRST).device))
    code, _, err = run(capsys, "baseline", "promote", str(FIRST), "--dir", str(tmp_path / "b"))
    assert code == 0 and not err


def test_list_shows_each_cards_current_baseline(capsys, tmp_path) -> None:
    folder = tmp_path / "baselines"
    folder.mkdir()
    code, out, _ = run(capsys, "baseline", "list", str(folder))
    assert code == 0 and f"qsa baseline promote RUN.json --dir {folder} makes one" in " ".join(out.split())
    h100 = {**load_record(FIRST).device, "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * 2**30}
    for path in (FIRST, edited(tmp_path, FIRST, "h100.json", device=h100, git_commit="aaaabbbbcccc")):
        assert run(capsys, "baseline", "promote", str(path), "--dir", str(folder))[0] == 0
    code, out, _ = run(capsys, "baseline", "list", str(folder), "--format", "json")
    listed = json.loads(out)
    assert code == 0 and [k["key"] for k in listed] == ["nvidia-h100-80gb-hbm3-sm90-80gib", H200]
    code, out, _ = run(capsys, "baseline", "list", str(folder), "--markdown")
    assert code == 0 and "| nvidia-h100-80gb-hbm3-sm90-80gib | NVIDIA H100 80GB HBM3 (sm_90) | qsa aaaabbbbcccc, " in out
    assert "| not locked, read: SM 1980 MHz" in out


@pytest.mark.parametrize(("argv", "why"), [
    (("baseline", "promote", str(FIRST)), "promote RUN.json needs --dir DIR"),
    (("baseline", "list", str(RESULTS), "--dir", "x"), "--dir is promote's"),
    (("baseline", "promote", str(FIRST), "--dir", "x", "--markdown"), "--markdown is list's"),
    (("baseline", "list", "no-such-folder"), "list no-such-folder: no such folder"),
])
def test_baseline_usage_errors(capsys, argv, why) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and not out and why in err


def test_the_gate_takes_the_runs_cards_baseline_and_says_which(capsys, tmp_path) -> None:
    folder = tmp_path / "baselines"
    h100 = {**load_record(FIRST).device, "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * 2**30}
    for path in (FIRST, edited(tmp_path, SECOND, "h100.json", device=h100)):
        assert run(capsys, "baseline", "promote", str(path), "--dir", str(folder))[0] == 0
    code, out, err = run(capsys, "gate", "--baseline-dir", str(folder), "--results", str(SECOND))
    taken = folder / H200 / "2026-11-30T005332Z-528ef52dfd0b-dirty.json"
    assert code == 0 and err == f"qsa: gate: baseline {taken} (the current one of card {H200})\n"
    assert out.rstrip().splitlines()[-1] == "GATE PASS (76 SAME, 13 REFERENCE)"


def test_a_card_without_a_baseline_is_exit_2_with_the_command_that_makes_one(capsys, tmp_path) -> None:
    folder = tmp_path / "baselines"
    folder.mkdir()
    code, out, err = run(capsys, "gate", "--baseline-dir", str(folder), "--results", str(SECOND))
    assert code == 2 and not out and err.count("\n") == 1
    assert f"no baseline for this card ({H200})" in err
    assert f"qsa baseline promote run.json --dir {folder}" in err and "qsa sweep " in err


@pytest.mark.parametrize(("argv", "why"), [
    (("gate", "--results", str(SECOND)), "Missing option '--baseline': give --baseline FILE or --baseline-dir DIR"),
    (("gate", "--results", str(SECOND), "--baseline", str(FIRST), "--baseline-dir", "."), "not both"),
    (("gate", "--results", str(SECOND), "--baseline-dir", "no-such-folder"), "--baseline-dir no-such-folder: no such"),
])
def test_the_gate_takes_one_baseline(capsys, argv, why) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and not out and why in err


# ---- an engine's variants between baseline and run ---------------------------------------------------------------


def engine_run(name: str, halve_us: float, seed: int) -> RunRecord:
    """A run of one engine checkout named ``name``: its scorer and a window pair, checked, and qsa's reference."""
    rng = np.random.default_rng(seed)
    case = scores_case(32768, 4)
    ms = [measurement("scores", "reference", case, 20.0, rng, noise=0.002),
          measurement("scores", f"{name}.scores", case, halve_us, rng, noise=0.002),
          measurement("window", f"{name}.scores+{name}.topk", case, 30.0, rng, noise=0.002)]
    hashes = {"inputs": "i" * 64, "output": "o" * 64}
    checks = [parity("scores", case, f"{name}.scores", "reference"),
              parity("scores", case, f"{name}.scores", "inputs", hashes=hashes),
              parity("scores", case, f"{name}.scores ({LAST_CALL})", f"{name}.scores")]
    card = {"name": "NVIDIA GeForce RTX 2080 Ti", "compute_capability": "7.5", "memory_bytes": 11 * 2**30}
    return record(ms, checks, device=card, settings={"iterations": 50, "engines": [{"name": name, "commit": f"{seed:012d}"}]})


def test_one_engine_is_matched_by_kind_whatever_its_name() -> None:
    baseline, run_record = engine_run("strata@main", 10.0, 1), engine_run("strata@pr", 10.0, 2)
    result = compare(run_record, baseline)
    assert result.passed and {r.verdict for r in result.rows} == {"SAME"}
    assert {r.variant for r in result.rows} == {"reference", "strata@pr.scores", "strata@pr.scores+strata@pr.topk"}
    assert result.notes == ("the baseline's engine strata@main is this run's strata@pr: its variants "
                            "strata@main.KIND are matched as strata@pr.KIND",)
    slower = compare(engine_run("strata@pr", 13.0, 2), baseline)
    assert [(r.variant, r.verdict) for r in slower.rows if r.failed] == [("strata@pr.scores", "SLOW")]
    changed = engine_run("strata@pr", 10.0, 2)
    changed.parity[1].hashes = {"inputs": "i" * 64, "output": "x" * 64}
    assert [(r.variant, r.verdict) for r in compare(changed, baseline).rows if r.failed] == \
        [("strata@pr.scores", "BITS-CHANGED")]
    assert baselines.record_key(run_record) == baselines.record_key(baseline) == "nvidia-geforce-rtx-2080-ti-sm75-11gib+engine"


def test_several_engines_are_matched_by_name() -> None:
    two = engine_run("base", 10.0, 1)
    two.settings["engines"] = [{"name": "base"}, {"name": "pr"}]
    assert matched_engines(two, engine_run("main", 10.0, 2)) == {} and matched_engines(two, two) == {}


def test_renamed_names_each_part_of_a_pair_and_a_checks_subject() -> None:
    names = {"main": "pr"}
    assert renamed("main.scores+main.topk-split", names) == "pr.scores+pr.topk-split"
    assert renamed(f"main.scores[STRATA_X=1] ({LAST_CALL})", names) == f"pr.scores[STRATA_X=1] ({LAST_CALL})"
    assert renamed("halve+mainline.topk", names) == "halve+mainline.topk"
