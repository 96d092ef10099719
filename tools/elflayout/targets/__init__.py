"""Targets: the libraries elflayout is developed and measured on.

* ``synthetic`` -- a generated shared library whose exact first-call order is known
  (ground truth for profilers and orderers);
* ``libpython`` -- Debian's ``libpython3.11.so.1.0`` relinked from ``libpython3.11-pic.a``;
* ``libllvm`` -- Debian's ``libLLVM-16.so.1`` as shipped, and relinked from LLVM 16's
  static archives.

Everything downloaded or built lives in the cache directory (``cache_dir()``), never
in the repository. Debian packages are fetched with ``apt-get download`` and unpacked
with ``dpkg-deb -x``; nothing is installed system-wide except with ``ensure_installed``
(runtime dependencies that a relinked library needs, like libz3).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Iterable, Iterator

from elflayout.errors import ElflayoutError
from elflayout.fileio import atomic_write_text

def cache_dir(*parts: str) -> Path:
    """``${ELFLAYOUT_CACHE:-~/.cache/elflayout}/PARTS...``, created if missing."""
    root = Path(os.environ.get("ELFLAYOUT_CACHE") or Path.home() / ".cache" / "elflayout")
    p = root.joinpath(*parts)
    p.mkdir(parents=True, exist_ok=True)
    return p


def args_fingerprint(args) -> list[str]:
    """Link arguments for a cache key: an argument naming an existing file
    (``-Wl,--symbol-ordering-file=F``, ``-Wl,-T,F``) stands for the file's content, so
    the same ordering written to another temporary path hits the cache."""
    out = []
    for a in args:
        a = str(a)
        for cand in (a.rpartition("=")[2], a.rpartition(",")[2], a):
            if cand and os.path.isfile(cand):
                a = a.replace(cand, "sha256:" + hashlib.sha256(Path(cand).read_bytes()).hexdigest())
                break
        out.append(a)
    return out


def param_key(*values) -> str:
    """Short stable hash of JSON-able parameters (cache directory names)."""
    blob = json.dumps(values, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


@contextlib.contextmanager
def build_slot(kind: str, linker: str, key: str, outdir=None, outputs=()) -> Iterator[tuple[Path, dict | None]]:
    """The locked output directory of one cached link and, if a finished build with
    ``key`` is there, its record (``built.json``); else None, after removing ``outputs``
    and the record so a half-done earlier build is never taken for this one. Write the
    record with :func:`save_record` as the last step of a build."""
    out = (Path(outdir) if outdir else cache_dir(kind, f"link-{linker}-{key}")).resolve()
    record = out / "built.json"
    with locked(out.parent / f".{out.name}.lock"):
        if record.exists():
            d = json.loads(record.read_text())
            if d.get("key") == key:
                yield out, d
                return
        out.mkdir(parents=True, exist_ok=True)
        for name in (*outputs, record.name):
            (out / name).unlink(missing_ok=True)
        yield out, None


def save_record(out: Path, record: dict) -> None:
    atomic_write_text(out / "built.json", json.dumps(record, indent=1))


def record_paths(d: dict, keys: Iterable[str]) -> dict:
    """A build record (JSON: paths as strings) with ``keys`` and the ``objects`` list,
    when present, as ``Path``."""
    out = {**d, **{k: Path(d[k]) for k in keys}}
    if "objects" in d:
        out["objects"] = [Path(o) for o in d["objects"]]
    return out


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Exclusive lock on ``path`` (a lock file): concurrent test runs of several
    engineers share one cache, and must not build the same thing twice at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run(cmd: list, *, cwd=None, env=None, what: str | None = None) -> subprocess.CompletedProcess:
    """Run a command; on failure raise ElflayoutError with the tail of its output."""
    try:
        r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise ElflayoutError(f"{cmd[0]}: not found ({e.strerror}); run: make bootstrap") from None
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-6:]
        raise ElflayoutError(f"{what or cmd[0]}: exit {r.returncode}: " + " | ".join(tail))
    return r


def fetch_debs(packages: Iterable[str], name: str, arch: str | None = None) -> Path:
    """Download Debian ``packages`` with ``apt-get download`` and unpack them all into
    ``cache_dir("debs", name)``; return that root. Done once: a stamp records the
    package list, so later calls cost nothing. ``arch``: a foreign Debian architecture
    (``arm64``: ``apt-get download PKG:arm64``, kept apart from this machine's .debs)."""
    packages = list(packages)
    root = cache_dir("debs", name)
    stamp = root / ".unpacked.json"
    if stamp.exists() and json.loads(stamp.read_text()) == packages:
        return root
    with locked(cache_dir("debs") / f".{name}.lock"):
        if stamp.exists() and json.loads(stamp.read_text()) == packages:
            return root
        dl = cache_dir("debs", "download" if arch is None else f"download-{arch}")
        debs = []
        for pkg in packages:
            have = sorted(dl.glob(f"{pkg}_*.deb"))
            spec = pkg if arch is None else f"{pkg}:{arch}"
            if not have:
                r = subprocess.run(["apt-get", "download", spec], cwd=dl, capture_output=True, text=True)
                if r.returncode != 0:
                    # A stale package list is the usual cause on a fresh machine.
                    subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
                    run(["apt-get", "download", spec], cwd=dl, what=f"apt-get download {spec}")
                have = sorted(dl.glob(f"{pkg}_*.deb"))
            if not have:
                raise ElflayoutError(f"{pkg}: apt-get download produced no .deb in {dl}")
            debs.append(have[-1])
        for deb in debs:
            run(["dpkg-deb", "-x", deb, root], what=f"dpkg-deb -x {deb.name}")
        stamp.write_text(json.dumps(packages))
    return root


def ensure_installed(packages: Iterable[str]) -> None:
    """Install missing Debian runtime packages (root only; bootstrap normally did it)."""
    need = []
    for p in packages:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
        if "install ok installed" not in r.stdout:
            need.append(p)
    if not need:
        return
    if os.geteuid() != 0:
        raise ElflayoutError(f"missing Debian packages {' '.join(need)} (run: make bootstrap, or apt-get install them)")
    subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *need], env=env,
        what=f"apt-get install {' '.join(need)}")


