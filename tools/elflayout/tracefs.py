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
"""

from __future__ import annotations

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


def remove_stale_instances() -> None:
    """Remove instances left by elflayout processes that no longer exist (e.g. SIGKILL)."""
    inst = TRACEFS / "instances"
    if not inst.is_dir():
        return
    for d in inst.glob("elflayout-*"):
        try:
            pid = int(d.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                _teardown(d)


def _teardown(d: Path) -> None:
    with contextlib.suppress(OSError):
        (d / "tracing_on").write_text("0")
    for ev in EVENTS.values():
        with contextlib.suppress(OSError):
            (d / "events" / ev / "enable").write_text("0")
    os.rmdir(d)


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


FILTER_MAX = 4096  # an event filter is written in one write(2) of less than a page (kernel/trace/trace_events.c)


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
        self.dir: Path | None = None
        self.result: TraceResult | None = None
        self.by_device = False
        self._old_term = None

    def __enter__(self) -> "TraceSession":
        why = tracefs_status()
        if why:
            raise ElflayoutError(why)
        remove_stale_instances()
        self.dir = TRACEFS / "instances" / f"elflayout-{os.getpid()}-{next(_counter)}"
        try:
            self.dir.mkdir()
            (self.dir / "buffer_size_kb").write_text(str(self.buffer_kb))
            (self.dir / "trace_clock").write_text("mono")
            filt = "0"
            if self.keys is not None:
                filt = " || ".join(f"(s_dev == {d} && i_ino == {i})" for d, i in self.keys) or "0"
                self.by_device = len(filt) >= FILTER_MAX  # the kernel takes less than a page: stop() sorts
                if self.by_device:
                    filt = " || ".join(f"s_dev == {d}" for d in sorted({d for d, _ in self.keys}))
            for k in self.kinds:
                evdir = self.dir / "events" / EVENTS[k]
                if self.keys is not None:
                    (evdir / "filter").write_text(filt)
                (evdir / "enable").write_text("1")
            (self.dir / "tracing_on").write_text("1")
        except OSError as e:
            self._cleanup()
            raise ElflayoutError(f"cannot set up trace instance {self.dir}: {e}") from None
        # SIGTERM should clean up like Ctrl-C does.
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        return self

    def stop(self) -> TraceResult:
        """Stop recording and parse what was recorded (idempotent)."""
        if self.result is None and self.dir is not None:
            (self.dir / "tracing_on").write_text("0")
            data = (self.dir / "trace").read_bytes()
            lost = 0
            for stats in (self.dir / "per_cpu").glob("cpu*/stats"):
                for line in stats.read_text().splitlines():
                    if line.startswith("overrun:") or line.startswith("dropped events:"):
                        lost += int(line.split(":")[1])
            ev = parse_trace(data)
            if self.keys is not None and self.by_device:  # the kernel filtered by device only
                keys = np.array(self.keys, np.int64)
                ev = ev[np.isin(ev["dev"].astype(np.int64) * (1 << 40) + ev["ino"].astype(np.int64),
                                keys[:, 0] * (1 << 40) + keys[:, 1])]
            self.result = TraceResult(ev, lost)
        return self.result

    def clear(self) -> None:
        """Discard recorded events and start afresh (between runs of one session)."""
        self.result = None
        (self.dir / "tracing_on").write_text("0")
        (self.dir / "trace").write_text("")
        (self.dir / "tracing_on").write_text("1")

    def _cleanup(self) -> None:
        if self.dir is not None and self.dir.exists():
            with contextlib.suppress(OSError):
                _teardown(self.dir)
            if self.dir.exists():  # rmdir fails while a reader holds trace_pipe
                shutil.rmtree(self.dir, ignore_errors=True)
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
