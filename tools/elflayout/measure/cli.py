"""``elflayout measure``: cold / selective / hot startup of named commands, interleaved."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import sys
import time
from pathlib import Path

from elflayout import fileio
from elflayout.errors import ElflayoutError
from elflayout.pages import SEEK_PAGES

SUMMARY = "measure cold/selective/hot startup: time, faults, pages read per file"
EPILOG = """\
examples:
  # A/B of two builds of a library, selectively cold (only the libraries evicted) and hot,
  # 20 interleaved rounds, pages read per library from the page-cache tracepoint:
  elflayout measure --name before 'llc-16 --version' \\
      --name after 'LD_LIBRARY_PATH=build/relinked llc-16 --version' \\
      --files /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 build/relinked/libLLVM-16.so.1 \\
      --state selective --state hot --runs 20 -o results.json

  # Which files does a startup read? (no --files: a census run finds them)
  elflayout measure --name py '/usr/bin/python3.11 -S -c pass' --runs 5 -o py.json

  # the same from an emulated 7200 rpm disk (FUSE): each directory of --files gets a
  # mount, {mount0}, {mount1}... in the commands (one directory: {mount}, and it is
  # put first in LD_LIBRARY_PATH automatically)
  elflayout measure --name before 'LD_LIBRARY_PATH={mount0} llc-16 --version' \
      --name after 'LD_LIBRARY_PATH={mount1} llc-16 --version' \
      --files build/a/libLLVM-16.so.1 build/b/libLLVM-16.so.1 --storage hdd --runs 10 -o slow.json

  elflayout compare results.json --markdown

notes:
  cold = sync + drop_caches: it also flushes system libraries that a user's desktop would
  have cached, which biases results (Hommey 2011); prefer selective. read_ahead_kb of the
  device holding the files is set to 128 for the session and restored afterwards (also
  on Ctrl-C / SIGTERM). Page counts need root and tracefs; otherwise pages are estimated
  from mincore residency after each run and flagged as such.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", nargs=2, action="append", metavar=("NAME", "CMD"), required=True,
                   help="a named variant: its name and its shell command (repeat for A/B)")
    p.add_argument("--state", action="append", choices=("selective", "cold", "hot"),
                   help="cache state(s) to measure (repeatable; default: selective and hot)")
    p.add_argument("--runs", type=int, default=10, help="rounds; each runs every variant x state once (default 10)")
    p.add_argument("--warmup", type=int, default=0, help="untimed runs of each variant before the first round")
    p.add_argument("--files", nargs="+", action="extend", metavar="PATH", default=[],
                   help="files whose pages read are reported (and evicted in the selective state); "
                        "default: the files the census finds")
    p.add_argument("--seed", type=int, default=0, help="seed of the shuffled run order and of the bootstrap (default 0)")
    p.add_argument("--read-ahead-kb", type=int, default=128,
                   help="read_ahead_kb for the device holding the files during the session (default 128; -1 keeps it)")
    p.add_argument("--no-aslr", action="store_true", help="disable ASLR in the measured processes (personality)")
    p.add_argument("--pin", type=int, action="append", metavar="CPU", help="pin measured processes to CPU (repeatable)")
    p.add_argument("--governor", metavar="NAME", help="set the cpufreq governor (e.g. performance) if present")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="add a variable to the fixed-size environment of every variant")
    p.add_argument("--census", choices=("evict", "drop", "none"), default=None,
                   help="how to find the files a startup reads (default: drop if --state cold, else evict; "
                        "none skips it when --files is given)")
    p.add_argument("--retries", type=int, default=2,
                   help="repeat a cold/selective run disturbed by another process up to N times (default 2)")
    p.add_argument("--timeout", type=float, default=600, metavar="SECONDS",
                   help="kill a run (and fail) after this long (default 600; 0: no limit)")
    p.add_argument("--no-trace", action="store_true", help="do not use tracefs: estimate pages from mincore")
    p.add_argument("--storage", metavar="PRESET",
                   help="serve the directories holding --files from an emulated slow disk (elflayout storage); "
                        "commands see the mounts as {mount0}, {mount1}... (one directory: {mount}, also put "
                        "first in LD_LIBRARY_PATH)")
    p.add_argument("-o", "--output", required=True, help="results file (JSON, .gz to compress)")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")


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


