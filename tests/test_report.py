"""Rendering records built by hand: the result rows, their sheets as text and markdown, CSV, the clocks."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from record_factory import measurement, parity, record, roles, scores_case, seed_record, topk_case

from qsa_cli.output import report
from qsa_cli.output.info import info_blocks
from qsa_cli.output.layout import markdown, text_of
from qsa_cli.output.rows import before_after, context_cell, context_label, result_rows
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import InfoReport, RunRecord, ThresholdCheck

WIDE = 250


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip()[1:-1].split("│")]


def row_of(rendered: str, *needles: str) -> list[str]:
    """The cells of the first table row containing every needle (a group's label is on its first row only)."""
    return cells(next(line for line in rendered.splitlines() if line.startswith("│") and all(n in line for n in needles)))


def group_row(rendered: str, group: str, variant: str) -> list[str]:
    """The cells of ``variant``'s row in the group (a case) labelled ``group``."""
    lines = rendered.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"│ {group}"))
    for line in lines[start:]:
        if line.startswith(("├", "└")):
            break
        if cells(line)[1] == variant:
            return cells(line)
    raise AssertionError(f"no {variant} in {group}")


def rendered(r: RunRecord, width: int = WIDE) -> str:
    return text_of(report.blocks(r), width)


def row(r: RunRecord, stage: str, ctx: int, nq: int, variant: str, **case: object):
    return next(x for x in result_rows(r, stage) if (x.case["ctx"], x.case["nq"], x.variant) == (ctx, nq, variant)
                and all(x.case.get(k) == v for k, v in case.items()))


@pytest.mark.parametrize(
    ("ctx", "label", "cell"),
    [(999, "999", "999"), (2100, "2K", "2K (2100)"), (9000, "9K", "9K"), (32768, "32K", "32K (32768)"),
     (131072, "131K", "131K (131072)"), (420000, "420K", "420K"), (524288, "524K", "524K (524288)"),
     (1048576, "1M", "1M (1048576)"), (1500000, "1.5M", "1.5M")],
)
def test_context_labels_follow_the_seed(ctx: int, label: str, cell: str) -> None:
    assert context_label(ctx) == label
    assert context_cell(ctx) == cell


def test_every_variant_is_a_row_with_its_measures() -> None:
    r = seed_record(throttle=(32768, 4))
    halve = row(r, "scores", 32768, 4, "halve")
    assert (halve.role, halve.dispatched, halve.median_us, halve.samples, halve.throttled) == ("candidate", True, 15.0,
                                                                                              50, True)
    assert halve.floor_ratio == pytest.approx(15.0 / 9.0) and halve.gbps == pytest.approx(8193 * 512 / 15.0e-6 / 1e9)
    assert halve.shown_hash == "0000800000000004" and halve.verdict == "PASS"
    assert halve.vs_model.against == "cpu-model" and halve.vs_pair.against == "multi" and halve.vs_reference is None
    floor = row(r, "scores", 32768, 4, "read-floor")
    assert floor.role == "reference point" and floor.floor_ratio is None and floor.verdict is None
    split = row(r, "topk", 420000, 6, "split")
    assert (split.role, split.vs_reference.against, split.vs_model.against, split.vs_pair.against) == (
        "candidate", "reference", "cpu-oracle", "wide")
    assert [x.variant for x in result_rows(r, "topk")[:3]] == ["reference", "wide", "split"]


def test_the_tables_rows_hold_every_measure_unwrapped() -> None:
    text = rendered(seed_record(throttle=(32768, 4)))
    assert group_row(text, "32K (32768), 4 queries", "halve") == [
        "", "halve", "candidate, dispatched", "15.0*", "15.0-15.0", "50", "280",
        "1.67x", "000080000000", "yes", "multi: yes", "PASS"]
    assert group_row(text, "420K, 8 queries", "multi")[1:] == ["multi", "baseline", "773.9", "773.9-773.9", "50", "69.5",
                                                           "38.70x", "000668a00000", "–", "–", "–"]
    assert "* throttled: a thermal, power or hardware slowdown" in text


