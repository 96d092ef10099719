"""The interleaved run loop.

Every round runs each variant x state once (never all of A then all of B), in a
counterbalanced order (``Plan.schedule``), after preparing the state:

- ``cold``: sync + drop_caches (the whole system's cache: biased, system libraries too);
- ``selective``: evict only the files under test and verify with mincore;
- ``hot``: one untimed run just before the timed one.

Each timed run: ``time.monotonic()`` just before spawning (the trace clock is mono, so
event times are relative to the spawn), ``os.wait4`` for wall/user/sys/faults/inblock
of the whole child tree, and page-cache insertions traced in a private tracefs instance
limited to our process tree (``set_event_pid`` + ``event-fork``) so the other users of
the machine do not leak into the counts. Without tracefs, pages read are mincore
residency after the run (flagged ``source: mincore``).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import resource  # noqa: F401  imported now: os.wait4 would import it mid-run (file reads)
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from elflayout.controls import ControlSet, FixedEnv
from elflayout.errors import ElflayoutError
from elflayout.measure import cache, rootless
from elflayout import emulator as emulation
from elflayout.pages import SEEK_PAGES  # noqa: F401 - re-exported
from elflayout.pages import count_seeks as seeks_of
from elflayout.procs import signal_words
from elflayout.tracefs import TraceSession, file_key, tracefs_status

STATES = ("selective", "cold", "hot")
_SHELL_CHARS = re.compile(r"[|&;<>()$`\\*?\[\]{}~!#\n]")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class Variant:
    name: str
    command: str
    emulator: str | None = None  # --emulator; None: detected from the program's ELF machine
    # program path -> its emulator (None: native). Detected once: reading the ELF header
    # before each spawn would cache the program's first pages in the harness, and a run
    # after eviction would not count them.
    _emulators: dict = field(default_factory=dict, repr=False, compare=False)

    def _emulator(self, program: str):
        if program not in self._emulators:
            self._emulators[program] = emulation.for_program(program, self.emulator)
        return self._emulators[program]

    def argv(self, env: dict) -> tuple[list[str], dict, bool]:
        """(argv, extra env, via_shell): direct exec unless the command needs a shell.

        Leading ``NAME=VALUE`` words become environment variables, as in a shell. A
        program of another machine runs under its emulator (``emulator.for_program``).
        """
        if _SHELL_CHARS.search(self.command):
            return ["/bin/sh", "-c", self.command], {}, True
        argv, extra = self._program(env)
        em = self._emulator(argv[0])
        return (em.wrap(argv) if em else argv), extra, False

    def emulated(self, env: dict) -> dict | None:
        """What runs this variant's program when it is not native (results metadata)."""
        if _SHELL_CHARS.search(self.command):
            return None
        em = self._emulator(self._program(env)[0][0])
        return None if em is None else em.describe()

    def _program(self, env: dict) -> tuple[list[str], dict]:
        words = shlex.split(self.command)
        extra = {}
        while words and _ASSIGN.match(words[0]):
            k, v = words.pop(0).split("=", 1)
            extra[k] = v
        if not words:
            raise ElflayoutError(f"variant {self.name}: empty command")
        exe = shutil.which(words[0], path=env.get("PATH", os.defpath))
        if exe is None:
            raise ElflayoutError(f"variant {self.name}: command not found: {words[0]}")
        return [exe, *words[1:]], extra


