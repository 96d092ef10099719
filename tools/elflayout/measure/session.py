"""One measurement session: a plan in, a results document (format v1) out.

``measure(plan)`` is what ``elflayout measure`` runs; the demo and the benchmarks call
it in-process. Steps:

1. check the plan (``MeasurePlan.check``): one-line errors before anything is touched;
2. take the machine-wide measurement lock (``controls.MeasurementLock``): two sessions on
   one machine share read_ahead_kb and the page cache, so they take turns;
3. apply the controls (read-ahead, ASLR, pinning, real-time scheduling, environment,
   governor), mount the
   emulated slow disk when asked (``--storage``);
4. census (which files a startup reads) unless the files are named, then the identity
   of every file under test (before the runs: hashing reads whole files);
5. the interleaved runs (``runner.Runner``);
6. statistics (``stats.analyse``), hints, metadata; the document is returned, the caller
   writes it.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shlex
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from elflayout.controls import (Aslr, ControlSet, CpuPin, FixedEnv, Governor, MeasurementLock, ReadAhead, Realtime,
                                StateFile, check_rt_priority)
from elflayout.errors import ElflayoutError
from elflayout.measure import census as census_mod
from elflayout.measure import isolate, rootless
from elflayout import results as model
from elflayout.measure.cache import can_drop_caches
from elflayout.measure.runner import SEEK_PAGES, STATES, Plan, Runner, Variant
from elflayout.storage import SlowStorage
from elflayout.storage.server import cleanup_stale
from elflayout.tracefs import file_key, remove_stale_instances, tracefs_status

CENSUS_METHODS = ("evict", "drop", "none")


@dataclass
class MeasurePlan:
    """What to measure and under which controls (``elflayout measure``'s options)."""

    variants: list[tuple[str, str]]  # (name, shell command)
    states: list[str] = field(default_factory=lambda: ["selective", "hot"])
    runs: int = 10
    warmup: int = 0
    files: list[str] = field(default_factory=list)
    seed: int = 0
    read_ahead_kb: int | None = 128  # None: keep the device's value
    no_aslr: bool = False
    pin: list[int] | None = None
    realtime: int | None = None  # SCHED_FIFO priority of the measured processes (controls.Realtime)
    governor: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    census: str | None = None  # evict | drop | none; None: drop with the cold state, else evict
    census_under: list[str] = field(default_factory=list)
    retries: int = 2
    timeout: float | None = 600
    trace: bool = True
    storage: str | None = None
    rootless: bool | None = None  # None: when not root (measure.rootless)
    isolate: bool = False  # serve --files from a private loop device (measure.isolate)
    emulator: str | None = None  # --emulator for every variant; None: detected per program
    argv: list[str] = field(default_factory=lambda: list(sys.argv))

    def check(self) -> None:
        """One ``ElflayoutError`` naming the option at fault (nothing is touched yet)."""
        names = [n for n, _ in self.variants]
        if not names:
            raise ElflayoutError("--name: at least one variant is needed")
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ElflayoutError(f"--name: variant name {sorted(dup)[0]!r} is used twice")
        for n, c in self.variants:
            if not c.strip():
                raise ElflayoutError(f"--name {n}: empty command")
        if self.runs < 1:
            raise ElflayoutError(f"--runs: must be at least 1 (got {self.runs})")
        if self.timeout is not None and self.timeout < 0:
            raise ElflayoutError(f"--timeout: must be 0 (no limit) or more (got {self.timeout:g})")
        if self.retries < 0:
            raise ElflayoutError(f"--retries: must be 0 or more (got {self.retries})")
        if self.warmup < 0:
            raise ElflayoutError(f"--warmup: must be 0 or more (got {self.warmup})")
        bad = [s for s in self.states if s not in STATES]
        if bad or not self.states:
            raise ElflayoutError(f"--state: {bad[0] if bad else 'none'!r} (choose from {', '.join(STATES)})")
        for f in self.files:
            if not os.path.exists(f):
                raise ElflayoutError(f"{f}: no such file (--files)")
            if not os.path.isfile(f):
                raise ElflayoutError(f"{f}: not a regular file (--files)")
            if not os.access(f, os.R_OK):
                raise ElflayoutError(f"{f}: not readable (--files)")
        for d in self.census_under:
            if not os.path.isdir(d):
                raise ElflayoutError(f"{d}: not a directory (--census-under)")
        if "cold" in self.states:
            why = can_drop_caches()
            if why:
                raise ElflayoutError(why)
        if self.census not in (None, *CENSUS_METHODS):
            raise ElflayoutError(f"--census: {self.census!r} (choose from {', '.join(CENSUS_METHODS)})")
        if self.census == "none" and not self.files:
            raise ElflayoutError("--census none needs --files (nothing would be measured)")
        if self.read_ahead_kb is not None and self.read_ahead_kb <= 0:
            raise ElflayoutError(f"--read-ahead-kb: expected a positive size in KiB or -1 (got {self.read_ahead_kb})")
        if self.realtime is not None:
            check_rt_priority(self.realtime)
        if self.storage and not self.files:
            raise ElflayoutError("--storage needs --files: it serves the directories holding them")
        rootless.check_plan(self)
        isolate.check_plan(self)


def restore_stale() -> list[str]:
    """Repair what dead sessions left: system settings, trace instances, then emulated-disk
    mounts; one sentence per repair."""
    out = StateFile.restore_stale()
    out += [f"stale trace instance removed: {name}" for name in remove_stale_instances()]
    try:
        out += [f"stale emulated-disk mount or run directory removed: {c}" for c in cleanup_stale()]
    except OSError:
        pass
    return out


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def fs_of(path: str) -> dict:
    """Filesystem type, source device and mount point holding ``path`` (mountinfo)."""
    real = os.path.realpath(path)
    best = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, post = line.split(" - ", 1)
        f = pre.split()
        mp = f[4].replace("\\040", " ")
        if real == mp or real.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) >= len(best[0]):
                fstype, source = post.split()[:2]
                best = (mp, fstype, source)
    return {"mount": best[0], "fs": best[1], "device": best[2]} if best else {}


