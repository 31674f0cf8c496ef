"""The timer's logic on the CPU, against a fake stream of work: the order of flushes, holds, events and launches;
exact counts in rounds; the batches; the stopping rule (its noise estimate, min samples, min time, timeout and
sample cap); and a measurement's record through the Measurer and the CLI on the CPU backend."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from qsa_cli.cli import main
from qsa_cli.clocks import ClockReading
from qsa_cli.launch.shape import Described, KernelCall
from qsa_cli.output.layout import text_of
from qsa_cli.output.report import blocks, result_csv
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import RunRecord
from qsa_cli.record.vocabulary import HOST_L2
from qsa_cli.session import Settings, session
from qsa_cli.stages.common import Measurer, StageOutcome
from qsa_cli.timing import (
    AUTO,
    BATCH_LAUNCHES,
    BATCHES,
    DRAINED,
    HOLD_FLAG,
    HOLD_RELEASED,
    HOLD_STATUS,
    HOLD_TIMED_OUT,
    HOLD_WAITED,
    HOLD_WORDS,
    HOST,
    MAX_ITERATIONS,
    MAX_REMEASURES,
    ROUND,
    STAMP_END,
    STAMP_START,
    THROTTLE_PAUSE_S,
    THROTTLE_THRESHOLD,
    THROTTLED,
    HoldReport,
    RoundRule,
    StoppingRule,
    _Unheld,
    median_noise_pct,
    round_sm_mhz,
    sample,
)


class FakeStream:
    """A stream whose work runs at once on a fake GPU clock: each launch takes the next of ``durations_us``,
    a flush takes ``flush_us``; an event is the clock's time when recorded. Every call is logged in order."""

    def __init__(self, durations_us: Iterator[float], flush_us: float = 50.0) -> None:
        self.durations = durations_us
        self.flush_us = flush_us
        self.now_us = 0.0
        self.log: list[str] = []

    def launch(self) -> None:
        self.now_us += next(self.durations)
        self.log.append("launch")

    def settle(self) -> None:
        self.now_us += self.flush_us
        self.log.append("settle")

    def hold(self) -> None:
        self.log.append("hold")

    def release(self) -> None:
        self.log.append("release")

    def held(self) -> HoldReport:
        return HoldReport(timed_out=False, sm_mhz=1980.0)

    def mark(self) -> float:
        self.log.append("mark")
        return self.now_us

    def wait(self) -> None:
        self.log.append("wait")

    def elapsed_us(self, start: float, end: float) -> float:
        return end - start


def constant(us: float) -> Iterator[float]:
    while True:
        yield us


def drawn(rng: np.random.Generator, median_us: float, relative_sd: float) -> Iterator[float]:
    while True:
        yield float(median_us * (1 + relative_sd * rng.standard_normal()))


class FakeWall:
    """A wall clock that moves ``step_s`` each time it is read."""

    def __init__(self, step_s: float) -> None:
        self.step_s, self.now = step_s, 0.0

    def __call__(self) -> float:
        self.now += self.step_s
        return self.now


def fixed_wall() -> float:
    return 0.0


def holds(log: list[str]) -> list[int]:
    """The launches queued behind each hold: those between it and its release."""
    sizes, inside = [], 0
    for entry in log:
        if entry == "hold":
            inside = 0
        elif entry == "launch":
            inside += 1
        elif entry == "release":
            sizes.append(inside)
    return sizes


ONE_SAMPLE = ["settle", "wait", "hold", "mark", "launch", "mark", "release", "wait"]


def test_an_exact_count_is_taken_each_sample_settled_drained_held_and_bracketed() -> None:
    stream = FakeStream(iter([7.0] * 2 + [5.0] * 70))
    poisoned = []
    timed = sample(stream, stream.launch, 70, warmup=2, before_last=lambda: poisoned.append(len(stream.log)))
    assert timed.samples_us == [5.0] * 70 and timed.batch is None and timed.stop is None
    assert stream.log[:4] == ["settle", "launch", "settle", "launch"]  # the warm-up, settled like a sample
    # nvbench's order: the flush done and the stream drained before each sample's hold
    assert stream.log[4:] == ONE_SAMPLE * 70
    # the output poisoned once, before the last sample's settle: what it holds after is the last call's
    assert len(poisoned) == 1 and stream.log[poisoned[0]:] == ONE_SAMPLE


