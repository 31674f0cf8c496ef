"""``qsa sanitize``: compute-sanitizer's memcheck, racecheck, synccheck and initcheck over every variant.

Each (variant, case, tool) runs in its own child process (qsa_cli/sanitize_child.py) with CuPy's memory
pool off, or (the quick matrix, qsa selftest's) a stage's cases share one per tool, again one by one where it
reports anything; the cases are decode and prompt calls, small and large contexts, every score set and kind of keys. The
kernels are compiled with line information (QSA_LINEINFO=1), so a report names its source line. Every
report is attributed to the case that ran when it was printed; a report that a known-hazards file
explains (a pattern it must contain, and the reason) is listed but does not fail the run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .config import SweepCase, yaml_problem
from .core.children import end_groups, start_in_group, waited
from .core.cores import usable_cores
from .core.errors import SanitizerError
from .core.geometry import MAX_QUERIES
from .kernels import ENV_LINEINFO
from .record.schema import SanitizerRun
from .record.vocabulary import DEFAULT_KEYS, SCORER_KEYS

# Each tool with the calls a child makes of each case under it. memcheck and initcheck call it twice, as the
# engine's decode steps do: the second call must find the scratch the first left clean, and one that does not
# may read or write out of bounds there. racecheck and synccheck call it once: their hazards are a launch's own
# (shared memory, barriers), and a second launch on the same inputs and clean scratch runs the same code (a
# scratch left dirty fails the parity checks and memcheck's second call). The cluster top-k's racecheck takes
# seconds a call.
TOOL_CALLS = {"memcheck": 2, "racecheck": 1, "synccheck": 1, "initcheck": 2}
TOOLS = tuple(TOOL_CALLS)
MARKER = "qsa-sanitize-case"  # a child's line before each case it runs (qsa_cli/sanitize_child.py)
SET_UP = "set-up"  # after the marker's case index: the line before the case is set up, not run
ENV_CUDA_HOME = "CUDA_HOME"
CHILD_TIMEOUT_S = 600
# the longest a child waits for its parent's release before it runs its cases all the same: a hold outlasting a
# selftest's timers' check by far, and no child left waiting on a parent that never lets it go
HOLD_LIMIT_S = 60
MAX_DEFAULT_JOBS = 16  # children at a time by default: each holds a core, and a CUDA context on the card
# the totals ("ERROR SUMMARY: 51 errors"), not the line after them ("48 errors were not printed")
_SUMMARY = re.compile(r"^=+ (?:ERROR SUMMARY: (\d+) errors?\s*$|RACECHECK SUMMARY: (\d+) hazards? displayed)", re.M)
_PREFIX = re.compile(r"^=+ ?")
_REPORT_START = re.compile(r"^(Invalid |Race reported|Warning: |Error: |Barrier error|Uninitialized |"
                           r"Program hit |Malloc|Free |Cuda API error|Leaked )")


@dataclass(frozen=True)
class SanitizeCase(SweepCase):
    """One call of one stage (a sweep's case), of one variant, on seeded synthetic inputs."""

    variant: str = field(kw_only=True)
    seed: int = field(default=0, kw_only=True)

    def case(self) -> dict[str, Any]:
        """The case as the record keys it (results.case_key)."""
        out: dict[str, Any] = {"ctx": self.ctx, "nq": self.nq, "capacity": self.capacity, "kind": self.kind}
        if self.score_set is not None:
            out["score_set"] = self.score_set
        if self.keys != DEFAULT_KEYS:
            out["keys"] = self.keys
        return out


# (context, queries, capacity, kind): a small call (a tail block, a few split chunks) on every kind of
# input; a large decode call under the engine's capacity; for the top-k, a prompt call with the active
# block count (16 queries: the prompt path's code, at a fraction of a 64-query call's racecheck time).
SMALL_SCORER_CALL = (2102, 3, 16384, "decode")
LARGE_SCORER_CALL = (524288, MAX_QUERIES, 524288, "decode")
SMALL_TOPK_CALL = (9002, 3, 16384, "decode")
# The quick matrix's top-k call: one query. The cluster kernel's racecheck takes seconds a query (a cluster of
# 8 CTAs of 1,024 threads each) and, a query's CTAs running the code every other query's run, finds nothing more.
QUICK_TOPK_CALL = (9002, 1, 16384, "decode")
LARGE_TOPK_CALL = (524288, MAX_QUERIES, 524288, "decode")
# A large call of few queries: the cluster top-k runs 16 CTAs a query there, where the card runs every
# query's cluster of 16 at once (the H200 runs 7); the large call above keeps 8 a query.
WIDE_TOPK_CALL = (524288, 4, 524288, "decode")
PROMPT_TOPK_CALL = (135176, 16, 135176, "prompt")
PROMPT_SCORE_SET = "levels64"  # ties at the threshold


def default_jobs() -> int:
    """Children at a time unless told: one a core this process may run on, at most MAX_DEFAULT_JOBS."""
    return max(1, min(usable_cores(), MAX_DEFAULT_JOBS))


def find_sanitizer(env: dict[str, str] | None = None) -> Path:
    """compute-sanitizer on the PATH, else under CUDA_HOME; SanitizerError saying so when neither has it."""
    env = dict(os.environ) if env is None else env
    found = shutil.which("compute-sanitizer", path=env.get("PATH"))
    if found:
        return Path(found)
    home = env.get(ENV_CUDA_HOME)
    if home:
        candidate = Path(home) / "bin" / "compute-sanitizer"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    where = f"the PATH or {ENV_CUDA_HOME}={home}/bin" if home else f"the PATH ({ENV_CUDA_HOME} is not set)"
    raise SanitizerError(f"compute-sanitizer not found on {where}: it ships with the CUDA toolkit")


def matrix(variants: dict[str, tuple[str, ...]], score_sets: tuple[str, ...], seed: int = 0,
           quick: bool = False) -> list[SanitizeCase]:
    """The cases of every variant (``variants``: stage -> names): a small decode call on every kind of keys
    (scorer) or score set (top-k), a large decode call (the top-k's at 8 and at 4 queries), and a prompt call
    (top-k). ``quick``: the small call on the first keys and score set only (the top-k's of one query,
    QUICK_TOPK_CALL)."""
    scorer = [(SMALL_SCORER_CALL, keys) for keys in SCORER_KEYS[:1 if quick else None]]
    small_topk = QUICK_TOPK_CALL if quick else SMALL_TOPK_CALL
    topk = [(small_topk, score_set) for score_set in score_sets[:1 if quick else None]]
    if not quick:
        scorer.append((LARGE_SCORER_CALL, DEFAULT_KEYS))
        topk += [(LARGE_TOPK_CALL, score_sets[0]), (WIDE_TOPK_CALL, score_sets[0]),
                 (PROMPT_TOPK_CALL, PROMPT_SCORE_SET)]
    out = [SanitizeCase("scores", *call, None, keys, variant=v, seed=seed)
           for call, keys in scorer for v in variants.get("scores", ())]
    out += [SanitizeCase("topk", *call, score_set, variant=v, seed=seed)
            for call, score_set in topk for v in variants.get("topk", ())]
    return out


@dataclass(frozen=True)
class KnownHazard:
    variant: str
    tool: str
    match: str  # a report that contains this text is explained
    reason: str


def load_known(path: str | os.PathLike[str]) -> list[KnownHazard]:
    """A YAML list of {variant, tool, match, reason}: reports explained, with why they cannot change an output."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise SanitizerError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise SanitizerError(f"{path}: cannot read ({exc})") from None
    except yaml.YAMLError as exc:
        raise SanitizerError(yaml_problem(str(path), exc)) from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise SanitizerError(f"{path}: a list of known hazards expected (variant, tool, match, reason)")
    out = []
    for i, entry in enumerate(data):
        keys = ("variant", "tool", "match", "reason")
        if not isinstance(entry, dict) or set(entry) != set(keys) or not all(
                isinstance(entry[k], str) and entry[k].strip() for k in keys):
            raise SanitizerError(f"{path}: entry {i}: needs exactly variant, tool, match and reason, each a non-empty text")
        if entry["tool"] not in TOOLS:
            raise SanitizerError(f"{path}: entry {i}: tool must be one of {', '.join(TOOLS)} (got {entry['tool']!r})")
        out.append(KnownHazard(**{k: entry[k].strip() for k in keys}))
    return out


def split_reports(text: str) -> list[str]:
    """The sanitizer's reports in ``text`` (its lines of one section), each as one line."""
    reports: list[list[str]] = []
    for line in text.splitlines():
        if not line.startswith("="):
            continue
        body = _PREFIX.sub("", line).rstrip()
        stripped = body.strip()
        if not stripped or stripped.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY",
                                                "Saved host backtrace", "Host Frame", "Target application")):
            continue
        if _REPORT_START.match(stripped):
            reports.append([stripped])
        elif reports and body.startswith(" "):
            reports[-1].append(stripped)
    return [" ".join(r) for r in reports]