def validate(args) -> None:
    names = [n for n, _ in args.name]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ElflayoutError(f"--name: variant name {sorted(dup)[0]!r} is used twice")
    for n, c in args.name:
        if not c.strip():
            raise ElflayoutError(f"--name {n}: empty command")
    if args.runs < 1:
        raise ElflayoutError(f"--runs: must be at least 1 (got {args.runs})")
    if args.timeout < 0:
        raise ElflayoutError(f"--timeout: must be 0 (no limit) or more (got {args.timeout:g})")
    if args.retries < 0:
        raise ElflayoutError(f"--retries: must be 0 or more (got {args.retries})")
    if args.warmup < 0:
        raise ElflayoutError(f"--warmup: must be 0 or more (got {args.warmup})")
    for f in args.files:
        if not os.path.exists(f):
            raise ElflayoutError(f"{f}: no such file (--files)")
        if not os.path.isfile(f):
            raise ElflayoutError(f"{f}: not a regular file (--files)")
        if not os.access(f, os.R_OK):
            raise ElflayoutError(f"{f}: not readable (--files)")
    for e in args.env:
        if "=" not in e or not e.split("=", 1)[0]:
            raise ElflayoutError(f"--env {e!r}: expected NAME=VALUE")
    states = args.state or ["selective", "hot"]
    if "cold" in states:
        from elflayout.measure.cache import can_drop_caches

        why = can_drop_caches()
        if why:
            raise ElflayoutError(why)
    if args.census == "none" and not args.files:
        raise ElflayoutError("--census none needs --files (nothing would be measured)")
    if args.read_ahead_kb < -1 or args.read_ahead_kb == 0:
        raise ElflayoutError(f"--read-ahead-kb: expected a positive size in KiB or -1 (got {args.read_ahead_kb})")


def hints(runs: list[dict], summary: list[dict]) -> list[str]:
    """Warnings with a concrete remedy when the data look wrong (hyperfine's habit)."""
    out = []
    import numpy as np

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
            out.append(f"{v}/{s}: pages read vary between runs ({min(pages)}..{max(pages)}): another process may "
                       f"be reading or mapping the files, or eviction was incomplete")
    small = sorted({f"{v}/{s}" for (v, s), rs in cells.items() if len(rs) < 4})
    if small:
        out.append(f"fewer than 4 runs in {', '.join(small)}: intervals and verdicts are not reliable; use --runs 10 "
                   f"or more")
    bad = [r for r in runs if r.get("interference")]
    if bad:
        out.append(f"{len(bad)} run(s) were disturbed by other processes using the files under test (see runs[]."
                   f"interference): measure on a quiet machine, or exclude them")
    for srow in summary:
        if srow["metric"] == "wall_s" and srow.get("cov") and srow["cov"] > 0.10:
            out.append(f"{srow['variant']}/{srow['state']}: wall time CoV {srow['cov'] * 100:.0f}% > 10%: the machine "
                       f"is noisy; try --pin CPU, --no-aslr, more --runs, and check what else is running")
    return out


def _storage_ctx(args, files):
    """(context manager yielding [SlowStorage, ...] or None, dirs served: one mount per directory)."""
    import contextlib

    if not args.storage:
        return contextlib.nullcontext(None), []
    if not files:
        raise ElflayoutError("--storage needs --files: it serves the directories holding them")
    try:
        from elflayout.storage import SlowStorage
    except ImportError:
        raise ElflayoutError("--storage: elflayout.storage is not available in this build") from None
    dirs = list(dict.fromkeys(os.path.dirname(os.path.realpath(f)) for f in files))
    ra = None if args.read_ahead_kb == -1 else args.read_ahead_kb

    @contextlib.contextmanager
    def mounts():
        with contextlib.ExitStack() as st:
            yield [st.enter_context(SlowStorage(d, args.storage, read_ahead_kb=ra)) for d in dirs]

    return mounts(), dirs


def _apply_storage(variants, mounts, dirs, files, extra_env):
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


