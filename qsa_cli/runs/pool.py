"""A run's independent CPU work (synthetic inputs, the CPU oracle, the CPU models) over every core: worker
processes, results handed back in the order the work was given, so that a run's record is the same
whichever worker finished first.

The workers are forked from a server process started fresh (``forkserver``), never from the parent: the parent
may hold a CUDA context, which a forked child must never touch, and the workers need no GPU. The server, started
with a process's first workers and kept for its later ones, imports the modules qsa's tasks live in (PRELOADED)
once, so a worker starts in milliseconds instead of importing numpy and qsa (0.3-0.5 s of CPU each, as a
spawned one does; where there is no forkserver they are spawned). They are started, and given their first
tasks, by a thread of their own: the first start waits for the server's imports, while the parent goes on with
its own work (a GPU selftest opens its session and runs its first checks meanwhile, as the workers make its
first cases). They ignore Ctrl-C and SIGTERM (a terminal or a CI runner may send them to the whole process
group; the parent alone handles them, qsa_cli/interrupts.py) and are killed, with whatever they were doing,
when the parent leaves ``in_order`` early (an interruption, an error).

Each worker has a pipe of its own, which only this process's main thread reads. multiprocessing.Pool is not
used: its terminate() could wait forever for a lock that a worker held while it wrote a result larger than a
pipe holds after the thread that read them had stopped (a Ctrl-C of a selftest once hung so), and a worker
that died left its task unanswered for ever. Here a worker that ends before its results are in is an error at
its task's turn. An answer's pickle goes through the pipe without its arrays' data (protocol 5's out-of-band
buffers): the worker writes that data to a file in memory (/dev/shm, in a folder of the run's that is removed
with whatever is left in it), which the parent maps and deletes, its arrays then the file's pages. The score
sets of a selftest are over a GB: read from a pipe into arrays of the parent's, they cost its main thread
0.5 s of copies and page clearing, which the workers now spend, side by side. Where the file cannot be written
(a container's /dev/shm is often 64 MB), the data follows the pickle through the pipe.
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing
import os
import pickle
import shutil
import signal
import tempfile
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

import numpy as np

from ..core.cores import usable_cores
from ..interrupts import SIGNALS

AHEAD_PER_WORKER = 4  # tasks given ahead of the parent, a worker: bounds the memory results wait in (4: the
# GPU topk-parity --selftest's prompt sets, slow to make and late in its order, start while its decode calls run)
QUEUED_PER_WORKER = 2  # tasks a worker holds at once: the one it runs and the next, so it never waits for the parent

Task = tuple[Callable[..., Any], tuple[Any, ...]]  # a module-level function (a worker imports it by name), its arguments

# the modules of the functions qsa gives its workers (the selftests' tasks): the workers' server imports them
PRELOADED = ("qsa_cli.runs.made",)


def worker_count() -> int:
    """Worker processes a run's CPU work is spread over: one a core this process may run on."""
    return usable_cores()


class WorkerError(RuntimeError):
    """A worker process ended before it handed back the results of the tasks it held."""


class WorkerTraceback(Exception):
    """Where a task failed in its worker: that process's traceback, the cause of the task's exception here."""


@dataclass
class _Failed:
    """A task's exception, with its traceback in the worker (a traceback itself does not pickle)."""

    error: BaseException
    trace: str


