"""How a long run reports its progress: ``progress(done, total, message)``, ``done`` of ``total`` steps
finished (a total of 0: not known) and ``message`` naming the one now starting; once more at the end with
``done == total``. The runners call it (qsa_cli/runs/); the CLI shows it (qsa_cli/output/progress.py)."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int, str], None]


def no_progress(done: int, total: int, message: str) -> None:
    """The progress of a run nobody watches (``--quiet``, a run inside another)."""
