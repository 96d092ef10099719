"""Statistics for measurement results: summaries, comparisons, verdicts, power, outliers.

Methods (Mytkowicz et al. 2009; Larres, Potanin and Hirose, ACSC 2013; Flater, NIST TN
1855, 2014):
- Summaries: 95% BCa bootstrap intervals (``scipy.stats.bootstrap``, seeded) of the mean
  and the median of each series; n < 2 or no spread gives the degenerate interval
  [value, value]; a BCa interval that cannot be computed falls back to the percentile
  interval and says so in ``ci_method``.
- Comparisons of times: a t-test on *log* times, i.e. of the ratio of geometric means
  b/a: paired by round (per-round log ratios; each round runs a and b back to back, so
  load shared by a round cancels) when at least MIN_TIME_RUNS rounds pair, else Welch's
  (conservative when rounds are correlated). Startup times are skewed and
  multiplicative; on the log scale they are close to symmetric, and the t-interval
  keeps its coverage at small n where the BCa interval of the ratio of means does not
  (coverage study: bench/bench_verdicts.py, docs/methodology.md). The interval and the
  p-value come from the same test, so a verdict can never contradict its row's p-value.
  Series with a zero or negative value use Welch on the raw values. When Welch decided,
  a faster/slower verdict also needs the paired interval to exclude 1.
- CPU time: ``cpu_s`` = user + sys, exact in the kernel, is tested like a time. The
  user/system split is tick-sampled (often 0 for a start-up of a few ticks): its rows
  give means and ratio with verdict "not tested" and the reason in ``untested``.
- Counts (pages, bytes, major faults): *deterministic* only where the runs show it (no
  spread on either side, n >= 2 each): then any difference is a change, exactly, with no
  test and no p-value. Otherwise (hot runs on a shared machine: other processes evict
  pages) Welch's t on the raw values, like a time.
- Multiplicity: Holm's step-down correction (``statsmodels.stats.multitest``) across all
  tested comparisons of a results file; the verdict uses the adjusted p-value and a
  magnitude floor (1% for times). ``primary`` comparisons decide exit codes.
- Power: with every row that is not exact, the minimum detectable effect at 80% power
  for the observed noise at the Bonferroni level alpha/m (Holm never needs less), and
  the runs per side needed to detect a target effect (``statsmodels.stats.power``).
- Minimum n: below MIN_TIME_RUNS per side a time comparison gives "too few runs"
  (from the coverage study of bench/bench_verdicts.py).
- Brown-Forsythe (Levene with center='median') flags a change in spread; Mann-Whitney U
  is reported for reference. Tests undefined on the data give ``None``, never a made-up
  p-value.
- Outliers: modified Z-score (Iglewicz and Hoaglin 1993), |Mi| > 3.5, with
  Mi = 0.6745 (xi - median) / MAD; when MAD is 0 the mean absolute deviation is used
  (Mi = (xi - median) / (1.253314 MeanAD)); when both are 0 there are no outliers.
- Hommey's I/O-bound figure: mean(cold) - mean(hot) per variant (cold or selective)
  and the change of that difference between variants, with a bootstrap interval.
"""

from __future__ import annotations

import functools
import math
import warnings
from itertools import product

import numpy as np
from scipy import stats as ss

from elflayout.errors import ElflayoutError
from elflayout import results as model

# The metrics and how each is derived: one registry (results.METRICS). The kernel
# measures a task's CPU time exactly (sum_exec_runtime) but splits it into user and system
# by sampling the mode at each scheduler tick and scaling the samples to the exact sum
# (cputime_adjust): for a start-up of a few ticks the split is a small binomial count,
# often 0 for one side. cpu_s = user_s + sys_s is the exact sum and is tested; the split
# is reported without a test (no valid t-test on such values).
METRICS = tuple(m.name for m in model.METRICS.values() if m.compared)
TIME_METRICS = tuple(m for m in METRICS if model.METRICS[m].time)
COUNT_METRICS = tuple(m for m in METRICS if not model.METRICS[m].time)
DERIVED_METRICS = {m: model.METRICS[m].parts for m in METRICS if model.METRICS[m].parts}
DESCRIPTIVE_METRICS = tuple(m for m in METRICS if not model.METRICS[m].tested)
UNTESTED_REASON = ("not tested: the kernel samples the user/system split once per scheduler tick and scales it to "
                   "the exact CPU time, so a start-up's split is a count of a few ticks (often 0); cpu_s "
                   "(user + sys, exact) carries the CPU verdict")
