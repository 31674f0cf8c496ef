"""The standard streams as a command finds them: stdout must take what qsa prints, and a stream whose
encoding lacks the characters qsa prints (``PYTHONIOENCODING=ascii``) gets their plain spellings.

Checked before a command runs, so that a closed or full stdout is one line and exit status 2, not a
traceback after the measuring."""

from __future__ import annotations

import codecs
import io
import os
import sys

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
