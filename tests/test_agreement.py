"""model/agreement.py and record/limits.py: an inexact variant's measures on crafted arrays (ulps across zero,
signed zeros, subnormals, NaN and infinities, ties in a selection), and the limits judged on them."""

from __future__ import annotations

import numpy as np
import pytest

from qsa_cli.core.errors import LimitError
from qsa_cli.core.geometry import SELECT_CAP, STEP_INTS, STEP_WIDTH
from qsa_cli.inputs import id_poison, score_poison
from qsa_cli.model.agreement import SMALLEST_NORMAL, ordered_ints, score_errors, selection_agreement
from qsa_cli.record.limits import (
    ALL_INEXACT,
    check_scopes,
    judge,
    limits_for,
    parse_limit,
    verdicts,
)
from qsa_cli.record.schema import Agreement

F32 = np.float32


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=F32)


def bits(*words: int) -> np.ndarray:
    return np.array(words, dtype=np.uint32).view(F32)


def test_ordered_ints_count_every_float_between():
    tiny = bits(0x00000001)[0]  # the smallest subnormal
    assert ordered_ints(f32(0.0, -0.0)).tolist() == [0, 0]
    assert ordered_ints(np.array([tiny, -tiny], F32)).tolist() == [1, -1]
    one = ordered_ints(f32(1.0))[0]
    assert ordered_ints(np.nextafter(f32(1.0), F32(2)))[0] - one == 1
    assert ordered_ints(f32(-1.0))[0] == -one


@pytest.mark.parametrize("subject, reference, ulps", [
    (f32(0.0), f32(-0.0), 0),  # the two zeros are one number
    (bits(0x00000001), bits(0x80000001), 2),  # the smallest subnormals of either sign, across zero
    (bits(0x00000003), f32(0.0), 3),  # subnormals count ulp by ulp
    (bits(0x00800000), bits(0x007FFFFF), 1),  # the smallest normal beside the largest subnormal
    (f32(1.0), np.nextafter(f32(1.0), F32(0)), 1),
    (f32(-2.0), f32(2.0), 2 * 0x40000000),
])
def test_ulps(subject, reference, ulps):
    e = score_errors(subject, reference)
    assert e["max_ulps"] == ulps and e["mismatched"] == 0
    assert e["differing"] == int(subject.view(np.uint32)[0] != reference.view(np.uint32)[0])


def test_absolute_and_relative_errors_relative_to_the_reference():
    e = score_errors(f32(1.5, 10.0, -4.0), f32(1.0, 10.0, -5.0))
    assert e["max_abs_error"] == 1.0 and e["max_rel_error"] == 0.5 and e["differing"] == 2 and e["entries"] == 3


def test_a_reference_of_zero_or_subnormal_divides_by_the_smallest_normal():
    tiny = bits(0x00000001)[0]
    e = score_errors(np.array([tiny], F32), f32(0.0))
    assert e["max_rel_error"] == pytest.approx(float(tiny) / SMALLEST_NORMAL) and e["max_rel_error"] < 1
    assert score_errors(f32(-0.0), f32(0.0))["max_rel_error"] == 0.0
    assert score_errors(f32(1e-30), f32(0.0))["max_rel_error"] == pytest.approx(1e-30 / SMALLEST_NORMAL, rel=1e-6)


def test_nan_and_infinities_match_only_the_same_bits():
    nan, other_nan = bits(0x7FFFFFFF)[0], bits(0x7FC00000)[0]
    inf = F32(np.inf)
    subject = np.array([nan, nan, 1.0, inf, inf, -inf, 2.0], F32)
    reference = np.array([nan, other_nan, nan, inf, 3.0, inf, 2.5], F32)
    e = score_errors(subject, reference)
    # the same NaN and the same infinity agree; another NaN's payload, a number against NaN, an infinity against
    # a number or the other infinity: mismatched, and out of the maxima (which only the last entry sets)
    assert (e["differing"], e["mismatched"]) == (5, 4)
    assert e["max_abs_error"] == 0.5 and e["max_rel_error"] == pytest.approx(0.2) and e["max_ulps"] > 0


def test_the_poison_of_an_unwritten_entry_counts():
    """A variant that leaves an entry unwritten keeps the poison (a NaN of its own payload) there: mismatched,
    whatever the reference holds."""
    reference = score_poison((2, 3))
    reference[:, :2] = [[1.0, np.nan], [3.0, 4.0]]
    reference[0, 1] = bits(0x7FFFFFFF)[0]
    subject = reference.copy()
    subject[0, 1] = score_poison((1,))[0]  # left unwritten where the reference wrote a NaN
    subject[1, 2] = 7.0  # written past the end
    e = score_errors(subject, reference)
    assert (e["differing"], e["mismatched"], e["max_abs_error"]) == (2, 2, 0.0)


def test_score_errors_refuse_other_shapes():
    with pytest.raises(ValueError, match="differ in shape"):
        score_errors(np.zeros((2, 3), F32), np.zeros((3, 2), F32))


def steps_of(*widths: int) -> np.ndarray:
    steps = np.zeros((len(widths), STEP_INTS), np.int32)
    steps[:, STEP_WIDTH] = widths
    return steps


def ids_of(*rows: list[int]) -> np.ndarray:
    out = id_poison((len(rows), SELECT_CAP))
    for q, row in enumerate(rows):
        out[q, :len(row)] = row
    return out


