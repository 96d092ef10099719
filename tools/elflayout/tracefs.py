"""Kernel page-cache tracepoints in a private tracefs instance.

Shared by the profiler's trace backend and the measurement harness. Events used:

- ``filemap:mm_filemap_add_to_page_cache``: a folio of 2**order pages inserted into the
  page cache, i.e. read from disk (or created) for (dev, inode) at page ``index``;
- ``filemap:mm_filemap_fault``: a page fault on a file mapping (the touch itself);
- ``filemap:mm_filemap_map_pages``: pages mapped by fault-around without a fault;
- ``filemap:mm_filemap_delete_from_page_cache``: a folio removed from the page cache
  (reclaim, ``posix_fadvise(DONTNEED)``, ``drop_caches``, truncation), whoever removed it.

A private instance (``instances/elflayout-<pid>-<n>``) leaves the global trace buffer
and other users alone; it is removed on exit, on exceptions and on Ctrl-C. The clock is
``mono`` so event times compare with ``time.monotonic()``.

Files are selected in the kernel by an event filter of (device, inode) predicates. The
kernel refuses a filter of a page (4 KiB) or more, about 250 inodes: a longer list is
split over several instances, each with its own buffer and filter, and their events are
merged. Splitting keeps the recorded volume to the files asked for; filtering by device
alone would record every page-cache change of the whole disk (other programs' temporary
files, reclaim) into the same buffers and lose events on a busy machine.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elflayout.errors import ElflayoutError

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = {
    "add": "filemap/mm_filemap_add_to_page_cache",
    "fault": "filemap/mm_filemap_fault",
    "map": "filemap/mm_filemap_map_pages",
    "delete": "filemap/mm_filemap_delete_from_page_cache",
}
_counter = itertools.count()
# Longest filter written: the kernel refuses a write of a page or more (trace_events_filter.c).
FILTER_MAX = 4000

# Structured array of parsed events; kind: 0 add, 1 fault, 2 map, 3 delete.
EVENT_DTYPE = np.dtype([
    ("t", "<f8"), ("kind", "u1"), ("pid", "<i4"), ("dev", "<u4"), ("ino", "<u8"),
    ("page", "<i8"), ("npages", "<i8"),
])
KIND = {"mm_filemap_add_to_page_cache": 0, "mm_filemap_fault": 1, "mm_filemap_map_pages": 2,
        "mm_filemap_delete_from_page_cache": 3}

_LINE = re.compile(
    rb"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[\d+\]\s+\S+\s+(?P<ts>\d+\.\d+): (?P<ev>mm_filemap_\w+): "
    rb"dev[ =](?P<maj>\d+):(?P<min>\d+) ino[ =](?P<ino>[0-9a-f]+) "
    rb"(?:pfn=0x[0-9a-f]+ )?ofs=(?P<ofs>\d+)(?:-(?P<end>\d+))?(?: order=(?P<order>\d+))?"
)


def kdev(st_dev: int) -> int:
    """The kernel's internal dev_t encoding (major << 20 | minor) used by s_dev filters."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


def file_key(path: str | os.PathLike) -> tuple[int, int]:
    """(kernel dev, inode) of a file as tracepoints report them."""
    st = os.stat(path)
    return kdev(st.st_dev), st.st_ino


def tracefs_status() -> str | None:
    """None if tracing is usable, else a sentence saying why not and how to fix it."""
    if os.geteuid() != 0:
        return "page-cache tracing needs root (run as root, or use --backend valgrind / the mincore fallback)"
    if not (TRACEFS / "instances").is_dir():
        try:
            ensure_mounted()
        except ElflayoutError as e:
            return str(e)
    if not (TRACEFS / "events" / EVENTS["add"]).is_dir():
        return "this kernel has no filemap:mm_filemap_add_to_page_cache tracepoint"
    return None


