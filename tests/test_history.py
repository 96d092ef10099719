"""History: SQLite sessions and ETS prediction-interval checks on known series."""

import json

import numpy as np
import pytest

from conftest import run_cli
from elflayout.fileio import dump_json
from elflayout.measure import history, stats
from elflayout import results as model


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


# --- PostgreSQL: a real server on a Unix socket in a temporary directory -------------

def _pg_bin():
    import glob

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return found[-1].rsplit("/", 1)[0] if found else None


@pytest.fixture(scope="module")
def pg_url():
    """Start a throw-away PostgreSQL server (Debian's postgresql package) as user postgres,
    listening only on a Unix socket; yield its URL; stop it and remove its files."""
    import os
    import pwd
    import shutil
    import subprocess
    import tempfile

    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not installed (Debian package postgresql; make bootstrap)")
    if os.geteuid() != 0:
        pytest.skip("starting a PostgreSQL server as user postgres needs root (runuser)")
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no postgres user (Debian package postgresql)")
    pytest.importorskip("psycopg", reason="psycopg 3 not installed (pip install 'elflayout[postgresql]')")
    top = tempfile.mkdtemp(prefix="elflayout-pg-")  # under /tmp: user postgres must reach it
    os.chown(top, pw.pw_uid, pw.pw_gid)
    data, sock = f"{top}/data", top

    def as_pg(*argv):
        return subprocess.run(["runuser", "-u", "postgres", "--", *argv], capture_output=True, text=True,
                              timeout=120)

    r = as_pg(f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
    assert r.returncode == 0, r.stderr
    r = as_pg(f"{bindir}/pg_ctl", "-D", data, "-l", f"{top}/log", "-w", "-t", "90",
              "-o", f"-k {sock} -c listen_addresses='' -c fsync=off", "start")
    assert r.returncode == 0, r.stderr + open(f"{top}/log").read()
    try:
        yield f"postgresql://postgres@/postgres?host={sock}"
    finally:
        as_pg(f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.root
def test_postgresql_history_matches_sqlite(pg_url, tmp_path):
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as c:  # a fresh database per test
        c.execute("DROP DATABASE IF EXISTS h1")
        c.execute("CREATE DATABASE h1")
    url = pg_url.replace("/postgres?", "/h1?")
    pg, lite = history.connect(url), history.connect(f"sqlite:///{tmp_path / 'h.sqlite'}")
    assert pg.kind == "postgresql" and lite.kind == "sqlite"
    rng = np.random.default_rng(1)
    docs = [_doc(0.100 + rng.normal(0, 0.002), 700, f"2026-01-{i + 1:02d}T00:00:00", seed=i) for i in range(8)]
    for i, d in enumerate(docs):
        for con in (pg, lite):
            assert history.add(con, d, f"r{i}") == (i + 1, True)
    assert history.add(pg, docs[0], "again") == (1, False)
    # a second client (another CI machine) sees the same history and adds nothing twice
    other = history.connect(url)
    assert history.add(other, docs[3], "r3") == (4, False)
    assert [r[2] for r in history.series(other, "a", "selective", "wall_s")] == pytest.approx(
        [r[2] for r in history.series(lite, "a", "selective", "wall_s")], rel=1e-12)  # double precision
    new = _doc(0.130, 760, "2026-02-01T00:00:00", seed=98)
    assert history.check(pg, new) == history.check(lite, new)
    assert {r["metric"]: r["status"] for r in history.check(pg, new)} == {"wall_s": "regression",
                                                                          "pages_read": "regression"}
    from elflayout.report import timing

    series = timing.load_history(url, metric="pages_read")
    assert series[0]["values"] == [700.0] * 8
    for con in (pg, lite, other):
        con.close()


@pytest.mark.root
def test_postgresql_cli(pg_url, tmp_path):
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS h2")
        c.execute("CREATE DATABASE h2")
    url = pg_url.replace("/postgres?", "/h2?")
    files = []
    for i in range(7):
        f = tmp_path / f"r{i}.json"
        dump_json(_doc(0.1, 700, f"2026-01-{i + 1:02d}T00:00:00", seed=i), f)
        files.append(f)
    r = run_cli("history", "add", *files[:6], "--db", url, "--label", "ci", check=0)
    assert r.stdout.count("added as session") == 6
    run_cli("history", "check", files[6], "--db", url, "--metric", "pages_read", check=0)
    bad = tmp_path / "bad.json"
    dump_json(_doc(0.1, 800, "2026-02-01T00:00:00", seed=50), bad)
    assert "regression" in run_cli("history", "check", bad, "--db", url, "--metric", "pages_read", check=1).stderr
    assert "6 session(s)" in run_cli("history", "show", "--db", url, check=0).stdout
    r = run_cli("history", "add", files[0], "--db", pg_url.replace("/postgres?", "/nosuchdb?"), check=2)
    assert r.stderr.startswith("elflayout: error:") and "cannot connect to PostgreSQL" in r.stderr
    r = run_cli("history", "add", files[0], "--db", "postgresql://u:secret@/x?host=/nonexistent", check=2)
    assert "secret" not in r.stderr and "***" in r.stderr
    assert "expected a file" in run_cli("history", "show", "--db", "mysql://x/y", check=2).stderr