def summary_count(text: str) -> int | None:
    """The errors (or hazards displayed) of the sanitizer's summary line; None when it printed none."""
    m = None
    for m in _SUMMARY.finditer(text):
        pass
    if m is None:
        return None
    return int(m.group(1) or m.group(2))


def attribute(output: str, cases: int) -> tuple[list[str], tuple[int, bool]]:
    """The child's output cut at its case markers: the text printed while each case was set up or ran (the
    last case also gets what followed it, the summary included); and the last marker's case, and whether it
    marked a set-up (the child stopped there, before any case ran) rather than a run."""
    parts = re.split(rf"^{MARKER} (\d+)( {SET_UP})?[ \t]*\n?", output, flags=re.M)
    texts = [""] * cases
    last = (0, False)
    for index, set_up, text in zip(parts[1::3], parts[2::3], parts[3::3]):
        if int(index) < cases:
            texts[int(index)] += text
            last = (int(index), set_up is not None)
    return texts, last


def judge(cases: list[SanitizeCase], tool: str, output: str, returncode: int, known: list[KnownHazard],
          seconds: float) -> list[SanitizerRun]:
    """One row per case: its reports, how many of them ``known`` explains, and the first. Reports past the
    print limit count against the last case announced; a child that failed with no report, printed no
    summary, or stopped before a case ran counts one error there."""
    total = summary_count(output)
    texts, (last, setting_up) = attribute(output, len(cases))
    reports = [split_reports(t) for t in texts]
    errors = [len(r) for r in reports]
    notes = ["" for _ in cases]
    if total is not None and total > sum(errors):
        errors[last] += total - sum(errors)
    tail = next((line.strip() for line in reversed(output.strip().splitlines()) if line.strip()), "no output")
    if total is None:
        errors[last] += 1
        notes[last] = f"the sanitizer printed no summary (exit {returncode}): {tail}"
    elif returncode != 0 and total == 0:
        errors[last] += 1
        notes[last] = f"the child failed (exit {returncode}): {tail}"
    stopped = f"setting up case {last}" if setting_up else f"in case {last}"
    for i in range(len(cases)):
        if i > last or (setting_up and i != last):
            errors[i] += 1
            notes[i] = f"did not run: the child stopped {stopped}"
    rows = []
    for case, found, count, note in zip(cases, reports, errors, notes):
        explained = sum(any(k.variant == case.variant and k.tool == tool and k.match in r for k in known) for r in found)
        rows.append(SanitizerRun(case.stage, case.case(), case.variant, tool, count, explained,
                                 found[0] if found else note, round(seconds / len(cases), 3)))
    return rows


