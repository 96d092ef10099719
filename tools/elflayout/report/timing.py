"""Timing plots: violin + scatter of per-run values, and history series.

The hybrid violin-scatter plot follows Flater (NIST TN 1855, 2014): the violin shows
the shape of the distribution (long tails, second modes), the dots show every run so a
small sample cannot pass for a smooth distribution, and the median with its confidence
interval is drawn on top. History series carry the one-step-ahead 95% prediction
interval of an exponential-smoothing model (Larres et al. 2013); points outside it are marked.
"""

from __future__ import annotations

import numpy as np

from elflayout import fileio
from elflayout.errors import ElflayoutError
from elflayout.measure import history
from elflayout import results as model
from elflayout.measure.history import MIN_POINTS, prediction_interval  # one ETS model for check and plot
from elflayout.report import data as D

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def _plt():
    from elflayout.report.access import _plt as plt

    return plt()


def violin_figure(res, metric: str = "wall_s", variants: list[str] | None = None,
                  states: list[str] | None = None, files: list[str] | None = None):
    """One panel per state, one violin+scatter per variant (each state on its own scale).
    ``res``: ``results.Results``, or a results document built in memory."""
    res = model.as_results(res)
    m = model.metric(metric)
    plt = _plt()
    label, scale, unit = m.label, m.scale, m.unit
    vnames = variants or D.variants(res)
    snames = states or D.states(res)
    if not vnames or not snames:
        raise ElflayoutError("results have no runs to plot")
    n = len(snames)
    fig, axes = plt.subplots(1, n, figsize=(max(3.6, 1.5 + 1.3 * len(vnames)) * n, 4.6), dpi=100, squeeze=False)
    rng = np.random.default_rng(0)  # jitter only; fixed so the image is reproducible
    any_disturbed = False
    for ax, state in zip(axes[0], snames):
        for i, v in enumerate(vnames):
            x = D.values(res, v, state, metric, files) * scale
            colour = PALETTE[i % len(PALETTE)]
            if x.size >= 2 and np.ptp(x) > 0:
                parts = ax.violinplot([x], positions=[i], widths=0.8, showextrema=False, showmedians=False)
                for body in parts["bodies"]:
                    body.set_facecolor(colour)
                    body.set_edgecolor(colour)
                    body.set_alpha(0.25)
            xd = D.values(res, v, state, metric, files, disturbed_runs=True) * scale
            if xd.size:  # shown, hollow, but not part of the violin or the median
                jd = rng.uniform(-0.12, 0.12, xd.size)
                ax.scatter(i + jd, xd, s=22, facecolor="none", edgecolor="#7f7f7f", lw=0.9, zorder=3,
                           label="disturbed run (left out)" if not any_disturbed else None)
                any_disturbed = True
            if x.size:
                jitter = rng.uniform(-0.12, 0.12, x.size)
                ax.scatter(i + jitter, x, s=16, color=colour, alpha=0.85, lw=0.3, edgecolor="white", zorder=3)
                med, lo, hi = _median_ci(res, v, state, metric, x, scale)
                ax.hlines(med, i - 0.3, i + 0.3, color="black", lw=1.6, zorder=4)
                if lo is not None and hi is not None and hi > lo:
                    ax.vlines(i + 0.34, lo, hi, color="black", lw=2.2, zorder=4)
        ticks = []
        for v in vnames:
            n_ok = D.values(res, v, state, metric, files).size
            n_bad = D.values(res, v, state, metric, files, disturbed_runs=True).size
            ticks.append(f"{v}\nn={n_ok}" + (f" (+{n_bad} disturbed)" if n_bad else ""))
        ax.set_xticks(range(len(vnames)), ticks)
        ax.set_xlim(-0.6, len(vnames) - 0.4)
        ax.set_title(f"{state}", fontsize=11, fontweight="bold")
        ax.set_ylabel(f"{label} ({unit})" if unit else label)
        ax.set_xlabel("variant")
        ax.grid(axis="y", color="#dddddd", lw=0.5)
        lo_, hi_ = ax.get_ylim()
        ax.set_ylim(min(0, lo_) if metric != "wall_s" else lo_, hi_)
    for ax in axes[0]:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best", frameon=False)
    fig.suptitle(f"{label} per run: violin = distribution, dots = runs, bar = median, "
                 f"stick = 95% CI of the median", fontsize=10, x=0.02, ha="left")
    fig.tight_layout()
    return fig


def _median_ci(res, variant, state, metric, x, scale):
    """Median and its CI: from the results' summary when it has them, else the sample median only."""
    row = D.summary_row(res, variant, state, metric)
    med = float(np.median(x))
    if row and isinstance(row.get("ci_low"), (int, float)) and isinstance(row.get("ci_high"), (int, float)):
        # The summary's CI may be of the mean or the median; prefer explicit median fields.
        lo = row.get("median_ci_low", row["ci_low"])
        hi = row.get("median_ci_high", row["ci_high"])
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
            return med, lo * scale, hi * scale
    return med, None, None


# ----------------------------------------------------------------------------------
# history



