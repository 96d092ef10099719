"""screen (factorial designs, effects, plots) and calibrate (A/A noise, MDE, runs)."""

import itertools
import json
import os
import re

import numpy as np
import pytest

from conftest import ROOT, run_cli
from elflayout.errors import ElflayoutError
from elflayout.measure import calibrate, screen, stats

EXAMPLE = ROOT / "tests" / "data" / "results-example.json"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="measure evicts files and traces page-cache: needs root")


def test_full_and_fractional_designs():
    x, props = screen.design(3)
    assert props["kind"] == "full" and x.shape == (8, 3)
    assert sorted(map(tuple, x)) == sorted(itertools.product((-1, 1), repeat=3))
    x5, p5 = screen.design(5)
    assert x5.shape == (16, 5) and p5["resolution"] == 5 and p5["interactions"]
    # resolution V: main effects and 2-factor interactions are mutually orthogonal
    cols = [x5[:, i] for i in range(5)] + [x5[:, i] * x5[:, j] for i, j in itertools.combinations(range(5), 2)]
    m = np.array(cols)
    assert np.array_equal(m @ m.T, 16 * np.eye(len(cols), dtype=int))
    x7, p7 = screen.design(7)
    assert x7.shape == (16, 7) and p7["resolution"] == 4 and not p7["interactions"]
    # resolution IV: main effects orthogonal to each other and to every 2-factor interaction
    for i in range(7):
        assert all(x7[:, i] @ x7[:, j] == 0 for j in range(7) if j != i)
        assert all(x7[:, i] @ (x7[:, j] * x7[:, k]) == 0 for j, k in itertools.combinations(range(7), 2))
    assert screen.design(5, full=True)[0].shape == (32, 5)
    with pytest.raises(ElflayoutError):
        screen.design(8)


def test_factors_and_points():
    f = [screen.parse_factor("aslr=on,off"), screen.parse_factor("read_ahead_kb=128,8192"),
         screen.parse_factor("pin=none,0"), screen.parse_factor("lib=/a,/b")]
    cmd, controls, levels = screen.point_setup(f, [1, -1, 1, 1], "LD_LIBRARY_PATH={lib} x")
    assert cmd == "LD_LIBRARY_PATH=/b x" and controls == {"no_aslr": True, "read_ahead_kb": 128, "pin": [0]}
    assert levels == {"aslr": "off", "read_ahead_kb": "128", "pin": "0", "lib": "/b"}
    from elflayout.measure.session import MeasurePlan

    plan = screen.point_plan(MeasurePlan(variants=[], read_ahead_kb=None, census="none"), f, [-1, 1, -1, -1],
                             "LD_LIBRARY_PATH={lib} x", "p05", 3, ["hot"], ["/l"], 7)
    assert plan.variants == [("p05", "LD_LIBRARY_PATH=/a x")] and plan.read_ahead_kb == 8192
    assert plan.no_aslr is False and plan.pin is None and plan.census == "none" and plan.runs == 3
    rt = [screen.parse_factor("realtime=off,5")]
    assert screen.point_setup(rt, [1], "x")[1] == {"realtime": 5} and screen.point_setup(rt, [-1], "x")[1] == {
        "realtime": None}
    assert screen.point_plan(MeasurePlan(variants=[]), rt, [1], "x", "p01", 3, ["hot"], [], 1).realtime == 5
    for bad in ("aslr=on", "aslr=yes,no", "x=1,1", "read_ahead_kb=a,b", "pin=all,0", "=1,2", "realtime=off,fifo"):
        with pytest.raises(ElflayoutError):
            screen.parse_factor(bad)
    with pytest.raises(ElflayoutError, match="does not appear"):
        screen.check_command([screen.parse_factor("lib=/a,/b")], "llc-16 --version")
    order = screen.run_order(4, 2, seed=3)
    assert sorted(p for r, p in order if r == 0) == [0, 1, 2, 3] and len(order) == 8


def test_effects_recover_a_known_design():
    """Synthetic runs with a +10% main effect of A and none of B: the fit finds exactly that."""
    rng = np.random.default_rng(0)
    factors = [screen.Factor("A", "lo", "hi"), screen.Factor("B", "lo", "hi")]
    x, props = screen.design(2)
    runs = [{"point": p, "state": "hot", "session": p, "wall_s": float(np.exp(0.1 * (x[p, 0] > 0) + rng.normal(0, 0.01)))}
            for p in range(4) for _ in range(20)]
    a = screen.fit_effects(runs, factors, x, props, "wall_s", "hot", clustered=False)
    eff = {e["term"]: e for e in a["effects"]}
    assert eff["A"]["effect"] == pytest.approx(np.expm1(0.1), abs=0.01) and eff["A"]["significant"]
    assert eff["B"]["ci_low"] < 0 < eff["B"]["ci_high"] and "A x B" in eff


