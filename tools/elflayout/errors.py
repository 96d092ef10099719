"""Exceptions that the CLI turns into exit statuses.

Library code raises these; only ``elflayout.cli`` prints them.
"""

import importlib


class ElflayoutError(Exception):
    """Bad input or an environment problem: one-line message, exit status 2."""

    exit_status = 2


class Finding(Exception):
    """A result the user asked to fail on (e.g. ``--check`` found a difference): exit 1."""

    exit_status = 1


# Optional dependencies (setup.cfg extras) and the extra that installs each.
EXTRAS = {"matplotlib": "report", "statsmodels": "stats", "pandas": "stats"}


def require(module: str):
    """Import an optional dependency, or fail with one line saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        extra = EXTRAS.get(top)
        how = f"pip install 'elflayout[{extra}]'" if extra else f"pip install {top}"
        raise ElflayoutError(f"{top} is not installed: this needs it ({how}; make bootstrap installs it)") from None


def one_line(text: object) -> str:
    """``text`` as one printable line: messages quote what a damaged input holds (a symbol
    name from a dlopen error, a section name), and its newlines or control bytes must not
    break the one-line contract or the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text).strip())
