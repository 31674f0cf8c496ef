"""The one base of every error a user can cause: a bad argument, file, record or setting, or a refused
condition (no device, no permission). Its message is one line (a compiler's log may follow it); the CLI
turns it into exit status 2, before anything is measured."""

from __future__ import annotations


class QsaError(Exception):
    """A user's error or a refused condition: one line, exit status 2."""


class InputError(QsaError, ValueError):
    """An input file, array or record that does not match the spec; the message is one line."""


class KernelError(QsaError, RuntimeError):
    """A kernel source that is missing or does not compile; the message carries the compiler's log (many
    lines, printed whole)."""


class EngineError(QsaError, ValueError):
    """A checkout qsa cannot build or run: one line (a build failure's nvcc log: EngineBuildError)."""


class EngineBuildError(EngineError, KernelError):
    """nvcc failed on a checkout: the message carries its whole log, printed as the kernels' logs are."""


class EngineRefused(QsaError, ValueError):
    """An engine variant that does not run this call on this card: one line saying which function and why.

    Not a failure: the variant is reported as not run and nothing is compared for it."""


class RevisionError(QsaError, ValueError):
    """A revision of a folder that cannot be checked out: not a repository, an unknown revision, a worktree
    git refused; one line."""
