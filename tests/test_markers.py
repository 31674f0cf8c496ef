"""The test suites as README.md names them: ``pytest`` the CPU tests (what CI runs), ``-m "gpu and not slow"``
the quick GPU suite, ``-m "gpu and slow"`` the GPU tests of minutes (the whole sanitizer matrix among them)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOW = {
    "tests/test_sanitize.py::test_qsa_sanitize_reports_nothing_over_every_variant",
    "tests/test_engine_gpu.py::test_engine_switch_settings_in_a_child",
    "tests/test_engine_cli_gpu.py::test_sanitize_runs_the_checkouts_variants",
    "tests/test_engine_cli_gpu.py::test_sanitize_runs_a_newer_checkouts_paths_under_their_switches",
}


def marks_of(test: str) -> set[str]:
    """The marks of a test function: its own and its module's ``pytestmark``."""
    path, name = test.split("::")
    module = importlib.import_module(Path(path).stem)
    own = getattr(getattr(module, name), "pytestmark", [])
    shared = getattr(module, "pytestmark", [])
    return {m.name for m in [*own, *(shared if isinstance(shared, list) else [shared])]}


def test_the_slow_tests_are_gpu_tests() -> None:
    """Only these run apart (a slow CPU test would slow CI's run, and an unlisted one would leave the quick suite)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-m", "slow", "tests"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert {line.split("[")[0] for line in out.stdout.splitlines() if "::" in line} == SLOW
    assert all({"gpu", "slow"} <= marks_of(test) for test in SLOW)
