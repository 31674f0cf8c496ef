"""scripts/gate_rates.py, the method behind docs/gate.md's error-rate table: the slowed copy of the kernels it
gates, and how it counts one gate's rows with and without the confirmation round (on records made by hand)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

from record_factory import seed_record

from qsa_cli.kernels import kernel_dir
from qsa_cli.record.schema import Confirmation, RunRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import gate_rates  # noqa: E402


def test_the_slowed_copy_changes_only_the_halve_kernel_by_its_percent(tmp_path: Path) -> None:
    folder = gate_rates.slowed_kernels(tmp_path, 5)
    shipped = {p.name: p.read_text() for p in kernel_dir().iterdir() if p.is_file()}
    copied = {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}
    assert copied.keys() == shipped.keys()
    assert [name for name in shipped if copied[name] != shipped[name]] == ["scores.cu"]
    assert "spent + spent * 5 / 100" in copied["scores.cu"]
    assert copied["scores.cu"].replace(gate_rates.SPIN.format(percent=5), gate_rates.HALVE_BODY) == shipped["scores.cu"]


def test_a_gate_is_counted_without_and_with_its_confirmation_round(tmp_path: Path) -> None:
    """A run 1.3x slower on every new kernel: SLOW rows at first; a round as slow keeps them SLOW, a round at
    the baseline's speed makes them UNCONFIRMED. The slowed variant's rows are counted apart from the rest,
    with their slowdown against the A/A medians."""
    baseline = seed_record(seed=1, noise=0.02)
    slowed = seed_record(seed=2, noise=0.02, scale=1.3)

    def with_round(again: RunRecord, name: str) -> Path:
        out = copy.deepcopy(slowed)
        out.confirmations = [Confirmation(1, again.measurements)]
        out.write(tmp_path / name)
        return tmp_path / name

    first = {k: v[0] for k, v in gate_rates.verdicts(slowed, baseline).items()}
    slow_halve = sum(1 for (_, variant), v in first.items() if variant == "halve" and v == "SLOW")
    slow_others = sum(1 for (_, variant), v in first.items() if variant != "halve" and v == "SLOW")
    assert slow_halve and slow_others
    records = [with_round(seed_record(seed=3, noise=0.02, scale=1.3), "confirmed.json"),
               with_round(seed_record(seed=4, noise=0.02), "refuted.json")]
    aa_medians = {(m.key, m.variant): m.median_us for m in baseline.measurements}
    t = gate_rates.tally(records, baseline, "halve", aa_medians)
    assert t["gates"] == 2
    assert t["slowed"]["slow_unconfirmed"] == 2 * slow_halve
    assert t["slowed"]["slow_confirmed"] == slow_halve and t["slowed"]["unconfirmed"] == slow_halve
    assert t["others"]["slow_unconfirmed"] == 2 * slow_others and t["others"]["slow_confirmed"] == slow_others
    lo, hi = t["true_slowdown"]
    assert 0.25 < lo <= hi < 0.35  # 1.3x, give or take the samples' noise
    table = gate_rates.table({"aa": t, "slowed_variant": "halve", "slowdowns": {"30": t}})
    assert "| halve 30 % slower (measured +" in table and f"| {t['others']['rows']} |" in table
