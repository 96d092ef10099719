"""``elflayout compare``: statistics and verdicts for a results file."""

from __future__ import annotations

import json

from elflayout import fileio
from elflayout.errors import ElflayoutError, Finding

SUMMARY = "statistics and verdicts for a results file"
EPILOG = """\
examples:
  elflayout compare results.json                 # tables (Markdown) on stdout
  elflayout compare results.json --json -o stats.json
  elflayout compare results.json --csv > summary.csv
  elflayout compare results.json --runs-csv > runs.csv
  elflayout compare results.json --fail-on slower   # exit 1 if any time got slower

Statistics are recomputed from the runs (95% BCa bootstrap intervals seeded with the
results' seed, Welch t, Mann-Whitney U, Brown-Forsythe); see docs/methodology.md.
"""


def add_arguments(p):
    p.add_argument("results", help="results file written by 'elflayout measure'")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="summary, comparisons and io_bound as JSON")
    g.add_argument("--markdown", action="store_true", help="Markdown tables (the default)")
    g.add_argument("--csv", action="store_true", help="summary and comparison tables as CSV")
    g.add_argument("--runs-csv", action="store_true", help="one CSV row per run and file under test")
    p.add_argument("--metric", action="append", help="only these metrics (repeatable)")
    p.add_argument("--include-disturbed", action="store_true",
                   help="keep runs flagged as disturbed by other processes (left out by default)")
    p.add_argument("--seed", type=int, help="bootstrap seed (default: the results' seed)")
    p.add_argument("--fail-on", choices=("slower", "more", "any"),
                   help="exit 1 if a comparison's verdict is slower (times), more (counts) or any change")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.add_argument("--force", action="store_true", help="replace an existing output file")


def recompute(doc: dict, seed=None, metrics=None, include_disturbed=False) -> dict:
    from elflayout.measure import stats

    if metrics:
        bad = set(metrics) - set(stats.METRICS)
        if bad:
            raise ElflayoutError(f"--metric {sorted(bad)[0]}: unknown (choose from {', '.join(stats.METRICS)})")
    variants = [v["name"] for v in doc["variants"]]
    states = doc["metadata"].get("states") or sorted({r["state"] for r in doc["runs"]})
    s = doc["metadata"].get("seed", 0) if seed is None else seed
    out = stats.analyse(doc["runs"], variants, states, seed=s, metrics=tuple(metrics or stats.METRICS),
                         include_disturbed=include_disturbed)
    return {**doc, **out}


def run(args) -> int:
    from elflayout.measure import model

    out = fileio.check_output(args.output, force=args.force, inputs=(args.results,)) if args.output else None
    doc = model.load(args.results)
    if not doc["runs"]:
        raise ElflayoutError(f"{args.results}: no runs to compare")
    doc = recompute(doc, args.seed, args.metric, args.include_disturbed)
    if args.json:
        text = json.dumps({"format": "elflayout-compare", "version": 1, "source": str(args.results),
                           "summary": doc["summary"], "comparisons": doc["comparisons"],
                           "io_bound": doc["io_bound"]}, indent=1) + "\n"
    elif args.csv:
        text = model.summary_csv(doc)
    elif args.runs_csv:
        text = model.runs_csv(doc)
    else:
        text = model.markdown(doc)
        warns = sorted({w for c in doc["comparisons"] for w in c.get("warnings", [])})
        if warns:
            text += "\n" + "\n".join(f"- warning: {w}" for w in warns) + "\n"
    if out:
        fileio.atomic_write_text(out, text)
    else:
        print(text, end="")
    if args.fail_on:
        want = {"slower": {"slower"}, "more": {"more"}, "any": {"slower", "more", "faster", "fewer"}}[args.fail_on]
        hits = [c for c in doc["comparisons"] if c.get("verdict") in want]
        if hits:
            c = hits[0]
            raise Finding(f"{c['b']} vs {c['a']} ({c['state']}, {c['metric']}): {c['verdict']}"
                          + (f" and {len(hits) - 1} more" if len(hits) > 1 else ""))
    return 0