TIME_FLOOR = 0.01  # relative: 1% of the baseline mean
COUNT_FLOOR = 0.0  # absolute: any interval-backed change in a deterministic count
MIN_RUNS = 4  # below this per side, intervals and tests are not worth much (warning)
MIN_TIME_RUNS = 4  # no time verdict below this per side: the coverage study of bench/bench_verdicts.py
ALPHA = 0.05
POWER = 0.80
DEFAULT_PRIMARY = (("pages_read", "selective"), ("wall_s", "selective"))
Z_OUTLIER = 3.5
N_RESAMPLES = 4999
CONFIDENCE = 0.95
def _f(x):
    """JSON-friendly float: None for NaN/inf."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def bootstrap_ci(samples, statistic, seed=0, n_resamples=N_RESAMPLES):
    """(low, high, method) of a 95% BCa interval; degenerate and fallback cases handled."""
    samples = [np.asarray(s, dtype=float) for s in samples]
    point = statistic(*samples)
    if any(len(s) < 2 for s in samples) or all(np.ptp(s) == 0 for s in samples):
        return point, point, "degenerate"
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                r = ss.bootstrap(samples, lambda *a, axis=-1: statistic(*a, axis=axis), vectorized=True,
                                 paired=False, confidence_level=CONFIDENCE, n_resamples=n_resamples,
                                 method=method, random_state=np.random.default_rng(seed))
            except (ValueError, ZeroDivisionError, FloatingPointError):
                continue
        lo, hi = r.confidence_interval
        if np.isfinite(lo) and np.isfinite(hi):
            return float(lo), float(hi), method
    return point, point, "degenerate"


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def _median(x, axis=-1):
    return np.median(x, axis=axis)


def outliers(x) -> np.ndarray:
    """Indices of modified-Z outliers (|M| > 3.5); see module docstring for MAD = 0."""
    x = np.asarray(x, dtype=float)
    if len(x) < 3:
        return np.zeros(0, dtype=int)
    med = np.median(x)
    dev = x - med
    mad = np.median(np.abs(dev))
    if mad > 0:
        z = 0.6745 * dev / mad
    else:
        meanad = np.mean(np.abs(dev))
        if meanad == 0:
            return np.zeros(0, dtype=int)
        z = dev / (1.253314 * meanad)
    return np.flatnonzero(np.abs(z) > Z_OUTLIER)


def describe(x, seed=0) -> dict:
    x = np.asarray(x, dtype=float)
    n = len(x)
    if n == 0:
        return {"n": 0}
    mean, med = float(np.mean(x)), float(np.median(x))
    sd = float(np.std(x, ddof=1)) if n > 1 else 0.0
    lo, hi, how = bootstrap_ci([x], _mean, seed)
    mlo, mhi, _ = bootstrap_ci([x], _median, seed)
    return {"n": n, "mean": mean, "median": med, "sd": sd, "cov": _f(sd / mean) if mean else None,
            "min": float(x.min()), "max": float(x.max()), "ci_low": _f(lo), "ci_high": _f(hi),
            "median_ci_low": _f(mlo), "median_ci_high": _f(mhi), "ci_method": how,
            "outliers": outliers(x).tolist()}


def _ratio(a, b, axis=-1):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.mean(b, axis=axis) / np.mean(a, axis=axis)


def _diff(a, b, axis=-1):
    return np.mean(b, axis=axis) - np.mean(a, axis=axis)


def _p(test, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return _f(test(*args, **kw).pvalue)
        except ValueError:
            return None


def _statsmodels_power():
    try:
        from statsmodels.stats.power import TTestIndPower, TTestPower
    except ImportError:
        raise ElflayoutError("the power analysis needs statsmodels: pip install 'elflayout[stats]' "
                             "(make bootstrap installs it)") from None
    return TTestIndPower, TTestPower


def _statsmodels_multipletests():
    try:
        from statsmodels.stats.multitest import multipletests
    except ImportError:
        raise ElflayoutError("Holm's correction needs statsmodels: pip install 'elflayout[stats]' "
                             "(make bootstrap installs it)") from None
    return multipletests


def t_test(a, b, log: bool, paired: bool = False) -> dict | None:
    """Welch (or paired) t-test of b against a: {p, lo, hi, sd, df} on the log or raw scale.

    lo/hi: the 95% interval of mean(b) - mean(a) (of log values: of the log ratio of
    geometric means); sd: the noise the power analysis uses (pooled sd of the two
    samples, or sd of the per-pair differences). None when undefined (n < 2 on a side,
    or no spread at all).
    """
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    if log:
        a, b = np.log(a), np.log(b)
    if min(len(a), len(b)) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if paired:
            d = b - a
            if np.ptp(d) == 0:
                return None
            r = ss.ttest_rel(b, a)
            sd = float(np.std(d, ddof=1))
        else:
            if np.ptp(a) == 0 and np.ptp(b) == 0:
                return None
            r = ss.ttest_ind(b, a, equal_var=False)
            sd = float(np.sqrt((np.var(a, ddof=1) + np.var(b, ddof=1)) / 2))
        ci = r.confidence_interval(CONFIDENCE)
    if not (np.isfinite(r.pvalue) and np.isfinite(ci.low) and np.isfinite(ci.high)):
        return None
    return {"p": float(r.pvalue), "lo": float(ci.low), "hi": float(ci.high), "sd": sd, "df": float(r.df),
            "point": float(np.mean(b) - np.mean(a))}


def t_intervals(la, lb, paired: bool):
    """Vectorised ``t_test`` for studies: rows of log values (k x n arrays, no degenerate
    rows) -> (lo, hi, p) arrays of the 95% interval of mean(lb) - mean(la) per row."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = ss.ttest_rel(lb, la, axis=-1) if paired else ss.ttest_ind(lb, la, equal_var=False, axis=-1)
        ci = r.confidence_interval(CONFIDENCE)
    return np.asarray(ci.low), np.asarray(ci.high), np.asarray(r.pvalue)