def run(args) -> int:
    validate(args)
    out = fileio.check_output(args.output, force=args.force, inputs=tuple(args.files))
    from elflayout.measure import census as census_mod
    from elflayout.measure import model, stats
    from elflayout.measure.controls import Aslr, ControlSet, CpuPin, FixedEnv, Governor, ReadAhead
    from elflayout.measure.runner import Plan, Runner, Variant
    from elflayout.tracefs import file_key, tracefs_status

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    err = Console(stderr=True)
    states = list(dict.fromkeys(args.state or ["selective", "hot"]))
    variants = [Variant(n, c) for n, c in args.name]
    extra_env = dict(e.split("=", 1) for e in args.env)
    trace_why = "disabled by --no-trace" if args.no_trace else tracefs_status()
    notes = []
    if trace_why:
        notes.append(f"no page-cache tracing ({trace_why}): pages read are mincore residency after each run")
    if "cold" in states:
        notes.append("cold state drops the whole page cache (sync + drop_caches): system libraries are flushed "
                     "too, which biases startup times upwards (Hommey 2011); selective is the realistic cold state")
    census_method = args.census or ("drop" if "cold" in states else "evict")
    if trace_why and census_method != "none":
        if not args.files:
            raise ElflayoutError(f"no --files and no census possible ({trace_why}): name the files with --files")
        census_method = "none"
    envctl = FixedEnv(extra_env)
    anchor = args.files[0] if args.files else None
    if anchor is None:
        from elflayout.measure.runner import Variant as _V

        anchor = _V(*args.name[0]).argv(envctl.build())[0][0]
    controls = [ReadAhead(anchor, None if args.read_ahead_kb == -1 else args.read_ahead_kb), Aslr(args.no_aslr),
                CpuPin(args.pin), envctl, Governor(args.governor)]
    if args.read_ahead_kb != -1 and controls[0].available():
        notes.append(f"read_ahead_kb not set: {controls[0].available()}")
    if not args.quiet:
        for n in notes:
            err.print(f"[yellow]note:[/] {escape(n)}", soft_wrap=True, highlight=False)
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    plan = Plan(variants, states, args.runs, args.warmup, args.seed, list(args.files))
    census = []
    live = {}

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        console=err, disable=args.quiet, transient=False)

    def on_event(kind, info):
        if kind == "run":
            key = (info["variant"], info["state"])
            live.setdefault(key, []).append(info)
            rs = live[key]
            import numpy as np

            w = np.median([r["wall_s"] for r in rs]) * 1000
            pg = int(np.median([r["pages_read"] for r in rs]))
            progress.update(task, advance=1, description=f"{info['variant']}/{info['state']}: median {w:.1f} ms, "
                                                         f"{pg:,} pages (n={len(rs)})")
        elif kind == "warning" and not args.quiet:
            progress.console.print(f"[yellow]warning:[/] {escape(info['message'])}", soft_wrap=True, highlight=False)
        elif kind == "warmup":
            progress.update(task, description=f"warm-up {info['variant']} #{info['i'] + 1}")

    storage_cm, storage_dirs = _storage_ctx(args, args.files)
    source_of = {}  # path under test -> the original file (differs with --storage)
    with ControlSet(controls) as cs, storage_cm as mounts:
        variant_env = {}
        if mounts:
            variant_env, plan.files, source_of = _apply_storage(variants, mounts, storage_dirs, args.files, extra_env)
        runner = Runner(plan, cs, envctl, trace=not trace_why, on_event=on_event, variant_env=variant_env,
                        retries=args.retries, timeout=args.timeout or None)
        try:
            with progress:
                task = progress.add_task("census", total=len(plan.schedule()))
                if census_method != "none":
                    for v in variants:
                        progress.update(task, description=f"census of {v.name} ({census_method})")
                        census.append(census_mod.census(runner, v, census_method))
                    # the census evicted (or dropped) system libraries too: bring them back
                    # untimed, or the first measured run would pay for them alone
                    for v in variants:
                        runner.spawn(v)
                if not plan.files:
                    seen = {}
                    for c in census:
                        for f in c["files"]:
                            if f["resolved"] and not f["is_dir"] and os.path.isfile(f["path"]):
                                seen.setdefault(f["path"], None)
                    plan.files = list(seen)
                    runner.keys = {f: file_key(f) for f in plan.files}
                    if not plan.files:
                        raise ElflayoutError("the census found no file read at startup (all cached and mapped "
                                             "elsewhere?): name the files with --files or use --census drop")
                # identity (sha256 reads whole files) before the runs, so the page cache
                # after the session shows only what the last run read
                files_md = {}
                for f in plan.files:
                    # identity from the original: hashing through a slow mount costs minutes
                    files_md[f] = model.file_metadata(source_of.get(f, f))
                    files_md[f].update(fs_of(f))
                    if f in source_of:
                        files_md[f]["served_from"] = os.path.realpath(source_of[f])
                runs = runner.run()
        finally:
            runner.close()
            storage_md = None
            if mounts:
                storage_md = {"preset": args.storage, "dirs": storage_dirs, "mounts": [m.path for m in mounts],
                              "mount": mounts[0].path}
                for k in ("info", "stats"):
                    try:
                        storage_md[k] = [getattr(m, k)() for m in mounts]
                    except Exception as e:  # metadata only: never lose the results for it
                        storage_md[k] = {"error": str(e)}
        control_records = cs.records()
    duration = time.monotonic() - t_start
    analysis = stats.analyse(runs, [v.name for v in variants], states, seed=args.seed)
    hint_list = hints(runs, analysis["summary"])
    u = os.uname()
    metadata = {
        "argv": sys.argv, "started": started.isoformat(timespec="seconds"), "duration_s": round(duration, 3),
        "host": socket.gethostname(), "kernel": f"{u.sysname} {u.release} {u.version}", "machine": u.machine,
        "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
        "page_size": os.sysconf("SC_PAGE_SIZE"), "states": states, "runs": args.runs, "warmup": args.warmup,
        "seed": args.seed, "seek_pages": SEEK_PAGES,
        "read_ahead_kb": control_records["read_ahead_kb"]["applied"],
        "aslr": control_records["aslr"]["applied"], "controls": control_records,
        "source": "mincore" if trace_why else "trace", "trace_pid_filter": runner.pid_filter,
        "census_method": census_method, "census": census, "files": files_md,
        "storage": storage_md,
        "notes": notes, "warnings": runner.warnings, "hints": hint_list,
    }
    doc = model.build(metadata, [{"name": v.name, "command": v.command} for v in variants], runs, analysis)
    fileio.dump_json(doc, out)
    if not args.quiet:
        print(model.markdown(doc), end="")
        for h in hint_list:
            err.print(f"[yellow]hint:[/] {escape(h)}", soft_wrap=True, highlight=False)
        err.print(f"wrote {out} ({len(runs)} runs in {duration:.1f} s)")
    return 0
