"""The commands end to end on the CPU backend (the exact models): records, dumps, replays, reports, gate."""

import csv
import io
import json
import re

import numpy as np
import pytest

from qsa_cli.catalog import qsa_catalog
from qsa_cli.cli import main
from qsa_cli.config import load_config
from qsa_cli.core.geometry import Call
from qsa_cli.inputs import SCORE_SETS, save_npz_atomic, synthetic_scorer_inputs, synthetic_scores
from qsa_cli.output.printed import of_record
from qsa_cli.output.rows import result_rows
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import SCHEMA_VERSION
from qsa_cli.runs.sweep import check_thresholds


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def words(text: str) -> str:
    """Text with its line breaks as spaces: what a folded layout says, whatever the width."""
    return " ".join(text.split())


def test_select_bench_cpu_writes_record_and_dump(capsys, tmp_path):
    js, dump = tmp_path / "r.json", tmp_path / "d.npz"
    code, out, err = run(capsys, "select-bench", "9003", "5", "2", "16384", "--backend", "cpu",
                         "--json", str(js), "--dump", str(dump), "--markdown")
    assert code == 0, err
    assert out.rstrip().splitlines()[-1] == "PASS"
    assert "| case | before | before µs | after | after µs | speedup |" in out
    assert "| 9K (9003), 5 queries, capacity 16384 | multi | baseline |" in out
    record = json.loads(js.read_text())
    assert record["schema"] == "qsa.run" and record["backend"] == "cpu"
    variants = {m["variant"] for m in record["measurements"]}
    # the baseline, the candidate and what sm_75 (the CPU backend's card) dispatches for 5 queries
    assert variants == {"multi", "halve", "paired"} and all(len(m["samples_us"]) == 2 for m in record["measurements"])
    assert all(p["equal"] for p in record["parity"])
    with np.load(dump) as d:
        assert d["multi"].tobytes() == d["halve"].tobytes() == d["paired"].tobytes() == d["cpu_model"].tobytes()
        assert d["steps"].tolist()[-1] == [9002, 9003, 2250, 2051]


def test_select_bench_adversarial_keys(capsys, tmp_path):
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "select-bench", "9003", "5", "1", "16384", "--backend", "cpu", "--keys", "adversarial",
                         "--json", str(js))
    assert code == 0, err
    assert "PASS" in out
    record = json.loads(js.read_text())
    assert {m["case"]["keys"] for m in record["measurements"]} == {"adversarial"}
    assert record["parity"] and all(p["equal"] and p["case"]["keys"] == "adversarial" for p in record["parity"])
    code, _, err = run(capsys, "select-bench", "--inputs", str(js), "--keys", "adversarial", "--backend", "cpu")
    assert code == 2 and "--keys applies to synthetic inputs" in err and len(err.strip().splitlines()) == 1


def test_sweep_scorer_keys_from_yaml(capsys, tmp_path):
    sweep = tmp_path / "keys.yaml"
    sweep.write_text("stages: [scores]\ncontexts: [4099]\nqueries: [2]\ncapacity: 8192\niterations: 1\n"
                     "keys: [synthetic, adversarial]\n")
    js = tmp_path / "r.json"
    code, out, err = run(capsys, "select-bench", "--config", str(sweep), "--backend", "cpu", "--json", str(js))
    assert code == 0, err
    cases = [m["case"] for m in json.loads(js.read_text())["measurements"]]
    kinds = [c.get("keys") for c in cases]  # the synthetic keys' cases keep the case key they always had
    assert set(kinds) == {None, "adversarial"} and kinds.count(None) == kinds.count("adversarial")


