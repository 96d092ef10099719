"""Pages read without root: page-cache residency before and after each run.

Without root there is no page-cache tracepoint, no ``drop_caches`` and no
``read_ahead_kb`` to set. What an ordinary user can still do on a file it may read:

- evict it: ``posix_fadvise(POSIX_FADV_DONTNEED)`` (``cache.evict``; mapped pages stay);
- count its resident pages: ``cachestat(2)`` (Linux >= 6.5: one call per file, no
  mapping) or ``mincore(2)`` on a read-only mapping (older kernels).

Pages read by a run = resident after it - resident before it. What this cannot see:
pages read and evicted again during the run (memory reclaim, another process's
eviction), pages another process read meanwhile (counted as ours), and the order and
time of the reads (no seeks, no read sequence). ``cachestat`` also counts the pages
reclaim evicted (``nr_evicted``: shadow entries the kernel keeps for refault
detection); a run whose count rose is flagged, since its count may be low.

The kernel hides residency of files the caller could not open for writing (a side
channel otherwise): ``cachestat`` fails with EPERM and ``mincore`` reports every page
resident. ``check`` says so before anything is measured; copy such a file into a
directory the user owns (identical bytes, the same measurement).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass

import numpy as np

from elflayout.errors import ElflayoutError
from elflayout.measure import cache

# cachestat(2) has one number on every architecture (the unified syscall table, 6.5).
SYS_CACHESTAT = 451
CACHESTAT_KERNEL = (6, 5)
CANNOT_SEE = ("pages read and evicted again during a run (memory reclaim, another process's eviction), "
              "pages another process read meanwhile (counted as this run's), the order and time of reads (no seeks)")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _Range(ctypes.Structure):  # struct cachestat_range (include/uapi/linux/mman.h)
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):  # struct cachestat
    _fields_ = [(n, ctypes.c_uint64) for n in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted",
                                                  "nr_recently_evicted")]


def cachestat(path: str | os.PathLike) -> dict[str, int]:
    """The whole file's ``struct cachestat`` as a dict; OSError as the kernel says."""
    fd = os.open(path, os.O_RDONLY)
    try:
        rng, st = _Range(0, 0), _Stat()  # len 0: to the end of the file
        if _libc.syscall(ctypes.c_long(SYS_CACHESTAT), ctypes.c_int(fd), ctypes.byref(rng), ctypes.byref(st),
                         ctypes.c_uint(0)) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e), str(path))
        return {n: int(getattr(st, n)) for n, _ in _Stat._fields_}
    finally:
        os.close(fd)


def _kernel() -> tuple[int, int]:
    try:
        return tuple(int(x) for x in platform.release().split("-")[0].split(".")[:2])  # type: ignore[return-value]
    except ValueError:
        return (0, 0)


def cachestat_status() -> str | None:
    """None when cachestat(2) works here, else why not."""
    if platform.machine() not in ("x86_64", "aarch64", "riscv64", "loongarch64", "arm64"):
        return f"cachestat(2): syscall number not known for {platform.machine()}"
    if _kernel() < CACHESTAT_KERNEL:
        return f"cachestat(2) needs Linux 6.5 or later (this is {platform.release()})"
    try:
        cachestat("/proc/self/exe")
    except OSError as e:
        if e.errno in (errno.ENOSYS,):
            return "cachestat(2) is not available in this kernel"
    return None


def _may_see(path: str) -> bool:
    """The kernel's rule for revealing residency (mm/mincore.c can_do_mincore): owner,
    CAP_FOWNER (root) or write permission."""
    return os.geteuid() == 0 or os.stat(path).st_uid == os.geteuid() or os.access(path, os.W_OK)


@dataclass
class Snapshot:
    cached: int
    evicted: int | None = None  # cachestat nr_evicted
    pages: np.ndarray | None = None  # mincore: per page


