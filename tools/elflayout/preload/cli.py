"""``elflayout preload``: startup preload plans (``plan``) and the preloader (``run``)."""

from __future__ import annotations

import argparse
import os
import re
import sys

from elflayout import fileio
from elflayout.errors import ElflayoutError
from elflayout.preload import model
from elflayout.preload import runner

SUMMARY = "plan and apply startup preloading for libraries you cannot relink"
EPILOG = """\
examples:
  # Record what llc-16 reads at a selectively cold start (3 runs), plan the reads for a
  # 7200 rpm disk, and run it with the plan applied first:
  elflayout measure --name llc 'llc-16 --version' \\
      --files /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 --state selective --runs 3 -o llc.json
  elflayout preload plan llc.json --storage hdd -o llc-plan.json     # also writes llc-plan.preload
  elflayout preload run llc-plan.json -- llc-16 --version

  # Several workloads merged, capped at 32 MiB (what the cap drops is reported):
  elflayout preload plan llc.json opt.json --max-bytes 32M -o plan.json

  # Without this CLI (what to ship): the C launcher, or the library in any program
  build/preload/elflayout-preload plan.preload -- llc-16 --version
  ELFLAYOUT_PRELOAD_PLAN=$PWD/plan.preload LD_AUDIT=build/preload/libelflayout-preload.so llc-16 --version

notes:
  Inputs are measure results (runs[].files[].reads, page-cache tracepoint) or trace
  profiles (targets[].reads; valgrind profiles give touched pages). Ranges are merged
  across a gap when reading it costs less than a seek on --storage (docs/storage.md).
  A file that changed since planning (size, mtime, build-id) is skipped with one line on
  stderr; a missing or bad plan never stops the program. docs/preload.md says when it
  helps (rotating disks, eMMC, network storage) and when not (host-cached, NVMe).
"""

_SIZE = re.compile(r"^(\d+)([KMG]i?B?)?$", re.I)