@functools.lru_cache(maxsize=4096)
def _effect_size(n_a: int, n_b: int, alpha: float, power: float, paired: bool):
    """Cohen's d detected with ``power`` (statsmodels' root finding is slow: cached by n)."""
    TTestIndPower, TTestPower = _statsmodels_power()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if paired:
                d = TTestPower().solve_power(nobs=min(n_a, n_b), alpha=alpha, power=power)
            else:
                d = TTestIndPower().solve_power(nobs1=n_a, ratio=n_b / n_a, alpha=alpha, power=power)
        except (ValueError, RuntimeError, ZeroDivisionError):
            return None
    d = float(np.ravel(d)[0])
    return d if np.isfinite(d) else None


def mde(sd: float, n_a: int, n_b: int, alpha: float = ALPHA, power: float = POWER, paired: bool = False):
    """Smallest |mean difference| detected with ``power`` by a two-sided t-test at ``alpha``,
    in the units of ``sd`` (log units for times). None when it cannot be computed."""
    if sd is None or not np.isfinite(sd) or min(n_a, n_b) < 2:
        return None
    d = _effect_size(int(n_a), int(n_b), float(alpha), float(power), bool(paired))
    return d * sd if d is not None else None


def runs_needed(effect: float, sd: float, alpha: float = ALPHA, power: float = POWER, paired: bool = False):
    """Runs per side for a two-sided t-test at ``alpha`` to detect a mean difference of
    ``effect`` (same units as ``sd``) with ``power``; None when undefined."""
    TTestIndPower, TTestPower = _statsmodels_power()

    if not sd or not np.isfinite(sd) or not effect:
        return None
    es = abs(effect) / sd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            n = (TTestPower().solve_power(effect_size=es, alpha=alpha, power=power) if paired else
                 TTestIndPower().solve_power(effect_size=es, ratio=1.0, alpha=alpha, power=power))
        except (ValueError, RuntimeError, ZeroDivisionError):
            return None
    n = float(np.ravel(n)[0])
    return max(2, math.ceil(n)) if np.isfinite(n) else None


