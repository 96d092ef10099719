"""Upstream sources of real Debian packages for tests: ``apt-get source --download-only``
with a private apt configuration (a ``deb-src`` line for the machine's mirror, lists kept
in the cache, under the machine's apt lock): nothing is changed in the system's apt
set-up, nothing is committed. Trees are unpacked once into ``~/.cache/elflayout/NAME``."""

from __future__ import annotations

from pathlib import Path

from elflayout.targets import cache_dir, locked, run

SOURCES = ("deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
           "http://deb.debian.org/debian bookworm main\n")
APT_LOCK = Path("/tmp/elflayout-apt.lock")


def source(package: str, tree_glob: str, marker: str, cache: str | None = None) -> Path:
    """The unpacked upstream tree of Debian source ``package`` (the last directory matching
    ``tree_glob`` that holds ``marker``), downloaded once into the cache ``cache``."""
    root = cache_dir(cache or package)

    def done() -> list[Path]:
        return sorted(p for p in root.glob(tree_glob) if (p / marker).exists())

    with locked(root / ".source.lock"):
        if done():
            return done()[-1]
        apt = cache_dir(cache or package, "apt")
        for d in ("lists/partial", "cache/archives/partial", "src"):
            (apt / d).mkdir(parents=True, exist_ok=True)
        (apt / "sources.list").write_text(SOURCES)
        opts = [f"-oDir::Etc::SourceList={apt / 'sources.list'}", "-oDir::Etc::SourceParts=/dev/null",
                f"-oDir::State::Lists={apt / 'lists'}", f"-oDir::Cache={apt / 'cache'}",
                "-oAPT::Sandbox::User=root"]
        with locked(APT_LOCK):
            run(["apt-get", *opts, "update", "-qq"], what="apt-get update (deb-src)")
            run(["apt-get", *opts, "source", "--download-only", package], cwd=apt / "src",
                what=f"apt-get source --download-only {package}")
        tarball = [t for t in sorted((apt / "src").glob(f"{package}_*.orig.tar.*")) if not t.name.endswith(".asc")][-1]
        run(["tar", "-xf", tarball, "-C", root], what=f"tar -xf {tarball.name}")
        return done()[-1]
