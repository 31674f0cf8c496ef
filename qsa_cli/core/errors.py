"""Every error a user can cause, under one base: a bad argument, file, record or setting, or a refused
condition (no device, no permission). Its message is one line (a compiler's log may follow it: a
KernelError's); the CLI turns a QsaError into exit status 2, before anything is measured, and lets every
other exception through as the programming error it is.

Each type keeps the built-in base that code and tests catch it by (ValueError, OSError, RuntimeError).
"""

from __future__ import annotations


class QsaError(Exception):
    """A user's error or a refused condition: one line, exit status 2."""


class InputError(QsaError, ValueError):
    """An input file, array or record that does not match the spec; the message is one line."""


class GeometryError(QsaError, ValueError):
    """A context, capacity, query count or step record that the spec does not allow."""


class ConfigError(QsaError, ValueError):
    """A sweep file that cannot be used; the message is one line, ``file:line: what``."""


class SwitchError(QsaError, ValueError):
    """An environment switch of the dispatch policy (``STRATA_SCORES_HALVE``, ``STRATA_TOPK_SPLIT``,
    ``QSA_PDL``) set to a value it does not take."""


class VariantError(QsaError, ValueError):
    """A variant the run does not have (an unknown name, or one that does not run here), or a role given one."""


class LimitError(QsaError, ValueError):
    """A limit on an inexact variant's measures that cannot apply: an unknown measure, a value out of its range,
    a variant the run lacks, one that is exact (its bits are checked), or a measure its stage has not."""


class SideError(QsaError, ValueError):
    """A side of ``qsa compare`` that is neither an engine checkout nor a folder of qsa's kernels, or two
    sides that cannot be compared (one name, no variant in common)."""


class OutputError(QsaError, OSError):
    """An output path that cannot be written (one line); an OSError, so a cache writer may ignore it."""


class NoDeviceError(QsaError, RuntimeError):
    """No usable CUDA device (or no CuPy): the message says why in one line."""


class MemoryNeedError(QsaError, RuntimeError):
    """A run that needs more memory than this machine has available, or its device has free (core/memory.py):
    refused before it starts."""


class ClockLockError(QsaError, ValueError):
    """Clocks that cannot be locked (no permission, not supported, NVML unavailable) or a bad lock spec."""


class GateError(QsaError, ValueError):
    """A baseline that cannot be compared with the run (another card or other kernels) or a bad tolerance."""


class BaselineError(QsaError, ValueError):
    """A run that may not become a card's baseline (interrupted, failing, the CPU backend's), or a baseline
    folder without one for the card, or with a broken pointer (one line)."""


class PlotError(QsaError, ValueError):
    """A plot that cannot be drawn (no matplotlib, nothing timed, an unknown file type); one line."""


class SanitizerError(QsaError, ValueError):
    """compute-sanitizer cannot be found or run, or a known-hazards file is malformed (one line)."""


class ClusterUnavailable(QsaError, ValueError):
    """The cluster top-k cannot run this call on this device (too old a card, or too large a capacity)."""


class KernelError(QsaError, RuntimeError):
    """A kernel source that is missing or does not compile; the message carries the compiler's log (many
    lines, printed whole)."""


class SwitchedRunError(KernelError):
    """A child of a run, running its variants under switches, that did not finish (the tail of its output, printed
    whole as a compiler's log is), whose record is not its run's, or that was not told what it runs (exit
    status 2)."""


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


class TimerError(QsaError, RuntimeError):
    """A timer that cannot time this run: ``--timer nvbench`` without cuda-bench, on the CPU backend, or in
    another L2 state than nvbench's."""
