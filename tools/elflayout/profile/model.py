"""Profile format v1: build, validate, read and write (docs/formats/profile.md).

A profile file is parsed once, by ``load``/``parse``, into the dataclasses below
(``Profile`` → ``Target`` → ``Function``, ``Section``, ``ObjectEntry``, ``Page``,
``Extent`` …); every reader (order, check-order, simulate, report, merge) works on those
and never re-checks the JSON. Writers build the JSON document (``new_profile``) and
``save`` parses it before writing, so what is written is what a reader accepts.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import platform
import shutil
from dataclasses import dataclass, field
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


# -- typed data --------------------------------------------------------------------------
# One class per list entry; field names are the JSON keys (``from`` is ``from_``).
# Required keys have no default. ``ranks`` (merged multi-workload profiles only): the
# entry's first-access position in each workload, in [0, 1), or None where that
# workload never touched it (order of ``metadata.workloads``).

@dataclass(slots=True)
class Function:
    name: str
    first: int
    offset: int | None = None
    size: int = 0
    section: str | None = None
    output_section: str | None = None
    object: str | None = None
    source: str | None = None
    phase: str | None = None
    t: float | None = None
    ranks: list | None = None


@dataclass(slots=True)
class Section:
    name: str
    first: int
    object: str | None = None
    output_section: str | None = None
    phase: str | None = None
    t: float | None = None
    ranks: list | None = None


@dataclass(slots=True)
class ObjectEntry:
    object: str
    first: int
    phase: str | None = None
    t: float | None = None
    from_: str | None = None
    kind: str | None = None  # data_objects only: r / w
    ranks: list | None = None


@dataclass(slots=True)
class Page:
    page: int
    first: int
    kind: str = "t"
    section: str | None = None
    phase: str | None = None
    t: float | None = None
    ranks: list | None = None


@dataclass(slots=True)
class Extent:
    """A read (folio added to the page cache) or a fault-around window: pages
    [page, page + npages)."""
    page: int
    first: int
    npages: int = 1
    t: float | None = None
    ranks: list | None = None


ENTRY_TYPES = {"functions": Function, "sections": Section, "objects": ObjectEntry, "pages": Page,
               "reads": Extent, "windows": Extent, "data_objects": ObjectEntry}
# JSON type(s) each field may hold (None is always allowed for optional fields)
_FIELD_TYPES = {"name": str, "object": str, "offset": int, "size": int, "section": str, "output_section": str,
                "source": str, "phase": str, "t": (int, float), "first": int, "page": int, "npages": int,
                "kind": str, "from_": str, "ranks": list}
# Keys a reader must find: the rest may be absent or null
_REQUIRED = {"functions": ("name",), "sections": ("name",), "objects": ("object",), "pages": ("page",),
             "reads": ("page",), "windows": ("page",), "data_objects": ("object",)}
# profile --strings: the loaded bytes of the read-only data (Target.rodata_read)
RODATA_READ = "rodata_read"
_TARGET_KEYS = ("path", "build_id", "size", "sha256", "map") + LISTS + OPTIONAL_LISTS + ("phases", "mappings", "stats")


@dataclass
class Target:
    """One profiled file. ``extra`` keeps keys this version does not interpret
    (``fault_around_mapped_pages``, ``elf_sections`` …) so they survive a rewrite."""
    path: str
    build_id: str | None = None
    size: int | None = None
    sha256: str | None = None
    map: str | None = None
    functions: list[Function] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    objects: list[ObjectEntry] = field(default_factory=list)
    pages: list[Page] = field(default_factory=list)
    reads: list[Extent] = field(default_factory=list)
    windows: list[Extent] = field(default_factory=list)
    data_objects: list[ObjectEntry] = field(default_factory=list)
    phases: dict | None = None
    mappings: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return Path(self.path).name

    def touched(self) -> bool:
        return bool(self.functions or self.sections or self.objects or self.pages)

    def rodata_read(self) -> np.ndarray | None:
        """``profile --strings``: the read-only data bytes the run's loads read, as
        sorted, disjoint (file offset, length) rows; None when not recorded."""
        got = self.extra.get(RODATA_READ)
        return None if got is None else np.asarray(got, dtype=np.int64).reshape(-1, 2)

    def matches(self, want: str) -> bool:
        """``want`` names this target: its path, file name or build-id."""
        return want in (self.path, self.name, self.build_id)

    def to_dict(self) -> dict:
        d = {"path": self.path, "build_id": self.build_id, "size": self.size, "sha256": self.sha256, "map": self.map}
        for k in LISTS:
            d[k] = [_entry_dict(e) for e in getattr(self, k)]
        for k in OPTIONAL_LISTS:
            if getattr(self, k):
                d[k] = [_entry_dict(e) for e in getattr(self, k)]
        if self.phases is not None:
            d["phases"] = self.phases
        if self.mappings:
            d["mappings"] = self.mappings
        if self.stats:
            d["stats"] = self.stats
        d.update(self.extra)
        return d


@dataclass
class Profile:
    metadata: dict
    targets: list[Target]
    source: str = "profile"  # the file it was read from, for messages

    @property
    def workloads(self) -> list[dict]:
        """The workloads of a multi-workload profile (``metadata.workloads``), else []."""
        return list(self.metadata.get("workloads") or [])

    def target(self, want: str | os.PathLike | None = None) -> Target:
        """The target named ``want`` (path, file name or build-id), or the only one.
        A different build of the same library (a relink) matches on its file name."""
        ts = self.targets
        if want is None:
            if len(ts) == 1:
                return ts[0]
            names = ", ".join(t.name for t in ts)
            raise ElflayoutError(f"{self.source}: profile has {len(ts)} targets ({names}); choose one with --target")
        w = str(want)
        wres = str(Path(w).resolve()) if os.path.exists(w) else None
        for t in ts:
            if t.matches(w) or (wres and wres == t.path):
                return t
        for t in ts:
            if t.name == Path(w).name:
                return t
        raise ElflayoutError(f"{self.source}: no target {w!r} in the profile (has: {', '.join(t.path for t in ts)})")

    def to_doc(self) -> dict:
        return new_profile(self.metadata, [t.to_dict() for t in self.targets])


def _entry_dict(e) -> dict:
    d = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if f.name in ("from_", "kind", "ranks") and v is None and not (f.name == "kind" and isinstance(e, Page)):
            continue
        d["from" if f.name == "from_" else f.name] = v
    return d


def _parse_entries(cls, raw, where: str, required: tuple) -> list:
    if not isinstance(raw, list):
        raise ElflayoutError(f"{where} is not a list")
    names = {f.name for f in dataclasses.fields(cls)}
    out = []
    prev = None
    for i, e in enumerate(raw):
        if not isinstance(e, dict):
            raise ElflayoutError(f"{where}[{i}] is not an object")
        kw = {}
        for k, v in e.items():
            k = "from_" if k == "from" else k
            if k not in names or v is None:
                continue
            want = _FIELD_TYPES.get(k)
            if want is not None and (not isinstance(v, want) or (want is int and isinstance(v, bool))):
                raise ElflayoutError(f"{where}[{i}].{k}: expected {getattr(want, '__name__', 'a number')}, "
                                     f"got {type(v).__name__}")
            kw[k] = v
        first = kw.get("first")
        if not isinstance(first, int):
            raise ElflayoutError(f"{where}[{i}] needs an integer 'first'")
        for k in required:
            if k not in kw:
                raise ElflayoutError(f"{where}[{i}] has no '{k}'")
        if prev is not None and first < prev:
            raise ElflayoutError(f"{where} is not in first-access order (entry {i})")
        prev = first
        out.append(cls(**kw))
    return out


def parse(doc: dict, path="profile") -> Profile:
    """The typed profile of a JSON document; raise ElflayoutError naming the problem."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        raise ElflayoutError(f"{path}: profile has no metadata object")
    ts = doc.get("targets")
    if not isinstance(ts, list) or not ts:
        raise ElflayoutError(f"{path}: profile has no targets")
    targets = []
    for i, t in enumerate(ts):
        if not isinstance(t, dict) or not isinstance(t.get("path"), str):
            raise ElflayoutError(f"{path}: targets[{i}] has no path")
        kw = {k: t[k] for k in ("path", "build_id", "size", "sha256", "map") if t.get(k) is not None}
        for k, cls in ENTRY_TYPES.items():
            kw[k] = _parse_entries(cls, t.get(k) or [], f"{path}: targets[{i}].{k}", _REQUIRED[k])
        for k, typ in (("phases", dict), ("mappings", list), ("stats", dict)):
            if t.get(k) is not None:
                if not isinstance(t[k], typ):
                    raise ElflayoutError(f"{path}: targets[{i}].{k} is not a{'n object' if typ is dict else ' list'}")
                kw[k] = t[k]
        kw["extra"] = {k: v for k, v in t.items() if k not in _TARGET_KEYS}
        if RODATA_READ in kw["extra"]:
            _check_runs(kw["extra"][RODATA_READ], f"{path}: targets[{i}].{RODATA_READ}")
        targets.append(Target(**kw))
    return Profile(meta, targets, str(path))


