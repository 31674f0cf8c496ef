import json

import pytest

from qsa_cli.inputs import InputError
from qsa_cli.results import SCHEMA_VERSION, Measurement, ParityCheck, RunRecord, case_key, load_record, merge_records


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
        ('{"schema": "qsa.run", "schema_version": 1, "bogus": 2}', "malformed result record"),
    ],
)
def test_bad_records(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_record(path)


def test_failed_parity_fails_the_record(rng):
    r = _record(rng)
    r.parity.append(ParityCheck("scores", {}, "halve", "cpu-model", False, "query 0 block 3"))
    assert not r.passed


def test_merge_records(rng):
    a, b = _record(rng), _record(rng)
    b.measurements[0].case = {**b.measurements[0].case, "ctx": 131072}
    b.kernel_source_hash = "f" * 64
    merged = merge_records([a, b])
    assert len(merged.measurements) == 2 and len(merged.parity) == 2
    assert "merged from 2 runs" in merged.notes[0] and "kernel sources differ" in merged.notes[1]
    other = _record(rng)
    other.device = {"name": "Another GPU", "compute_capability": "8.0"}
    with pytest.raises(InputError, match="cannot merge"):
        merge_records([a, other])
