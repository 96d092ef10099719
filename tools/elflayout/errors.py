"""Exceptions that the CLI turns into exit statuses.

Library code raises these; only ``elflayout.cli`` prints them.
"""


class ElflayoutError(Exception):
    """Bad input or an environment problem: one-line message, exit status 2."""

    exit_status = 2


class Finding(Exception):
    """A result the user asked to fail on (e.g. ``--check`` found a difference): exit 1."""

    exit_status = 1
