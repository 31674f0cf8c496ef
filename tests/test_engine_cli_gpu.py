"""The commands with an engine checkout's variants (--engine, qsa compare), end to end on the GPU, over the
fake engine tree (tests/fake_engine.py) in both API generations: its variants must give qsa's bits (the
newer one's dx scorer and multi-CTA top-k, each in a child under the switches its kind implies), its TF32
scorer is timed and compared with nothing, the flipped one must fail naming the first differing position,
and compare must call the slowed one SLOW and, across the generations, judge what both sides have."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import fresh_seed
from fake_builds import ENGINES, FakeBuilds
from fake_engine import FLIPPED_ENTRY

from qsa_cli.cli import main
from qsa_cli.kernels import kernel_dir

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def piped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain environment: stdout is captured (no terminal) and no COLUMNS, so the output is laid out for
    rich's 80 columns, as in a CI log."""
    monkeypatch.delenv("COLUMNS", raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def failure_lines(out: str) -> list[str]:
    """The numbered lines a failed command ends with, one per failure (never folded)."""
    return [line for line in out.splitlines() if re.match(r"(COMPARE |GATE )?FAIL \d+/\d+: ", line)]


@pytest.fixture(scope="module")
def trees(fake_builds: FakeBuilds) -> dict[str, Path]:
    """Fake checkouts by their names in fake_builds.ENGINES (built beforehand): plain, its decode scorer
    slowed, its dispatched top-k's and scorer's bits flipped, the newer generation plain and flipped on its
    dx scorer's and its multi-CTA top-k's paths."""
    return {name: fake_builds.engine(name) for name in ENGINES}


def record(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def variants_of(rec: dict[str, Any]) -> set[str]:
    return {m["variant"] for m in rec["measurements"]}


def test_select_bench_runs_the_checkouts_scorers_beside_qsas(capsys: Any, trees: dict[str, Path],
                                                            tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    seed = str(fresh_seed() % 1000)
    code, out, err = run(capsys, "select-bench", "131072", "4", "5", "262144", "--seed", seed,
                         "--engine", f"fake={trees['plain']}", "--json", str(js))
    assert code == 0, out + err
    rec = record(js)
    assert {"fake.scores", "fake.scores-ref", "multi", "halve", "reference"} <= variants_of(rec)
    checked = {(p["subject"], p["against"]) for p in rec["parity"]}
    for v in ("fake.scores", "fake.scores-ref"):
        assert {(v, "reference"), (v, "cpu-model"), (v, "guard zones"), (v, "inputs")} <= checked
    # what an engine's host functions launch is theirs to choose: the record names qsa's launches only
    assert all((m["launches"] is None) == m["variant"].startswith("fake.") for m in rec["measurements"]
               if m["variant"] != "read-floor")
    assert all(p["equal"] for p in rec["parity"])
    engine = rec["settings"]["engines"][0]
    assert engine["name"] == "fake" and engine["path"] == str(trees["plain"].resolve())
    assert "src/kernels/cuda/qsa_select.cu" in engine["sources"] and engine["arch"].startswith("sm_")
    assert "fake.scores" in engine["variants"]
    shown = out.split()  # every name whole at 80 columns: a row of its own, never folded inside
    assert {"fake.scores", "fake.scores-ref"} <= set(shown) and out.rstrip().splitlines()[-1] == "PASS"


def test_a_flipped_bit_fails_at_its_position(capsys: Any, trees: dict[str, Path], tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "select-bench", "131072", "3", "2", "262144", "--engine",
                         f"flip={trees['flip-scores']}", "--json", str(js))
    assert code == 1, out + err
    failed = [p for p in record(js)["parity"] if not p["equal"]]
    assert failed and {p["subject"] for p in failed} == {"flip.scores"}
    assert all(p["detail"].startswith(f"query 0 block {FLIPPED_ENTRY}:") for p in failed)
    lines = failure_lines(out)
    assert len(lines) == len(failed) and all("flip.scores vs " in line and f": query 0 block {FLIPPED_ENTRY}:" in line
                                             for line in lines)


def test_topk_parity_runs_the_checkouts_top_k(capsys: Any, trees: dict[str, Path], tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "topk-parity", "524288", "8", "5", "524288", "0", "--engine",
                         f"fake={trees['plain']}", "--json", str(js))
    assert code == 0, out + err
    rec = record(js)
    ran = variants_of(rec)
    assert {"fake.topk", "fake.topk-ref"} <= ran
    assert set(rec["settings"]["engines"][0]["variants"]) >= {"fake.topk", "fake.topk-ref"}
    for v in ran & {"fake.topk", "fake.topk-ref", "fake.topk-cluster", "fake.topk-split"}:
        against = {p["against"] for p in rec["parity"] if p["subject"] == v}
        assert {"reference", "cpu-oracle", "guard zones", "inputs"} <= against
    assert all(p["equal"] for p in rec["parity"])


def test_a_flipped_top_k_fails_in_topk_parity(capsys: Any, trees: dict[str, Path], tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "topk-parity", "131072", "3", "2", "262144", "0", "--engine",
                         f"flip={trees['flip-topk']}", "--variants", "reference,flip.topk", "--json", str(js))
    assert code == 1, out + err
    failed = [p for p in record(js)["parity"] if not p["equal"]]
    assert failed and {p["subject"] for p in failed} == {"flip.topk"}
    assert all(f"query 0 position {FLIPPED_ENTRY}:" in p["detail"] for p in failed)


def test_window_bench_captures_the_checkouts_pair(capsys: Any, trees: dict[str, Path], tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "window-bench", "131072", "4", "5", "262144", "--engine",
                         f"fake={trees['plain']}", "--json", str(js))
    assert code == 0, out + err
    rec = record(js)
    assert "fake.scores+fake.topk" in variants_of(rec)
    rows = [p for p in rec["parity"] if p["subject"] == "fake.scores+fake.topk"]
    assert {p["against"] for p in rows} >= {"cpu-oracle", "guard zones", "inputs"} and all(p["equal"] for p in rows)


def test_a_switched_variant_runs_in_a_child(capsys: Any, trees: dict[str, Path], tmp_path: Path) -> None:
    """STRATA_EMULATE_CC=86 gives the split on any card (sm_90 refuses it); STRATA_SCORES_RS=0 another scorer."""
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "topk-parity", "131072", "3", "3", "262144", "0", "--engine",
                         f"fake={trees['plain']}", "--variants", "reference,fake.topk-split[STRATA_EMULATE_CC=86]",
                         "--json", str(js))
    assert code == 0, out + err
    rec = record(js)
    assert variants_of(rec) >= {"reference", "fake.topk-split[STRATA_EMULATE_CC=86]"}
    against = {p["against"] for p in rec["parity"] if p["subject"] == "fake.topk-split[STRATA_EMULATE_CC=86]"}
    assert {"reference", "cpu-oracle", "guard zones", "inputs"} <= against and all(p["equal"] for p in rec["parity"])
    code, out, err = run(capsys, "select-bench", "9002", "3", "3", "16384", "--engine", f"fake={trees['plain']}",
                         "--variants", "reference,fake.scores,fake.scores[STRATA_SCORES_RS=0]", "--json", str(js))
    assert code == 0, out + err
    assert variants_of(record(js)) >= {"fake.scores", "fake.scores[STRATA_SCORES_RS=0]"}


def test_select_bench_runs_a_newer_checkouts_scorers(capsys: Any, trees: dict[str, Path], tmp_path: Path) -> None:
    """The dx scorer (in a child under STRATA_SCORES_DX=1) held to the reference's bits; the TF32 scorer timed,
    its integrity checked, its output measured against the reference (not bitwise): the fake's flipped bits seen."""
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "select-bench", "131072", "4", "5", "262144", "--engine", f"new={trees['newer']}",
                         "--json", str(js))
    assert code == 0, out + err
    rec = record(js)
    ran = variants_of(rec)
    assert {"new.scores", "new.scores-ref", "new.scores-dx"} <= ran
    against = {p["against"] for p in rec["parity"] if p["subject"] == "new.scores-dx"}
    assert {"reference", "cpu-model", "guard zones", "inputs"} <= against and all(p["equal"] for p in rec["parity"])
    engine = rec["settings"]["engines"][0]
    assert "STRATA_SCORES_DX" in engine["switches"] and "qsa_block_scores.decode_dx" in engine["functions"]
    if "new.scores-tc" in ran:  # sm_80 and newer
        checked = {p["against"] for p in rec["parity"] if p["subject"].startswith("new.scores-tc")}
        assert checked and not checked & {"reference", "cpu-model"}, checked
        measured = [a for a in rec["agreements"] if a["subject"] == "new.scores-tc" and a["against"] == "reference"]
        assert measured and all(a["scores"]["differing"] > 0 for a in measured), measured  # its flipped bits seen


def test_the_dx_scorer_and_the_multi_topk_are_the_paths_they_name(capsys: Any, trees: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    """A checkout whose dx scorer, and one whose multi-CTA top-k, flips a bit on that path only: qsa's
    NAME.scores-dx and NAME.topk-multi fail there, so they ran those paths (their switches implied)."""
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "select-bench", "131072", "3", "2", "262144", "--engine",
                         f"flip={trees['newer-flip-dx']}", "--json", str(js))
    assert code == 1, out + err
    assert {p["subject"] for p in record(js)["parity"] if not p["equal"]} == {"flip.scores-dx"}
    code, out, err = run(capsys, "topk-parity", "131072", "3", "2", "262144", "0", "--engine",
                         f"flip={trees['newer-flip-multi']}", "--json", str(js))
    assert code == 1, out + err
    failed = [p for p in record(js)["parity"] if not p["equal"]]
    assert failed and {p["subject"].split(" (")[0] for p in failed} == {"flip.topk-multi"}
    assert all(f"query 0 position {FLIPPED_ENTRY}:" in p["detail"] for p in failed if p["against"] == "reference")


def test_topk_parity_and_the_window_run_a_newer_checkouts_multi_topk(capsys: Any, trees: dict[str, Path],
                                                                    tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "topk-parity", "131072", "3", "3", "262144", "0", "--engine",
                         f"new={trees['newer']}", "--json", str(js))
    assert code == 0, out + err
    rec = record(js)
    assert {"new.topk", "new.topk-ref", "new.topk-multi"} <= variants_of(rec)
    against = {p["against"] for p in rec["parity"] if p["subject"] == "new.topk-multi"}
    assert {"reference", "cpu-oracle", "guard zones", "inputs"} <= against and all(p["equal"] for p in rec["parity"])
    code, out, err = run(capsys, "window-bench", "131072", "4", "3", "262144", "--engine", f"new={trees['newer']}",
                         "--json", str(js))
    assert code == 0, out + err
    rows = [p for p in record(js)["parity"] if p["subject"] == "new.scores+new.topk-multi"]
    assert {p["against"] for p in rows} >= {"cpu-oracle", "guard zones", "inputs"} and all(p["equal"] for p in rows)


def test_compare_across_the_generations_judges_what_both_have(capsys: Any, trees: dict[str, Path],
                                                             tmp_path: Path) -> None:
    """The seed's generation against the newer one: every variant of each side named (the record's engines and a
    note for those only one side has), the pairs both have judged, their bits the same (their times may differ)."""
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "compare", f"seed={trees['plain']}", f"new={trees['newer']}", "131072", "4", "10",
                         "262144", "--tolerance", "0.5", "--json", str(js))
    rec = record(js)
    seed, new = rec["settings"]["engines"]
    assert {"seed.scores", "seed.scores-ref", "seed.topk", "seed.topk-ref"} <= set(seed["variants"])
    assert {"new.scores", "new.scores-ref", "new.scores-dx", "new.topk", "new.topk-ref", "new.topk-multi"} <= set(
        new["variants"])
    pairs = {(p["base"], p["candidate"]) for p in rec["settings"]["compare"]["pairs"]}
    both = {v.removeprefix("seed.") for v in seed["variants"]} & {v.removeprefix("new.") for v in new["variants"]}
    assert {(b, c) for b, c in pairs if "+" not in b} == {(f"seed.{k}", f"new.{k}") for k in both}
    alone = {v for v in new["variants"] if v.removeprefix("new.") not in both}
    assert alone >= {"new.scores-dx", "new.topk-multi"}
    assert all(any(v in note and "only the new side has them" in note for note in rec["notes"]) for v in alone)
    same = [p for p in rec["parity"] if (p["against"], p["subject"]) in pairs]
    assert same and all(p["equal"] for p in same)
    # the two generations' scorers are different kernels: a SLOW verdict is the comparison's to give, changed
    # bits are not
    failures = [line for line in (out + err).splitlines() if line.startswith("COMPARE FAIL ") and "/" in line[:20]]
    assert code in (0, 1) and (code == 0) == (not failures) and all(": SLOW: " in f for f in failures), out + err


