import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
from record_factory import seed_record

from qsa_cli.clocks import ClockLock, ClockReading
from qsa_cli.core.errors import InputError
from qsa_cli.record.load import MAX_DEPTH, ROLES_BEFORE_RECORDED, load_record, merge_records, read_json
from qsa_cli.record.schema import (
    SCHEMA,
    SCHEMA_VERSION,
    Measurement,
    ParityCheck,
    RunRecord,
    SelftestCheck,
    ThresholdCheck,
    case_key,
)


def _record(rng) -> RunRecord:
    r = RunRecord(command="select-bench", argv=["select-bench", "9000", "4", "5", "9000"], backend="gpu")
    case = {"ctx": 9000, "nq": 4, "capacity": 9000, "kind": "decode", "l2": "cold"}
    samples = [float(x) for x in rng.uniform(10, 12, 25)]
    r.measurements.append(Measurement("scores", "halve", case, samples, warmup=5, bytes_read=1 << 20))
    r.parity.append(ParityCheck("scores", case, "halve", "multi", True, hashes={"multi": "ab", "halve": "ab"}))
    return r


def test_round_trip_keeps_every_sample(tmp_path, rng):
    r = _record(rng)
    path = tmp_path / "r.json"
    r.write(path)
    data = json.loads(path.read_text())
    assert data["schema"] == "qsa.run" and data["schema_version"] == SCHEMA_VERSION
    back = load_record(path)
    assert back.measurements[0].samples_us == r.measurements[0].samples_us
    assert back.parity[0].hashes == {"multi": "ab", "halve": "ab"}
    assert back.passed and back.kernel_source_hash == r.kernel_source_hash


def test_a_measurements_launches_round_trip(tmp_path, rng):
    """What qsa's launcher enqueued a call (launch.shape.KernelCall), as written and read back."""
    from qsa_cli.launch.shape import Described, KernelCall, launch_records

    r = _record(rng)
    calls = (KernelCall("block_topk_cluster_wide_kernel", (16, 4), (1024,), 16, 107_024, True),)
    r.measurements[0].launches = launch_records(Described(lambda: None, calls))
    r.write(tmp_path / "r.json")
    (back,) = load_record(tmp_path / "r.json").measurements[0].launches
    assert back == {"kernel": "block_topk_cluster_wide_kernel", "grid": [16, 4], "block": [1024], "cluster": 16,
                    "shared_bytes": 107_024, "programmatic": True}


def test_a_version_7_record_loads_without_launches(tmp_path):
    """No run before version 8 recorded its launches: its measurements read back with none."""
    v7 = next(p for p in SHIPPED if _version(p) == 7)
    data = read_json(v7, "record")
    assert data["measurements"] and all("launches" not in m for m in data["measurements"])
    assert all(m.launches is None for m in load_record(v7).measurements)


def test_statistics(rng):
    m = _record(rng).measurements[0]
    lo, hi = m.spread_us
    assert lo <= m.median_us <= hi
    assert m.gbps == pytest.approx((1 << 20) / (m.median_us * 1e-6) / 1e9)


def test_case_key_is_stable():
    case = {"l2": "cold", "nq": 4, "ctx": 9000, "capacity": 9000, "kind": "decode"}
    assert case_key("scores", case) == "scores ctx=9000 nq=4 capacity=9000 kind=decode l2=cold"
    adversarial = {**case, "keys": "adversarial"}  # named only when not synthetic: the key above is unchanged
    assert case_key("scores", adversarial) == "scores ctx=9000 nq=4 capacity=9000 kind=decode keys=adversarial l2=cold"


