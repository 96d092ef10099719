"""The FUSE helper process (tools/slowfs/slowfs) and the kernel side of its mounts.

- :func:`helper` finds (or builds) the C helper;
- :func:`read_stats` / :func:`read_log` decode its shared counters and request log;
- :func:`fuse_mounts`, :func:`bdi_of`, :func:`unmount` and :func:`cleanup_stale` deal
  with /proc/self/mountinfo, /sys/class/bdi and fusermount3.

Our mounts are recognisable by their type ``fuse.elflayout`` (fsname ``elflayout-slowfs``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elflayout.errors import ElflayoutError
from elflayout.procs import pid_alive

FSTYPE = "fuse.elflayout"
FSNAME = "elflayout-slowfs"
SLOWFS_DIR = Path(__file__).resolve().parents[2] / "slowfs"
# Per-mount state of the Python API: RUN_BASE/<owner pid>-<n>/{mnt,stats,log}.
def _run_base() -> Path:
    if os.environ.get("ELFLAYOUT_STORAGE_RUN"):
        return Path(os.environ["ELFLAYOUT_STORAGE_RUN"])
    if os.geteuid() == 0:
        return Path("/run/elflayout/storage")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    return Path(xdg) / "elflayout" / "storage" if xdg else Path(f"/tmp/elflayout-storage-{os.getuid()}")


RUN_BASE = _run_base()

# struct slowfs_stats in tools/slowfs/slowfs.c (keep in sync).
_STATS = struct.Struct("<QII Q II IIII II dddd QQQQ QQQQ QQ II Q")
_STATS_FIELDS = ("magic", "version", "ready", "pid", "proto_major", "proto_minor", "max_read", "max_readahead",
                 "max_write", "max_background", "capable", "want", "seek_s", "short_seek_s", "seek_span",
                 "bandwidth", "requests", "bytes", "delay_ns", "overrun_ns", "sequential", "seeks",
                 "files_switched", "max_request", "opens", "errors", "realtime", "pad", "late_ns")
MAGIC = 0x53464C4F57465331
# struct slowfs_rec: one per read request in the --log file.
LOG_DTYPE = np.dtype([("t_ns", "<u8"), ("ino", "<u8"), ("offset", "<u8"), ("size", "<u4"), ("got", "<u4"),
                      ("latency_ns", "<u8"), ("done_ns", "<u8")])
FUSE_CAP_ASYNC_READ = 1 << 0
FUSE_CAP_SPLICE_READ = 1 << 9
FUSE_CAP_AUTO_INVAL_DATA = 1 << 12
FUSE_MAX_MAX_PAGES = 256  # libfuse's buffer size limit and the kernel's default max_pages_limit


def helper() -> Path:
    """Path of the slowfs binary; built with make on first use (bootstrap does it too)."""
    env = os.environ.get("ELFLAYOUT_SLOWFS")
    if env:
        p = Path(env)
        if not os.access(p, os.X_OK):
            raise ElflayoutError(f"{p}: ELFLAYOUT_SLOWFS is not an executable")
        return p
    exe = SLOWFS_DIR / "slowfs"
    src = SLOWFS_DIR / "slowfs.c"
    if exe.exists() and (not src.exists() or exe.stat().st_mtime >= src.stat().st_mtime):
        return exe
    if not src.exists():
        raise ElflayoutError(f"{exe}: slowfs helper missing (and no source to build it)")
    if shutil.which("make") is None or shutil.which("pkg-config") is None:
        raise ElflayoutError(f"{exe}: not built; needs make, pkg-config and libfuse3-dev (run: make bootstrap)")
    with open(SLOWFS_DIR / ".build.lock", "w") as lock:  # concurrent first uses build once
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run(["make", "-s", "-C", str(SLOWFS_DIR)], capture_output=True, text=True)
    if r.returncode != 0 or not exe.exists():
        last = (r.stderr.strip().splitlines() or ["make failed"])[-1]
        raise ElflayoutError(f"{exe}: build failed ({last}); is libfuse3-dev installed? (make bootstrap)")
    return exe


def fuse_status() -> str | None:
    """None when FUSE mounts can work here, else the reason."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (no FUSE in this kernel or container)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not accessible"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian package fuse3; run: make bootstrap)"
    return None


def read_stats(path: str | os.PathLike) -> dict | None:
    """The helper's counters, or None while it has not written them yet."""
    try:
        with open(path, "rb") as f:
            raw = f.read(_STATS.size)
    except FileNotFoundError:
        return None
    if len(raw) < _STATS.size:
        return None
    d = dict(zip(_STATS_FIELDS, _STATS.unpack(raw)))
    if d["magic"] != MAGIC:
        return None
    return d