def test_compare_same_bits_passes_and_names_both_sides(capsys: Any, trees: dict[str, Path], tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "compare", f"base={trees['plain']}", f"pr={trees['plain']}", "131072", "4", "10",
                         "262144", "--tolerance", "0.5", "--json", str(js), "--markdown")
    assert code == 0, out + err
    rec = record(js)
    pairs = {(p["base"], p["candidate"]) for p in rec["settings"]["compare"]["pairs"]}
    assert {("base.scores", "pr.scores"), ("base.topk", "pr.topk")} <= pairs
    assert ("base.scores+base.topk", "pr.scores+pr.topk") in pairs
    same = [p for p in rec["parity"] if (p["against"], p["subject"]) in pairs]
    assert same and all(p["equal"] for p in same)
    assert [s["name"] for s in rec["settings"]["sides"]] == ["base", "pr"]
    assert out.rstrip().splitlines()[-1].startswith("COMPARE PASS: ") and "| case | variant | base µs |" in out


def test_compare_a_flipped_candidate_fails_on_its_bits(capsys: Any, trees: dict[str, Path], tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "compare", str(trees["plain"]), str(trees["flip-topk"]), "131072", "4", "3",
                         "262144", "--json", str(js))
    assert code == 1, out + err
    differ = [p for p in record(js)["parity"] if p["subject"] == "candidate.topk" and p["against"] == "base.topk"]
    assert differ and not any(p["equal"] for p in differ)
    assert any(f"candidate.topk vs base.topk: query 0 position {FLIPPED_ENTRY}:" in line for line in failure_lines(out))


