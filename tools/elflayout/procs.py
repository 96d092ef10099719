"""Process helpers shared by the stages that leave state owned by a process (the
emulated disk's run directories, the measurement controls' restore records) or run
commands (the wording of an exit status, a deadline for a command and its children)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one owned by another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_words(status: int) -> str:
    """A child's exit status as ``measure`` and ``profile`` word it: "was killed by signal
    11" (a negative ``subprocess`` return code) or "exited with status 3"."""
    return f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"


def descendants(pid: int) -> list[int]:
    """Every living descendant of ``pid`` (one scan of /proc)."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    parent[int(d)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


class Deadline:
    """Context manager: after ``seconds`` (None: never) SIGKILL every descendant of this
    process, the command under way and its children, until none is left; ``expired`` says
    whether it fired."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.expired = threading.Event()
        self._timer: threading.Timer | None = None

    def _fire(self) -> None:
        self.expired.set()
        for _ in range(50):  # children forked while we kill are caught on the next pass
            kids = descendants(os.getpid())
            if not kids:
                return
            for k in kids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(k, signal.SIGKILL)
            time.sleep(0.02)

    def __enter__(self) -> "Deadline":
        if self.seconds:
            self._timer = threading.Timer(self.seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
