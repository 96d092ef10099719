"""trace backend: page-granularity first touches at native speed (kernel tracepoints).

A private tracefs instance (``elflayout.tracefs.TraceSession``) records, for the targets'
(device, inode) only, ``mm_filemap_fault`` (a page of a target mapping touched without
being mapped yet: kind "t"), ``mm_filemap_add_to_page_cache`` (pages read from disk:
the "reads" list, with the folio size) and ``mm_filemap_map_pages`` (the "windows" list:
a fault was served by mapping cached pages around it, so some page of the window was
touched first then). Fault-around and read-ahead hide first touches:
a page mapped around an earlier fault, or already present, is touched with no event.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass

import numpy as np

from elflayout.errors import ElflayoutError
from elflayout.profile.model import EVENT_DTYPE, workload_path
from elflayout.tracefs import TraceSession, file_key, tracefs_status

HIDDEN_NOTE = ("trace backend: fault-around (the kernel maps up to fault_around_bytes of cached pages "
               "around each fault, without a filemap_fault event) and read-ahead hide first touches: 'pages' "
               "(kind t) lists only the pages whose first touch reached filemap_fault, 'windows' the "
               "fault-around ranges in the order they were mapped (a first touch happened somewhere inside), "
               "'reads' the pages read from disk (folio by folio)")


def status() -> str | None:
    why = tracefs_status()
    if why:
        return f"{why}; or profile with --backend valgrind"
    return None


def evict(path: str) -> None:
    """Drop one file's pages from the page cache (posix_fadvise DONTNEED)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)  # dirty pages (a freshly written file) are not dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@dataclass
class Run:
    events: np.ndarray
    returncode: int
    duration_s: float
    pid: int
    lost: int
    mapped_pages: dict  # target index -> pages mapped by fault-around
    other_pid_events: int
    command: list[str]


def _follow_children(ts, pid: int) -> None:
    """Let the kernel record only ``pid`` and the processes it forks (set_event_pid + event-fork)."""
    ts.follow(pid)


def _run_gated(exe, argv, env, stdout, stderr, before_exec) -> tuple[int, int]:
    """fork; the child waits until ``before_exec(pid)`` ran in the parent, then execs.
    (subprocess.Popen cannot do this: it waits for the exec itself.) Returns (pid, status)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only async-signal-safe-ish calls, then exec
        try:
            os.close(w)
            os.read(r, 1)
            os.close(r)
            for fd, tgt in ((1, stdout), (2, stderr)):
                if tgt == subprocess.DEVNULL:
                    tgt = os.open(os.devnull, os.O_WRONLY)
                if isinstance(tgt, int) and tgt >= 0:
                    os.dup2(tgt, fd)
                elif tgt is not None and hasattr(tgt, "fileno"):
                    os.dup2(tgt.fileno(), fd)
            os.execve(exe, [exe, *argv[1:]], env if env is not None else os.environ)
        finally:
            os._exit(127)
    os.close(r)
    try:
        before_exec(pid)
    finally:
        os.write(w, b"g")
        os.close(w)
    _, status = os.waitpid(pid, 0)
    return pid, os.waitstatus_to_exitcode(status)


def run(targets: list[str], argv: list[str], *, evict_first: bool = False, stdout=None, stderr=None,
        env=None, children: bool = False) -> Run:
    why = status()
    if why:
        raise ElflayoutError(why)
    exe = workload_path(argv[0])
    keys = {file_key(t): i for i, t in enumerate(targets)}
    if evict_first:
        for t in targets:
            evict(t)
    with TraceSession(targets, kinds=("add", "fault", "map")) as ts:
        t0 = time.monotonic()
        if children:
            pid, rc = _run_gated(exe, argv, env, stdout, stderr, lambda pid: _follow_children(ts, pid))
        else:
            try:
                p = subprocess.Popen([exe, *argv[1:]], stdout=stdout, stderr=stderr, env=env)
            except OSError as e:
                raise ElflayoutError(f"{argv[0]}: cannot run: {e.strerror}") from None
            pid, rc = p.pid, p.wait()
        dt = time.monotonic() - t0
    res = ts.result
    e = res.events
    # Only the workload's own process (and with children, its descendants, filtered by the
    # kernel): other programs may map the same library meanwhile.
    mine = np.ones(e.size, dtype=bool) if children else e["pid"] == pid
    other = int((~mine).sum())
    e = e[mine]
    tgt = np.full(e.size, -1, dtype=np.int16)
    for (dev, ino), i in keys.items():
        tgt[(e["dev"] == dev) & (e["ino"] == ino)] = i
    e, tgt = e[tgt >= 0], tgt[tgt >= 0]
    mapped = {}
    for i in range(len(targets)):
        m = (tgt == i) & (e["kind"] == 2)
        mapped[i] = int(e["npages"][m].sum())
    ev = np.zeros(e.size, dtype=EVENT_DTYPE)
    ev["seq"] = np.arange(e.size)
    ev["t"] = e["t"] - t0
    # t: fault on one page; a: pages added (read); m: fault-around window mapped (a touch inside it)
    ev["kind"] = np.choose(e["kind"].astype(np.int64), [b"a", b"t", b"m"]).astype("S1")
    ev["target"] = tgt
    ev["offset"] = e["page"] * 4096
    ev["length"] = np.where(e["kind"] == 1, 4096, e["npages"] * 4096)
    return Run(ev, rc, dt, pid, res.lost, mapped, other, [exe, *argv[1:]])
