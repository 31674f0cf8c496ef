"""A run's independent CPU work (synthetic inputs, the CPU oracle, the CPU models) over every core: worker
processes, results handed back in the order the work was given, so that a run's record is the same
whichever worker finished first.

The workers are started fresh (``spawn``): the parent may hold a CUDA context, which a forked child must
never touch, and the workers need no GPU. They ignore Ctrl-C (a terminal sends it to the whole process
group; the parent alone handles it, qsa_cli/interrupts.py) and are ended, with whatever they were doing,
when the parent leaves ``in_order`` early (an interruption, an error).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..core.cores import usable_cores
from ..interrupts import signals_held

AHEAD_PER_WORKER = 2  # results made ahead of the parent, a worker: bounds the memory results wait in


def worker_count() -> int:
    """Worker processes a run's CPU work is spread over: one a core this process may run on."""
    return usable_cores()


def _start_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # qsa_cli.__main__ blocks both signals from its first line, and a spawned worker runs it again: the
    # SIGTERM that ends the pool must reach the worker
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


Task = tuple[Callable[..., Any], tuple[Any, ...]]  # a module-level function (a worker imports it by name), its arguments


def _run(function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return function(*args)


def _ordered(pool: Any, tasks: Sequence[Task], ahead: int) -> Iterator[Any]:
    pending: deque[Any] = deque()
    given = 0
    for _ in range(len(tasks)):
        while given < len(tasks) and len(pending) < ahead:
            pending.append(pool.apply_async(_run, tasks[given]))
            given += 1
        yield pending.popleft().get()


@contextlib.contextmanager
def in_order(tasks: Sequence[Task], workers: int | None = None) -> Iterator[Iterator[Any]]:
    """Each task's ``function(*args)``, made by ``workers`` processes (default: every core; with one, or one
    task, in this process as it is taken), yielded in the tasks' order; an exception a task raises is
    raised here, at its turn."""
    workers = min(worker_count() if workers is None else workers, len(tasks))
    if workers <= 1:
        yield (_run(*task) for task in tasks)
        return
    pool = None
    ended = False
    try:
        # signals held while the workers start: an interruption raised between a worker's start and the
        # parent's write of its start-up data would leave it reading an empty pipe (EOFError's traceback on
        # stderr); one that comes meanwhile is raised as the block ends, inside this try, so the pool is ended
        with signals_held():
            pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_start_worker)
        yield _ordered(pool, tasks, AHEAD_PER_WORKER * workers)
        ended = True
    finally:
        if pool is not None:
            # a block that ended lets the workers finish what they hold and leave at their sentinels; terminate()
            # there would first wait for the lock an idle worker holds while it waits for work (seconds, as its
            # pipe is polled). Left early (an interruption, an error), tasks not taken yet are not waited for.
            if ended:
                pool.close()
            else:
                pool.terminate()
            pool.join()
