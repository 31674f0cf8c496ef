"""The stages' runs: select-bench, topk-parity and window-bench, and the cases every other run is made of
(a scorer case, a top-k case), run together: each switch setting of the engine's variants in one child
process over all of a run's cases."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import VariantError
from ..core.geometry import Call, check_queries
from ..core.progress import Progress, no_progress
from ..dispatch import fastest_decode_scorer
from ..inputs import SCORE_SETS, ScorerInputs, TopkInputs, synthetic_scorer_inputs, synthetic_scores
from ..model.topk import topk_ids
from ..record.vocabulary import DEFAULT_KEYS
from ..session import Session
from ..stages import scores as scores_stage
from ..stages import topk as topk_stage
from ..stages import window as window_stage
from ..stages.common import StageOutcome
from ..variant_child import SwitchedCase, run_switched, save_inputs, switches_of


def scorer_inputs(call: Call, seed: int, keys: str = DEFAULT_KEYS) -> ScorerInputs:
    """A decode call's synthetic inputs of a ``keys`` kind (the scorers' decode kernels take 1-8 queries)."""
    check_queries(call.nq, prompt=False)
    return synthetic_scorer_inputs(call, seed, keys)


def topk_score_sets(call: Call, seed: int) -> list[TopkInputs]:
    return [synthetic_scores(call, name, seed) for name in SCORE_SETS]


def topk_score_set(call: Call, score_set: str, seed: int, oracle: bool) -> tuple[TopkInputs, np.ndarray | None]:
    """One score set of ``call`` and (``oracle``) its CPU oracle's ids: a worker process's part of a top-k
    case (runs/pool.py)."""
    inputs = synthetic_scores(call, score_set, seed)
    return inputs, topk_ids(inputs, "oracle") if oracle else None


def scorer_variants(s: Session, queries: int) -> tuple[str, ...]:
    """What a scorer case of ``queries`` queries runs: the baseline and the candidate, the scorer the engine
    dispatches for a decode call of that many, and every variant from elsewhere (an engine checkout's, a
    compare side's) with qsa's reference to check it against; ``--variants`` picks among all."""
    if s.picked is not None:
        return s.chosen(s.catalog.names("scores"))
    roles = s.roles["scores"]
    dispatched = s.dispatch("decode").scorer_for(queries)
    others = tuple(v.name for v in s.catalog.stage("scores") if not v.qsa_own)
    return tuple(dict.fromkeys((*((roles["reference"],) if others else ()), roles["baseline"], roles["candidate"],
                                dispatched, *others)))


Inputs = ScorerInputs | TopkInputs


@dataclass(frozen=True)
class Case:
    """One case of a run: ``variants`` of ``stage`` on the inputs ``make`` makes (as the case's turn comes, so
    that a run holds one case's at a time); ``run_here`` runs those that run in this process on them (with a
    progress of its own); ``label``: what the progress names the case by; ``active_blocks``: the top-k
    call's."""

    stage: str
    variants: tuple[str, ...]
    make: Callable[[], Inputs]
    run_here: Callable[[Any, tuple[str, ...], Progress], StageOutcome]  # given what ``make`` makes
    label: str
    active_blocks: int = 0


ROW_LISTS = ("measurements", "parity", "agreements")


class _InCaseOrder:
    """What ``run_cases`` takes into the record (the only rows taken meanwhile), kept as if each case had run
    alone: a case's rows in this process (slot 0), then its child rows of each switch setting in the order
    its variants name them; the cases in order, though the children run after every case here. The notes
    likewise, each at its first case's place."""

    def __init__(self, s: Session, slots: list[int]) -> None:
        self.s = s
        self.start = {name: len(getattr(s.record, name)) for name in (*ROW_LISTS, "notes")}
        self.parts: list[list[tuple[StageOutcome, list[str]] | None]] = [[None] * n for n in slots]

    def take(self, case: int, slot: int, outcome: StageOutcome) -> None:
        record, n = self.s.record, len(self.s.record.notes)
        self.s.take(outcome)
        suspect = [note for note in record.notes[n:] if note not in outcome.notes]  # what take itself noted
        self.parts[case][slot] = (outcome, list(dict.fromkeys([*suspect, *outcome.notes])))
        taken = [part for parts in self.parts for part in parts if part is not None]
        for name in ROW_LISTS:
            getattr(record, name)[self.start[name]:] = [row for o, _ in taken for row in getattr(o, name)]
        before = record.notes[:self.start["notes"]]
        ordered = dict.fromkeys(note for _, notes in taken for note in notes)
        record.notes[self.start["notes"]:] = [note for note in ordered if note not in before]

    def outcomes(self) -> list[StageOutcome]:
        """Each case's outcome: its rows here (its outputs too), then its child rows."""
        outs = []
        for parts in self.parts:
            out = StageOutcome()
            for part in parts:
                if part is not None:
                    out.extend(part[0])
            outs.append(out)
        return outs


def run_cases(s: Session, cases: list[Case], progress: Progress = no_progress) -> list[StageOutcome]:
    """Every case's variants, case by case (each case's inputs made as its turn comes), each case's rows taken
    into the record as it ends (an interrupted run keeps them); each case's outcome, in order. ``progress``:
    each case (named by its label; a run of one case: each of its variants). Variants under an engine's
    switches (``NAME.KIND[K=V]``) go through ``_run_switched``."""
    if any(switches_of(s.catalog, case.stage, name) for case in cases for name in case.variants):
        return _run_switched(s, cases, progress)
    alone = len(cases) == 1
    total = len(cases[0].variants) if alone else len(cases)
    outcomes = []
    with s.measuring():
        for i, case in enumerate(cases):
            if not alone:
                progress(i, total, case.label)
            outcomes.append(s.take(case.run_here(case.make(), case.variants, progress if alone else no_progress)))
    progress(total, total, "done")
    return outcomes


def _run_switched(s: Session, cases: list[Case], progress: Progress) -> list[StageOutcome]:
    """``run_cases`` for a run with switched variants: the variants that run in this process case by case,
    then each switch setting's variants in ONE child of its own over every case they run on
    (qsa_cli/variant_child.py: a child's start-up costs seconds), their rows placed in the record after
    their case's, so that it reads as if each case had run alone; ``progress``: each case (a run of one case:
    each of its variants run here), then each child, then the end."""
    here_of: list[tuple[str, ...]] = []
    local: list[list[tuple[tuple[str, str], ...]]] = []  # each case's switch settings, as its variants name them
    groups: dict[tuple[tuple[str, str], ...], dict[int, tuple[str, ...]]] = {}  # setting -> case -> variants
    for i, case in enumerate(cases):
        here: tuple[str, ...] = ()
        settings: dict[tuple[tuple[str, str], ...], None] = {}
        for name in case.variants:
            key = switches_of(s.catalog, case.stage, name)
            if not key:
                here += (name,)
                continue
            settings[key] = None
            by_case = groups.setdefault(key, {})
            by_case[i] = (*by_case.get(i, ()), name)
        here_of.append(here)
        local.append(list(settings))
    alone = len(cases) == 1
    done = len(here_of[0]) if alone else len(cases)  # the steps before the children's
    total = done + len(groups)
    told: Progress = (lambda d, _, message: progress(d, total, message)) if alone else no_progress  # noqa: E731
    merged = _InCaseOrder(s, [1 + len(settings) for settings in local])
    with tempfile.TemporaryDirectory(prefix="qsa-cases-") as folder, s.measuring():
        labels: dict[int, str] = {}  # the saved inputs' labels, of the cases a child runs
        for i, (case, here) in enumerate(zip(cases, here_of)):
            if not alone:
                progress(i, total, case.label)
            inputs = case.make()
            if here or not local[i]:
                merged.take(i, 0, case.run_here(inputs, here, told))
            if local[i]:
                labels[i] = save_inputs(inputs, Path(folder) / f"inputs-{i}.npz")
        for j, (switches, by_case) in enumerate(groups.items()):
            names = ", ".join(dict.fromkeys(name for names in by_case.values() for name in names))
            stages = "/".join(dict.fromkeys(cases[i].stage for i in by_case))
            over = f", {len(by_case)} cases" if len(by_case) > 1 else ""
            progress(done + j, total, f"{stages} {names} (a child process{over})")
            switched = [SwitchedCase(cases[i].stage, names_i, Path(folder) / f"inputs-{i}.npz", labels[i],
                                     cases[i].active_blocks) for i, names_i in by_case.items()]
            job = {"roles": s.roles, "check_model": s.settings.check_model, "device_id": s.settings.device_id,
                   "pci_bus_id": s.record.device["pci_bus_id"], "kernels": str(s.catalog.kernel_folder)}
            for i, out in zip(by_case, run_switched(s.catalog, switches, switched, s.measurer, job)):
                merged.take(i, 1 + local[i].index(switches), out)
    progress(total, total, "done")
    return merged.outcomes()


def scorer_case(s: Session, make: Callable[[], ScorerInputs], variants: tuple[str, ...],
                label: str = "scores") -> Case:
    def here(inputs: ScorerInputs, names: tuple[str, ...], told: Progress) -> StageOutcome:
        return scores_stage.run_scores(inputs, s.measurer, s.variants("scores", names), s.roles["scores"],
                                       s.launcher, s.settings.check_model,
                                       s.compared_bits("scores"), told)

    return Case("scores", variants, make, here, label)


def run_scorer_case(s: Session, inputs: ScorerInputs, variants: tuple[str, ...] | None = None,
                    progress: Progress = no_progress) -> StageOutcome:
    """``variants`` (none: ``scorer_variants``) on one scorer case."""
    case = scorer_case(s, lambda: inputs, variants or scorer_variants(s, inputs.nq))
    return run_cases(s, [case], progress)[0]


def select_bench(s: Session, inputs: ScorerInputs, progress: Progress = no_progress) -> StageOutcome:
    """The seed's decode-call scorer benchmark: the baseline and the candidate (and any engine checkout's
    scorers, and the scorer the engine dispatches for the call) on the same inputs, hashes, times;
    ``progress``: each variant."""
    s.record_settings(dispatch=s.dispatch_summary("decode", inputs.max_blocks))
    return run_scorer_case(s, inputs, progress=progress)


def topk_case(s: Session, make: Callable[[], TopkInputs], variants: tuple[str, ...], active_blocks: int,
              check_model: bool | None = None, oracle: np.ndarray | None = None, label: str = "topk") -> Case:
    """A top-k case; ``oracle``: the CPU oracle's ids of its inputs, made beforehand (else made as the check
    needs them)."""
    def here(inputs: TopkInputs, names: tuple[str, ...], told: Progress) -> StageOutcome:
        return topk_stage.run_topk(inputs, s.measurer, s.variants("topk", names), s.roles["topk"], s.launcher,
                                   active_blocks, s.settings.check_model if check_model is None else check_model,
                                   argpartition=s.on_gpu and s.measurer.iters != 0, same_bits=s.compared_bits("topk"),
                                   oracle=oracle)

    return Case("topk", variants, make, here, label, active_blocks)


def run_topk_case(s: Session, inputs: TopkInputs, variants: tuple[str, ...], active_blocks: int,
                  check_model: bool | None = None, oracle: np.ndarray | None = None) -> StageOutcome:
    return run_cases(s, [topk_case(s, lambda: inputs, variants, active_blocks, check_model, oracle)])[0]


def topk_parity(s: Session, inputs: list[TopkInputs], active_blocks: int,
                progress: Progress = no_progress, oracles: list[np.ndarray | None] | None = None) -> StageOutcome:
    """Every variant on every score set; times, identical-id counts, and the dispatched variant;
    ``progress``: each score set, then each child of switched variants; ``oracles``: each set's CPU oracle ids,
    made beforehand."""
    variants = s.here("topk", inputs[0].max_blocks, active_blocks)
    kind = "prompt" if active_blocks else "decode"
    s.record_settings(dispatch=s.dispatch_summary(kind, inputs[0].max_blocks))
    cases = [topk_case(s, lambda given=inp: given, variants, active_blocks,
                       oracle=oracles[i] if oracles else None, label=f"topk {inp.score_set}")
             for i, inp in enumerate(inputs)]
    out = StageOutcome()
    for inp, case_out in zip(inputs, run_cases(s, cases, progress)):
        out.extend(case_out, prefix=f"{inp.score_set}.")
    return out


def window_bench(s: Session, call: Call, keys: str = DEFAULT_KEYS, progress: Progress = no_progress) -> StageOutcome:
    """Each kernel pair this device runs, captured as one CUDA graph (scores then top-k), replays timed, on
    synthetic inputs of a ``keys`` kind: the catalog's pairs, qsa's top-k variants that follow its candidate
    scorer after the fastest scorer at the call's count too (dispatch.FASTEST_DECODE_SCORERS), and the pair the
    engine dispatches here, those ``--variants`` picks; ``progress``: each pair."""
    available = s.here("topk", call.max_blocks)
    choice = s.dispatch("decode", call.max_blocks)
    summary = choice.summary("decode")
    dispatched = (choice.scorer_for(call.nq), choice.topk)  # what the engine replays on this card
    pairs = s.catalog.window_pairs()
    candidate = s.catalog.with_role("scores", "candidate")
    try:
        fastest = fastest_decode_scorer(s.catalog, call.nq)
    except VariantError as missing:  # a --kernels copy older than that scorer: no pair after it
        s.note(f"no pair after the fastest scorer at {call.nq} queries: {missing}")
        fastest = None
    after_fastest = tuple((fastest, topk) for scorer, topk in pairs
                          if fastest and scorer == candidate and s.catalog.get("topk", topk).qsa_own)
    chosen = tuple(dict.fromkeys(p for p in (*pairs, *after_fastest, dispatched) if p[1] in available
                                 and (s.picked is None or p[0] in s.picked)))
    s.record_settings(dispatch=summary)
    inputs = scorer_inputs(call, s.settings.seed, keys)
    named = {p.name: p for p in (window_stage.WindowPair(s.catalog.get("scores", scorer), s.catalog.get("topk", topk))
                                 for scorer, topk in chosen)}

    def here(given: ScorerInputs, names: tuple[str, ...], told: Progress) -> StageOutcome:
        return window_stage.run_window(given, s.measurer, tuple(named[n] for n in names), s.launcher,
                                       s.compared_bits("window"), told)

    return run_cases(s, [Case("window", tuple(named), lambda: inputs, here, "window")], progress)[0]
