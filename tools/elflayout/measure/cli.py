"""``elflayout measure``: cold / selective / hot startup of named commands, interleaved."""

from __future__ import annotations

import argparse
import sys

from elflayout import fileio
from elflayout.errors import ElflayoutError

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
  elflayout measure --name before 'LD_LIBRARY_PATH={mount0} llc-16 --version' \\
      --name after 'LD_LIBRARY_PATH={mount1} llc-16 --version' \\
      --files build/a/libLLVM-16.so.1 build/b/libLLVM-16.so.1 --storage hdd --runs 10 -o slow.json

  # a browser: the census finds the ~200 files it reads; only files under its own
  # directory are evicted (system libraries other programs map stay warm, and are listed)
  elflayout measure --name chromium \\
      'chromium --headless --no-sandbox --user-data-dir=/tmp/p --screenshot=/tmp/x.png data:text/html,x' \\
      --census-under /usr/lib/chromium --runs 10 -o chromium.json

  # with and without a startup preload plan (elflayout preload plan): adds 'llc+preload'
  elflayout measure --name llc 'llc-16 --version' --files build/a/libLLVM-16.so.1 --storage hdd \
      --preload plan.json --runs 5 -o preload.json

  # on a machine shared with other jobs: the files served from a private loop device at
  # their own paths (its own read_ahead_kb; nobody else can change it or evict them)
  elflayout measure --name llc 'llc-16 --version' \
      --files /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 --isolate --runs 10 -o iso.json

  elflayout compare results.json --markdown
  elflayout measure --restore     # after a session was killed with SIGKILL

notes:
  cold = sync + drop_caches: it also flushes system libraries that a user's desktop would
  have cached, which biases results (Hommey 2011); prefer selective. read_ahead_kb of the
  device holding the files is set to 128 for the session and restored afterwards (also
  on Ctrl-C / SIGTERM). Page counts need root and tracefs; without root (or with
  --rootless) pages read are the residency (cachestat, or mincore) after each run minus
  before it, read_ahead_kb is recorded, not set, and --files is required. Sessions on one machine take
  turns (a lock in /run/elflayout; the wait is recorded); read_ahead_kb is checked before
  and after every run, and a value left changed by a killed session is restored by the
  next one (or --restore). Exit 1 when every run of a variant was disturbed.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", nargs=2, action="append", metavar=("NAME", "CMD"),
                   help="a named variant: its name and its shell command (repeat for A/B)")
    p.add_argument("--state", action="append", choices=("selective", "cold", "hot"),
                   help="cache state(s) to measure (repeatable; default: selective and hot)")
    p.add_argument("--runs", type=int, default=10, help="rounds; each runs every variant x state once (default 10)")
    p.add_argument("--warmup", type=int, default=0, help="untimed runs of each variant before the first round")
    p.add_argument("--files", nargs="+", action="extend", metavar="PATH", default=[],
                   help="files whose pages read are reported (and evicted in the selective state); "
                        "default: the files the census finds")
    p.add_argument("--seed", type=int, default=0, help="seed of the run order (which variant and state take which role in the balanced order) and of the bootstrap (default 0)")
    p.add_argument("--read-ahead-kb", type=int, default=128,
                   help="read_ahead_kb for the device holding the files during the session (default 128; -1 keeps it)")
    p.add_argument("--no-aslr", action="store_true", help="disable ASLR in the measured processes (personality)")
    p.add_argument("--pin", type=int, action="append", metavar="CPU", help="pin measured processes to CPU (repeatable)")
    p.add_argument("--realtime", type=int, nargs="?", const=1, metavar="PRIORITY",
                   help="run measured processes under SCHED_FIFO (default priority 1): other jobs' time slices "
                        "leave their wall time (needs root or CAP_SYS_NICE; docs/methodology.md)")
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
    p.add_argument("--rootless", action="store_true",
                   help="measure as without root even when root (chosen by itself when not root): pages read = "
                        "page-cache residency (cachestat, or mincore) after each run minus before; read_ahead_kb "
                        "recorded, not set; needs --files (docs/methodology.md)")
    p.add_argument("--isolate", action="store_true",
                   help="serve --files (without them: the files the census finds, on the shared disk) from a "
                        "private loop device (an ext4 image on the same disk) with its own read_ahead_kb, bound "
                        "over the same paths in a private mount namespace: other processes cannot change the "
                        "read-ahead or evict the files (needs root; docs/methodology.md)")
    p.add_argument("--storage", metavar="PRESET",
                   help="serve the directories holding --files from an emulated slow disk (elflayout storage); "
                        "commands see the mounts as {mount0}, {mount1}... (one directory: {mount}, also put "
                        "first in LD_LIBRARY_PATH)")
    p.add_argument("--preload", metavar="PLAN",
                   help="also run each variant as NAME+preload, started by the preloader with this plan "
                        "(elflayout preload plan; docs/preload.md)")
    p.add_argument("--census-under", action="append", default=[], metavar="DIR",
                   help="the census measures only files under DIR (repeatable; e.g. the application's own "
                        "directory); files outside are left warm and listed")
    p.add_argument("--restore", action="store_true",
                   help="only restore what a killed session left changed (read_ahead_kb, emulated-disk mounts), "
                        "then exit")
    p.add_argument("--emulator", metavar="CMD",
                   help="run every variant's program under CMD (e.g. 'qemu-aarch64 -L ROOT'); default: programs "
                        "of another machine (AArch64) run under qemu-user with the arm64 root of "
                        "scripts/arm64-root.sh, their times marked not comparable")
    p.add_argument("-o", "--output", help="results file (JSON, .gz to compress)")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")


