"""compare verb and results model: exports, recomputation, bad inputs (no root needed)."""

import csv
import io
import json

import pytest

from conftest import ROOT, run_cli
from elflayout.fileio import dump_json
from elflayout import results as model
from elflayout.measure.runner import Runner

EXAMPLE = ROOT / "tests" / "data" / "results-example.json"


def test_example_results_follow_format_v1():
    doc = model.load(EXAMPLE)
    assert doc["format"] == "elflayout-results" and doc["version"] == 1
    md = doc["metadata"]
    for k in ("kernel", "cpu_model", "read_ahead_kb", "aslr", "controls", "census", "files", "states", "seed"):
        assert k in md
    f, fmd = next(iter(md["files"].items()))
    assert {"path", "build_id", "size", "sha256", "sections"} <= set(fmd)
    assert all({"name", "offset", "size"} == set(s) for s in fmd["sections"])
    run = doc["runs"][0]
    for k in ("variant", "state", "round", "wall_s", "user_s", "sys_s", "major_faults", "minor_faults", "files"):
        assert k in run
    fr = next(x for x in (r["files"][f] for r in doc["runs"] if r["state"] == "selective") if x["pages_read"])
    assert {"pages_read", "bytes_read", "seeks", "reads", "faults"} <= set(fr)
    assert sum(n for _, _, n in fr["reads"]) == fr["pages_read"] and fr["bytes_read"] == 4096 * fr["pages_read"]
    for k in ("variant", "state", "metric", "n", "mean", "median", "ci_low", "ci_high"):
        assert k in doc["summary"][0]
    for k in ("a", "b", "state", "metric", "ratio", "ci_low", "ci_high", "p_welch", "p_mwu", "verdict"):
        assert k in doc["comparisons"][0]


@pytest.mark.slow
def test_compare_exports(tmp_path):
    md = run_cli("compare", EXAMPLE, check=0).stdout
    assert "| b vs a |" in md and "pages_read" in md and "I/O-bound" in md
    j = json.loads(run_cli("compare", EXAMPLE, "--json", check=0).stdout)
    assert j["format"] == "elflayout-compare" and j["comparisons"]
    rows = list(csv.reader(io.StringIO(run_cli("compare", EXAMPLE, "--csv", check=0).stdout)))
    assert rows[0][:3] == ["variant", "state", "metric"]
    runs = list(csv.DictReader(io.StringIO(run_cli("compare", EXAMPLE, "--runs-csv", check=0).stdout)))
    doc = json.loads(EXAMPLE.read_text())
    assert len(runs) == sum(max(1, len(r["files"])) for r in doc["runs"])
    out = tmp_path / "t.md"
    run_cli("compare", EXAMPLE, "--markdown", "-o", out, check=0)
    assert out.read_text() == md.split("\n- warning")[0] or out.read_text().startswith("| variant")
    run_cli("compare", EXAMPLE, "--markdown", "-o", out, check=2)  # exists, no --force
    r = run_cli("compare", EXAMPLE, "--metric", "bogus", check=2)
    assert "unknown" in r.stderr


def test_compare_recomputes_and_fails_on(tmp_path):
    doc = json.loads(EXAMPLE.read_text())
    # make the second variant read 10x the pages in every selective run
    b = doc["variants"][1]["name"]
    for r in doc["runs"]:
        if r["variant"] == b and r["state"] == "selective":
            r["pages_read"] *= 10
    doc["comparisons"] = []
    p = tmp_path / "r.json"
    dump_json(doc, p)
    j = json.loads(run_cli("compare", p, "--json", check=0).stdout)
    c = next(c for c in j["comparisons"] if c["metric"] == "pages_read" and c["state"] == "selective")
    assert c["verdict"] == "more"
    r = run_cli("compare", p, "--fail-on", "more", check=1)
    assert "pages_read" in r.stderr and "Holm" in r.stderr
    # only primary comparisons decide the exit code
    run_cli("compare", p, "--fail-on", "more", "--primary", "wall_s:hot", check=0)
    run_cli("compare", p, "--fail-on", "any", "--primary", "pages_read:selective", check=1)


def test_compare_says_how_many_comparisons_and_power(tmp_path):
    md = run_cli("compare", EXAMPLE, "--target-effect", "5%", check=0).stdout
    assert "14 comparisons:" in md and "4 described, not tested" in md and "Holm" in md and "primary: pages_read:selective, wall_s:selective" in md
    j = json.loads(run_cli("compare", EXAMPLE, "--json", "--target-effect", "0.05", check=0).stdout)
    mu = j["multiplicity"]
    assert mu["comparisons"] == len(j["comparisons"]) == 14 and mu["method"] == "holm" and mu["not_tested"] == 4
    u = next(c for c in j["comparisons"] if c["metric"] == "user_s")
    assert u["verdict"] == "not tested" and "tick" in u["untested"] and u["p_value"] is None
    assert mu["target_effect"] == 0.05
    # 5 runs per side of a noisy time: no change, with the MDE and the runs needed for 5%
    w = next(c for c in j["comparisons"] if c["metric"] == "wall_s" and c["state"] == "selective")
    assert w["verdict"] == "no change" and w["mde"] > 0.05 and w["runs_needed"] > 5 and w["primary"]
    assert w["test"] == "paired t, log" and w["p_adjusted"] >= w["p_value"]
    csv_text = run_cli("compare", EXAMPLE, "--csv", check=0).stdout
    assert "comparisons,tested" in csv_text
    assert "METRIC:STATE" in run_cli("compare", EXAMPLE, "--primary", "wall", check=2).stderr
    assert "--target-effect" in run_cli("compare", EXAMPLE, "--target-effect", "lots", check=2).stderr


