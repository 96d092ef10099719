"""``elflayout calibrate``: A/A runs estimating the noise, the MDE and the runs to use."""

from __future__ import annotations

import json
import sys

from elflayout import fileio
from elflayout.errors import ElflayoutError
from elflayout.measure.cli import plan_from_options

SUMMARY = "A/A runs of one command: noise, minimum detectable effect and the runs to use"
EPILOG = """\
examples:
  # how many runs does a 5% change of llc-16's selectively cold start need here?
  elflayout calibrate 'llc-16 --version' --files /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 --runs 20

  # hot only, a 2% target, keep the A/A results file
  elflayout calibrate 'python3 -c pass' --state hot --runs 30 --target-effect 2% -o aa.json

  # analyse an A/A results file measured before (its first two variants)
  elflayout calibrate --from aa.json --json

The command runs under two names, interleaved, as 'elflayout measure' would run two
builds; the comparison is made as 'elflayout compare' makes it. Noise is the sd of log
times; the MDE is the change detected with 80% power at this n; 'runs for X%' is the n
per side that detects X%. See docs/methodology.md.
"""


def add_arguments(p):
    p.add_argument("command", nargs="?", help="the startup command (a shell command, as in measure --name)")
    p.add_argument("--from", dest="source", metavar="RESULTS", help="analyse this A/A results file instead of measuring")
    p.add_argument("--runs", type=int, default=20, help="A/A rounds (default 20)")
    p.add_argument("--state", action="append", choices=("selective", "cold", "hot"),
                   help="cache state(s) (repeatable; default selective and hot)")
    p.add_argument("--files", nargs="+", action="extend", metavar="PATH", default=[],
                   help="files under test (evicted in the selective state; default: the census finds them)")
    p.add_argument("--target-effect", default="5%", metavar="PCT", help="the change to detect (default 5%%)")
    p.add_argument("--seed", type=int, default=0, help="seed of the run order (default 0)")
    p.add_argument("--measure-arg", action="append", default=[], metavar="ARG",
                   help="an option of 'elflayout measure' for the session (repeatable), e.g. "
                        "--measure-arg=--no-aslr --measure-arg=--pin=1")
    p.add_argument("-o", "--output", help="keep the A/A results file here")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.add_argument("--json", action="store_true", help="the calibration as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress from the measurement")


def _progress(quiet: bool):
    def on_event(kind, info):
        if quiet:
            return
        if kind in ("note", "warning"):
            print(f"  {kind}: {info['message']}", file=sys.stderr)
        elif kind == "lock":
            print(f"  waiting for another measurement session ({info.get('waiting_for')})", file=sys.stderr)
        elif kind == "run":
            print(f"\r  run {info.get('seq', 0) + 1}", end="", file=sys.stderr, flush=True)
    return on_event


def run(args) -> int:
    # the stages (numpy, scipy) load when the verb runs, not for --help
    from elflayout.measure import calibrate
    from elflayout import results as model
    from elflayout.measure.compare_cli import parse_effect

    effect = parse_effect(args.target_effect)
    if args.source:
        if args.command:
            raise ElflayoutError("calibrate: give a command or --from RESULTS, not both")
        doc = model.load(args.source)
    else:
        if not args.command or not args.command.strip():
            raise ElflayoutError("calibrate: name the command to calibrate (or --from RESULTS)")
        if args.runs < 2:
            raise ElflayoutError(f"--runs: an A/A calibration needs at least 2 rounds (got {args.runs})")
        out = fileio.check_output(args.output, force=args.force) if args.output else None
        plan = calibrate.aa_plan(plan_from_options(args.measure_arg, "calibrate"), args.command, args.runs,
                                 args.state or ["selective", "hot"], args.files, args.seed)
        doc = calibrate.measure(plan, _progress(args.quiet or args.json))
        if not (args.quiet or args.json):
            print(file=sys.stderr)
        if out:
            fileio.dump_json(doc, out)
    try:
        cal = calibrate.analyse(doc, effect)
    except ValueError as e:
        raise ElflayoutError(f"{args.source or 'calibrate'}: {e}") from None
    print(json.dumps(cal, indent=1) if args.json else calibrate.markdown(cal), end="\n" if args.json else "")
    return 0