def test_the_flush_is_outside_the_samples() -> None:
    stream = FakeStream(constant(3.0), flush_us=1000.0)
    assert sample(stream, stream.launch, 5, warmup=0).samples_us == [3.0] * 5


def test_a_batch_is_back_to_back_launches_between_one_pair_of_events() -> None:
    # the launches of a batch take 2, 4, 6, ... µs: a batch's mean is the mean of its launches, not of one
    durations = iter([float(2 * i) for i in range(1, BATCHES * BATCH_LAUNCHES + 1)] + [1.0] * 3)
    stream = FakeStream(durations)
    timed = sample(stream, stream.launch, 3, warmup=0, batches=BATCHES)
    means = [float(np.mean([2 * i for i in range(b * BATCH_LAUNCHES + 1, (b + 1) * BATCH_LAUNCHES + 1)]))
             for b in range(BATCHES)]
    assert timed.batch == {"launches": BATCH_LAUNCHES, "means_us": means}
    assert timed.samples_us == [1.0] * 3
    one_batch = ["settle", "wait", "hold", "mark", *["launch"] * BATCH_LAUNCHES, "mark", "release", "wait"]
    assert stream.log[:len(one_batch) * BATCHES] == one_batch * BATCHES  # before the samples


def test_the_noise_of_the_median_is_its_interval_between_order_statistics() -> None:
    # 4 samples: ranks 1.5 -/+ 1 -> the 1st and the 4th; half their distance over the median 2.5
    assert median_noise_pct([4.0, 1.0, 3.0, 2.0]) == pytest.approx(100 * (4 - 1) / 2 / 2.5)
    assert median_noise_pct([5.0] * 20) == 0.0
    # an event timer's 32 ns steps: equal samples around the median still leave half a step of noise
    stepped = [23.744] * 6 + [23.712, 23.776, 23.808, 23.68, 23.84, 23.648, 23.872]
    assert median_noise_pct(stepped) == pytest.approx(100 * 0.016 / 23.744)
    assert median_noise_pct([0.0, 0.0, 1.0]) == math.inf


@pytest.mark.parametrize("n", [400, 4000])
def test_the_noise_of_the_median_is_its_standard_error(rng: np.random.Generator, n: int) -> None:
    """For normal samples the median's standard error is sqrt(pi / 2) sd / sqrt(n). One estimate from n
    samples scatters by a third at n = 400, so the test takes the median estimate of 41 draws: over 30 seeds
    that came within 0.95-1.12 of it at n = 400 (whole ranks widen the interval a little), 0.98-1.05 at 4000."""
    estimates = [median_noise_pct(list(100.0 * (1 + 0.05 * rng.standard_normal(n)))) for _ in range(41)]
    expected = 100 * math.sqrt(math.pi / 2) * 0.05 / math.sqrt(n)
    assert float(np.median(estimates)) == pytest.approx(expected, rel=0.2)


def test_quiet_samples_meet_the_rule_at_its_least_count() -> None:
    stream = FakeStream(constant(10.0))
    rule = StoppingRule(min_samples=20)
    timed = sample(stream, stream.launch, rule, warmup=0, wall=fixed_wall)
    assert len(timed.samples_us) == 20
    assert timed.stop == {"met": True, "reason": "met", "noise_pct": 0.0, "measured_s": pytest.approx(200e-6),
                          "wall_s": 0.0}
    assert holds(stream.log) == [1] * 20  # the least count first, a hold a sample


