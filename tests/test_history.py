"""qsa history on synthetic stores (runs promoted with qsa baseline's own promote): the step rule's answers
pinned (a 3% and a 10% step at their commits, a noisy flat history with none, a change of bits, a gap in the
commits measured, a slow newest run), the exports checked against their formats, bad input refused in one
line with nothing written, and the page looked at in a real headless browser."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from history_store import CASE, KEY, commit, store
from record_factory import record

from qsa_cli.cli import main
from qsa_cli.output.history import card_history
from qsa_cli.record.history import runs

def history(folder: Path, engine: str | None = None):
    [key] = [d.name for d in folder.iterdir()]  # KEY, or KEY+engine for a run of one engine checkout
    return card_history(key, runs(folder, key), engine)


def steps_of(folder: Path, variant: str, engine: str | None = None) -> list[tuple[int, float, bool | None, bool]]:
    """(run index, change, bits changed, provisional) of each step of ``variant`` on the large case."""
    h = history(folder, engine)
    s = next(s for s in h.series if s.variant == variant and s.case["ctx"] == CASE["ctx"])
    return [(s.points[t.at].run, t.change, t.bits, t.provisional) for t in s.steps]


def test_a_10_percent_step_is_found_at_its_commit_and_nothing_else(tmp_path: Path) -> None:
    store(tmp_path, {"halve": [100.0] * 8 + [110.0] * 8, "multi": [200.0] * 16})
    [(at, change, bits, provisional)] = steps_of(tmp_path, "halve")
    assert (at, bits, provisional) == (8, False, False) and change == pytest.approx(0.10, abs=0.01)
    assert steps_of(tmp_path, "multi") == []


def test_a_3_percent_step_is_found_at_its_commit(tmp_path: Path) -> None:
    store(tmp_path, {"halve": [100.0] * 8 + [103.0] * 8}, run_noise=0.002)
    [(at, change, _, _)] = steps_of(tmp_path, "halve")
    assert at == 8 and change == pytest.approx(0.03, abs=0.006)


@pytest.mark.parametrize("seed", range(6))
def test_a_noisy_flat_history_has_no_step(tmp_path: Path, seed: int) -> None:
    store(tmp_path, {"halve": [100.0] * 16}, run_noise=0.02, noise=0.03, seed=seed)
    assert steps_of(tmp_path, "halve") == []


def test_a_single_slow_run_in_the_middle_is_no_step_but_at_the_end_a_provisional_one(tmp_path: Path) -> None:
    store(tmp_path / "middle", {"halve": [100.0] * 6 + [115.0] + [100.0] * 6})
    assert steps_of(tmp_path / "middle", "halve") == []
    store(tmp_path / "end", {"halve": [100.0] * 12 + [112.0]})
    [(at, change, _, provisional)] = steps_of(tmp_path / "end", "halve")
    assert (at, provisional) == (12, True) and change == pytest.approx(0.12, abs=0.01)


def test_a_change_of_bits_is_named_with_its_step_and_alone(tmp_path: Path) -> None:
    outs = ["a" * 64] * 4 + ["b" * 64] * 4 + ["c" * 64] * 8  # bits change at run 4 (time flat) and run 8 (a step)
    store(tmp_path, {"halve": [100.0] * 8 + [110.0] * 8}, outputs={"halve": outs})
    [(at, _, bits, _)] = steps_of(tmp_path, "halve")
    assert (at, bits) == (8, True)
    s = next(s for s in history(tmp_path).series if s.variant == "halve" and s.case["ctx"] == CASE["ctx"])
    assert [s.points[i].run for i in s.bits_changed] == [4, 8]


def test_a_gap_in_the_commits_measured_names_the_step_after_the_last_run_before_it(tmp_path: Path, capsys) -> None:
    levels = [100.0] * 6 + [None] * 4 + [110.0] * 6  # runs 6-9 did not time it
    store(tmp_path, {"halve": levels, "multi": [200.0] * 16})
    [(at, change, _, _)] = steps_of(tmp_path, "halve")
    assert at == 10 and change == pytest.approx(0.10, abs=0.01)
    with pytest.raises(SystemExit) as exc:
        main(["history", str(tmp_path), "--format", "json"])
    assert exc.value.code == 0
    card = json.loads(capsys.readouterr().out)["cards"][0]
    [step] = [t for s in card["series"] if s["variant"] == "halve" and s["case"]["ctx"] == CASE["ctx"] for t in s["steps"]]
    assert step["commits"]["qsa"] == commit(10) and commit(5) in step["after_run"]


def test_replicates_at_one_commit_are_never_split(tmp_path: Path) -> None:
    # runs 0-7 at one commit; the time moves inside them: no boundary to put a step on
    store(tmp_path, {"halve": [100.0] * 4 + [110.0] * 4}, commits=[commit(0)] * 8)
    assert steps_of(tmp_path, "halve") == []


def test_one_engine_named_otherwise_in_each_run_is_one_series_marked_by_its_commits(tmp_path: Path) -> None:
    names = ["main"] * 8 + ["pr"] * 8
    levels = {f"{n}.scores": [None] * 16 for n in ("main", "pr")}
    for i, n in enumerate(names):
        levels[f"{n}.scores"][i] = 100.0 if i < 8 else 110.0
    engines = [[{"name": n, "commit": f"e{i:02d}" + "f" * 38}] for i, n in enumerate(names)]
    store(tmp_path, levels, engines=engines, commits=[commit(0)] * 16)  # qsa's commit never changes
    [(at, _, _, _)] = steps_of(tmp_path, "strata.scores", engine="strata")
    assert at == 8
    h = history(tmp_path, "strata")
    assert {s.variant for s in h.series} == {"strata.scores"}
    assert h.runs[8].commits == (("qsa", commit(0)), ("strata", "e08" + "f" * 38))


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_a_log_gets_a_few_lines_and_v_the_table(tmp_path: Path, capsys) -> None:
    store(tmp_path, {"halve": [100.0] * 8 + [110.0] * 8, "multi": [200.0] * 16})
    code, out, _ = _cli(["history", str(tmp_path)], capsys)
    lines = out.splitlines()
    # the card's span and counts, a step of each case (3 lines at 80 columns) and the hint
    assert code == 0 and len(lines) <= 12 and max(map(len, lines)) <= 80
    assert sum(line.startswith("STEP +") for line in lines) == 2 and sum(commit(8) in line for line in lines) == 2
    _, verbose, _ = _cli(["history", str(tmp_path), "-v"], capsys)
    assert "vs previous" in verbose and verbose.count("multi") >= 2
    _, markdown, _ = _cli(["history", str(tmp_path), "--format", "markdown"], capsys)
    assert "| case | variant |" in markdown
    _, csv, _ = _cli(["history", str(tmp_path), "--format", "csv"], capsys)
    assert csv.splitlines()[0].startswith("card,case,variant") and len(csv.splitlines()) == 5


# ---- the exports, checked against their formats ---------------------------------------------------------------


def check_gab(data: Any) -> None:
    """github-action-benchmark's customSmallerIsBetter input: a list of objects with a string name and unit and a
    number value; range and extra, where given, strings; no other field (its README's format)."""
    assert isinstance(data, list) and data
    for item in data:
        assert set(item) <= {"name", "unit", "value", "range", "extra"} and {"name", "unit", "value"} <= set(item)
        assert isinstance(item["name"], str) and item["name"] and isinstance(item["unit"], str)
        assert isinstance(item["value"], (int, float)) and not isinstance(item["value"], bool)
        assert all(isinstance(item[k], str) for k in ("range", "extra") if k in item)
    assert len({item["name"] for item in data}) == len(data)  # a name is a chart: two entries would share one


def check_bmf(data: Any) -> None:
    """Bencher Metric Format (its JSON schema): an object of benchmark names, each an object of measures, each
    with a number value and optional number lower_value and upper_value; a measure's slug at most 64 characters,
    a benchmark's name at most 1024."""
    assert isinstance(data, dict) and data
    for name, measures in data.items():
        assert isinstance(name, str) and 0 < len(name) <= 1024 and isinstance(measures, dict) and measures
        for slug, metric in measures.items():
            assert 0 < len(slug) <= 64 and isinstance(metric, dict) and "value" in metric
            assert set(metric) <= {"value", "lower_value", "upper_value"}
            assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in metric.values())
            assert metric.get("lower_value", metric["value"]) <= metric["value"] <= metric.get("upper_value", metric["value"])


