"""Child processes, each in a process group of its own, so that ending the run ends them with whatever they
started: a CI runner's SIGTERM goes to qsa alone, and a Ctrl-C at a terminal reaches qsa alone too, which then
ends its children (SIGTERM, then SIGKILL after END_GRACE_S) rather than run on, or wait, for them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping

END_GRACE_S = 5  # a child's group ended by SIGTERM gets this long before SIGKILL


def start_in_group(command: list[str], env: Mapping[str, str], stdin: int | None = None) -> subprocess.Popen[str]:
    """``command`` started in a process group of its own, its stdout and stderr one stream (in the order
    written); ``stdin``: its standard input (default: this process's)."""
    return subprocess.Popen(command, env=dict(env), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def _signal_group(child: subprocess.Popen[str], signum: int) -> None:
    try:
        os.killpg(child.pid, signum)
    except ProcessLookupError:  # the whole group is gone already
        pass


def end_groups(children: list[subprocess.Popen[str]]) -> None:
    """SIGTERM to each child's process group, then, after at most END_GRACE_S for them all to end, SIGKILL to
    what is left of each group (a process that outlived its group's leader, too); each child waited for."""
    for child in children:
        _signal_group(child, signal.SIGTERM)
    deadline = time.monotonic() + END_GRACE_S
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        _signal_group(child, signal.SIGKILL)
        child.wait()


def waited(child: subprocess.Popen[str], timeout: float) -> tuple[str, int | None]:
    """``child``'s whole output and exit status once it ends; None for the status where it ran past ``timeout``
    seconds (its group ended then). Whatever else ends the wait (an interruption, an error) ends its group
    first."""
    try:
        output, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        end_groups([child])
        return child.communicate()[0] or "", None
    except BaseException:
        end_groups([child])
        raise
    return output, child.returncode