def prediction_band(values, alpha: float = 0.05, min_points: int = MIN_POINTS):
    """For each point i >= min_points, the (1-alpha) prediction interval of y[i] from an
    ETS(A,N,N) model fitted to y[:i] only: what `elflayout history check` would have
    said when that point was added. Index len(y) is the interval for the next point.

    Returns (mean, lower, upper), arrays of len(values) + 1 with NaN where there is too
    little history; None when the series is shorter than ``min_points``. A constant
    history has a zero-width interval (deterministic page counts: any change is news).
    """
    y = np.asarray(values, dtype=float)
    if y.size < min_points:
        return None
    mean, lower, upper = (np.full(y.size + 1, np.nan) for _ in range(3))
    for i in range(min_points, y.size + 1):
        mean[i], lower[i], upper[i] = prediction_interval(y[:i], alpha)
    return mean, lower, upper


def history_figure(series: list[dict], title: str | None = None):
    """series: [{"name", "values": [...], "labels": [...] (optional), "unit": "" (optional)}]."""
    plt = _plt()
    n = max(len(series), 1)
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.9 * n + 0.6), dpi=100, squeeze=False)
    for ax, s in zip(axes[:, 0], series):
        y = np.asarray(s.get("values") or [], dtype=float)
        x = np.arange(y.size)
        band = prediction_band(y)
        if band is not None:
            mean, lo, hi = band
            xx = np.arange(y.size + 1)
            ax.fill_between(xx, lo, hi, color="#9ecae1", alpha=0.5, lw=0,
                            label="95% prediction interval from the points before")
            ax.plot(xx, mean, color="#3182bd", lw=1, label="ETS forecast")
            with np.errstate(invalid="ignore"):
                out = (y < lo[:-1]) | (y > hi[:-1])
            if out.any():
                ax.scatter(x[out], y[out], s=60, facecolor="none", edgecolor="#d62728", lw=1.5, zorder=4,
                           label="outside the interval")
        ax.plot(x, y, marker="o", ms=4, color="#252525", lw=0.8, zorder=3, label="measured")
        labels = s.get("labels")
        if labels and len(labels) == y.size and y.size <= 30:
            ax.set_xticks(x, [str(v) for v in labels], rotation=30, ha="right", fontsize=7)
        ax.set_xlabel("entry in history")
        unit = s.get("unit") or ""
        ax.set_ylabel(f"{s.get('name', 'value')}" + (f" ({unit})" if unit else ""))
        ax.set_title(s.get("title") or s.get("name") or "", fontsize=10, loc="left")
        ax.grid(color="#eeeeee", lw=0.5)
        ax.legend(fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=4, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def load_history(path, variants=None, states=None, metric: str | None = None) -> list[dict]:
    """Series from a history source: the database of `elflayout history` (an SQLite file
    or a postgresql:// URL; one series per variant × state of ``metric``, default wall_s)
    or a JSON file ``{"series": [{"name", "values", "labels"?, "unit"?}]}`` (also a bare
    list of such objects, or a bare list of numbers)."""
    import json
    from pathlib import Path

    if history.is_url(path):
        return _history_from_db(path, variants, states, metric or "wall_s")
    p = Path(path)
    head = fileio.read_input(p, "a history database or JSON series")[:16]
    if head.startswith(b"SQLite format 3"):
        return _history_from_db(p, variants, states, metric or "wall_s")
    try:
        doc = json.loads(p.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ElflayoutError(f"{p}: not a history database or JSON series ({e})") from None
    if isinstance(doc, dict):
        doc = doc.get("series")
    if isinstance(doc, list) and doc and all(isinstance(v, (int, float)) for v in doc):
        doc = [{"name": p.stem, "values": doc}]
    if not isinstance(doc, list) or not all(isinstance(s, dict) and isinstance(s.get("values"), list) for s in doc):
        raise ElflayoutError(f"{p}: expected {{\"series\": [{{\"name\", \"values\": [...]}}]}}")
    for s in doc:
        if not all(isinstance(v, (int, float)) for v in s["values"]):
            raise ElflayoutError(f"{p}: series {s.get('name')!r} has non-numeric values")
    return doc


def _history_from_db(p, variants, states, metric) -> list[dict]:
    """Series of `elflayout history` (elflayout.measure.history): the mean of each session."""
    m = model.metric(metric)
    label, scale, unit = m.label, m.scale, m.unit
    con = history.connect(p, readonly=True)
    out = []
    try:
        for v, s in history.series_keys(con, metric):
            if (variants and v not in variants) or (states and s not in states):
                continue
            rows = [(t, m) for _, t, m in history.series(con, v, s, metric) if isinstance(m, (int, float))]
            out.append({"name": label, "title": f"{v} · {s} · {label} (mean of each session)", "unit": unit,
                        "values": [m * scale for _, m in rows], "labels": [str(t)[:16] for t, _ in rows]})
    finally:
        con.close()
    if not out:
        raise ElflayoutError(f"{history.redact(p)}: no history for metric {metric}"
                             + (" and the chosen variants/states" if variants or states else ""))
    return out
