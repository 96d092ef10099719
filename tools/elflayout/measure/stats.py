"""Statistics for measurement results: summaries, comparisons, verdicts, outliers.

Methods (Larres, Potanin and Hirose, ACSC 2013; Flater, NIST TN 1855, 2014):
- 95% BCa bootstrap confidence intervals (``scipy.stats.bootstrap``, seeded) of the mean
  and the median; of the ratio and the difference of means between two variants.
  Degenerate samples (n < 2, or no spread) get the degenerate interval [value, value];
  a BCa interval that cannot be computed (NaN, e.g. almost-constant data) falls back to
  the percentile interval and says so in ``ci_method``.
- Welch's t and Mann-Whitney U p-values for a change in location; Brown-Forsythe
  (Levene with center='median') for a change in spread. Tests that are undefined on
  the data (both samples constant) give ``None``, never a made-up p-value.
- Verdict: the interval decides, a magnitude floor keeps negligible changes out.
  Times: the 95% CI of the ratio of means must exclude 1 *and* the point change must be
  at least TIME_FLOOR (1%) — smaller timing changes are below what this harness's noise
  can resolve. Counts (pages, bytes, faults) are deterministic under control, so the
  floor is 0: the CI of the difference must exclude 0.
- Outliers: modified Z-score (Iglewicz and Hoaglin 1993), |Mi| > 3.5, with
  Mi = 0.6745 (xi - median) / MAD; when MAD is 0 the mean absolute deviation is used
  (Mi = (xi - median) / (1.253314 MeanAD)); when both are 0 there are no outliers.
- Paired by round: the geometric mean of per-round ratios b/a with a BCa interval. For
  times, a faster/slower verdict of the unpaired interval stands only if the paired
  interval (when there are >= 4 pairs) also excludes 1: drift of a shared machine that
  happened to hit one variant more cannot fake a change there.
- Hommey's I/O-bound figure: mean(cold) - mean(hot) per variant (cold or selective)
  and the change of that difference between variants, with a bootstrap interval.
"""

from __future__ import annotations

import math
import warnings
from itertools import product

import numpy as np
from scipy import stats as ss

TIME_METRICS = ("wall_s", "user_s", "sys_s")
COUNT_METRICS = ("major_faults", "pages_read", "bytes_read")
METRICS = TIME_METRICS + COUNT_METRICS
TIME_FLOOR = 0.01  # relative: 1% of the baseline mean
COUNT_FLOOR = 0.0  # absolute: any interval-backed change in a deterministic count
MIN_RUNS = 4  # below this per side, intervals and tests are not worth much
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


def compare(a, b, metric: str, seed=0) -> dict:
    """Variant b against baseline a for one metric: ratio b/a, difference b - a, tests, verdict."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    out = {"n_a": len(a), "n_b": len(b)}
    warn = []
    if len(a) == 0 or len(b) == 0:
        return {**out, "verdict": "no data", "warnings": ["a side has no runs"]}
    ma, mb = float(a.mean()), float(b.mean())
    rlo = rhi = ratio = None
    if ma != 0:
        ratio = mb / ma
        rlo, rhi, _ = bootstrap_ci([a, b], _ratio, seed)
    dlo, dhi, how = bootstrap_ci([a, b], _diff, seed)
    both_const = np.ptp(a) == 0 and np.ptp(b) == 0
    p_welch = None if both_const or min(len(a), len(b)) < 2 else _p(ss.ttest_ind, a, b, equal_var=False)
    p_mwu = _p(ss.mannwhitneyu, a, b, alternative="two-sided")
    p_bf = None if both_const or min(len(a), len(b)) < 2 else _p(ss.levene, a, b, center="median")
    if min(len(a), len(b)) < MIN_RUNS:
        warn.append(f"fewer than {MIN_RUNS} runs per side ({len(a)} and {len(b)}): the verdict is not reliable")
    diff = mb - ma
    if metric in TIME_METRICS and min(len(a), len(b)) < 2:
        # One timed run per side has no spread to judge noise by: no verdict.
        changed, verdict = False, "too few runs"
    elif metric in TIME_METRICS:
        floor_ok = ma != 0 and abs(diff) / abs(ma) >= TIME_FLOOR
        ci_ok = rlo is not None and (rlo > 1 or rhi < 1) if ratio is not None else (dlo > 0 or dhi < 0)
        changed = floor_ok and ci_ok
        verdict = ("slower" if diff > 0 else "faster") if changed else "no change"
    else:
        changed = abs(diff) > COUNT_FLOOR and (dlo > 0 or dhi < 0)
        verdict = ("more" if diff > 0 else "fewer") if changed else "no change"
    if p_bf is not None and p_bf < 0.05:
        warn.append(f"spread changed (Brown-Forsythe p = {p_bf:.3g})")
    out.update({"mean_a": ma, "mean_b": mb, "ratio": _f(ratio), "ci_low": _f(rlo), "ci_high": _f(rhi),
                "diff": diff, "diff_ci_low": _f(dlo), "diff_ci_high": _f(dhi), "ci_method": how,
                "p_welch": p_welch, "p_mwu": p_mwu, "p_brown_forsythe": p_bf, "verdict": verdict,
                "improved": (diff < 0) if changed else None, "warnings": warn})
    return out


def paired_ratio(a, b, seed=0) -> dict:
    """Geometric-mean ratio b/a over rounds (pairs run close in time) with a BCa interval.

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
    lo, hi, _ = bootstrap_ci([lr], _mean, seed)
    return {"n_pairs": int(ok.sum()), "paired_ratio": float(np.exp(lr.mean())), "paired_ci_low": _f(np.exp(lo)),
            "paired_ci_high": _f(np.exp(hi))}


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