def parse_size(text: str) -> int:
    """Bytes from '1048576', '512K', '64M', '1G' (binary units)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size in bytes (e.g. 64M), got {text!r}")
    mult = {None: 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[(m.group(2) or " ")[0].upper().strip() or None]
    return int(m.group(1)) * mult


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    pl = sub.add_parser("plan", help="make a preload plan from profiles / measure results",
                        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    pl.add_argument("inputs", nargs="+", metavar="PROFILE|RESULTS", help="trace profiles or measure results (merged)")
    pl.add_argument("-o", "--output", required=True, help="plan (JSON); the text form PLAN.preload is written beside it")
    pl.add_argument("--storage", default="hdd", metavar="PRESET",
                    help="device model deciding which gaps are read through: hdd, emmc, sata-ssd, cloud, none "
                         "(default hdd)")
    pl.add_argument("--max-bytes", type=parse_size, metavar="N", help="cap on the bytes read (e.g. 64M)")
    pl.add_argument("--variant", action="append", metavar="NAME", help="results: only runs of this variant")
    pl.add_argument("--force", action="store_true", help="replace an existing output file")
    pl.add_argument("--quiet", action="store_true", help="no summary")
    r = sub.add_parser("run", help="apply a plan, then run a command (the C launcher)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    r.add_argument("plan", metavar="PLAN", help="PLAN.json (its PLAN.preload is used) or PLAN.preload")
    _run_options(r)
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARG ...]", help="the command")
    s = sub.add_parser("show", help="summary of a plan")
    s.add_argument("plan", metavar="PLAN.json")
    s.add_argument("--json", action="store_true", help="the plan's metadata as JSON")


def _run_options(r: argparse.ArgumentParser) -> None:
    r.add_argument("--method", choices=("pread", "readahead", "fadvise"), default="pread",
                   help="pread (read each range, wait: default) or readahead(2) / posix_fadvise WILLNEED (queue "
                        "the reads, do not wait; FUSE drops them when congested, see docs/preload.md)")
    r.add_argument("--background", action="store_true", help="read in a detached process; start the command at once")
    r.add_argument("--map", action="append", metavar="FROM=TO", help="read FROM/... of the plan at TO/... (repeatable)")
    r.add_argument("--verbose", action="store_true", help="one summary line on stderr")


def _split_command(args) -> list[str]:
    """argparse stops at PLAN (REMAINDER): options between PLAN and '--' are parsed here."""
    rest = list(args.cmd)
    if "--" in rest:
        i = rest.index("--")
        head, cmd = rest[:i], rest[i + 1:]
    else:
        head, cmd = [], rest
        if rest and rest[0].startswith("-"):
            raise ElflayoutError(f"preload run: {rest[0]}: options go before PLAN or between PLAN and '--'; "
                                 f"the command after '--'")
    if head:
        class _Parser(argparse.ArgumentParser):
            def error(self, message):
                raise ElflayoutError(f"preload run: {message}")

        p = _Parser(prog="elflayout preload run", add_help=False)
        _run_options(p)
        extra = p.parse_args(head)
        args.method = extra.method if "--method" in head else args.method
        args.background = args.background or extra.background
        args.map = (args.map or []) + (extra.map or [])
        args.verbose = args.verbose or extra.verbose
    return cmd


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _summary(plan) -> str:
    md = plan.metadata
    t, d = md.get("totals", {}), md.get("dropped", {})
    lines = [f"{t.get('files', len(plan.files))} file(s), {t.get('ranges', plan.ranges)} ranges, "
             f"{_mb(t.get('bytes', plan.bytes))} ({t.get('needed_pages', 0):,} needed pages + "
             f"{t.get('gap_pages', 0):,} gap pages read through); storage model "
             f"{md.get('storage', {}).get('preset')}: modelled read time {md.get('modelled_read_s', 0) * 1e3:,.0f} ms"]
    for f in plan.files:
        lines.append(f"  {f.path}: {len(f.ranges)} ranges, {_mb(f.bytes)}, {f.needed_pages:,} needed pages"
                     f"{'' if f.build_id else ' (no build-id)'}")
    if d.get("ranges"):
        lines.append(f"dropped by --max-bytes {md.get('max_bytes'):,}: {d['ranges']} ranges, {_mb(d['bytes'])}, "
                     f"{d['needed_pages']:,} needed pages")
    for f in d.get("files", []):
        lines.append(f"dropped: {f['path']}: {f['reason']}")
    for n in md.get("notes", []):
        lines.append(f"note: {n}")
    return "\n".join(lines)


def run(args) -> int:
    if args.action == "plan":
        from elflayout.preload import inputs, plan

        out = fileio.check_output(args.output, force=args.force, inputs=tuple(args.inputs))
        tp = model.text_path(out)
        if tp.exists() and not args.force:
            raise ElflayoutError(f"{tp}: output exists (use --force to replace it)")
        ins = inputs.load(args.inputs, args.variant)
        pl = plan.make_plan(ins, args.storage, args.max_bytes)
        if not pl.files:
            why = "; ".join(f"{f['path']}: {f['reason']}" for f in pl.metadata["dropped"]["files"])
            raise ElflayoutError(f"nothing to preload: {why or 'no range fits within --max-bytes'}")
        model.save(pl, out)
        if not args.quiet:
            print(_summary(pl))
            print(f"wrote {out} and {tp}", file=sys.stderr)
        return 0
    if args.action == "show":
        pl = model.load(args.plan)
        if args.json:
            import json

            print(json.dumps(pl.metadata, indent=1))
        else:
            print(_summary(pl))
        return 0
    # run: check the plan here (bad input -> exit 2), then become the C launcher

    cmd = _split_command(args)
    if not cmd:
        raise ElflayoutError("preload run: no command (PLAN -- CMD [ARG ...])")
    if str(args.plan).endswith(".json"):
        model.load(args.plan)
        tp = model.text_path(args.plan)
        if not os.path.isfile(tp):
            raise ElflayoutError(f"{tp}: text form of the plan missing (re-run 'elflayout preload plan')")
    else:
        tp = args.plan
        model.check_text(tp)
    for m in args.map or []:
        if "=" not in m or not m.split("=", 1)[0]:
            raise ElflayoutError(f"--map {m!r}: expected FROM=TO")
    argv = runner.launcher_argv(tp, cmd, method=args.method, background=args.background, map_=args.map,
                                verbose=args.verbose)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
    return 0  # not reached
