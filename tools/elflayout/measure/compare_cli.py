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
  elflayout compare results.json --fail-on slower   # exit 1 if a primary time got slower
  elflayout compare results.json --primary wall_s:hot --fail-on any --target-effect 5%

Statistics are recomputed from the runs: times by a paired t-test on per-round log
ratios (Welch's t on log times when too few rounds pair): the ratio of geometric means
b/a with its 95% interval; counts exactly when the runs show them deterministic and by
Welch's t otherwise; Holm's correction across all the file's tested comparisons (the
output says how many). A time comparison needs at least 4 runs per side (a coverage
study: bench/bench_verdicts.py), else "too few runs". Every row that is not exact
carries the minimum detectable effect (MDE, 80% power); --target-effect adds the runs
per side needed to detect that change. Only --primary comparisons (default pages_read:selective and wall_s:selective)
decide the exit code of --fail-on. See docs/methodology.md.
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
                   help="exit 1 if a primary comparison's verdict is slower (times), more (counts) or any change")
    p.add_argument("--primary", action="append", metavar="METRIC:STATE",
                   help="a primary comparison, deciding --fail-on (repeatable; default pages_read:selective "
                        "and wall_s:selective)")
    p.add_argument("--target-effect", metavar="PCT",
                   help="report the runs per side needed to detect this relative change (e.g. 5%% or 0.05)")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.add_argument("--force", action="store_true", help="replace an existing output file")


def parse_effect(text) -> float:
    """"5%" or "0.05" -> 0.05; ElflayoutError otherwise."""
    t = str(text).strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ElflayoutError(f"--target-effect {text}: expected a relative change such as 5% or 0.05") from None
    if not 0 < v < 10:
        raise ElflayoutError(f"--target-effect {text}: must be above 0 (e.g. 5%)")
    return v


def run(args) -> int:
    # the stages (scipy) load when the verb runs, not for --help
    from elflayout import results as model
    from elflayout.measure.stats import recompute

    out = fileio.check_output(args.output, force=args.force, inputs=(args.results,)) if args.output else None
    res = model.read(args.results)
    if not res.runs:
        raise ElflayoutError(f"{args.results}: no runs to compare")
    effect = parse_effect(args.target_effect) if args.target_effect else None
    doc = recompute(res, args.seed, args.metric, args.include_disturbed, args.primary, effect)
    if args.json:
        text = json.dumps({"format": "elflayout-compare", "version": 1, "source": str(args.results),
                           "summary": doc["summary"], "comparisons": doc["comparisons"],
                           "multiplicity": doc["multiplicity"], "io_bound": doc["io_bound"]}, indent=1) + "\n"
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
        hits = [c for c in doc["comparisons"] if c.get("primary") and c.get("verdict") in want]
        if hits:
            c = hits[0]
            mu = doc["multiplicity"]
            raise Finding(f"{c['b']} vs {c['a']} ({c['state']}, {c['metric']}): {c['verdict']}"
                          + (f" and {len(hits) - 1} more" if len(hits) > 1 else "")
                          + f" (primary comparisons; {mu['comparisons']} made, Holm-corrected)")
    return 0