@dataclass
class Plan:
    variants: list[Variant]
    states: list[str]
    runs: int
    warmup: int = 0
    seed: int = 0
    files: list[str] = field(default_factory=list)

    def schedule(self) -> list[tuple[int, str, str]]:
        """[(round, variant, state)] in run order: counterbalanced, labelled with ``seed``.

        A round runs the states one after the other, every variant within each state.
        Variant orders follow the rows of a balanced Latin square (``williams``; two
        variants: AB, BA, AB, ...), one row per round, so over every cycle of rows each
        variant holds each position within a state equally often and follows each other
        variant equally often: a position effect (the first run of a round slower, say)
        cancels in a ratio instead of favouring the variant that happened to go first.
        The state order comes from another such square and changes once per cycle of
        variant rows. The seed picks which variant and state play which role.
        """
        rows = self.order_rows()
        return [(r, v, s) for r, cells in enumerate(rows) for v, s in cells]

    def order_rows(self) -> list[list[tuple[str, str]]]:
        """Per round, its cells in run order (see ``schedule``)."""
        rng = random.Random(self.seed)
        names = [v.name for v in self.variants]
        states = list(self.states)
        rng.shuffle(names)
        rng.shuffle(states)
        vrows, srows = williams(len(names)), williams(len(states))
        out = []
        for r in range(self.runs):
            srow = srows[(r // len(vrows)) % len(srows)]
            vrow = vrows[r % len(vrows)]
            out.append([(names[i], states[j]) for j in srow for i in vrow])
        return out

    def order_record(self) -> dict:
        """How the run order was made (results ``metadata.order``)."""
        cycle = len(williams(len(self.variants)))
        return {"design": "balanced Latin square (Williams) of variants within each state, one row per round; "
                          "state order from another, changing once per cycle of variant rows",
                "variant_cycle": cycle, "balanced": self.runs % cycle == 0,
                "rounds": [[f"{v}/{s}" for v, s in row] for row in self.order_rows()]}


def williams(n: int) -> list[list[int]]:
    """Rows of a balanced Latin square of ``n`` treatments (Williams 1949).

    Every treatment takes every position once per cycle of rows and immediately follows
    every other treatment equally often; a cycle is ``n`` rows for even ``n``, ``2n``
    (the square and its mirror) for odd ``n``. First row 0, 1, n-1, 2, n-2, ...; row r
    adds r to each entry (mod n).
    """
    first = [0] + [(k + 1) // 2 if k % 2 else n - k // 2 for k in range(1, n)]
    rows = [[(x + r) % n for x in first] for r in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 and n > 1 else rows


# Per-CPU trace buffer: one libLLVM startup is ~10k events (< 1 MB); start at 16 MB and
# shrink when the kernel cannot allocate it (a machine short of memory).
BUFFER_KB = (16384, 4096, 1024)


def open_session(stack: contextlib.ExitStack, kinds) -> TraceSession:
    """A TraceSession of all files entered on ``stack``, shrinking the buffer on ENOMEM."""
    for i, kb in enumerate(BUFFER_KB):
        try:
            return stack.enter_context(TraceSession(None, kinds=kinds, buffer_kb=kb))
        except ElflayoutError as e:
            if "Cannot allocate memory" not in str(e) or i == len(BUFFER_KB) - 1:
                raise


def _enable_pid_filter(ts: TraceSession) -> bool:
    """Limit the session to this process and its descendants (True if done)."""
    try:
        ts.follow(os.getpid())
        return True
    except OSError:
        return False


def own_tids() -> np.ndarray:
    """Thread ids of this process: its events (the pid filter includes us) are not the child's."""
    return np.array([int(t) for t in os.listdir("/proc/self/task")], dtype=np.int64)


def child_events(res) -> np.ndarray:
    ev = res.events
    return ev[~np.isin(ev["pid"], own_tids())]


class Runner:
    """Runs a Plan; ``run()`` returns the list of run records (results format v1)."""

    def __init__(self, plan: Plan, controls: ControlSet, env: FixedEnv, *, trace: bool = True,
                 on_event: Callable[[str, dict], None] | None = None, capture_dir: str | None = None,
                 variant_env: dict[str, dict] | None = None, retries: int = 2, timeout: float | None = 600,
                 readahead=None, residency=None):
        self.plan = plan
        # rootless.Residency: pages read without tracing; given: the rootless method
        # (its runs are checked for lost pages), else mincore as for --no-trace
        self.rootless = residency is not None
        self.residency = residency or rootless.Residency("mincore")
        self.readahead = readahead  # controls.ReadAhead: verified before and after every run
        self.timeout = timeout
        self.retries = retries
        self.controls = controls
        self.envctl = env
        self.trace = trace and tracefs_status() is None
        self.on_event = on_event or (lambda kind, info: None)
        self.keys = {f: file_key(f) for f in plan.files}
        self.warnings: list[str] = []
        self.evictions: list[dict] = []
        self.variant_env = variant_env or {}
        self.ts: TraceSession | None = None
        # Removals from the page cache of the files under test, by any process (no pid
        # filter): they explain pages read but no longer resident after a run.
        self.deletes: TraceSession | None = None
        self.pid_filter = False
        self._child: subprocess.Popen | None = None
        self._errfile = tempfile.TemporaryFile(prefix="elflayout-measure-")
        self._warned_evict: set[str] = set()
        self._evict_why: dict[str, str] = {}  # file -> why pages stayed (names the mapping processes)
        self.page = cache.PAGE

    # -- one child ----------------------------------------------------------------
    def spawn(self, variant: Variant) -> dict:
        """Run one command to completion; return timing and rusage (no tracing here)."""
        env = self.envctl.build(self.variant_env.get(variant.name))
        argv, extra, via_shell = variant.argv(env)
        if extra:
            env = self.envctl.build({**self.variant_env.get(variant.name, {}), **extra})
        self._errfile.seek(0)
        self._errfile.truncate()
        timed_out = threading.Event()

        def _expire():
            timed_out.set()
            child = self._child
            if child is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGKILL)

        # Started before the spawn: the timer thread keeps the ordinary scheduling
        # policy (a real-time runaway child on its CPU cannot starve it past throttling).
        timer = threading.Timer(self.timeout, _expire) if self.timeout else None
        if timer:
            timer.daemon = True
            timer.start()
        # The controls hold through the wait: under --realtime the harness wakes at once
        # when the child exits, so the clock is read before other jobs' time slices.
        try:
            with self.controls.around_spawn():
                t0 = time.monotonic()
                try:
                    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=self._errfile, start_new_session=True, close_fds=True)
                except OSError as e:
                    raise ElflayoutError(f"variant {variant.name}: cannot run {argv[0]}: {e.strerror}") from None
                self._child = p
                try:
                    _, status, ru = os.wait4(p.pid, 0)
                except BaseException:
                    self.kill_child()
                    raise
                t1 = time.monotonic()
        finally:
            if timer:
                timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        self._child = None
        if timed_out.is_set():
            raise ElflayoutError(f"variant {variant.name}: command still running after {self.timeout:g} s, killed "
                                 f"(--timeout; command: {variant.command})")
        # Descendants left behind (daemons) would skew the next run: end the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        if p.returncode != 0:
            self._errfile.seek(0)
            err = self._errfile.read(400).decode(errors="replace").strip().splitlines()
            raise ElflayoutError(
                f"variant {variant.name}: command {signal_words(p.returncode)}"
                + (f": {err[-1]}" if err else "") + f" (command: {variant.command})")
        return {"t0": t0, "wall_s": t1 - t0, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
                "major_faults": ru.ru_majflt, "minor_faults": ru.ru_minflt, "read_bytes": ru.ru_inblock * 512,
                "via_shell": via_shell}

    def kill_child(self):
        p = self._child
        if p is not None and p.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(p.pid, 0)
            p.returncode = -9
        self._child = None

    # -- states ----------------------------------------------------------------------
    def prepare(self, variant: Variant, state: str) -> dict:
        info = {}
        if state == "cold":
            cache.drop_caches()
        elif state == "selective":
            left = {}
            for f in self.plan.files:
                r = cache.evict(f)
                if r["left"]:
                    left[f] = r["left"]
                    self._evict_why[f] = r["why"]
                    if f not in self._warned_evict:
                        self._warned_evict.add(f)
                        msg = f"{f}: {r['left']} page(s) stayed resident after eviction (pages {r['pages']}): {r['why']}"
                        self.warnings.append(msg)
                        self.on_event("warning", {"message": msg})
            if left:
                info["evict_left"] = left
        elif state == "hot":
            self.spawn(variant)
        else:
            raise ElflayoutError(f"unknown state {state!r} (choose from {', '.join(STATES)})")
        return info

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> list[dict]:
        variants = {v.name: v for v in self.plan.variants}
        records: list[dict] = []
        with contextlib.ExitStack() as stack:
            stack.callback(self.kill_child)
            if self.trace:
                # All files of our tree: per-file figures for the files under test, plus
                # the tree's total pages inserted.
                self.ts = open_session(stack, ("add", "fault"))
                self.pid_filter = _enable_pid_filter(self.ts)
                if not self.pid_filter:
                    self.warnings.append("tracefs set_event_pid/event-fork unavailable: counts include other processes")
                self.deletes = stack.enter_context(TraceSession(self.plan.files, kinds=("delete",), buffer_kb=1024))
            for i in range(self.plan.warmup):
                for v in self.plan.variants:
                    self.on_event("warmup", {"variant": v.name, "i": i})
                    self.spawn(v)
            sched = self.plan.schedule()
            for seq, (rnd, vname, state) in enumerate(sched):
                v = variants[vname]
                self.on_event("start", {"seq": seq, "total": len(sched), "variant": vname, "state": state, "round": rnd})
                rec = self.one(v, state, rnd, seq)
                records.append(rec)
                self.on_event("run", rec)
        return records

    def one(self, v: Variant, state: str, rnd: int, seq: int) -> dict:
        """One timed run; an evicted-state run disturbed by another process is redone.

        On a shared machine another process may map a file under test (eviction leaves
        pages), read it during our run (more resident afterwards than we read) or evict
        it (fewer). Such a run measures the neighbours, not the layout: it is repeated up
        to ``retries`` times and, if still disturbed, kept with ``interference`` set.
        """
        for attempt in range(self.retries + 1):
            rec = self._attempt(v, state, rnd, seq)
            why = self.interference(rec)
            rec.pop("read_ahead_why", None)
            if not why:
                break
            self.on_event("warning", {"message": f"run {seq} ({v.name}/{state}) disturbed: {why}"
                                                 + ("; repeating it" if attempt < self.retries else "")})
        if why:
            rec["interference"] = why
        if attempt:
            rec["attempts"] = attempt + 1
        return rec

    def interference(self, rec: dict) -> str | None:
        """Why a run does not measure the layout alone (None: it does).

        Only what changes the count of the files under test disturbs a run: pages left
        resident by the eviction (fewer read), another process reading the file during
        the run (more resident afterwards than we read: it may have read pages for us),
        pages read twice (evicted and read again: inflated), read_ahead_kb changed. Pages
        evicted after our process read them (memory reclaim, another session's eviction)
        do not change what was read: they are recorded (``evicted_after_read``), not
        held against the run.
        """
        if rec.get("read_ahead_why"):
            return rec["read_ahead_why"]
        if rec["state"] == "hot":
            return None
        if rec["source"] != "trace":
            return rootless.interference(rec) if self.rootless else None
        left = rec.get("evict_left") or {}
        for f, x in rec["files"].items():
            if left.get(f):
                why = self._evict_why.get(f)
                return f"{f}: {left[f]} page(s) could not be evicted before the run" + (f" ({why})" if why else "")
            unique = x.get("unique_pages", x["pages_read"])
            if x["resident_after"] > unique:
                return (f"{f}: {x['resident_after']} pages resident after the run but {unique} read by it "
                        f"(another process read the file meanwhile)")
            if unique < x["pages_read"]:
                return (f"{f}: {x['pages_read'] - unique} page(s) read twice (evicted during the run: "
                        f"{rec.get('cache_events') or 'by another process'})")
        return None

    def _attempt(self, v: Variant, state: str, rnd: int, seq: int) -> dict:
        info = self.prepare(v, state)
        before = {}
        ra0 = self.readahead.check() if self.readahead is not None else None
        vm0 = cache.vmstat()
        if self.ts is not None:
            self.ts.clear()
            self.deletes.clear()
        else:
            before = {f: self.residency.snapshot(f) for f in self.plan.files}
        m = self.spawn(v)
        res = self.ts.stop() if self.ts is not None else None
        ra1 = self.readahead.check() if self.readahead is not None else None
        cache_events = cache.vmstat_change(vm0, cache.vmstat())
        rec = {"variant": v.name, "state": state, "round": rnd, "seq": seq,
               "wall_s": m["wall_s"], "user_s": m["user_s"], "sys_s": m["sys_s"],
               "major_faults": m["major_faults"], "minor_faults": m["minor_faults"],
               "read_bytes": m["read_bytes"], "source": "trace" if res is not None else self.residency.method}
        rec.update(info)
        if self.readahead is not None and self.readahead.knob is not None:
            rec["read_ahead_kb"] = self.readahead.show()
        if ra0 or ra1:
            rec["read_ahead_why"] = ra0 or ra1
        if cache_events:
            rec["cache_events"] = cache_events
        files = {}
        if res is not None:
            ev = child_events(res)
            adds = ev[ev["kind"] == 0]
            rec["traced_pages_all"] = int(adds["npages"].sum())
            rec["lost_events"] = int(res.lost)
            if res.lost:
                self.warnings.append(f"run {seq}: the kernel dropped {res.lost} trace events; counts are low")
        for f in self.plan.files:
            if res is None:  # no tracing: resident after the run and not before it (rootless.Residency)
                files[f] = self.residency.pages_read(before[f], self.residency.snapshot(f))
                continue
            after = cache.residency(f)
            resident = int(after.sum())
            if res is not None:
                key = self.keys[f]
                mine = ev[(ev["dev"] == key[0]) & (ev["ino"] == key[1])]
                a = mine[mine["kind"] == 0]
                fl = mine[mine["kind"] == 1]
                pages = int(a["npages"].sum())
                unique = int(len(cache.expand(a["page"], a["npages"])))
                files[f] = {
                    "pages_read": pages, "bytes_read": pages * self.page,
                    "seeks": seeks_of(a["page"], a["npages"]), "resident_after": resident,
                    "reads": [[round(float(t - m["t0"]), 6), int(p), int(n)] for t, p, n in zip(a["t"], a["page"], a["npages"])],
                    "faults": [[round(float(t - m["t0"]), 6), int(p)] for t, p in zip(fl["t"], fl["page"])],
                }
                if unique != pages:
                    files[f]["unique_pages"] = unique
                if resident < unique:
                    files[f]["evicted_after_read"] = unique - resident
        if self.deletes is not None:  # stopped after the residency check: removals up to it count
            dels = self.deletes.stop().events
            for f, x in files.items():
                d = dels[(dels["dev"] == self.keys[f][0]) & (dels["ino"] == self.keys[f][1])]
                if len(d):
                    x["deleted_during_run"] = int(d["npages"].sum())
        rec["files"] = files
        rec["pages_read"] = int(sum(x["pages_read"] for x in files.values()))
        rec["bytes_read"] = int(sum(x["bytes_read"] for x in files.values()))
        return rec

    @staticmethod
    def spread(records: list[dict]) -> list[dict]:
        """Per variant x state x file: the range of pages read over the undisturbed runs.

        ``identical`` is true only when every run read the same number of pages (the
        single-process claim); multi-process and timing-dependent startups vary.
        """
        cells: dict[tuple[str, str, str], list[int]] = {}
        for r in records:
            if r.get("interference"):
                continue
            for f, x in r.get("files", {}).items():
                cells.setdefault((r["variant"], r["state"], f), []).append(int(x["pages_read"]))
        out = []
        for (v, s, f), xs in cells.items():
            med = float(np.median(xs))
            out.append({"variant": v, "state": s, "file": f, "n": len(xs), "min": min(xs), "median": med,
                        "max": max(xs), "identical": min(xs) == max(xs),
                        "spread_pct": round(100.0 * (max(xs) - min(xs)) / med, 2) if med else 0.0})
        return out

    def close(self):
        self._errfile.close()