def plan_of(args):
    """The session plan (``session.MeasurePlan``) of parsed ``measure`` options; with
    --preload each variant also runs as NAME+preload (the session knows nothing of preloading)."""
    # verb modules load their stages when they run, not for --help (numpy, the harness)
    from elflayout.measure.session import MeasurePlan
    from elflayout.preload.runner import measure_variants

    for e in args.env:
        if "=" not in e or not e.split("=", 1)[0]:
            raise ElflayoutError(f"--env {e!r}: expected NAME=VALUE")
    if args.read_ahead_kb < -1 or args.read_ahead_kb == 0:
        raise ElflayoutError(f"--read-ahead-kb: expected a positive size in KiB or -1 (got {args.read_ahead_kb})")
    variants = [(n, c) for n, c in args.name]
    if args.preload:
        variants = measure_variants(variants, args.preload, args.files, args.storage)
    return MeasurePlan(
        variants=variants, states=list(dict.fromkeys(args.state or ["selective", "hot"])),
        runs=args.runs, warmup=args.warmup, files=list(args.files), seed=args.seed,
        read_ahead_kb=None if args.read_ahead_kb == -1 else args.read_ahead_kb, no_aslr=args.no_aslr, pin=args.pin,
        realtime=args.realtime, governor=args.governor, env=dict(e.split("=", 1) for e in args.env),
        census=args.census, census_under=list(args.census_under), retries=args.retries,
        timeout=args.timeout or None, trace=not args.no_trace, storage=args.storage,
        emulator=args.emulator, rootless=True if args.rootless else None, isolate=args.isolate,
        argv=list(sys.argv))


class _OptionsParser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage and exit
        raise ElflayoutError(f"--measure-arg: not valid options of elflayout measure ({message})")


def plan_from_options(measure_args: list[str], verb: str):
    """A session plan carrying the controls given as ``measure`` options (``--measure-arg``
    of ``verb``), which sets the variants, runs, states and files itself."""
    for a in measure_args:
        opt = a.split("=", 1)[0]
        if opt in ("--name", "--runs", "--state", "--files", "-o", "--output", "--seed"):
            raise ElflayoutError(f"--measure-arg {a}: set by this verb itself")
        if opt == "--preload":
            raise ElflayoutError(f"--measure-arg {a}: not for {verb} (compare with and without a preload plan "
                                 f"in 'elflayout measure --preload')")
    p = _OptionsParser(prog="elflayout measure", add_help=False)
    add_arguments(p)
    return plan_of(p.parse_args(["--name", "x", "true", "-o", "unused.json", *measure_args]))


def restore() -> int:
    from elflayout.controls import MeasurementLock
    from elflayout.measure import session

    with MeasurementLock(on_wait=lambda who: print(f"waiting for the measurement session: {who}", file=sys.stderr)):
        done = session.restore_stale()
    for d in done:
        print(f"restored {d}")
    if not done:
        print("nothing to restore: no setting left changed by a dead measurement session")
    return 0


def run(args) -> int:
    if args.restore:
        return restore()
    if not args.name or not args.output:
        raise ElflayoutError("--name NAME CMD and -o FILE are required (or --restore)")
    # rich draws the live progress only: --restore and plan_of's callers do without it
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from elflayout.measure import session
    from elflayout import results as model

    plan = plan_of(args)
    plan.check()
    out = fileio.check_output(args.output, force=args.force, inputs=tuple(args.files))
    err = Console(stderr=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        console=err, disable=args.quiet, transient=False)
    task = progress.add_task("census", total=None)
    live: dict[tuple[str, str], list[dict]] = {}

    def on_event(kind, info):
        say = progress.console.print
        if kind == "note" and not args.quiet:
            say(f"[yellow]note:[/] {escape(info['message'])}", soft_wrap=True, highlight=False)
        elif kind == "lock" and not args.quiet:
            say(f"waiting for another measurement on this machine to finish ({escape(str(info['waiting_for']))})",
                soft_wrap=True, highlight=False)
        elif kind == "census":
            progress.update(task, description=f"census of {info['variant']} ({info['method']})")
        elif kind == "start":
            progress.update(task, total=info["total"], description="runs")
        elif kind == "warmup":
            progress.update(task, description=f"warm-up {info['variant']} #{info['i'] + 1}")
        elif kind == "run":
            import numpy as np

            rs = live.setdefault((info["variant"], info["state"]), [])
            rs.append(info)
            w = np.median([r["wall_s"] for r in rs]) * 1000
            pg = int(np.median([r["pages_read"] for r in rs]))
            progress.update(task, advance=1, description=f"{info['variant']}/{info['state']}: median {w:.1f} ms, "
                                                         f"{pg:,} pages (n={len(rs)})")
        elif kind == "warning" and not args.quiet:
            say(f"[yellow]warning:[/] {escape(info['message'])}", soft_wrap=True, highlight=False)

    with progress:
        doc = session.measure(plan, on_event)
    fileio.dump_json(doc, out)
    md = doc["metadata"]
    empty = session.all_disturbed(doc)
    if not args.quiet:
        print(model.markdown(doc), end="")
        for f in md.get("census_left_out") or []:
            err.print(f"left resident: {escape(f['path'])} ({f['pages']:,} pages): {escape(f['why'])}",
                      soft_wrap=True, highlight=False)
        for h in md["hints"]:
            err.print(f"[yellow]hint:[/] {escape(h)}", soft_wrap=True, highlight=False)
        err.print(f"wrote {out} ({len(doc['runs'])} runs in {md['duration_s']:.1f} s)")
    if empty:
        err.print(f"elflayout: {escape(session.disturbed_message(doc, empty, bool(args.files)))}", soft_wrap=True,
                  highlight=False)
        return 1
    return 0
