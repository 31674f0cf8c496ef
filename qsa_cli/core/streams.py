"""The standard streams as a command finds them and as it leaves them: stdout must take what qsa prints, and
a stream whose encoding lacks the characters qsa prints (``PYTHONIOENCODING=ascii``) gets their plain
spellings.

Checked before a command runs, so that a closed or full stdout is one line and exit status 2, not a
traceback after the measuring; and while it prints (``printing``), so that a reader that goes away ends the
printing quietly and a file system that fills under stdout is one line and exit status 2."""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from .errors import OutputError

# What qsa's own text holds beyond ASCII, spelled for a stream that cannot carry it; any other character (a
# file name's, a description's) is written as Python writes it in a string, \xe9.
PLAIN = {"µ": "u", "°": "deg", "–": "-", "→": "->", "±": "+/-"}
_HANDLER = "qsa-plain"


def _plain(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start:exc.end]
    return "".join(PLAIN.get(c) or c.encode("ascii", "backslashreplace").decode("ascii") for c in bad), exc.end


codecs.register_error(_HANDLER, _plain)


def check_stdout() -> None:
    """An OutputError unless stdout is open and takes a write: closed (``>&-``), a full device (``>
    /dev/full``) or a descriptor opened for reading only. A write of no bytes reaches the device's driver
    (/dev/full refuses it) and nothing else: a pipe or a file takes it as nothing."""
    if sys.stdout is None:
        raise OutputError("stdout is closed: qsa prints its results there (redirect it to a file or /dev/null)")
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return  # a stream of Python's own (a test's capture): no descriptor to ask
    try:
        os.write(fd, b"")
    except OSError as exc:
        raise OutputError(f"stdout: cannot write ({exc.strerror or exc})") from None


def plain_where_needed() -> None:
    """stdout and stderr, where their encoding cannot carry µ and the other characters of PLAIN, write those
    in their plain spelling (``µs`` as ``us``) rather than end in an encoding error."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if not isinstance(stream, io.TextIOWrapper) or not encoding:
            continue
        try:
            "".join(PLAIN).encode(encoding)
        except UnicodeEncodeError:
            stream.reconfigure(errors=_HANDLER)


def silence(*streams: TextIO) -> None:
    """What is still buffered for ``streams``, and anything written to them later, goes nowhere (a reader that
    went away, a full file system): the interpreter's flush at exit then has nothing to fail on. A stream of
    Python's own (a test's capture) has no descriptor and is left as it is."""
    for stream in dict.fromkeys(streams):
        try:
            fd = stream.fileno()
        except (OSError, ValueError, io.UnsupportedOperation):
            continue
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)


@dataclass
class Cut:
    """Whether the printing of a ``printing`` block was cut short by its reader going away."""

    short: bool = False


@contextlib.contextmanager
def printing(*streams: TextIO) -> Iterator[Cut]:
    """A block that prints to ``streams`` (stdout, or stderr in its place): a reader that closes its end early
    (``| head -1``) ends it quietly (the Cut says so); a write the system refuses (a full file system, a file
    too large) is an OutputError, one line, what was printed cut short. Either way what is still buffered goes
    nowhere (but stderr's, where that line goes). An error of the block's own (an output file's OutputError)
    passes as it is."""
    cut = Cut()
    try:
        yield cut
    except BrokenPipeError:
        silence(*streams)
        cut.short = True
    except OutputError:
        raise
    except OSError as exc:
        silence(*(s for s in streams if s is not sys.stderr))  # the line saying so goes there
        raise OutputError(f"stdout: cannot write ({exc.strerror or exc}): what was printed is cut short") from None
