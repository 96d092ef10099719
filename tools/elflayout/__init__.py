"""elflayout: make large ELF shared libraries start faster by reading less from disk."""

__version__ = "0.1.0"
