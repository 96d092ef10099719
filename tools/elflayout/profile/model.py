"""Profile format v1: build, validate, read and write (docs/formats/profile.md)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
from pathlib import Path

import numpy as np

from elflayout.errors import ElflayoutError
from elflayout.fileio import dump_json, envelope, load_json

KIND = "profile"
VERSION = 1
PHASES = ("loader", "init", "main")
PAGE_KINDS = ("x", "r", "w", "t")
LISTS = ("functions", "sections", "objects", "pages", "reads")
OPTIONAL_LISTS = ("windows", "data_objects")

# One raw event of either backend, after mapping to the target file:
#   seq   global sequence number (across targets and kinds) of the first access
#   t     seconds since the workload started
#   kind  b"x" execute, b"r" read, b"w" write, b"t" page touched (fault), b"a" page added (read),
#         b"m" fault-around window mapped
#   target index into the profile's targets
#   offset, length: file bytes [offset, offset+length) (length: pages*4096 for "a")
EVENT_DTYPE = np.dtype([("seq", "<i8"), ("t", "<f8"), ("kind", "S1"), ("target", "<i2"),
                        ("offset", "<i8"), ("length", "<i8")])


def workload_path(argv0: str) -> str:
    """The executable a workload's argv[0] names (PATH lookup), for both backends."""
    import shutil

    exe = shutil.which(argv0)
    if exe is None:
        raise ElflayoutError(f"{argv0}: command not found")
    return exe


def read_ahead_kb(dev_path: str | None = None) -> int | None:
    """read_ahead_kb of the block device holding a file (None when unknown)."""
    try:
        st = os.stat(dev_path or "/")
        maj, mnr = os.major(st.st_dev), os.minor(st.st_dev)
        q = Path(f"/sys/dev/block/{maj}:{mnr}")
        for cand in (q / "queue" / "read_ahead_kb", q / ".." / "queue" / "read_ahead_kb"):
            if cand.exists():
                return int(cand.read_text())
    except (OSError, ValueError):
        pass
    try:
        return int(Path("/sys/block/vda/queue/read_ahead_kb").read_text())
    except (OSError, ValueError):
        return None


def base_metadata(argv: list[str], backend: str, granularity: str, target_path: str | None = None) -> dict:
    return {
        "argv": list(argv),
        "backend": backend,
        "granularity": granularity,
        "kernel": platform.release(),
        "read_ahead_kb": read_ahead_kb(target_path),
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "duration_s": None,
        "exit_status": None,
        "notes": [],
    }


def new_profile(metadata: dict, targets: list[dict]) -> dict:
    return envelope(KIND, VERSION, metadata, targets=targets)


def validate(doc: dict, path="profile") -> dict:
    """Check the structure a reader relies on; raise ElflayoutError naming the problem."""
    if not isinstance(doc.get("metadata"), dict):
        raise ElflayoutError(f"{path}: profile has no metadata object")
    ts = doc.get("targets")
    if not isinstance(ts, list):
        raise ElflayoutError(f"{path}: profile has no targets list")
    for i, t in enumerate(ts):
        if not isinstance(t, dict) or "path" not in t:
            raise ElflayoutError(f"{path}: targets[{i}] has no path")
        for k in LISTS + OPTIONAL_LISTS:
            v = t.get(k, [])
            if not isinstance(v, list):
                raise ElflayoutError(f"{path}: targets[{i}].{k} is not a list")
            firsts = [e.get("first") for e in v if isinstance(e, dict)]
            if len(firsts) != len(v) or any(not isinstance(f, int) for f in firsts):
                raise ElflayoutError(f"{path}: targets[{i}].{k} entries need an integer 'first'")
            if any(b < a for a, b in zip(firsts, firsts[1:])):
                raise ElflayoutError(f"{path}: targets[{i}].{k} is not in first-access order")
    return doc


def load(path) -> dict:
    return validate(load_json(path, KIND, (VERSION,)), path)


def save(doc: dict, path) -> None:
    dump_json(validate(doc), path)


def target_of(doc: dict, lib: str | None = None) -> dict:
    """The target entry for ``lib`` (path, file name or build-id); the only one if None."""
    ts = doc["targets"]
    if lib is None:
        if len(ts) != 1:
            raise ElflayoutError(f"profile has {len(ts)} targets; name one ({', '.join(t['path'] for t in ts)})")
        return ts[0]
    for t in ts:
        if lib in (t["path"], Path(t["path"]).name, t.get("build_id")):
            return t
    raise ElflayoutError(f"{lib}: not a target of this profile ({', '.join(t['path'] for t in ts)})")