def compare(a, b, metric: str, seed=0, pairs=None, min_time_runs: int = MIN_TIME_RUNS) -> dict:
    """Variant b against baseline a for one metric: ratio b/a, difference b - a, test, p.

    The verdict here is *unadjusted*; ``adjust`` applies the multiplicity correction
    across a file's comparisons and sets the final verdict. ``pairs``: (a, b) values of
    the rounds both sides ran, for the paired interval.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    out = {"n_a": len(a), "n_b": len(b)}
    warn = []
    if len(a) == 0 or len(b) == 0:
        return {**out, "verdict": "no data", "warnings": ["a side has no runs"], "test": None, "p_value": None}
    ma, mb = float(a.mean()), float(b.mean())
    diff = mb - ma
    if metric in DESCRIPTIVE_METRICS:  # the tick-sampled split: no test, no verdict (UNTESTED_REASON)
        out.update({"mean_a": ma, "mean_b": mb, "ratio": _f(mb / ma) if ma else None, "ci_low": None,
                    "ci_high": None, "diff": diff, "diff_ci_low": None, "diff_ci_high": None, "ci_method": None,
                    "test": None, "p_value": None, "p_welch": None, "p_mwu": None, "p_brown_forsythe": None,
                    "verdict": "not tested", "improved": None, "deterministic": False, "noise_sd": None,
                    "log_scale": False, "paired": False, "warnings": warn, "untested": UNTESTED_REASON,
                    "zeros_a": int((a == 0).sum()), "zeros_b": int((b == 0).sum())})
        if pairs is not None:  # the fields of every row, with no interval or p-value
            out.update({"n_pairs": len(pairs[0]), "paired_ratio": None, "paired_ci_low": None,
                        "paired_ci_high": None, "paired_p": None})
        return out
    is_time = metric in TIME_METRICS
    both_const = bool(min(len(a), len(b)) >= 2 and np.ptp(a) == 0 and np.ptp(b) == 0)
    log = is_time and bool((a > 0).all() and (b > 0).all())
    welch = t_test(a, b, log=log)
    raw = t_test(a, b, log=False) if log else welch
    # Times: the paired test on per-round log ratios decides when enough rounds pair
    # (the coverage study: it holds its level, and load shared by a round cancels);
    # else Welch on logs (conservative when the rounds are correlated).
    pa, pb = (np.asarray(pairs[0], float), np.asarray(pairs[1], float)) if pairs is not None else ((), ())
    paired = (is_time and log and len(pa) >= min_time_runs and bool((pa > 0).all() and (pb > 0).all()))
    t = t_test(pa, pb, log=True, paired=True) if paired else welch
    if paired and t is None:
        paired, t = False, welch
    ratio = mb / ma if ma else None
    rlo = rhi = None
    if log and t:  # ratio of geometric means and its interval
        ratio, rlo, rhi = math.exp(t["point"]), math.exp(t["lo"]), math.exp(t["hi"])
    elif raw and ma:
        rlo, rhi = 1 + raw["lo"] / ma, 1 + raw["hi"] / ma
    elif both_const and ma:
        rlo = rhi = ratio
    dlo, dhi = (raw["lo"], raw["hi"]) if raw else (diff, diff) if both_const else (None, None)
    p_mwu = _p(ss.mannwhitneyu, a, b, alternative="two-sided")
    p_bf = None if both_const or min(len(a), len(b)) < 2 else _p(ss.levene, a, b, center="median")
    n = len(pa) if paired else min(len(a), len(b))
    if min(len(a), len(b)) < MIN_RUNS:
        warn.append(f"fewer than {MIN_RUNS} runs per side ({len(a)} and {len(b)}): the verdict is not reliable")
    deterministic = (not is_time) and both_const
    test = ("exact (deterministic)" if deterministic else None if t is None else
            ("paired t, log" if paired else "Welch t, log" if log else "Welch t"))
    if deterministic:
        changed = abs(diff) > COUNT_FLOOR
        verdict = ("more" if diff > 0 else "fewer") if changed else "no change"
    elif t is None:
        changed, verdict = False, "too few runs" if n < 2 else "no change"
    else:
        # unadjusted; adjust() replaces it with the verdict at the corrected level
        changed = t["p"] < ALPHA and (not is_time or (ma != 0 and abs(diff) / abs(ma) >= TIME_FLOOR))
        up, down = ("slower", "faster") if is_time else ("more", "fewer")
        verdict = (up if diff > 0 else down) if changed else "no change"
    if is_time and n < min_time_runs and verdict != "no data":
        warn.append(f"{n} runs per side: fewer than the {min_time_runs} needed for a trustworthy time interval")
        changed, verdict = False, "too few runs"
    if p_bf is not None and p_bf < ALPHA:
        warn.append(f"spread changed (Brown-Forsythe p = {p_bf:.3g})")
    out.update({"mean_a": ma, "mean_b": mb, "ratio": _f(ratio), "ci_low": _f(rlo), "ci_high": _f(rhi),
                "diff": diff, "diff_ci_low": _f(dlo), "diff_ci_high": _f(dhi),
                "ci_method": "t, log scale" if log and t else "t" if raw else "exact" if both_const else None,
                "test": test, "p_value": _f(t["p"]) if t and not deterministic else None,
                "p_welch": _f(welch["p"]) if welch and not deterministic else None,
                "p_mwu": p_mwu, "p_brown_forsythe": p_bf, "verdict": verdict,
                "improved": (diff < 0) if changed else None, "deterministic": deterministic,
                "noise_sd": _f(t["sd"]) if t else None, "log_scale": log, "paired": paired, "warnings": warn})
    if pairs is not None:
        out.update(paired_ratio(*pairs, seed))
    return out


def paired_ratio(a, b, seed=0) -> dict:
    """Geometric-mean ratio b/a over rounds (pairs run close in time) with a t-interval.

    Each round runs a and b back to back, so a per-round ratio cancels slow drift of
    the machine (load from other jobs) that inflates the unpaired interval. Pairs with
    a zero or negative value are skipped (no log ratio).
    """
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    ok = (a > 0) & (b > 0)
    if ok.sum() < 1:
        return {"n_pairs": int(ok.sum())}
    lr = np.log(b[ok] / a[ok])
    point = float(np.exp(lr.mean()))
    t = t_test(a[ok], b[ok], log=True, paired=True)
    lo, hi = (math.exp(t["lo"]), math.exp(t["hi"])) if t else (point, point) if np.ptp(lr) == 0 else (None, None)
    return {"n_pairs": int(ok.sum()), "paired_ratio": point, "paired_ci_low": _f(lo), "paired_ci_high": _f(hi),
            "paired_p": _f(t["p"]) if t else None}


def parse_primary(specs) -> list[tuple[str, str]]:
    """["wall_s:selective", ...] -> [(metric, state)]; ValueError names a bad one."""
    out = []
    for s in specs:
        m, sep, st = str(s).partition(":")
        if not sep or m not in METRICS or not st:
            raise ValueError(f"{s!r}: expected METRIC:STATE with METRIC one of {', '.join(METRICS)}")
        if m in DESCRIPTIVE_METRICS:
            raise ValueError(f"{s!r}: {m} is reported without a test (tick-sampled); use cpu_s:{st}")
        out.append((m, st))
    return out


def adjust(comparisons: list[dict], alpha: float = ALPHA, primary=DEFAULT_PRIMARY,
           target_effect: float | None = None) -> dict:
    """Holm's correction across the tested comparisons; final verdicts, MDE, runs needed.

    Rows are changed in place: ``p_adjusted``, ``verdict`` (at the corrected level),
    ``primary``, ``mde`` (relative, for "no change" / "too few runs"), ``runs_needed``
    (per side, for ``target_effect``). Returns the multiplicity summary of the file.
    """
    multipletests = _statsmodels_multipletests()

    prim = {tuple(p) for p in primary}
    # rows without a verdict to give ("too few runs") need no correction: not in the family
    tested = [c for c in comparisons if c.get("p_value") is not None and c["verdict"] not in ("too few runs", "no data")]
    m = len(tested)
    if m:
        _, padj, _, _ = multipletests([c["p_value"] for c in tested], alpha=alpha, method="holm")
        for c, pa in zip(tested, padj):
            c["p_adjusted"] = float(pa)
    # Bonferroni: the level Holm's first step uses, for the family this file would have
    # with enough runs (rows now "too few runs" included)
    level = alpha / max(sum(1 for c in comparisons if c.get("p_value") is not None), 1)
    for c in comparisons:
        c.setdefault("p_adjusted", None)
        c["primary"] = (c.get("metric"), c.get("state")) in prim
        is_time = c.get("metric") in TIME_METRICS
        if c.get("p_adjusted") is not None:
            floor_ok = not is_time or (c["mean_a"] and abs(c["diff"]) / abs(c["mean_a"]) >= TIME_FLOOR)
            changed = c["p_adjusted"] < alpha and floor_ok
            if changed and is_time and c.get("n_pairs", 0) >= MIN_RUNS:
                lo, hi = c.get("paired_ci_low"), c.get("paired_ci_high")
                if lo is not None and hi is not None and lo <= 1 <= hi:
                    c["warnings"] = c["warnings"] + [
                        f"the unpaired interval excludes 1 but the paired-by-round interval "
                        f"[{lo:.4f}, {hi:.4f}] contains 1: no change"]
                    changed = False
            if c["p_value"] < alpha and c["p_adjusted"] >= alpha and floor_ok:
                c["warnings"] = c["warnings"] + [
                    f"p = {c['p_value']:.3g} alone, but {c['p_adjusted']:.3g} after Holm's correction "
                    f"for {m} comparisons: no change"]
            up, down = ("slower", "faster") if is_time else ("more", "fewer")
            c["verdict"] = (up if c["diff"] > 0 else down) if changed else "no change"
            c["improved"] = (c["diff"] < 0) if changed else None
        sd, scale = c.get("noise_sd"), c.get("log_scale")
        if sd is not None and not c.get("deterministic") and c.get("n_a", 0) >= 2:
            n_a, n_b = (c["n_pairs"], c["n_pairs"]) if c.get("paired") else (c["n_a"], c["n_b"])
            d = mde(sd, n_a, n_b, level, paired=bool(c.get("paired")))
            rel = (math.expm1(d) if scale else d / abs(c["mean_a"]) if c.get("mean_a") else None) if d else None
            c["mde"] = _f(rel)
        else:
            c["mde"] = None
        if target_effect and sd is not None and not c.get("deterministic"):
            eff = math.log1p(target_effect) if scale else (target_effect * abs(c["mean_a"]) if c.get("mean_a") else None)
            c["runs_needed"] = runs_needed(eff, sd, level, paired=bool(c.get("paired"))) if eff else None
    return {"method": "holm", "alpha": alpha, "comparisons": len(comparisons), "tested": m,
            "tested_if_enough": sum(1 for c in comparisons if c.get("p_value") is not None),
            "exact": sum(1 for c in comparisons if c.get("deterministic")),
            "not_tested": sum(1 for c in comparisons if c.get("verdict") == "not tested"),
            "too_few_runs": sum(1 for c in comparisons if c.get("verdict") == "too few runs"),
            "primary": [f"{mt}:{st}" for mt, st in primary], "min_time_runs": MIN_TIME_RUNS,
            "target_effect": target_effect}


def io_bound(cold, hot, seed=0) -> dict:
    """Hommey's (cold - hot) for one variant, with a bootstrap interval."""
    cold = np.asarray(cold, float)
    hot = np.asarray(hot, float)
    if len(cold) == 0 or len(hot) == 0:
        return {}
    lo, hi, _ = bootstrap_ci([hot, cold], _diff, seed)
    return {"value": float(cold.mean() - hot.mean()), "ci_low": _f(lo), "ci_high": _f(hi)}


