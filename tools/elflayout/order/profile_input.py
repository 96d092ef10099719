"""Load a profile (format v1) and pick the target an ordering is for.

The profiler package owns the format (docs/formats/profile.md); this module only reads
the fields ordering needs and checks that the profile belongs to the library at hand.
"""

from __future__ import annotations

import os
from pathlib import Path

from elflayout.errors import ElflayoutError
from elflayout.fileio import load_json


def load_profile(path: str | os.PathLike) -> dict:
    doc = load_json(path, "profile", (1,))
    targets = doc.get("targets")
    if not isinstance(targets, list) or not targets:
        raise ElflayoutError(f"{path}: profile has no targets")
    for t in targets:
        if not isinstance(t, dict) or "path" not in t:
            raise ElflayoutError(f"{path}: malformed target entry (needs at least 'path')")
        for key in ("functions", "sections", "objects", "pages", "reads"):
            v = t.setdefault(key, [])
            if not isinstance(v, list):
                raise ElflayoutError(f"{path}: target {t['path']}: '{key}' must be a list")
    return doc


def pick_target(doc: dict, path: str | os.PathLike, want: str | None = None) -> dict:
    """The target named ``want`` (path, basename or build-id), or the only one."""
    targets = doc["targets"]
    if want is None:
        if len(targets) == 1:
            return targets[0]
        names = ", ".join(Path(t["path"]).name for t in targets)
        raise ElflayoutError(f"{path}: profile has {len(targets)} targets ({names}); choose one with --target")
    w = str(want)
    wres = str(Path(w).resolve()) if os.path.exists(w) else None
    for t in targets:
        if w in (t["path"], Path(t["path"]).name, t.get("build_id")) or (wres and wres == t["path"]):
            return t
    # a different build of the same library: match on the file name alone
    for t in targets:
        if Path(t["path"]).name == Path(w).name:
            return t
    raise ElflayoutError(f"{path}: no target {w!r} in the profile (has: {', '.join(t['path'] for t in targets)})")


def require_touches(t: dict, path) -> None:
    if not (t["functions"] or t["sections"] or t["objects"] or t["pages"]):
        raise ElflayoutError(f"{path}: profile target {t['path']} is empty (no functions, sections, objects or pages)")


def check_identity(t: dict, identity: dict, path, force: bool) -> str | None:
    """Refuse a profile of another build unless ``force``; returns a warning or None."""
    pb, lb = t.get("build_id"), identity.get("build_id")
    if pb and lb:
        same = pb == lb
    else:
        same = t.get("sha256") == identity.get("sha256") if t.get("sha256") else None
    if same is False:
        msg = (f"{path}: profile is of build {pb or t.get('sha256', '?')[:16]} but {identity['path']} is "
               f"{lb or identity['sha256'][:16]}")
        if not force:
            raise ElflayoutError(msg + " (use --force to use it anyway)")
        return msg
    if same is None:
        return f"{path}: profile target has no build-id or sha256; cannot check it matches {identity['path']}"
    return None


def by_first(entries: list[dict]) -> list[dict]:
    """Entries in first-access order (stable; entries without 'first' keep list order, last)."""
    big = float("inf")
    idx = sorted(range(len(entries)), key=lambda i: (entries[i].get("first", big) if entries[i].get("first") is not None else big, i))
    return [entries[i] for i in idx]
