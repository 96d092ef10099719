"""Statistics of elflayout.measure.stats on data with known answers."""

import numpy as np
import pytest
from scipy import stats as ss

from elflayout.measure import stats


def test_describe_matches_numpy_and_scipy_reference():
    x = np.array([10.2, 9.8, 10.5, 10.1, 9.9, 10.4, 10.0, 10.3])
    d = stats.describe(x, seed=3)
    assert d["n"] == 8
    assert d["mean"] == pytest.approx(10.15)
    assert d["median"] == pytest.approx(10.15)
    assert d["sd"] == pytest.approx(np.std(x, ddof=1))
    assert d["cov"] == pytest.approx(np.std(x, ddof=1) / 10.15)
    # the same BCa call made directly with scipy gives the same interval
    ref = ss.bootstrap((x,), np.mean, method="BCa", n_resamples=stats.N_RESAMPLES,
                       random_state=np.random.default_rng(3)).confidence_interval
    assert d["ci_low"] == pytest.approx(ref.low, rel=1e-9)
    assert d["ci_high"] == pytest.approx(ref.high, rel=1e-9)
    assert d["ci_low"] < d["mean"] < d["ci_high"]
    assert d["ci_method"] == "BCa"


def test_zero_variance_and_single_value_give_degenerate_intervals():
    d = stats.describe([14227] * 10)
    assert (d["ci_low"], d["ci_high"], d["sd"], d["ci_method"]) == (14227, 14227, 0, "degenerate")
    assert d["outliers"] == []
    one = stats.describe([0.5])
    assert one["ci_low"] == one["ci_high"] == 0.5 and one["sd"] == 0
    assert stats.describe([])["n"] == 0