def test_noisy_samples_take_rounds_until_the_first_that_meets_the_rule(rng: np.random.Generator) -> None:
    # a 30 % spread against a 1 % rule: the median's noise at 20 samples is about 8 %, and the rule took 212
    # to 2,868 samples over 3,000 seeds (a 5 % spread against 0.5 %, as before, met it at 20 for about 1 %
    # of the seeds: 6 order statistics around the median of 20 can fall within 1 % of one another)
    stream = FakeStream(drawn(rng, 50.0, 0.30))
    rule = StoppingRule(min_samples=20, max_noise_pct=1.0)
    timed = sample(stream, stream.launch, rule, warmup=0, wall=fixed_wall)
    n = len(timed.samples_us)
    assert timed.stop is not None and timed.stop["met"] and timed.stop["reason"] == "met"
    assert timed.stop["noise_pct"] == median_noise_pct(timed.samples_us) <= 1.0
    assert n > 20 and (n - 20) % ROUND == 0
    assert median_noise_pct(timed.samples_us[:n - ROUND]) > 1.0  # one round fewer had not met it


def test_the_rule_waits_for_its_measured_time() -> None:
    stream = FakeStream(constant(100.0))
    timed = sample(stream, stream.launch, StoppingRule(min_samples=20, min_time_s=0.01), warmup=0, wall=fixed_wall)
    n = len(timed.samples_us)
    assert timed.stop is not None and timed.stop["met"] and timed.stop["measured_s"] >= 0.01
    assert (n - ROUND) * 100e-6 < 0.01 <= n * 100e-6


def test_the_timeout_stops_a_noisy_measurement_and_says_the_rule_was_not_met(rng: np.random.Generator) -> None:
    stream = FakeStream(drawn(rng, 50.0, 0.3))
    wall = FakeWall(step_s=1.0)  # a second a read: the first round's end is 1 s after the start
    timed = sample(stream, stream.launch, StoppingRule(max_noise_pct=0.01, timeout_s=3.0), warmup=0, wall=wall)
    assert timed.stop is not None and timed.stop["reason"] == "timeout" and not timed.stop["met"]
    assert timed.stop["wall_s"] == 3.0 and timed.stop["noise_pct"] > 0.01
    assert len(timed.samples_us) == 20 + 2 * ROUND  # rounds ending at 1 s, 2 s and 3 s


def test_the_timeout_holds_before_the_least_count() -> None:
    stream = FakeStream(constant(10.0))
    timed = sample(stream, stream.launch, StoppingRule(min_samples=100, timeout_s=1.0), warmup=0, wall=FakeWall(5.0))
    assert len(timed.samples_us) == ROUND and timed.stop is not None and timed.stop["reason"] == "timeout"


def test_the_sample_cap_stops_a_rule_that_is_never_met(rng: np.random.Generator) -> None:
    stream = FakeStream(drawn(rng, 50.0, 0.5))
    timed = sample(stream, stream.launch, StoppingRule(max_noise_pct=1e-6), warmup=0, wall=fixed_wall)
    assert len(timed.samples_us) == MAX_ITERATIONS
    assert timed.stop is not None and timed.stop["reason"] == "sample cap" and not timed.stop["met"]


