"""Results history in SQLite, and regression checks by exponential smoothing.

Each added results file becomes a *session*; its per variant x state x metric summary
rows become *points*. A series is the points of one (variant, state, metric), ordered by
the session's start time. ``check`` fits simple exponential smoothing with additive
errors (statsmodels ``ETSModel(error="add", trend=None)``: Holt's level-only model, as
Larres et al. 2013 used through R's HoltWinters, which beat Mozilla's windowed t-test)
to the series and flags a new mean outside the 95% prediction interval of the next
value. A constant history (deterministic page counts) has a zero-width interval: any
different value is flagged.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import sqlite3
import warnings
from pathlib import Path

import numpy as np

from elflayout.errors import ElflayoutError

MIN_POINTS = 6  # fewer past points than this and an ETS fit (2 parameters + level) is not worth trusting
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  id INTEGER PRIMARY KEY, digest TEXT UNIQUE NOT NULL, source TEXT, started TEXT, added TEXT,
  host TEXT, kernel TEXT, label TEXT, metadata TEXT);
CREATE TABLE IF NOT EXISTS points (
  session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  variant TEXT NOT NULL, state TEXT NOT NULL, metric TEXT NOT NULL,
  n INTEGER, mean REAL, median REAL, ci_low REAL, ci_high REAL,
  PRIMARY KEY (session, variant, state, metric));
CREATE INDEX IF NOT EXISTS points_series ON points(variant, state, metric);
"""


def default_db() -> Path:
    base = os.environ.get("ELFLAYOUT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "elflayout")
    return Path(base) / "history.sqlite"


def connect(path) -> sqlite3.Connection:
    p = Path(path)
    if p.is_dir():
        raise ElflayoutError(f"{p}: is a directory, expected an SQLite database file")
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        con = sqlite3.connect(p)
        con.executescript(SCHEMA)
    except sqlite3.DatabaseError as e:
        raise ElflayoutError(f"{p}: not an elflayout history database ({e})") from None
    return con


def digest(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc["runs"], sort_keys=True).encode()).hexdigest()


def summary_rows(doc: dict) -> list[dict]:
    if doc.get("summary"):
        return doc["summary"]
    from elflayout.measure.compare_cli import recompute

    return recompute(doc)["summary"]


def add(con: sqlite3.Connection, doc: dict, source: str, label: str | None = None) -> tuple[int, bool]:
    """Add a results document; (session id, True if new). Adding the same runs twice is a no-op."""
    d = digest(doc)
    row = con.execute("SELECT id FROM sessions WHERE digest = ?", (d,)).fetchone()
    if row:
        return row[0], False
    md = doc.get("metadata", {})
    keep = {k: md.get(k) for k in ("states", "runs", "seed", "read_ahead_kb", "aslr", "source", "cpu_model")}
    with con:
        cur = con.execute(
            "INSERT INTO sessions (digest, source, started, added, host, kernel, label, metadata) VALUES (?,?,?,?,?,?,?,?)",
            (d, source, md.get("started"), datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             md.get("host"), md.get("kernel"), label, json.dumps(keep)))
        sid = cur.lastrowid
        con.executemany(
            "INSERT INTO points VALUES (?,?,?,?,?,?,?,?,?)",
            [(sid, r["variant"], r["state"], r["metric"], r["n"], r.get("mean"), r.get("median"), r.get("ci_low"),
              r.get("ci_high")) for r in summary_rows(doc) if r.get("n")])
    return sid, True


def series(con, variant, state, metric, exclude_digest: str | None = None) -> list[tuple]:
    """[(session id, started, mean)] of one series in time order."""
    q = ("SELECT s.id, s.started, p.mean FROM points p JOIN sessions s ON s.id = p.session "
         "WHERE p.variant = ? AND p.state = ? AND p.metric = ?")
    args = [variant, state, metric]
    if exclude_digest:
        q += " AND s.digest != ?"
        args.append(exclude_digest)
    q += " ORDER BY s.started, s.id"
    return con.execute(q, args).fetchall()


def prediction_interval(y, alpha: float = 0.05) -> tuple[float, float, float]:
    """(forecast, low, high) of the next value of ``y`` by simple exponential smoothing."""
    y = np.asarray(y, dtype=float)
    if np.ptp(y) == 0:
        return float(y[-1]), float(y[-1]), float(y[-1])
    import pandas as pd
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # a pandas Series: statsmodels 0.15's get_prediction needs an index
        res = ETSModel(pd.Series(y), error="add", trend=None, seasonal=None).fit(disp=False)
        fr = res.get_prediction(start=len(y), end=len(y)).summary_frame(alpha=alpha)
    return float(fr["mean"].iloc[0]), float(fr["pi_lower"].iloc[0]), float(fr["pi_upper"].iloc[0])


def check(con, doc: dict, min_points: int = MIN_POINTS, metrics=None) -> list[dict]:
    """One row per series of ``doc``: {variant, state, metric, value, points, forecast, low, high, status}.

    status: ``ok``, ``regression`` (worse: above the interval), ``improvement`` (below)
    or ``not enough history``.
    """
    d = digest(doc)
    out = []
    for r in summary_rows(doc):
        if not r.get("n") or (metrics and r["metric"] not in metrics):
            continue
        past = series(con, r["variant"], r["state"], r["metric"], exclude_digest=d)
        row = {"variant": r["variant"], "state": r["state"], "metric": r["metric"], "value": r["mean"],
               "points": len(past)}
        if len(past) < min_points:
            row.update(status="not enough history", forecast=None, low=None, high=None,
                       reason=f"{len(past)} of {min_points} past points")
        else:
            f, lo, hi = prediction_interval([p[2] for p in past])
            row.update(forecast=f, low=lo, high=hi,
                       status="regression" if r["mean"] > hi else "improvement" if r["mean"] < lo else "ok")
        out.append(row)
    return out


def sessions(con) -> list[tuple]:
    return con.execute("SELECT id, started, added, source, host, label FROM sessions ORDER BY started, id").fetchall()