# Bencher's published JSON schema of BMF (https://bencher.dev/bmf.json, on its Bencher Metric Format page)
BMF_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema", "type": "object",
    "patternProperties": {".+": {"type": "object", "patternProperties": {".+": {
        "type": "object", "required": ["value"],
        "properties": {"value": {"type": "number"}, "lower_value": {"type": "number"}, "upper_value": {"type": "number"}},
    }}}},
}


def check_bmf_schema(data: Any) -> None:
    jsonschema = pytest.importorskip("jsonschema")  # check-jsonschema's, in the test extra
    jsonschema.validate(data, BMF_SCHEMA)


def test_the_format_checks_see_a_wrong_entry() -> None:
    with pytest.raises(AssertionError):
        check_gab([{"name": "a", "unit": "µs", "value": "1"}])
    with pytest.raises(AssertionError):
        check_bmf({"a": {"latency": {"value": 1.0, "upper": 2.0}}})
    jsonschema = pytest.importorskip("jsonschema")
    with pytest.raises(jsonschema.ValidationError):
        check_bmf_schema({"a": {"latency": {"value": "88"}}})


def test_report_and_history_export_gab_and_bmf(tmp_path: Path, capsys) -> None:
    store(tmp_path, {"halve": [100.0] * 3 + [110.0]})
    newest = sorted((tmp_path / KEY).glob("*.json"))[-1]
    for args in (["report", str(newest)], ["history", str(tmp_path)]):
        _, gab, err = _cli([*args, "--format", "gab"], capsys)
        data = json.loads(gab)
        check_gab(data)
        entry = next(e for e in data if e["name"] == "scores ctx=420000 nq=8 capacity=524288 kind=decode l2=clean halve")
        assert entry["unit"] == "µs" and entry["value"] > 105 and commit(3) in entry["extra"] and err == ""
        _, bmf, _ = _cli([*args, "--format", "bmf"], capsys)
        metrics = json.loads(bmf)
        check_bmf(metrics)
        check_bmf_schema(metrics)
        assert metrics[entry["name"]]["latency"]["value"] == pytest.approx(entry["value"] * 1000)


