"""``qsa sanitize`` (qsa_cli/sanitize.py): finding compute-sanitizer, reading its reports, known hazards,
and the verdicts; the CPU tests read outputs the H200 printed (tests/data), the GPU tests run the tool."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from qsa_cli import sanitize, sanitize_child, session
from qsa_cli.cli import main
from qsa_cli.record.load import load_record
from qsa_cli.runs import sanitizer as runs_sanitizer
from qsa_cli.runs import selftest as selftest_run
from qsa_cli.sanitize import MARKER

DATA = Path(__file__).parent / "data"
MEMCHECK = (DATA / "memcheck-split-freed-counts.txt").read_text()  # 51 errors, 3 printed, the child crashed
RACECHECK = (DATA / "racecheck-cluster-chunk-flag.txt").read_text()  # 3 hazards, the child exited 0
CLEAN = "========= COMPUTE-SANITIZER\ndone\n========= ERROR SUMMARY: 0 errors\n"
SPLIT = sanitize.SanitizeCase("topk", 131072, 3, 131072, "decode", "continuous", variant="split")
CLUSTER = sanitize.SanitizeCase("topk", 9002, 3, 16384, "decode", "continuous", variant="cluster")


def marked(*texts: str) -> str:
    return "".join(f"{MARKER} {i}\n{t}" for i, t in enumerate(texts))


def test_reports_are_read_one_line_each_with_their_source_line() -> None:
    reports = sanitize.split_reports(MEMCHECK)
    assert len(reports) == 3
    assert reports[0].startswith("Invalid __global__ write of size 8 bytes at block_topk_split_count_kernel(")
    assert "in topk.cu:527 by thread (0,0,0) in block (8,0,0)" in reports[0]
    assert "Host Frame" not in reports[0]
    race = sanitize.split_reports(RACECHECK)
    assert len(race) == 3 and all("topk_cluster.cu:451" in r and "topk_cluster.cu:447" in r for r in race)
    assert sanitize.summary_count(MEMCHECK) == 51 and sanitize.summary_count(RACECHECK) == 3
    assert sanitize.summary_count(CLEAN) == 0 and sanitize.summary_count("no summary") is None


def test_every_error_counts_against_its_case_also_past_the_print_limit() -> None:
    rows = sanitize.judge([CLUSTER, SPLIT], "memcheck", marked(CLEAN.split("=" * 9 + " ERROR")[0], MEMCHECK), 1, [], 2.0)
    assert [r.errors for r in rows] == [0, 51]
    assert rows[0].passed and not rows[1].passed
    assert "topk.cu:527" in rows[1].first_report and rows[1].variant == "split" and rows[1].tool == "memcheck"


def test_a_known_hazard_is_explained_only_for_its_variant_and_tool() -> None:
    known = [sanitize.KnownHazard("cluster", "racecheck", "topk_cluster.cu:451", "a reason")]
    (row,) = sanitize.judge([CLUSTER], "racecheck", marked(RACECHECK), 0, known, 1.0)
    assert (row.errors, row.explained, row.passed) == (3, 3, True)
    (row,) = sanitize.judge([CLUSTER], "memcheck", marked(RACECHECK), 0, known, 1.0)
    assert not row.passed
    other = [sanitize.KnownHazard("split", "racecheck", "topk_cluster.cu:451", "a reason")]
    assert not sanitize.judge([CLUSTER], "racecheck", marked(RACECHECK), 0, other, 1.0)[0].passed


def test_a_child_that_fails_or_stops_early_fails_its_cases() -> None:
    crashed = marked("Traceback ...\nRuntimeError: boom\n========= ERROR SUMMARY: 0 errors\n")
    rows = sanitize.judge([CLUSTER, SPLIT], "memcheck", crashed, 1, [], 1.0)
    assert rows[0].errors == 1 and "the child failed (exit 1)" in rows[0].first_report
    assert rows[1].errors == 1 and "did not run" in rows[1].first_report
    (row,) = sanitize.judge([CLUSTER], "memcheck", marked("killed\n"), -9, [], 1.0)
    assert row.errors == 1 and "printed no summary" in row.first_report


def test_a_report_counts_against_its_case_whether_set_up_or_run() -> None:
    """A child announces each case as it sets it up, then again as it runs it: what either printed is the
    case's; a crash in the first case's run leaves the second not run, though it was set up, and a crash in
    the second's set-up leaves both not run, the second failed."""
    set_up = "".join(f"{MARKER} {i} {sanitize.SET_UP}\n" for i in range(2))
    report = RACECHECK.split("========= RACECHECK SUMMARY")[0]
    rows = sanitize.judge([CLUSTER, SPLIT], "racecheck", set_up + marked(report, CLEAN), 0, [], 1.0)
    assert [(r.errors, r.first_report[:14]) for r in rows] == [(3, "Warning: Race "), (0, "")]
    crashed = "Traceback ...\nRuntimeError: boom\n========= ERROR SUMMARY: 0 errors\n"
    rows = sanitize.judge([CLUSTER, SPLIT], "memcheck", set_up + marked(crashed), 1, [], 1.0)
    assert [r.first_report[:40] for r in rows] == ["the child failed (exit 1): ========= ERR",
                                                  "did not run: the child stopped in case 0"]
    rows = sanitize.judge([CLUSTER, SPLIT], "memcheck", set_up + crashed, 1, [], 1.0)
    assert [(r.errors, r.first_report[:47]) for r in rows] == [
        (1, "did not run: the child stopped setting up case "), (1, "the child failed (exit 1): ========= ERROR SUMM")]


