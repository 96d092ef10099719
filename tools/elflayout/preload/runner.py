"""The C preloader (tools/preload): where its binaries are, building them, commands.

``build/preload/elflayout-preload`` is the launcher (apply a plan, then exec);
``build/preload/libelflayout-preload.so`` applies the plan named by
``$ELFLAYOUT_PRELOAD_PLAN`` from inside a program (LD_AUDIT or LD_PRELOAD).
``scripts/bootstrap.sh`` builds both; the first use builds them when missing or older
than their sources. ``ELFLAYOUT_PRELOAD_BUILD`` points at another build directory.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from elflayout.errors import ElflayoutError
from elflayout.preload import model

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "tools" / "preload"
LAUNCHER = "elflayout-preload"
LIBRARY = "libelflayout-preload.so"
METHODS = ("pread", "readahead", "fadvise")
ENV_PLAN = "ELFLAYOUT_PRELOAD_PLAN"  # names shared with tools/preload/preload.h
ENV_METHOD = "ELFLAYOUT_PRELOAD_METHOD"
ENV_BACKGROUND = "ELFLAYOUT_PRELOAD_BACKGROUND"
ENV_MAP = "ELFLAYOUT_PRELOAD_MAP"


def build_dir() -> Path:
    env = os.environ.get("ELFLAYOUT_PRELOAD_BUILD")
    return Path(env) if env else ROOT / "build" / "preload"


def _stale(out: Path) -> bool:
    if not out.exists():
        return True
    srcs = list(SRC.glob("*.[ch]")) + [SRC / "Makefile"]
    return any(s.exists() and s.stat().st_mtime > out.stat().st_mtime for s in srcs)


def binaries() -> tuple[Path, Path]:
    """(launcher, library), built with make when missing or older than their sources."""
    d = build_dir()
    launcher, lib = d / LAUNCHER, d / LIBRARY
    if os.environ.get("ELFLAYOUT_PRELOAD_BUILD"):
        if not (os.access(launcher, os.X_OK) and lib.exists()):
            raise ElflayoutError(f"{d}: ELFLAYOUT_PRELOAD_BUILD has no {LAUNCHER} and {LIBRARY}")
        return launcher, lib
    if _stale(launcher) or _stale(lib):
        if not (SRC / "Makefile").exists():
            raise ElflayoutError(f"{launcher}: preloader missing (and no source to build it)")
        if shutil.which("make") is None or shutil.which(os.environ.get("CC", "gcc")) is None:
            raise ElflayoutError(f"{launcher}: not built; needs make and gcc (run: make bootstrap)")
        d.mkdir(parents=True, exist_ok=True)
        with open(d / ".build.lock", "w") as lock:  # concurrent first uses build once
            fcntl.flock(lock, fcntl.LOCK_EX)
            r = subprocess.run(["make", "-s", "-C", str(SRC)], capture_output=True, text=True)
        if r.returncode != 0 or not launcher.exists() or not lib.exists():
            last = (r.stderr.strip().splitlines() or ["make failed"])[-1]
            raise ElflayoutError(f"{launcher}: build failed ({last})")
    return launcher, lib


def launcher_argv(plan: str | os.PathLike, cmd: list[str], *, method: str = "pread", background: bool = False,
                  map_: list[str] | None = None, verbose: bool = False) -> list[str]:
    """argv that applies ``plan`` then execs ``cmd``."""
    if method not in METHODS:
        raise ElflayoutError(f"--method: unknown {method!r} (one of: {', '.join(METHODS)})")
    launcher, _ = binaries()
    argv = [str(launcher), "--method", method]
    if background:
        argv.append("--background")
    for m in map_ or []:
        argv += ["--map", m]
    if verbose:
        argv.append("--verbose")
    return argv + [str(plan), "--"] + list(cmd)


def library_env(plan: str | os.PathLike, *, method: str = "pread", background: bool = False,
                audit: bool = True, map_: list[str] | None = None) -> dict[str, str]:
    """Environment that makes any program apply ``plan`` itself (LD_AUDIT: before its
    libraries are mapped; LD_PRELOAD: in a constructor, after they are relocated)."""
    if method not in METHODS:
        raise ElflayoutError(f"--method: unknown {method!r} (one of: {', '.join(METHODS)})")
    _, lib = binaries()
    env = {ENV_PLAN: str(plan), ENV_METHOD: method}
    if background:
        env[ENV_BACKGROUND] = "1"
    if map_:
        env[ENV_MAP] = ":".join(map_)
    env["LD_AUDIT" if audit else "LD_PRELOAD"] = str(lib)
    return env


def checked_text(plan: str | os.PathLike) -> Path:
    """The text form of ``plan`` (PLAN.json's PLAN.preload, or the .preload given), checked:
    a bad plan is bad input here (one-line error), while the C side only warns."""
    if str(plan).endswith((".json", ".json.gz")):
        model.load(plan)
        tp = model.text_path(str(plan)[:-3] if str(plan).endswith(".gz") else plan)
        if not tp.is_file():
            raise ElflayoutError(f"{tp}: text form of the plan missing (re-run 'elflayout preload plan')")
        return tp
    model.check_text(plan)
    return Path(plan)


def measure_variants(variants: list[tuple[str, str]], plan: str | os.PathLike, files: list[str],
                     storage: str | None) -> list[tuple[str, str]]:
    """``elflayout measure --preload``: every (name, command) plus ``name+preload``, the same
    command started by the launcher. With ``--storage`` the plan's files (the originals)
    are read from the mounts: each served directory is mapped to its ``{mount}`` (or
    ``{mountN}``), which the session substitutes like in the commands."""
    text = checked_text(plan)
    maps = []
    if storage:
        dirs = list(dict.fromkeys(os.path.dirname(os.path.realpath(f)) for f in files))  # as the session mounts them
        maps = [f"{d}={{mount}}" if len(dirs) == 1 else f"{d}={{mount{i}}}" for i, d in enumerate(dirs)]
    twins = [(f"{n}+preload", shlex.join(launcher_argv(text.resolve(), ["/bin/sh", "-c", c], map_=maps)))
             for n, c in variants]
    return list(variants) + twins
