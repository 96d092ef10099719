"""Preload plan format v1 (docs/formats/preload-plan.md): JSON, and its text form.

``save`` writes ``PLAN.json`` and, beside it, ``PLAN.preload``: the same files and
ranges as plain text for the C preloader (tools/preload/preload.c parses it; keep the
two in sync). Both are written atomically; JSON is the reference, the text form is
derived and always rewritten with it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from elflayout import fileio
from elflayout.errors import ElflayoutError

KIND = "preload-plan"
VERSION = 1
TEXT_MAGIC = "elflayout-preload-plan"
TEXT_VERSION = 1


@dataclass(frozen=True)
class FilePlan:
    path: str
    size: int
    mtime_ns: int
    build_id: str | None
    ranges: tuple[tuple[int, int], ...]  # (offset, length) in bytes, increasing, not overlapping
    needed_pages: int  # pages the inputs read that the ranges cover
    first: float  # earliest first-read time of the file (fraction of a run's read span)

    @property
    def bytes(self) -> int:
        return sum(n for _, n in self.ranges)

    def to_json(self) -> dict:
        return {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns, "build_id": self.build_id,
                "needed_pages": self.needed_pages, "bytes": self.bytes, "first": round(self.first, 6),
                "ranges": [[o, n] for o, n in self.ranges]}


@dataclass
class PreloadPlan:
    metadata: dict
    files: list[FilePlan] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def ranges(self) -> int:
        return sum(len(f.ranges) for f in self.files)

    def to_json(self) -> dict:
        return fileio.envelope(KIND, VERSION, self.metadata, files=[f.to_json() for f in self.files])

    def to_text(self) -> str:
        out = [f"{TEXT_MAGIC} {TEXT_VERSION}"]
        for f in self.files:
            sec, nsec = divmod(f.mtime_ns, 1_000_000_000)
            out.append(f"F {len(f.ranges)} {f.size} {sec} {nsec} {f.build_id or '-'} {f.path}")
            out.extend(f"{o} {n}" for o, n in f.ranges)
        return "\n".join(out) + "\n"


def text_path(path: str | os.PathLike) -> Path:
    """PLAN.json -> PLAN.preload (the C preloader's input); other names get .preload appended."""
    p = Path(path)
    return p.with_suffix(".preload") if p.suffix == ".json" else p.with_name(p.name + ".preload")


def save(plan: PreloadPlan, path: str | os.PathLike) -> Path:
    """Write PLAN.json and PLAN.preload atomically; return the text form's path."""
    for f in plan.files:
        if "\n" in f.path or f.path != f.path.strip():
            raise ElflayoutError(f"{f.path!r}: file names with newlines or surrounding blanks cannot be preloaded")
    tp = text_path(path)
    fileio.atomic_write_text(tp, plan.to_text())
    fileio.dump_json(plan.to_json(), path)
    return tp


def _int(v, what: str, path) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ElflayoutError(f"{path}: {what} must be a non-negative integer, got {v!r}")
    return v


def _number(v, what: str, path) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise ElflayoutError(f"{path}: {what} must be a number, got {v!r}")
    return float(v)


def load(path: str | os.PathLike) -> PreloadPlan:
    doc = fileio.load_json(path, KIND, (VERSION,))
    files = doc.get("files")
    if not isinstance(files, list):
        raise ElflayoutError(f"{path}: preload plan has no 'files' list")
    out = []
    for i, f in enumerate(files):
        if not isinstance(f, dict) or not isinstance(f.get("path"), str) or not isinstance(f.get("ranges"), list):
            raise ElflayoutError(f"{path}: files[{i}] is malformed (needs path and ranges)")
        size = _int(f.get("size"), f"files[{i}].size", path)
        ranges = []
        end = 0
        for j, r in enumerate(f["ranges"]):
            if not (isinstance(r, list) and len(r) == 2):
                raise ElflayoutError(f"{path}: files[{i}].ranges[{j}] must be [offset, length]")
            o, n = _int(r[0], f"files[{i}].ranges[{j}] offset", path), _int(r[1], f"files[{i}].ranges[{j}] length", path)
            if o < end or o + n > size:
                raise ElflayoutError(f"{path}: files[{i}].ranges[{j}] overlaps, is out of order or beyond the file")
            ranges.append((o, n))
            end = o + n
        bid = f.get("build_id")
        if bid is not None and not (isinstance(bid, str) and bid and all(c in "0123456789abcdef" for c in bid)):
            raise ElflayoutError(f"{path}: files[{i}].build_id must be lower-case hex or null")
        out.append(FilePlan(f["path"], size, _int(f.get("mtime_ns"), f"files[{i}].mtime_ns", path), bid,
                            tuple(ranges), _int(f.get("needed_pages", 0), f"files[{i}].needed_pages", path),
                            _number(f.get("first", 0.0), f"files[{i}].first", path)))
    return PreloadPlan(doc.get("metadata") or {}, out)


def check_text(path: str | os.PathLike) -> None:
    """Refuse a file that is not a plan's text form (the C side only warns and goes on)."""
    try:
        with open(path, "rb") as f:
            head = f.readline(200)
    except FileNotFoundError:
        raise ElflayoutError(f"{path}: no such file") from None
    except OSError as e:
        raise ElflayoutError(f"{path}: cannot read: {e.strerror}") from None
    if head.strip() != f"{TEXT_MAGIC} {TEXT_VERSION}".encode():
        raise ElflayoutError(f"{path}: not an elflayout preload plan (text form {TEXT_VERSION} starts with "
                             f"'{TEXT_MAGIC} {TEXT_VERSION}')")