def io_bound_change(a_cold, a_hot, b_cold, b_hot, seed=0) -> dict:
    """(cold_b - hot_b) - (cold_a - hot_a) with a bootstrap interval."""
    s = [np.asarray(x, float) for x in (a_cold, a_hot, b_cold, b_hot)]
    if any(len(x) == 0 for x in s):
        return {}

    def stat(ac, ah, bc, bh, axis=-1):
        return (np.mean(bc, axis=axis) - np.mean(bh, axis=axis)) - (np.mean(ac, axis=axis) - np.mean(ah, axis=axis))

    lo, hi, _ = bootstrap_ci(s, stat, seed)
    return {"value": float(stat(*s)), "ci_low": _f(lo), "ci_high": _f(hi)}


def run_value(run, metric: str):
    """A metric of one run (a ``model.Run`` or a run record), derived as the registry says
    (cpu_s from its parts); None when absent."""
    return run.value(metric) if isinstance(run, model.Run) else model.metric(metric).of(run)


def typed_runs(runs) -> list[model.Run]:
    """Runs as ``model.Run``: typed ones as they are, records (built in memory) parsed."""
    return [r if isinstance(r, model.Run) else model.parse_run(r, i, "runs") for i, r in enumerate(runs)]


def _series(runs, variant, state, metric):
    x = [r.value(metric) for r in runs if r.variant == variant and r.state == state]
    return np.array([v for v in x if v is not None], dtype=float)


