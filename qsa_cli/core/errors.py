"""The one base of every error a user can cause: a bad argument, file, record or setting, or a refused
condition (no device, no permission). Its message is one line (a compiler's log may follow it); the CLI
turns it into exit status 2, before anything is measured."""

from __future__ import annotations


class QsaError(Exception):
    """A user's error or a refused condition: one line, exit status 2."""


class InputError(QsaError, ValueError):
    """An input file, array or record that does not match the spec; the message is one line."""
