"""The test suites as README.md names them: ``pytest`` the CPU tests (what CI runs), ``-m "gpu and not slow"``
the quick GPU suite, ``-m "gpu and slow"`` the GPU tests of minutes (the whole sanitizer matrix among them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import COLLECTED, LONGEST_FIRST

ROOT = Path(__file__).resolve().parent.parent
SLOW = {
    "tests/test_sanitize.py::test_qsa_sanitize_reports_nothing_over_every_variant",
    "tests/test_integrity.py::test_the_checks_kernels_are_clean_under_compute_sanitizer",  # beside the matrix
    "tests/test_engine_gpu.py::test_engine_switch_settings_in_a_child",
    "tests/test_engine_cli_gpu.py::test_sanitize_runs_the_checkouts_variants",
    "tests/test_engine_cli_gpu.py::test_sanitize_runs_a_newer_checkouts_paths_under_their_switches",
    "tests/test_ci_recipe.py::test_the_workflows_commands_judge_three_pull_requests_and_keep_main_s_baseline",
}
# The cluster top-k's tests whose wide-size cases (16 CTAs a query) run in the slow suite, their 8-CTA
# cases in the quick one (test_the_wide_kernel_matches_oracle: every window but 420K)
WIDE_REPEATS = {
    f"tests/test_gpu_topk_cluster.py::{name}" for name in (
        "test_the_wide_kernel_matches_oracle", "test_adversarial_scores_match_the_model",
        "test_each_early_end_matches_oracle", "test_each_gathered_near_row_matches_oracle", "test_nan_inf_and_signed_zeros", "test_identity_boundary_and_tails",
        "test_graph_replays_follow_the_device_steps")
}


def test_the_slow_tests_are_gpu_tests(request: pytest.FixtureRequest) -> None:
    """Only these run apart (a slow CPU test would slow CI's run, and an unlisted one would leave the quick
    suite), and of the cluster's repeats only their wide-size cases: the marks of every test this run
    collected, as ``-m slow`` would select them."""
    collected = request.config.stash[COLLECTED]
    files = {nodeid.split("::")[0] for nodeid in collected}
    unseen = {f"tests/{path.name}" for path in (ROOT / "tests").glob("test_*.py")} - files
    if unseen:
        pytest.skip(f"run with the whole suite: this run did not collect {', '.join(sorted(unseen)[:3])}, ...")
    slow = [nodeid for nodeid, marks in collected.items() if "slow" in marks]
    assert {nodeid.split("[")[0] for nodeid in slow} == SLOW | WIDE_REPEATS
    assert all({"gpu", "slow"} <= marks for nodeid, marks in collected.items() if nodeid.split("[")[0] in SLOW)
    assert all("gpu" in marks for nodeid, marks in collected.items() if nodeid.split("[")[0] in WIDE_REPEATS)
    repeats = [nodeid for nodeid in slow if nodeid.split("[")[0] in WIDE_REPEATS]
    assert all("16-ctas" in nodeid or "wide_kernel" in nodeid and "420000" not in nodeid for nodeid in repeats)


def test_the_longest_cpu_tests_run_first(request: pytest.FixtureRequest) -> None:
    """conftest's LONGEST_FIRST still names the every-card compiles (renamed, the suite would quietly end on them
    again), CPU tests both."""
    compiles = {"tests/test_nvcc.py::test_compiles_for_every_card_without_spills_and_emits_its_launchers_kernels",
                "tests/test_engine.py::test_the_fake_compiles_for_every_card_without_spills"}
    collected = request.config.stash[COLLECTED]
    if not {c.split("::")[0] for c in compiles} <= {nodeid.split("::")[0] for nodeid in collected}:
        pytest.skip("run with tests/test_nvcc.py and tests/test_engine.py collected")
    first = {nodeid.split("[")[0] for nodeid, marks in collected.items()
             if LONGEST_FIRST in nodeid and "gpu" not in marks}
    assert first == compiles