def compare_runs(runs, variants: list[str], states: list[str], seed: int = 0, metrics=METRICS,
                 primary=DEFAULT_PRIMARY, target_effect: float | None = None,
                 min_time_runs: int = MIN_TIME_RUNS) -> tuple[list[dict], dict]:
    """(comparisons, multiplicity) of each variant against the first, over the given runs
    (``model.Run`` or run records; all of them: leave disturbed runs out before)."""
    runs = typed_runs(runs)
    comparisons = []
    base = variants[0] if variants else None
    for b, s, m in product(variants[1:], states, metrics):
        xa, xb = _series(runs, base, s, m), _series(runs, b, s, m)
        if len(xa) == 0 and len(xb) == 0:
            continue
        pa = {r.round: r.value(m) for r in runs if r.variant == base and r.state == s}
        pb = {r.round: r.value(m) for r in runs if r.variant == b and r.state == s}
        pa, pb = ({k: v for k, v in p.items() if v is not None} for p in (pa, pb))
        both = sorted(set(pa) & set(pb))
        pairs = ([pa[k] for k in both], [pb[k] for k in both])
        comparisons.append({"a": base, "b": b, "state": s, "metric": m,
                            **compare(xa, xb, m, seed, pairs=pairs, min_time_runs=min_time_runs)})
    return comparisons, adjust(comparisons, primary=primary, target_effect=target_effect)