def test_screen_cli_errors(tmp_path):
    r = run_cli("screen", "--factor", "aslr=on,off", "-o", tmp_path / "o", check=2)
    assert "name the command" in r.stderr
    r = run_cli("screen", "--factor", "lib=/a,/b", "-o", tmp_path / "o", "--", "true", check=2)
    assert "does not appear" in r.stderr
    r = run_cli("screen", "--factor", "storage=none,hdd", "-o", tmp_path / "o", "--", "true", check=2)
    assert "needs --files" in r.stderr


@pytest.mark.root
@needs_root
def test_screen_runs_a_real_design(tmp_path):
    out = tmp_path / "scr"
    r = run_cli("screen", "--factor", "aslr=on,off", "--factor", "d=0.001,0.05", "--runs", "3", "--state", "hot",
                "--files", "/usr/bin/sleep", "--measure-arg=--census=none", "--measure-arg=--read-ahead-kb=-1",
                "-o", out, "--", "sleep {d}", check=0)
    assert "full design (4 points)" in r.stdout and "| d |" in r.stdout
    doc = json.loads((out / "screen.json").read_text())
    assert doc["format"] == "elflayout-screen" and len(doc["runs"]) == 4 * 3
    eff = {e["term"]: e for e in doc["effects"][0]["effects"]}
    assert eff["d"]["effect"] > 0.5  # 50 ms against 1 ms of sleep: far above any noise
    assert (out / "block-wall_s-hot.png").stat().st_size > 1000 and (out / "violin-wall_s.png").exists()
    assert "data:image/png;base64" in (out / "report.html").read_text()
    run_cli("screen", "--factor", "aslr=on,off", "-o", out, "--", "true", check=2)  # not empty, no --force
    # the screening result inside the main report, beside a results file
    rep = tmp_path / "report.html"
    run_cli("report", EXAMPLE, out / "screen.json", "-o", rep, check=0)
    h = rep.read_text()
    start = h.index('<h2 id="s1">Screening: screen.json</h2>')
    end = h.find("<h2", start + 1)
    sec = h[start:end if end > 0 else len(h)]       # the screening section only
    assert "Effects on wall_s, hot" in sec and "95% CI" in sec and "interval excludes 0" in sec
    row = re.search(r'<td class="t">d</td><td data-v="([^"]+)">\+[\d.]+%</td><td>\[(\+[\d.]+)%, \+[\d.]+%\]</td>', sec)
    assert row and float(row.group(1)) == pytest.approx(eff["d"]["effect"]), sec[:3000]
    assert float(row.group(2)) / 100 == pytest.approx(eff["d"]["ci_low"], abs=1e-4)
    assert 'alt="block-wall_s-hot"' in sec and 'alt="violin-wall_s"' in sec
    # its two images (the page's scripts after it carry data URLs of their own)
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', sec)) == 2 and 'href="#s1"' in h


def test_report_rejects_a_malformed_screen_result(tmp_path):
    from elflayout import fileio

    good = fileio.envelope("screen", 1, {"command": "true", "states": ["hot"], "runs": 2, "replicates": 1},
                           factors=[{"name": "aslr", "low": "on", "high": "off"}],
                           design={"kind": "full", "matrix": [[-1], [1]], "interactions": False},
                           runs=[{"point": 0, "state": "hot", "wall_s": 0.01}], effects=[])
    fileio.dump_json(good, tmp_path / "ok.json")
    run_cli("report", tmp_path / "ok.json", "-o", tmp_path / "ok.html", check=0)
    assert "Screening: ok.json" in (tmp_path / "ok.html").read_text()
    for key, value, says in (("design", {"kind": "full", "matrix": [[-1, 1]]}, "'design.matrix'"),
                             ("runs", [{"point": 7, "state": "hot"}], "'runs'"),
                             ("factors", [], "'factors'")):
        fileio.dump_json({**good, key: value}, tmp_path / "bad.json")
        r = run_cli("report", tmp_path / "bad.json", "-o", tmp_path / "bad.html", check=2)
        assert f"not a valid screen result: {says}" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "bad.html").exists()
    r = run_cli("plot", tmp_path / "ok.json", "-o", tmp_path / "p.png", check=2)
    assert "a screening result" in r.stderr