def hints(runs: list[dict], summary: list[dict]) -> list[str]:
    """Warnings with a concrete remedy when the data look wrong (hyperfine's habit)."""
    out = []
    cells = {}
    for r in runs:
        if not r.get("interference"):
            cells.setdefault((r["variant"], r["state"]), []).append(r)
    for (v, s), rs in cells.items():
        w = np.array([r["wall_s"] for r in sorted(rs, key=lambda r: r["round"])])
        if len(w) >= 4:
            rest = w[1:]
            mad = np.median(np.abs(rest - np.median(rest))) or 1e-9
            if w[0] > np.median(rest) + 5 * 1.4826 * mad and w[0] > 1.2 * np.median(rest):
                out.append(f"{v}/{s}: the first run was {w[0] / np.median(rest):.1f}x slower than the median: "
                           f"use --warmup 1 (or more)")
        pages = {r["pages_read"] for r in rs}
        if s != "hot" and len(pages) > 1:
            out.append(f"{v}/{s}: pages read vary between runs ({min(pages)}..{max(pages)}): see the per-file "
                       f"spread in metadata.spread (multi-process startups and timing-dependent reads vary; "
                       f"another process may also be reading the files)")
    small = sorted({f"{v}/{s}" for (v, s), rs in cells.items() if len(rs) < 4})
    if small:
        out.append(f"fewer than 4 runs in {', '.join(small)}: intervals and verdicts are not reliable; use --runs 10 "
                   f"or more")
    bad = [r for r in runs if r.get("interference")]
    if bad:
        causes = {r["interference"] for r in bad}
        out.append(f"{len(bad)} run(s) were disturbed (see runs[].interference; for example: {min(causes)}) and are "
                   f"left out of the statistics: measure on a private device (--isolate) or on a quieter machine, "
                   f"or name fewer shared files")
    for srow in summary:
        if srow["metric"] == "wall_s" and srow.get("cov") and srow["cov"] > 0.10:
            out.append(f"{srow['variant']}/{srow['state']}: wall time CoV {srow['cov'] * 100:.0f}% > 10%: the machine "
                       f"is noisy; try --realtime, --pin CPU, --no-aslr, more --runs, and check what else is running")
    return out