def test_compute_sanitizer_is_found_on_the_path_or_under_cuda_home(tmp_path: Path) -> None:
    tool = tmp_path / "cuda" / "bin" / "compute-sanitizer"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    empty = str(tmp_path / "nothing")
    assert sanitize.find_sanitizer({"PATH": str(tool.parent)}) == tool
    assert sanitize.find_sanitizer({"PATH": empty, "CUDA_HOME": str(tmp_path / "cuda")}) == tool
    with pytest.raises(sanitize.SanitizerError, match="not found on the PATH or CUDA_HOME="):
        sanitize.find_sanitizer({"PATH": empty, "CUDA_HOME": empty})
    with pytest.raises(sanitize.SanitizerError, match=r"CUDA_HOME is not set"):
        sanitize.find_sanitizer({"PATH": empty})


@pytest.mark.parametrize(("text", "message"), [
    ("- variant: cluster\n  tool: racecheck\n  match: x\n", "needs exactly variant, tool, match and reason"),
    ("- variant: cluster\n  tool: racecheck\n  match: x\n  reason: ' '\n", "each a non-empty text"),
    ("- variant: cluster\n  tool: leakcheck\n  match: x\n  reason: y\n", "tool must be one of"),
    ("variant: cluster\n", "a list of known hazards expected"),
    ("- [unclosed\n", "not valid YAML"),
])
def test_a_malformed_known_hazards_file_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "known.yaml"
    path.write_text(text)
    with pytest.raises(sanitize.SanitizerError, match=message):
        sanitize.load_known(path)


def test_the_matrix_covers_every_kind_of_call_input_and_variant() -> None:
    sets = ("continuous", "levels64", "equal", "adversarial")
    cases = sanitize.matrix({"scores": ("multi", "halve"), "topk": ("split", "cluster")}, sets)
    for variant in ("split", "cluster"):
        mine = [c for c in cases if c.variant == variant]
        assert {c.kind for c in mine} == {"decode", "prompt"}
        assert {c.score_set for c in mine} == set(sets)
        assert {c.ctx for c in mine} == {9002, 524288, 135176}
        assert {c.nq for c in mine if c.ctx == 524288} == {8, 4}  # the cluster's 8 and 16 CTAs a query
    for variant in ("multi", "halve"):
        mine = [c for c in cases if c.variant == variant]
        assert {c.ctx for c in mine} == {2102, 524288}
        assert {c.keys for c in mine} == {"synthetic", "adversarial"}
    quick = sanitize.matrix({"scores": ("halve",), "topk": ("split",)}, sets, quick=True)
    assert [(c.stage, c.kind, c.nq, c.score_set, c.keys) for c in quick] == [
        ("scores", "decode", 3, None, "synthetic"), ("topk", "decode", 1, "continuous", "synthetic")]


