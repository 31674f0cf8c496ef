"""Plots of the shipped records and of hand-made ones: the figure's elements (panels, lines and their
labels and styles, the legend's place, the read floor, the dispatched variant, the ratio panels and their
values), not its pixels; bad records refused in one line with nothing written; matplotlib imported lazily."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from record_factory import measurement, record, seed_record, topk_case

from qsa_cli.cli import main
from qsa_cli.output.plot import MARKERS, PlotError, build_figure, plot_files, plot_records
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import RunRecord, case_key

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
CI = RESULTS / "h200-2026-11-30" / "ci.json"
CI_SLOWED = RESULTS / "h200-2026-11-30" / "ci-slowed.json"
COMPARE_SLOW = RESULTS / "h200-2026-12-01" / "engine" / "compare-slow.json"
SHIPPED = [CI, RESULTS / "h200-2026-11-30" / "scores-420000-4.json", RESULTS / "h200-2026-11-30" / "topk-524288-8.json",
           RESULTS / "h200-2026-11-30" / "window-524288-8.json", RESULTS / "h200-2026-12-01" / "window-420000-4.json",
           COMPARE_SLOW, RESULTS / "h200-2026-12-01" / "engine" / "compare-kernels-398a9df.json",
           RESULTS / "h200-2026-12-01" / "engine-real" / "real-topk-prompt-135176-64.json"]
REFERENCE_POINTS = ("read-floor", "cupy.argpartition")

pytestmark = pytest.mark.filterwarnings("error")  # a figure that warns (an overlap, a bad scale) fails


@pytest.fixture(autouse=True)
def _matplotlib() -> None:
    pytest.importorskip("matplotlib")


def panels(fig: Any, kind: str = "panel") -> list[Any]:
    return [ax for ax in fig.axes if (ax.get_gid() or "").startswith(f"{kind}:")]


def drawn(ax: Any, prefix: str) -> Iterator[Any]:
    """The lines, collections and patches of a panel whose gid starts with ``prefix``."""
    for artist in [*ax.lines, *ax.collections, *ax.patches]:
        if (artist.get_gid() or "").startswith(prefix):
            yield artist


def series_lines(ax: Any) -> dict[str, Any]:
    """gid ``series:NAME:SIDE`` -> its line."""
    return {line.get_gid(): line for line in drawn(ax, "series:")}


def legend_of(fig: Any) -> Any:
    (legend,) = [leg for f in (fig, *fig.subfigs) for leg in f.legends]
    return legend


def expected_panels(r: RunRecord) -> set[tuple[Any, ...]]:
    """A panel per stage and query count and, across contexts, per score set and keys."""
    out = set()
    for stage in {m.stage for m in r.measurements}:
        ms = [m for m in r.measurements if m.stage == stage]
        by_context = len({m.case["ctx"] for m in ms}) > 1
        for m in ms:
            inputs = (m.case.get("score_set"), m.case.get("keys")) if by_context else ()
            out.add((stage, *inputs, m.case["kind"], m.case["nq"]))
    return out


def test_ci_record_is_a_panel_per_stage_score_set_and_query_count() -> None:
    r = load_record(CI)
    fig = build_figure([r], ["ci.json"])
    time_panels = panels(fig)
    # the scorer at 1, 4 and 8 queries; the top-k's 3 score sets at 1 and 6, and its prompt call
    assert len(time_panels) == len(expected_panels(r)) == 10
    assert panels(fig, "ratio") == []
    assert sum(ax.get_gid() == "panel:scores" for ax in time_panels) == 3
    for ax in time_panels:  # log-log: the contexts span 13x and more, the times more than a decade
        assert ax.get_xscale() == "log" or len({x for line in ax.lines for x in line.get_xdata()}) == 1
        assert ax.get_yscale() == "log"
    title = fig.subfigs[0].get_suptitle()
    assert "NVIDIA H200" in title and "2026-11-30 00:53" in title and "qsa sweep ci" in title
    assert "clocks not locked, read SM 1980 MHz, memory 3201 MHz" in title and "/root/out" not in title


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_record_has_each_variants_line_in_one_style(path: Path) -> None:
    r = load_record(path)
    fig = build_figure([r], [path.name])
    time_panels = panels(fig)
    if "compare" not in r.settings:
        assert len(time_panels) == len(expected_panels(r))
    points: dict[str, int] = defaultdict(int)
    styles: dict[str, tuple[Any, ...]] = {}
    for ax in time_panels:
        for gid, line in series_lines(ax).items():
            name = gid.split(":")[1]
            style = (line.get_color(), line.get_marker(), line.get_linestyle())
            assert styles.setdefault(name, style) == style, f"{name} drawn in two styles"
            assert line.get_label().split(", ")[0] == name
            points[gid] += len(line.get_xdata())
    # every measurement (but the floor's, a line of its own) is a point of its variant's line
    if "compare" in r.settings:
        assert sum(points.values()) == sum(m.variant != "read-floor" for m in r.measurements)
    else:
        counts = defaultdict(int)
        for m in r.measurements:
            if m.variant != "read-floor":
                counts[f"series:{m.variant}:"] += 1
        assert dict(points) == counts
    variants = [name for name in styles if name not in REFERENCE_POINTS]
    assert len({styles[v][1:] for v in variants}) == len(variants)  # (marker, line style) tells each apart
    assert len({styles[v][0] for v in variants}) == len(variants)
    legend_texts = [t.get_text() for t in legend_of(fig).get_texts()]
    assert all(name in legend_texts for name in styles)


@pytest.mark.parametrize("path", [CI, RESULTS / "h200-2026-11-30" / "topk-524288-8.json", COMPARE_SLOW],
                         ids=lambda p: p.name)
def test_the_legend_is_outside_every_panel(path: Path) -> None:
    fig = build_figure([load_record(path)], [path.name])
    fig.draw_without_rendering()
    box = legend_of(fig).get_window_extent()
    assert fig.axes and not any(box.overlaps(ax.get_window_extent()) for ax in fig.axes)
    assert 0 <= box.x0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1  # and inside the figure


def test_read_floor_in_every_scorer_panel_at_the_recorded_medians() -> None:
    r = load_record(CI)
    floors = sorted(m.median_us for m in r.measurements if m.variant == "read-floor")
    seen = []
    for ax in panels(build_figure([r])):
        lines = list(drawn(ax, "read-floor"))
        assert len(lines) == (1 if ax.get_gid() == "panel:scores" else 0)
        seen += [y for line in lines for y in line.get_ydata()]
        assert all(line.get_color() == "black" and line.get_linestyle() == "--" for line in lines)
    assert sorted(seen) == floors
    # at one context the floor is a level under the variants
    one = load_record(RESULTS / "h200-2026-11-30" / "scores-420000-4.json")
    (ax,) = panels(build_figure([one]))
    (level,) = drawn(ax, "read-floor")
    (floor,) = [m for m in one.measurements if m.variant == "read-floor"]
    assert [segment[0][1] for segment in level.get_segments()] == [floor.median_us]


def test_the_dispatched_variant_is_marked_for_its_kind_of_call() -> None:
    r = load_record(CI)  # decode: multi + cluster; prompt: reference + reference
    for ax in panels(build_figure([r])):
        marks = {a.get_gid() for a in drawn(ax, "dispatch:")}
        prompt = "prompt call" in ax.get_title()
        assert marks == {"dispatch:" + ("multi" if ax.get_gid() == "panel:scores" else
                                        "reference" if prompt else "cluster") + ":"}
        (mark,) = drawn(ax, "dispatch:")
        chosen = series_lines(ax)[mark.get_gid().replace("dispatch:", "series:")]
        assert [tuple(p) for p in mark.get_offsets()] == list(zip(chosen.get_xdata(), chosen.get_ydata()))
    assert "the engine dispatches decode: multi + cluster, prompt: reference + reference" in " ".join(
        t.get_text().replace("\n", " ") for t in legend_of(build_figure([r])).get_texts())
    window = load_record(RESULTS / "h200-2026-11-30" / "window-524288-8.json")
    (ax,) = panels(build_figure([window]))
    assert {a.get_gid() for a in drawn(ax, "dispatch:")} == {"dispatch:multi+cluster:"}


def ratio_values(fig: Any) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for ax in panels(fig, "ratio"):
        for line in drawn(ax, "ratio:"):
            out[line.get_gid().removeprefix("ratio:")] += list(line.get_ydata())
    return out


def test_two_records_draw_before_after_and_the_ratio_of_every_case() -> None:
    before, after = load_record(CI), load_record(CI_SLOWED)
    fig = build_figure([before, after], ["ci.json", "ci-slowed.json"])
    time_panels, ratio_panels = panels(fig), panels(fig, "ratio")
    assert len(ratio_panels) == len(time_panels) == 10
    for ax, ratio_ax in zip(time_panels, ratio_panels):
        assert ratio_ax.get_shared_x_axes().joined(ax, ratio_ax)
        assert ratio_ax.get_ylabel() in ("after / before", "")
        assert [line.get_ydata()[0] for line in ratio_ax.lines if line.get_gid() is None] == [1.0]  # the line at 1
        lines = series_lines(ax)
        for gid, line in lines.items():
            _, name, side = gid.split(":")
            assert side in ("before", "after") and f"series:{name}:{'after' if side == 'before' else 'before'}" in lines
            if side == "before":
                assert line.get_markerfacecolor() == "white"
    index = {(m.stage, case_key(m.stage, m.case), m.variant): m.median_us for m in after.measurements}
    expected = defaultdict(list)
    for m in before.measurements:
        if m.variant not in REFERENCE_POINTS:
            expected[m.variant].append(index[m.stage, case_key(m.stage, m.case), m.variant] / m.median_us)
    got = ratio_values(fig)
    assert {v: sorted(r) for v, r in got.items()} == {v: sorted(r) for v, r in expected.items()}
    assert sorted(got["halve"]) == pytest.approx([0.5] * 6, rel=1e-6)  # the slowed record's halve: half the time
    title = fig.subfigs[0].get_suptitle()
    assert "before: ci.json" in title and "after: ci-slowed.json" in title


def test_a_compare_record_draws_its_base_before_its_candidate() -> None:
    r = load_record(COMPARE_SLOW)
    fig = build_figure([r], ["compare-slow.json"])
    assert len(panels(fig)) == len(panels(fig, "ratio")) == 3  # scorer, top-k, window: one context
    medians = {(m.stage, case_key(m.stage, m.case), m.variant): m.median_us for m in r.measurements}
    expected = defaultdict(list)
    for pair in r.settings["compare"]["pairs"]:
        for (stage, key, variant), base in medians.items():
            if stage == pair["stage"] and variant == pair["base"]:
                expected[pair["base"].removeprefix("main.").replace("+main.", "+")].append(
                    medians[stage, key, pair["candidate"]] / base)
    got = ratio_values(fig)
    assert {v: sorted(x) for v, x in got.items()} == {v: sorted(x) for v, x in expected.items()}
    assert max(got["scores"]) > 1.8  # the slowed scorer
    for ax in panels(fig, "ratio"):
        (band,) = drawn(ax, "tolerance")  # the compare's 5%
        ys = band.get_path().transformed(band.get_patch_transform()).vertices[:, 1]
        assert (min(ys), max(ys)) == pytest.approx((0.95, 1.05))
    texts = [t.get_text().replace("\n", " ") for t in legend_of(fig).get_texts()]
    assert "hollow: before (main)" in texts and "filled: after (pr)" in texts
    assert any("not among the variants drawn" in t for t in texts)  # the engine's names are not qsa's


def test_a_compare_of_qsa_kernels_marks_each_sides_dispatched_copy() -> None:
    fig = build_figure([load_record(RESULTS / "h200-2026-12-01" / "engine" / "compare-kernels-398a9df.json")])
    by_stage = {ax.get_gid(): {a.get_gid() for a in drawn(ax, "dispatch:")} for ax in panels(fig)}
    assert by_stage["panel:scores"] == {"dispatch:multi:before", "dispatch:multi:after"}
    assert by_stage["panel:topk"] == {"dispatch:cluster:before", "dispatch:cluster:after"}
    texts = [t.get_text() for t in legend_of(fig).get_texts()]
    # qsa's own reference, unpaired, beside the sides' copies of it
    assert "reference" in texts and "main.reference → pr.reference" in texts


def test_a_stage_only_one_side_measured_has_an_empty_ratio_panel_that_says_so() -> None:
    after = seed_record(scale=0.8)
    after.measurements = [m for m in after.measurements if m.stage == "scores"]
    fig = build_figure([seed_record(), after])
    for ax in panels(fig, "ratio"):
        if ax.get_gid() == "ratio:topk":
            assert list(drawn(ax, "ratio:")) == [] and [t.get_text() for t in ax.texts] == [
                "no case measured on both sides"]
        else:
            assert all(y == pytest.approx(0.8) for line in drawn(ax, "ratio:halve") for y in line.get_ydata())
            assert [line.get_gid() for line in drawn(ax, "ratio:")] == ["ratio:multi", "ratio:halve"]


def test_before_after_with_nothing_in_common_is_refused() -> None:
    scores_only = seed_record()
    scores_only.measurements = [m for m in scores_only.measurements if m.stage == "scores"]
    topk_only = seed_record()
    topk_only.measurements = [m for m in topk_only.measurements if m.stage == "topk"]
    with pytest.raises(PlotError, match="^a.json and b.json: no case and variant measured on both sides"):
        build_figure([scores_only, topk_only], ["a.json", "b.json"])


def test_at_one_context_the_inputs_are_the_x_axis() -> None:
    path = RESULTS / "h200-2026-11-30" / "topk-524288-8.json"
    (ax,) = panels(build_figure([load_record(path)]))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["continuous", "levels64", "equal"]
    assert "context 524,288" in ax.get_title()
    xs = {gid: list(line.get_xdata()) for gid, line in series_lines(ax).items()}
    # the variants side by side at each score set, never on top of each other
    assert all(len({x[i] for x in xs.values()}) == len(xs) for i in range(3))


def test_many_variants_keep_distinct_styles() -> None:
    rng = np.random.default_rng(3)
    names = [f"v{i}" for i in range(36)]
    ms = [measurement("topk", v, topk_case(ctx, 8), 20.0 + i, rng)
          for i, v in enumerate(names) for ctx in (9000, 524288)]
    fig = build_figure([record(ms, [])])
    lines = [line for ax in panels(fig) for line in series_lines(ax).values()]
    assert len(lines) == 36 and len({(line.get_marker(), line.get_linestyle()) for line in lines}) == 36
    assert len(MARKERS) == 9


def test_series_that_differ_by_score_set_and_kind(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    ms = [measurement("topk", v, topk_case(ctx, nq, kind=kind, score_set=s), t * ctx / 9000, rng, noise=0.05)
          for v, t in (("wide", 30.0), ("split", 20.0))
          for ctx in (2100, 9000, 135176, 524288)
          for kind, nq in (("decode", 8), ("prompt", 64))
          for s in ("continuous", "equal")]
    r = record(ms, [], backend="cpu", device={})
    assert len(panels(build_figure([r]))) == 4  # 2 score sets x (decode 8, prompt 64)
    out = plot_records([r], tmp_path / "topk.svg")
    assert out.read_text().startswith("<?xml")
    assert "CPU backend" in build_figure([r]).subfigs[0].get_suptitle()


def test_throttled_points_are_ringed_and_an_interrupted_run_says_so() -> None:
    r = seed_record(seed=1, noise=0.04, throttle=(131072, 4))
    fig = build_figure([r])
    rings = [a for ax in panels(fig) for a in drawn(ax, "throttled")]
    assert len(rings) == 1 and len(rings[0].get_offsets()) == 1
    title = fig.subfigs[0].get_suptitle()
    assert "throttled in 1 of" in title and "incomplete" not in title
    r.incomplete = True
    assert "(incomplete: interrupted, only what was measured before)" in " ".join(
        build_figure([r]).subfigs[0].get_suptitle().split())


def bad_samples(samples: list[float]) -> RunRecord:
    r = seed_record()
    r.measurements[4].samples_us = samples
    return r


@pytest.mark.parametrize(("samples", "message"), [
    ([], r"\(halve, scores ctx=32768 nq=3 capacity=524288 kind=decode l2=clean\) has no samples$"),
    ([1.0, math.nan, 2.0], r"\(halve, .*\): 1 of 3 samples are not a time > 0 and <= 1e\+09 µs \(the first: nan\)$"),
    ([math.inf] * 2, r"\(halve, .*\): 2 of 2 samples are not a time > 0 and <= 1e\+09 µs \(the first: inf\)$"),
    ([3.0, -1.0], r"\(halve, .*\): 1 of 2 samples are not a time > 0 and <= 1e\+09 µs \(the first: -1.0\)$"),
    ([1e308] * 3, r"\(halve, .*\): 3 of 3 samples are not a time > 0 and <= 1e\+09 µs \(the first: 1e\+308\)$"),
])
def test_bad_samples_are_refused_never_drawn(samples: list[float], message: str) -> None:
    with pytest.raises(PlotError, match=r"^r.json: measurements\[4\] " + message):
        build_figure([bad_samples(samples)], ["r.json"])
    with pytest.raises(PlotError, match=r"^after.json: measurements\[4\] " + message):  # the after side as well
        build_figure([seed_record(), bad_samples(samples)], ["before.json", "after.json"])


def qsa(*argv: str) -> int:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    return exit_.value.code


@pytest.mark.parametrize("samples", [[], [math.nan], [math.inf, 1.0]])
def test_the_cli_refuses_a_bad_record_in_one_line_and_writes_nothing(tmp_path: Path, samples: list[float],
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad_samples(samples).write(tmp_path / "bad.json")
    seed_record().write(tmp_path / "good.json")
    for argv in (["bad.json"], ["good.json", "bad.json"]):
        assert qsa("plot", *(str(tmp_path / a) for a in argv), "-o", str(tmp_path / "out.png")) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("qsa: error: ") and "bad.json: measurements[4]" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "good.json"]


def test_the_cli_draws_a_before_after_of_two_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ab.png"
    assert qsa("plot", str(CI), str(CI_SLOWED), "-o", str(out)) == 0
    assert capsys.readouterr().out == f"{out}\n"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert qsa("plot", str(CI), str(CI), str(CI), "-o", str(out)) == 2
    assert "plot takes one record, or two (before, after); got 3" in capsys.readouterr().err


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(PlotError, match="unknown image type '.txt'"):
        plot_files([CI], tmp_path / "plot.txt")
    with pytest.raises(PlotError, match="^record 1: the record has no timed measurements"):
        plot_records([record([], [])], tmp_path / "plot.png")
    empty = copy.deepcopy(seed_record())
    empty.measurements = []
    with pytest.raises(PlotError, match="^b: the record has no timed measurements"):
        build_figure([seed_record(), empty], ["a", "b"])
    assert list(tmp_path.iterdir()) == []


def test_without_matplotlib_the_error_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if not installed
    with pytest.raises(PlotError, match=r"^plotting needs matplotlib: pip install 'qsa\[plot\]'$"):
        plot_records([seed_record()], tmp_path / "plot.png")


def test_the_legend_names_variants_in_first_seen_order_reference_points_last() -> None:
    texts = [t.get_text() for t in legend_of(build_figure([load_record(CI)])).get_texts()]
    assert texts[:8] == ["reference", "multi", "halve", "wide", "split", "cluster", "read-floor", "cupy.argpartition"]


def test_optional_modules_are_imported_lazily() -> None:
    code = ("import sys; import qsa_cli.output.plot, qsa_cli.output.report, qsa_cli.output.gate, qsa_cli.config, "
            "qsa_cli.clocks; print(sorted(m for m in ('matplotlib', 'pynvml', 'cupy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
