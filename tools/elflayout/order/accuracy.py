"""Accuracy of the readahead model: ``simulate``'s prediction against measured pages.

``cached_cases`` finds, in the cache of relinks (``elflayout.targets``), for each
benchmark library the build its profile was recorded on (unordered) and the newest
cached ordered relink of the same objects; ``predict`` runs the model on one;
``section_rows`` sets the predicted pages by section against the measured ones, to
find where the model errs. Nothing is built here: a case whose build is not cached is
left out (the benchmarks that build them are named in ``bench/bench_simulate.py``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from elflayout.errors import ElflayoutError


@dataclass(frozen=True)
class Case:
    library: str  # e.g. "libLLVM-16"
    layout: str  # "unordered" / "ordered"
    lib: str
    map: str | None  # link map of ``lib`` (needed when lib is not the profiled build)
    profile: str
    argv: tuple[str, ...]
    env: dict


# (library, cache subdirectory of its relinks, its profile under the cache)
BENCH_LIBRARIES = (
    ("libLLVM-16", "libllvm", "bench-pipeline/llvm/llvm.profile.json"),
    ("libpython3.11 (Debian objects, split)", "libpython", "bench-pipeline/split/python-split-clean.profile.json"),
    ("libcrypto.so.3 (split)", "libcrypto", "bench-pipeline/split-crypto/crypto-split-clean.profile.json"),
    ("libpython3.11 (CPython from source, clang-22), held out", "cpython-src/links",
     "bench-pipeline/peers-llvm22/python.profile.json"),
    ("libzstd.so.1 (CMake, lld), held out", "bench-pipeline/default-heldout/libs",
     "bench-pipeline/default-heldout/zstd.profile.json"),
)


def _profile_target(path: Path) -> tuple[dict, dict]:
    doc = json.loads(path.read_text())
    return doc["metadata"], doc["targets"][0]


def _is_ordered(rec: dict) -> bool:
    return any("symbol-ordering-file" in str(a) for a in rec.get("link_cmd", ()))


def _newest_ordered(links: Path, like: dict) -> dict | None:
    """The newest cached ordered x86-64 relink under ``links`` from the objects ``like`` used."""
    objdir = {str(Path(a).parent) for a in like.get("link_cmd", ()) if str(a).endswith(".o")}
    best = None
    for rec_path in links.glob("*/built.json"):
        rec = json.loads(rec_path.read_text())
        if not _is_ordered(rec) or rec.get("platform") not in (None, "x86_64"):
            continue
        if not (os.path.exists(rec["lib"]) and rec.get("map") and os.path.exists(rec["map"])):
            continue
        if objdir and not objdir & {str(Path(a).parent) for a in rec["link_cmd"] if str(a).endswith(".o")}:
            continue
        t = rec_path.stat().st_mtime
        if best is None or t > best[0]:
            best = (t, rec)
    return best[1] if best else None


def _run_env(rec: dict, libdir: str) -> dict:
    env = {k: v for k, v in (rec.get("env") or {}).items()}
    env["LD_LIBRARY_PATH"] = libdir
    return env


def cached_cases(cache: Path) -> list[Case]:
    """The cases whose builds and profiles are all in ``cache`` (~/.cache/elflayout)."""
    out = []
    for library, sub, prof in BENCH_LIBRARIES:
        prof_path = cache / prof
        if not prof_path.exists():
            continue
        md, target = _profile_target(prof_path)
        base_dir = Path(target["path"]).parent
        rec_path = base_dir / "built.json"
        base = json.loads(rec_path.read_text()) if rec_path.exists() else {}
        if sub == "cpython-src/links":
            from elflayout.targets.cpython_src import ENV

            base = base | {"env": dict(ENV)}
        argv = tuple(str(a) for a in md["argv"])
        out.append(Case(library, "unordered", target["path"], target.get("map"), str(prof_path), argv,
                        _run_env(base, str(base_dir))))
        rec = _newest_ordered(cache / sub, base)
        if rec is None:
            continue
        odir = str(Path(rec["lib"]).parent)
        # a launcher linked next to the library (libpython's python3.11) runs from the ordered build's directory
        oargv = tuple(a.replace(str(base_dir), odir) if a.startswith(str(base_dir)) else a for a in argv)
        out.append(Case(library, "ordered", rec["lib"], rec["map"], str(prof_path), oargv,
                        _run_env(base, odir)))
    return out


def predict(case: Case, read_ahead_kb: int = 128) -> dict:
    """``simulate``'s document for ``case`` (the map only for a build other than the profiled one)."""
    from elflayout.order import simulation

    _md, target = _profile_target(Path(case.profile))
    same = os.path.realpath(target["path"]) == os.path.realpath(case.lib)
    return simulation.predict(case.profile, case.lib, target=target["path"], read_ahead_kb=read_ahead_kb,
                              lib_map=None if same else case.map)


def error_pct(predicted: int, measured: int) -> float:
    if measured <= 0:
        raise ElflayoutError("no pages measured: cannot compare")
    return 100.0 * (predicted / measured - 1.0)


def section_rows(predicted: dict[str, int], measured: dict[str, int]) -> list[tuple[str, int, int, int]]:
    """(section, predicted, measured, predicted − measured), largest absolute difference first."""
    names = set(predicted) | set(measured)
    rows = [(n, predicted.get(n, 0), measured.get(n, 0), predicted.get(n, 0) - measured.get(n, 0)) for n in names]
    return sorted(rows, key=lambda r: (-abs(r[3]), r[0]))