def _series(runs, variant, state, metric):
    return np.array([r[metric] for r in runs if r["variant"] == variant and r["state"] == state
                     and r.get(metric) is not None], dtype=float)


def analyse(runs: list[dict], variants: list[str], states: list[str], seed: int = 0,
            metrics=METRICS, include_disturbed: bool = False) -> dict:
    """summary, comparisons (each variant against the first) and io_bound of a results file.

    Runs flagged ``interference`` (another process used the files under test meanwhile)
    are left out unless ``include_disturbed``.
    """
    if not include_disturbed:
        runs = [r for r in runs if not r.get("interference")]
    summary, comparisons, io = [], [], []
    for v, s, m in product(variants, states, metrics):
        x = _series(runs, v, s, m)
        if len(x) == 0:
            continue
        d = describe(x, seed)
        # report run seq numbers, not indices within the series
        seqs = [r.get("seq") for r in runs if r["variant"] == v and r["state"] == s and r.get(m) is not None]
        d["outliers"] = [seqs[i] for i in d["outliers"]]
        summary.append({"variant": v, "state": s, "metric": m, **d})
    base = variants[0] if variants else None
    for b, s, m in product(variants[1:], states, metrics):
        xa, xb = _series(runs, base, s, m), _series(runs, b, s, m)
        if len(xa) == 0 and len(xb) == 0:
            continue
        row = {"a": base, "b": b, "state": s, "metric": m, **compare(xa, xb, m, seed)}
        pa = {r["round"]: r[m] for r in runs if r["variant"] == base and r["state"] == s and r.get(m) is not None}
        pb = {r["round"]: r[m] for r in runs if r["variant"] == b and r["state"] == s and r.get(m) is not None}
        both = sorted(set(pa) & set(pb))
        row.update(paired_ratio([pa[k] for k in both], [pb[k] for k in both], seed))
        # Times on a shared machine: a change must also show in the paired interval
        # (drift that happened to hit one side more cannot fake it there).
        if m in TIME_METRICS and row["verdict"] in ("faster", "slower") and row.get("n_pairs", 0) >= MIN_RUNS:
            lo, hi = row.get("paired_ci_low"), row.get("paired_ci_high")
            if lo is not None and hi is not None and lo <= 1 <= hi:
                row["warnings"] = row["warnings"] + [
                    f"unpaired interval says {row['verdict']} but the paired-by-round interval "
                    f"[{lo:.4f}, {hi:.4f}] contains 1: no change"]
                row["verdict"], row["improved"] = "no change", None
        comparisons.append(row)
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
    return {"summary": summary, "comparisons": comparisons, "io_bound": io}
