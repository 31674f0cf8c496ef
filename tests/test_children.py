"""Child processes in process groups of their own (qsa_cli/core/children.py): a child that runs past its
timeout, or whose wait an interruption ends, is ended with its whole group (a grandchild it started too), never
left running nor waited for."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from test_sanitize import _ended

from qsa_cli.core.children import start_in_group, waited

# a child that starts a grandchild in its group, writes both pids, then sleeps far past any test
SLEEPER = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(f"{os.getpid()} {grandchild.pid}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
print("started", flush=True)
time.sleep(600)
"""


def _pids_once_written(path: Path) -> list[int]:
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return [int(pid) for pid in path.read_text().split()]


def test_a_child_past_its_timeout_is_ended_with_its_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    child = start_in_group([sys.executable, "-c", SLEEPER, str(pids)], {})
    output, code = waited(child, timeout=0.5)  # whether or not it wrote its pids yet: it runs past 0.5 s
    assert code is None and child.returncode is not None
    if pids.exists():  # it had started its grandchild: that one is gone too
        assert "started" in output and _ended(_pids_once_written(pids))


def test_an_interruption_of_the_wait_ends_the_child_and_its_group(tmp_path: Path) -> None:
    # Ctrl-C raises KeyboardInterrupt here whatever this process was given: a suite started in the background by
    # a shell (`... &`, as a CI script may) inherits SIGINT ignored, Python then installs no handler, and the
    # signal ignored would leave the wait below to its timeout (seen: a suite that hung here)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_the_wait(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_the_wait(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    child = start_in_group([sys.executable, "-c", SLEEPER, str(pids)], {})
    started: list[int] = []

    def interrupt_once_started() -> None:
        started.extend(_pids_once_written(pids))
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # Ctrl-C, in the main thread's wait

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        waited(child, timeout=600)
    assert child.returncode is not None and _ended(started)


def test_a_child_that_ends_gives_its_output_and_status() -> None:
    child = start_in_group([sys.executable, "-c", "import sys; print('out', flush=True); "
                                                  "print('err', file=sys.stderr); sys.exit(3)"], {})
    output, code = waited(child, timeout=600)
    assert code == 3 and output.split() == ["out", "err"]
