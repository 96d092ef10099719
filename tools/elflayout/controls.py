"""System controls for measurements and trace profiles, pyperf-style.

Each control answers four questions: ``available()`` (None or why not), ``show()``
(current value), ``apply()`` and ``undo()``. Controls that act on the measured child
only never touch the system: ASLR is turned off in the harness's own personality
(inherited by every child through fork and exec, undone at the end), CPU pinning and
real-time scheduling are set on the harness just around each spawn (inherited at fork),
the environment is built per spawn. No Python code runs between fork and exec
(``preexec_fn`` can deadlock a multi-threaded process — numpy's BLAS threads — and did, on Ctrl-C). Read-ahead and
the CPU governor are system-wide and are restored by ``ControlSet`` on exit, on
exceptions, on Ctrl-C and on SIGTERM (turned into KeyboardInterrupt while active).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path

from elflayout.errors import ElflayoutError
from elflayout.fileio import atomic_write_text
from elflayout.procs import pid_alive

ADDR_NO_RANDOMIZE = 0x0040000
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.personality.argtypes = [ctypes.c_ulong]
_libc.personality.restype = ctypes.c_int


def block_device_dir(path: str | os.PathLike) -> Path | None:
    """sysfs directory (with ``queue/``) of the block device holding ``path``.

    Partitions have no queue of their own: their parent disk's is used.
    """
    st = os.stat(path)
    d = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not d.exists():
        return None  # tmpfs, overlay without a block device, FUSE...
    d = d.resolve()
    if (d / "queue").is_dir():
        return d
    if (d / "partition").exists() and (d.parent / "queue").is_dir():
        return d.parent
    return None


class Control:
    name = "control"

    def available(self) -> str | None:
        return None

    def show(self):
        return None

    def apply(self) -> None:
        pass

    def undo(self) -> None:
        pass

    # state the child inherits, set on the harness just around a spawn
    @contextlib.contextmanager
    def around_spawn(self):
        yield

    def record(self) -> dict:
        return {"name": self.name, "available": self.available() is None, "reason": self.available(),
                "before": getattr(self, "before", None), "applied": getattr(self, "applied", None)}


class ReadAhead(Control):
    """``queue/read_ahead_kb`` of the device holding the files under test."""

    name = "read_ahead_kb"

    def __init__(self, path: str | os.PathLike, kb: int | None):
        self.path = str(path)
        self.kb = kb
        self.dev = block_device_dir(path)
        self.knob = self.dev / "queue" / "read_ahead_kb" if self.dev else None
        self.before = self.show() if self.knob else None
        self.applied = None
        self.device = self.dev.name if self.dev else None

    def available(self):
        if self.knob is None:
            return f"{self.path}: not on a block device with a read-ahead setting"
        if not os.access(self.knob, os.W_OK):
            return f"{self.knob}: not writable (needs root)"
        return None

    def show(self):
        return int(self.knob.read_text()) if self.knob else None

    def apply(self):
        if self.kb is None or self.available():
            self.applied = self.before
            return
        # Two sessions overlapping would each "restore" what the other set and could
        # leave the device at 128 for good: sessions take turns on a per-device lock
        # (flock: released by the kernel even if we are killed), then read the value to
        # restore only once they own the device. The value to restore is also kept in a
        # state file, so a session killed with SIGKILL is repaired by the next one.
        t = time.monotonic()
        self._lock = _lock_device(self.device)
        self.lock_wait_s = round(time.monotonic() - t, 3)
        for msg in StateFile.restore_stale():
            self.restored = msg
        self.before = self.show()
        self._state = StateFile(f"read-ahead-{self.device}", {"knob": str(self.knob), "value": self.before,
                                                             "what": f"read_ahead_kb of {self.device}"})
        self.knob.write_text(str(self.kb))
        self.applied = self.show()

    def undo(self):
        try:
            if self.knob is not None and self.before is not None and self.show() != self.before:
                self.knob.write_text(str(self.before))
            if getattr(self, "_state", None) is not None:
                self._state.remove()
                self._state = None
        finally:
            if getattr(self, "_lock", None) is not None:
                self._lock.close()
                self._lock = None

    def check(self) -> str | None:
        """None when the device still has the value applied, else a sentence (run disturbed)."""
        if self.knob is None or self.applied is None:
            return None
        now = self.show()
        if now != self.applied:
            return f"read_ahead_kb of {self.device} was {now} (changed by another process), not {self.applied}"
        return None

    def record(self):
        r = super().record()
        r["device"] = self.device
        r["lock_wait_s"] = getattr(self, "lock_wait_s", None)
        if getattr(self, "restored", None):
            r["restored"] = self.restored
        return r


def run_dir() -> Path:
    """/run/elflayout (root) or a per-user directory: locks and state files."""
    base = ROOT_RUN_DIR if os.geteuid() == 0 else Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / \
        f"elflayout-{os.getuid()}"
    base.mkdir(parents=True, exist_ok=True)
    return base


ROOT_RUN_DIR = Path("/run/elflayout")


def lock_path() -> Path:
    """The measurement lock: root's (``/run/elflayout/measure.lock``) for every user who can
    open it, so sessions without root take turns with root's; else the per-user one."""
    shared = ROOT_RUN_DIR / "measure.lock"
    if os.geteuid() != 0 and os.access(shared, os.R_OK):
        return shared
    return run_dir() / "measure.lock"