def test_before_and_after_per_case_with_the_speedup() -> None:
    r = seed_record()
    pairs = {(ba.stage, ba.case["ctx"], ba.case["nq"]): ba for ba in before_after(result_rows(r))}
    ba = pairs[("scores", 420000, 8)]
    assert (ba.baseline.variant, ba.candidate.variant) == ("multi", "halve") and ba.speedup == pytest.approx(773.9 / 255.1)
    assert row_of(rendered(r), "420K, 8 queries", "3.03x") == ["420K, 8 queries, capacity 524288, L2 clean", "multi", "773.9",
                                                               "halve", "255.1", "3.03x"]
    assert pairs[("topk", 9000, 1)].speedup == pytest.approx(34 / 32)


def test_markdown_is_one_unit_named_in_every_time_header() -> None:
    md = markdown(report.blocks(seed_record(seed=3, noise=0.02)))
    assert "| case | variant | role | median µs | p10-p90 µs | n | GB/s | / floor | hash | = model | = pair | checks |" in md
    assert "| case | before | before µs | after | after µs | speedup |" in md
    assert "| 420K, 8 queries, capacity 524288, L2 clean | multi | 773.9 | halve | 255.1 | 3.03x |" in md
    assert "| 9K, 1 query, capacity 524288, continuous, L2 clean | wide | 34.0 | split | 32.0 | 1.06x |" in md
    assert " ms" not in md and "ms |" not in md
    header = md.splitlines()[0]
    for part in ("**NVIDIA GeForce RTX 2080 Ti (sm_75)**", "locked at SM 1650 MHz", "2026-11-29",
                 "`qsa sweep sm75-decode --lock-clocks 1650`"):
        assert part in header
    assert "FAIL" not in md and "throttled:" not in md


def test_markdown_marks_throttling_and_failures() -> None:
    r = seed_record(throttle=(32768, 4))
    r.parity[-1].equal = False
    r.parity[-1].detail = "query 5 position 2050: id 9 vs 11"
    md = markdown(report.blocks(r))
    assert "| halve | candidate, dispatched | 15.0* |" in md and "* throttled: a thermal" in md
    assert ("Top-k: FAIL: 1 of 48 checks differ; the first: 524K (524288), 6 queries, capacity 524288, continuous, L2 clean: "
            "split vs cpu-oracle: query 5 position 2050: id 9 vs 11") in md
    assert "| split | candidate, dispatched | 66.0 | 66.0-66.0 | 50 | 0f5b95cb34c8 |" not in md  # no hash recorded
    assert report.verdict_lines(r) == [
        "FAIL (1 checks differ)", "FAIL 1/1: topk ctx=524288 nq=6 capacity=524288 kind=decode score_set=continuous "
        "l2=clean: split vs cpu-oracle: query 5 position 2050: id 9 vs 11"]


def test_a_saved_record_renders_the_same(tmp_path: Path) -> None:
    r = seed_record(seed=1, noise=0.05)
    r.write(tmp_path / "run.json")
    again = load_record(tmp_path / "run.json")
    assert markdown(report.blocks(again)) == markdown(report.blocks(r))
    assert rendered(again) == rendered(r) and text_of(report.blocks(again), 80) == text_of(report.blocks(r), 80)


def test_a_record_without_roles_renders_with_the_roles_of_its_time(tmp_path: Path) -> None:
    """What a record from before roles were recorded ran, its migration says: output/ knows no registry."""
    data = seed_record(seed=2, noise=0.03).to_dict()
    del data["settings"]["roles"], data["checks"]
    data["schema_version"] = 2
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = load_record(tmp_path / "old.json")
    assert rendered(old) == rendered(seed_record(seed=2, noise=0.03))
    assert [x.role for x in result_rows(old, "topk")[:3]] == ["reference", "baseline", "candidate"]


def test_the_keys_of_a_scorer_case_are_in_its_label() -> None:
    rng = np.random.default_rng(9)
    synthetic, adversarial = scores_case(420000, 4), {**scores_case(420000, 4), "keys": "adversarial"}
    r = record([measurement("scores", v, c, t, rng) for c in (synthetic, adversarial)
                for v, t in (("multi", 120.0), ("halve", 24.0))], [])
    text = rendered(r)
    assert row_of(text, "adversarial keys", "multi")[:4] == [
        "420K, 4 queries, capacity 524288, adversarial keys, L2 clean", "multi", "baseline", "120.0"]
    assert row_of(text, "420K, 4 queries, capacity 524288, L2 clean ", "multi")[3] == "120.0"
    assert report.case_label(adversarial) == "420K, 4 queries, capacity 524288, adversarial keys, L2 clean"