def child_command(sanitizer: Path, tool: str, cases: list[SanitizeCase], kernels: Path,
                  engines: tuple[str, ...] = (), adapter: Path | None = None) -> list[str]:
    """compute-sanitizer's ``tool`` over a child running ``cases``, its job (the cases, the calls of each the
    tool needs, the run's kernels folder, engine checkouts and adapter) its one argument."""
    payload = json.dumps({"kernels": str(kernels), "engines": list(engines), "adapter": adapter and str(adapter),
                          "calls": TOOL_CALLS[tool], "cases": [asdict(c) for c in cases]})
    return tool_command(sanitizer, tool, [sys.executable, "-m", "qsa_cli.sanitize_child", payload])


def tool_command(sanitizer: Path, tool: str, program: list[str]) -> list[str]:
    """compute-sanitizer's ``tool`` over ``program``, every report printed up to the limit (racecheck's
    warnings too)."""
    flags = ["--racecheck-report", "all"] if tool == "racecheck" else []
    return [str(sanitizer), "--tool", tool, "--print-limit", "100", *flags, *program]


class ChildrenStopped(Exception):
    """The run stopped (a signal, an error) before this child could start."""


class Children:
    """The sanitizer's children running now. Each is started in a process group of its own, so that ending the
    run (a signal, an error in the parent) ends it with the child it runs under the tool (``stop``: SIGTERM,
    then SIGKILL, core/children.py). A CI runner's SIGTERM goes to qsa alone; without this, the children would
    run on, and the run would wait for them.

    A child launches nothing before its standard input closes (sanitize_child.py), which this does once the
    children are ``released``: ``held`` children start the tool, python and their cases' set-up at once, and
    wait to touch the card until the caller's own timing there is done (qsa selftest's timers' check)."""

    def __init__(self, held: bool = False) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[str]] = set()
        self._released = threading.Event()
        if not held:
            self._released.set()
        self.stopped = False

    def start(self, command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        """A child started, returned once the children are released (the caller's wait closes its input)."""
        with self._lock:  # no child starts once stop() has begun
            if self.stopped:
                raise ChildrenStopped
            # one stream, so that the sanitizer's reports stay in order with the child's case markers
            child = start_in_group(command, env, stdin=subprocess.PIPE)
            self._running.add(child)
        self._released.wait()
        return child

    def release(self) -> None:
        """Held children go on to their launches."""
        self._released.set()

    def finished(self, child: subprocess.Popen[str]) -> None:
        with self._lock:
            self._running.discard(child)

    def stop(self) -> None:
        """No child starts from now on; every one running is ended, with its process group."""
        with self._lock:
            self.stopped = True
            running = list(self._running)
        self._released.set()  # none waits for a release that will not come
        end_groups(running)


def run_tool(command: list[str], env: dict[str, str], timeout: float = CHILD_TIMEOUT_S,
             children: Children | None = None) -> tuple[str, int, float]:
    """Run a child under the sanitizer (one of ``children``, which a stopping run ends): its whole output,
    exit status and seconds (from its release: a held child's wait is its parent's time, not its own)."""
    children = children if children is not None else Children()
    child = children.start(command, env)
    t0 = time.perf_counter()
    try:
        output, code = waited(child, timeout)
    finally:
        children.finished(child)
    if code is None:
        output, code = output + f"\ntimed out after {timeout:.0f} s", -1
    return output, code, time.perf_counter() - t0


def sanitize(cases: list[SanitizeCase], tools: Iterable[str], known: list[KnownHazard], sanitizer: Path,
             kernels: Path, kept: Callable[[list[SanitizerRun]], None], jobs: int = 2, device_id: int = 0,
             progress: Callable[[int, int, str], None] = lambda done, total, msg: None,
             engines: tuple[str, ...] = (), switches: Mapping[str, tuple[tuple[str, str], ...]] | None = None,
             children: Children | None = None, adapter: Path | None = None, grouped: bool = False) -> None:
    """Every (case, tool) in its own child, ``jobs`` at a time; ``kept`` is given, each time a child ends, the
    rows of every child ended so far, in (case, tool) order. ``kernels``: the run's folder of kernel sources;
    ``engines``: its engine checkouts, which each child attaches with ``adapter`` (their libraries come from
    the cache); ``switches``: the engine's switches a variant runs under (engine/switches.py), set in its
    children. ``grouped``: the cases of a stage under the same switches share one child per tool, which
    starts python, CuPy and the tool once for them all (each row its share of the child's seconds); a shared
    child that reports anything, or fails, is run again case by case, so that every report is attributed, and
    a crash counted, as their own children would. When the run stops (Ctrl-C, SIGTERM, an error), the
    children running are ended and their rows never kept; ``children``: where they are started, for a caller
    in another thread to stop them (``Children.stop``)."""
    env = {**os.environ, ENV_LINEINFO: "1", "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", str(device_id)),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                        os.environ.get("PYTHONPATH")]))}
    tool_order = tuple(tools)

    def switched(case: SanitizeCase) -> tuple[tuple[str, str], ...]:
        return (switches or {}).get(case.variant, ())

    groups: dict[Any, list[int]] = {}  # indices into cases
    for i, case in enumerate(cases):
        groups.setdefault((case.stage, switched(case)) if grouped else i, []).append(i)
    # a child per (group, tool), the likely longest first (racechecks, then large calls), so that they spread
    # over the jobs; the rows keep the cases' order
    work = [(tool, members) for members in groups.values() for tool in tool_order]
    order = sorted(range(len(work)), key=lambda w: (work[w][0] != "racecheck",
                                                    -sum(cases[i].ctx * cases[i].nq for i in work[w][1])))
    results: dict[tuple[int, str], SanitizerRun] = {}
    children = children if children is not None else Children()

    def child(tool: str, group: list[SanitizeCase]) -> list[SanitizerRun] | None:
        try:
            output, code, seconds = run_tool(child_command(sanitizer, tool, group, kernels, engines, adapter),
                                             {**env, **dict(switched(group[0]))}, children=children)
        except ChildrenStopped:
            return None
        # a child the stopping run ended says nothing of its case
        return None if children.stopped else judge(group, tool, output, code, known, seconds)

    def one(w: int) -> dict[tuple[int, str], SanitizerRun] | None:
        tool, members = work[w]
        rows = child(tool, [cases[i] for i in members])
        if rows is not None and len(members) > 1 and any(r.errors for r in rows):
            rows = []
            for i in members:
                alone = child(tool, [cases[i]])
                if alone is None:
                    return None
                rows += alone
        return None if rows is None else {(i, tool): row for i, row in zip(members, rows)}

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        running = {pool.submit(one, w): w for w in order}
        for done, future in enumerate(as_completed(running), 1):
            results.update(future.result() or {})
            kept([results[key] for key in sorted(results, key=lambda key: (key[0], tool_order.index(key[1])))])
            progress(done, len(work), "compute-sanitizer")
    except BaseException:
        children.stop()  # the workers' children end, so the pool's shutdown below does not wait for them
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