@pytest.mark.parametrize(
    "text,message",
    [
        ("{", "not a JSON result record"),
        ('{"a": 1}', "not a qsa result record"),
        ('{"schema": "qsa.run", "schema_version": 99}', "schema version 99 is not supported"),
        ('{"schema": "qsa.run", "schema_version": "3"}', "schema version 3 is not supported"),
        ("[]", "not a qsa result record"),
    ],
)
def test_bad_records(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_record(path)


def _set(path: str, value: object):
    """A change to a record's JSON form: ``value`` at ``path`` (dots and [i]); DELETE removes the field."""
    *parents, last = [int(p) if p.isdigit() else p for p in re.split(r"\.|\[|\]\.?", path) if p]

    def change(data: dict) -> None:
        for p in parents:
            data = data[p]
        if value is DELETE:
            del data[last]
        else:
            data[last] = value
    return change


class _Delete:
    """The marker of a field removed; named in the test's id (an id must read the same in every worker)."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()
HAND_EDITS = [
    ("bogus", 2, "unknown field 'bogus'"),
    ("command", DELETE, "missing field 'command'"),
    ("argv", "sweep ci", "argv: expected a list of strings"),
    ("measurements", {}, "measurements: expected a list of objects"),
    ("measurements[3]", 5, "measurements[3]: expected an object"),
    ("measurements[3].samples_us", "12.5", "measurements[3].samples_us: expected a list of numbers"),
    ("measurements[3].samples_us", [1.0, None], "measurements[3].samples_us: expected a list of numbers"),
    ("measurements[3].samples_us", [True], "measurements[3].samples_us: expected a list of numbers"),
    ("measurements[3].case", DELETE, "measurements[3]: missing field 'case'"),
    ("measurements[3].case.ctx", "9000", "measurements[3].case.ctx: expected an integer"),
    ("measurements[3].case.l2", DELETE, "measurements[3].case: missing field 'l2'"),
    ("measurements[3].case.extra", 1, "measurements[3].case: unknown field 'extra'"),
    ("measurements[3].bytes_read", 1.5, "measurements[3].bytes_read: expected an integer or null"),
    ("measurements[3].clocks_before", [], "measurements[3].clocks_before: expected an object or null"),
    ("measurements[3].clocks_before.sm_mhz", "x", "measurements[3].clocks_before.sm_mhz: expected an integer or null"),
    ("parity[2].equal", "yes", "parity[2].equal: expected true or false"),
    ("parity[2].hashes", {"halve": 7}, "parity[2].hashes: expected an object"),
    ("parity[2].rows_equal", True, "parity[2].rows_equal: expected an integer or null"),
    ("thresholds[0].name", "fast", 'thresholds[0].name: expected "min_speedup" or "max_floor_ratio"'),
    ("thresholds[0].value", None, "thresholds[0].value: expected a number"),
    ("settings.warmup", "5", "settings.warmup: expected an integer"),
    ("settings.dispatch", 1, "settings.dispatch: expected an object"),
    ("settings.dispatch.topk", ["split"], "settings.dispatch.topk: expected a string"),
    ("settings.clock_lock.locked", DELETE, "settings.clock_lock: missing field 'locked'"),
    ("created", 20261129, "created: expected a string"),
    ("git_commit", DELETE, "missing field 'git_commit'"),
    ("incomplete", DELETE, "missing field 'incomplete'"),  # version 2 has it
    ("checks", DELETE, "missing field 'checks'"),  # version 3 has it
    ("checks", [{"check": "x", "cases": 1, "passed": "yes", "seconds": 0.1, "detail": ""}],
     "checks[0].passed: expected true or false or null"),
    ("incomplete", "no", "incomplete: expected true or false"),
    ("measurements[3].launches", DELETE, "measurements[3]: missing field 'launches'"),  # version 8 has it
    ("measurements[3].launches", [{"kernel": "k", "grid": ["8"], "block": [1024], "cluster": 8, "shared_bytes": 0,
                                   "programmatic": False}], "measurements[3].launches[0].grid: expected a list of integers"),
    ("measurements[3].launches", [{"kernel": "k", "grid": [8], "block": [1024]}],
     "measurements[3].launches[0]: missing field 'cluster'"),
]


@pytest.mark.parametrize(("where", "value", "message"), HAND_EDITS, ids=[f"{w}={v!r}" for w, v, _ in HAND_EDITS])
def test_a_hand_edited_record_names_the_field(tmp_path, where, value, message):
    record = seed_record()
    m = record.measurements[0]
    record.thresholds.append(ThresholdCheck(m.stage, m.case, "min_speedup", 1.6, 1.0, True))
    data = record.to_dict()
    RunRecord.from_dict(data)  # as written, it conforms
    _set(where, value)(data)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as refused:
        load_record(path)
    assert str(refused.value) == f"{path}: {message}"


ROOT = Path(__file__).parent.parent
# One real record of every older schema version, as users hold them: docs/results keeps only the records the docs
# cite, so these stay here whatever it drops (each named for its version and the run it came from).
OLDER = sorted((ROOT / "tests" / "data" / "records").glob("*.json"))
# a larger record is kept compressed (.json.xz), read as it is
SHIPPED = sorted([*(ROOT / "docs" / "results").glob("**/*.json"), *(ROOT / "docs" / "results").glob("**/*.json.xz")]) + OLDER


def _version(path: Path) -> int:
    return read_json(path, "record")["schema_version"]


def test_a_real_record_of_every_older_schema_version_is_kept():
    """A newer version's loader must still read each older one: tests/data/records keeps a record of every version
    before the current, so dropping one from docs/results never drops a version from the tests."""
    assert {_version(p) for p in OLDER} >= set(range(1, SCHEMA_VERSION))
    assert all(p.name.startswith(f"v{_version(p)}-") for p in OLDER)


def test_every_saved_record_loads():
    """docs/results and tests/data/records hold records of every schema version: they must keep loading (and
    re-rendering, tests/test_output_widths.py); an older one has no selftest checks, a newer selftest's record has
    them."""
    versions = {_version(path) for path in SHIPPED}
    assert SHIPPED and versions == set(range(1, SCHEMA_VERSION + 1))
    for path in SHIPPED:
        record = load_record(path)
        assert not record.incomplete and {"scores", "topk"} <= set(record.settings["roles"])
        older = _version(path) < 3
        selftest = record.command in ("selftest", "topk-parity --selftest")
        assert record.checks == [] if older or not selftest else record.checks
        # its JSON form is dataclasses.asdict's (which to_dict does without deep-copying every number)
        assert record.to_dict() == {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **dataclasses.asdict(record)}


def test_a_record_without_roles_ran_the_registrys_of_the_time(tmp_path):
    """Version 1 records (and version 2's first) name no roles: they ran multi -> halve and wide -> split."""
    v1 = next(p for p in SHIPPED if _version(p) == 1)
    assert "roles" not in json.loads(v1.read_text())["settings"]
    assert load_record(v1).settings["roles"] == ROLES_BEFORE_RECORDED == {
        "scores": {"reference": "reference", "baseline": "multi", "candidate": "halve"},
        "topk": {"reference": "reference", "baseline": "wide", "candidate": "split"}}
    recorded = seed_record().to_dict()
    recorded["schema_version"] = 2
    del recorded["checks"]
    recorded["settings"]["roles"] = {"scores": {"reference": "reference", "baseline": "halve", "candidate": "multi"}}
    (tmp_path / "v2.json").write_text(json.dumps(recorded))
    assert load_record(tmp_path / "v2.json").settings["roles"] == recorded["settings"]["roles"]  # its own, kept


def test_a_version_1_record_migrates_through_every_version(tmp_path):
    data = seed_record().to_dict()
    for field in ("incomplete", "sanitizer", "checks"):
        del data[field]
    data["schema_version"] = 1
    (tmp_path / "v1.json").write_text(json.dumps(data))
    back = load_record(tmp_path / "v1.json")
    assert (back.incomplete, back.sanitizer, back.checks, back.agreements) == (False, [], [], [])
    assert back.measurements == seed_record().measurements


def test_a_version_4_record_had_no_inexact_variant(tmp_path):
    """Version 5 added the agreement rows of variants declared not bitwise: every earlier run checked each bit for
    bit, so its record reads back with none, and passes or fails as it did."""
    data = seed_record().to_dict()
    del data["agreements"]
    data["schema_version"] = 4
    (tmp_path / "v4.json").write_text(json.dumps(data))
    back = load_record(tmp_path / "v4.json")
    assert back.agreements == [] and back.passed == seed_record().passed and back.parity == seed_record().parity


def test_a_version_4_measurement_reads_back_with_no_rounds_judged(tmp_path):
    """Version 4's holds ran a guessed time, unchecked, and qsa's timer timed everything: its measurements read
    back with ``rounds`` None, timed by qsa."""
    data = seed_record().to_dict()
    data["schema_version"] = 4
    for m in data["measurements"]:
        del m["rounds"], m["timer"], m["nvbench"]
    (tmp_path / "v4.json").write_text(json.dumps(data))
    back = load_record(tmp_path / "v4.json")
    assert back.measurements and all(m.rounds is None and m.timer == "qsa" and m.nvbench is None
                                     for m in back.measurements)
    assert back.measurements == seed_record().measurements


def test_a_record_nested_too_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"schema": "qsa.run", "schema_version": 3, "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(InputError) as refused:
        load_record(path)
    assert str(refused.value) == f"{path}: nested 200001 levels deep, deeper than any result record ({MAX_DEPTH} at most)"
    brackets_in_strings = tmp_path / "strings.json"
    brackets_in_strings.write_text(json.dumps({**seed_record().to_dict(), "notes": ["[" * 1000 + "{" * 1000]}))
    assert load_record(brackets_in_strings).notes == ["[" * 1000 + "{" * 1000]


def test_a_record_too_large_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    seed_record().write(path)
    monkeypatch.setattr("qsa_cli.record.load.MAX_RECORD_BYTES", path.stat().st_size - 1)
    with pytest.raises(InputError, match=r"big.json: \d+ bytes, larger than any result record"):
        load_record(path)


def test_the_clock_shapes_are_the_records():
    """results.Clocks and ClockLockRecord say what clocks.ClockReading and ClockLock write."""
    reading = ClockReading(1650, 7000, 52, 180.0, ["sw_power_cap"], True).to_dict()
    lock = ClockLock(1650, None, False, "no permission").to_dict()
    record = seed_record()
    record.measurements[0].clocks_before = reading
    record.settings["clock_lock"] = lock
    assert RunRecord.from_dict(record.to_dict()).measurements[0].clocks_before == reading


def test_an_empty_sample_list_has_no_median():
    m = seed_record().measurements[0]
    m.samples_us = []
    assert math.isnan(m.median_us) and all(math.isnan(x) for x in m.spread_us)


def test_failed_parity_fails_the_record(rng):
    r = _record(rng)
    r.parity.append(ParityCheck("scores", {}, "halve", "cpu-model", False, "query 0 block 3"))
    assert not r.passed


def test_a_failed_selftest_check_fails_the_record_and_a_skipped_one_does_not(rng):
    r = _record(rng)
    r.checks = [SelftestCheck("GPU checks", 0, None, 0.0, "skipped: no device")]
    assert r.passed
    r.checks.append(SelftestCheck("constants", 12, False, 0.01, "MAX_QUERIES: 8 here, 9 in the header"))
    assert not r.passed


def test_merge_records(rng):
    a, b = _record(rng), _record(rng)
    for row in (*b.measurements, *b.parity):
        row.case = {**row.case, "ctx": 131072}
    b.kernel_source_hash = "f" * 64
    merged = merge_records([("a.json", a), ("b.json", b)])
    assert len(merged.measurements) == 2 and len(merged.parity) == 2
    assert "merged from 2 runs" in merged.notes[0] and "kernel sources differ" in merged.notes[1]
    other = _record(rng)
    other.device = {"name": "Another GPU", "compute_capability": "8.0"}
    with pytest.raises(InputError, match="cannot merge runs of"):
        merge_records([("a.json", a), ("other.json", other)])


def test_a_merge_of_two_runs_holding_one_case_and_variant_is_refused(rng):
    """Which run's numbers the table showed would depend on the order of the files; a file given twice
    would count its checks twice."""
    a, b = _record(rng), _record(rng)
    with pytest.raises(InputError) as refused:
        merge_records([("a.json", a), ("b.json", b)])
    assert str(refused.value) == ("cannot merge: halve on scores ctx=9000 nq=4 capacity=9000 kind=decode l2=cold "
                                  "twice (a.json and b.json both hold it); give each (case, variant) once")
    b.measurements = []  # its parity row alone is a second (case, variant) too
    with pytest.raises(InputError, match="a.json and b.json both hold it"):
        merge_records([("a.json", a), ("b.json", b)])
    with pytest.raises(InputError, match=r"\(a.json is given twice\)"):
        merge_records([("a.json", a), ("a.json", a)])


@pytest.mark.parametrize("argv", [
    ["select-bench", "3001", "2", "1", "4096", "--backend", "cpu", "--keys", "adversarial"],
    ["topk-parity", "3001", "2", "1", "4096", "0", "--backend", "cpu"],
    ["window-bench", "3001", "2", "1", "4096", "--backend", "cpu"],  # refused: no record
])
def test_every_record_a_command_writes_loads(capsys, tmp_path, argv):
    """What the commands write, the schema reads back (the keys of an adversarial scorer case included)."""
    from qsa_cli.cli import main

    path = tmp_path / "run.json"
    with pytest.raises(SystemExit) as ended:
        main([*argv, "--json", str(path)])
    capsys.readouterr()
    if ended.value.code == 2:
        assert not path.exists()
        return
    assert ended.value.code == 0
    record = load_record(path)
    assert record.measurements and all(p.equal for p in record.parity)


def test_a_sanitize_record_round_trips(tmp_path):
    from qsa_cli.record.schema import SanitizerRun

    record = RunRecord(command="sanitize", argv=[], backend="gpu", kernel_source_hash="0" * 64)
    record.settings.update({"seed": 0, "sanitizer": "/usr/local/cuda/bin/compute-sanitizer", "tools": ["memcheck"],
                            "quick": False, "kernels": str(tmp_path)})
    case = {"ctx": 9002, "nq": 3, "capacity": 16384, "kind": "decode", "score_set": "adversarial"}
    record.sanitizer.append(SanitizerRun("topk", case, "split", "memcheck", 2, 0, "Invalid __global__ write", 1.5))
    record.write(tmp_path / "s.json")
    back = load_record(tmp_path / "s.json")
    assert back.sanitizer == record.sanitizer and not back.passed


def test_a_version_3_records_cold_is_clean_and_it_has_no_batches_or_rule(tmp_path):
    """Version 4 named the read flush "clean" (version 3 and earlier: "cold"), in the settings and every row's
    case, so a gate of a new clean run against an old baseline matches its cases; no earlier run timed batches
    or took its samples by the stopping rule."""
    data = seed_record().to_dict()
    data["schema_version"] = 3
    data["settings"]["l2"] = "cold"
    data["thresholds"] = [{"stage": "scores", "case": dict(data["measurements"][0]["case"]), "name": "min_speedup",
                           "value": 2.0, "limit": 1.0, "passed": True}]
    for rows in ("measurements", "parity", "thresholds"):
        for row in data[rows]:
            row["case"]["l2"] = "cold"
    data["measurements"][1]["case"]["l2"] = "warm"
    for m in data["measurements"]:
        del m["batch"], m["stop"]
    (tmp_path / "v3.json").write_text(json.dumps(data))
    back = load_record(tmp_path / "v3.json")
    assert back.settings["l2"] == "clean"
    assert [m.case["l2"] for m in back.measurements][:3] == ["clean", "warm", "clean"]
    assert {p.case["l2"] for p in back.parity} == {"clean"} and back.parity and back.thresholds
    assert {t.case["l2"] for t in back.thresholds} == {"clean"}
    assert all(m.batch is None and m.stop is None for m in back.measurements)
    keys = [m.key for m in seed_record().measurements]
    assert [m.key for m in back.measurements] == [keys[0], keys[1].replace("l2=clean", "l2=warm"), *keys[2:]]


def test_a_version_6_dispatchs_scores_wide_loads_as_the_scorer_by_queries(tmp_path):
    """Version 6 named the scorer of 5-8 queries ``scores_wide``; version 7 names one for every count."""
    v6 = next(p for p in SHIPPED if _version(p) == 6)
    data = read_json(v6, "record")
    data["settings"]["dispatch"] = {"kind": "decode", "scores": "halve", "topk": "split", "scores_wide": "paired",
                                    "reasons": {"scores": "a", "topk": "b", "scores_wide": "c"}}
    path = tmp_path / "v6.json"
    path.write_text(json.dumps(data))
    d = load_record(path).settings["dispatch"]
    assert d["scores_by_queries"] == ["halve"] * 4 + ["paired"] * 4 and "scores_wide" not in d
    assert d["reasons"] == {"scores": "a", "topk": "b", "scores_by_queries": "c"}


@pytest.mark.parametrize("suffix", [".xz", ".gz"])
def test_a_compressed_record_is_read_as_it_is_and_a_bad_one_is_one_line(tmp_path, monkeypatch, suffix):
    """docs/results keeps its larger records compressed: every command reads RUN.json.xz (or .gz) as RUN.json;
    a corrupt one, or one that unpacks past any record's size, is an InputError naming the file."""
    import gzip
    import lzma

    from qsa_cli.record import load as loader

    pack = {".xz": lzma.compress, ".gz": gzip.compress}[suffix]
    record = seed_record()
    packed = tmp_path / f"run.json{suffix}"
    packed.write_bytes(pack(json.dumps(record.to_dict()).encode()))
    assert load_record(packed).measurements == record.measurements
    corrupt = tmp_path / f"corrupt.json{suffix}"
    corrupt.write_bytes(pack(b'{"schema": "qsa.run"}')[:-8])
    with pytest.raises(InputError, match=f"^{corrupt}: not a JSON result record"):
        load_record(corrupt)
    monkeypatch.setattr(loader, "MAX_RECORD_BYTES", 10_000)  # a real record's limit, scaled down
    bomb = tmp_path / f"bomb.json{suffix}"
    bomb.write_bytes(pack(b" " * 10_001))
    with pytest.raises(InputError, match=f"^{bomb}: unpacks to more than any result record"):
        load_record(bomb)
