"""``elflayout report``: one self-contained HTML file from results and profiles."""

from __future__ import annotations

SUMMARY = "self-contained HTML report of results, profiles and screening results"
EPILOG = """\
examples:
  # results of `elflayout measure` (before/after) and the profile used for the order:
  # headline, an interactive access view per traced file (zoom; hover a read for its
  # section and the profile's functions there), pages per section, summary table with
  # verdicts and the test behind each, run-time violins, environment; all inline, no
  # network (Plotly from the report extra)
  elflayout report R.json P.json -o report.html

  # several measurement sessions in one page; replace an existing report
  elflayout report llvm.json python.json -o report.html --force

  # with a screening result (elflayout screen): effects with intervals, block and
  # violin-scatter plots
  elflayout report R.json screen/screen.json -o report.html

  # with the history of these variants (elflayout history add ...)
  elflayout report R.json --history ~/.cache/elflayout/history.sqlite -o report.html
"""


def add_arguments(p) -> None:
    p.add_argument("inputs", nargs="+", metavar="R.json|P.json|screen.json",
                   help="results (elflayout measure), profile (elflayout profile) and/or screen (elflayout screen) "
                        "files, in the order to show")
    p.add_argument("-o", "--output", metavar="report.html", required=True, help="HTML file to write")
    p.add_argument("--history", metavar="DB",
                   help="also plot the history database of `elflayout history` (wall time and pages read of the "
                        "variants and states in the results, with ETS prediction intervals)")
    p.add_argument("--force", action="store_true", help="replace report.html if it exists")


def run(args) -> int:
    import sys

    from elflayout import fileio
    from elflayout.errors import ElflayoutError
    from elflayout.report import data as D
    from elflayout.report import html

    if not str(args.output).lower().endswith((".html", ".htm")):
        raise ElflayoutError(f"{args.output}: the report is HTML; name it *.html")
    out = fileio.check_output(args.output, force=args.force, inputs=tuple(args.inputs))
    docs = []
    for src in args.inputs:
        kind, doc = D.load(src)
        docs.append((src, kind, doc))
    if args.history:
        from pathlib import Path

        if not Path(args.history).is_file():
            raise ElflayoutError(f"{args.history}: no such history database")
    text = html.build(docs, history=args.history)
    fileio.atomic_write_text(out, text)
    print(f"{out}: {len(text.encode()) / 1e6:.1f} MB, {len(docs)} input(s)", file=sys.stderr)
    return 0
