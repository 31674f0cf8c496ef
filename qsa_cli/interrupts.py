"""Ctrl-C and SIGTERM (what a CI runner sends on cancel or timeout) end a command the same way: as an
Interrupted raised in the main thread, which the command turns into the record so far (marked incomplete),
one line, and exit status 128 + the signal's number (130, 143).

A signal that comes while the command line is still loading is held (from ``qsa_cli.__main__``'s first
line, before anything else is imported) and arrives as the command begins, so that it too is one line, never
a traceback.

An exception raised by a signal handler can be lost: numpy clears a pending error in some of its C paths
(a KeyboardInterrupt raised while ``Generator.choice`` converts its arguments is dropped, and the run went
on, for minutes, as if no signal had come). So, until the command has taken the interruption
(``signal_of``), it is raised again every RESEND_S, unless the main thread is already unwinding from it
(in an ``except``, ``finally`` or ``__exit__`` that handles it), which a second one would only cut short.

Standard library only: the command line imports this module among its first.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
RESEND_S = 1.0  # long enough for any unwinding to reach its handler, short next to a run


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, as a KeyboardInterrupt (what catches Ctrl-C catches it too)."""

    def __init__(self, signum: int, catcher: SignalCatcher) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.catcher = catcher


def _unwinding() -> bool:
    """Whether the main thread is handling a KeyboardInterrupt: in an except, finally or __exit__ of one, or
    of an exception raised while it was handled (click's Abort)."""
    error = sys.exc_info()[1]
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__context__
    return False


class SignalCatcher:
    """The handler of SIGINT and SIGTERM while a command runs (``interruptions``)."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first signal: the one every resend raises again
        self.taken = threading.Event()  # the command has the interruption in hand (or has ended)
        self._resender: threading.Thread | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.taken.is_set() or _unwinding():
            return
        if self.signum is None:
            self.signum = signum
            self._resender = threading.Thread(target=self._resend, name="qsa-interrupt", daemon=True)
            self._resender.start()
        raise Interrupted(self.signum, self)

    def _resend(self) -> None:
        assert self.signum is not None
        while not self.taken.wait(RESEND_S):
            _thread.interrupt_main(self.signum)  # runs __call__ in the main thread

    def stop(self) -> None:
        """No more resends; one under way reaches ``__call__`` while it is still the handler, and does nothing."""
        self.taken.set()
        if self._resender is not None:
            self._resender.join()


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back within the block: one that comes meanwhile (from a delivery to any
    thread, or a resend) reaches the handler as the block ends, outside whatever the block was doing: a
    module's import, where Python 3.11 wraps an exception raised in a class body's ``__set_name__`` into a
    RuntimeError. The handlers, not the signal mask, hold them back: a thread's mask does not keep Python's
    handlers from running in the main thread. Outside the main thread, where handlers cannot be set, nothing
    changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: came.append(signum)) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for signum in dict.fromkeys(came):
            signal.raise_signal(signum)


@contextlib.contextmanager
def interruptions() -> Iterator[Callable[[], None]]:
    """Within the block SIGINT and SIGTERM raise Interrupted in the main thread; the block is given the
    function that releases the signals ``qsa_cli.__main__`` holds (one that came meanwhile arrives as it
    returns: call it inside the ``try`` that handles Interrupted). The handlers and the signal mask are put
    back after. Outside the main thread, where handlers cannot be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    catcher = SignalCatcher()
    previous = {signum: signal.signal(signum, catcher) for signum in SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # the mask as it is
    try:
        yield lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    finally:
        catcher.stop()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def signal_of(stop: BaseException) -> int:
    """The signal that ``stop`` stands for (a KeyboardInterrupt, or an exception raised while one was handled,
    such as click's Abort): an Interrupted's, else SIGINT (a Ctrl-C no handler here raised). The
    interruption is taken: it is not raised again."""
    error: BaseException | None = stop
    while error is not None:
        if isinstance(error, Interrupted):
            error.catcher.taken.set()
            return error.signum
        error = error.__cause__ or error.__context__
    return signal.SIGINT


def exit_status(signum: int) -> int:
    """The shell's status of a command ended by ``signum``: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + signum


def interrupted_by(signum: int) -> str:
    """``qsa: interrupted``, naming the signal when it is not Ctrl-C's."""
    return "qsa: interrupted" + ("" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}")
