"""The exit statuses every command ends with, and the usage error (exit 2) that its checks raise."""

from __future__ import annotations

import click

EXIT_PARITY = 1  # an output differs, a check or threshold fails, the gate or compare fails
EXIT_USAGE = 2


class UsageProblem(click.ClickException):
    exit_code = EXIT_USAGE