def test_a_hash_mismatch_and_a_variant_checked_not_timed() -> None:
    rng = np.random.default_rng(7)
    case = scores_case(9002, 5, capacity=16384)
    r = record([measurement("scores", "multi", case, 10.0, rng)],
               [parity("scores", case, "halve", "multi", equal=False, hashes={"multi": "aa" * 8, "halve": "bb" * 8})])
    text = rendered(r)
    assert row_of(text, "9K (9002)", "multi")[1:6] == ["multi", "baseline", "10.0", "10.0-10.0", "50"]
    assert row_of(text, "halve ") == ["", "halve", "candidate, dispatched", "–", "–", "–", "–", "bbbbbbbbbbbb",
                                      "multi: NO (4/5 rows equal)", "FAIL", "halve vs multi: query 1 position 7: id 12 vs 13"]
    assert "throttled:" not in text


@pytest.mark.parametrize(("samples", "cell"), [([], "BAD (samples: none)"),
                                               ([1.0, float("nan"), 2.0], "BAD (samples: 1 of 3 NaN or infinite)"),
                                               ([0.0, 0.0, 1.0], "BAD (samples: a median of 0 µs)"),
                                               ([1e308] * 3, "BAD (samples: 3 of 3 past 1e+09 µs)")])
def test_unusable_samples_render_as_bad_never_nan(samples: list[float], cell: str) -> None:
    r = seed_record()
    r.measurements[1].samples_us = samples  # halve at 32K, 1 query
    for width in (60, 80, WIDE):
        text = rendered(r, width)
        assert cell in " ".join(text.split()) and "nan" not in text.lower().replace("nan or", "")
    x = row(r, "scores", 32768, 1, "halve")
    assert x.median_us is None and x.floor_ratio is None and x.gbps is None and x.problem == cell[5:-1]
    assert next(ba for ba in before_after(result_rows(r)) if ba.candidate.key == x.key).speedup is None


def test_a_topk_row_is_dispatched_by_its_kind() -> None:
    r = seed_record()
    r.settings["dispatch"] = {"decode": {"kind": "decode", "scores": "halve", "topk": "wide", "reasons": {}},
                              "prompt": {"kind": "prompt", "scores": "reference", "topk": "reference", "reasons": {}}}
    assert row(r, "topk", 420000, 6, "wide").dispatched and not row(r, "topk", 420000, 6, "split").dispatched
    assert group_row(rendered(r), "420K, 6 queries, capacity 524288, continuous, L2 clean", "wide")[1:3] == ["wide", "baseline, dispatched"]


def test_a_parity_only_run_renders() -> None:
    case = topk_case(9000, 8, capacity=9000)
    r = record([], [parity("topk", case, "split", "reference")], argv=[])
    assert row_of(rendered(r), "9K, 8 queries")[1:] == ["split", "candidate, dispatched", "yes", "PASS"]
    md = markdown(report.blocks(r))
    assert "Top-k: the same bits in every check (1 checks)." in md and "`qsa sweep`" in md.splitlines()[0]


def test_the_windows_before_and_after_are_the_pairs_of_the_roles() -> None:
    rng = np.random.default_rng(23)
    case = scores_case(524288, 8)
    times = (("multi+wide", 480.0), ("halve+split", 120.0), ("halve+cluster", 96.0), ("multi+cluster", 160.0))
    r = record([measurement("window", name, case, t, rng) for name, t in times],
               [parity("window", case, name, "cpu-oracle", equal=name != "halve+cluster") for name, _ in times])
    r.settings["dispatch"] = {"kind": "decode", "scores": "multi", "topk": "cluster", "reasons": {}}
    (ba,) = before_after(result_rows(r))
    assert (ba.baseline.variant, ba.candidate.variant, ba.speedup) == ("multi+wide", "halve+split", 4.0)
    assert [x.role for x in result_rows(r)] == ["baseline", "candidate", "variant", "variant"]
    assert result_rows(r)[3].dispatched and row_of(rendered(r), "halve+cluster")[-2] == "FAIL"
    r.settings["roles"] = roles(("reference", "multi", "halve"), ("reference", "wide", "cluster"))
    assert before_after(result_rows(r))[0].candidate.variant == "halve+cluster"
    r.settings["roles"] = roles(("reference", "multi", "pr.scores"), ("reference", "wide", "pr.topk"))
    (ba,) = before_after(result_rows(r))  # an after pair not measured: the dispatched pair's
    assert (ba.candidate.variant, ba.speedup) == ("multi+cluster", 3.0)


