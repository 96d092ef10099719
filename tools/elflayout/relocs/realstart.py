"""The real-start half of ``--check`` for executables, which glibc will not dlopen:
start the input and the packed file with the system's own kernel and ld.so, stop each
at its entry point (ptrace, a breakpoint at ``e_entry``), and compare what the loader
left in their writable memory; with ``--run``, run both and compare their output.

At the entry point ld.so has mapped and relocated the executable and its libraries and
run the libraries' initializers; no instruction of the executable has run (its own
initializers run later, from ``__libc_start_main``), so stopping there has no side
effects. Both files run from one directory that mirrors the input's (symbolic links to
its other entries: ``$ORIGIN`` run paths and resources beside the program resolve as
for the input), under the input's file name, with ASLR off and the same environment.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from elflayout.errors import ElflayoutError

PTRACE_TRACEME, PTRACE_PEEKTEXT, PTRACE_POKETEXT, PTRACE_CONT = 0, 1, 4, 7
ADDR_NO_RANDOMIZE = 0x0040000  # <linux/personality.h>
AT_ENTRY = 9                   # <elf.h>: the program's entry point, at its load address
INT3 = 0xCC
ENV_PAD = "ELFLAYOUT_CONTROL_PAD"  # the control start's extra variable: shifts the stack

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.ptrace.restype = ctypes.c_long
_libc.personality.argtypes = [ctypes.c_ulong]


def _ptrace(req, pid, addr=0, data=0) -> int:
    ctypes.set_errno(0)
    r = _libc.ptrace(req, pid, addr, data)
    if r == -1 and ctypes.get_errno():
        raise OSError(ctypes.get_errno(), f"ptrace({req}): {os.strerror(ctypes.get_errno())}")
    return r


def _traceme():  # in the child, between fork and exec
    _libc.personality(ADDR_NO_RANDOMIZE)
    _libc.ptrace(PTRACE_TRACEME, 0, None, None)


@contextmanager
def run_dir(src, near, up: int | None = 0):
    """A directory beside ``near`` mirroring ``src``'s and, with ``up`` > 0, that many
    levels above it (links to every other entry: ``$ORIGIN/../lib`` resolves as for
    ``src``); ``up`` None: an empty directory. Yields ``place(file)``, which puts ``file``
    there under ``src``'s name and returns the path."""
    src = Path(src).resolve()
    d = Path(tempfile.mkdtemp(prefix=".elflayout-start-", dir=Path(near).resolve().parent))
    try:
        top = src.parent
        for _ in range(up or 0):
            top = top.parent
        cur, dst = top, d
        parts = list(src.relative_to(top).parts)
        while up is not None and parts:
            for e in cur.iterdir():
                if e.name != parts[0]:
                    (dst / e.name).symlink_to(e)
            cur, dst = cur / parts[0], dst / parts[0]
            parts.pop(0)
            if parts:
                dst.mkdir()
        exe = d / src.relative_to(top) if up is not None else d / src.name
        mode = src.stat().st_mode & 0o777 | 0o500  # a copy of a file without x bits still starts

        def place(f) -> Path:
            exe.unlink(missing_ok=True)
            try:
                os.link(f, exe)
                if os.stat(exe).st_mode & 0o7777 == mode:
                    return exe
                # a temporary file gets its mode when it is renamed; a set-user-ID file
                # would start with ASLR on (the kernel drops ADDR_NO_RANDOMIZE)
                exe.unlink()
            except OSError:
                pass
            shutil.copyfile(f, exe)
            os.chmod(exe, mode)
            return exe

        yield place
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _entry(pid) -> int:
    aux = np.frombuffer(Path(f"/proc/{pid}/auxv").read_bytes(), "<u8").reshape(-1, 2)
    x = np.flatnonzero(aux[:, 0] == AT_ENTRY)
    if not x.size:
        raise ElflayoutError("no AT_ENTRY in the auxiliary vector")
    return int(aux[x[0], 1])