def _run(function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return function(*args)


def _pickled(answer: tuple[bool, Any]) -> tuple[bytes, list[memoryview]]:
    """An answer as pickle's protocol 5 writes it: the pickle, less the data of its contiguous arrays (a call's
    score sets: hundreds of MB a selftest), which stay where they are, to be written to the pipe as they are."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(answer, protocol=5, buffer_callback=buffers.append)
    return head, [b.raw() for b in buffers]


def _write(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]


def _read(fd: int, size: int) -> np.ndarray:
    """``size`` bytes of the pipe, read straight into the array they are kept in."""
    data = np.empty(size, dtype=np.uint8)
    view, got = memoryview(data), 0
    while got < size:
        n = os.readv(fd, [view[got:]])
        if n == 0:
            raise EOFError
        got += n
    return data


SPILL_ALIGN = 64  # where each array's data starts in the file an answer leaves it in: a multiple of this
SHARED_MEMORY = "/dev/shm"  # where that file is kept: memory (else the temporary folder's page cache)


def _padded(size: int) -> int:
    """The bytes a piece of ``size`` takes in that file: up to the next piece's start."""
    return size + -size % SPILL_ALIGN


def _spilled(data: list[memoryview], folder: str) -> str | None:
    """The path of a new file in ``folder`` that holds ``data``, each piece at a multiple of SPILL_ALIGN; None
    where there is no data, or where it cannot be written (a full folder: none is left behind)."""
    if not any(d.nbytes for d in data):
        return None
    try:
        fd, path = tempfile.mkstemp(dir=folder)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as file:
            for d in data:
                file.write(d)
                file.write(bytes(_padded(d.nbytes) - d.nbytes))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    return path


# the file's pages mapped at once, not a fault at a time as an array's first read reaches each (a score set's
# 16,000 faults took 10 times as long as the one call: the main thread's copies to the device read them all)
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux's


def _mapped(path: str, sizes: list[int]) -> list[memoryview]:
    """The data a worker left in the file ``path`` (``_spilled``), mapped, not copied; the file is deleted, its
    pages kept for as long as an array is made of them."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.unlink(path)
        whole = memoryview(mmap.mmap(fd, sum(_padded(size) for size in sizes), flags=mmap.MAP_SHARED | _POPULATE))
    finally:
        os.close(fd)
    pieces, at = [], 0
    for size in sizes:
        pieces.append(whole[at:at + size])
        at += _padded(size)
    return pieces


def _serve(conn: Connection, folder: str) -> None:
    """A worker: each task the parent sends, its result (or its exception) sent back, until None or the end of
    the pipe. An answer is its pickle, the file in ``folder`` its arrays' data was left in, and the sizes of
    that data; without a file, the data follows through the pipe, unframed."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the parent has gone
            return
        if task is None:
            return
        try:
            head, data = _pickled((True, _run(*task)))
        except Exception as error:  # the task's, or its result's pickling (pickled first: nothing was sent)
            head, data = _pickled((False, _Failed(error, traceback.format_exc())))
        path = _spilled(data, folder)
        try:
            conn.send((head, path, [d.nbytes for d in data]))
            if path is None:
                for d in data:
                    _write(conn.fileno(), d)
        except OSError:  # the parent has gone
            return


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection  # the parent's end of the worker's pipe
    held: deque[int] = field(default_factory=deque)  # the tasks sent and not answered yet, in the order sent

    def receive(self) -> tuple[int, tuple[bool, Any]]:
        """The answer to the first task held: (its index, (whether it returned, its result or _Failed))."""
        try:
            head, path, sizes = self.conn.recv()
            data = _mapped(path, sizes) if path else [_read(self.conn.fileno(), size) for size in sizes]
        except (EOFError, ConnectionResetError):  # its end of the pipe closed, as it died
            self.process.join()
            raise WorkerError(f"a worker process ended (exit status {self.process.exitcode}) before the result "
                              f"of task {self.held[0]} came back") from None
        return self.held.popleft(), pickle.loads(head, buffers=data)


def _start(context: Any, folder: str) -> _Worker:
    ours, theirs = context.Pipe()
    process = context.Process(target=_serve, args=(theirs, folder), name="qsa-pool-worker", daemon=True)
    try:
        process.start()
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()  # the worker's end is its own: a worker that dies is then the end of this pipe
    return _Worker(process, ours)


def _context() -> Any:
    """Where the workers are started: the forkserver, which imports PRELOADED, else spawned."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOADED))
    return context


class _Giving:
    """Which worker is given which task, and when. The tasks of ``first`` are given before the others, each to a
    worker of its own that takes no other task until it has answered (nothing waits behind it); the rest in
    order, each to the worker that holds fewest (one that ran short tasks takes more), while fewer than
    ``ahead`` tasks are given and not yet yielded, or while the task whose turn it is has not been given."""

    def __init__(self, tasks: Sequence[Task], ahead: int, first: Sequence[int]) -> None:
        self.tasks = tasks
        self.ahead = ahead
        self.alone = frozenset(first)
        self.order = [*first, *(i for i in range(len(tasks)) if i not in self.alone)]
        self.place = {task: i for i, task in enumerate(self.order)}
        self.given = 0

    def give(self, workers: list[_Worker], turn: int) -> None:
        """The tasks due to ``workers`` when the task of index ``turn`` is the next to be yielded."""
        while self.given < len(self.order) and (self.given - turn < self.ahead or self.given <= self.place[turn]):
            task = self.order[self.given]
            open_to = [w for w in workers if not self.alone.intersection(w.held)]
            # none while each worker started so far holds a task of ``first``
            worker = min(open_to, key=lambda w: len(w.held), default=None)
            if worker is None or len(worker.held) >= (1 if task in self.alone else QUEUED_PER_WORKER):
                return
            worker.conn.send(self.tasks[task])
            worker.held.append(task)
            self.given += 1


class _Starter(threading.Thread):
    """The workers of one ``in_order``, started in this thread, not the parent's main thread, and each given its
    first tasks as it starts: the first start waits for the server's imports (0.4 s and more), which the parent
    spends on its own work (a selftest opens its device's session), and the workers are busy before the parent
    asks for a result. No signal reaches this thread (Python runs handlers in the main thread alone), so no
    start is cut between its fork and the write of its start-up data, which would leave the worker reading an
    empty pipe. The main thread gives no task before this thread has ended (``workers``)."""

    def __init__(self, count: int, folder: str, giving: _Giving) -> None:
        super().__init__(name="qsa-pool-starter", daemon=True)
        self.count = count
        self.folder = folder  # where the workers leave their answers' data
        self.giving = giving
        self.started: list[_Worker] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            context = _context()
            for _ in range(self.count):
                self.started.append(_start(context, self.folder))
                self.giving.give(self.started, 0)
        except BaseException as error:  # raised in the main thread, at the first task's turn
            self.error = error

    def workers(self) -> list[_Worker]:
        """Every worker, once all have started; the error that stopped a start."""
        self.join()
        if self.error is not None:
            raise self.error
        return self.started


def _ordered(starter: _Starter) -> Iterator[Any]:
    """Each task's result in the tasks' order, the tasks given as ``starter.giving`` says."""
    workers = starter.workers()
    giving = starter.giving
    made: dict[int, tuple[bool, Any]] = {}
    for turn in range(len(giving.tasks)):
        while turn not in made:
            giving.give(workers, turn)
            ready = wait([w.conn for w in workers if w.held])
            for worker in workers:
                if worker.conn in ready:
                    index, answer = worker.receive()
                    made[index] = answer
        returned, result = made.pop(turn)
        if not returned:
            raise result.error from WorkerTraceback(result.trace)
        yield result


@contextlib.contextmanager
def in_order(tasks: Sequence[Task], workers: int | None = None, first: Sequence[int] = ()) -> Iterator[Iterator[Any]]:
    """Each task's ``function(*args)``, made by ``workers`` processes (default: every core; with one, or one
    task, in this process as it is taken), yielded in the tasks' order; an exception a task raises is
    raised here, at its turn. ``first``: the indices of the tasks that take longest, longest first: as many of
    them as half the workers start at once, each in a worker of its own, the other half making the rest in
    order, so that a long task late in the order does not start late and end the run long after the others.
    The workers start, and are given their first tasks, in a thread of their own as soon as this is entered."""
    workers = min(worker_count() if workers is None else workers, len(tasks))
    if workers <= 1:
        yield (_run(*task) for task in tasks)
        return
    folder = tempfile.mkdtemp(prefix="qsa-pool-", dir=SHARED_MEMORY if os.path.isdir(SHARED_MEMORY) else None)
    starter = _Starter(workers, folder, _Giving(tasks, AHEAD_PER_WORKER * workers, first[:workers // 2]))
    ended = False
    try:
        starter.start()
        yield _ordered(starter)
        ended = True
    finally:
        if starter.ident is not None:  # started (a thread that could not start leaves its own error to rise)
            starter.join()  # every start done: none is left to the exit
        for worker in starter.started:
            if ended and not worker.held:
                with contextlib.suppress(OSError):  # one that has gone needs no word to leave
                    worker.conn.send(None)
            else:  # killed, not asked: it may be busy for seconds, or blocked writing a result nobody reads
                worker.process.kill()
        for worker in starter.started:
            worker.process.join()
            worker.conn.close()
        shutil.rmtree(folder, ignore_errors=True)  # the answers not taken