# ---- bad input ------------------------------------------------------------------------------------------------


def test_bad_input_is_one_line_and_exit_2_with_nothing_written(tmp_path: Path, capsys) -> None:
    page = tmp_path / "page.html"
    for folder in (tmp_path / "missing", tmp_path / "empty"):
        code, out, err = _cli(["history", str(folder), "--html", str(page)], capsys)
        assert code == 2 and out == "" and err.startswith("qsa: error: ") and err.count("\n") == 1
    (tmp_path / "empty").mkdir()
    code, _, err = _cli(["history", str(tmp_path / "empty")], capsys)
    assert code == 2 and "no run kept" in err
    store(tmp_path / "two", {"halve": [100.0] * 3})
    second = tmp_path / "two" / "other-card"
    shutil.copytree(tmp_path / "two" / KEY, second)
    code, _, err = _cli(["history", str(tmp_path / "two"), "--html", str(page)], capsys)
    assert code == 2 and "--card" in err
    bad = sorted(second.glob("*.json"))[0]
    bad.write_text('{"schema": "qsa.run", "schema_version": 8, "command": 3}')
    code, _, err = _cli(["history", str(tmp_path / "two"), "--card", "other-card"], capsys)
    assert code == 2 and err.startswith("qsa: error: ") and err.count("\n") == 1
    code, _, err = _cli(["history", str(tmp_path / "two"), "--card", "nope"], capsys)
    assert code == 2 and "no card nope" in err
    assert not page.exists() and list(tmp_path.glob("*.html")) == []


def test_card_of_a_run_names_its_card_among_several(tmp_path: Path, capsys) -> None:
    """A CI job draws its runner's card from the run it just made: --card-of RUN.json picks that card's
    history where the store holds several; with --card, or of a record no card measured, it is exit 2."""
    folder = store(tmp_path / "two", {"halve": [100.0] * 3})
    shutil.copytree(folder / KEY, folder / "other-card")
    run = sorted((folder / KEY).glob("*.json"))[0]
    code, out, _ = _cli(["history", str(folder), "--card-of", str(run), "--format", "json"], capsys)
    assert code == 0 and [c["key"] for c in json.loads(out)["cards"]] == [KEY]
    code, _, err = _cli(["history", str(folder), "--card-of", str(run), "--card", KEY], capsys)
    assert code == 2 and "give one" in err and err.count("\n") == 1
    cpu = tmp_path / "cpu.json"
    record([], [], device={"name": "host"}).write(cpu)
    code, _, err = _cli(["history", str(folder), "--card-of", str(cpu)], capsys)
    assert code == 2 and f"{cpu}: no card measured it" in err and err.count("\n") == 1


# ---- pictures -------------------------------------------------------------------------------------------------


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_the_plot_and_the_page(tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    folder = store(tmp_path / "store", {"halve": [100.0] * 8 + [110.0] * 8, "multi": [2000.0] * 16})
    png, page = tmp_path / "trend.png", tmp_path / "page.html"
    code, _, err = _cli(["history", str(folder), "--plot", str(png), "--html", str(page)], capsys)
    assert code == 0 and str(png) in err and str(page) in err
    width, height = _png_size(png.read_bytes())
    assert width > 800 and height > 300
    text = page.read_text()
    assert text.startswith("<!doctype html>") and "data:image/png;base64," in text
    # self-contained: nothing fetched at view time
    assert "<script" not in text and "http://" not in text and "https://" not in text and "<link" not in text
    assert f"at qsa {commit(8)}" in text and "STEP +" in text


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (Debian: apt-get install chromium)")
def test_the_page_in_a_headless_browser(tmp_path: Path, capsys) -> None:
    """The page rendered by Chromium: a screenshot of the asked size that is not blank (many colours, most of it
    white page, some of it the figure's ink)."""
    pytest.importorskip("matplotlib")
    from PIL import Image

    folder = store(tmp_path / "store", {"halve": [100.0] * 8 + [110.0] * 8, "multi": [2000.0] * 16})
    page, shot = tmp_path / "page.html", tmp_path / "shot.png"
    assert _cli(["history", str(folder), "--html", str(page)], capsys)[0] == 0
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1400,1600", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 1600)
    pixels = np.asarray(image).reshape(-1, 3)
    white = (pixels > 245).all(axis=1).mean()
    colours = len(np.unique(pixels[:: 7], axis=0))
    assert 0.3 < white < 0.98 and colours > 50, (white, colours)
