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


def test_time_comparison_is_welch_t_on_log_times():
    rng = np.random.default_rng(1)
    a = np.exp(rng.normal(0.0, 0.05, 12))
    b = np.exp(rng.normal(0.3, 0.05, 12))
    c = stats.compare(a, b, "wall_s")
    ref = ss.ttest_ind(np.log(b), np.log(a), equal_var=False)
    assert c["p_welch"] == c["p_value"] == pytest.approx(ref.pvalue)
    lo, hi = ref.confidence_interval(0.95)
    assert (c["ci_low"], c["ci_high"]) == pytest.approx((np.exp(lo), np.exp(hi)))
    assert c["ratio"] == pytest.approx(np.exp(np.log(b).mean() - np.log(a).mean()))
    assert c["p_mwu"] == pytest.approx(ss.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    assert c["p_brown_forsythe"] == pytest.approx(ss.levene(a, b, center="median").pvalue)
    assert c["verdict"] == "slower" and c["improved"] is False and c["ci_low"] > 1
    assert c["test"] == "Welch t, log"
    # a zero time cannot be logged: Welch on the raw values
    z = stats.compare([0.0] + [0.004] * 11, [0.004, 0.008] * 6, "cpu_s")
    assert z["test"] == "Welch t" and z["log_scale"] is False


def test_tick_sampled_split_is_described_not_tested():
    # the kernel's user/sys split of a 6-tick start-up: k ticks of user time, scaled to the exact sum
    rng = np.random.default_rng(5)
    runs = []
    for k in range(10):
        for v in ("a", "b"):
            cpu = 0.024 * float(np.exp(rng.normal(0, 0.03)))
            u = cpu * int(rng.binomial(6, 0.3)) / 6
            runs.append({"variant": v, "state": "hot", "round": k, "seq": len(runs), "wall_s": cpu * 1.05,
                         "user_s": u, "sys_s": cpu - u})
    rows, mu = stats.compare_runs(runs, ["a", "b"], ["hot"], metrics=stats.TIME_METRICS)
    by = {c["metric"]: c for c in rows}
    for m in stats.DESCRIPTIVE_METRICS:
        c = by[m]
        assert c["verdict"] == "not tested" and c["p_value"] is None and c["p_adjusted"] is None
        assert "tick" in c["untested"] and c["mde"] is None and c["ratio"] is not None
    cpu = by["cpu_s"]
    assert cpu["paired"] and cpu["p_value"] is not None and cpu["n_pairs"] == 10
    a = [r["user_s"] + r["sys_s"] for r in runs if r["variant"] == "a"]
    assert cpu["mean_a"] == pytest.approx(np.mean(a))
    assert mu["tested"] == 2 and mu["not_tested"] == 2 and mu["comparisons"] == 4
    with pytest.raises(ValueError, match="cpu_s:hot"):
        stats.parse_primary(["user_s:hot"])
    assert stats.run_value({"user_s": 0.01}, "cpu_s") is None


def test_verdict_never_contradicts_its_p_values():
    rng = np.random.default_rng(7)
    for i in range(60):
        n = int(rng.integers(2, 25))
        a = np.exp(rng.normal(0, rng.uniform(0.01, 0.3), n))
        b = np.exp(rng.normal(rng.choice([0, 0.02, 0.1]), rng.uniform(0.01, 0.3), n))
        runs = [{"variant": v, "state": "hot", "round": k, "seq": 2 * k + (v == "b"), "wall_s": x}
                for v, xs in (("a", a), ("b", b)) for k, x in enumerate(xs)]
        c = stats.analyse(runs, ["a", "b"], ["hot"], metrics=("wall_s",))["comparisons"][0]
        if c["verdict"] in ("faster", "slower"):
            assert c["p_adjusted"] < 0.05 and c["p_value"] < 0.05
            assert c["ci_low"] > 1 or c["ci_high"] < 1
            assert n >= stats.MIN_TIME_RUNS
        if c["p_value"] is not None and c["p_value"] >= 0.05:
            assert c["verdict"] in ("no change", "too few runs")


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


def test_counts_are_deterministic_only_where_the_runs_show_it():
    # hot runs on a shared machine: one run had pages evicted by someone else
    c = stats.compare([0, 0, 0, 0, 0, 0], [0, 0, 120, 0, 0, 0], "pages_read")
    assert c["deterministic"] is False and c["test"] == "Welch t"
    assert c["verdict"] == "no change" and c["p_value"] > 0.05
    d = stats.compare([14227] * 4, [14227] * 4, "pages_read")
    assert d["deterministic"] is True and d["p_value"] is None and d["verdict"] == "no change"


def test_too_few_runs_for_a_time_verdict():
    n = stats.MIN_TIME_RUNS - 1
    c = stats.compare([1.0, 1.01, 0.99, 1.0, 1.02][:n], [2.0, 2.01, 1.99, 2.0, 2.02][:n], "wall_s")
    assert n >= 2
    assert c["verdict"] == "too few runs" and c["p_value"] < 0.01  # the test is shown, no verdict given
    assert any("needed" in w for w in c["warnings"])
    # counts have no minimum: deterministic ones are exact
    assert stats.compare([100] * 2, [90] * 2, "pages_read")["verdict"] == "fewer"


def test_holm_across_a_files_comparisons():
    rng = np.random.default_rng(3)
    runs = []
    for k in range(12):
        for v in ("a", "b", "c", "d"):
            for s in ("selective", "hot"):
                runs.append({"variant": v, "state": s, "round": k, "seq": len(runs),
                             "wall_s": float(np.exp(rng.normal(0, 0.1))), "user_s": float(np.exp(rng.normal(0, 0.1))),
                             "sys_s": float(np.exp(rng.normal(0, 0.1))), "pages_read": 100, "major_faults": 3,
                             "bytes_read": 409600})
    out = stats.analyse(runs, ["a", "b", "c", "d"], ["selective", "hot"])
    rows = out["comparisons"]
    tested = [c for c in rows if c["p_value"] is not None]
    assert len(rows) == 3 * 2 * 7 and len(tested) == 3 * 2 * 2  # wall_s and cpu_s; user/sys described
    from statsmodels.stats.multitest import multipletests

    ref = multipletests([c["p_value"] for c in tested], method="holm")[1]
    assert [c["p_adjusted"] for c in tested] == pytest.approx(list(ref))
    mu = out["multiplicity"]
    assert mu["method"] == "holm" and mu["comparisons"] == 42 and mu["tested"] == 12 and mu["exact"] == 18
    assert mu["not_tested"] == 12
    assert sum(c["primary"] for c in rows) == 3 * 2  # pages_read and wall_s, selective, per variant
    for c in rows:
        if c["verdict"] in ("faster", "slower"):
            assert c["p_adjusted"] < 0.05


def test_mde_is_the_effect_detected_with_80_percent_power():
    from statsmodels.stats.power import TTestIndPower

    sd, n = 0.05, 20
    d = stats.mde(sd, n, n, alpha=0.05)
    assert d / sd == pytest.approx(TTestIndPower().solve_power(nobs1=n, alpha=0.05, power=0.8))
    # Monte Carlo: an effect of the MDE is found about 80% of the time
    rng = np.random.default_rng(5)
    hits = sum(ss.ttest_ind(rng.normal(d, sd, n), rng.normal(0, sd, n)).pvalue < 0.05 for _ in range(400))
    assert 0.7 < hits / 400 < 0.9
    assert stats.runs_needed(d, sd, alpha=0.05) in (n, n + 1)
    # rows that say "no change" carry the MDE (relative) and the runs for a target effect
    rng = np.random.default_rng(6)
    runs = [{"variant": v, "state": "hot", "round": k, "seq": 2 * k + (v == "b"),
             "wall_s": float(np.exp(rng.normal(0, 0.05)))} for v in "ab" for k in range(12)]
    c = stats.analyse(runs, ["a", "b"], ["hot"], metrics=("wall_s",), target_effect=0.05)["comparisons"][0]
    assert c["verdict"] == "no change" and 0.02 < c["mde"] < 0.2
    assert c["runs_needed"] > 12 if c["mde"] > 0.05 else c["runs_needed"] <= 12


def test_parse_primary():
    assert stats.parse_primary(["wall_s:hot"]) == [("wall_s", "hot")]
    with pytest.raises(ValueError):
        stats.parse_primary(["walltime:hot"])
    with pytest.raises(ValueError):
        stats.parse_primary(["wall_s"])


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
    assert pr["verdict"] == "fewer" and pr["ratio"] == pytest.approx(0.6) and pr["deterministic"]
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
    # enough rounds pair: the paired test decides (and its interval is the one shown)
    assert out["test"] == "paired t, log" and out["paired"] and out["ci_low"] < 1 < out["ci_high"]
    assert out["p_welch"] < 0.05 < out["p_value"]
    # without pairing (disturbed runs left most rounds unpaired) the paired interval still vetoes
    few = [r for r in runs if not (r["variant"] == "b" and r["round"] % 10)]
    few += [{**r, "round": 1000 + r["round"]} for r in runs if r["variant"] == "b" and r["round"] % 10]
    out = stats.analyse(few, ["a", "b"], ["hot"], metrics=("wall_s",))["comparisons"][0]
    assert out["test"] == "Welch t, log" and out["n_pairs"] == 10
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
    # Counts are deterministic only where the runs show it: one run per side shows nothing.
    assert stats.compare([100.0], [90.0], "pages_read")["verdict"] == "too few runs"
    assert stats.compare([100.0] * 2, [90.0] * 2, "pages_read")["verdict"] == "fewer"


def test_vectorised_t_intervals_match_t_test():
    rng = np.random.default_rng(11)
    la, lb = rng.normal(0, 0.1, (5, 8)), rng.normal(0.05, 0.1, (5, 8))
    for paired in (False, True):
        lo, hi, p = stats.t_intervals(la, lb, paired)
        for i in range(5):
            t = stats.t_test(np.exp(la[i]), np.exp(lb[i]), log=True, paired=paired)
            assert (lo[i], hi[i], p[i]) == pytest.approx((t["lo"], t["hi"], t["p"]))
