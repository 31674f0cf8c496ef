"""Ctrl-C and SIGTERM: one line, the record so far marked incomplete, exit status 130 or 143, and no hang,
wherever the signal lands (while the command line loads, before the session opens, in numpy's C code,
in a selftest); an interruption that numpy's C code swallows is raised again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_clocks import RESET_GPU, RESET_MEM, SET_GPU, SET_MEM, monitor

from qsa_cli.clocks import lock_clocks
from qsa_cli import interrupts
from qsa_cli.interrupts import Interrupted, exit_status, interruptions, signal_of, signals_held

ROOT = Path(__file__).resolve().parent.parent
ENDS_WITHIN_S = 20  # far beyond any run's unwinding: past it, the command hung
# the resends' period in the tests that wait for resends (interrupts.RESEND_S: 1 s), so that they wait about
# 3 s, not 6; still far beyond the 10 ms of _wait's steps
RESEND_S = 0.5


@pytest.fixture
def resent_often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interrupts, "RESEND_S", RESEND_S)


def _wait(seconds: float) -> None:
    """Python code running for ``seconds`` (a sleep in C would hold off a resent interrupt until it ends)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


def test_an_interrupt_that_is_swallowed_is_raised_again_until_it_is_taken(resent_often: None) -> None:
    with interruptions() as release:
        release()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        except KeyboardInterrupt:
            pass  # what numpy's C code does with one, clearing the error
        t0 = time.monotonic()
        with pytest.raises(Interrupted) as again:
            _wait(3 * RESEND_S)
        assert time.monotonic() - t0 < 2 * RESEND_S
        assert signal_of(again.value) == signal.SIGTERM and exit_status(signal.SIGTERM) == 143
        _wait(2.5 * RESEND_S)  # taken: no resend comes


def test_no_second_interrupt_cuts_the_handling_of_the_first_short(resent_often: None) -> None:
    with interruptions() as release:
        release()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt as stop:
            _wait(2.5 * RESEND_S)  # writing the record: resends see it handled and do nothing
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C meanwhile changes nothing either
            assert signal_of(stop) == signal.SIGINT


def test_a_signal_within_a_held_block_arrives_as_it_ends() -> None:
    """Held back by the handlers, not the mask: a signal sent in the block (as another thread's delivery or a
    resend would bring it) interrupts nothing inside it, and arrives at the block's end."""
    with interruptions() as release:
        release()
        reached_the_end = False
        with pytest.raises(Interrupted) as stopped:
            with signals_held():
                signal.raise_signal(signal.SIGTERM)
                time.sleep(0.05)
                reached_the_end = True
        assert reached_the_end and signal_of(stopped.value) == signal.SIGTERM


def test_the_handlers_and_the_signal_mask_are_put_back() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    with interruptions():
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
    assert {s: signal.getsignal(s) for s in before} == before
    assert signal.pthread_sigmask(signal.SIG_BLOCK, ()) == mask


def test_sigterm_while_the_clocks_are_locked_restores_them_then_interrupts() -> None:
    """The clocks' own handler goes to the one set before (main()'s), so the record is still kept."""
    fake, m = monitor()
    with interruptions() as release:
        release()
        with pytest.raises(Interrupted) as stopped:
            with lock_clocks(m, 1650, 3201):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)
        assert signal_of(stopped.value) == signal.SIGTERM
    assert fake.lock_calls() == [SET_GPU, SET_MEM, RESET_MEM, RESET_GPU]


def _qsa(args: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "qsa_cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)


def _ended(child: subprocess.Popen[str]) -> tuple[int, str]:
    """The command's exit status and stderr, once it has ended."""
    try:
        _, err = child.communicate(timeout=ENDS_WITHIN_S)
    except subprocess.TimeoutExpired:
        child.kill()
        pytest.fail(f"still running {ENDS_WITHIN_S} s after the signal")
    return child.returncode, err


def _lines(err: str) -> list[str]:
    """What qsa said, which is never a traceback."""
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.strip()]