def test_a_child_is_told_the_runs_kernels_folder_and_checkouts_in_its_job(tmp_path: Path) -> None:
    """Not through the environment: the job the child is given names them, beside its cases."""
    case = sanitize.matrix({"topk": ("split",)}, ("continuous",), quick=True)[0]
    command = sanitize.child_command(Path("/cuda/bin/compute-sanitizer"), "racecheck", [case], tmp_path, ("pr=/strata",))
    assert command[:3] == ["/cuda/bin/compute-sanitizer", "--tool", "racecheck"]
    job = json.loads(command[-1])
    assert job["kernels"] == str(tmp_path) and job["engines"] == ["pr=/strata"]
    assert sanitize.SanitizeCase(**job["cases"][0]) == case


def test_memcheck_and_initcheck_call_each_case_twice_and_racecheck_and_synccheck_once(tmp_path: Path) -> None:
    """A second call must find the scratch the first left clean (memcheck, initcheck); a launch's shared-memory
    and barrier hazards are its own (racecheck, synccheck)."""
    case = sanitize.matrix({"topk": ("split",)}, ("continuous",), quick=True)[0]
    calls = {tool: json.loads(sanitize.child_command(Path("cs"), tool, [case], tmp_path)[-1])["calls"]
             for tool in sanitize.TOOLS}
    assert calls == {"memcheck": 2, "racecheck": 1, "synccheck": 1, "initcheck": 2}


@pytest.mark.parametrize("argv", [
    ["sanitize", "--tools", "memcheck,leakcheck"],
    ["sanitize", "--tools", ""],
    ["sanitize", "--jobs", "0"],
])
def test_bad_sanitize_arguments_are_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1, err


