"""``elflayout screen``: a 2-level factorial design over set-up factors, main effects, plots."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from elflayout import fileio
from elflayout.errors import ElflayoutError
from elflayout.measure.cli import plan_from_options

SUMMARY = "screen set-up factors (ASLR, read-ahead, pinning, storage, variants) by a factorial design"
EPILOG = """\
examples:
  # do ASLR, read-ahead and CPU pinning move llc-16's start? (2^3 = 8 sessions of 10 rounds)
  elflayout screen --factor aslr=on,off --factor read_ahead_kb=128,8192 --factor pin=none,0 \\
      --files /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 --runs 10 -o screen/ -- 'llc-16 --version'

  # a factor substituted into the command ({lib}), with an emulated disk as another factor
  elflayout screen --factor lib=build/before,build/after --factor storage=none,hdd \\
      --files build/before/libLLVM-16.so.1 --state selective -o screen2/ \\
      -- 'LD_LIBRARY_PATH={lib} llc-16 --version'

Factors: aslr=on,off; read_ahead_kb=N,M; pin=none,CPU; realtime=off,PRIORITY;
storage=none,PRESET; any other NAME=LOW,HIGH is substituted for {NAME} in the command. Up to 4 factors run the full
2^k design; 5 to 7 a standard fraction (5: resolution V, with 2-factor interactions;
6-7: resolution IV, main effects only). Each design point is one 'elflayout measure'
session, in a random order. Writes DIR/screen.json, screen.md, block and violin-scatter
plots and report.html. Method: Flater, NIST TN 1855 (2014); docs/methodology.md.
"""


def add_arguments(p):
    p.add_argument("command", nargs="?", help="the startup command (after --), with {NAME} for command factors")
    p.add_argument("--factor", action="append", default=[], metavar="NAME=LOW,HIGH", help="a factor (repeatable)")
    p.add_argument("--runs", type=int, default=10, help="rounds per design point and replicate (default 10)")
    p.add_argument("--replicates", type=int, default=1,
                   help="run the whole design this many times, each in a fresh random order (default 1)")
    p.add_argument("--state", action="append", choices=("selective", "cold", "hot"),
                   help="cache state(s) (repeatable; default hot, plus selective with --files)")
    p.add_argument("--files", nargs="+", action="extend", metavar="PATH", default=[],
                   help="files under test (evicted in the selective state)")
    p.add_argument("--metric", action="append", help="responses to analyse (default wall_s, and pages_read "
                   "with --files)")
    p.add_argument("--full", action="store_true", help="the full 2^k design even for 5 or more factors")
    p.add_argument("--seed", type=int, default=0, help="seed of the run order (default 0)")
    p.add_argument("--measure-arg", action="append", default=[], metavar="ARG",
                   help="an option of 'elflayout measure' for every session (repeatable), e.g. "
                        "--measure-arg=--census=none")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    p.add_argument("--force", action="store_true", help="write into an existing non-empty directory")


def run(args) -> int:
    # the stages (numpy, scipy, statsmodels) load when the verb runs, not for --help; the
    # plots and the page are the report stage's: one renderer for this verb and 'elflayout report'
    from elflayout.measure import screen, screen_model, session, stats
    from elflayout.report import html
    from elflayout.report import screen as screen_plots

    if not args.command or not args.command.strip():
        raise ElflayoutError("screen: name the command after the options: -- 'CMD'")
    if not args.factor:
        raise ElflayoutError("screen: name at least one --factor NAME=LOW,HIGH")
    if args.runs < 2 or args.replicates < 1:
        raise ElflayoutError("screen: --runs must be at least 2 and --replicates at least 1")
    factors = [screen.parse_factor(f) for f in args.factor]
    screen.check_command(factors, args.command)
    if any(f.name == "storage" for f in factors) and not args.files:
        raise ElflayoutError("--factor storage: needs --files (the directories served through the slow disk)")
    metrics = args.metric or (["wall_s", "pages_read"] if args.files else ["wall_s"])
    bad = set(metrics) - set(stats.METRICS)
    if bad:
        raise ElflayoutError(f"--metric {sorted(bad)[0]}: unknown (choose from {', '.join(stats.METRICS)})")
    states = args.state or (["selective", "hot"] if args.files else ["hot"])
    out = Path(args.output)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not args.force)):
        raise ElflayoutError(f"{out}: exists and is not an empty directory (use --force to write into it)")
    base = plan_from_options(args.measure_arg, "screen")
    try:  # before the runs: a bad output path fails in the first second
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ElflayoutError(f"{out}: cannot create the output directory: {e.strerror}") from None
    x, props = screen.design(len(factors), args.full)
    order = screen.run_order(len(x), args.replicates, args.seed)
    print(f"screen: {len(factors)} factors, {props['kind']} design, {len(x)} points x {args.replicates} "
          f"replicate(s) x {args.runs} rounds = {len(order)} measure sessions", file=sys.stderr)
    runs, t0 = [], time.monotonic()
    for i, (rep, p) in enumerate(order):
        _, _, levels = screen.point_setup(factors, x[p], args.command)
        lv = " ".join(f"{k}={v}" for k, v in levels.items())
        print(f"  [{i + 1}/{len(order)}] {screen.point_name(p)} {lv}  ({time.monotonic() - t0:.0f} s)",
              file=sys.stderr, flush=True)
        plan = screen.point_plan(base, factors, x[p], args.command, screen.point_name(p), args.runs, states,
                                 args.files, args.seed + i)
        doc = session.measure(plan)
        for r in doc["runs"]:
            runs.append({**r, "point": int(p), "replicate": rep, "session": i})
    analysis = [screen.fit_effects(runs, factors, x, props, m, s, clustered=args.replicates > 1)
                for m in metrics for s in states]
    result = screen_model.build({"command": args.command, "states": states, "runs": args.runs,
                                 "replicates": args.replicates, "seed": args.seed,
                                 "duration_s": round(time.monotonic() - t0, 1)},
                                factors, {**props, "matrix": x.tolist()}, order, runs, analysis)
    fileio.dump_json(result, out / "screen.json")
    md = screen.markdown(result)
    fileio.atomic_write_text(out / "screen.md", md)
    figs = screen_plots.figures(result, out)
    fileio.atomic_write_text(out / "report.html", html.build([(str(out / "screen.json"), "screen", result)]))
    print(md, end="")
    print(f"wrote {out}/screen.json, screen.md, report.html and {len(figs)} plot(s)", file=sys.stderr)
    return 0
