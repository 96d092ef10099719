"""Serve the files under test from a private block device (``measure --isolate``).

On a shared machine another process may set the disk's ``read_ahead_kb`` or evict and
read the files under test; every such run is disturbed. Isolation takes the files out
of reach:

1. the harness thread enters a private mount namespace (``unshare(CLONE_NEWNS)``,
   everything made private): mounts made here are seen by the measured programs (its
   children) and by no other process;
2. an ext4 image on the same disk as the files (``mkfs.ext4``, no journal), attached to a
   loop device by ``mount -o loop`` (which sets ``autoclear``: the device detaches when
   its mount goes), the files copied in, the file system remounted read-only, the loop
   switched to direct I/O (reads go to the disk, not to the page cache of the image);
3. the image is unlinked at once (the loop keeps it open: its space is freed when the
   device detaches), and each copy is bind-mounted over its original path.

The programs see the same paths; the page counts are those of the loop device, whose
``read_ahead_kb`` belongs to this session (``controls.ReadAhead`` finds the device from
the files, as for a disk). Teardown on every exit (return, exception, Ctrl-C, SIGTERM
while set up): bind mounts and the file system unmounted, the thread returned to the
original namespace. A SIGKILL ends the namespace with the process: the kernel unmounts,
the loop detaches, the unlinked image is freed; only the empty mount point in the run
directory is left, removed by the next isolation.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from elflayout.controls import block_device_dir, run_dir
from elflayout.errors import ElflayoutError
from elflayout.procs import pid_alive

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x1, 0x20, 0x1000, 0x4000, 0x40000
MNT_DETACH = 0x2
LOOP_SET_DIRECT_IO = 0x4C08  # include/uapi/linux/loop.h
BLOCK = 4096
# ext4 needs room beyond the data: inode tables, bitmaps, one block per directory.
FS_SLACK_BYTES = 16 << 20
FS_SLACK_FRACTION = 0.05
METHOD = ("loop device over an ext4 image on the same disk (direct I/O), files bind-mounted over their paths in "
          "a private mount namespace")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise ElflayoutError(f"--isolate: {what}: {os.strerror(e)}")


def _mount(src, dst, flags: int, what: str) -> None:
    _check(_libc.mount(src and os.fsencode(src), os.fsencode(dst), None, flags, None), what)


def check_plan(plan) -> None:
    """One-line refusals before anything is touched."""
    if not plan.isolate:
        return
    if os.geteuid() != 0:
        raise ElflayoutError("--isolate needs root (a loop device and mounts)")
    if plan.storage:
        raise ElflayoutError("--isolate and --storage both serve the files: choose one")
    if shutil.which("mkfs.ext4") is None:
        raise ElflayoutError("--isolate needs mkfs.ext4 (Debian package e2fsprogs)")


def image_dir(files: list[str]) -> Path:
    """Where the image goes: a writable directory on the files' file system if one is
    known (the same disk, so the device differs only in its queue), else the cache."""
    from elflayout.targets import cache_dir

    dev = os.stat(files[0]).st_dev
    for d in (cache_dir() / "isolate", Path("/var/tmp"), Path("/tmp")):
        with contextlib.suppress(OSError):
            d.mkdir(parents=True, exist_ok=True)
            if os.stat(d).st_dev == dev and os.access(d, os.W_OK):
                return d
    d = cache_dir() / "isolate"
    d.mkdir(parents=True, exist_ok=True)
    return d


def cleanup_stale() -> list[str]:
    """Mount points and images left by isolations that died (SIGKILL); one line each."""
    out = []
    pat = re.compile(r"^isolate-(\d+)(\.img)?$")
    dirs = [run_dir()]
    with contextlib.suppress(ElflayoutError, OSError):
        from elflayout.targets import cache_dir

        dirs += [cache_dir() / "isolate", Path("/var/tmp"), Path("/tmp")]
    for d in dirs:
        for p in d.glob("isolate-*") if d.is_dir() else []:
            m = pat.match(p.name)
            if not m or pid_alive(int(m.group(1))):
                continue
            with contextlib.suppress(OSError):
                if p.is_dir():
                    for sub in p.iterdir():
                        sub.rmdir()
                    p.rmdir()
                else:
                    p.unlink()
                out.append(str(p))
    return out


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


class Isolation(contextlib.AbstractContextManager):
    """The files under test served from a private loop device at their own paths."""

    def __init__(self, files: list[str], emit: Callable[[str, dict], None] | None = None):
        self.files = list(dict.fromkeys(os.path.realpath(f) for f in files))
        self.emit = emit or (lambda kind, info: None)
        self.device = None
        self.direct_io = None
        self.binds: list[str] = []
        self._ns = None
        self._work = None
        self._mnt = None
        self._image = None
        self._old_term = None
        self.setup_s = None

    def __enter__(self):
        t = time.monotonic()
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            self.stale = cleanup_stale()
            self._enter_namespace()
            self._make_device()
            self._bind()
        except BaseException:
            self.close()
            raise
        self.setup_s = round(time.monotonic() - t, 3)
        return self

    def _enter_namespace(self):
        self._ns = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _mount(None, "/", MS_REC | MS_PRIVATE, "making the private namespace's mounts private")

    def _make_device(self):
        sizes = [os.stat(f).st_size for f in self.files]
        data = sum(-(-s // BLOCK) * BLOCK for s in sizes) + BLOCK * len(self.files)
        size = -(-int(data * (1 + FS_SLACK_FRACTION) + FS_SLACK_BYTES) // BLOCK) * BLOCK
        d = image_dir(self.files)
        free = shutil.disk_usage(d).free
        if free < size:
            raise ElflayoutError(f"--isolate: {d}: {free >> 20} MiB free, the image needs {size >> 20} MiB")
        self.image_dir = str(d)
        self.image_bytes = size
        self._image = d / f"isolate-{os.getpid()}.img"
        with open(self._image, "xb") as f:
            f.truncate(size)
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-b", str(BLOCK), "-O", "^has_journal", "-E", "nodiscard",
              "-L", "elflayout", str(self._image)], "mkfs.ext4")
        self._work = run_dir() / f"isolate-{os.getpid()}"
        self._mnt = self._work / "mnt"
        self._mnt.mkdir(parents=True, exist_ok=True)
        _run(["mount", "-o", "loop,noatime", str(self._image), str(self._mnt)], "mount -o loop")
        dev = block_device_dir(self._mnt)
        self.device = dev.name if dev else None
        self.autoclear = _read(dev / "loop" / "autoclear") == "1" if dev else False
        self.disk = getattr(block_device_dir(self._image), "name", None)
        self.served = {}
        for i, f in enumerate(self.files):
            dst = self._mnt / str(i) / os.path.basename(f)
            dst.parent.mkdir()
            shutil.copy2(f, dst)
            st = os.stat(f)
            os.chown(dst, st.st_uid, st.st_gid)
            self.served[f] = str(dst)
        os.sync()
        _mount(None, str(self._mnt), MS_REMOUNT | MS_RDONLY, "remounting the image read-only")
        self.direct_io = self._direct_io(dev)
        if self.autoclear:  # the loop holds it open; freed when the device detaches
            self._image.unlink()
            self._image = None

    def _direct_io(self, dev) -> bool:
        """Loop reads straight from the disk (not the image's page cache); drop the
        image's cached pages, written during the copy."""
        if dev is None:
            return False
        ok = False
        with contextlib.suppress(OSError):
            fd = os.open(f"/dev/{dev.name}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                fcntl.ioctl(fd, LOOP_SET_DIRECT_IO, 1)
            finally:
                os.close(fd)
        ok = _read(dev / "loop" / "dio") == "1"
        with contextlib.suppress(OSError):
            fd = os.open(self._image, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        return ok

    def _bind(self):
        for f, src in self.served.items():
            _mount(src, f, MS_BIND, f"bind mount of the private copy over {f}")
            self.binds.append(f)
        self.emit("note", {"message": f"isolated: {len(self.binds)} file(s) served from {self.device} (an ext4 image "
                                      f"on {self.disk}, direct I/O {'on' if self.direct_io else 'off'}) at their own "
                                      f"paths, in a private mount namespace"})

    def close(self) -> None:
        """Undo everything set up, in reverse; safe to call on a partial setup."""
        errors = []
        while self.binds:
            f = self.binds.pop()
            if _libc.umount2(os.fsencode(f), MNT_DETACH) != 0:
                errors.append(f"umount {f}: {os.strerror(ctypes.get_errno())}")
        if self._mnt is not None and os.path.ismount(self._mnt):
            if _libc.umount2(os.fsencode(str(self._mnt)), MNT_DETACH) != 0:
                errors.append(f"umount {self._mnt}: {os.strerror(ctypes.get_errno())}")
        if self._ns is not None:
            if _libc.setns(self._ns, CLONE_NEWNS) != 0:
                errors.append(f"setns back to the original mount namespace: {os.strerror(ctypes.get_errno())}")
            os.close(self._ns)
            self._ns = None
        for p in (self._mnt, self._work):
            if p is not None:
                with contextlib.suppress(OSError):
                    p.rmdir()
        if self._image is not None:
            if self.device and not self.autoclear:
                subprocess.run(["losetup", "-d", f"/dev/{self.device}"], capture_output=True)
            self._image.unlink(missing_ok=True)
            self._image = None
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None
        if errors:
            raise ElflayoutError("--isolate: could not undo: " + "; ".join(errors))

    def __exit__(self, *exc):
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)  # restoring matters more
        try:
            self.close()
        finally:
            signal.signal(signal.SIGINT, old_int)
        return False

    def record(self) -> dict:
        """The results' ``metadata.isolation``."""
        return {"method": METHOD, "device": self.device, "disk": self.disk, "image_dir": self.image_dir,
                "image_bytes": self.image_bytes, "fs": "ext4", "direct_io": self.direct_io,
                "autoclear": self.autoclear, "setup_s": self.setup_s,
                "served": {f: f"{self.device}:{os.path.relpath(p, self._mnt)}" for f, p in self.served.items()}}


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def _run(argv: list[str], what: str) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr or r.stdout).strip().splitlines()
        raise ElflayoutError(f"--isolate: {what} failed (exit {r.returncode})" + (f": {last[-1]}" if last else ""))
