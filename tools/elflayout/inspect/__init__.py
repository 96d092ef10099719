"""``elflayout inspect``: the layout of an ELF file (``core`` returns data, ``cli`` prints)."""

from elflayout.inspect.core import inspect

__all__ = ["inspect"]