def read_log(path: str | os.PathLike) -> np.ndarray:
    """Request log records (LOG_DTYPE); a partly written last record is dropped."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return np.zeros(0, dtype=LOG_DTYPE)
    n = len(raw) // LOG_DTYPE.itemsize
    return np.frombuffer(raw[: n * LOG_DTYPE.itemsize], dtype=LOG_DTYPE).copy()


@dataclass
class Mount:
    mount_id: int
    dev: str  # "0:NN"
    path: str
    fstype: str
    source: str
    options: str


def _unescape(s: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 4 <= len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def fuse_mounts(fstype: str = FSTYPE) -> list[Mount]:
    """Mounts of the given type in this mount namespace (ours by default)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.rstrip("\n").partition(" - ")
            a, b = left.split(), right.split()
            if len(a) < 5 or len(b) < 3:
                continue
            if b[0] == fstype:
                out.append(Mount(int(a[0]), a[2], _unescape(a[4]), b[0], _unescape(b[1]), b[2]))
    return out


def mount_at(path: str | os.PathLike) -> Mount | None:
    p = os.path.abspath(path)
    found = [m for m in fuse_mounts() if m.path == p]
    return found[-1] if found else None


def bdi_of(mount: Mount) -> Path:
    """/sys/class/bdi/<major:minor> of a FUSE mount (its read_ahead_kb lives there)."""
    return Path("/sys/class/bdi") / mount.dev


def read_ahead_kb(mount: Mount) -> int | None:
    try:
        return int((bdi_of(mount) / "read_ahead_kb").read_text())
    except OSError:
        return None


def set_read_ahead_kb(mount: Mount, kb: int) -> int:
    """Set the mount's read-ahead (the bdi is private to the mount: nothing to restore)."""
    f = bdi_of(mount) / "read_ahead_kb"
    if read_ahead_kb(mount) == int(kb):
        return int(kb)  # FUSE starts at 128 KiB: nothing to write (and no root needed)
    try:
        f.write_text(str(int(kb)))
    except OSError as e:
        raise ElflayoutError(f"{f}: cannot set read_ahead_kb to {kb} ({e.strerror}; needs root)") from None
    got = read_ahead_kb(mount)
    if got is None:
        raise ElflayoutError(f"{f}: cannot read back read_ahead_kb")
    return got


def is_dead(path: str) -> bool:
    """True when the mount's server is gone (the kernel answers ENOTCONN)."""
    try:
        os.stat(path)
    except OSError as e:
        return e.errno in (errno.ENOTCONN, errno.ECONNABORTED)
    return False


def unmount(path: str | os.PathLike, lazy: bool = True, timeout: float = 5.0) -> bool:
    """Unmount a FUSE mount (fusermount3 -u[z], falling back to umount -l); True when gone."""
    p = os.path.abspath(path)
    flags = "-uz" if lazy else "-u"
    cmds = [["fusermount3", flags, "-q", "--", p]]
    if os.geteuid() == 0:
        cmds.append(["umount", "-l", p] if lazy else ["umount", p])
    for cmd in cmds:
        if mount_at(p) is None:
            return True
        if shutil.which(cmd[0]) is None:
            continue
        subprocess.run(cmd, capture_output=True, timeout=timeout)
    return mount_at(p) is None


def cleanup_stale(base: Path = RUN_BASE) -> list[str]:
    """Unmount our dead mounts and remove run dirs of dead owners; return what was cleaned.

    Stale = a ``fuse.elflayout`` mount whose server is gone (ENOTCONN), or a mount under
    ``base`` whose owner process (the pid in the dir name) no longer exists. Mounts of
    live owners are left alone: other sessions may be using them.
    """
    cleaned = []
    for m in fuse_mounts():
        owner = _owner_of(m.path, base)
        if is_dead(m.path) or (owner is not None and not pid_alive(owner)):
            if unmount(m.path, lazy=True):
                cleaned.append(m.path)
    if base.is_dir():
        for d in base.iterdir():
            owner = _owner_of(str(d / "mnt"), base)
            if owner is None or pid_alive(owner):
                continue
            if mount_at(d / "mnt") is not None:
                continue
            shutil.rmtree(d, ignore_errors=True)
            cleaned.append(str(d))
    return cleaned


def _owner_of(path: str, base: Path) -> int | None:
    try:
        rel = Path(path).relative_to(base)
    except ValueError:
        return None
    head = rel.parts[0] if rel.parts else ""
    pid = head.split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def wait_ready(proc: subprocess.Popen, stats_path: Path, mnt: str, stderr_path: Path | None = None,
               timeout: float = 10.0) -> tuple[Mount, dict]:
    """Wait until the helper answered FUSE_INIT and the mount is visible."""
    deadline = time.monotonic() + timeout
    while True:
        rc = proc.poll()
        if rc is not None:
            try:
                err = stderr_path.read_text(errors="replace").strip() if stderr_path else ""
            except OSError:
                err = ""
            last = err.splitlines()[-1] if err else f"exit status {rc}"
            raise ElflayoutError(f"{mnt}: slowfs failed to mount: {last}")
        st = read_stats(stats_path)
        m = mount_at(mnt)
        if st and st["ready"] and m is not None:
            os.stat(mnt)  # blocks until the kernel has processed the INIT reply
            return m, st
        if time.monotonic() > deadline:
            raise ElflayoutError(f"{mnt}: slowfs did not come up within {timeout:g} s")
        time.sleep(0.01)