def pack_verified(lib, out) -> str:
    """``elflayout pack-relocs LIB -o OUT --check``; returns how the packed copy was proved.

    Archive relinks of libLLVM reference curl_* (libLLVMDebuginfod) without NEEDing
    libcurl, so dlopen(RTLD_NOW) of the *input* already fails and ``--check`` refuses it
    (exit 2, "the input itself does not load"). Then the library is packed without the
    check and proved as a relink is: llc-16/opt-16 print byte-identical output through it
    (``libllvm.verify``). Any other failure, or such an input that is not libLLVM, raises.
    """
    import sys

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "elflayout", "pack-relocs", str(lib), "-o", str(out), "--force"]
    r = subprocess.run([*cmd, "--check"], capture_output=True, text=True)
    if r.returncode == 0:
        return "pack-relocs --check"
    msg = ((r.stderr or r.stdout).strip().splitlines() or [""])[-1].removeprefix("elflayout: ")
    input_fails = (r.returncode == 2 and "the input itself does not load" in msg
                   or r.returncode == 1 and "dlopen of the packed library failed" in msg and not _loads_now(lib))
    if input_fails and out.name.startswith("libLLVM"):
        run(cmd, what="pack-relocs")
        from elflayout.targets import libllvm

        libllvm.verify(out.parent)
        return (f"pack-relocs without --check ({msg}); llc-16/opt-16 output through the packed copy verified "
                f"identical to the shipped library's")
    raise ElflayoutError(f"pack-relocs {lib} failed (exit {r.returncode}): {msg}")


def _loads_now(lib) -> bool:
    """Whether LIB itself loads with RTLD_NOW (in a subprocess: a failed load may leave state)."""
    import sys

    code = "import ctypes, os, sys; ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_GLOBAL)"
    return subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True).returncode == 0