LOCK_DIR = Path("/run/lock")


def _lock_device(device: str):
    """An exclusive flock on /run/lock/elflayout-read-ahead-DEV.lock (blocks until free)."""
    d = LOCK_DIR if LOCK_DIR.is_dir() else Path("/tmp")
    f = open(d / f"elflayout-read-ahead-{device}.lock", "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX)
    except BaseException:
        f.close()
        raise
    return f


class MeasurementLock(contextlib.AbstractContextManager):
    """Machine-wide lock of measurement sessions (``RUN_DIR/measure.lock``, flock).

    Two measurements on one machine disturb each other: they share read_ahead_kb and
    the page cache (one's eviction is the other's cold read). Sessions (and
    ``profile --backend trace``) take turns; the kernel releases the lock of a killed
    holder. The holder writes its pid and command line into the file so a waiting
    session can say whom it waits for; the wait is recorded in the results.
    """

    def __init__(self, on_wait=None, path: Path | None = None):
        self.path = path or lock_path()
        self.on_wait = on_wait
        self.waited_s = 0.0
        self.waited_for = None
        self._f = None

    @staticmethod
    def holder(path: Path | None = None) -> str | None:
        try:
            return (path or lock_path()).read_text().strip() or None
        except OSError:
            return None

    def __enter__(self):
        try:
            f = open(self.path, "a+")
        except PermissionError:  # root's lock, seen by another user: flock needs no write access
            f = open(self.path, "r")
        try:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.waited_for = self.holder(self.path)
                if self.on_wait:
                    self.on_wait(self.waited_for)
                t = time.monotonic()
                fcntl.flock(f, fcntl.LOCK_EX)
                self.waited_s = round(time.monotonic() - t, 3)
            if f.writable():
                f.seek(0)
                f.truncate()
                f.write(f"pid {os.getpid()}: {' '.join(sys.argv)[:300]}\n")
                f.flush()
        except BaseException:
            f.close()
            raise
        self._f = f
        return self

    def __exit__(self, *exc):
        if self._f is not None:
            with contextlib.suppress(OSError):
                if self._f.writable():
                    self._f.truncate(0)
            self._f.close()
            self._f = None
        return False

    def record(self) -> dict:
        return {"path": str(self.path), "waited_s": self.waited_s, "waited_for": self.waited_for}


class StateFile:
    """A system setting to restore, kept on disk while it is changed (``RUN_DIR/state/``).

    ``restore_stale()`` restores the settings of sessions that died without undoing
    them (SIGKILL, power loss of the process); their emulated disks are the storage
    stage's (``measure.session.restore_stale`` does both).
    """

    def __init__(self, name: str, state: dict):
        self.path = run_dir() / "state" / f"{name}.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps({**state, "pid": os.getpid()}) + "\n")

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    @staticmethod
    def restore_stale() -> list[str]:
        """Restore what dead sessions left changed; return one sentence per repair."""
        out = []
        d = run_dir() / "state"
        for p in sorted(d.glob("*.json")) if d.is_dir() else []:
            try:
                st = json.loads(p.read_text())
                pid = int(st["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                p.unlink(missing_ok=True)
                continue
            if pid_alive(pid):
                continue
            knob = Path(st.get("knob", ""))
            try:
                now = knob.read_text().strip()
                if str(st["value"]) != now:
                    knob.write_text(str(st["value"]))
                    out.append(f"{st.get('what', knob)}: {now} -> {st['value']} (left by process {pid}, which died "
                               f"without restoring it)")
            except (OSError, KeyError):
                pass
            p.unlink(missing_ok=True)
        return out


class Aslr(Control):
    """ASLR off for the measured processes only: personality(ADDR_NO_RANDOMIZE).

    Set on the harness itself (its own layout is fixed already; the flag takes effect
    at the children's exec) and restored at the end; the system-wide
    randomize_va_space is never touched.
    """

    name = "aslr"

    def __init__(self, disable: bool):
        self.disable = disable
        self.before = self.show()
        self.applied = "off (personality ADDR_NO_RANDOMIZE in child)" if disable else self.before
        self._persona = None

    def show(self):
        v = Path("/proc/sys/kernel/randomize_va_space").read_text().strip()
        return {"0": "off", "1": "on (conservative)", "2": "on"}.get(v, v)

    def apply(self):
        if self.disable:
            self._persona = _libc.personality(0xFFFFFFFF)
            if _libc.personality(self._persona | ADDR_NO_RANDOMIZE) < 0:
                raise ElflayoutError(f"personality(ADDR_NO_RANDOMIZE) failed: {os.strerror(ctypes.get_errno())}")

    def undo(self):
        if self._persona is not None:
            _libc.personality(self._persona)
            self._persona = None


class CpuPin(Control):
    """Pin the measured child (and its descendants) to CPUs via sched_setaffinity."""

    name = "cpu_affinity"

    def __init__(self, cpus: list[int] | None):
        self.cpus = cpus
        self.before = sorted(os.sched_getaffinity(0))
        self.applied = sorted(cpus) if cpus else self.before
        if cpus:
            bad = set(cpus) - set(self.before)
            if bad:
                raise ElflayoutError(f"--pin: CPU {sorted(bad)[0]} is not available (allowed: {self.before})")

    @contextlib.contextmanager
    def around_spawn(self):
        if not self.cpus:
            yield
            return
        old = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.cpus)
        try:
            yield
        finally:
            os.sched_setaffinity(0, old)


class Realtime(Control):
    """Run the measured child (and its descendants) under SCHED_FIFO at ``priority``.

    A real-time task is never preempted by the ordinary (SCHED_OTHER) jobs of other
    users, so a CPU-bound startup's wall time stops including their time slices. Set on
    the harness thread around each spawn and wait (inherited at fork; the harness then
    wakes at once when the child exits, to read the clock) and reset after it. The
    kernel's real-time throttling (``sched_rt_runtime_us``, by default 95% of each
    period) keeps a runaway child from locking a CPU; the run timeout still applies.
    """

    name = "scheduler"

    def __init__(self, priority: int | None):
        self.priority = priority
        self.before = self.show()
        self.applied = f"SCHED_FIFO priority {priority} (measured processes)" if priority else self.before
        if priority is not None:
            check_rt_priority(priority)
        self.throttle = _rt_throttle()
        self._why = None
        if priority is not None:  # try it once, now: record() asks again later
            policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
            try:
                self._set(os.SCHED_FIFO, priority)
            except PermissionError:
                self._why = "SCHED_FIFO not permitted (needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO)"
            else:
                os.sched_setscheduler(0, policy, param)

    def available(self):
        return self._why

    def show(self):
        return {os.SCHED_OTHER: "SCHED_OTHER", os.SCHED_FIFO: "SCHED_FIFO", os.SCHED_RR: "SCHED_RR",
                os.SCHED_BATCH: "SCHED_BATCH", os.SCHED_IDLE: "SCHED_IDLE"}.get(os.sched_getscheduler(0), "other")

    def apply(self):
        why = self.available()
        if why:
            raise ElflayoutError(f"--realtime: {why}")

    @staticmethod
    def _set(policy: int, priority: int):
        os.sched_setscheduler(0, policy, os.sched_param(priority))

    @contextlib.contextmanager
    def around_spawn(self):
        if not self.priority:
            yield
            return
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        self._set(os.SCHED_FIFO, self.priority)
        try:
            yield
        finally:
            os.sched_setscheduler(0, policy, param)

    def record(self):
        r = super().record()
        r["rt_throttle"] = self.throttle
        return r


def check_rt_priority(priority: int) -> None:
    lo, hi = os.sched_get_priority_min(os.SCHED_FIFO), os.sched_get_priority_max(os.SCHED_FIFO)
    if not lo <= priority <= hi:
        raise ElflayoutError(f"--realtime: priority {priority} is outside SCHED_FIFO's {lo}..{hi}")


def _rt_throttle() -> str | None:
    """The kernel's real-time budget, e.g. '950000/1000000 us' (None: not readable)."""
    try:
        run = Path("/proc/sys/kernel/sched_rt_runtime_us").read_text().strip()
        period = Path("/proc/sys/kernel/sched_rt_period_us").read_text().strip()
    except OSError:
        return None
    return f"{run}/{period} us" + (" (no throttling)" if run == "-1" else "")


class Governor(Control):
    """cpufreq scaling governor (set to 'performance' when asked and present)."""

    name = "cpu_governor"

    def __init__(self, governor: str | None):
        self.governor = governor
        self.knobs = sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor"))
        self.before = self.show()
        self.applied = self.before

    def available(self):
        return None if self.knobs else "no cpufreq scaling_governor on this machine (VM or fixed frequency)"

    def show(self):
        return {k.parent.parent.name: k.read_text().strip() for k in self.knobs} or None

    def apply(self):
        if self.governor and not self.available():
            for k in self.knobs:
                k.write_text(self.governor)
            self.applied = self.show()

    def undo(self):
        if self.governor and self.before:
            for k in self.knobs:
                with contextlib.suppress(OSError):
                    k.write_text(self.before[k.parent.parent.name])


# Variables kept from the caller's environment; everything else is dropped so the
# measured process sees the same environment whoever runs it (environment size moves
# stack alignment and hence timings: Mytkowicz et al., "Producing wrong data without
# doing anything obviously wrong!", ASPLOS 2009; Larres et al. 2013).
KEEP_ENV = ("PATH", "HOME", "TERM", "TMPDIR", "USER")
ENV_SIZE = 4096


class FixedEnv(Control):
    """A fixed-size environment: a few kept variables + user ones, padded to ENV_SIZE bytes."""

    name = "environment"

    def __init__(self, extra: dict[str, str] | None = None, size: int = ENV_SIZE):
        self.extra = dict(extra or {})
        self.size = size
        self.before = len(_env_bytes(os.environ))
        self.env = self.build()
        self.applied = {"bytes": len(_env_bytes(self.env)), "variables": sorted(k for k in self.env if k != "ELFLAYOUT_PAD")}

    def build(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: os.environ[k] for k in KEEP_ENV if k in os.environ}
        env["LC_ALL"] = "C"
        env.update(self.extra)
        env.update(extra or {})
        used = len(_env_bytes(env)) + len("ELFLAYOUT_PAD=") + 1
        if used > self.size:
            raise ElflayoutError(f"environment needs {used} bytes, more than the fixed size {self.size}")
        env["ELFLAYOUT_PAD"] = "x" * (self.size - used)
        return env


def _env_bytes(env) -> bytes:
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


class ControlSet(contextlib.AbstractContextManager):
    """Apply controls on enter; undo them (reverse order) on exit, errors, Ctrl-C, SIGTERM."""

    def __init__(self, controls: list[Control]):
        self.controls = controls
        self._applied: list[Control] = []
        self._old_term = None

    def __enter__(self):
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            for c in self.controls:
                c.apply()
                self._applied.append(c)
        except BaseException:
            self.undo()
            raise
        return self

    def undo(self):
        errors = []
        while self._applied:
            c = self._applied.pop()
            try:
                c.undo()
            except OSError as e:
                errors.append(f"{c.name}: {e}")
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None
        if errors:
            raise ElflayoutError("could not restore " + "; ".join(errors))

    def __exit__(self, *exc):
        # Ignore a second Ctrl-C while restoring: restoring matters more.
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self.undo()
        finally:
            signal.signal(signal.SIGINT, old_int)
        return False

    @contextlib.contextmanager
    def around_spawn(self):
        with contextlib.ExitStack() as st:
            for c in self.controls:
                st.enter_context(c.around_spawn())
            yield

    def records(self) -> dict:
        return {c.name: c.record() for c in self.controls}


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