def test_calibrate_from_results():
    from elflayout import results as model

    cal = calibrate.analyse(model.load(EXAMPLE), 0.05)
    rows = {(r["state"], r["metric"]): r for r in cal["rows"]}
    assert rows[("selective", "pages_read")]["deterministic"] and rows[("selective", "wall_s")]["primary"]
    assert cal["recommended_runs"] >= stats.MIN_TIME_RUNS
    assert cal["recommended_runs"] == max(stats.MIN_TIME_RUNS, rows[("selective", "wall_s")]["runs_needed"])
    out = run_cli("calibrate", "--from", EXAMPLE, "--target-effect", "10%", check=0).stdout
    assert "Recommended: --runs" in out and "runs for 10%" in out
    assert "not both" in run_cli("calibrate", "true", "--from", EXAMPLE, check=2).stderr


@pytest.mark.root
@needs_root
def test_calibrate_runs_an_aa_session(tmp_path):
    r = run_cli("calibrate", "/usr/bin/true", "--state", "hot", "--files", "/usr/bin/true", "--runs", "3",
                "--measure-arg=--census=none", "--measure-arg=--read-ahead-kb=-1", "--json",
                "-o", tmp_path / "aa.json", check=0)
    cal = json.loads(r.stdout)
    assert cal["variants"] == ["a", "a2"] and cal["multiplicity"]["comparisons"] == 7
    assert cal["multiplicity"]["not_tested"] == 2  # the user/sys split: described, never a false alarm
    w = next(x for x in cal["rows"] if x["metric"] == "wall_s")
    assert w["n"] == 3 and w["verdict"] == "too few runs" and w["noise_sd"] > 0 and w["runs_needed"] >= 2
    assert (tmp_path / "aa.json").exists()


def test_screen_output_directory_is_checked_before_the_runs(tmp_path):
    """A path that cannot be a directory fails at once, as bad input (was an OSError after
    every design point had run)."""
    (tmp_path / "file").write_text("x")
    r = run_cli("screen", "--factor", "aslr=on,off", "-o", tmp_path / "file" / "sub", "--", "true", check=2)
    assert "cannot create the output directory" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "screen:" not in r.stderr  # nothing ran


@pytest.mark.parametrize("arg, says", [("--measure-arg=--runs=3", "set by this verb itself"),
                                       ("--measure-arg=--preload=plan.json", "not for screen"),
                                       ("--measure-arg=--no-such-option", "not valid options of elflayout measure")])
def test_screen_measure_args_are_checked_in_one_line(tmp_path, arg, says):
    r = run_cli("screen", "--factor", "aslr=on,off", arg, "-o", tmp_path / "o", "--", "true", check=2)
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "o").exists()


def test_screen_model_builds_and_parses_one_document(tmp_path):
    from elflayout import fileio
    from elflayout.measure import screen_model

    factors = [screen_model.Factor("aslr", "on", "off"), screen_model.Factor("d", "0.001", "0.05")]
    x, props = screen.design(2)
    fit = {"metric": "wall_s", "state": "hot", "n": 4, "log_scale": True, "se": "HC3",
           "effects": [{"term": "d", "order": 1, "effect": 0.5, "ci_low": 0.4, "ci_high": 0.6, "p": 0.001,
                        "significant": True}]}
    doc = screen_model.build({"command": "sleep {d}", "states": ["hot"], "runs": 2, "replicates": 1}, factors,
                             {**props, "matrix": x.tolist()}, [(0, 1), (0, 0)],
                             [{"point": p, "state": "hot", "wall_s": 0.01} for p in range(4)], [fit])
    fileio.dump_json(doc, tmp_path / "screen.json")
    s = screen_model.load(tmp_path / "screen.json")
    assert s.factors == tuple(factors) and s.factors[1].level(x[1][1]) == ("0.05" if x[1][1] > 0 else "0.001")
    assert s.fits[0].effects[0] == screen_model.Effect("d", 0.5, 0.4, 0.6, 0.001, True)
    assert s.doc["order"] == [{"replicate": 0, "point": 1}, {"replicate": 0, "point": 0}]
    fileio.dump_json({**doc, "version": 2}, tmp_path / "v2.json")
    with pytest.raises(ElflayoutError, match="version 2 is not supported"):
        screen_model.load(tmp_path / "v2.json")