def ensure_mounted() -> None:
    if (TRACEFS / "instances").is_dir():
        return
    r = subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True, text=True)
    if r.returncode != 0 or not (TRACEFS / "instances").is_dir():
        raise ElflayoutError(
            f"tracefs is not mounted at {TRACEFS} and mounting it failed ({r.stderr.strip() or 'no instances dir'}); "
            f"try: mount -t tracefs nodev {TRACEFS}"
        )


def remove_stale_instances() -> list[str]:
    """Remove instances left by elflayout processes that no longer exist (e.g. SIGKILL);
    returns the names removed."""
    inst = TRACEFS / "instances"
    removed: list[str] = []
    if os.geteuid() != 0 or not inst.is_dir():
        return removed
    for d in inst.glob("elflayout-*"):
        try:
            pid = int(d.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                _teardown(d)
                removed.append(d.name)
    return removed


# Instances of this process not yet removed: torn down at interpreter exit too, whatever
# path the exit took (a session object never exited, sys.exit in a callback).
_live: set[Path] = set()


@atexit.register
def _remove_live() -> None:
    for d in list(_live):
        if d.name.startswith(f"elflayout-{os.getpid()}-"):  # not a forked child's copy of the set
            with contextlib.suppress(OSError):
                _teardown(d)
        _live.discard(d)


def _teardown(d: Path) -> None:
    with contextlib.suppress(OSError):
        (d / "tracing_on").write_text("0")
    for ev in EVENTS.values():
        with contextlib.suppress(OSError):
            (d / "events" / ev / "enable").write_text("0")
    os.rmdir(d)


def key_filters(keys, limit: int = FILTER_MAX) -> list[str]:
    """Event filters selecting the (kernel dev, inode) ``keys``, each shorter than ``limit``.

    One device's inodes share its test: ``(s_dev==D&&(i_ino==I||i_ino==J))``; a filter
    is ``||`` of such groups.
    """
    out: list[str] = []
    groups: list[str] = []  # complete groups of the filter being built
    for dev in sorted({d for d, _ in keys}):
        inos = [f"i_ino=={i}" for d, i in sorted(keys) if d == dev]
        while inos:
            take: list[str] = []
            while inos:
                group = f"(s_dev=={dev}&&({'||'.join(take + inos[:1])}))"
                if len("||".join(groups + [group])) >= limit:
                    break
                take.append(inos.pop(0))
            if take:
                groups.append(f"(s_dev=={dev}&&({'||'.join(take)}))")
            elif not groups:
                raise ValueError(f"event filter limit {limit} too small for one predicate")
            else:
                out.append("||".join(groups))
                groups = []
    if groups:
        out.append("||".join(groups))
    return out


@dataclass
class TraceResult:
    events: np.ndarray  # EVENT_DTYPE, in time order
    lost: int  # events the kernel dropped (buffer overrun); > 0 means counts are low

    def of(self, key: tuple[int, int], kind: str | None = None) -> np.ndarray:
        m = (self.events["dev"] == key[0]) & (self.events["ino"] == key[1])
        if kind is not None:
            m &= self.events["kind"] == {"add": 0, "fault": 1, "map": 2, "delete": 3}[kind]
        return self.events[m]


def parse_trace(data: bytes) -> np.ndarray:
    rows = []
    for line in data.splitlines():
        if not line or line[:1] == b"#":
            continue
        m = _LINE.match(line)
        if not m:
            continue
        ofs = int(m["ofs"])
        page = ofs >> 12
        ev = m["ev"].decode()
        if ev == "mm_filemap_map_pages":
            npages = ((int(m["end"]) + 1) >> 12) - page
        elif m["order"] is not None:
            npages = 1 << int(m["order"])
        else:
            npages = 1
        rows.append((float(m["ts"]), KIND.get(ev, 255), int(m["pid"]),
                     (int(m["maj"]) << 20) | int(m["min"]), int(m["ino"], 16), page, npages))
    arr = np.array(rows, dtype=EVENT_DTYPE)
    return arr[np.argsort(arr["t"], kind="stable")]


class TraceSession:
    """Context manager recording page-cache events for some files (or all files).

    >>> with TraceSession(["/usr/lib/x86_64-linux-gnu/libc.so.6"]) as ts:
    ...     subprocess.run(["true"])
    >>> res = ts.result  # TraceResult

    ``files=None`` records every file (the harness's census of what a startup reads).
    """

    def __init__(self, files=None, kinds=("add", "fault"), buffer_kb: int = 65536):
        self.keys = None if files is None else sorted({file_key(f) for f in files})
        self.kinds = tuple(kinds)
        self.buffer_kb = buffer_kb
        self.dir: Path | None = None  # the first instance (the only one without files)
        self.dirs: list[Path] = []
        self.result: TraceResult | None = None
        self._old_term = None

    def __enter__(self) -> "TraceSession":
        why = tracefs_status()
        if why:
            raise ElflayoutError(why)
        remove_stale_instances()
        filters = [None] if self.keys is None else (key_filters(self.keys) or ["0"])
        try:
            for filt in filters:
                self.dirs.append(TRACEFS / "instances" / f"elflayout-{os.getpid()}-{next(_counter)}")
                self.dir = self.dirs[0]
                self._setup(self.dirs[-1], filt)
            for d in self.dirs:
                (d / "tracing_on").write_text("1")
        except OSError as e:
            where = self.dirs[-1] if self.dirs else TRACEFS / "instances"
            self._cleanup()
            raise ElflayoutError(f"cannot set up trace instance {where}: {e}") from None
        # SIGTERM should clean up like Ctrl-C does.
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        return self

    def _setup(self, d: Path, filt: str | None) -> None:
        d.mkdir()
        _live.add(d)
        (d / "buffer_size_kb").write_text(str(self.buffer_kb))
        (d / "trace_clock").write_text("mono")
        for k in self.kinds:
            evdir = d / "events" / EVENTS[k]
            if filt is not None:
                (evdir / "filter").write_text(filt)
            (evdir / "enable").write_text("1")

    def follow(self, pid: int) -> None:
        """Record only ``pid`` and the processes it forks from now on (every instance)."""
        for d in self.dirs:
            (d / "options" / "event-fork").write_text("1")
            (d / "set_event_pid").write_text(str(pid))

    def stop(self) -> TraceResult:
        """Stop recording and parse what was recorded (idempotent)."""
        if self.result is None and self.dirs:
            for d in self.dirs:
                (d / "tracing_on").write_text("0")
            parts, lost = [], 0
            for d in self.dirs:
                parts.append(parse_trace((d / "trace").read_bytes()))
                for stats in (d / "per_cpu").glob("cpu*/stats"):
                    for line in stats.read_text().splitlines():
                        if line.startswith("overrun:") or line.startswith("dropped events:"):
                            lost += int(line.split(":")[1])
            ev = parts[0] if len(parts) == 1 else np.concatenate(parts)
            self.result = TraceResult(ev[np.argsort(ev["t"], kind="stable")], lost)
        return self.result

    def clear(self) -> None:
        """Discard recorded events and start afresh (between runs of one session)."""
        self.result = None
        for d in self.dirs:
            (d / "tracing_on").write_text("0")
            (d / "trace").write_text("")
        for d in self.dirs:
            (d / "tracing_on").write_text("1")

    def _cleanup(self) -> None:
        for d in self.dirs:
            if d.exists():
                with contextlib.suppress(OSError):
                    _teardown(d)
                if d.exists():  # rmdir fails while a reader holds trace_pipe
                    shutil.rmtree(d, ignore_errors=True)
            if not d.exists():
                _live.discard(d)
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None

    def __exit__(self, *exc) -> None:
        try:
            if exc[0] is None:
                self.stop()
        finally:
            self._cleanup()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