def analyse(runs, variants: list[str], states: list[str], seed: int = 0,
            metrics=METRICS, include_disturbed: bool = False, primary=DEFAULT_PRIMARY,
            target_effect: float | None = None, min_time_runs: int = MIN_TIME_RUNS) -> dict:
    """summary, comparisons (each variant against the first), multiplicity and io_bound.

    Runs flagged ``interference`` (another process used the files under test meanwhile)
    are left out unless ``include_disturbed``.
    """
    runs = typed_runs(runs)
    if not include_disturbed:
        runs = [r for r in runs if not r.disturbed]
    summary, io = [], []
    for v, s, m in product(variants, states, metrics):
        x = _series(runs, v, s, m)
        if len(x) == 0:
            continue
        d = describe(x, seed)
        # report run seq numbers, not indices within the series
        seqs = [r.seq for r in runs if r.variant == v and r.state == s and r.value(m) is not None]
        d["outliers"] = [seqs[i] for i in d["outliers"]]
        summary.append({"variant": v, "state": s, "metric": m, **d})
    comparisons, multiplicity = compare_runs(runs, variants, states, seed, metrics, primary, target_effect,
                                             min_time_runs)
    base = variants[0] if variants else None
    if "hot" in states:
        for cold_state in [s for s in ("cold", "selective") if s in states]:
            for m in ("wall_s",):
                per = {}
                for v in variants:
                    per[v] = io_bound(_series(runs, v, cold_state, m), _series(runs, v, "hot", m), seed)
                    io.append({"variant": v, "cold_state": cold_state, "metric": m, **per[v]})
                for b in variants[1:]:
                    ch = io_bound_change(_series(runs, base, cold_state, m), _series(runs, base, "hot", m),
                                         _series(runs, b, cold_state, m), _series(runs, b, "hot", m), seed)
                    io.append({"a": base, "b": b, "cold_state": cold_state, "metric": m, "change": ch})
    return {"summary": summary, "comparisons": comparisons, "multiplicity": multiplicity, "io_bound": io}


def recompute(res, seed=None, metrics=None, include_disturbed=False, primary=None, target_effect=None) -> dict:
    """The document of ``res`` (``model.Results``, or a document built in memory) with its
    summary, comparisons, multiplicity and io_bound computed again from the runs."""
    res = model.as_results(res)
    if metrics:
        bad = set(metrics) - set(METRICS)
        if bad:
            raise ElflayoutError(f"--metric {sorted(bad)[0]}: unknown (choose from {', '.join(METRICS)})")
    try:
        prim = parse_primary(primary) if primary else DEFAULT_PRIMARY
    except ValueError as e:
        raise ElflayoutError(f"--primary {e}") from None
    out = analyse(res.runs, res.variant_names, res.states, seed=res.seed if seed is None else seed,
                  metrics=tuple(metrics or METRICS), include_disturbed=include_disturbed, primary=prim,
                  target_effect=target_effect)
    return {**res.doc, **out}
