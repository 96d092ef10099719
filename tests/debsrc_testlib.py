"""Upstream trees of real Debian packages for tests, unpacked once into
``~/.cache/elflayout/NAME`` from the tarball ``elflayout.targets.debsrc`` downloads."""

from __future__ import annotations

from pathlib import Path

from elflayout.targets import cache_dir, debsrc, locked, run


def source(package: str, tree_glob: str, marker: str, cache: str | None = None) -> Path:
    """The unpacked upstream tree of Debian source ``package`` (the last directory matching
    ``tree_glob`` that holds ``marker``), downloaded once into the cache ``cache``."""
    root = cache_dir(cache or package)

    def done() -> list[Path]:
        return sorted(p for p in root.glob(tree_glob) if (p / marker).exists())

    with locked(root / ".source.lock"):
        if not done():
            tarball = debsrc.tarball(package)
            run(["tar", "-xf", tarball, "-C", root], what=f"tar -xf {tarball.name}")
        return done()[-1]