def _check_runs(raw, where: str) -> None:
    """Array checks, not a loop per pair: a big program's run reads tens of thousands."""
    try:
        a = np.asarray(raw) if isinstance(raw, list) and raw else np.zeros((0, 2), np.int64)
    except ValueError:      # ragged
        a = None
    if not isinstance(raw, list) or a is None or a.dtype.kind not in "iu" or a.ndim != 2 or a.shape[1] != 2 \
            or (a.size and a.min() < 0):
        raise ElflayoutError(f"{where}: not a list of [file offset, length] pairs")
    if a.size and (np.any(a[:, 1] <= 0) or np.any(a[1:, 0] < a[:-1, 0] + a[:-1, 1])):
        raise ElflayoutError(f"{where}: runs are not sorted, disjoint and non-empty")


def byte_runs(runs) -> list[list[int]]:
    """(offset, length) rows as the sorted, disjoint, merged runs a profile stores."""
    a = np.asarray(runs, dtype=np.int64).reshape(-1, 2)
    a = a[a[:, 1] > 0]
    if not a.size:
        return []
    a = a[np.argsort(a[:, 0], kind="stable")]
    lo, hi = a[:, 0], a[:, 0] + a[:, 1]
    reach = np.maximum.accumulate(hi)
    new = np.ones(lo.size, dtype=bool)
    new[1:] = lo[1:] > reach[:-1]
    starts = lo[new]
    ends = np.maximum.reduceat(hi, np.flatnonzero(new))
    return np.stack([starts, ends - starts], axis=1).tolist()


def validate(doc: dict, path="profile") -> dict:
    """Check the structure a reader relies on (by parsing it); return ``doc``."""
    parse(doc, path)
    return doc


def load(path) -> Profile:
    return parse(load_json(path, KIND, (VERSION,)), path)


def save(doc: dict | Profile, path) -> None:
    if isinstance(doc, Profile):
        doc = doc.to_doc()
    dump_json(validate(doc), path)