def order_hints(plan: Plan) -> list[str]:
    """A remedy when the rounds do not fill whole cycles of the balanced order."""
    cycle = plan.order_record()["variant_cycle"]
    if plan.runs % cycle == 0:
        return []
    more = -(-plan.runs // cycle) * cycle
    return [f"--runs {plan.runs} is not a multiple of {cycle} (a cycle of the balanced order of "
            f"{len(plan.variants)} variants): positions in a round are only partly balanced; use --runs {more}"]


def _storage_mounts(plan: MeasurePlan, stack: contextlib.ExitStack) -> tuple[list, list[str]]:
    """Mount one emulated slow disk per directory holding --files; ([SlowStorage], dirs)."""
    if not plan.storage:
        return [], []
    dirs = list(dict.fromkeys(os.path.dirname(os.path.realpath(f)) for f in plan.files))
    return [stack.enter_context(SlowStorage(d, plan.storage, read_ahead_kb=plan.read_ahead_kb)) for d in dirs], dirs


def apply_storage(variants: list[Variant], mounts, dirs, files, extra_env):
    """Rewrite commands and files for the mounts; return (variant_env, files, source_of).

    One directory: ``{mount}`` in commands is its mount, and the mount goes first in
    LD_LIBRARY_PATH so the dynamic loader finds the served copies. Several directories
    (A/B of same-named libraries): ``{mount0}``, ``{mount1}``... in the order of --files,
    and no LD_LIBRARY_PATH (the commands say which copy they use).
    """
    paths = [m.path for m in mounts]
    by_dir = dict(zip(dirs, paths))
    variant_env = {}
    for v in variants:
        if len(paths) == 1:
            v.command = v.command.replace("{mount}", paths[0]).replace("{mount0}", paths[0])
            variant_env[v.name] = {"LD_LIBRARY_PATH": ":".join(
                [paths[0]] + [p for p in extra_env.get("LD_LIBRARY_PATH", "").split(":") if p])}
        else:
            if "{mount}" in v.command:
                raise ElflayoutError(f"variant {v.name}: --files are in {len(paths)} directories: use {{mount0}}.."
                                     f"{{mount{len(paths) - 1}}} instead of {{mount}}")
            for i, p in enumerate(paths):
                v.command = v.command.replace(f"{{mount{i}}}", p)
    served = [os.path.join(by_dir[os.path.dirname(os.path.realpath(f))], os.path.basename(f)) for f in files]
    return variant_env, served, dict(zip(served, files))


def _storage_metadata(plan, mounts, dirs) -> dict | None:
    if not mounts:
        return None
    md = {"preset": plan.storage, "dirs": dirs, "mounts": [m.path for m in mounts], "mount": mounts[0].path}
    for k in ("info", "stats"):
        try:
            md[k] = [getattr(m, k)() for m in mounts]
        except (ElflayoutError, OSError) as e:  # metadata only: never lose the results for it
            md[k] = {"error": str(e)}
    return md


def _notes(plan: MeasurePlan, trace_why: str | None) -> list[str]:
    notes = []
    if trace_why:
        notes.append(f"no page-cache tracing ({trace_why}): pages read are mincore residency after each run")
    if "cold" in plan.states:
        notes.append("cold state drops the whole page cache (sync + drop_caches): system libraries are flushed "
                     "too, which biases startup times upwards (Hommey 2011); selective is the realistic cold state")
    return notes


def files_under_test(census: list[dict]) -> tuple[list[str], list[dict]]:
    """(files to measure, files left out with the reason) from census records.

    A file is measured when the census resolved it to a regular file that still exists
    and did not leave it resident (``kept``: mapped or opened by another process, or
    outside ``--census-under``); per-run temporary files (gone after the run) and
    unresolved ``dev:ino`` entries are listed as left out, never measured.
    """
    seen: dict[str, None] = {}
    left: dict[str, dict] = {}
    for c in census:
        for f in c["files"]:
            p = f["path"]
            if f.get("kept"):
                left.setdefault(p, {"path": p, "pages": f["pages"], "why": f["kept"]})
            elif not f["resolved"]:
                left.setdefault(p, {"path": p, "pages": f["pages"], "why": "no path: deleted during or after the run "
                                                                             "(a temporary file), or outside the "
                                                                             "scanned directories"})
            elif f["is_dir"]:
                continue
            elif not os.path.isfile(p):
                left.setdefault(p, {"path": p, "pages": f["pages"], "why": "gone after the run (temporary file)"})
            else:
                seen.setdefault(p, None)
    for p in seen:
        left.pop(p, None)
    return list(seen), list(left.values())


def _census(plan: MeasurePlan, runner: Runner, variants: list[Variant], method: str,
            emit: Callable[[str, dict], None]) -> tuple[list[dict], list[dict]]:
    """Step 2: the census of what each variant reads; without --files, the files under
    test are what it found (``runner`` is told). Returns (census, files left out)."""
    census: list[dict] = []
    if method != "none":
        for v in variants:
            emit("census", {"variant": v.name, "method": method})
            census.append(census_mod.census(runner, v, method, under=plan.census_under))
        # the census evicted (or dropped) files: bring them back untimed, or the
        # first measured run would pay for them alone
        for v in variants:
            runner.spawn(v)
    left_out: list[dict] = []
    if not runner.plan.files:
        runner.plan.files, left_out = files_under_test(census)
        runner.keys = {f: file_key(f) for f in runner.plan.files}
        if not runner.plan.files:
            raise ElflayoutError("the census found no file to measure (all cached and mapped by other processes, "
                                 "or outside --census-under): name the files with --files or use --census drop")
    return census, left_out


def _census_before_isolation(plan: MeasurePlan, variants: list[Variant], envctl: FixedEnv,
                             emit: Callable[[str, dict], None], method: str, anchor: str):
    """``--isolate`` without ``--files``: the census on the shared disk (its read_ahead_kb
    set as for a session), before the files it finds are served from the private device.
    Returns (files, census, files left out)."""
    with contextlib.ExitStack() as stack:
        readahead = ReadAhead(anchor, plan.read_ahead_kb)
        cs = stack.enter_context(ControlSet([readahead, Aslr(plan.no_aslr), envctl]))
        runner = Runner(Plan(variants, [], 0, files=[]), cs, envctl, on_event=emit, retries=plan.retries,
                        timeout=plan.timeout or None, readahead=readahead)
        stack.callback(runner.close)
        census, left_out = _census(plan, runner, variants, method, emit)
    return runner.plan.files, census, left_out


def _identify(files: list[str], source_of: dict[str, str]) -> dict[str, dict]:
    """Step 3: identity of every file under test. Before the runs (sha256 reads whole
    files), so the page cache after the session shows only what the last run read;
    hashed from the original file (through a slow mount it costs minutes)."""
    md: dict[str, dict] = {}
    for f in files:
        md[f] = model.file_metadata(source_of.get(f, f))
        md[f].update(fs_of(f))
        if f in source_of:
            md[f]["served_from"] = os.path.realpath(source_of[f])
    return md


def _machine() -> dict:
    """The machine a session ran on (results metadata)."""
    u = os.uname()
    return {"host": socket.gethostname(), "kernel": f"{u.sysname} {u.release} {u.version}", "machine": u.machine,
            "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "page_size": os.sysconf("SC_PAGE_SIZE")}


def measure(plan: MeasurePlan, on_event: Callable[[str, dict], None] | None = None) -> dict:
    """Run a session; return the results document (format v1). See the module docstring.

    ``on_event(kind, info)`` reports progress: ``note`` {message}, ``lock`` {waiting_for},
    ``census`` {variant, method}, ``start`` {total}, ``warmup``, ``run`` (a run record),
    ``warning`` {message}.
    """
    from elflayout.measure import stats  # scipy takes seconds to import: not before the plan is checked

    plan.check()
    emit = on_event or (lambda kind, info: None)
    states = list(dict.fromkeys(plan.states))
    variants = [Variant(n, c, plan.emulator) for n, c in plan.variants]
    residency, rootless_why = rootless.for_plan(plan)
    trace_why = rootless_why or ("disabled by --no-trace" if not plan.trace else tracefs_status())
    notes = _notes(plan, None if residency else trace_why)
    census_method = plan.census or ("drop" if "cold" in states else "evict")
    if trace_why and census_method != "none":
        if not plan.files:
            raise ElflayoutError(f"no --files and no census possible ({trace_why}): name the files with --files")
        census_method = "none"
    envctl = FixedEnv(plan.env)
    # a foreign program without its emulator or system root fails here, before any run
    emulated = {v.name: e for v in variants if (e := v.emulated(envctl.build()))}
    anchor = plan.files[0] if plan.files else variants[0].argv(envctl.build())[0][0]
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    with contextlib.ExitStack() as stack:
        lock = stack.enter_context(MeasurementLock(on_wait=lambda holder: emit("lock", {"waiting_for": holder})))
        restored = restore_stale()
        for r in restored:
            notes.append(f"restored after an interrupted session: {r}")
        found = None
        if plan.isolate and not plan.files:  # the census finds the files to isolate, on the shared disk
            found = _census_before_isolation(plan, variants, envctl, emit, census_method, anchor)
            files, anchor = found[0], found[0][0]
        else:
            files = list(plan.files)
        iso = stack.enter_context(isolate.Isolation(files, emit)) if plan.isolate else None
        readahead = ReadAhead(anchor, None if residency else plan.read_ahead_kb)
        if residency:
            notes.insert(0, rootless.announce(residency.method, readahead.before, rootless_why))
        elif plan.read_ahead_kb is not None and readahead.available():
            notes.append(f"read_ahead_kb not set: {readahead.available()}")
        for n in notes:
            emit("note", {"message": n})
        cs = stack.enter_context(ControlSet([readahead, Aslr(plan.no_aslr), CpuPin(plan.pin),
                                             Realtime(plan.realtime), envctl, Governor(plan.governor)]))
        mounts, storage_dirs = _storage_mounts(plan, stack)
        run_plan = Plan(variants, states, plan.runs, plan.warmup, plan.seed, files)
        variant_env, source_of = {}, {}
        if mounts:
            variant_env, run_plan.files, source_of = apply_storage(variants, mounts, storage_dirs, plan.files, plan.env)
        runner = Runner(run_plan, cs, envctl, trace=not trace_why, on_event=emit, variant_env=variant_env,
                        retries=plan.retries, timeout=plan.timeout or None, readahead=readahead, residency=residency)
        stack.callback(runner.close)
        census, left_out = found[1:] if found else _census(plan, runner, variants, census_method, emit)
        files_md = _identify(run_plan.files, source_of)
        emit("start", {"total": len(run_plan.schedule())})
        runs = runner.run()
        storage_md = _storage_metadata(plan, mounts, storage_dirs)
        control_records = cs.records()
        isolation_md = iso.record() if iso else None
        lock_record = lock.record()
    duration = time.monotonic() - t_start
    analysis = stats.analyse(runs, [v.name for v in variants], states, seed=plan.seed)
    metadata = {
        "argv": plan.argv, "started": started.isoformat(timespec="seconds"), "duration_s": round(duration, 3),
        **_machine(),
        "states": states, "runs": plan.runs, "warmup": plan.warmup,
        "seed": plan.seed, "order": run_plan.order_record(), "seek_pages": SEEK_PAGES,
        "read_ahead_kb": control_records["read_ahead_kb"]["applied"],
        "aslr": control_records["aslr"]["applied"], "controls": control_records, "lock": lock_record,
        "source": residency.method if residency else "mincore" if trace_why else "trace",
        "trace_pid_filter": runner.pid_filter,
        "census_method": census_method, "census_under": [os.path.realpath(d) for d in plan.census_under],
        "census": census, "census_left_out": left_out, "files": files_md,
        "storage": storage_md, "spread": runner.spread(runs),
        **({"rootless": {**residency.record(), "why": rootless_why}} if residency else {}),
        **({"isolation": isolation_md} if isolation_md else {}),
        "notes": notes, "warnings": runner.warnings,
        "hints": hints(runs, analysis["summary"]) + order_hints(run_plan),
    }
    if emulated:
        metadata["emulated"] = emulated
        notes.append(f"variants {', '.join(emulated)} ran under an emulator: their times are the emulator's, "
                     f"not comparable with native runs (page counts are)")
    return model.build(metadata, [{"name": v.name, "command": v.command} for v in variants], runs, analysis)


def command(argv, env: dict | None = None, libdir=None) -> str:
    """A variant's shell command: ``env -u PYTHONPATH [LD_LIBRARY_PATH=libdir] K=V... ARGV``
    (quoted; the harness's own PYTHONPATH must not reach a measured Python)."""
    envs = [f"{k}={shlex.quote(str(v))}" for k, v in (env or {}).items() if k != "LD_LIBRARY_PATH" or libdir is None]
    if libdir is not None:
        envs.insert(0, f"LD_LIBRARY_PATH={shlex.quote(str(libdir))}")
    return " ".join(["env", "-u", "PYTHONPATH", *envs, *(shlex.quote(str(a)) for a in argv)])


def all_disturbed(doc: dict) -> list[str]:
    """Cells (``variant/state``) whose every run was disturbed: no figure for them."""
    cells: dict[tuple[str, str], list[bool]] = {}
    for r in doc["runs"]:
        cells.setdefault((r["variant"], r["state"]), []).append(bool(r.get("interference")))
    return [f"{v}/{s}" for (v, s), bad in cells.items() if all(bad)]


def disturbance_causes(doc: dict, cells: list[str] | None = None) -> list[tuple[str, int]]:
    """[(cause, runs)] recorded in ``runs[].interference`` for ``cells`` (all when None),
    the most frequent first."""
    counts: dict[str, int] = {}
    for r in doc["runs"]:
        why = r.get("interference")
        if why and (cells is None or f"{r['variant']}/{r['state']}" in cells):
            counts[why] = counts.get(why, 0) + 1
    return sorted(counts.items(), key=lambda kv: -kv[1])


def disturbed_message(doc: dict, cells: list[str], files_named: bool) -> str:
    """Why every run of ``cells`` was disturbed and what to do (one line): the cause the
    results record, then isolation; naming the files only when they were not named."""
    causes = disturbance_causes(doc, cells)
    total = sum(n for _, n in causes)
    cause, n = causes[0] if causes else ("no cause recorded", 0)
    more = f"; {len(causes) - 1} other cause(s) in runs[].interference" if len(causes) > 1 else ""
    fix = "measure on a private device (--isolate) or on a quieter machine"
    if not files_named:
        fix += ", or name the files with --files / --census-under"
    return (f"every run of {', '.join(cells)} was disturbed: {cause} ({n} of {total} runs{more}): no figure for "
            f"{'it' if len(cells) == 1 else 'them'}; {fix}")
