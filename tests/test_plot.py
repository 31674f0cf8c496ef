"""Plotting a hand-made record (skipped without matplotlib, an optional extra), and its lazy import."""

from __future__ import annotations

import copy
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from record_factory import measurement, record, seed_record, topk_case

from qsa_cli.output.plot import PlotError, plot_record


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_one_panel_per_stage(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    both = seed_record(seed=1, noise=0.04, throttle=(131072, 4))
    assert plot_record(both, tmp_path / "both.png") == tmp_path / "both.png"
    scores_only = copy.deepcopy(both)
    scores_only.measurements = [m for m in both.measurements if m.stage == "scores"]
    plot_record(scores_only, tmp_path / "scores.png")
    (w2, h2), (w1, h1) = png_size(tmp_path / "both.png"), png_size(tmp_path / "scores.png")
    assert h1 == h2 and w2 == 2 * w1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_series_that_differ_by_score_set_and_kind(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(9)
    ms = [measurement("topk", v, topk_case(ctx, nq, kind=kind, score_set=s), t * ctx / 9000, rng, noise=0.05)
          for v, t in (("wide", 30.0), ("split", 20.0))
          for ctx in (2100, 9000, 135176, 524288)
          for kind, nq in (("decode", 8), ("prompt", 64))
          for s in ("continuous", "equal")]
    out = plot_record(record(ms, [], backend="cpu", device={}), tmp_path / "topk.svg")
    assert out.read_text().startswith("<?xml")


def test_refusals(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    with pytest.raises(PlotError, match="unknown image type '.txt'"):
        plot_record(seed_record(), tmp_path / "plot.txt")
    with pytest.raises(PlotError, match="no timed measurements"):
        plot_record(record([], []), tmp_path / "plot.png")
    assert list(tmp_path.iterdir()) == []


def test_without_matplotlib_the_error_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if not installed
    with pytest.raises(PlotError, match=r"^plotting needs matplotlib: pip install 'qsa\[plot\]'$"):
        plot_record(seed_record(), tmp_path / "plot.png")


def test_optional_modules_are_imported_lazily() -> None:
    code = ("import sys; import qsa_cli.output.plot, qsa_cli.output.report, qsa_cli.output.gate, qsa_cli.config, qsa_cli.clocks; "
            "print(sorted(m for m in ('matplotlib', 'pynvml', 'cupy') if m in sys.modules))")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
