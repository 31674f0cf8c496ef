"""The stages' runs: select-bench, topk-parity and window-bench, and the cases every other run is made of
(a scorer case, a top-k case), run together: each switch setting of the engine's variants in one child qsa
process over all of a run's cases (runs/switched.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import VariantError
from ..core.geometry import Call, check_queries
from ..core.progress import Progress, no_progress
from ..dispatch import fastest_decode_scorer
from ..inputs import SCORE_SETS, ScorerInputs, TopkInputs, synthetic_scorer_inputs, synthetic_scores
from ..record.assembly import InCaseOrder, check_child
from ..record.schema import case_key
from ..record.vocabulary import DEFAULT_KEYS
from ..session import ChildCasesRun, Session, SwitchedChild
from ..stages import scores as scores_stage
from ..stages import topk as topk_stage
from ..stages import window as window_stage
from ..stages.common import StageOutcome, decode_call_case
from .switched import run_child, switches_of


def scorer_inputs(call: Call, seed: int, keys: str = DEFAULT_KEYS) -> ScorerInputs:
    """A decode call's synthetic inputs of a ``keys`` kind (the scorers' decode kernels take 1-8 queries)."""
    check_queries(call.nq, prompt=False)
    return synthetic_scorer_inputs(call, seed, keys)


def topk_score_sets(call: Call, seed: int) -> list[TopkInputs]:
    return [synthetic_scores(call, name, seed) for name in SCORE_SETS]


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
    progress of its own); ``case_of``: the case as the record names it, of its inputs and the L2 state (its key
    is what a child of the run is given it by); ``label``: what the progress names the case by."""

    stage: str
    variants: tuple[str, ...]
    make: Callable[[], Inputs]
    run_here: Callable[[Any, tuple[str, ...], Progress], StageOutcome]  # given what ``make`` makes
    case_of: Callable[[Any, str], dict[str, Any]]  # given what ``make`` makes
    label: str

    def key(self, inputs: Inputs, l2: str) -> str:
        return case_key(self.stage, self.case_of(inputs, l2))  # type: ignore[arg-type]


def run_cases(s: Session, cases: list[Case], progress: Progress = no_progress) -> list[StageOutcome]:
    """Every case's variants, case by case (each case's inputs made as its turn comes), each case's rows taken
    into the record as it ends (an interrupted run keeps them); each case's outcome, in order; the measurements
    complete as the cases end (Session.measuring). ``progress``: each case (named by its label; a run of one
    case: each of its variants). Variants under an engine's switches (``NAME.KIND[K=V]``) take a branch,
    ``_run_switched``; a child of a run runs its part of it, ``_run_as_child``."""
    if s.settings.child is not None:
        return _run_as_child(s, cases)
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


Setting = tuple[tuple[str, str], ...]  # a switch setting: (K, V), ...


def _run_switched(s: Session, cases: list[Case], progress: Progress) -> list[StageOutcome]:
    """``run_cases`` for a run with variants under an engine's switches: those that run in this process case by
    case, as the plain path runs them, then each switch setting's variants in ONE child qsa process over every
    case they run on (runs/switched.py), whose record's rows the record layer places after their cases' rows
    (record/assembly.InCaseOrder), so that the record reads as if each case had run alone; ``progress``: each
    case (a run of one case: each of its variants run here), then each child, then the end."""
    here_of: list[tuple[str, ...]] = []
    settings_of: list[list[Setting]] = []  # each case's switch settings, in the order its variants name them
    groups: dict[Setting, dict[int, tuple[str, ...]]] = {}  # setting -> case -> its variants under it
    for i, case in enumerate(cases):
        here: tuple[str, ...] = ()
        settings: dict[Setting, None] = {}
        for name in case.variants:
            setting = switches_of(s.catalog, case.stage, name)
            if not setting:
                here += (name,)
                continue
            settings[setting] = None
            by_case = groups.setdefault(setting, {})
            by_case[i] = (*by_case.get(i, ()), name)
        here_of.append(here)
        settings_of.append(list(settings))
    alone = len(cases) == 1
    done = len(here_of[0]) if alone else len(cases)  # the steps before the children's
    total = done + len(groups)
    told: Progress = (lambda d, _, message: progress(d, total, message)) if alone else no_progress  # noqa: E731
    placed = InCaseOrder(s.record)
    keys: list[str] = []
    outcomes: list[StageOutcome] = []
    with s.measuring():
        for i, (case, here) in enumerate(zip(cases, here_of)):
            if not alone:
                progress(i, total, case.label)
            inputs = case.make()
            keys.append(case.key(inputs, s.measurer.l2))
            ran = here or not settings_of[i]
            outcomes.append(s.take(case.run_here(inputs, here, told)) if ran else StageOutcome())
    locked_sm_mhz = s.measurer.gpu.locked_sm_mhz if s.measurer.gpu is not None else None
    for j, (setting, by_case) in enumerate(groups.items()):
        names = ", ".join(dict.fromkeys(name for names in by_case.values() for name in names))
        stages = "/".join(dict.fromkeys(cases[i].stage for i in by_case))
        over = f", {len(by_case)} cases" if len(by_case) > 1 else ""
        progress(done + j, total, f"{stages} {names} (a child process{over})")
        child = SwitchedChild(setting, tuple((k, os.environ.get(k)) for k, _ in setting),
                              locked_sm_mhz,
                              tuple((keys[i], names_i) for i, names_i in by_case.items()))
        record = run_child(s.record.argv, child, names)
        check_child(s.record, record, f"the child running {names}")
        parts = {keys[i]: (1 + settings_of[i].index(setting), names_i) for i, names_i in by_case.items()}
        taken = placed.take_child(record, keys, parts)
        for i in by_case:
            outcomes[i].extend(taken[keys[i]])
    progress(total, total, "done")
    return outcomes


