"""Upstream sources of Debian packages: ``apt-get source --download-only`` with a private
apt configuration (a ``deb-src`` line for the mirror and release this machine already
uses, lists kept in the cache), under the machine's apt lock. The system's apt set-up is
not touched and nothing is committed: tarballs and trees live in the cache.

Used by the targets built from source (``cpython_src``, ``llvm_realir``) and by the
tests that build real projects with their own build systems (CMake, Meson).
"""

from __future__ import annotations

import re
from pathlib import Path

from elflayout.errors import ElflayoutError
from elflayout.targets import cache_dir, locked, run

APT_LOCK = Path("/tmp/elflayout-apt.lock")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def machine_mirror(etc: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt already uses (deb822 ``.sources`` first, then a classic list),
    as scripts/lib/debian.sh finds it."""
    for f in sorted(etc.glob("sources.list.d/*.sources")):
        m = re.search(r"^URIs:\s*(http\S*/debian)/?\s*$", f.read_text(errors="replace"), re.M)
        if m:
            return m.group(1)
    for f in [etc / "sources.list", *sorted(etc.glob("sources.list.d/*.list"))]:
        if f.exists():
            m = re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(http\S*/debian)/?\s", f.read_text(errors="replace"), re.M)
            if m:
                return m.group(1)
    return DEFAULT_MIRROR


def release(os_release: Path = Path("/etc/os-release")) -> str:
    m = re.search(r"^VERSION_CODENAME=(\w+)", os_release.read_text(), re.M) if os_release.exists() else None
    return m.group(1) if m else "bookworm"


def _upstream(src: Path, package: str) -> list[Path]:
    return [t for t in sorted(src.glob(f"{package}_*.orig.tar.*")) if not t.name.endswith(".asc")]


def tarball(package: str) -> Path:
    """The upstream tarball (``*.orig.tar.*``) of Debian source ``package``, downloaded once
    into the cache. The upstream part arrives even when the Debian part does not."""
    apt = cache_dir("sources", "apt")
    src = apt / "src" / package
    src.mkdir(parents=True, exist_ok=True)
    with locked(apt / f".{package}.lock"):
        if _upstream(src, package):
            return _upstream(src, package)[-1]
        for d in ("lists/partial", "cache/archives/partial"):
            (apt / d).mkdir(parents=True, exist_ok=True)
        (apt / "sources.list").write_text(f"deb-src [signed-by={KEYRING}] {machine_mirror()} {release()} main\n")
        opts = [f"-oDir::Etc::SourceList={apt / 'sources.list'}", "-oDir::Etc::SourceParts=/dev/null",
                f"-oDir::State::Lists={apt / 'lists'}", f"-oDir::Cache={apt / 'cache'}",
                "-oAPT::Sandbox::User=root"]
        lock = ["flock", str(APT_LOCK)]
        if not any((apt / "lists").glob("*Sources*")):
            run([*lock, "apt-get", *opts, "update", "-qq"], what="apt-get update (deb-src)")
        run([*lock, "apt-get", *opts, "source", "--download-only", "-qq", package], cwd=src,
            what=f"apt-get source --download-only {package}")
        if not _upstream(src, package):
            raise ElflayoutError(f"{src}: apt-get source {package} left no upstream tarball (*.orig.tar.*)")
        return _upstream(src, package)[-1]


def unpacked(package: str, tree_glob: str, marker: str, cache: str | None = None) -> Path:
    """The unpacked upstream tree of Debian source ``package`` (the last directory matching
    ``tree_glob`` that holds ``marker``), downloaded and unpacked once into the cache ``cache``."""
    root = cache_dir(cache or package)

    def done() -> list[Path]:
        return sorted(p for p in root.glob(tree_glob) if (p / marker).exists())

    with locked(root / ".source.lock"):
        if not done():
            tar = tarball(package)
            run(["tar", "-xf", tar, "-C", root], what=f"tar -xf {tar.name}")
        return done()[-1]