def test_a_missing_sanitizer_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    with pytest.raises(SystemExit) as info:
        main(["sanitize"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "compute-sanitizer not found" in err and len(err.strip().splitlines()) == 1


# ---- signals: the children ended, the record so far kept --------------------------------------------------

# A compute-sanitizer that records its pid and that of a grandchild it starts (the tool's target, in its
# process group), then prints a clean summary: at once for racecheck (the tool qsa starts first), after
# sleeping for the others, so that a run interrupted a few seconds in has finished rows and running children.
FAKE_SANITIZER = """#!{python}
import os, subprocess, sys, time
tool = sys.argv[sys.argv.index("--tool") + 1]
target = subprocess.Popen(["sleep", "120"])
with open(os.path.join({pids!r}, f"{{os.getpid()}}-{{target.pid}}"), "w"):
    pass
if tool != "racecheck":
    time.sleep(120)
target.kill()
print("========= COMPUTE-SANITIZER\\n{marker} 0\\ndone\\n========= ERROR SUMMARY: 0 errors", flush=True)
"""

# qsa sanitize with its session on the CPU backend (there is no device here) and three variants, as the H200
# runs them; what it runs under the sanitizer is the fake above
CPU_SANITIZE = """
import dataclasses, sys
import qsa_cli.__main__  # the signals held from here, as the qsa command holds them
import qsa_cli.runs.sanitizer as runs
import qsa_cli.session as session
opened = session.session
session.session = lambda settings, *a, **k: opened(dataclasses.replace(settings, backend="cpu"), *a, **k)
runs.sanitize_variants = lambda s: {"scores": ("multi", "halve"), "topk": ("wide",)}
from qsa_cli.cli import main
main(sys.argv[1:])
"""


def test_every_childs_rows_are_kept_as_it_ends_in_case_and_tool_order(tmp_path: Path) -> None:
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(f"#!{sys.executable}\nprint('{MARKER} 0\\n========= ERROR SUMMARY: 0 errors')\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    cases = sanitize.matrix({"scores": ("halve",), "topk": ("split", "wide")}, ("continuous", "levels64"))
    seen: list[list[tuple[str, str, str]]] = []
    sanitize.sanitize(cases, ("racecheck", "memcheck"), [], fake, tmp_path,
                      lambda rows: seen.append([(r.variant, r.key, r.tool) for r in rows]), jobs=3)
    every = [(c.variant, sanitize.SanitizerRun(c.stage, c.case(), c.variant, "", 0, 0, "", 0).key, tool)
             for c in cases for tool in ("racecheck", "memcheck")]
    assert [len(rows) for rows in seen] == list(range(1, len(every) + 1)) and seen[-1] == every
    assert all(rows == [row for row in every if row in rows] for rows in seen)  # in order at every step


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which a container's init may never reap, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _ended(pids: list[int], within_s: float = 10) -> bool:
    """Whether every process of ``pids`` has ended within ``within_s`` (a killed one takes a moment to go on a
    loaded machine)."""
    deadline = time.monotonic() + within_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(pid) for pid in pids)


# (signal, how many fake sanitizers have started when it is sent): at once (before the session opens, or as
# it does), with the first children running, and once a child has ended (two run at once: the third starts
# only then), so the run has rows to keep; each point is a state of the run, not a time, so a loaded machine
# meets the same points as an idle one
SIGNAL_POINTS = [(signal.SIGTERM, 0), (signal.SIGINT, 1), (signal.SIGTERM, 2), (signal.SIGINT, 3)]


def _fake_sanitizer(tmp_path: Path) -> tuple[Path, Path]:
    """FAKE_SANITIZER as compute-sanitizer in a folder of its own: (the folder its pids go to, that folder)."""
    pids, bin_dir = tmp_path / "pids", tmp_path / "bin"
    pids.mkdir()
    bin_dir.mkdir()
    fake = bin_dir / "compute-sanitizer"
    fake.write_text(FAKE_SANITIZER.format(python=sys.executable, pids=str(pids), marker=MARKER))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return pids, bin_dir


@pytest.mark.parametrize(("signum", "after"), SIGNAL_POINTS,
                         ids=[f"{signal.Signals(s).name}-{n}-started" for s, n in SIGNAL_POINTS])
def test_a_signal_ends_the_sanitizers_children_and_keeps_the_record_so_far(tmp_path: Path, signum: int,
                                                                           after: int) -> None:
    pids, bin_dir = _fake_sanitizer(tmp_path)
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen([sys.executable, "-c", CPU_SANITIZE, "sanitize", "--tools", "racecheck,memcheck",
                              "--jobs", "2", "--quiet", "--json", "run.json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while len(os.listdir(pids)) < after and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(os.listdir(pids)) >= after, f"{after} sanitizers never started (exit {child.poll()})"
    child.send_signal(signum)
    try:
        _, err = child.communicate(timeout=30)  # the grace of SIGTERM to each child, and far more
    except subprocess.TimeoutExpired:
        child.kill()
        pytest.fail("still running 30 s after the signal: it waited for the sanitizer's children")
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    started = [int(pid) for name in os.listdir(pids) for pid in name.split("-")]
    assert _ended(started), "a sanitizer or its target outlived the run"
    if child.returncode == -signum:  # before the interpreter ran qsa's first line (a loaded machine)
        return
    name = "" if signum == signal.SIGINT else " by SIGTERM"
    assert child.returncode == 128 + signum and len(lines) == 1, (child.returncode, lines)
    record = tmp_path / "run.json"
    if not record.exists():  # the signal came before the session opened
        assert lines == [f"qsa: interrupted{name}"] and not started
        return
    kept = load_record(record)
    assert kept.incomplete and kept.command == "sanitize"
    # only the children that ended by themselves: the racechecks, each clean; none of those the signal ended
    assert all(r.tool == "racecheck" and r.errors == 0 for r in kept.sanitizer), kept.sanitizer
    racechecks = len(sanitize.matrix({"scores": ("multi", "halve"), "topk": ("wide",)}, runs_sanitizer.SCORE_SETS))
    assert len(kept.sanitizer) <= racechecks  # one a case of CPU_SANITIZE's variants
    counted = f"{len(kept.sanitizer)} sanitizer run" + ("" if len(kept.sanitizer) == 1 else "s")
    so_far = counted if kept.sanitizer else "nothing measured yet"
    assert lines == [f"qsa: interrupted{name}: the record so far ({so_far}) is in run.json, marked incomplete"]
    if after >= 3:  # a racecheck has ended, its row kept
        assert kept.sanitizer and started


# ---- on a device ----------------------------------------------------------------------------------------

PLANTED = """
import sys, cupy
cupy.cuda.set_allocator(None)
n = 1000
kernel = cupy.RawKernel(r'''
extern "C" __global__ void write_one_past(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f;  // i == n: one element past the output
}''', "write_one_past")
out = cupy.zeros(n, dtype=cupy.float32)
print("%s 0", flush=True)
kernel(((n + 255) // 256,), (256,), (out, cupy.int32(n)))
cupy.cuda.Device().synchronize()
"""


@pytest.mark.gpu
def test_memcheck_finds_a_planted_write_one_past_the_output(cupy, tmp_path: Path) -> None:
    try:
        tool = sanitize.find_sanitizer()
    except sanitize.SanitizerError as missing:
        pytest.skip(str(missing))
    script = tmp_path / "planted.py"
    script.write_text(PLANTED % MARKER)
    output, code, seconds = sanitize.run_tool([str(tool), "--tool", "memcheck", sys.executable, str(script)],
                                              dict(os.environ))
    case = sanitize.SanitizeCase("scores", 1000, 1, 1000, variant="planted")
    (row,) = sanitize.judge([case], "memcheck", output, code, [], seconds)
    assert row.errors >= 1 and not row.passed, output
    assert "Invalid __global__ write of size 4 bytes" in row.first_report and "write_one_past" in row.first_report


@pytest.mark.gpu
@pytest.mark.slow  # minutes: a child per (variant, case, tool)
def test_qsa_sanitize_reports_nothing_over_every_variant(cupy, tmp_path: Path) -> None:
    """The whole matrix: every variant this device runs, every case, the four tools: 0 errors, 0 hazards."""
    try:
        sanitize.find_sanitizer()
    except sanitize.SanitizerError as missing:
        pytest.skip(str(missing))
    record = tmp_path / "sanitize.json"
    done = subprocess.run([sys.executable, "-m", "qsa_cli", "sanitize", "--json", str(record)],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]

    rows = load_record(record).sanitizer
    assert rows and all(r.errors == 0 for r in rows)
    assert {r.tool for r in rows} == set(sanitize.TOOLS)


# a sanitizer whose children meet: each waits until ``count`` of them have started, so that every one ends
# with a summary only when that many ran at once (one that waited alone prints none and fails its case)
MEETING_SANITIZER = """#!{python}
import os, time
from pathlib import Path
here = Path({folder!r})
(here / str(os.getpid())).touch()
deadline = time.monotonic() + 20
while len(list(here.iterdir())) < {count} and time.monotonic() < deadline:
    time.sleep(0.02)
if len(list(here.iterdir())) >= {count}:
    print("{marker} 0\\n========= ERROR SUMMARY: 0 errors")
"""


def test_jobs_children_run_at_once(tmp_path: Path) -> None:
    met = tmp_path / "met"
    met.mkdir()
    cases = sanitize.matrix({"scores": ("multi", "halve"), "topk": ("wide", "split")}, ("continuous",), quick=True)
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(MEETING_SANITIZER.format(python=sys.executable, folder=str(met), count=len(cases), marker=MARKER))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    kept: list[sanitize.SanitizerRun] = []
    sanitize.sanitize(cases, ("memcheck",), [], fake, tmp_path, lambda rows: kept.__setitem__(slice(None), rows),
                      jobs=len(cases))
    assert len(kept) == len(cases) == 4 and all(r.passed for r in kept), [r.first_report for r in kept]


# a sanitizer that runs its job's cases as the child does (a marker before each), noting each start (its tool
# and its cases' variants); under memcheck the halving scorer writes past its output and its child crashes
GROUPING_SANITIZER = """#!{python}
import json, os, sys
tool = sys.argv[sys.argv.index("--tool") + 1]
variants = [case["variant"] for case in json.loads(sys.argv[-1])["cases"]]
with open(os.path.join({folder!r}, str(os.getpid())), "w") as noted:
    noted.write(tool + " " + ",".join(variants))
for i, variant in enumerate(variants):
    print("{marker}", i)
    if tool == "memcheck" and variant == "halve":
        print("========= Invalid __global__ write of size 4 bytes")
        print("=========     at block_scores_halve_kernel+0x10 in scores.cu:100")
        print("Traceback (most recent call last):")
        print("========= ERROR SUMMARY: 1 error")
        sys.exit(1)
print("========= ERROR SUMMARY: 0 errors")
"""


def test_grouped_a_stages_cases_share_a_child_per_tool_and_a_report_is_its_own_cases(tmp_path: Path) -> None:
    """The quick matrix's cases of a stage run in one child per tool; one that reports anything is run again
    case by case, so the report (and the crash after it) is the halving scorer's alone, as in children of
    their own, and the cases after it in that child are run and clean."""
    started = tmp_path / "started"
    started.mkdir()
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(GROUPING_SANITIZER.format(python=sys.executable, folder=str(started), marker=MARKER))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    cases = sanitize.matrix({"scores": ("multi", "halve", "paired"), "topk": ("wide", "split")}, ("continuous",),
                            quick=True)
    tools = ("memcheck", "racecheck")
    kept: list[sanitize.SanitizerRun] = []
    sanitize.sanitize(cases, tools, [], fake, tmp_path, lambda rows: kept.__setitem__(slice(None), rows), jobs=2,
                      grouped=True)
    assert [(r.variant, r.tool) for r in kept] == [(c.variant, t) for c in cases for t in tools]
    assert [(r.variant, r.tool) for r in kept if not r.passed] == [("halve", "memcheck")]
    bad = next(r for r in kept if not r.passed)
    assert bad.errors == 1 and bad.first_report.startswith("Invalid __global__ write of size 4 bytes")
    runs = sorted(path.read_text() for path in started.iterdir())
    assert runs == sorted(["memcheck multi,halve,paired", "memcheck multi", "memcheck halve", "memcheck paired",
                           "racecheck multi,halve,paired", "memcheck wide,split", "racecheck wide,split"])


@pytest.mark.parametrize(("cores", "jobs"), [(1, 1), (3, 3), (16, 16), (128, sanitize.MAX_DEFAULT_JOBS)])
def test_the_default_jobs_are_one_a_core_bounded(monkeypatch: pytest.MonkeyPatch, cores: int, jobs: int) -> None:
    monkeypatch.setattr(sanitize, "usable_cores", lambda: cores)
    assert sanitize.default_jobs() == jobs


def test_selftests_sanitizer_started_beside_the_checks_ends_its_children_when_left_early(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """qsa selftest's compute-sanitizer row runs in a thread from the start; a selftest that stops (an
    interruption, an error) before waiting for the row ends the children at once."""
    pids, bin_dir = _fake_sanitizer(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(runs_sanitizer, "sanitize_variants", lambda s: {"scores": ("multi",), "topk": ("wide",)})
    t0 = time.monotonic()
    with session.session(session.Settings(backend="cpu"), "selftest", []) as s:
        with pytest.raises(RuntimeError, match="a check failed"):
            with selftest_run._SanitizerRow(s) as children:
                children.release()
                while len(os.listdir(pids)) < 4:  # the racechecks have ended, the memchecks (two minutes) started
                    time.sleep(0.05)
                raise RuntimeError("a check failed")
    assert time.monotonic() - t0 < 30
    started = [int(pid) for name in os.listdir(pids) for pid in name.split("-")]
    assert started and _ended(started)
    assert {r.tool for r in s.record.sanitizer} <= {"racecheck"}  # a child the run ended says nothing of its case


# a sanitizer that notes its start, then, as the child does, waits for its standard input to close before it
# runs anything, and says whether the parent had said by then that the children were released
HELD_SANITIZER = """#!{python}
import os, sys
open(os.path.join({folder!r}, str(os.getpid())), "w").close()
sys.stdin.read()
print("{marker} 0")
if not os.path.exists({released!r}):
    print("========= Ran before its release")
print("========= ERROR SUMMARY: %d errors" % (not os.path.exists({released!r})))
"""


def test_selftests_sanitizer_children_start_at_once_and_run_only_once_released(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """qsa selftest's children start with the selftest (the tool, python and the cases' set-up beside the
    timers' check) and launch nothing until the check is done and they are released."""
    started, released = tmp_path / "started", tmp_path / "released"
    started.mkdir()
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(HELD_SANITIZER.format(python=sys.executable, folder=str(started), released=str(released),
                                          marker=MARKER))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(runs_sanitizer, "sanitize_variants", lambda s: {"scores": ("multi",), "topk": ("wide",)})
    monkeypatch.setattr(sanitize, "usable_cores", lambda: 4)  # the four children (two stages, two tools) at once
    with session.session(session.Settings(backend="cpu"), "selftest", []) as s:
        with selftest_run._SanitizerRow(s) as children:
            while len(os.listdir(started)) < 4:  # every child started, none released
                time.sleep(0.05)
            released.touch()
            children.release()
            done = children.row()
    assert (done.cases, done.passed) == (4, True), done.detail


def test_a_child_runs_once_its_parent_closes_its_input_or_the_hold_ends() -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(read_end) as parent:
        os.write(write_end, b"not yet\n")
        done = threading.Thread(target=sanitize_child.held, args=(parent,))
        done.start()
        done.join(0.2)
        assert done.is_alive()  # the parent has said something, and not closed it
        os.close(write_end)
        done.join(30)
        assert not done.is_alive()
    read_end, write_end = os.pipe()
    with os.fdopen(read_end) as parent:
        sanitize_child.held(parent, limit_s=0.05)  # never closed: the hold ends on its own
    os.close(write_end)


def test_selftests_sanitizer_row_holds_every_childs_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every variant's rows under both tools, from a child per stage and tool."""
    started = tmp_path / "started"
    started.mkdir()
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(GROUPING_SANITIZER.format(python=sys.executable, folder=str(started), marker=MARKER))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(runs_sanitizer, "sanitize_variants", lambda s: {"scores": ("multi", "paired"), "topk": ("wide",)})
    with session.session(session.Settings(backend="cpu"), "selftest", []) as s:
        with selftest_run._SanitizerRow(s) as children:
            done = children.row()
    assert (done.cases, done.passed, len(s.record.sanitizer)) == (6, True, 6)  # 3 variants, memcheck and racecheck
    assert [(r.variant, r.tool) for r in s.record.sanitizer] == [
        (v, t) for v in ("multi", "paired", "wide") for t in selftest_run.SELFTEST_SANITIZERS]
    assert sorted(path.read_text() for path in started.iterdir()) == sorted(
        f"{t} {variants}" for t in selftest_run.SELFTEST_SANITIZERS for variants in ("multi,paired", "wide"))