def _run_as_child(s: Session, cases: list[Case]) -> list[StageOutcome]:
    """``run_cases`` in a child of a run (runs/switched.py): of the cases it was given (by their keys) among
    ``cases``, those it has not run yet, each with the variants it was given there and qsa's reference to check
    them against (the window's pairs have none), their rows taken into its record. Once it has run every case
    it was given, its command ends (ChildCasesRun), its record written (commands/measuring.py)."""
    child = s.settings.child
    assert child is not None
    given = dict(child.cases)
    outcomes = []
    with s.measuring():
        for case in cases:
            inputs = case.make()
            key = case.key(inputs, s.measurer.l2)
            if key not in given or key in s.ran_as_child:
                outcomes.append(StageOutcome())
                continue
            reference = () if case.stage == "window" else (s.roles[case.stage]["reference"],)
            outcomes.append(s.take(case.run_here(inputs, (*reference, *given[key]), no_progress)))
            s.ran_as_child.add(key)
    if s.ran_as_child >= given.keys():
        raise ChildCasesRun
    return outcomes


def scorer_case(s: Session, make: Callable[[], ScorerInputs], variants: tuple[str, ...],
                label: str = "scores") -> Case:
    def here(inputs: ScorerInputs, names: tuple[str, ...], told: Progress) -> StageOutcome:
        return scores_stage.run_scores(inputs, s.measurer, s.variants("scores", names), s.roles["scores"],
                                       s.launcher, s.settings.check_model,
                                       s.compared_bits("scores"), told)

    return Case("scores", variants, make, here, decode_call_case, label)


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
                                   same_bits=s.compared_bits("topk"), oracle=oracle)

    def case_of(inputs: TopkInputs, l2: str) -> dict[str, Any]:
        return topk_stage.topk_call_case(inputs, active_blocks, l2)

    return Case("topk", variants, make, here, case_of, label)


def run_topk_case(s: Session, inputs: TopkInputs, variants: tuple[str, ...], active_blocks: int,
                  check_model: bool | None = None, oracle: np.ndarray | None = None) -> StageOutcome:
    return run_cases(s, [topk_case(s, lambda: inputs, variants, active_blocks, check_model, oracle)])[0]


def record_topk_dispatch(s: Session, max_blocks: int, active_blocks: int) -> None:
    """The top-k the engine dispatches for a call of this size (a prompt call's when ``active_blocks``), into
    the record's settings."""
    s.record_settings(dispatch=s.dispatch_summary("prompt" if active_blocks else "decode", max_blocks))


def topk_parity(s: Session, inputs: list[TopkInputs], active_blocks: int,
                progress: Progress = no_progress, oracles: list[np.ndarray | None] | None = None) -> StageOutcome:
    """Every variant on every score set; times, identical-id counts, and the dispatched variant;
    ``progress``: each score set, then each child of switched variants; ``oracles``: each set's CPU oracle ids,
    made beforehand."""
    variants = s.here("topk", inputs[0].max_blocks, active_blocks)
    record_topk_dispatch(s, inputs[0].max_blocks, active_blocks)
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

    return run_cases(s, [Case("window", tuple(named), lambda: inputs, here, decode_call_case, "window")], progress)[0]