def test_under_the_rule_each_rounds_last_sample_is_poisoned_first(rng: np.random.Generator) -> None:
    """Any round may be the last, so the output is poisoned before each round's last sample."""
    stream = FakeStream(drawn(rng, 50.0, 0.05))
    poisoned: list[int] = []
    timed = sample(stream, stream.launch, StoppingRule(min_samples=20, max_noise_pct=1.0), warmup=0,
                   before_last=lambda: poisoned.append(stream.log.count("mark") // 2), wall=fixed_wall)
    n = len(timed.samples_us)
    rounds = 1 + (n - 20) // ROUND
    assert poisoned == [19 + ROUND * r for r in range(rounds)] and poisoned[-1] == n - 1


def test_the_next_round_fills_the_least_count_then_goes_a_round_at_a_time() -> None:
    rule = StoppingRule(min_samples=50)
    assert [rule.next_round(t) for t in (0, 32, 50, 82, MAX_ITERATIONS - 5)] == [32, 18, ROUND, ROUND, 5]


def test_the_host_stream_times_its_calls() -> None:
    calls: list[int] = []
    timed = sample(HOST, lambda: calls.append(1), 4, warmup=1)
    assert len(calls) == 5 and len(timed.samples_us) == 4 and all(x >= 0 for x in timed.samples_us)
    assert timed.batch is None


def _measured(iters: int | str, rule: StoppingRule = StoppingRule()) -> Callable[[], object]:
    m = Measurer(iters, rule=rule).measure("scores", "multi", {"ctx": 9000, "nq": 1, "capacity": 9000,
                                                               "kind": "decode", "l2": HOST_L2}, lambda: None)
    assert m is not None
    return m


def test_a_measurement_records_what_its_launch_enqueues() -> None:
    """A launch qsa's launcher built says which kernels it enqueues; any other launch records none."""
    calls = (KernelCall("block_topk_split_pass_kernel", (65, 8), (1024,)),
             KernelCall("block_topk_split_emit_kernel", (65, 8), (1024,), programmatic=True))
    case = {"ctx": 9000, "nq": 8, "capacity": 9000, "kind": "decode", "l2": HOST_L2}
    m = Measurer(3).measure("topk", "split", case, Described(lambda: None, calls))
    assert m is not None and m.launches == [call.to_dict() for call in calls]
    assert m.launches[1]["programmatic"] and m.launches[1]["grid"] == [65, 8]
    assert _measured(3).launches is None


def reading(sm_mhz: int, throttled: bool) -> ClockReading:
    """A clock reading as clocks.ClockMonitor.read gives it."""
    return ClockReading(sm_mhz, None, None, None, ["sw_thermal_slowdown"] if throttled else [], throttled)


class Clocks:
    """Readings one after another, the launches counted between them."""

    def __init__(self, *readings: ClockReading) -> None:
        self.readings, self.calls, self.read_at = list(readings), 0, []

    def read(self) -> ClockReading:
        self.read_at.append(self.calls)
        return self.readings.pop(0)


def test_the_clocks_are_read_around_a_measurement_and_a_throttled_one_says_so() -> None:
    clocks = Clocks(reading(1980, False), reading(1400, True), reading(1980, False), reading(1980, False))

    def launch() -> None:
        clocks.calls += 1

    measurer = Measurer(3, clocks=clocks)
    first = measurer.measure("scores", "multi", {"ctx": 9000, "nq": 1, "capacity": 9000, "kind": "decode",
                                                 "l2": HOST_L2}, launch)
    assert first is not None and clocks.read_at == [0, 1 + 3]  # before the warm-up run and after the samples
    assert first.clocks_before is not None and first.clocks_before["sm_mhz"] == 1980
    assert first.clocks_after is not None and first.clocks_after["sm_mhz"] == 1400 and first.throttled
    second = measurer.measure("scores", "halve", first.case, launch)
    assert second is not None and not second.throttled and second.warmup == 1


def test_a_measurer_of_iters_auto_records_the_rules_outcome() -> None:
    m = _measured(AUTO, StoppingRule(max_noise_pct=100.0, timeout_s=5.0))
    assert m.stop is not None and m.stop["met"] and len(m.samples_us) >= 20 and m.batch is None
    assert _measured(7).stop is None and len(_measured(7).samples_us) == 7


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    return int(info.value.code or 0), capsys.readouterr().out


def test_select_bench_auto_on_the_cpu_backend_records_the_rule_and_shows_it(capsys, tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out = run(capsys, "select-bench", "4096", "1", AUTO, "8192", "--backend", "cpu", "--max-noise", "50",
                    "--timeout", "20", "--min-samples", "10", "--json", str(js))
    assert code == 0
    record = load_record(js)
    assert record.settings["stopping"] == {"min_samples": 10, "max_noise_pct": 50.0, "min_time_s": 0.0,
                                           "timeout_s": 20.0}
    for m in record.measurements:
        assert m.stop is not None and len(m.samples_us) >= 10 and m.case["l2"] == HOST_L2
        assert m.stop["met"] == (m.stop["noise_pct"] <= 50.0)
    assert "rule met" in out or "rule NOT MET" in out
    assert json.loads(js.read_text())["measurements"][0]["stop"]["reason"] in ("met", "timeout")


def test_a_count_records_no_rule(capsys, tmp_path: Path) -> None:
    js = tmp_path / "r.json"
    code, out = run(capsys, "select-bench", "4096", "1", "3", "8192", "--backend", "cpu", "--json", str(js))
    record = load_record(js)
    assert code == 0 and "stopping" not in record.settings
    assert all(m.stop is None and len(m.samples_us) == 3 for m in record.measurements) and " rule " not in out


def test_a_sweep_of_iterations_auto_takes_the_commands_rule(capsys, tmp_path: Path) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text("iterations: auto\nwarmup: 0\nstages: [topk]\ncontexts: [4099]\nqueries: [1]\ncapacity: 8192\n")
    js = tmp_path / "r.json"
    code, _ = run(capsys, "sweep", str(config), "--backend", "cpu", "--min-samples", "12", "--max-noise", "80",
                  "--json", str(js))
    record = load_record(js)
    assert code == 0 and record.settings["iterations"] == AUTO and record.settings["stopping"]["min_samples"] == 12
    assert record.measurements and all(m.stop is not None and len(m.samples_us) >= 12 for m in record.measurements)


def test_the_tables_show_the_batch_the_rule_and_the_l2_state_within_80_columns(rng: np.random.Generator) -> None:
    case = {"ctx": 420000, "nq": 4, "capacity": 524288, "kind": "decode", "l2": "dirty"}
    record = RunRecord("select-bench", ["select-bench", "420000", "4", "auto", "524288"], "gpu",
                       settings={"roles": {"scores": {"reference": "reference", "baseline": "multi",
                                                      "candidate": "halve"}}})
    for variant, us, met in (("multi", 123.0, True), ("halve", 24.0, False)):
        m = _measured(7)
        m.variant, m.case, m.samples_us = variant, dict(case), list(us * (1 + 0.01 * rng.standard_normal(40)))
        m.batch = {"launches": BATCH_LAUNCHES, "means_us": [us * 1.5, us * 1.6, us * 1.4]}
        m.stop = {"met": met, "reason": "met" if met else "timeout", "noise_pct": 0.2 if met else 1.25,
                  "measured_s": 0.1, "wall_s": 15.0}
        record.measurements.append(m)
    text = text_of(blocks(record), 80)
    assert all(len(line) <= 80 for line in text.splitlines())
    words = " ".join(text.split())
    assert "420K, 4 queries, capacity 524288, L2 dirty" in words
    assert "n 40 rule met noise 0.20% batch 184.5 µs" in words
    assert "n 40 rule NOT MET (timeout) noise 1.25% batch 36.0 µs" in words
    header, multi, halve = result_csv([(None, record)]).splitlines()
    named = dict(zip(header.split(","), halve.split(",")))
    assert (named["l2"], named["rule_met"], named["noise_pct"], named["batch_us"]) == ("dirty", "False", "1.25", "36.0")
    assert dict(zip(header.split(","), multi.split(",")))["rule_met"] == "True"


class HostStallStream(FakeStream):
    """A stream whose hold times out after ``timeout_us`` of host time, as the GPU's does in its own time: the
    host queues a launch in ``queue_us``, and a launch listed in ``stalls`` (by its index) first sleeps on the
    host. Once the hold has timed out the GPU runs each launch as it arrives, so a sample that waits on a
    stalled launch holds the host's gap. Each hold reports its SM clock from ``clocks_mhz`` (then 1980)."""

    def __init__(self, durations_us: Iterator[float], timeout_us: float, stalls: dict[int, float],
                 clocks_mhz: Iterator[float | None] = iter(()), queue_us: float = 5.0) -> None:
        super().__init__(durations_us)
        self.timeout_us, self.stalls, self.clocks, self.queue_us = timeout_us, stalls, clocks_mhz, queue_us
        self.host_us = self.held_at = 0.0
        self.launches = 0
        self.holding = self.timed_out = False

    def hold(self) -> None:
        super().hold()
        self.holding, self.timed_out, self.held_at = True, False, self.host_us

    def launch(self) -> None:
        stall = self.stalls.get(self.launches, 0.0)
        self.launches += 1
        self.host_us += stall + self.queue_us
        if self.holding and self.host_us - self.held_at > self.timeout_us:
            # the hold ran out during the stall: the GPU ran what was queued, then waited for this launch
            self.holding, self.timed_out = False, True
            self.now_us += self.host_us - self.held_at - self.timeout_us
        elif not self.holding:
            self.now_us += stall  # the GPU waited on the host for this launch, inside the sample's events
        super().launch()

    def release(self) -> None:
        super().release()
        self.holding = False

    def held(self) -> HoldReport:
        held_us = self.timeout_us if self.timed_out else self.host_us - self.held_at
        return HoldReport(timed_out=self.timed_out, sm_mhz=next(self.clocks, 1980.0), held_us=held_us)


def no_sleep(seconds: float) -> None:
    pass


CARD = RoundRule(reference_mhz=1980.0, sleep=no_sleep)


def test_a_hold_drained_by_a_host_stall_is_detected_and_its_sample_measured_again() -> None:
    # the 40th launch sleeps 500 µs on the host, past the hold's 200 µs
    stream = HostStallStream(constant(10.0), timeout_us=200.0, stalls={39: 500.0})
    timed = sample(stream, stream.launch, 70, warmup=0, rule=CARD)
    assert timed.samples_us == [10.0] * 70  # no sample holds the host's gap
    assert timed.rounds is not None
    (drained,) = timed.rounds["discarded"]
    assert drained["reason"] == DRAINED and not drained["batch"]
    # the thrown-away sample held it: the GPU waited from the timeout (200 µs after the hold) until the host
    # had slept 500 µs and queued the launch (5 µs)
    assert drained["samples_us"] == [10.0 + (500.0 + 5.0 - 200.0)]
    assert holds(stream.log) == [1] * 71  # the 40th sample taken twice
    assert timed.rounds["sm_mhz"] == [1980.0] * 70 and timed.rounds["suspect"] == []
    assert timed.rounds["held_us"] == [5.0] * 70  # the host's queueing of each kept sample


def test_the_same_stall_without_the_rule_would_be_timed_with_the_gap() -> None:
    """What the rule guards against: without it the drained round's gap is in a sample."""
    stream = HostStallStream(constant(10.0), timeout_us=200.0, stalls={39: 500.0})
    assert max(sample(stream, stream.launch, 70, warmup=0).samples_us) == 10.0 + (500.0 + 5.0 - 200.0)


def test_a_drained_batch_is_measured_again() -> None:
    # the first batch's 4th launch sleeps 1.5 ms; a batch's 32 launches are queued in 160 µs, well inside 1 ms
    stream = HostStallStream(constant(4.0), timeout_us=1000.0, stalls={3: 1500.0})
    timed = sample(stream, stream.launch, 5, warmup=0, batches=2, rule=CARD)
    assert timed.batch == {"launches": BATCH_LAUNCHES, "means_us": [4.0, 4.0]}
    assert timed.rounds is not None
    (drained,) = timed.rounds["discarded"]
    assert drained["batch"] and drained["reason"] == DRAINED
    assert drained["samples_us"] == [pytest.approx(4.0 + (4 * 5.0 + 1500.0 - 1000.0) / BATCH_LAUNCHES)]


def test_holds_that_keep_draining_are_kept_after_the_bound_and_named_suspect() -> None:
    stream = HostStallStream(constant(10.0), timeout_us=50.0, stalls={i: 100.0 for i in range(10_000)})
    timed = sample(stream, stream.launch, 40, warmup=0, rule=CARD)
    assert timed.rounds is not None and len(timed.samples_us) == 40
    assert len(timed.rounds["discarded"]) == MAX_REMEASURES
    assert timed.rounds["suspect"] == [DRAINED] * 40  # every kept sample: no re-measure was left


def test_a_throttled_sample_is_thrown_away_after_a_pause_and_measured_again() -> None:
    pauses: list[float] = []
    rule = RoundRule(reference_mhz=1980.0, sleep=pauses.append)
    durations = iter([10.0, 14.0, 10.0, 10.0])
    stream = HostStallStream(durations, timeout_us=1e9, stalls={}, clocks_mhz=iter([1980.0, 1200.0, 1975.0, 1980.0]))
    timed = sample(stream, stream.launch, 3, warmup=0, rule=rule)
    assert timed.samples_us == [10.0] * 3  # the slow sample is not in the estimate
    assert timed.rounds is not None
    (throttled,) = timed.rounds["discarded"]
    assert throttled == {"reason": THROTTLED, "batch": False, "samples_us": [14.0], "sm_mhz": 1200.0}
    assert pauses == [THROTTLE_PAUSE_S] and timed.rounds["sm_mhz"] == [1980.0, 1975.0, 1980.0]
    assert timed.rounds["reference_mhz"] == 1980.0 and timed.rounds["threshold"] == THROTTLE_THRESHOLD


def test_the_throttle_threshold_is_a_fraction_of_the_reference_and_an_unmeasured_clock_passes() -> None:
    assert CARD.fault(HoldReport(timed_out=False, sm_mhz=0.75 * 1980.0)) is None
    assert CARD.fault(HoldReport(timed_out=False, sm_mhz=0.74 * 1980.0)) == THROTTLED
    assert CARD.fault(HoldReport(timed_out=False, sm_mhz=None)) is None
    assert CARD.fault(HoldReport(timed_out=True, sm_mhz=100.0)) == DRAINED  # a drained round first


def test_a_holds_clock_is_sm_0s_cycles_over_global_nanoseconds() -> None:
    words = [0] * HOLD_WORDS
    words[STAMP_START:STAMP_START + 2] = [1_000_000, 5_000]
    words[STAMP_END:STAMP_END + 2] = [1_500_000, 5_000 + 990_000]  # 990,000 cycles in 0.5 ms
    assert round_sm_mhz(words) == pytest.approx(1980.0)
    words[STAMP_END] = -1  # no block of the last stamp ran on SM 0
    assert round_sm_mhz(words) is None


def test_the_words_of_bench_cu_are_the_timers() -> None:
    source = (Path(__file__).parent.parent / "kernels" / "bench.cu").read_text()
    defines = {name: int(value) for name, value in re.findall(r"^#define\s+(QSA_\w+)\s+(\d+)", source, re.MULTILINE)}
    assert defines == {"QSA_HOLD_FLAG": HOLD_FLAG, "QSA_HOLD_STATUS": HOLD_STATUS, "QSA_HOLD_WAITED": HOLD_WAITED,
                       "QSA_STAMP_START": STAMP_START, "QSA_STAMP_END": STAMP_END, "QSA_HOLD_WORDS": HOLD_WORDS,
                       "QSA_HOLD_RELEASED": HOLD_RELEASED, "QSA_HOLD_TIMED_OUT": HOLD_TIMED_OUT}


def test_a_suspect_measurement_is_noted_in_the_record() -> None:
    m = _measured(3)
    m.rounds = {"sm_mhz": [1980.0], "held_us": [2100.0], "reference_mhz": 1980.0, "threshold": THROTTLE_THRESHOLD,
                "discarded": [], "suspect": [DRAINED]}
    with session(Settings(backend="cpu", iters=0), "select-bench", []) as s:
        s.take(StageOutcome([m]))
    assert s.record.notes == [f"multi on {m.key}: 1 sample(s) or batch(es) kept after 0 re-measures though faulty "
                              "(hold timed out): its times are suspect"]


def test_a_launch_that_waits_on_the_host_is_timed_unheld() -> None:
    """cupy.argpartition's sort waits for the stream on the host: behind a hold it would wait out the hold's
    timeout every round. Unheld, the samples are still settled and bracketed one by one, with no hold at all."""
    stream = FakeStream(constant(12.0))
    timed = sample(_Unheld(stream), stream.launch, 40, warmup=2)
    assert timed.samples_us == [12.0] * 40 and timed.batch is None and timed.rounds is None
    assert "hold" not in stream.log and "release" not in stream.log
    assert stream.log.count("launch") == 42 and stream.log.count("settle") == 42