def start_state(exe: Path, e_entry: int, ranges, env: dict, timeout: float) -> tuple[dict, np.ndarray | None]:
    """Start ``exe`` (ASLR off) stopped at its entry point and read its memory at the
    link-time ``ranges``; returns ({"base": B}, bytes) or ({"error": why}, None)."""
    try:
        p = subprocess.Popen([str(exe)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, preexec_fn=_traceme, cwd=exe.parent)
    except OSError as e:  # the kernel refuses to execute it
        return dict(error=f"cannot execute {exe.name}: {e.strerror}"), None
    timer = threading.Timer(timeout, lambda: p.kill())
    timer.start()
    try:
        _, st = os.waitpid(p.pid, 0)  # stopped at exec
        if not os.WIFSTOPPED(st):
            return dict(error=f"{exe.name} did not start (status {st:#x})"), None
        at = _entry(p.pid)
        base = at - e_entry
        word = _ptrace(PTRACE_PEEKTEXT, p.pid, at) & 0xFFFF_FFFF_FFFF_FFFF
        _ptrace(PTRACE_POKETEXT, p.pid, at, (word & ~0xFF) | INT3)
        while True:
            _ptrace(PTRACE_CONT, p.pid, 0, 0)
            _, st = os.waitpid(p.pid, 0)
            if not os.WIFSTOPPED(st):
                err = p.stderr.read().decode(errors="replace").strip().splitlines() if p.stderr else []
                why = err[-1] if err else f"status {st:#x}"
                return dict(error=f"exited before its entry point: {why}"), None
            if os.WSTOPSIG(st) == signal.SIGTRAP:
                break
            if os.WSTOPSIG(st) in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT):
                return dict(error=f"killed by signal {os.WSTOPSIG(st)} before its entry point"), None
        with open(f"/proc/{p.pid}/mem", "rb", buffering=0) as m:
            out = b"".join(os.pread(m.fileno(), hi - lo, base + lo) for lo, hi in ranges)
        return dict(base=base), np.frombuffer(out, np.uint8)
    except OSError as e:  # the process died (timeout), ptrace is not permitted, or an address is not mapped
        return dict(error=f"cannot trace {exe.name} to its entry point ({e.strerror})"), None
    finally:
        timer.cancel()
        p.kill()
        p.wait()
        if p.stderr:
            p.stderr.close()


def compare_starts(src, out, e_entry: int, ranges, by_code, timeout: float = 300, up: int | None = 0) -> dict:
    """Start ``src`` and ``out`` (each under ``src``'s name in one mirrored directory,
    ASLR off, the same environment) up to their entry point and compare their bytes at
    the link-time ``ranges``; as ``realload.compare_loads``: bytes that differ between two
    starts of ``src`` (the second with the stack shifted) and differing bytes
    ``by_code(addrs)`` says code stored are left out and counted. ``up``: ``run_dir``'s
    (None for a program without ``$ORIGIN`` run paths: /usr/bin is large)."""
    env = dict(os.environ)
    with run_dir(src, out, up) as place:
        da, sa = start_state(place(src), e_entry, ranges, env, timeout)
        if sa is None:
            return dict(error=f"{src}: {da['error']}")
        db, sb = start_state(place(out), e_entry, ranges, env, timeout)
        if sb is None:
            return dict(error=f"{out}: {db['error']}")
        res = dict(equal=True, compared_bytes=int(sa.size), unstable_bytes=0, differing_bytes=0)
        if da["base"] != db["base"]:
            return dict(res, equal=False, reason="different load addresses with ASLR off")
        diff = sa != sb
        if diff.any():
            _, sa2 = start_state(place(src), e_entry, ranges, dict(env, **{ENV_PAD: "x" * 4095}), timeout)
            stable = sa == sa2 if sa2 is not None else np.ones(sa.size, bool)
            left = np.flatnonzero(diff & stable)
            if left.size:
                lo = np.array([r[0] for r in ranges], np.int64)
                at = np.cumsum([0] + [hi - lo_ for lo_, hi in ranges[:-1]])
                k = np.searchsorted(at, left, side="right") - 1
                stable[left[by_code(lo[k] + (left - at[k]))]] = False
            res.update(unstable_bytes=int(sa.size - np.count_nonzero(stable)),
                       differing_bytes=int(np.count_nonzero(diff & stable)))
            res["equal"] = res["differing_bytes"] == 0
        return res


def _run(exe: Path, args, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="elflayout-run-") as cwd:
        try:
            r = subprocess.run([str(exe), *args], capture_output=True, cwd=cwd, timeout=timeout,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return dict(status=f"no exit within {timeout:.0f} s", stdout=b"")
    return dict(status=r.returncode, stdout=r.stdout)


def compare_runs(src, out, run: str, timeout: float = 300, up: int = 0) -> dict:
    """Run ``src`` and ``out`` with the arguments ``run`` (shell words; each in a fresh
    working directory, under ``src``'s name in one mirrored directory) and compare exit
    status and standard output (standard error carries pids and times in many programs:
    not compared). When they differ, ``src`` runs again: a program whose own two runs
    differ cannot be judged (``comparable`` False)."""
    try:
        args = shlex.split(run)
    except ValueError as e:
        raise ElflayoutError(f"--run {run!r}: {e}") from None
    with run_dir(src, out, up) as place:
        a = _run(place(src), args, timeout)
        b = _run(place(out), args, timeout)
        res = dict(args=run, status=a["status"], stdout_bytes=len(a["stdout"]), equal=a == b, comparable=True)
        if a != b:
            res["comparable"] = _run(place(src), args, timeout) == a
            res["packed_status"] = b["status"]
    return res