def test_thresholds() -> None:
    r = seed_record()
    r.thresholds = [ThresholdCheck("scores", scores_case(131072, 1), "min_speedup", 1.2018, 1.0, True),
                    ThresholdCheck("scores", scores_case(420000, 8), "max_floor_ratio", 12.75, 10.0, False)]
    text = rendered(r)
    assert row_of(text, "131K (131072), 1 query", "min_speedup") == [
        "scores", "131K (131072), 1 query, capacity 524288, L2 clean", "min_speedup", "1.20x", ">= 1.00x", "holds"]
    assert row_of(text, "max_floor_ratio")[3:] == ["12.75", "<= 10.00", "BROKEN"]
    assert report.verdict_lines(r) == ["FAIL (1 of 2 thresholds broken)", "FAIL 1/1: scores ctx=420000 nq=8 "
                                       "capacity=524288 kind=decode l2=clean: max_floor_ratio 12.75, not <= 10.00"]


def test_info_renders_from_its_report() -> None:
    info = InfoReport(
        device={"name": "NVIDIA H200", "compute_capability": "9.0", "sms": 132, "l2_bytes": 62914560,
                "nvml": {"name": "NVIDIA H200", "max_sm_mhz": 1980, "power_limit_w": 700.0}},
        clocks={"sm_mhz": 1980, "mem_mhz": 3201, "temperature_c": 35, "power_w": 80.4, "event_reasons": ["gpu_idle"],
                "throttled": False},
        kernels=[{"name": "block_scores_halve_kernel<4>", "registers": 40, "shared_bytes": 0, "local_bytes": 0,
                  "max_threads": 1024}],
        dispatch={"decode": {"kind": "decode", "scores": "multi", "topk": "cluster",
                             "reasons": {"scores": "sm_90 decode: old multi scorer", "topk": "sm_90 decode: cluster"}}},
        notes=["cluster top-k: available (sm_90)"])
    text = text_of(info_blocks(info), WIDE)
    assert row_of(text, "l2_bytes")[1] == "60 MiB" and row_of(text, "nvml max_sm_mhz")[1] == "1980"
    assert row_of(text, "clocks now")[1] == "SM 1980 MHz, memory 3201 MHz, 35 °C, 80 W, reasons: gpu_idle"
    assert row_of(text, "halve") == ["block_scores_halve_kernel<4>", "40", "0", "0", "1024"]
    assert "cluster top-k: available (sm_90)." in text and row_of(text, "decode")[:3] == ["decode", "multi", "cluster"]
    assert "| block_scores_halve_kernel<4> | 40 | 0 | 0 | 1024 |" in markdown(info_blocks(info))
    info.clocks = None
    assert row_of(text_of(info_blocks(info), WIDE), "clocks now")[1] == "unavailable"


def test_many_variants_are_rows_so_the_width_does_not_grow() -> None:
    rng = np.random.default_rng(29)
    case = topk_case(131072, 3)
    names = [f"engine.topk-{i:02d}" for i in range(40)]
    r = record([measurement("topk", v, case, 10.0 + i, rng) for i, v in enumerate(names)], [])
    r.settings["roles"] = roles(("reference", "multi", "halve"), (names[0], names[3], names[7]))
    text = rendered(r)
    assert [row_of(text, f"{v} ")[3] for v in names] == [f"{10.0 + i:.1f}" for i in range(40)]
    assert row_of(text, names[3] + " ")[2] == "baseline" and row_of(text, names[7] + " ")[2] == "candidate"
    few = record([measurement("topk", v, case, 10.0 + i, rng) for i, v in enumerate(names[:2])], [])
    few.settings["roles"] = roles(("reference", "multi", "halve"), ("reference", names[0], names[1]))
    assert max(map(len, text.splitlines()[1:])) == max(map(len, rendered(few).splitlines()[1:]))