def _before_qsa(signum: int, code: int, err: str) -> bool:
    """Whether the signal ended the command before qsa_cli.__main__'s first line held it (a loaded machine can
    take a tenth of a second to start the interpreter): by its default action, silently, or, for SIGINT, by
    the interpreter's own handler, whose KeyboardInterrupt stops its start-up (exit status -2, or 1 where it
    stopped runpy's import) with a traceback of the interpreter's start-up alone. A frame of qsa's own is
    never this: its first line had run."""
    if "qsa_cli" in err:
        return False
    if not err:
        return code == -signum
    return signum == signal.SIGINT and code in (-signal.SIGINT, 1) and err.rstrip().endswith("KeyboardInterrupt")


# (signal, seconds after the start): before the session opens, as numpy makes the inputs (where it once
# swallowed the interrupt and the run went on for minutes), and well into the run
POINTS = [(signal.SIGINT, 0.1), (signal.SIGTERM, 0.2), (signal.SIGINT, 0.35), (signal.SIGTERM, 0.5),
          (signal.SIGTERM, 1.0), (signal.SIGINT, 2.5)]


@pytest.mark.parametrize(("signum", "after"), POINTS, ids=[f"{signal.Signals(s).name}-{t}s" for s, t in POINTS])
def test_a_signal_at_any_point_of_a_run_is_one_line_its_exit_status_and_the_record_so_far(tmp_path, signum, after):
    child = _qsa(["topk-parity", "--selftest", "--backend", "cpu", "--quiet", "--json", "run.json"], tmp_path)
    time.sleep(after)
    child.send_signal(signum)
    code, err = _ended(child)
    record = tmp_path / "run.json"
    if _before_qsa(signum, code, err):
        assert not record.exists()
        return
    lines = _lines(err)
    name = "" if signum == signal.SIGINT else " by SIGTERM"
    assert code == 128 + signum and len(lines) == 1, lines
    if not record.exists():  # the signal came before the session opened: nothing was recorded
        assert lines == [f"qsa: interrupted{name}"]
        return
    data = json.loads(record.read_text())
    assert data["incomplete"] is True and data["measurements"] == []
    parity = len(data["parity"])
    so_far = f"{parity} parity check{'' if parity == 1 else 's'}" if parity else "nothing measured yet"
    assert lines == [f"qsa: interrupted{name}: the record so far ({so_far}) is in run.json, marked incomplete"]


def test_a_signal_while_the_command_line_loads_waits_for_main(tmp_path) -> None:
    """Held from qsa_cli.__main__'s first line (what the qsa script imports): here it is sent after the command
    line has loaded, before main() runs."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = ("import os, signal\nfrom qsa_cli.__main__ import main\nos.kill(os.getpid(), signal.SIGTERM)\n"
            "main(['select-bench', '100', '2', '1', '100', '--backend', 'cpu', '--json', 'run.json'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=ENDS_WITHIN_S)
    assert (done.returncode, done.stdout, done.stderr.strip()) == (143, "", "qsa: interrupted by SIGTERM")
    assert list(tmp_path.iterdir()) == []


# qsa selftest, with a SIGTERM sent to itself once its first check is done, as the next begins: a state of the
# run, not a time, so a loaded machine and an idle one stop at the same point
SELFTEST_STOPPED_AFTER_ITS_FIRST_CHECK = """
import os, signal, sys
from qsa_cli.__main__ import main
from qsa_cli.runs import selftest
models_rows = selftest._models_rows

def stopped(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    return models_rows(*args, **kwargs)

selftest._models_rows = stopped
main(sys.argv[1:])
"""


def test_selftest_keeps_its_record_and_its_checks_so_far(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", SELFTEST_STOPPED_AFTER_ITS_FIRST_CHECK, "selftest", "--quiet",
                              "--json", "selftest.json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, cwd=tmp_path)
    code, err = _ended(child)
    lines = _lines(err)
    data = json.loads((tmp_path / "selftest.json").read_text())
    assert code == 143 and data["incomplete"] is True and data["command"] == "selftest"
    assert [c["check"] for c in data["checks"]] == ["constants: kernels/qsa_common.cuh == geometry"]
    assert data["parity"] == []  # the models' checks had not begun
    assert lines == ["qsa: interrupted by SIGTERM: the record so far (1 selftest check) is in selftest.json, "
                     "marked incomplete"]
