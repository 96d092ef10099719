"""``elflayout history add|check|show``: results over time in SQLite or PostgreSQL, ETS alarms."""

from __future__ import annotations

import json

from elflayout.errors import ElflayoutError, Finding

SUMMARY = "keep results in SQLite or PostgreSQL and flag regressions (ETS intervals)"
EPILOG = """\
examples:
  elflayout history add results.json                 # into ~/.cache/elflayout/history.sqlite
  elflayout history check new.json --metric wall_s --metric pages_read
  elflayout history show --variant after --state selective --metric pages_read
  elflayout history add results.json --db perf.sqlite --label nightly-2026-01-05
  # one history for a CI fleet (PostgreSQL; the tables are created on first use):
  elflayout history add results.json --db postgresql://ci@db.example/perf --label "$GIT_COMMIT"
  elflayout history check results.json --db postgresql://ci@db.example/perf

check fits simple exponential smoothing (statsmodels ETS, additive errors) to each
series (variant x state x metric, by session start time) and exits 1 when the new mean
lies above the 95% prediction interval (a regression); it needs at least 6 earlier
sessions per series and says so otherwise.
"""


def add_arguments(p):
    p.add_argument("action", choices=("add", "check", "show"))
    p.add_argument("results", nargs="*", help="results files (add: one or more; check: one)")
    p.add_argument("--db", metavar="sqlite:///PATH|postgresql://...",
                   help="the history: an SQLite file (PATH or sqlite:///PATH) or a PostgreSQL URL "
                        "(default: $ELFLAYOUT_CACHE/history.sqlite)")
    p.add_argument("--label", help="add: a label for the session (e.g. a commit)")
    p.add_argument("--metric", action="append", help="check/show: only these metrics")
    p.add_argument("--variant", help="show: this variant's series")
    p.add_argument("--state", help="show: this state's series")
    p.add_argument("--min-points", type=int, default=None, help="check: past points needed (default 6)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args) -> int:
    from elflayout.measure import history
    from elflayout import results as model

    db = args.db or history.default_db()
    if args.action == "add":
        if not args.results:
            raise ElflayoutError("history add: name at least one results file")
        results = [(f, model.read(f)) for f in args.results]  # validate all before writing any
        con = history.connect(db)
        for f, res in results:
            sid, new = history.add(con, res, str(f), args.label)
            print(f"{f}: {'added as session' if new else 'already in the history as session'} {sid} ({con.name})")
        return 0
    if args.action == "check":
        if len(args.results) != 1:
            raise ElflayoutError("history check: name exactly one results file")
        res = model.read(args.results[0])
        con = history.connect(db)
        rows = history.check(con, res, args.min_points or history.MIN_POINTS, args.metric)
        if args.json:
            print(json.dumps(rows, indent=1))
        else:
            for r in rows:
                iv = "" if r["low"] is None else f" (95% PI [{r['low']:.6g}, {r['high']:.6g}])"
                why = f": {r['reason']}" if r.get("reason") else ""
                print(f"{r['variant']}/{r['state']}/{r['metric']}: {r['value']:.6g} {r['status']}{iv}{why}")
        bad = [r for r in rows if r["status"] == "regression"]
        if bad:
            r = bad[0]
            raise Finding(f"regression: {r['variant']}/{r['state']}/{r['metric']} = {r['value']:.6g} above the "
                          f"95% prediction interval [{r['low']:.6g}, {r['high']:.6g}]"
                          + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
        return 0
    # show
    if args.results:
        raise ElflayoutError("history show takes no results file (use --variant/--state/--metric)")
    con = history.connect(db, readonly=True)
    if args.variant or args.state or args.metric:
        if not (args.variant and args.state):
            raise ElflayoutError("history show: a series needs --variant and --state (and --metric, default wall_s)")
        out = {}
        for m in args.metric or ["wall_s"]:
            out[m] = [{"session": s, "started": t, "mean": v} for s, t, v in history.series(con, args.variant, args.state, m)]
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            for m, pts in out.items():
                print(f"{args.variant}/{args.state}/{m}: {len(pts)} point(s)")
                for p in pts:
                    print(f"  {p['session']:>4}  {p['started']}  {p['mean']:.6g}")
        return 0
    rows = history.sessions(con)
    if args.json:
        print(json.dumps([dict(zip(("id", "started", "added", "source", "host", "label"), r)) for r in rows], indent=1))
    else:
        print(f"{len(rows)} session(s) in {con.name}")
        for r in rows:
            print(f"  {r[0]:>4}  {r[1]}  {r[3]}" + (f"  [{r[5]}]" if r[5] else ""))
    return 0
