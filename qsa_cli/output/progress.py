"""Progress of a run on stderr, so that stdout holds only the results: rich's bar on a terminal, plain
lines in a log (``[3/27] topk ctx=131072 ..., elapsed 12 s, about 96 s left``), nothing with ``--quiet``.

The runners report through a callback ``progress(done, total, message)``: ``done`` of ``total`` steps
finished, ``message`` naming the one now starting (a total of 0: not known). A plain line is written
only once the run has lasted a couple of seconds, so a quick command prints no progress at all.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as Bar

from ..core.progress import Progress, no_progress

QUIET_FOR_S = 2.0  # a run shorter than this shows no plain progress lines


class PlainProgress:
    """Progress as lines on a stream that is not a terminal (a CI log), one per step after the first
    ``QUIET_FOR_S`` seconds, with the time taken and an estimate of the time left."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] | None = None) -> None:
        self.stream, self.clock = stream, clock or time.monotonic
        self.started = self.clock()

    def __call__(self, done: int, total: int, message: str) -> None:
        elapsed = self.clock() - self.started
        if elapsed < QUIET_FOR_S:
            return
        if total and done >= total:
            line = f"[{total}/{total}] {message}, elapsed {elapsed:.0f} s"
        elif total:
            left = f", about {elapsed / done * (total - done):.0f} s left" if done else ""
            line = f"[{done + 1}/{total}] {message}, elapsed {elapsed:.0f} s{left}"
        else:
            line = f"[{done + 1}] {message}, elapsed {elapsed:.0f} s"
        self.stream.write(line + "\n")
        self.stream.flush()


@contextlib.contextmanager
def _bar(stream: TextIO) -> Iterator[Progress]:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Bar(*columns, console=Console(file=stream), transient=True) as bar:
        task = bar.add_task("", total=None)

        def update(done: int, total: int, message: str) -> None:
            bar.update(task, completed=done, total=total or None, description=message)

        yield update


@contextlib.contextmanager
def progress_on(quiet: bool, stream: TextIO | None = None) -> Iterator[Progress]:
    """The progress callback for a run: none when ``quiet``, a bar when ``stream`` (stderr) is a
    terminal, plain lines otherwise."""
    stream = stream if stream is not None else sys.stderr
    if quiet:
        yield no_progress
    elif stream.isatty():
        with _bar(stream) as update:
            yield update
    else:
        yield PlainProgress(stream)

