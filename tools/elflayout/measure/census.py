"""Which files does a startup read? (Hommey's list for the selectively-cold state.)

One run is traced with every file recorded (``TraceSession(None)``, limited to our
process tree) and page-cache insertions are grouped by (device, inode):

- method ``drop``: caches are dropped first (sync + drop_caches), so every file the
  startup needs is read and seen. Used when the cold state is measured anyway.
- method ``evict`` (default, gentler on a shared machine): a first, warm run is traced
  for faults and fault-around mappings, which reveals every *mapped* file even when it
  is cached; those files are evicted and a second run is traced for reads. Files that
  are only ``read()`` and already cached are missed by this method; say ``--census drop``
  to catch them too.

Inodes are turned into paths without racing the process (its /proc/PID/maps vanish when
it exits): first by stat-ing likely candidates (the command's words, its executable and
``ldd`` dependencies, library and /etc directories), then, for what is left, with one
``find MOUNTPOINT -xdev -inum ...`` per device. What still has no name is listed as
``dev:ino``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np

from elflayout.measure import cache
from elflayout.measure.runner import _enable_pid_filter, child_events, open_session
from elflayout.tracefs import kdev

SCAN_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib", "/lib64", "/etc",
             "/usr/lib/locale", "/usr/lib/x86_64-linux-gnu/gconv", "/usr/share/locale")
FIND_TIMEOUT = 180


def _mounts() -> dict[int, str]:
    """kernel dev -> a mount point of it (from /proc/self/mountinfo)."""
    out = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        maj, mnr = map(int, f[2].split(":"))
        out.setdefault((maj << 20) | mnr, f[4].replace("\\040", " "))
    return out


def candidates(command: str, env: dict) -> list[str]:
    words = [w.split("=", 1)[-1] for w in shlex.split(command, posix=True)] if command else []
    paths = set()
    for w in words:
        for part in w.split(":"):
            if part.startswith("/"):
                paths.add(part)
        exe = shutil.which(w, path=env.get("PATH", os.defpath)) if w and "/" not in w else None
        if exe:
            paths.add(exe)
    for p in list(paths):
        if os.path.isfile(p):
            try:
                r = subprocess.run(["ldd", p], capture_output=True, text=True, timeout=20)
                for line in r.stdout.splitlines():
                    if "=>" in line and "/" in line.split("=>")[1]:
                        paths.add(line.split("=>")[1].split()[0])
                    elif line.strip().startswith("/"):
                        paths.add(line.split()[0])
            except (OSError, subprocess.TimeoutExpired):
                pass
    dirs = list(SCAN_DIRS) + [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += [os.path.dirname(p) for p in paths]
    for d in dirs:
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.is_file():
                        paths.add(e.path)
        except OSError:
            pass
        if os.path.isdir(d):
            paths.add(d)
    return sorted(paths)


def resolve(keys: set[tuple[int, int]], command: str, env: dict,
            changed_before: float | None = None) -> dict[tuple[int, int], str]:
    """(kernel dev, ino) -> path, see module docstring.

    ``changed_before``: the wall-clock end of the traced run. A file whose inode changed
    status after it is not taken: a temporary file of the run was deleted and its inode
    number recycled for a file that did not exist during the run.
    """
    def fresh(st) -> bool:
        return changed_before is None or st.st_ctime <= changed_before

    def take(path: str, wanted: set, name: str) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return
        k = (kdev(st.st_dev), st.st_ino)
        if k in wanted and k not in found and fresh(st):
            found[k] = name

    found: dict[tuple[int, int], str] = {}
    for p in candidates(command, env) + ["/etc/ld.so.cache"]:
        take(p, keys, os.path.realpath(p))
    left = keys - set(found)
    mounts = _mounts()
    for dev in sorted({d for d, _ in left}):
        mp = mounts.get(dev)
        inos = sorted(i for d, i in left if d == dev)
        if not mp or not inos:
            continue
        expr = []
        for i in inos:
            expr += ["-inum", str(i), "-o"]
        try:
            r = subprocess.run(["find", mp, "-xdev", "(", *expr[:-1], ")", "-print"], capture_output=True, text=True,
                               timeout=FIND_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in r.stdout.splitlines():
            take(line, left, line)
    return found


def _traced_run(runner, variant, kinds):
    with contextlib.ExitStack() as stack:
        ts = open_session(stack, kinds)
        _enable_pid_filter(ts)
        ts.clear()
        m = runner.spawn(variant)
        res = ts.stop()
    return m, res


def users_of(paths) -> dict[str, list[tuple[int, str]]]:
    """path -> [(pid, comm)] of the running processes that map it or hold it open.

    One scan of /proc/*/maps and /proc/*/fd. DONTNEED never drops mapped pages, and
    an open file may be read at any time: evicting such a file before each run measures
    the neighbours, so the census leaves these files resident (Hommey's selectively
    cold state: the application's own files cold, the system's warm).
    """
    want = {}
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        want[(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)] = p
    out: dict[str, list[tuple[int, str]]] = {}
    if not want:
        return out
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        pid = int(d.name)
        hits = set()
        try:
            for line in (d / "maps").read_text().splitlines():
                f = line.split(None, 5)
                if len(f) >= 5 and f[4] != "0":
                    maj, mnr = f[3].split(":")
                    k = (int(maj, 16), int(mnr, 16), int(f[4]))
                    if k in want:
                        hits.add(want[k])
            for fd in os.scandir(d / "fd"):
                try:
                    st = os.stat(fd.path)
                except OSError:
                    continue
                k = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
                if k in want:
                    hits.add(want[k])
            comm = (d / "comm").read_text().strip() if hits else ""
        except OSError:
            continue
        for h in hits:
            out.setdefault(h, []).append((pid, comm))
    return out


def kept_reason(path: str, under, users: dict, written_since: float | None = None) -> str | None:
    """Why a file read at startup is not a file under test (None: it is)."""
    real = os.path.realpath(path)
    if under and not any(real == u or real.startswith(u.rstrip("/") + "/") for u in under):
        return "outside --census-under"
    us = users.get(path)
    if us:
        me = os.getpid()
        who = ", ".join("this harness" if pid == me else f"{pid} ({comm})" for pid, comm in us[:4])
        more = f" and {len(us) - 4} more" if len(us) > 4 else ""
        return f"mapped or open by other running processes: {who}{more} (system file: stays warm)"
    if written_since is not None:
        try:
            if os.stat(path).st_mtime >= written_since:
                return "written by the startup (its pages are created, not read from disk)"
        except OSError:
            pass
    return None


def census(runner, variant, method: str = "evict", under=()) -> dict:
    """Files read by one startup of ``variant``, in order of first read.

    Each file carries ``kept``: None for a file under test, else why it is left out
    (mapped or open by another process, outside ``under``, written by the startup).
    With ``evict`` the kept files are not evicted: they are listed from the warm run.
    """
    env = runner.envctl.build(runner.variant_env.get(variant.name))
    under = [os.path.realpath(u) for u in under]
    warm: dict[tuple[int, int], str] = {}
    if method == "drop":
        cache.drop_caches()
    else:
        # warm run: which files are mapped or read at all (faults show cached files too)
        _, res = _traced_run(runner, variant, ("add", "fault", "map"))
        ev = child_events(res)
        keys = {(int(d), int(i)) for d, i in zip(ev["dev"], ev["ino"]) if d != 0}
        warm = resolve(keys, variant.command, env, time.time())
        users = users_of([p for p in warm.values() if os.path.isfile(p)])
        for path in warm.values():
            if os.path.isfile(path) and kept_reason(path, under, users) is None:
                try:
                    cache.evict(path, verify=False)
                except OSError:
                    pass
    t_wall = time.time()
    m, res = _traced_run(runner, variant, ("add",))
    t_end = time.time()
    ev = child_events(res)
    ev = ev[(ev["kind"] == 0) & (ev["dev"] != 0)]
    keys = {(int(d), int(i)) for d, i in zip(ev["dev"], ev["ino"])}
    names = resolve(keys, variant.command, env, t_end)
    users = users_of([p for p in {**warm, **names}.values() if os.path.isfile(p)])
    files = []
    if len(ev):
        k = ev["dev"].astype(np.uint64) << np.uint64(32) | ev["ino"].astype(np.uint64)
        uniq, first = np.unique(k, return_index=True)
        for idx in np.argsort(first):
            u = uniq[idx]
            sel = ev[k == u]
            d, i = int(sel["dev"][0]), int(sel["ino"][0])
            pages = int(sel["npages"].sum())
            path = names.get((d, i))
            is_dir = bool(path and os.path.isdir(path))
            kept = kept_reason(path, under, users, t_wall) if path and not is_dir else None
            files.append({"path": path or f"{d >> 20}:{d & 0xFFFFF}:{i}", "resolved": path is not None,
                          "dev": f"{d >> 20}:{d & 0xFFFFF}", "ino": i, "pages": pages, "bytes": pages * cache.PAGE,
                          "first_t": round(float(sel["t"][0] - m["t0"]), 6), "is_dir": is_dir, "kept": kept})
    for (d, i), path in warm.items():
        if (d, i) not in keys and os.path.isfile(path):
            why = kept_reason(path, under, users) or "already cached: read by nothing during the census run"
            files.append({"path": path, "resolved": True, "dev": f"{d >> 20}:{d & 0xFFFFF}", "ino": i, "pages": 0,
                          "bytes": 0, "first_t": None, "is_dir": False, "kept": why})
    return {"variant": variant.name, "method": method, "files": files, "lost_events": int(res.lost),
            "wall_s": m["wall_s"], "under": under}
