"""``SlowStorage``: a directory served through the emulated slow disk, as a context manager.

    with SlowStorage("/path/to/dir", preset="hdd", read_ahead_kb=128) as mnt:
        run(f"LD_LIBRARY_PATH={mnt.path} llc-16 --version")
        mnt.info(), mnt.stats()

The helper runs in its own session (a terminal Ctrl-C reaches only us, and we unmount in
order) and dies with the thread that started it (PR_SET_PDEATHSIG), so a killed owner
still unmounts; fusermount3's ``auto_unmount`` removes the mount when the helper itself
crashes. Start-up removes stale mounts left by dead owners (:func:`server.cleanup_stale`).
"""

from __future__ import annotations

import itertools
import os
import platform
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from elflayout.errors import ElflayoutError
from elflayout.storage import server
from elflayout.storage.model import PRESETS, DeviceModel, resolve

_seq = itertools.count()
DEFAULT_READ_AHEAD_KB = 128  # what the measure harness sets on the real disk
# SCHED_FIFO priority of the helper (root only): on a busy machine a normal-priority
# sleeper wakes up to milliseconds late, which would add to every modelled latency.
DEFAULT_RT_PRIO = 10


class SlowStorage:
    """Serve ``src_dir`` read-only through FUSE with a slow-device model.

    ``src_dir`` is a directory (served as it is), or a mapping {path in the mount: file}
    to serve chosen files from anywhere under names of your choice, e.g.
    ``{"a/libLLVM-16.so.1": "/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1",
    "b/libLLVM-16.so.1": "build/relinked/libLLVM-16.so.1"}`` -> ``mnt.path_of("a/...")``;
    all of them share the one emulated disk (one queue), as files on one device would.

    ``preset``: one of :data:`model.PRESETS`; ``overrides``: seek_ms, short_seek_ms,
    seek_span_mb, bandwidth_mb_s. ``mountpoint``: where to mount (default a fresh dir
    under /run/elflayout/storage). ``read_ahead_kb``: the mount's bdi read-ahead (None:
    leave the kernel's). ``log``: keep a per-request log (see :meth:`requests`).
    ``max_read_kb``: limit the size of read requests (mount option max_read).
    ``realtime``: SCHED_FIFO priority of the helper when root (None/0: normal).
    """

    def __init__(self, src_dir, preset: str = "hdd", read_ahead_kb: int | None = DEFAULT_READ_AHEAD_KB,
                 mountpoint=None, log: bool = False, max_read_kb: int | None = None,
                 realtime: int | None = DEFAULT_RT_PRIO, **overrides):
        self.files: dict[str, str] | None = None
        if isinstance(src_dir, Mapping):
            self.files = _check_files(src_dir)
            self.src = None  # the symlink farm, made in start()
        else:
            self.src = Path(src_dir).resolve()
            if not self.src.is_dir():
                raise ElflayoutError(f"{src_dir}: not a directory")
        self.preset = preset
        self.model: DeviceModel = resolve(preset, **overrides)
        self.read_ahead_kb_wanted = read_ahead_kb
        if read_ahead_kb is not None and not (0 <= int(read_ahead_kb) <= 1 << 20):
            raise ElflayoutError(f"storage: read_ahead_kb {read_ahead_kb} out of range")
        self.max_read_kb = max_read_kb
        self._user_mnt = Path(mountpoint).absolute() if mountpoint else None
        self._log = log
        self._rt = int(realtime or 0) if os.geteuid() == 0 else 0
        self._proc: subprocess.Popen | None = None
        self._run: Path | None = None
        self._mount: server.Mount | None = None
        self._init: dict = {}
        self._final: tuple | None = None  # (info, stats, requests) snapshot taken by stop()
        self.path: str | None = None

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> "SlowStorage":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "SlowStorage":
        if self._proc is not None:
            raise ElflayoutError(f"storage: already mounted at {self.path}")
        self._final = None
        why = server.fuse_status()
        if why:
            raise ElflayoutError(f"storage: {why}")
        exe = server.helper()
        server.cleanup_stale()
        self._run = server.RUN_BASE / f"{os.getpid()}-{next(_seq)}"
        try:
            self._run.mkdir(parents=True, exist_ok=False)
        except OSError as e:
            raise ElflayoutError(f"{self._run}: cannot create ({e.strerror})") from None
        if self._user_mnt:
            mnt = self._user_mnt
            if server.mount_at(mnt) is not None:
                if server.is_dead(str(mnt)):
                    server.unmount(mnt)
                else:
                    self._cleanup_run()
                    raise ElflayoutError(f"{mnt}: an elflayout storage mount is already active there")
            if not mnt.is_dir():
                self._cleanup_run()
                raise ElflayoutError(f"{mnt}: mount point is not a directory")
        else:
            mnt = self._run / "mnt"
            mnt.mkdir()
        self.path = str(mnt)
        stats = self._run / "stats"
        cmd = [str(exe), *self.model.helper_args(), "--stats", str(stats), "--die-with-parent"]
        if self.files is not None:
            # A farm of symlinks to the chosen files; the helper serves their targets.
            self.src = self._run / "src"
            for rel, orig in self.files.items():
                link = self.src / rel
                link.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(orig, link)
            cmd.append("--follow-symlinks")
        if self._log:
            cmd += ["--log", str(self._run / "log")]
        if self._rt > 0:
            cmd += ["--realtime", str(self._rt)]
        if self.max_read_kb:
            cmd += ["--max-read-kb", str(int(self.max_read_kb))]
        cmd += [str(self.src), self.path]
        # stderr to a file, not a pipe: nobody reads a pipe while serving, and a full one
        # would block the helper.
        with open(self._run / "stderr", "wb") as err:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=err, start_new_session=True)
        try:
            self._mount, self._init = server.wait_ready(self._proc, stats, self.path, self._run / "stderr")
            if self.read_ahead_kb_wanted is not None:
                server.set_read_ahead_kb(self._mount, self.read_ahead_kb_wanted)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Unmount and end the helper (idempotent); lazy unmount if something is busy."""
        if self._run is not None and self._final is None and self._init:
            # keep the figures readable after the mount is gone
            self._final = (self.info(), self.stats(), self.requests() if self._log else None)
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the helper's fuse_unmount runs fusermount3 -uz
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.path and server.mount_at(self.path) is not None:
            server.unmount(self.path, lazy=True)
        self._cleanup_run()

    def _cleanup_run(self) -> None:
        if self._run is not None:
            mnt = self._run / "mnt"
            if server.mount_at(mnt) is None:
                shutil.rmtree(self._run, ignore_errors=True)
            self._run = None

    def path_of(self, rel: str) -> str:
        """Path in the mount of a name of the ``files`` mapping (or of a file of the directory)."""
        if self.path is None:
            raise ElflayoutError("storage: not mounted")
        return os.path.join(self.path, rel)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    # -- what the measure harness records ----------------------------------------------
    def info(self) -> dict:
        """Preset, model parameters, read-ahead and FUSE request limits (for results metadata)."""
        if self._final is not None and self._proc is None:
            return self._final[0]
        init = self._init or {}
        m = self._mount
        max_write = int(init.get("max_write", 0))
        max_pages = min(FUSE_MAX_PAGES(max_write), server.FUSE_MAX_MAX_PAGES) if max_write else None
        max_read = int(init.get("max_read", 0)) or None  # 0: no max_read mount option
        page = os.sysconf("SC_PAGE_SIZE")
        max_request = max_pages * page if max_pages else None
        if max_read and max_request:
            max_request = min(max_request, max_read)
        want = int(init.get("want", 0))
        return {
            "preset": self.preset,
            "description": PRESETS[self.preset][1],
            "params": self.model.params(),
            "model": "latency = seek(distance from previous request end) + size / bandwidth; "
                     "single queue; see docs/storage.md",
            "source": str(self.src) if self.files is None else None,
            "files": dict(self.files) if self.files is not None else None,
            "mount": self.path,
            "read_ahead_kb": server.read_ahead_kb(m) if m else None,
            "max_read": max_read,
            "max_pages": max_pages,
            "max_request_bytes": max_request,
            "fuse": {
                "helper": "tools/slowfs/slowfs (libfuse3, high-level API, single-threaded loop)",
                "libfuse": _libfuse_version(),
                "kernel": platform.release(),
                "proto": f"{init.get('proto_major', 0)}.{init.get('proto_minor', 0)}",
                "bdi": str(server.bdi_of(m)) if m else None,
                "max_readahead": int(init.get("max_readahead", 0)),
                "max_write": max_write,
                "max_background": int(init.get("max_background", 0)) or None,  # None: kernel default
                "async_read": bool(want & server.FUSE_CAP_ASYNC_READ),
                "splice_read": bool(want & server.FUSE_CAP_SPLICE_READ),
                "auto_inval_data": bool(want & server.FUSE_CAP_AUTO_INVAL_DATA),
                "keep_cache": True,
                "realtime_priority": int(init.get("realtime", 0)),
                "direct_io": False,
                "options": m.options if m else None,
            },
        }

    def stats(self) -> dict:
        """Counters since mount: requests, bytes, modelled delay (s), seeks, largest request."""
        if self._final is not None and self._proc is None:
            return self._final[1]
        if self._run is None:
            raise ElflayoutError("storage: not mounted")
        st = server.read_stats(self._run / "stats") or {}
        return {
            "requests": int(st.get("requests", 0)),
            "bytes": int(st.get("bytes", 0)),
            "delay_s": st.get("delay_ns", 0) / 1e9,
            "overrun_s": st.get("overrun_ns", 0) / 1e9,
            "late_credit_s": st.get("late_ns", 0) / 1e9,
            "sequential": int(st.get("sequential", 0)),
            "seeks": int(st.get("seeks", 0)),
            "files_switched": int(st.get("files_switched", 0)),
            "max_request_bytes": int(st.get("max_request", 0)),
            "opens": int(st.get("opens", 0)),
            "errors": int(st.get("errors", 0)),
        }

    def requests(self) -> np.ndarray:
        """Per-request log (server.LOG_DTYPE: t_ns, ino, offset, size, got, latency_ns, done_ns).

        Needs ``log=True``; times are CLOCK_MONOTONIC ns (same clock as time.monotonic_ns).
        """
        if not self._log:
            raise ElflayoutError("storage: request log not enabled (SlowStorage(..., log=True))")
        if self._final is not None and self._proc is None:
            return self._final[2]
        if self._run is None:
            raise ElflayoutError("storage: not mounted")
        return server.read_log(self._run / "log")

    def __repr__(self) -> str:
        what = str(self.src) if self.files is None else f"{len(self.files)} file(s)"
        return f"SlowStorage({what!r} -> {self.path!r}, {self.preset}: {self.model.describe()})"


def _check_files(mapping: Mapping) -> dict[str, str]:
    out = {}
    for rel, orig in mapping.items():
        r = Path(str(rel))
        if r.is_absolute() or not r.parts or ".." in r.parts or str(r) in (".", ""):
            raise ElflayoutError(f"{rel}: a name in the mount must be a relative path without '..'")
        o = Path(orig)
        if not o.is_file():
            raise ElflayoutError(f"{orig}: not a regular file")
        out[str(r)] = str(o.resolve())
    names = sorted(out)
    for a, b in zip(names, names[1:]):
        if b.startswith(a + "/"):
            raise ElflayoutError(f"{a}: is both a file and a directory in the mount")
    if not out:
        raise ElflayoutError("storage: no files to serve")
    return out


def FUSE_MAX_PAGES(max_write: int) -> int:
    """max_pages libfuse asks for in its INIT reply: (max_write - 1) / page + 1."""
    page = os.sysconf("SC_PAGE_SIZE")
    return (max_write - 1) // page + 1


def _libfuse_version() -> str | None:
    try:
        r = subprocess.run(["pkg-config", "--modversion", "fuse3"], capture_output=True, text=True, timeout=5)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