def test_a_selection_in_another_order_is_identical_and_one_other_id_is_not():
    rng = np.random.default_rng(23)
    first, second = rng.permutation(100)[:8].tolist(), rng.permutation(100)[:4].tolist()
    reference = ids_of(first, second)
    tied = ids_of(first[::-1], second)  # ties broken in another order: the same selection
    assert selection_agreement(tied, reference, steps_of(8, 4)) == {
        "queries": 2, "identical_queries": 2, "min_id_fraction": 1.0, "mean_id_fraction": 1.0}
    swapped = ids_of(first, [*second[:3], next(i for i in range(100) if i not in second)])
    got = selection_agreement(swapped, reference, steps_of(8, 4))
    assert got == {"queries": 2, "identical_queries": 1, "min_id_fraction": 0.75, "mean_id_fraction": 0.875}


def test_a_write_past_the_width_makes_a_selection_not_identical():
    reference = ids_of([5, 6, 7])
    subject = reference.copy()
    subject[0, 3] = 9
    got = selection_agreement(subject, reference, steps_of(3))
    assert (got["identical_queries"], got["min_id_fraction"]) == (0, 1.0)


def test_a_repeated_id_counts_once():
    got = selection_agreement(ids_of([5, 5, 7]), ids_of([5, 6, 7]), steps_of(3))
    assert got["min_id_fraction"] == pytest.approx(2 / 3) and got["identical_queries"] == 0


# ---- limits ------------------------------------------------------------------------------------------------


def agreement(subject: str = "e.scores-tc", against: str = "reference", mismatched: int = 0) -> Agreement:
    case = {"ctx": 4096, "nq": 2, "capacity": 8192, "kind": "decode", "l2": "host"}
    return Agreement("scores", case, subject, against,
                     {"entries": 10, "differing": 3, "mismatched": mismatched, "max_abs_error": 0.25,
                      "max_rel_error": 0.125, "max_ulps": 7},
                     {"queries": 2, "identical_queries": 1, "min_id_fraction": 0.75, "mean_id_fraction": 0.875})


@pytest.mark.parametrize("text, parsed", [
    ("max_ulps=8", (ALL_INEXACT, "max_ulps", 8.0)),
    ("e.scores-tc:min_id_fraction=0.99", ("e.scores-tc", "min_id_fraction", 0.99)),
    ("e.scores[STRATA_X=1]:max_rel_error=0.3", ("e.scores[STRATA_X=1]", "max_rel_error", 0.3)),
])
def test_parse_limit(text, parsed):
    assert parse_limit(text) == parsed


@pytest.mark.parametrize("text, message", [
    ("max_ulps", "expected [VARIANT:]MEASURE=VALUE"),
    (":max_ulps=3", "expected [VARIANT:]MEASURE=VALUE"),
    ("max_ulp=3", "no measure 'max_ulp' to limit"),
    ("max_ulps=many", "'many' is not a number"),
    ("max_ulps=-1", "must be a finite number >= 0"),
    ("max_abs_error=nan", "must be a finite number >= 0"),
    ("min_id_fraction=1.5", "must be between 0 and 1"),
])
def test_parse_limit_refuses(text, message):
    with pytest.raises(LimitError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_limit(text)


def test_judge_ceilings_floors_and_mismatches():
    row = agreement()
    got = judge(row, {"max_ulps": 7, "max_abs_error": 0.2, "min_id_fraction": 0.75, "min_identical_fraction": 0.6})
    assert [(v["measure"], v["passed"]) for v in got] == [
        ("max_ulps", True), ("max_abs_error", False), ("min_id_fraction", True), ("min_identical_fraction", False)]
    assert got[3]["value"] == 0.5
    mismatched = judge(agreement(mismatched=1), {"max_ulps": 100, "min_id_fraction": 0.5})
    assert [(v["passed"], bool(v["detail"])) for v in mismatched] == [(False, True), (True, False)]


def test_only_rows_against_the_reference_or_the_model_are_judged_by_their_own_limits_over_every_inexacts():
    limits = {ALL_INEXACT: {"max_ulps": 1, "max_abs_error": 1.0}, "e.scores-tc": {"max_ulps": 10}}
    assert limits_for("e.scores-tc", {"e.scores-tc"}, limits) == {"max_ulps": 10, "max_abs_error": 1.0}
    assert limits_for("multi", {"e.scores-tc"}, limits) == {}
    assert limits_for("e.scores-tc+e.topk", {"e.scores-tc"}, limits) == {"max_ulps": 10, "max_abs_error": 1.0}
    assert [v["passed"] for v in verdicts(agreement(), "reference", {"e.scores-tc"}, limits)] == [True, True]
    assert verdicts(agreement(against="multi"), "reference", {"e.scores-tc"}, limits) == []
    assert len(verdicts(agreement(against="cpu-model"), "reference", {"e.scores-tc"}, limits)) == 2


@pytest.mark.parametrize("limits, message", [
    ({"nope": {"max_ulps": 1}}, "the run has no such variant"),
    ({"halve": {"max_ulps": 1}}, "it is exact"),
    ({"e.topk-x": {"max_ulps": 1}}, "a topk variant's output has no score errors"),
])
def test_check_scopes_refuses(limits, message):
    with pytest.raises(LimitError, match=message):
        check_scopes(limits, {"e.scores-tc": "scores", "e.topk-x": "topk"}, {"halve", "e.scores-tc", "e.topk-x"})


def test_check_scopes_takes_every_inexact_and_a_scorers_selection():
    check_scopes({ALL_INEXACT: {"max_ulps": 1}, "e.scores-tc": {"min_id_fraction": 0.9}, "e.topk-x": {
        "min_id_fraction": 0.9}}, {"e.scores-tc": "scores", "e.topk-x": "topk"}, {"e.scores-tc", "e.topk-x"})
