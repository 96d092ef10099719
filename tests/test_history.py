"""History: SQLite sessions and ETS prediction-interval checks on known series."""

import json

import numpy as np
import pytest

from conftest import run_cli
from elflayout.fileio import dump_json
from elflayout.measure import history, model, stats


def _doc(wall, pages, started, seed=0):
    runs = []
    rng = np.random.default_rng(seed)
    for i in range(5):
        runs.append({"variant": "a", "state": "selective", "round": i, "seq": i,
                     "wall_s": float(wall + rng.normal(0, wall * 0.001)), "user_s": 0.001, "sys_s": 0.001,
                     "major_faults": 2, "minor_faults": 5, "pages_read": pages, "bytes_read": pages * 4096})
    an = stats.analyse(runs, ["a"], ["selective"], metrics=("wall_s", "pages_read"))
    md = {"started": started, "states": ["selective"], "seed": 0, "host": "h", "kernel": "k"}
    return model.build(md, [{"name": "a", "command": "true"}], runs, an)


def test_prediction_interval_is_statsmodels_ets():
    import pandas as pd
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel

    y = np.array([10.0, 10.2, 9.9, 10.1, 10.0, 9.8, 10.3, 10.1, 9.9, 10.0])
    f, lo, hi = history.prediction_interval(y)
    ref = ETSModel(pd.Series(y), error="add", trend=None).fit(disp=False).get_prediction(start=10, end=10).summary_frame(alpha=0.05)
    assert f == pytest.approx(ref["mean"].iloc[0])
    assert (lo, hi) == (pytest.approx(ref["pi_lower"].iloc[0]), pytest.approx(ref["pi_upper"].iloc[0]))
    assert lo < 10.05 < hi
    assert history.prediction_interval([5, 5, 5]) == (5, 5, 5)


def test_check_flags_regression_only_outside_interval(tmp_path):
    con = history.connect(tmp_path / "h.sqlite")
    rng = np.random.default_rng(1)
    for i in range(10):
        history.add(con, _doc(0.100 + rng.normal(0, 0.002), 700, f"2026-01-{i + 1:02d}T00:00:00", seed=i), f"r{i}")
    same = history.check(con, _doc(0.1005, 700, "2026-02-01T00:00:00", seed=99))
    assert {r["metric"]: r["status"] for r in same} == {"wall_s": "ok", "pages_read": "ok"}
    worse = history.check(con, _doc(0.130, 760, "2026-02-01T00:00:00", seed=98))
    assert {r["metric"]: r["status"] for r in worse} == {"wall_s": "regression", "pages_read": "regression"}
    better = history.check(con, _doc(0.100, 650, "2026-02-01T00:00:00", seed=97))
    assert {r["metric"]: r["status"] for r in better}["pages_read"] == "improvement"


def test_not_enough_history_says_so(tmp_path):
    con = history.connect(tmp_path / "h.sqlite")
    history.add(con, _doc(0.1, 700, "2026-01-01T00:00:00"), "r0")
    rows = history.check(con, _doc(0.2, 900, "2026-01-02T00:00:00", seed=3))
    assert all(r["status"] == "not enough history" and "1 of 6" in r["reason"] for r in rows)


def test_cli_add_check_show(tmp_path):
    db = tmp_path / "h.sqlite"
    files = []
    for i in range(7):
        f = tmp_path / f"r{i}.json"
        dump_json(_doc(0.1, 700, f"2026-01-{i + 1:02d}T00:00:00", seed=i), f)
        files.append(f)
    r = run_cli("history", "add", *files[:6], "--db", db, check=0)
    assert r.stdout.count("added as session") == 6
    assert "already in the history" in run_cli("history", "add", files[0], "--db", db, check=0).stdout
    run_cli("history", "check", files[6], "--db", db, "--metric", "pages_read", check=0)
    bad = tmp_path / "bad.json"
    dump_json(_doc(0.1, 800, "2026-02-01T00:00:00", seed=50), bad)
    r = run_cli("history", "check", bad, "--db", db, "--metric", "pages_read", check=1)
    assert "regression" in r.stderr
    r = run_cli("history", "show", "--db", db, "--variant", "a", "--state", "selective", "--metric", "pages_read",
                "--json", check=0)
    assert [p["mean"] for p in json.loads(r.stdout)["pages_read"]] == [700.0] * 6
    assert "6 session(s)" in run_cli("history", "show", "--db", db, check=0).stdout
    r = run_cli("history", "check", tmp_path / "missing.json", "--db", db, check=2)
    assert r.stderr.startswith("elflayout: error:") and "Traceback" not in r.stderr
    (tmp_path / "junk.sqlite").write_text("not a database at all, really" * 10)
    r = run_cli("history", "add", files[0], "--db", tmp_path / "junk.sqlite", check=2)
    assert "not an elflayout history database" in r.stderr