def test_welch_mwu_brown_forsythe_are_scipy_values():
    a = [1.1, 1.3, 0.9, 1.2, 1.0, 1.15]
    b = [1.4, 1.6, 1.5, 1.45, 1.7, 1.55]
    c = stats.compare(a, b, "wall_s")
    assert c["p_welch"] == pytest.approx(ss.ttest_ind(a, b, equal_var=False).pvalue)
    assert c["p_mwu"] == pytest.approx(ss.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    assert c["p_brown_forsythe"] == pytest.approx(ss.levene(a, b, center="median").pvalue)
    assert c["ratio"] == pytest.approx(np.mean(b) / np.mean(a))
    assert c["verdict"] == "slower" and c["improved"] is False
    assert c["ci_low"] > 1


def test_verdicts_for_counts_constant_samples():
    same = stats.compare([100] * 5, [100] * 5, "pages_read")
    assert same["verdict"] == "no change" and same["p_welch"] is None and same["p_brown_forsythe"] is None
    fewer = stats.compare([100] * 5, [80] * 5, "pages_read")
    assert fewer["verdict"] == "fewer" and fewer["improved"] is True
    assert fewer["diff"] == -20 and fewer["diff_ci_low"] == fewer["diff_ci_high"] == -20
    assert stats.compare([3] * 5, [4] * 5, "major_faults")["verdict"] == "more"


def test_time_floor_keeps_tiny_changes_out():
    rng = np.random.default_rng(0)
    a = 1.0 + rng.normal(0, 1e-5, 50)
    b = a * 1.005  # 0.5%: interval excludes 1 but below the 1% floor
    c = stats.compare(a, b, "wall_s")
    assert c["ci_low"] > 1
    assert c["verdict"] == "no change"
    assert stats.compare(a, a * 1.05, "wall_s")["verdict"] == "slower"
    assert stats.compare(a, a * 0.9, "wall_s")["verdict"] == "faster"


def test_aa_same_distribution_is_no_change():
    rng = np.random.default_rng(42)
    a, b = rng.normal(0.1, 0.005, 30), rng.normal(0.1, 0.005, 30)
    assert stats.compare(a, b, "wall_s")["verdict"] == "no change"


def test_few_runs_warn_but_do_not_crash():
    c = stats.compare([1.0, 1.1], [1.2], "wall_s")
    assert any("fewer than 4" in w for w in c["warnings"])
    assert c["p_welch"] is None  # one value on a side: no t-test
    assert stats.compare([], [1.0], "wall_s")["verdict"] == "no data"
    assert stats.compare([0.0, 0.0], [0.0, 0.0], "wall_s")["ratio"] is None


def test_modified_z_outliers():
    assert stats.outliers([]).tolist() == []
    assert stats.outliers([5, 5, 5, 5]).tolist() == []
    assert stats.outliers([10, 10.1, 9.9, 10.05, 9.95, 30]).tolist() == [5]
    # MAD = 0 but one value off: the mean-absolute-deviation fallback flags it
    assert stats.outliers([1, 1, 1, 1, 1, 1, 1, 9]).tolist() == [7]
    # known value: M = 0.6745 * (x - median) / MAD
    x = np.array([1.0, 2.0, 3.0, 4.0, 100.0])
    z = 0.6745 * (x - 3.0) / 1.0
    assert stats.outliers(x).tolist() == np.flatnonzero(np.abs(z) > 3.5).tolist()


def test_io_bound_and_change():
    r = stats.io_bound([5.0, 5.2, 4.8, 5.0], [1.0, 1.1, 0.9, 1.0])
    assert r["value"] == pytest.approx(4.0)
    assert r["ci_low"] <= 4.0 <= r["ci_high"]
    ch = stats.io_bound_change([5.0] * 4, [1.0] * 4, [4.0] * 4, [1.0] * 4)
    assert ch == {"value": -1.0, "ci_low": -1.0, "ci_high": -1.0}


def test_analyse_structure():
    runs = []
    for i in range(6):
        for v, pages in (("a", 100), ("b", 60)):
            for s in ("selective", "hot"):
                runs.append({"variant": v, "state": s, "seq": len(runs), "round": i,
                             "wall_s": 0.01 * (2 if s == "selective" else 1) + 1e-4 * i,
                             "user_s": 0.001, "sys_s": 0.002, "major_faults": 3, "minor_faults": 10,
                             "pages_read": pages if s == "selective" else 0,
                             "bytes_read": 4096 * (pages if s == "selective" else 0)})
    out = stats.analyse(runs, ["a", "b"], ["selective", "hot"])
    assert len(out["summary"]) == 2 * 2 * len(stats.METRICS)
    pr = [c for c in out["comparisons"] if c["metric"] == "pages_read" and c["state"] == "selective"][0]
    assert pr["verdict"] == "fewer" and pr["ratio"] == pytest.approx(0.6)
    io = [r for r in out["io_bound"] if r.get("variant") == "a"][0]
    assert io["value"] == pytest.approx(0.01)


def test_paired_ratio_known_answers():
    r = stats.paired_ratio([2.0, 4.0, 8.0], [1.0, 2.0, 4.0])
    assert r["n_pairs"] == 3 and r["paired_ratio"] == pytest.approx(0.5)
    assert r["paired_ci_low"] == pytest.approx(0.5) and r["paired_ci_high"] == pytest.approx(0.5)
    # drift shared by both sides cancels: unpaired ratio CI is wide, paired one is tight
    drift = np.linspace(1, 3, 20)
    a, b = drift * 1.00, drift * 1.10
    p = stats.paired_ratio(a, b)
    assert p["paired_ratio"] == pytest.approx(1.10)
    c = stats.compare(a, b, "wall_s")
    assert c["ci_high"] - c["ci_low"] > 0.2
    assert stats.paired_ratio([0.0, 1.0], [0.0, 2.0]) ["n_pairs"] == 1
    assert stats.paired_ratio([0.0], [0.0]) == {"n_pairs": 0}


def test_time_verdict_needs_the_paired_interval_too():
    # a and b anti-correlated across rounds: the unpaired samples differ by 3.5% with a
    # tight interval, but round by round b is as often faster as slower
    a = [1.0, 1.2] * 50
    b = [1.235, 1.035] * 50
    un = stats.compare(a, b, "wall_s")
    pr = stats.paired_ratio(a, b)
    assert un["verdict"] == "slower" and un["ci_low"] > 1
    assert pr["paired_ci_low"] < 1 < pr["paired_ci_high"]
    runs = [{"variant": v, "state": "hot", "round": i, "seq": 2 * i + (v == "b"), "wall_s": x}
            for v, xs in (("a", a), ("b", b)) for i, x in enumerate(xs)]
    out = stats.analyse(runs, ["a", "b"], ["hot"], metrics=("wall_s",))["comparisons"][0]
    assert out["verdict"] == "no change" and out["improved"] is None
    assert any("paired" in w for w in out["warnings"])
    # a real, consistent change survives both intervals
    runs = [{"variant": v, "state": "hot", "round": i, "seq": i, "wall_s": x * (1.2 if v == "b" else 1.0)}
            for v in "ab" for i, x in enumerate(np.linspace(1, 1.05, 10))]
    assert stats.analyse(runs, ["a", "b"], ["hot"], metrics=("wall_s",))["comparisons"][0]["verdict"] == "slower"


def test_single_timed_run_per_side_gives_no_verdict():
    """A degenerate [x, x] interval from one run must not turn into faster/slower."""
    from elflayout.measure import stats

    row = stats.compare([1.0], [0.8], "wall_s")
    assert row["verdict"] == "too few runs"
    assert row["improved"] is None
    # Deterministic counts still compare (their floor is documented as 0 pages).
    assert stats.compare([100.0], [90.0], "pages_read")["verdict"] == "fewer"