def test_select_bench_replays_an_inputs_file_with_nan_and_inf(capsys, tmp_path, rng):
    inputs = synthetic_scorer_inputs(Call(5001, 3, 6000), int(rng.integers(1 << 30)))
    pooled = inputs.pooled.copy()
    pooled[7, :4] = [np.nan, np.inf, -np.inf, -0.0]
    path = tmp_path / "in.npz"
    save_npz_atomic(path, pooled=pooled, dead=inputs.dead, q=inputs.q, steps=inputs.steps)
    code, out, err = run(capsys, "select-bench", "--inputs", str(path), "--iters", "1", "--backend", "cpu")
    assert code == 0, err
    assert "PASS" in out


def test_topk_parity_cpu_decode_and_prompt(capsys, tmp_path):
    for count in ("0", "1"):
        js = tmp_path / f"t{count}.json"
        code, out, err = run(capsys, "topk-parity", "9001", "3", "1", "20000", count, "--backend", "cpu",
                             "--json", str(js))
        assert code == 0, err
        record = json.loads(js.read_text())
        kinds = {m["case"]["kind"] for m in record["measurements"]}
        assert kinds == {"prompt" if count == "1" else "decode"}
        assert {m["case"]["score_set"] for m in record["measurements"]} == set(SCORE_SETS)


def test_topk_parity_replays_scores_with_nan(capsys, tmp_path, rng):
    t = synthetic_scores(Call(9001, 2, 9001), "levels64", int(rng.integers(1 << 30)))
    scores = t.scores.copy()
    scores[0, :50] = np.nan
    scores[1, 10:20] = -np.inf
    path, dump = tmp_path / "s.npz", tmp_path / "ids.npz"
    save_npz_atomic(path, scores=scores, steps=t.steps)
    code, out, err = run(capsys, "topk-parity", "--inputs", str(path), "--iters", "1", "--count", "0",
                         "--backend", "cpu", "--dump", str(dump))
    assert code == 0, err
    with np.load(dump) as d:
        assert d["given__split"].tobytes() == d["given__cpu_oracle"].tobytes()