def test_csv_is_a_line_per_stage_case_and_variant_with_the_numbers_whole() -> None:
    r = seed_record(seed=4, noise=0.02)
    lines = list(csv.DictReader(io.StringIO(report.result_csv([(None, r)]))))
    assert len(lines) == len(result_rows(r)) == 75
    first = lines[0]
    assert (first["stage"], first["ctx"], first["variant"], first["role"]) == ("scores", "32768", "multi", "baseline")
    assert float(first["median_us"]) == r.measurements[0].median_us and first["hash"] == "0000800000000001"
    two = list(csv.DictReader(io.StringIO(report.result_csv([("a.json", r), ("b.json", r)]))))
    assert len(two) == 150 and {x["file"] for x in two} == {"a.json", "b.json"}


def test_clocks_line() -> None:
    r = seed_record(throttle=(131072, 8))
    assert report.clocks_line(r) == ("clocks: locked at SM 1650 MHz, read: SM 1650 MHz, memory 7000 MHz, 52 °C, 180 W, "
                                     "throttled in 1 of 75 measurements")
    r.settings["clock_lock"] = {"sm_mhz": 1650, "mem_mhz": None, "locked": False, "reason": "no permission"}
    r.measurements[0].clocks_after = dict(r.measurements[0].clocks_after, sm_mhz=1980, temperature_c=70)
    assert report.clocks_line(r).startswith("clocks: not locked (no permission), read: SM 1650-1980 MHz, "
                                            "memory 7000 MHz, 52-70 °C")


def test_clocks_line_without_nvml_or_gpu() -> None:
    rng = np.random.default_rng(0)
    m = measurement("scores", "halve", scores_case(32768, 1), 9.0, rng)
    m.clocks_before = m.clocks_after = None
    r = record([m], [], device={"name": "NVIDIA H200", "compute_capability": "9.0",
                                "nvml": {"unavailable": "NVML cannot be initialised: Driver Not Loaded"}})
    assert report.clocks_line(r) == "clocks: unavailable (NVML cannot be initialised: Driver Not Loaded)"
    cpu = record([m], [], backend="cpu", device={})
    assert report.clocks_line(cpu) == "clocks: not recorded (CPU backend)"
    assert markdown(report.blocks(cpu)).startswith("**CPU backend")


SHIPPED = Path(__file__).resolve().parent.parent / "docs" / "results" / "h200-2026-11-30" / "scores-420000-4.json"


@pytest.mark.parametrize(("width", "expected"), [
    (80, ["NVIDIA H200 (sm_90), clocks: not locked, read: SM 1980 MHz, memory 3201 MHz,",
          "36 °C, 120 W, throttled in 0 of 3 measurements, 2026-11-30 00:51:38+00:00,",
          "`qsa select-bench 420000 4 50 524288 --json",  # a phrase longer than the line: its own lines
          "/root/out/records/scores-420000-4.json`"]),
    (60, ["NVIDIA H200 (sm_90), clocks: not locked, read: SM 1980 MHz,",
          "memory 3201 MHz, 36 °C, 120 W,",
          "throttled in 0 of 3 measurements, 2026-11-30 00:51:38+00:00,",
          "`qsa select-bench 420000 4 50 524288 --json",
          "/root/out/records/scores-420000-4.json`"]),
])
def test_the_header_folds_between_its_phrases(width: int, expected: list[str]) -> None:
    """Never `36` / `°C` or `L2` / `clean` on two lines, as the issue's log showed."""
    assert text_of([report.header(load_record(SHIPPED))], width).splitlines() == expected


def test_on_the_cpu_backend_dispatched_says_for_which_card() -> None:
    r = seed_record()
    gpu = text_of(report.blocks(r), 80)
    assert "dispatched" in gpu and report.CPU_DISPATCH_NOTE not in gpu
    r.backend = "cpu"
    assert "dispatched: what the engine runs on sm_75 (the CPU backend has no card)" in text_of(report.blocks(r), 80)