class Residency:
    """Pages read by a run from residency before and after it (``method``: cachestat or mincore)."""

    def __init__(self, method: str | None = None):
        self.method = method or ("cachestat" if cachestat_status() is None else "mincore")

    def check(self, path: str) -> str | None:
        """None when this user can read ``path``'s residency, else a one-line reason."""
        if self.method == "cachestat":
            try:
                cachestat(path)
                return None
            except OSError as e:
                if e.errno != errno.EPERM:
                    return f"{path}: cachestat failed ({e.strerror})"
        elif _may_see(path):
            return None
        return (f"{path}: the kernel hides the page-cache residency of files this user can neither write nor "
                f"owns (cachestat EPERM; mincore reports every page resident): copy it into a directory you own, "
                f"or measure as root")

    def snapshot(self, path: str) -> Snapshot:
        if self.method == "cachestat":
            s = cachestat(path)
            return Snapshot(s["nr_cache"], s["nr_evicted"])
        r = cache.residency(path)
        return Snapshot(int(r.sum()), pages=r)

    def pages_read(self, before: Snapshot, after: Snapshot) -> dict:
        """The run's file record: pages read (resident after, not before) and what hints at loss."""
        if after.pages is not None:  # mincore: the pages themselves (a resized file: all resident)
            same = before.pages is not None and len(before.pages) == len(after.pages)
            new = int((after.pages & ~before.pages).sum()) if same else after.cached
        else:
            new = max(0, after.cached - before.cached)
        rec = {"pages_read": new, "bytes_read": new * cache.PAGE, "seeks": None, "resident_after": after.cached,
               "resident_before": before.cached, "estimated": True}
        if after.evicted is not None and before.evicted is not None and after.evicted > before.evicted:
            rec["evicted_during_run"] = after.evicted - before.evicted
        return rec

    def record(self) -> dict:
        """What the results say about the method (metadata.rootless)."""
        return {"method": self.method, "eviction": "posix_fadvise(POSIX_FADV_DONTNEED)",
                "read_ahead_kb": "recorded, not set", "cannot_see": CANNOT_SEE}


def interference(rec: dict) -> str | None:
    """Why an evicted-state run measured without tracing may be wrong (None: nothing seen)."""
    left = rec.get("evict_left") or {}
    for f, x in rec["files"].items():
        if left.get(f):
            return f"{f}: {left[f]} page(s) could not be evicted before the run"
        if x.get("evicted_during_run"):
            return (f"{f}: {x['evicted_during_run']} page(s) evicted during the run (cachestat nr_evicted): pages "
                    f"read and evicted again are not counted")
    return None


def announce(method: str, read_ahead_kb, why: str) -> str:
    """The one line saying a session measures without root, and how."""
    ra = f"read_ahead_kb {read_ahead_kb} recorded, not set" if read_ahead_kb is not None else "read_ahead_kb unknown"
    return (f"measuring without root ({why}): pages read = page-cache residency ({method}) after each run minus "
            f"before, files evicted by posix_fadvise(DONTNEED), {ra}; not seen: pages read and evicted again "
            f"during a run")


def check_files(res: Residency, files: list[str]) -> None:
    """Refuse before measuring when a file's residency is hidden from this user."""
    for f in files:
        why = res.check(f)
        if why:
            raise ElflayoutError(why)


def wanted(plan) -> str | None:
    """Why ``plan`` is measured without root (None: it is not): asked, or not root."""
    if plan.rootless:
        return "--rootless"
    if plan.rootless is None and os.geteuid() != 0:
        return "not root"
    return None


def check_plan(plan) -> None:
    """One-line refusals of what needs root, before anything is touched."""
    why = wanted(plan)
    if why is None:
        return
    if "cold" in plan.states:
        raise ElflayoutError(f"--state cold needs root (drop_caches), and this session measures without root "
                             f"({why}): use the selective state")
    if plan.isolate:
        raise ElflayoutError(f"--isolate needs root (a loop device and mounts); this session measures without root "
                             f"({why})")
    if not plan.files:
        raise ElflayoutError(f"no census without root ({why}: it needs page-cache tracing): name the files with "
                             f"--files")
    check_files(Residency(), plan.files)


def for_plan(plan) -> tuple[Residency | None, str | None]:
    """(the residency method, why rootless) for a rootless plan; (None, None) otherwise."""
    why = wanted(plan)
    return (Residency(), why) if why else (None, None)
