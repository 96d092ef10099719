"""The results model: one reader (``model.read``), one metric registry, typed consumers."""

import json

import numpy as np
import pytest

from conftest import ROOT
from elflayout.errors import ElflayoutError
from elflayout.fileio import dump_json
from elflayout import results as model

EXAMPLE = ROOT / "tests" / "data" / "results-example.json"


def test_one_metric_registry():
    from elflayout.measure import stats
    from elflayout.report import data as D

    assert D.METRICS is model.METRICS  # the report's labels and units are the registry's
    # the order of a results file's summary rows and of the runs CSV's columns (format v1)
    assert stats.METRICS == ("wall_s", "user_s", "sys_s", "cpu_s", "major_faults", "pages_read", "bytes_read")
    assert model.RUN_FIELDS == ("variant", "state", "round", "seq", "wall_s", "user_s", "sys_s", "major_faults",
                                "minor_faults", "read_bytes", "pages_read", "bytes_read")
    assert stats.TIME_METRICS == ("wall_s", "user_s", "sys_s", "cpu_s")
    assert stats.DERIVED_METRICS == {"cpu_s": ("user_s", "sys_s")}
    assert stats.DESCRIPTIVE_METRICS == ("user_s", "sys_s")
    with pytest.raises(ElflayoutError, match="--metric nope: unknown .*cpu_s"):
        model.metric("nope")


def test_cpu_s_is_the_same_for_stats_compare_and_report():
    from elflayout.measure import stats
    from elflayout.measure.stats import recompute
    from elflayout.report import data as D
    from elflayout.report import timing

    res = model.read(EXAMPLE)
    v, s = res.variant_names[1], res.states[0]
    clean = [r for r in res.runs_of(v, s) if not r.disturbed]
    want = [r.raw["user_s"] + r.raw["sys_s"] for r in clean]
    assert len(want) >= 2
    assert [stats.run_value(r.raw, "cpu_s") for r in clean] == pytest.approx(want)
    assert [r.value("cpu_s") for r in clean] == pytest.approx(want)
    assert D.values(res, v, s, "cpu_s").tolist() == pytest.approx(want)  # the report knows cpu_s
    row = next(x for x in recompute(res, metrics=["cpu_s"])["summary"] if (x["variant"], x["state"]) == (v, s))
    assert row["metric"] == "cpu_s" and row["n"] == len(want) and row["mean"] == pytest.approx(np.mean(want))
    fig = timing.violin_figure(res, "cpu_s")
    try:
        assert fig.axes[0].get_ylabel() == "CPU time (user + system) (ms)"
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_results_round_trip_through_read(tmp_path):
    doc = json.loads(EXAMPLE.read_text())
    res = model.read(EXAMPLE)
    assert res.doc == doc and res.variants == tuple((v["name"], v["command"]) for v in doc["variants"])
    assert res.states == doc["metadata"]["states"] and res.seed == doc["metadata"]["seed"]
    for r, raw in zip(res.runs, doc["runs"], strict=True):
        assert (r.variant, r.state, r.round, r.seq, r.wall_s) == tuple(raw[k] for k in model.RUN_FIELDS[:5])
        for name in model.RUN_FIELDS[4:]:
            assert r.value(name) == raw[name]
        assert r.value("cpu_s") == pytest.approx(raw["user_s"] + raw["sys_s"])
        for path, f in raw["files"].items():
            typed = r.files[path]
            assert (typed.pages_read, typed.bytes_read, typed.seeks) == (f["pages_read"], f["bytes_read"], f["seeks"])
            assert [list(x) for x in typed.reads] == [[float(y) for y in x] for x in f.get("reads", [])]
        assert r.value("pages_read", list(r.files)) == raw["pages_read"]  # the run's total is its files' sum
        assert r.value("seeks") == sum(f["seeks"] for f in raw["files"].values())
    out = tmp_path / "again.json"
    dump_json(res.doc, out)
    assert out.read_bytes() == EXAMPLE.read_bytes()  # written back unchanged
    assert model.read(out).runs == res.runs
    # a document built in memory goes through the same parser
    built = model.build(doc["metadata"], doc["variants"], doc["runs"], {})
    assert model.as_results(built).runs == res.runs


def test_an_empty_interference_flag_is_no_flag():
    from elflayout.measure import stats

    runs = [model.parse_run({"variant": "a", "state": "hot", "round": i, "seq": i, "wall_s": 0.1, "interference": f},
                            i) for i, f in enumerate(("", None, [], "other process"))]
    assert [r.disturbed for r in runs] == [False, False, False, True]
    out = stats.analyse(runs, ["a"], ["hot"], metrics=("wall_s",))
    assert out["summary"][0]["n"] == 3
