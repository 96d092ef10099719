"""Page-cache residency (mincore) and eviction of single files or of everything.

``residency`` maps the file read-only with libc ``mmap`` (no page is touched) and asks
``mincore`` which pages are resident. ``evict`` fsyncs (dirty pages cannot be dropped),
calls ``posix_fadvise(POSIX_FADV_DONTNEED)`` and verifies with mincore; pages that stay
are usually mapped by a running process (DONTNEED never drops mapped pages), which
``mapped_by`` names.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

import numpy as np

from elflayout import pages as page_math
from elflayout.errors import ElflayoutError

PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
PROT_READ, MAP_SHARED = 1, 1
MAP_FAILED = ctypes.c_void_p(-1).value


def residency(path: str | os.PathLike) -> np.ndarray:
    """Boolean array, one entry per page of the file: resident in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        n = (size + PAGE - 1) // PAGE
        if n == 0:
            return np.zeros(0, dtype=bool)
        addr = _libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
        if addr in (None, MAP_FAILED):
            raise ElflayoutError(f"{path}: mmap failed: {os.strerror(ctypes.get_errno())}")
        try:
            vec = np.zeros(n, dtype=np.uint8)
            if _libc.mincore(addr, size, vec.ctypes.data) != 0:
                raise ElflayoutError(f"{path}: mincore failed: {os.strerror(ctypes.get_errno())}")
        finally:
            _libc.munmap(addr, size)
        return (vec & 1).astype(bool)
    finally:
        os.close(fd)


def resident_pages(path) -> int:
    return int(residency(path).sum())


def mapped_by(path: str | os.PathLike) -> list[int]:
    """PIDs of processes that currently map ``path`` (keeps its pages from eviction)."""
    st = os.stat(path)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x} {st.st_ino} "
    pids = []
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            if key in maps.read_text():
                pids.append(int(maps.parent.name))
        except OSError:
            continue
    return sorted(pids)


def _named(pid: int) -> str:
    """'1234 (chromium)': a process as messages name it."""
    try:
        return f"{pid} ({Path(f'/proc/{pid}/comm').read_text().strip()})"
    except OSError:
        return str(pid)


def _ranges(pages: np.ndarray) -> str:
    """'3-7, 12' for a sorted page index array (messages only)."""
    if len(pages) == 0:
        return ""
    br = np.flatnonzero(np.diff(pages) != 1)
    starts = np.r_[pages[0], pages[br + 1]]
    ends = np.r_[pages[br], pages[-1]]
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in zip(starts[:8], ends[:8])]
    return ", ".join(parts) + (", ..." if len(starts) > 8 else "")


def evict(path: str | os.PathLike, verify: bool = True) -> dict:
    """Evict one file from the page cache; return {"path", "left", "pages", "why"}.

    ``left`` is the number of pages still resident after two attempts (0 = clean); a file
    deleted since it was listed (another process's temporary file the census saw) has
    nothing left to evict.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return {"path": str(path), "left": 0, "pages": "", "why": "deleted"}
    try:
        for _ in range(2):
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if not verify:
                return {"path": str(path), "left": None, "pages": "", "why": None}
            res = residency(path)
            if not res.any():
                return {"path": str(path), "left": 0, "pages": "", "why": None}
    finally:
        os.close(fd)
    left = np.flatnonzero(res)
    pids = [p for p in mapped_by(path) if p != os.getpid()]
    why = (f"mapped by running process(es) {', '.join(_named(p) for p in pids[:5])}; DONTNEED never drops mapped "
           f"pages" if pids else "pages locked or re-read by another process")
    return {"path": str(path), "left": int(len(left)), "pages": _ranges(left), "why": why}


def expand(pages: np.ndarray, npages: np.ndarray) -> np.ndarray:
    """Sorted unique page indexes covered by folios (first page, page count)."""
    return np.unique(page_math.expand(pages, npages))


# /proc/vmstat counters of events that remove file pages from the page cache behind a
# measurement's back: a drop_caches by anyone, memory reclaim.
VMSTAT_KEYS = ("drop_pagecache", "pgsteal_file")


def vmstat() -> dict[str, int]:
    out = {}
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            k, _, v = line.partition(" ")
            if k in VMSTAT_KEYS:
                out[k] = int(v)
    except OSError:
        pass
    return out


def vmstat_change(before: dict, after: dict) -> str | None:
    """A sentence naming what removed file pages between two ``vmstat()`` snapshots."""
    parts = []
    if after.get("drop_pagecache", 0) > before.get("drop_pagecache", 0):
        parts.append("another process dropped the page cache (drop_caches)")
    n = after.get("pgsteal_file", 0) - before.get("pgsteal_file", 0)
    if n > 0:
        parts.append(f"memory reclaim evicted {n:,} file pages system-wide")
    return "; ".join(parts) or None


def drop_caches() -> None:
    """sync + ``echo 3 > /proc/sys/vm/drop_caches`` (whole system: biased, see docs)."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3")
    except OSError as e:
        raise ElflayoutError(f"/proc/sys/vm/drop_caches: cannot write ({e.strerror}); the cold state needs root") from None


def can_drop_caches() -> str | None:
    return None if os.access("/proc/sys/vm/drop_caches", os.W_OK) else "the cold state needs root (drop_caches)"