def test_report_and_gate_on_saved_cpu_records(capsys, tmp_path):
    js = tmp_path / "r.json"
    assert run(capsys, "select-bench", "4099", "2", "5", "8192", "--backend", "cpu", "--json", str(js))[0] == 0
    code, out, _ = run(capsys, "report", str(js))
    assert code == 0 and "Scorer" in out and "clocks: not recorded (CPU backend)" in words(out)
    code, out, _ = run(capsys, "report", "--markdown", str(js))
    assert code == 0 and out.startswith(f"## {js}: `select-bench`") and "\n**CPU backend" in out
    junit = tmp_path / "gate.xml"
    code, out, _ = run(capsys, "gate", "--baseline", str(js), "--results", str(js), "--junit", str(junit))
    assert code == 0 and out.rstrip().splitlines()[-1].startswith("GATE PASS (") and junit.read_text().startswith("<?xml")
    slowed = json.loads(js.read_text())
    for m in slowed["measurements"]:
        m["samples_us"] = [s / 10 for s in m["samples_us"]]
    base = tmp_path / "fast-baseline.json"
    base.write_text(json.dumps(slowed))
    code, out, _ = run(capsys, "gate", "--baseline", str(base), "--results", str(js), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    # 10x slower than the baseline, on CPU times: shown, never judged (the sweep's rule), so the gate passes
    assert code == 0 and [(r["variant"], r["verdict"]) for r in rows] == [("multi", "NOT-JUDGED"), ("halve", "NOT-JUDGED"),
                                                                               ("quarters", "NOT-JUDGED")]
    assert all(r["detail"] == "not judged: CPU times (the CPU models' on the host; 10.00x the baseline)" for r in rows)
    broken = json.loads(js.read_text())
    broken["thresholds"] = [{"stage": "scores", "case": broken["measurements"][0]["case"], "name": "min_speedup",
                             "value": 0.5, "limit": 1.0, "passed": False}]
    broken["parity"][0]["equal"] = False
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    code, out, _ = run(capsys, "gate", "--baseline", str(base), "--results", str(tmp_path / "broken.json"))
    # parity is judged on the CPU backend too; the threshold on CPU times is not
    assert code == 1 and out.rstrip().splitlines()[-2:][0] == "GATE FAIL (1 PARITY-FAIL)", out
    assert "the run's thresholds not judged: CPU times" in words(out)


def test_selftest_requiring_a_device_without_one_is_one_line(capsys):
    """(Without --require-gpu it passes and says the GPU checks were skipped: the README's sample, which
    tests/test_docs.py runs.)"""
    code, out, err = run(capsys, "selftest", "--require-gpu")
    assert code == 2 and out == "" and err.startswith("qsa: error: --require-gpu: ") and err.count("\n") == 1


def test_gpu_backend_without_a_device_is_one_line(capsys):
    code, out, err = run(capsys, "select-bench", "9000", "2", "5", "9000")
    assert code == 2 and err.startswith("qsa: error: ") and len(err.strip().splitlines()) == 1
    assert "--backend cpu" in err


@pytest.mark.parametrize(("min_speedup", "code", "last_lines"),
                         [(0.001, 0, ["PASS"]),
                          (1000, 1, ["FAIL (2 of 2 thresholds broken)",
                                     "FAIL 1/2: scores ctx=4099 nq=1 capacity=8192 kind=decode l2=host: min_speedup",
                                     "FAIL 2/2: scores ctx=4099 nq=2 capacity=8192 kind=decode l2=host: min_speedup"])])
def test_a_broken_threshold_fails_the_run(capsys, tmp_path, min_speedup, code, last_lines):
    """Judged on a GPU run's times; here on a CPU run's record, judged as a GPU run's would be, and its verdict
    lines (a CPU run judges none: the next test)."""
    config = tmp_path / "sweep.yaml"
    config.write_text("iterations: 2\nwarmup: 0\nstages: [scores]\ncontexts: [4099]\nqueries: [1, 2]\n"
                      f"capacity: 8192\nthresholds:\n  scores:\n    min_speedup: {min_speedup}\n")
    js = tmp_path / "run.json"
    assert run(capsys, "sweep", str(config), "--backend", "cpu", "--json", str(js))[0] == 0
    record = load_record(js)
    check_thresholds(record, load_config(config).thresholds)
    printed = of_record(record)
    assert printed.passed == (code == 0)
    ends = printed.verdict[-len(last_lines):]
    assert [line[:len(want)] for line, want in zip(ends, last_lines)] == last_lines
    assert all(line.endswith(", not >= 1000.00x") for line in ends[1:])


def test_thresholds_are_not_judged_on_cpu_times(capsys, tmp_path):
    """The CPU models' Python times say nothing of the kernels': three runs once gave 4, 3 and 5 of 6 broken."""
    config = tmp_path / "sweep.yaml"
    config.write_text("iterations: 2\nwarmup: 0\nstages: [scores]\ncontexts: [4099]\nqueries: [1, 2]\n"
                      "capacity: 8192\nthresholds:\n  scores:\n    min_speedup: 1000\n")
    js = tmp_path / "run.json"
    code, out, _ = run(capsys, "sweep", str(config), "--backend", "cpu", "--markdown", "--json", str(js))
    assert code == 0 and out.rstrip().splitlines()[-1] == "PASS"
    assert f"thresholds not judged: CPU times (the CPU models' on the host; {config}'s thresholds are judged on " \
           "the GPU backend)." in out
    assert json.loads(js.read_text())["thresholds"] == []


@pytest.mark.parametrize(("settings", "note"), [
    ("warmup: 3\nl2: warm\n", "warmup 3 and l2 warm (the CPU backend times its models after one untimed run of each; "
                              "the CPU backend has no L2 to flush or keep warm)"),
    ("l2: clean\n", "l2 clean (the CPU backend has no L2 to flush or keep warm)"),
    ("", None),
])
def test_a_cpu_sweep_records_no_gpu_timer_setting(capsys, tmp_path, settings, note):
    """The CPU backend applies no warm-up count and no L2 state: its record names neither, and a note says
    which of the file's were not applied (the defaults were not applied either, and are not recorded)."""
    config = tmp_path / "sweep.yaml"
    config.write_text(f"iterations: 2\n{settings}stages: [scores]\ncontexts: [4099]\nqueries: [1]\ncapacity: 8192\n")
    js = tmp_path / "run.json"
    assert run(capsys, "sweep", str(config), "--backend", "cpu", "--json", str(js))[0] == 0
    record = load_record(js)
    assert "warmup" not in record.settings and "l2" not in record.settings
    assert record.settings["iterations"] == 2 and record.settings["seed"] == 0
    assert [n for n in record.notes if n.startswith("not applied")] == ([f"not applied: {config}'s {note}"] if note else [])
    assert {m.case["l2"] for m in record.measurements} == {"host"}


def _interrupted_on_call(monkeypatch, module: str, name: str, call: int) -> None:
    """``module.name`` runs as it does until its ``call``-th call, which is Ctrl-C."""
    import importlib

    target = importlib.import_module(module)
    real, calls = getattr(target, name), []

    def stage(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, stage)


def test_ctrl_c_keeps_what_was_measured_as_an_incomplete_record(capsys, tmp_path, monkeypatch):
    config = tmp_path / "sweep.yaml"
    config.write_text("iterations: 2\nwarmup: 0\nstages: [scores]\ncontexts: [4099]\nqueries: [1, 2, 3]\ncapacity: 8192\n")
    js = tmp_path / "partial.json"
    _interrupted_on_call(monkeypatch, "qsa_cli.stages.scores", "run_scores", call=3)
    code, out, err = run(capsys, "sweep", str(config), "--backend", "cpu", "--json", str(js))
    assert code == 130 and "PASS" not in out
    # the blank line closes the terminal's ^C echo
    taken = 2 * len(qsa_catalog().names("scores"))  # the two cases before the third: every scorer each
    record = json.loads(js.read_text())
    checks = len(record["parity"])
    assert err == (f"\nqsa: interrupted: the record so far ({taken} measurements, {checks} parity checks) is in "
                   f"{js}, marked incomplete\n")
    assert record["schema_version"] == SCHEMA_VERSION and record["incomplete"] is True and "interrupted" in record["notes"][-1]
    assert {m["case"]["nq"] for m in record["measurements"]} == {1, 2}
    code, out, _ = run(capsys, "report", "--markdown", str(js))
    assert code == 0 and "interrupted: the run stopped here" in out
    whole = tmp_path / "whole.json"
    monkeypatch.undo()
    assert run(capsys, "sweep", str(config), "--backend", "cpu", "--json", str(whole))[0] == 0
    for baseline, results, which in ((js, whole, "baseline"), (whole, js, "results")):
        code, out, err = run(capsys, "gate", "--baseline", str(baseline), "--results", str(results), "--force")
        assert code == 2 and out == "" and err == (f"qsa: error: the {which} record is incomplete (its run was "
                                                   "interrupted): the gate compares whole runs\n")


def test_ctrl_c_of_a_top_k_run_keeps_the_score_sets_done(capsys, tmp_path, monkeypatch):
    js = tmp_path / "partial.json"
    _interrupted_on_call(monkeypatch, "qsa_cli.stages.topk", "run_topk", call=2)
    code, _, err = run(capsys, "topk-parity", "4099", "2", "1", "8192", "--backend", "cpu", "--json", str(js))
    assert code == 130 and err.startswith("\nqsa: interrupted: ") and err.count("\n") == 2
    record = json.loads(js.read_text())
    assert record["incomplete"] and {m["case"]["score_set"] for m in record["measurements"]} == {"continuous"}


def test_ctrl_c_without_json_writes_nothing(capsys, tmp_path, monkeypatch):
    _interrupted_on_call(monkeypatch, "qsa_cli.stages.scores", "run_scores", call=1)
    code, out, err = run(capsys, "select-bench", "4099", "2", "1", "8192", "--backend", "cpu")
    assert (code, out, err) == (130, "", "\nqsa: interrupted\n") and list(tmp_path.iterdir()) == []


def test_the_gate_fails_closed(capsys, tmp_path):
    scores, topk = tmp_path / "scores.json", tmp_path / "topk.json"
    assert run(capsys, "select-bench", "4099", "2", "3", "8192", "--backend", "cpu", "--json", str(scores))[0] == 0
    assert run(capsys, "topk-parity", "4099", "2", "3", "8192", "--backend", "cpu", "--json", str(topk))[0] == 0
    code, out, _ = run(capsys, "gate", "--baseline", str(scores), "--results", str(topk))
    *_, summary, missing_1, missing_2, missing_3, nothing = out.rstrip().splitlines()
    assert code == 1 and summary == "GATE FAIL (3 MISSING, 1 NOTHING-COMPARED)"
    assert missing_1.startswith("GATE FAIL 1/4: MISSING: scores ctx=4099 nq=2 capacity=8192 kind=decode l2=host, multi: ")
    for line, variant in ((missing_2, "halve"), (missing_3, "quarters")):
        assert line.startswith("GATE FAIL ") and line.endswith(f", {variant}: in the baseline, not in this run")
    assert nothing == ("GATE FAIL 4/4: NOTHING-COMPARED: gate, timings: no (case, variant) is timed in both the run "
                       "and the baseline")
    code, out, _ = run(capsys, "gate", "--baseline", str(scores), "--results", str(topk), "--allow-missing")
    assert code == 1 and "MISSING-ALLOWED" in out and out.rstrip().splitlines()[-2] == "GATE FAIL (1 NOTHING-COMPARED)"
    nan = json.loads(scores.read_text())
    nan["measurements"][0]["samples_us"] = [float("nan")] * 3
    bad = tmp_path / "nan.json"
    bad.write_text(json.dumps(nan))
    code, out, _ = run(capsys, "gate", "--baseline", str(scores), "--results", str(bad), "-v")  # the table too
    assert code == 1 and "BAD (samples: 3 of 3 NaN or infinite)" in words(out) and not re.search(r"\bnan\b", out)
    assert out.rstrip().splitlines()[-2:] == [
        "GATE FAIL (1 BAD-SAMPLES)", "GATE FAIL 1/1: BAD-SAMPLES: scores ctx=4099 nq=2 capacity=8192 kind=decode "
        "l2=host, multi: the run's samples: 3 of 3 NaN or infinite"]
    code, out, err = run(capsys, "gate", "--baseline", str(scores), "--results", str(scores),
                         "--json", str(tmp_path / "gate.json"))
    assert (code, out) == (2, "") and err == "qsa: error: --json records the run the gate makes; with --results it makes none\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nan.json", "scores.json", "topk.json"]


@pytest.mark.parametrize(("queries", "dispatched"), [(3, "quarters"), (4, "quarters"), (5, "paired"), (8, "quarters")])
def test_the_dispatched_scorer_follows_the_calls_queries(capsys, tmp_path, queries, dispatched):
    """The CPU backend dispatches as sm_75 does: by the call's queries, the fastest scorer at that count on an
    H200; the record keeps the choice for every count, and the row of the call's own is the one marked."""
    js = tmp_path / "run.json"
    assert run(capsys, "select-bench", "4099", str(queries), "2", "8192", "--backend", "cpu", "--json", str(js))[0] == 0
    record = load_record(js)
    d = record.settings["dispatch"]
    assert d["scores"] == "halve" and d["scores_by_queries"][queries - 1] == dispatched and len(d["scores_by_queries"]) == 8
    marked = [r.variant for r in result_rows(record) if r.dispatched]
    assert marked == [dispatched]
