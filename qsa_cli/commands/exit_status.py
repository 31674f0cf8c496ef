"""The exit statuses every command ends with, and the usage error (exit 2) that its checks raise."""

from __future__ import annotations

import click

EXIT_PARITY = 1  # an output differs, a check or threshold fails, the gate or compare fails
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # the shell's code for a command ended by SIGINT


class UsageProblem(click.ClickException):
    exit_code = EXIT_USAGE