@pytest.mark.alone
def test_compare_a_slowed_candidate_is_slow(capsys: Any, trees: dict[str, Path], tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "compare", str(trees["plain"]), str(trees["slow"]), "32768", "1", "30", "65536",
                         "--json", str(js))
    assert code == 1, out + err
    slow = [line for line in failure_lines(out) if ": SLOW: " in line]
    assert slow and any(line.split(": ", 1)[1].startswith("scores ") for line in slow), out
    assert all(p["equal"] for p in record(js)["parity"])  # slower, the same bits


def test_compare_two_revisions_of_one_repository(capsys: Any, trees: dict[str, Path], tmp_path: Path) -> None:
    """PATH@REV: each revision checked out into a temporary worktree; a commit that flips a bit fails."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "strata"
    shutil.copytree(trees["plain"], repo)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "main", "--allow-empty")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    flipped = trees["flip-topk"] / "src/kernels/cuda/qsa_select.cu"
    shutil.copy(flipped, repo / "src/kernels/cuda/qsa_select.cu")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "flip")
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "compare", f"{repo}@HEAD~1", f"{repo}@HEAD", "9002", "3", "2", "16384",
                         "--json", str(js))
    assert code == 1, out + err
    rec = record(js)
    assert [(s["path"], s["revision"]) for s in rec["settings"]["sides"]] == [(str(repo), "HEAD~1"), (str(repo), "HEAD")]
    assert all(e["commit"] and not e["commit"].endswith("-dirty") for e in rec["settings"]["engines"])
    assert not any(p["equal"] for p in rec["parity"] if p["subject"] == "candidate.topk" and p["against"] == "base.topk")
    listed = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True).stdout
    assert len(listed.strip().splitlines()) == 1  # the temporary worktrees are gone


def test_compare_two_kernel_folders(capsys: Any, cupy: Any, tmp_path: Path) -> None:
    """Two copies of qsa's kernels: every variant of qsa's is a pair, and the same sources give the same bits
    (no engine checkout, so no ``trees``: the ``cupy`` fixture skips it without a device)."""
    for side in ("a", "b"):
        shutil.copytree(kernel_dir(), tmp_path / side)
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "compare", f"old={tmp_path / 'a'}", f"new={tmp_path / 'b'}", "131072", "4", "10",
                         "262144", "--tolerance", "0.5", "--json", str(js))
    assert code == 0, out + err
    pairs = {(p["base"], p["candidate"]) for p in record(js)["settings"]["compare"]["pairs"]}
    assert {("old.halve", "new.halve"), ("old.split", "new.split"), ("old.halve+old.split", "new.halve+new.split")} <= pairs


@pytest.mark.slow  # compute-sanitizer's children
def test_sanitize_runs_the_checkouts_variants(capsys: Any, trees: dict[str, Path], tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "sanitize", "--engine", f"fake={trees['plain']}", "--variants", "fake.scores,fake.topk",
                         "--quick", "--json", str(js))
    assert code == 0, out + err
    rows = record(js)["sanitizer"]
    assert {r["variant"] for r in rows} == {"fake.scores", "fake.topk"} and all(r["errors"] == 0 for r in rows)


@pytest.mark.slow  # compute-sanitizer's children
def test_sanitize_runs_a_newer_checkouts_paths_under_their_switches(capsys: Any, trees: dict[str, Path],
                                                                    tmp_path: Path) -> None:
    """Each child of NAME.scores-dx and NAME.topk-multi has the switches their kinds imply (the launchers refuse
    to run them anywhere else)."""
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "sanitize", "--engine", f"new={trees['newer']}", "--variants",
                         "new.scores-dx,new.topk-multi", "--quick", "--json", str(js))
    assert code == 0, out + err
    rows = record(js)["sanitizer"]
    assert {r["variant"] for r in rows} == {"new.scores-dx", "new.topk-multi"} and all(r["errors"] == 0 for r in rows)