def test_disturbed_runs_are_left_out(tmp_path):
    doc = json.loads(EXAMPLE.read_text())
    a = doc["variants"][0]["name"]
    sel = [r for r in doc["runs"] if r["variant"] == a and r["state"] == "selective"]
    sel[0]["pages_read"] = 1
    sel[0]["interference"] = "test: another process read the file"
    p = tmp_path / "r.json"
    dump_json(doc, p)
    j = json.loads(run_cli("compare", p, "--json", check=0).stdout)
    s = next(s for s in j["summary"] if s["variant"] == a and s["state"] == "selective" and s["metric"] == "pages_read")
    assert s["n"] == len(sel) - 1 and s["min"] > 1
    j = json.loads(run_cli("compare", p, "--json", "--include-disturbed", check=0).stdout)
    s = next(s for s in j["summary"] if s["variant"] == a and s["state"] == "selective" and s["metric"] == "pages_read")
    assert s["n"] == len(sel) and s["min"] == 1


def test_interference_rule():
    r = Runner.__new__(Runner)
    r._evict_why, r.rootless = {}, False     # what __init__ sets and the rule reads
    base = {"state": "selective", "source": "trace", "files": {"/l": {"pages_read": 10, "resident_after": 10}}}
    assert r.interference(base) is None
    assert "resident after" in r.interference({**base, "files": {"/l": {"pages_read": 10, "resident_after": 14}}})
    assert "could not be evicted" in r.interference({**base, "evict_left": {"/l": 3}})
    assert r.interference({**base, "state": "hot", "evict_left": {"/l": 3}}) is None


def test_bad_results_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"format": "elflayout-profile", "version": 1}')
    r = run_cli("compare", p, check=2)
    assert "expected an elflayout-results file" in r.stderr
    p.write_text('{"format": "elflayout-results", "version": 9}')
    assert "version 9" in run_cli("compare", p, check=2).stderr
    p.write_text('{"format": "elflayout-results", "version": 1, "variants": [], "runs": [{"x": 1}]}')
    assert "malformed" in run_cli("compare", p, check=2).stderr
    assert "no such file" in run_cli("compare", tmp_path / "none.json", check=2).stderr


@pytest.mark.root
def test_demo_time_verdicts_never_below_the_minimum_runs(tmp_path):
    """The demo's sessions (its own _measure, real runs) at its default n give time
    verdicts; the same file with rounds lost (fewer runs, or runs disturbed) says
    "too few runs" on every time row below the minimum, never faster/slower."""
    import os

    import pytest

    from elflayout import demo
    from elflayout.measure import stats

    if os.geteuid() != 0:
        pytest.skip("measure evicts files and traces page-cache: needs root")
    assert demo.DEFAULT_RUNS >= stats.MIN_TIME_RUNS
    f = tmp_path / "f.bin"
    f.write_bytes(b"x" * 65536)
    out = demo._measure(demo.Demo(tmp_path), {"a": "true", "b": "sh -c true"}, [f], ["selective", "hot"],
                        demo.DEFAULT_RUNS, tmp_path / "demo.results.json")
    doc = json.loads(out.read_text())

    def time_rows(path):
        c = json.loads(run_cli("compare", path, "--json", check=0).stdout)
        return [r for r in c["comparisons"] if r["metric"] in stats.TIME_METRICS]

    def n_of(r):
        return r.get("n_pairs") if r.get("paired") else min(r["n_a"], r["n_b"])

    rows = time_rows(out)
    kept = {(r["state"], r["metric"]) for r in rows if r["verdict"] != "too few runs"}
    assert kept and all(n_of(r) >= stats.MIN_TIME_RUNS for r in rows if r["verdict"] != "too few runs")
    # rounds lost: the last ones, and one run of b marked disturbed in each state
    short = {**doc, "runs": [dict(r) for r in doc["runs"] if r["round"] < stats.MIN_TIME_RUNS]}
    for st in ("selective", "hot"):
        next(r for r in short["runs"] if r["variant"] == "b" and r["state"] == st)["interference"] = "test"
    dump_json(short, tmp_path / "short.json")
    rows = time_rows(tmp_path / "short.json")
    assert rows and all(r["verdict"] == ("not tested" if r["metric"] in stats.DESCRIPTIVE_METRICS else "too few runs")
                        for r in rows), [(r["metric"], r["verdict"]) for r in rows]
    # and what they could resolve is still printed
    assert all(r["mde"] is not None for r in rows if r["metric"] == "wall_s"), rows
    md = run_cli("compare", tmp_path / "short.json", check=0).stdout
    assert f"no time verdict below {stats.MIN_TIME_RUNS} runs" in md and "slower" not in md and "faster" not in md
