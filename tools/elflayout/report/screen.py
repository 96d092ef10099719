"""Plots of a screen result (``elflayout screen``): block plots and violin-scatter plots.

The block plot and the violin-scatter plot follow Flater (NIST TN 1855, 2014); the
design, the fit and the file format are ``measure.screen`` and ``measure.screen_model``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from elflayout.measure import stats
from elflayout.measure.screen_model import Factor, point_name  # noqa: F401 - point_name: the report's design table
from elflayout.report import data as D
from elflayout.report import timing


def block_figure(runs: list[dict], factors: list[Factor], x: np.ndarray, metric: str, state: str):
    """Flater's block plot: per factor, each block (a combination of the other factors)
    gets a bar from the mean response at LOW ('1') to the mean at HIGH ('2')."""
    plt = timing._plt()
    k = len(factors)
    fig, axes = plt.subplots(1, k, figsize=(max(4.0, 1.2 + 0.55 * 2 ** (k - 1)) * k, 4.2), dpi=100, squeeze=False)
    mean = {}
    for p in range(len(x)):
        v = [stats.run_value(r, metric) for r in runs if r["point"] == p and r["state"] == state
             and stats.run_value(r, metric) is not None and not r.get("interference")]
        mean[p] = float(np.mean(v)) if v else np.nan
    scale = 1000.0 if metric.endswith("_s") else 1.0
    for fi, (ax, f) in enumerate(zip(axes[0], factors)):
        others = [i for i in range(k) if i != fi]
        blocks = {}
        for p in range(len(x)):
            blocks.setdefault(tuple(x[p, others]), {})[x[p, fi]] = mean[p] * scale
        labels, up = [], 0
        for bi, (key, lv) in enumerate(sorted(blocks.items())):
            lo, hi = lv.get(-1), lv.get(1)
            if lo is not None and hi is not None:
                ax.vlines(bi, min(lo, hi), max(lo, hi), color="#555555", lw=6, alpha=0.35)
                up += hi > lo
            for val, ch, col in ((lo, "1", "#1f77b4"), (hi, "2", "#d62728")):
                if val is not None:
                    ax.text(bi, val, ch, ha="center", va="center", color=col, fontsize=10, fontweight="bold")
            labels.append("\n".join(f"{factors[i].name[:6]}={factors[i].high if c > 0 else factors[i].low}"[:14]
                                    for i, c in zip(others, key)))
        nb = sum(1 for lv in blocks.values() if len(lv) == 2)
        ax.set_xticks(range(len(blocks)), labels, fontsize=6)
        ax.set_xlim(-0.7, len(blocks) - 0.3)
        ax.set_title(f"{f.name}: 1 = {f.low}, 2 = {f.high}\nhigher at 2 in {up} of {nb} blocks", fontsize=9)
        ax.set_ylabel(f"mean {metric} ({'ms' if scale == 1000 else ''}), {state}")
        ax.grid(axis="y", color="#eeeeee", lw=0.5)
        lows = [v for lv in blocks.values() for v in lv.values() if np.isfinite(v)]
        if lows:
            pad = (max(lows) - min(lows)) * 0.1 or abs(max(lows)) * 0.05 or 1
            ax.set_ylim(min(lows) - pad, max(lows) + pad)
    fig.tight_layout()
    return fig


def as_results(runs: list[dict], x: np.ndarray, factors: list[Factor]) -> dict:
    """The runs as one results-like document whose variants are the design points (for
    the violin-scatter plot of elflayout.report.timing)."""
    variants = []
    for p in range(len(x)):
        lv = ",".join(f"{f.name}={f.high if c > 0 else f.low}" for f, c in zip(factors, x[p]))
        variants.append({"name": point_name(p), "command": lv})
    return {"format": "elflayout-results", "version": 1, "metadata": {}, "variants": variants,
            "runs": [{**r, "variant": point_name(r["point"])} for r in runs], "summary": []}


def plots(result: dict):
    """(stem, figure, caption) of the block plots (full designs) and violin-scatter plots."""
    x = np.array(result["design"]["matrix"], dtype=int)
    factors = [Factor(f["name"], f["low"], f["high"]) for f in result["factors"]]
    runs = result["runs"]
    fitted = [a for a in result["effects"] if a["effects"]]  # a response with no spread has nothing to show
    for a in fitted:
        m, s = a["metric"], a["state"]
        if result["design"]["kind"] == "full":
            yield (f"block-{m}-{s}", block_figure(runs, factors, x, m, s),
                   f"Block plot of {m}, {s} (Flater 2014): each block is one combination of the other factors; "
                   f"1 and 2 mark the mean at the factor's LOW and HIGH level.")
    for m in dict.fromkeys(a["metric"] for a in fitted):
        if m not in D.METRICS:  # a derived metric (cpu_s): the block plots and effects show it
            continue
        yield (f"violin-{m}", timing.violin_figure(as_results(runs, x, factors), metric=m,
                                                   states=result["metadata"]["states"]),
               f"Violin-scatter of {m}: every run per design point.")


def figures(result: dict, out_dir) -> list:
    """The plots written as PNG into ``out_dir``; their paths."""
    plt = timing._plt()
    paths = []
    for stem, fig, _ in plots(result):
        p = Path(out_dir) / f"{stem}.png"
        fig.savefig(p)
        plt.close(fig)
        paths.append(p)
    return paths
