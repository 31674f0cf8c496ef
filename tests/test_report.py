"""Rendering records built by hand: tables, clocks line and the seed-style markdown."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from record_factory import measurement, parity, record, roles, scores_case, seed_record, topk_case
from rich.console import Console

from qsa_cli.catalog import STAGES, qsa_catalog
from qsa_cli.output import report
from qsa_cli.record.schema import load_record


def text(renderable: object) -> str:
    console = Console(record=True, width=260, color_system=None)
    console.print(renderable)
    return console.export_text()


def row_of(rendered: str, *needles: str) -> list[str]:
    """The cells of the first table row containing every needle."""
    line = next(line for line in rendered.splitlines() if all(n in line for n in needles))
    return [c.strip() for c in line.strip("│ ").split("│")]


def headers(table: object) -> list[str]:
    return [c.header for c in table.columns]


@pytest.mark.parametrize(
    ("ctx", "label", "cell"),
    [(999, "999", "999"), (2100, "2K", "2K (2100)"), (9000, "9K", "9K"), (32768, "32K", "32K (32768)"),
     (131072, "131K", "131K (131072)"), (420000, "420K", "420K"), (524288, "524K", "524K (524288)"),
     (1048576, "1M", "1M (1048576)"), (1500000, "1.5M", "1.5M")],
)
def test_context_labels_follow_the_seed(ctx: int, label: str, cell: str) -> None:
    assert report.context_label(ctx) == label
    assert report.context_cell(ctx) == cell


def test_markdown_reproduces_the_seeds_tables() -> None:
    md = report.markdown(seed_record(seed=3, noise=0.02))
    assert "| context | queries | before | after |" in md
    assert "| 32K | 1 / 3 / 4 / 8 | 12.1 / 24.8 / 31.7 / 59.2 µs | 7.7 / 14.5 / 15.0 / 36.0 |" in md
    assert "| 131K | 1 / 3 / 4 / 8 | 41.1 / 86.8 / 113.6 / 217.0 | 34.2 / 66.2 / 67.1 / 93.3 |" in md
    assert ("| 420K | 1 / 3 / 4 / 6 / 8 | 116.7 / 264.9 / 346.6 / 509.7 / 773.9 | "
            "100.5 / 117.9 / 124.5 / 238.0 / 255.1 |") in md
    assert "| context | 1 query | 3 | 6 |" in md
    assert "| 9K | 0.034 → 0.032 ms | 0.034 → 0.035 | 0.033 → 0.042 |" in md
    assert "| 420K | 0.203 → 0.033 ms | 0.209 → 0.040 | 0.210 → 0.064 |" in md
    assert "| 524K | 0.243 → 0.034 ms | 0.248 → 0.041 | 0.251 → 0.066 |" in md
    header = md.splitlines()[0]
    for part in ("NVIDIA GeForce RTX 2080 Ti (sm_75)", "locked at SM 1650 MHz", "2026-11-29",
                 "`qsa sweep sm75-decode --lock-clocks 1650`"):
        assert part in header
    assert "Contexts in cells: 32K = 32768, 131K = 131072, 524K = 524288." in md
    assert "**FAIL**" not in md and "throttled:" not in md


def test_markdown_marks_throttling_and_failures() -> None:
    r = seed_record(throttle=(32768, 4))
    r.parity[-1].equal = False
    r.parity[-1].detail = "query 5 position 2050: id 9 vs 11"
    md = report.markdown(r)
    assert "7.7 / 14.5 / 15.0* / 36.0" in md
    assert md.rstrip().endswith("slowdown was reported around these samples.")
    assert "**FAIL**: 1 of 48 checks differ; first: 524K (524288), 6 queries, capacity 524288, continuous" in md
    assert "split vs cpu-oracle: query 5 position 2050: id 9 vs 11" in md


def test_a_saved_record_renders_the_same(tmp_path: Path) -> None:
    r = seed_record(seed=1, noise=0.05)
    r.write(tmp_path / "run.json")
    again = load_record(tmp_path / "run.json")
    assert report.markdown(again) == report.markdown(r)
    assert text(report.scores_table(again)) == text(report.scores_table(r))


def test_scores_table() -> None:
    table = report.scores_table(seed_record(throttle=(32768, 4)))
    rendered = text(table)
    assert row_of(rendered, "32K (32768)", " 4 ") == [
        "32K (32768)", "524288", "4", "8193", "0000800000000004", "0000800000000004", "yes", "31.7", "15.0*", "9.0",
        "2.11x", "280", "1.67"]
    assert row_of(rendered, "420K", " 8 ")[7:] == ["773.9", "255.1", "20.0", "3.03x", "211", "12.75"]
    assert headers(table)[7:10] == ["multi (old)", "halve (new)", "read floor"]
    assert "* throttled: a thermal, power or hardware slowdown" in rendered


def test_scores_table_and_markdown_name_the_keys_where_a_case_has_them() -> None:
    rng = np.random.default_rng(9)
    synthetic, adversarial = scores_case(420000, 4), {**scores_case(420000, 4), "keys": "adversarial"}
    r = record([measurement("scores", v, c, t, rng) for c in (synthetic, adversarial)
                for v, t in (("multi", 120.0), ("halve", 24.0))], [])
    rendered = text(report.scores_table(r))
    assert row_of(rendered, "420K", "adversarial")[:5] == ["420K", "524288", "4", "adversarial", "105001"]
    assert row_of(rendered, "420K", "synthetic")[3] == "synthetic"
    assert "keys" not in text(report.scores_table(seed_record()))  # no column when every case is synthetic
    md = report.markdown(r)
    assert "capacity 524288, L2 cold\n" in md and "capacity 524288, L2 cold, adversarial keys" in md
    assert "| context | queries | keys | multi (old) | halve (new) |" in md and "| 420K | 4 | adversarial | 120.0 | 24.0 |" in md
    assert report.case_label(adversarial) == "420K, 4 queries, capacity 524288, adversarial keys"


def test_scores_table_flags_a_hash_mismatch_and_missing_variants() -> None:
    rng = np.random.default_rng(7)
    case = scores_case(9002, 5, capacity=16384)
    r = record([measurement("scores", "multi", case, 10.0, rng)],
               [parity("scores", case, "halve", "multi", equal=False, hashes={"multi": "aa", "halve": "bb"})])
    table = report.scores_table(r)
    rendered = text(table)
    assert headers(table)[4:] == ["hash old", "hash new", "equal", "multi (old)", "read floor", "speedup",
                                               "GB/s (new)", "new / read floor"]  # halve: checked, never measured
    assert row_of(rendered, "9K (9002)")[4:] == ["aa", "bb", "NO", "10.0", "–", "–", "–", "–"]
    assert "throttled" not in rendered


def test_topk_table_counts_identical_ids_and_gives_the_verdict() -> None:
    rng = np.random.default_rng(11)
    good, bad = topk_case(420000, 8), topk_case(135176, 64, capacity=135176, kind="prompt", score_set="equal")
    ms = [measurement("topk", v, good, t, rng) for v, t in
          (("reference", 400.0), ("wide", 210.0), ("split", 64.0), ("cupy.argpartition", 900.0))]
    checks = [parity("topk", good, "split", "reference"), parity("topk", bad, "split", "reference"),
              parity("topk", bad, "wide", "reference", equal=False)]
    r = record(ms, checks)
    rendered = text(report.topk_table(r))
    assert row_of(rendered, "420K") == ["420K", "524288", "8", "decode", "continuous", "400.0", "210.0", "64.0",
                                        "64.0 split", "900.0", "8/8", "PASS"]
    # the prompt case: the recorded dispatch is the decode call's, so no dispatched figure
    assert row_of(rendered, "135K") == ["135K (135176)", "135176", "64", "prompt", "equal", "–", "–", "–", "–", "–",
                                        "63/64", "FAIL wide vs reference"]


def test_parity_table_shows_every_check_and_the_first_difference() -> None:
    case = topk_case(2100, 8, capacity=262144, score_set="levels64")
    r = record([], [parity("topk", case, "split", "cpu-oracle"), parity("topk", case, "wide", "cpu-oracle", equal=False)])
    rendered = text(report.parity_table(r))
    assert row_of(rendered, "split") == ["topk", "2K (2100), 8 queries, capacity 262144, levels64", "split",
                                         "cpu-oracle", "8/8", "equal"]  # (an empty detail)
    assert row_of(rendered, "wide")[4:] == ["7/8", "DIFFERS", "query 1 position 7: id 12 vs 13"]


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
    assert report.markdown(cpu).startswith("**CPU backend")


def test_a_parity_only_run_renders() -> None:
    case = topk_case(9000, 8, capacity=9000)
    r = record([], [parity("topk", case, "split", "reference")], argv=[])
    assert row_of(text(report.topk_table(r)), "9K")[-2:] == ["8/8", "PASS"]
    md = report.markdown(r)
    assert "|" not in md and "Identical ids in every query of every case (1 checks)." in md
    assert "`qsa sweep`" in md.splitlines()[0]


def test_dispatch_recorded_per_kind_as_a_sweep_does() -> None:
    r = seed_record()
    r.settings["dispatch"] = {"decode": {"kind": "decode", "scores": "halve", "topk": "wide", "reasons": {}},
                              "prompt": {"kind": "prompt", "scores": "reference", "topk": "reference", "reasons": {}}}
    assert report.dispatch_of(r, "prompt")["topk"] == "reference"
    assert row_of(text(report.topk_table(r)), "420K", " 6 ")[8] == "210.0 wide"


def test_window_table() -> None:
    rng = np.random.default_rng(5)
    case = scores_case(420000, 4)
    pairs = (("multi+wide", 470.0), ("halve+split", 160.0), ("halve+cluster", 150.0))
    ms = [measurement("window", name, case, t, rng) for name, t in pairs]
    checks = [parity("window", case, name, "cpu-oracle", equal=name != "halve+cluster") for name, _ in pairs]
    r = record(ms, checks)
    r.settings["dispatch"] = {"kind": "decode", "scores": "halve", "topk": "split", "reasons": {}}
    rendered = text(report.window_table(r))
    assert "multi+wide" in rendered and "halve+cluster" in rendered
    assert row_of(rendered, "420K") == ["420K", "524288", "4", "470.0", "160.0", "150.0", "160.0 halve+split", "2.94x",
                                        "3/4", "FAIL halve+cluster vs cpu-oracle"]
    assert [t.title for t in report.tables(r)] == [report.window_table(r).title]


def test_thresholds_table_and_markdown() -> None:
    from qsa_cli.record.schema import ThresholdCheck

    r = seed_record()
    r.thresholds = [ThresholdCheck("scores", scores_case(131072, 1), "min_speedup", 1.2018, 1.0, True),
                    ThresholdCheck("scores", scores_case(420000, 8), "max_floor_ratio", 12.75, 10.0, False)]
    rendered = text(report.thresholds_table(r))
    assert row_of(rendered, "131K") == ["scores", "131K (131072), 1 query, capacity 524288", "min_speedup", "1.20x",
                                        ">= 1.00x", "holds"]
    assert row_of(rendered, "420K")[3:] == ["12.75", "<= 10.00", "BROKEN"]
    assert [t.title for t in report.tables(r)][-1] == "Thresholds" and len(report.tables(r)) == 3
    assert ("**FAIL**: 1 of 2 thresholds broken; first: 420K, 8 queries, capacity 524288: max_floor_ratio 12.75, "
            "not <= 10.00") in report.markdown(r)
    r.thresholds.pop()
    assert "Every threshold holds (1 checks)." in report.markdown(r)


def test_info_tables() -> None:
    from types import SimpleNamespace

    from qsa_cli.kernels import KernelInfo

    info = SimpleNamespace(
        device={"name": "NVIDIA H200", "compute_capability": "9.0", "sms": 132, "l2_bytes": 62914560,
                "nvml": {"name": "NVIDIA H200", "max_sm_mhz": 1980, "power_limit_w": 700.0}},
        clocks={"sm_mhz": 1980, "mem_mhz": 3201, "temperature_c": 35, "power_w": 80.4, "event_reasons": ["gpu_idle"],
                "throttled": False},
        kernels=[KernelInfo("block_scores_halve_kernel<4>", 40, 0, 0, 1024)],
        dispatch={"decode": {"kind": "decode", "scores": "multi", "topk": "cluster",
                             "reasons": {"scores": "sm_90 decode: old multi scorer", "topk": "sm_90 decode: cluster"}}},
        notes=["cluster top-k: available (sm_90)"],
    )
    device, kernels, dispatch = (text(t) for t in report.info_tables(info))
    assert row_of(device, "l2_bytes")[1] == "60 MiB" and row_of(device, "nvml max_sm_mhz")[1] == "1980"
    assert row_of(device, "clocks now")[1] == "SM 1980 MHz, memory 3201 MHz, 35 °C, 80 W, reasons: gpu_idle"
    assert row_of(kernels, "halve") == ["block_scores_halve_kernel<4>", "40", "0", "0", "1024"]
    assert "cluster top-k: available" in kernels
    assert row_of(dispatch, "decode")[:3] == ["decode", "multi", "cluster"]
    info.clocks = None
    assert row_of(text(report.info_tables(info)[0]), "clocks now")[1] == "unavailable"


def test_markdown_has_every_variant_table_with_the_floor_ratio():
    from qsa_cli.record.schema import Measurement, RunRecord

    r = RunRecord(command="select-bench", argv=["select-bench", "420000", "4", "5", "524288"], backend="gpu",
                  device={"name": "NVIDIA H200", "compute_capability": "9.0"})
    case = {"ctx": 420000, "nq": 4, "capacity": 524288, "kind": "decode", "l2": "cold"}
    for variant, t in (("multi", 120.0), ("halve", 24.0), ("read-floor", 16.0)):
        r.measurements.append(Measurement("scores", variant, case, [t, t, t]))
    md = report.markdown(r)
    assert "| context | queries | multi (old) | halve (new) | read floor | new / read floor |" in md
    assert "| 420K | 4 | 120.0 | 24.0 | 16.0 | 1.50 |" in md


def test_a_variant_the_registry_does_not_know_gets_its_column_with_its_median() -> None:
    rng = np.random.default_rng(13)
    case = scores_case(131072, 4)
    r = record([measurement("scores", v, case, t, rng) for v, t in
                (("multi", 113.6), ("base.scores", 98.5), ("halve", 67.1), ("read-floor", 13.0))], [])
    table = report.scores_table(r)
    assert headers(table)[7:11] == ["multi (old)", "base.scores", "halve (new)", "read floor"]
    assert row_of(text(table), "131K")[7:12] == ["113.6", "98.5", "67.1", "13.0", "1.69x"]
    md = report.markdown(r)
    assert "| context | queries | multi (old) | base.scores | halve (new) | read floor | new / read floor |" in md
    assert "| 131K | 4 | 113.6 | 98.5 | 67.1 | 13.0 | 5.16 |" in md


def test_the_records_roles_are_the_tables_old_and_new() -> None:
    rng = np.random.default_rng(17)
    case = scores_case(420000, 4)
    hashes = {"reference": "aa", "multi": "bb"}
    r = record([measurement("scores", v, case, t, rng) for v, t in
                (("reference", 40.0), ("multi", 120.0), ("halve", 24.0), ("read-floor", 16.0))],
               [parity("scores", case, "multi", "reference", hashes=hashes),
                parity("scores", case, "halve", "reference", equal=False, hashes={"halve": "cc", "reference": "aa"})])
    r.settings["roles"] = roles(("reference", "reference", "multi"), ("reference", "wide", "split"))
    table = report.scores_table(r)
    assert table.title == "Scorer: a decode call, reference (old) vs multi (new), µs"
    assert headers(table)[7:11] == ["reference (old)", "multi (new)", "halve", "read floor"]
    # the hashes and the equal of reference vs multi; the speedup, GB/s and floor ratio of multi
    assert row_of(text(table), "420K")[4:] == ["aa", "bb", "yes", "40.0", "120.0", "24.0", "16.0", "0.33x", "448",
                                               "7.50"]
    md = report.markdown(r)
    assert "### Scorer: a decode call, before (reference) / after (multi), capacity 524288" in md
    assert "| 420K | 4 | 40.0 µs | 120.0 |" in md
    assert "| context | queries | reference (old) | multi (new) | halve | read floor | new / read floor |" in md
    assert "| 420K | 4 | 40.0 | 120.0 | 24.0 | 16.0 | 7.50 |" in md


def test_a_compare_sides_variants_in_their_roles() -> None:
    rng = np.random.default_rng(19)
    case = topk_case(524288, 6)
    r = record([measurement("topk", v, case, t, rng) for v, t in
                (("base.split", 66.0), ("cand.split", 33.0), ("cupy.argpartition", 700.0))],
               [parity("topk", case, "cand.split", "base.split")])
    r.settings["roles"] = roles(("base.reference", "base.multi", "cand.multi"), ("base.reference", "base.split", "cand.split"))
    table = report.topk_table(r)
    assert headers(table)[5:] == ["base.split (old)", "cand.split (new)", "dispatched", "cupy.argpartition",
                                  "identical", "verdict"]
    assert row_of(text(table), "524K")[5:] == ["66.0", "33.0", "–", "700.0", "6/6", "PASS"]  # the dispatched split: not measured
    md = report.markdown(r)
    assert "### Top-k: a decode call, continuous scores, base.split → cand.split, capacity 524288" in md
    assert "| 524K | 0.066 → 0.033 ms |" in md


def test_a_record_without_roles_renders_with_the_registrys() -> None:
    old = seed_record(seed=2, noise=0.03)
    assert "roles" not in old.settings
    new = seed_record(seed=2, noise=0.03)
    new.settings["roles"] = {stage: qsa_catalog().roles(stage) for stage in STAGES}
    assert [text(t) for t in report.tables(old)] == [text(t) for t in report.tables(new)]
    assert report.markdown(old) == report.markdown(new)
    assert headers(report.topk_table(old))[5:8] == ["reference", "wide (old)", "split (new)"]


def test_the_windows_before_and_after_are_the_pairs_of_the_roles() -> None:
    rng = np.random.default_rng(23)
    case = scores_case(524288, 8)
    times = (("multi+wide", 480.0), ("halve+split", 120.0), ("halve+cluster", 96.0), ("multi+cluster", 160.0))
    r = record([measurement("window", name, case, t, rng) for name, t in times], [])
    r.settings["dispatch"] = {"kind": "decode", "scores": "multi", "topk": "cluster", "reasons": {}}
    # the registry's roles: multi+wide before, halve+split after, whatever was dispatched
    table = report.window_table(r)
    assert headers(table)[3:8] == ["multi+wide (old)", "halve+split (new)", "halve+cluster", "multi+cluster",
                                   "dispatched"]
    assert row_of(text(table), "524K")[3:9] == ["480.0", "120.0", "96.0", "160.0", "160.0 multi+cluster", "4.00x"]
    r.settings["roles"] = roles(("reference", "multi", "halve"), ("reference", "wide", "cluster"))
    assert headers(report.window_table(r))[3:5] == ["multi+wide (old)", "halve+split"]
    assert row_of(text(report.window_table(r)), "524K")[4:9] == ["120.0", "96.0", "160.0", "160.0 multi+cluster", "5.00x"]
    assert "| multi+wide (old) | halve+split | halve+cluster (new) | multi+cluster |" in report.markdown(r)
    # an after pair not measured: the speedup is over the dispatched pair
    r.settings["roles"] = roles(("reference", "multi", "pr.scores"), ("reference", "wide", "pr.topk"))
    assert row_of(text(report.window_table(r)), "524K")[8] == "3.00x"


def test_many_variants_each_get_a_column() -> None:
    rng = np.random.default_rng(29)
    case = topk_case(131072, 3)
    names = [f"engine.topk-{i}" for i in range(10)]
    r = record([measurement("topk", v, case, 10.0 + i, rng) for i, v in enumerate(names)], [])
    r.settings["roles"] = roles(("reference", "multi", "halve"), (names[0], names[3], names[7]))
    table = report.topk_table(r)
    assert headers(table)[5:15] == [*names[:3], f"{names[3]} (old)", *names[4:7], f"{names[7]} (new)", *names[8:]]
    assert row_of(text(table), "131K")[5:15] == [f"{10.0 + i:.1f}" for i in range(10)]
    console = Console(record=True, width=100, color_system=None)
    console.print(table)  # too wide for the console: rich wraps the cells
    assert max(len(line) for line in console.export_text().splitlines()) <= 100
