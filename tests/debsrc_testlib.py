"""Upstream trees of real Debian packages for tests, unpacked once into
``~/.cache/elflayout/NAME`` from the tarball ``elflayout.targets.debsrc`` downloads."""

from __future__ import annotations

from pathlib import Path

from elflayout.targets import debsrc


def source(package: str, tree_glob: str, marker: str, cache: str | None = None) -> Path:
    """The unpacked upstream tree of Debian source ``package`` (``debsrc.unpacked``)."""
    return debsrc.unpacked(package, tree_glob, marker, cache)
