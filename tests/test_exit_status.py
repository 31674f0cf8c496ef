"""The exit status contract of the README, per command: 0 every check passed; 1 an output differs, a
threshold is broken or the gate fails; 2 bad input (one line); 130 interrupted by Ctrl-C, 143 by SIGTERM
(one line, and with --json the record so far).

Differences and interrupts are injected into the CPU models and stage runners; what needs a GPU to
pass (window-bench, info) is checked here for its exit status without one.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from record_factory import seed_record

from qsa_cli.cli import main
from qsa_cli.interrupts import Interrupted, SignalCatcher

SMALL = ("4099", "2", "2", "8192", "--backend", "cpu")
TINY_SWEEP = "iterations: 2\nwarmup: 0\nstages: [scores]\ncontexts: [4099]\nqueries: [1, 2]\ncapacity: 8192\n"
SMALL_TOPK_MATRIX = "iterations: 0\nstages: [topk]\nkind: prompt\ncontexts: [4099]\nqueries: [3]\ncapacity: 8192\n"

Inject = Callable[[pytest.MonkeyPatch, Path], None]


def _halve_differs(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """The halving scorer's model, one bit off in query 0, block 0: made alone (score_blocks) or beside the
    other orders (the selftest's scores_in_orders)."""
    from qsa_cli.model import scores

    real = scores.scores_in_orders

    def off(inputs, orders):
        out = real(inputs, orders)
        if "halve" in out:
            out["halve"] = out["halve"].copy()
            out["halve"].view(np.uint32)[0, 0] ^= 1
        return out

    monkeypatch.setattr(scores, "scores_in_orders", off)


def _split_differs(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """The split top-k's model, its first two ids of query 0 swapped."""
    from qsa_cli.stages import topk

    real = topk.topk_ids

    def off(inputs, variant, *rest):
        out = real(inputs, variant, *rest)
        if variant == "split":
            out = out.copy()
            out[0, :2] = out[0, 1::-1]
        return out

    monkeypatch.setattr(topk, "topk_ids", off)


def _interrupted(module: str, name: str, signum: int = signal.SIGINT) -> Inject:
    """``module.name`` is Ctrl-C (a KeyboardInterrupt), or the signal ``signum`` as main()'s handler raises it."""
    def patch(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
        def stop(*args, **kwargs):
            raise KeyboardInterrupt if signum == signal.SIGINT else Interrupted(signum, SignalCatcher())

        monkeypatch.setattr(f"{module}.{name}", stop)
    return patch


def _small_topk_matrix(then: Inject | None = None) -> Inject:
    """topk-parity --selftest on one small prompt call instead of spec section 6's matrix."""
    def patch(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
        (folder / "selftest.yaml").write_text(SMALL_TOPK_MATRIX)
        monkeypatch.setattr("qsa_cli.runs.topk_selftest.SELFTEST_CONFIG", str(folder / "selftest.yaml"))
        if then is not None:
            then(monkeypatch, folder)
    return patch


def _small_selftest(then: Inject | None = None) -> Inject:
    """qsa selftest on one small call of each stage."""
    def patch(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
        monkeypatch.setattr("qsa_cli.runs.selftest.SELFTEST_SCORER_CASES", ((4099, 2, 8192),))
        monkeypatch.setattr("qsa_cli.runs.selftest.SELFTEST_TOPK_CASES", ((4099, 8192),))
        if then is not None:
            then(monkeypatch, folder)
    return patch


def _files(folder: Path) -> None:
    """good.json, slower.json (its new kernels 30% slower) and sweep.yaml, broken.yaml (a threshold)."""
    good = seed_record(seed=1, noise=0.02)
    good.write(folder / "good.json")
    slower = seed_record(seed=2, noise=0.02, scale=1.3)
    slower.write(folder / "slower.json")
    (folder / "sweep.yaml").write_text(TINY_SWEEP)
    (folder / "broken.yaml").write_text(TINY_SWEEP + "thresholds:\n  scores:\n    min_speedup: 1000\n")


SCORES_DIFFER = "FAIL (2 checks differ)"  # halve against multi, and against the CPU model
STATUS = [
    # (argv, what is injected, exit status, the last line: stdout's for 0 and 1, stderr's for 2 and 130)
    (("select-bench", *SMALL), None, 0, "PASS"),
    (("select-bench", *SMALL), _halve_differs, 1, SCORES_DIFFER),
    (("select-bench", "4099", "2", "0", "8192", "--backend", "cpu"), None, 2, "qsa: error: ITERS must be > 0 (got 0)"),
    (("select-bench", *SMALL), _interrupted("qsa_cli.stages.scores", "run_scores"), 130, "qsa: interrupted"),
    (("select-bench", *SMALL, "--markdown", "--format", "csv"), None, 2, "qsa: error: --markdown is --format markdown"),
    (("topk-parity", *SMALL), None, 0, "PASS"),
    (("topk-parity", *SMALL), _split_differs, 1, "FAIL (12 checks differ)"),  # 3 per score set
    (("topk-parity", "4099", "2", "2", "8192", "2"), None, 2, "qsa: error: COUNT must be 0"),
    (("topk-parity", *SMALL), _interrupted("qsa_cli.stages.topk", "run_topk"), 130, "qsa: interrupted"),
    (("topk-parity", "--selftest", "--backend", "cpu"), _small_topk_matrix(), 0, "PASS"),
    (("topk-parity", "--selftest", "--backend", "cpu"), _small_topk_matrix(_split_differs), 1, "FAIL (1 of 1 checks)"),
    (("topk-parity", "--selftest", "4099"), None, 2, "qsa: error: --selftest takes no"),
    (("topk-parity", "--selftest", "--backend", "cpu"),
     _small_topk_matrix(_interrupted("qsa_cli.stages.topk", "run_topk")), 130, "qsa: interrupted"),
    (("sweep", "sweep.yaml", "--backend", "cpu"), None, 0, "PASS"),
    (("sweep", "broken.yaml", "--backend", "cpu"), None, 0, "PASS"),  # thresholds are not judged on CPU times
    (("sweep", "sweep.yaml", "--backend", "cpu"), _halve_differs, 1, "FAIL (6 checks differ)"),  # per case: vs multi, the reference, the model
    (("sweep", "missing.yaml", "--backend", "cpu"), None, 2, "qsa: error: missing.yaml: no such config file"),
    (("sweep", "sweep.yaml", "--backend", "cpu"), _interrupted("qsa_cli.stages.scores", "run_scores"), 130,
     "qsa: interrupted"),
    (("selftest",), _small_selftest(), 0, "PASS"),
    (("selftest",), _small_selftest(_halve_differs), 1, "FAIL (1 of 4 checks)"),
    (("selftest", "--require-gpu"), None, 2, "qsa: error: --require-gpu: "),
    (("selftest",), _interrupted("qsa_cli.stages.scores", "run_scores"), 130, "qsa: interrupted"),
    (("window-bench", "4099", "2", "2", "8192"), None, 2, "qsa: error: "),  # no device here
    (("gate", "--baseline", "good.json", "--results", "good.json"), None, 0, "GATE PASS"),
    (("gate", "--baseline", "good.json", "--results", "slower.json"), None, 1, "GATE FAIL (25 SLOW)"),
    (("gate", "--baseline", "good.json", "--results", "good.json", "--tolerance", "2"), None, 2,
     "qsa: error: Invalid value for '--tolerance': 2.0 is not in the range 0<=x<1."),
    (("gate", "--baseline", "good.json", "--results", "good.json"), _interrupted("qsa_cli.output.gate", "compare"), 130,
     "qsa: interrupted"),
    (("report", "good.json"), None, 0, "Top-k: the same bits in every check (48 checks)."),  # its last block
    (("report", "missing.json"), None, 2, "qsa: error: missing.json: no such file"),
    (("plot", "good.json", "-o", "good.png"), None, 0, "good.png"),
    (("plot", "good.json", "-o", "missing/good.png"), None, 2, "qsa: error: -o/--output missing/good.png: no such"),
    (("info",), None, 0, "Switches set: none."),  # the catalog and the dispatch on each card need no device
    (("info", "--engine", "nowhere"), None, 2, "qsa: error: engine checkout nowhere: no such directory"),
    (("select-bench", *SMALL), _interrupted("qsa_cli.stages.scores", "run_scores", signal.SIGTERM), 143,
     "qsa: interrupted by SIGTERM"),
    (("topk-parity", *SMALL, "--json", "run.json"), _interrupted("qsa_cli.stages.topk", "run_topk", signal.SIGTERM),
     143, "qsa: interrupted by SIGTERM: the record so far (nothing measured yet) is in run.json, marked incomplete"),
    (("sweep", "sweep.yaml", "--backend", "cpu", "--json", "-"),
     _interrupted("qsa_cli.stages.scores", "run_scores", signal.SIGTERM), 143,
     "qsa: interrupted by SIGTERM: the record so far (nothing measured yet) is in stdout, marked incomplete"),
    (("selftest",), _interrupted("qsa_cli.stages.scores", "run_scores", signal.SIGTERM), 143,
     "qsa: interrupted by SIGTERM"),
    (("gate", "--baseline", "good.json", "--results", "good.json"),
     _interrupted("qsa_cli.output.gate", "compare", signal.SIGTERM), 143, "qsa: interrupted by SIGTERM"),
    (("selftest", "--json", "selftest.json"), _interrupted("qsa_cli.stages.scores", "run_scores"), 130,
     "qsa: interrupted: the record so far (1 selftest check) is in selftest.json, marked incomplete"),
]


@pytest.mark.parametrize(("argv", "inject", "code", "last"), STATUS, ids=[f"{' '.join(a)} -> {c}" for a, _, c, _ in STATUS])
def test_exit_status(capsys, tmp_path, monkeypatch, argv, inject, code, last) -> None:
    if argv[0] == "plot":
        pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    _files(tmp_path)
    if inject is not None:
        inject(monkeypatch, tmp_path)
    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    out, err = capsys.readouterr()
    assert ended.value.code == code, (out, err)
    assert "Traceback" not in out + err
    if code in (0, 1):
        summary, failures = verdict_of(out)
        assert summary.startswith(last), out
        assert (code == 1) == bool(failures) or argv[0] == "report"
    elif code == 2:
        assert err.count("\n") == 1 and err.startswith("qsa: error: ") and last in err, err
    else:  # after what the run printed as it went, a blank line closing the terminal's ^C, then one line
        assert err.rstrip("\n").split("\n")[-2:] == ["", last], err


NUMBERED = re.compile(r"^((?:GATE |COMPARE )?FAIL) (\d+)/(\d+): ")


def verdict_of(out: str) -> tuple[str, list[str]]:
    """A command's verdict: its summary line, and the numbered failure lines after it (its last lines,
    one per failure, numbered 1 to n, each naming what failed)."""
    lines = out.rstrip().splitlines()
    failures = []
    while lines and NUMBERED.match(lines[-1]):
        failures.insert(0, lines.pop())
    numbers = [NUMBERED.match(line).group(2, 3) for line in failures]
    assert numbers == [(str(i), str(len(failures))) for i in range(1, len(failures) + 1)], failures
    assert all(NUMBERED.match(f).group(1) == lines[-1].split(" (")[0] for f in failures), (lines[-1], failures)
    return lines[-1], failures


def test_every_code_of_every_family_is_in_the_table() -> None:
    codes: dict[str, set[int]] = {}
    for argv, _, code, _ in STATUS:
        codes.setdefault(argv[0], set()).add(code)
    assert all(codes[c] == {0, 1, 2, 130, 143} for c in ("select-bench", "topk-parity", "sweep", "selftest", "gate"))
    assert codes["report"] == codes["plot"] == {0, 2} and codes["info"] == {0, 2} and codes["window-bench"] == {2}
