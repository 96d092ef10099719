"""``elflayout plot``: access-pattern, timing and history plots as PNG or SVG."""

from __future__ import annotations

from pathlib import Path

SUMMARY = "access-pattern and timing plots of results or profiles"
EPILOG = """\
examples:
  # where and when libLLVM was read during startup, one panel per variant (same axes),
  # ELF sections as coloured bands, reads as dots, seeks as long strokes
  elflayout plot R.json --file /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 -o llvm.png

  # before/after of two builds (each variant reads its own library): one --file each
  elflayout plot R.json --file build/a/libLLVM-16.so.1 --file build/b/libLLVM-16.so.1 -o ab.png

  # only two variants, the hot state, the third run of each (default: the run with
  # the median pages read)
  elflayout plot R.json --variant before --variant after --state hot --run 2 -o ab.svg

  # the same with x = the order of the reads (a burst of reads no longer hides in a
  # few milliseconds)
  elflayout plot R.json --x sequence -o llvm-order.png

  # a profile: order of first access over the file, touched vs untouched pages
  elflayout plot P.json -o profile.png

  # where the bytes go at a glance: pages read per variant by section family
  elflayout plot R.json --kind sections -o where.png

  # violin + scatter of wall time (or another metric) per variant and state
  elflayout plot R.json --kind timing --metric wall_s -o wall.png

  # the history database of `elflayout history add` (one series per variant x state),
  # each point against the 95% ETS prediction interval from the points before it
  elflayout plot ~/.cache/elflayout/history.sqlite --metric pages_read -o history.png
  # or a JSON series: {"series": [{"name", "values": [...]}]}
  elflayout plot --kind history series.json -o history.png
"""

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def add_arguments(p) -> None:
    p.add_argument("input", metavar="R.json|P.json", help="results (elflayout measure) or profile (elflayout profile) "
                   "file; with --kind history, a history database or JSON series")
    p.add_argument("-o", "--output", metavar="OUT.png|svg", required=True, help="image to write (.png, .svg or .pdf)")
    p.add_argument("--kind", choices=("access", "sections", "timing", "history"),
                   help="access pattern (default for results and profiles), pages read per section family "
                        "(sections), timing violins, or history series")
    p.add_argument("--file", metavar="PATH", action="append",
                   help="file whose accesses to plot (results: a traced file; profile: a target); needed when "
                        "there are several. Repeat for a before/after of two builds: each variant gets the "
                        "first of them it read")
    p.add_argument("--variant", metavar="NAME", action="append", help="variant(s) to draw, in this order (default: all)")
    p.add_argument("--state", metavar="S", help="state to draw (default: the first of cold/selective/hot with reads)")
    p.add_argument("--run", metavar="K", type=int,
                   help="index of the run within each variant×state (default: the run with the median pages read)")
    from elflayout.results import METRICS

    p.add_argument("--metric", default="wall_s", metavar="M",
                   help=f"timing and history plot metric: {', '.join(METRICS)}")
    p.add_argument("--x", choices=("sequence", "time"),
                   help="x axis: time since exec, or order (results: the read number; profiles: the first-access "
                        "sequence number). Default: time for results, sequence for profiles")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")


def run(args) -> int:
    from elflayout import fileio
    from elflayout.errors import ElflayoutError

    out = Path(args.output)
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise ElflayoutError(f"{out}: unknown image type (use .png, .svg or .pdf)")
    fileio.check_output(out, force=args.force, inputs=(args.input,))
    fig = build_figure(args)
    from elflayout.report.access import save

    with fileio.atomic_output(out) as tmp:
        save(fig, tmp, fmt=fmt)
    return 0


def build_figure(args):
    from elflayout.errors import ElflayoutError
    from elflayout.report import data as D

    if args.kind == "history" or (args.kind is None and _is_sqlite(args.input)):
        from elflayout.report import timing

        series = timing.load_history(args.input, args.variant, [args.state] if args.state else None, args.metric)
        return timing.history_figure(series, title=f"History: {Path(args.input).name}")
    kind, doc = D.load(args.input)
    if kind == "screen":
        raise ElflayoutError(f"{args.input}: a screening result: its plots are written by elflayout screen and shown "
                             f"by elflayout report")
    if kind == "profile":
        if args.kind in ("timing", "sections"):
            raise ElflayoutError(f"{args.input}: a profile has no runs; --kind {args.kind} needs a results file")
        from elflayout.report import access

        if args.file and len(args.file) > 1:
            raise ElflayoutError("--file: a profile plot shows one target; give --file once")
        target = choose_target(doc, args.file[0] if args.file else None, args.input)
        return access.profile_figure(target, x=args.x or "sequence")
    if args.kind == "timing":
        from elflayout.report import timing

        states = [args.state] if args.state else None
        if args.state and args.state not in D.states(doc):
            raise ElflayoutError(f"--state {args.state}: not in the results (states: {', '.join(map(str, D.states(doc)))})")
        from elflayout.report import access

        names = access.check_variants(doc, args.variant)
        files = sorted(set(D.choose_plan(doc, args.file, args.input, names).values())) if args.file else None
        return timing.violin_figure(doc, args.metric, names, states, files)
    from elflayout.report import access

    names = access.check_variants(doc, args.variant)
    plan = D.choose_plan(doc, args.file, args.input, names)
    if args.kind == "sections":
        panels, state = access.results_panels(doc, plan, args.state, args.run)
        return access.sections_figure(panels, title=f"Pages read by section family ({state})")
    return access.results_figure(doc, plan, args.state, args.run, x=args.x or "time")


def choose_target(doc, file: str | None, src: str):
    """The profile target ``--file`` names (path or file name), or the only one."""
    from elflayout.errors import ElflayoutError

    if file is None and len(doc.targets) > 1:
        names = ", ".join(t.path for t in doc.targets)
        raise ElflayoutError(f"{src}: several targets; choose one with --file ({names})")
    return doc.target(file)


def _is_sqlite(path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16).startswith(b"SQLite format 3")
    except OSError:
        return False
