"""Load a profile and pick the target an ordering is for.

The profiler package owns the format and its parser (``profile.model``); this module
only adds what ordering needs: a non-empty target, and a check that the profile belongs
to the library at hand.
"""

from __future__ import annotations

import os

from elflayout.errors import ElflayoutError
from elflayout.profile.model import Profile, Target, load


def load_profile(path: str | os.PathLike) -> Profile:
    return load(path)


def pick_target(doc: Profile, path: str | os.PathLike, want: str | None = None) -> Target:
    """The target named ``want`` (path, basename or build-id), or the only one."""
    return doc.target(want)


def require_touches(t: Target, path) -> None:
    if not t.touched():
        raise ElflayoutError(f"{path}: profile target {t.path} is empty (no functions, sections, objects or pages)")


def check_identity(t: Target, identity: dict, path, allow_stale: bool) -> str | None:
    """Refuse a profile of another build unless ``allow_stale``; returns a warning or None."""
    pb, lb = t.build_id, identity.get("build_id")
    if pb and lb:
        same = pb == lb
    else:
        same = t.sha256 == identity.get("sha256") if t.sha256 else None
    if same is False:
        msg = (f"{path}: profile is of build {pb or (t.sha256 or '?')[:16]} but {identity['path']} is "
               f"{lb or identity['sha256'][:16]}")
        if not allow_stale:
            raise ElflayoutError(msg + " (use --allow-stale-profile to use it anyway)")
        return msg
    if same is None:
        return f"{path}: profile target has no build-id or sha256; cannot check it matches {identity['path']}"
    return None
