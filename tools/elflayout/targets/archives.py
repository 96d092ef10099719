"""Targets relinked from a static archive: its members unpacked once, in archive order,
as ``NNN-name.o`` (archive position + member name: member names may repeat, and the
prefix keeps the archive order visible in link maps), optionally after ``elflayout split``,
and put in a caller's object order.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from elflayout import split as split_pkg
from elflayout.errors import ElflayoutError
from elflayout.fileio import atomic_write_text
from elflayout.split.api import split_inputs
from elflayout.split.archive import read_archive
from elflayout.targets import cache_dir, locked


def unpack(archive: Path, kind: str) -> list[Path]:
    """The members of ``archive``, unpacked once into ``cache_dir(kind, "objects")``."""
    dest = cache_dir(kind, "objects")
    stamp = dest / ".members.json"
    with locked(cache_dir(kind) / ".objects.lock"):
        if stamp.exists():
            return [dest / n for n in json.loads(stamp.read_text())]
        names = []
        for k, (name, body) in enumerate(read_archive(Path(archive).read_bytes(), str(archive))):
            fn = f"{k:03d}-{name}"
            (dest / fn).write_bytes(body)
            names.append(fn)
        atomic_write_text(stamp, json.dumps(names))
    return [dest / n for n in names]


def split(objs: list[Path], kind: str) -> list[Path]:
    """``objs`` after ``elflayout split`` (one section per function and data object),
    cached per version of the splitter's code."""
    code = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(Path(split_pkg.__file__).parent.glob("*.py"))))
    dest = cache_dir(kind, f"split-objects-{code.hexdigest()[:12]}")
    with locked(cache_dir(kind) / ".split.lock"):
        if not (dest / ".done").exists():
            split_inputs(objs, dest, force=True)
            (dest / ".done").write_text("")
    return [dest / o.name for o in objs]


def ordered(objs: list[Path], object_order, what: str) -> list[Path]:
    """``objs`` in ``object_order`` (paths or names; None: as they are), each exactly once."""
    if object_order is None:
        return objs
    by = {}
    for o in objs:
        by[str(o)] = o
        by[o.name] = o
    out = []
    for x in object_order:
        o = by.get(str(x)) or by.get(Path(x).name)
        if o is None:
            raise ElflayoutError(f"object order: {x} is not one of the {what} objects")
        out.append(o)
    if sorted(map(str, out)) != sorted(map(str, objs)):
        raise ElflayoutError(f"object order: must list each of the {len(objs)} objects exactly once (got {len(out)})")
    return out
