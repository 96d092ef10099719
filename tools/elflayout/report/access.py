"""Access-pattern plots: where in a file the bytes were read, and when.

Modelled on the libxul graphs of Mike Hommey, "Reducing Firefox startup I/O in
libxul.so" (2011): x = time since exec, y = offset in the
file, the ELF sections as coloured bands, pages read as dots, thin lines joining
consecutive reads so that seeks show as long strokes. A narrow margin beside each panel
shows pages read (and touched) per slice of the file, so "where the bytes go" can be
seen without reading a table. Variants are drawn side by side with identical axes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from elflayout.errors import ElflayoutError
from elflayout.errors import require
from elflayout import results as model
from elflayout.report import data as D

MB = 1e6
READ_COLOUR = "#1a1a1a"
SEEK_COLOUR = "#d62728"
FAULT_COLOUR = "#e6550d"
LABEL_FONTSIZE = 9


def _plt():
    matplotlib = require("matplotlib")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    # SVG text stays text (searchable, testable, smaller) instead of glyph paths.
    matplotlib.rcParams["svg.fonttype"] = "none"

    return plt


@dataclass
class Panel:
    title: str
    acc: D.Access
    bands: list  # D.Band of this panel's file (builds of a before/after differ)
    path: str = ""
    variant: str = ""
    size: int | None = None


def _raster(n: int) -> bool:
    # Thousands of markers make a 16 MB SVG; draw them as an embedded image there (text,
    # axes and bands stay vector). No effect on PNG.
    return n > 2000


def _draw_bands(ax, bands, horizontal=True):
    for b in bands:
        ax.axhspan(b.start / MB, b.end / MB, color=b.colour, alpha=0.18, lw=0, zorder=0)
        # Hairline at each band's start so neighbouring bands of similar tone separate.
        ax.axhline(b.start / MB, color=b.colour, lw=0.4, alpha=0.6, zorder=0)


def _spread(ys: list[float], gap: float, lo: float, hi: float) -> list[float]:
    """Label positions as close as possible (least squares) to the sorted anchors ``ys``
    while at least ``gap`` apart and within [lo, hi].

    With z_i = y_i - i*gap the spacing constraint becomes "z non-decreasing", so the
    answer is an isotonic regression (pool adjacent violators) clipped to the bounds.
    """
    n = len(ys)
    if n == 0:
        return []
    if (n - 1) * gap > hi - lo:  # too many labels for the height: spread evenly
        step = (hi - lo) / max(n - 1, 1)
        return [lo + i * step for i in range(n)]
    target = [y - i * gap for i, y in enumerate(ys)]
    blocks: list[list[float]] = []  # [mean, weight]
    for t in target:
        blocks.append([t, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2 = blocks.pop()
            m1, w1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    z = [m for m, w in blocks for _ in range(int(w))]
    zmax = hi - (n - 1) * gap
    return [min(max(v, lo), zmax) + i * gap for i, v in enumerate(z)]


def _label_bands(fig, ax, bands, ylim, height_in):
    """Names of the bands to the right of ``ax``, spread so none overlap, with leaders."""
    if not bands:
        return []
    lo, hi = ylim
    span = hi - lo
    # One text line ≈ fontsize × 1.35 points; convert to data units of this axes.
    gap = (LABEL_FONTSIZE * 1.35 / 72) / max(height_in, 0.1) * span
    # A sliver of an unclassified section (.note.gnu.build-id) is not worth a label.
    bands = [b for b in bands if b.family not in ("other", "not loaded") or (b.end - b.start) / MB >= 0.01 * span]
    if not bands:
        return []
    centres = [((b.start + b.end) / 2 / MB) for b in bands]
    order = np.argsort(centres)
    ys = _spread([centres[i] for i in order], gap, lo + gap / 2, hi - gap / 2)
    texts = []
    for y, i in zip(ys, order):
        b = bands[i]
        t = ax.annotate(
            b.label, xy=(1.0, centres[i]), xycoords=("axes fraction", "data"),
            xytext=(1.12, y), textcoords=("axes fraction", "data"),
            va="center", ha="left", fontsize=LABEL_FONTSIZE, color=b.colour, fontweight="bold",
            annotation_clip=False,
            arrowprops=dict(arrowstyle="-", color=b.colour, lw=0.8, shrinkA=0, shrinkB=0),
        )
        texts.append(t)
    return texts


def _margin(ax, read_pages, touched_pages, ylim, bin_pages: int) -> None:
    """Horizontal bars: share of each slice of ``bin_pages`` pages that was read / touched.

    Shares rather than counts, so a full bar means "all of this part of the file was
    read" whatever the file's size.
    """
    top = int(np.ceil(ylim[1] * MB / D.PAGE))
    edges = np.arange(0, top + bin_pages, bin_pages)
    r, _ = np.histogram(read_pages, bins=edges)
    t, _ = np.histogram(touched_pages, bins=edges)
    y = edges[:-1] * D.PAGE / MB
    h = bin_pages * D.PAGE / MB
    ax.barh(y, r / bin_pages, height=h, align="edge", color="#525252", alpha=0.75, lw=0, label="read")
    ax.barh(y, t / bin_pages, height=h, align="edge", color=FAULT_COLOUR, alpha=0.9, lw=0, label="touched")
    ax.set_xlim(0, 1.02)
    ax.set_xticks([1.0], ["100%"])


def _xs(a: D.Access, x: str):
    """x of reads and of faults: ms since exec, or the ordinal of the read (faults placed
    at the read that follows them), which spreads a burst of reads evenly."""
    if x == "sequence":
        return np.arange(a.t.size, dtype=float), np.searchsorted(a.t, a.ft).astype(float)
    return a.t * 1e3, a.ft * 1e3


def access_figure(panels: list[Panel], title: str | None = None, x: str = "time"):
    """One figure: a panel (plus a margin histogram) per variant, identical axes.

    When the panels show different files (two builds), each gets its own band labels;
    when they show one file, the labels are drawn once, at the right.

    Returns the matplotlib Figure (the caller saves it).
    """
    plt = _plt()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    n = max(len(panels), 1)
    height = 6.4
    same = len({tuple((b.start, b.end, b.label) for b in p.bands) for p in panels}) <= 1
    # Widths in inches: plot, margin, then room for the band labels (sized to the longest).
    longest = max([len(b.label) for p in panels for b in p.bands] + [4])
    label_in = 0.45 + 0.085 * longest
    widths = []
    for i in range(n):
        widths += [4.2, 0.85, label_in if (not same or i == n - 1) else 0.35]
    total = sum(widths) + 0.8
    fig = plt.figure(figsize=(total, height), dpi=100)
    gs = fig.add_gridspec(1, 3 * n, width_ratios=widths, wspace=0.02, left=0.7 / total, right=0.99,
                          top=0.84, bottom=0.2)

    ylim, xlim, bin_pages = _access_limits(panels, x)
    xlabel = "time since exec (ms)" if x == "time" else "read number (reads in order)"

    axes, margins = [], []
    for i, p in enumerate(panels):
        ax = fig.add_subplot(gs[0, 3 * i], sharey=axes[0] if axes else None)
        mx = fig.add_subplot(gs[0, 3 * i + 1], sharey=ax)
        axes.append(ax)
        margins.append(mx)
        _draw_bands(ax, p.bands)
        _draw_bands(mx, p.bands)
        _draw_access_panel(ax, mx, p, i, x, xlim, ylim, xlabel, bin_pages)
    if margins:
        h_in = axes[0].get_position().height * height
        for p, mx in zip(panels, margins):
            if not same or mx is margins[-1]:
                _label_bands(fig, mx, p.bands, ylim, h_in)
    handles = [
        Line2D([], [], marker="o", ls="-", lw=0.6, color=READ_COLOUR, mfc=READ_COLOUR, markersize=4,
               label="pages read (dot size ∝ folio pages); line to next read"),
        Line2D([], [], marker="x", ls="", color=FAULT_COLOUR, markersize=5, label="page faults (touches)"),
        Patch(color="#525252", alpha=0.75, label="margin: share of slice read"),
        Patch(color=FAULT_COLOUR, alpha=0.9, label="margin: share touched"),
    ]
    x0 = 0.7 / total
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(x0, 0.955), ncol=4, fontsize=8.5,
               frameon=False)
    if title:
        fig.suptitle(title, x=x0, y=0.995, ha="left", va="top", fontsize=12)
    return fig


def _access_limits(panels: list[Panel], x: str) -> tuple[tuple, tuple, int]:
    """Shared axes of every panel: y (file offset, MB) and x limits, and the margin's slice in pages."""
    # The mapped part of the file (and anything read beyond it), not its debug sections.
    ymax = max([D.mapped_end(p.bands) for p in panels] + [0]) / MB
    if not ymax and not any(p.acc.page.size or p.acc.fpage.size for p in panels):
        ymax = max([p.size or 0 for p in panels]) / MB
    for p in panels:
        if p.acc.page.size:
            ymax = max(ymax, float((p.acc.page + p.acc.npages).max()) * D.PAGE / MB)
        if p.acc.fpage.size:
            ymax = max(ymax, float(p.acc.fpage.max() + 1) * D.PAGE / MB)
    ymax = ymax or 1.0
    xmax = 1.0
    for p in panels:
        xr, xf = _xs(p.acc, x)
        xmax = max([xmax] + [float(v.max()) for v in (xr, xf) if v.size])
    return (0.0, ymax * 1.01), (0.0, xmax * 1.03), max(1, int(round(ymax * MB / D.PAGE / 120)))


def _draw_access_panel(ax, mx, p: Panel, i: int, x: str, xlim, ylim, xlabel: str, bin_pages: int) -> None:
    """Reads, faults and the margin histogram of panel ``i``."""
    a = p.acc
    xr, xf = _xs(a, x)
    if a.t.size:
        ax.plot(xr, (a.page + a.npages / 2) * D.PAGE / MB, color=SEEK_COLOUR, lw=0.5, alpha=0.45,
                zorder=2, rasterized=_raster(a.t.size))
        ax.scatter(xr, (a.page + a.npages / 2) * D.PAGE / MB, s=3 + 2.0 * np.sqrt(a.npages),
                   color=READ_COLOUR, lw=0, alpha=0.8, zorder=3, rasterized=_raster(a.t.size))
    if a.ft.size:
        # Under the reads: a touch that also read shows as a dot; a touch without a
        # read (the page was already cached) stays visible as a bare cross.
        ax.scatter(xf, (a.fpage + 0.5) * D.PAGE / MB, s=14, marker="x", color=FAULT_COLOUR,
                   lw=0.7, alpha=0.9, zorder=2.5, rasterized=_raster(a.ft.size))
    _margin(mx, a.read_pages(), np.unique(a.fpage), ylim, bin_pages)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_xlabel(xlabel)
    if i == 0:
        ax.set_ylabel("file offset (MB)")
    else:
        ax.tick_params(labelleft=False)
    mx.tick_params(labelleft=False, left=False, labelsize=7)
    mx.set_xlabel(f"share read\nper {bin_pages:,}-page\nslice", fontsize=8)
    ax.set_title(p.title, fontsize=11, fontweight="bold", loc="left")
    ax.text(0.0, -0.13, "\n".join(_wrap(D.caption(a), 62)), transform=ax.transAxes, va="top", ha="left",
            fontsize=8.5)
    ax.grid(axis="x", color="#dddddd", lw=0.5)


def sections_figure(panels: list[Panel], title: str | None = None):
    """Where the bytes go, in one glance: per variant, a bar of the pages read split by
    section family (coloured like the bands), with the pages touched drawn inside."""
    plt = _plt()
    from matplotlib.patches import Patch

    fams = [f for f, _, _ in D.FAMILIES] + [D.OTHER[0]]
    colour = {f: c for f, _, c in D.FAMILIES}
    colour[D.OTHER[0]] = D.OTHER[2]
    reads = [D.family_pages(p.bands, p.acc.read_pages()) for p in panels]
    touched = [D.family_pages(p.bands, p.acc.fpage) for p in panels]
    used = [f for f in fams if any(r.get(f) for r in reads)]
    n = len(panels)
    fig, ax = plt.subplots(figsize=(10.5, 0.75 * n + 1.7), dpi=100)
    total_max = max([sum(r.values()) for r in reads] + [1])
    for i, (p, r, t) in enumerate(zip(panels, reads, touched)):
        y = n - 1 - i
        left = 0
        for f in used:
            w = r.get(f, 0)
            if not w:
                continue
            ax.barh(y, w, left=left, height=0.62, color=colour[f], alpha=0.85, edgecolor="white", lw=0.8)
            tw = min(t.get(f, 0), w)
            if tw:  # touched share of the same family, as a dark inner bar
                ax.barh(y - 0.2, tw, left=left, height=0.16, color="#1a1a1a", alpha=0.8, lw=0)
            if w / total_max > 0.06:
                ax.text(left + w / 2, y + 0.07, f"{w:,}", ha="center", va="center", fontsize=8, color="white",
                        fontweight="bold")
            left += w
        ax.text(left + total_max * 0.01, y, f"{left:,} pages ({left * D.PAGE / 1e6:,.1f} MB)", va="center",
                fontsize=9)
    ax.set_yticks(range(n), [p.variant or p.title.split(" · ")[0] for p in reversed(panels)], fontsize=10)
    ax.set_xlim(0, total_max * 1.22)
    ax.set_xlabel("pages read, by section family (dark inner bar: pages touched)")
    ax.spines[["top", "right"]].set_visible(False)
    handles = [Patch(color=colour[f], alpha=0.85, label=f) for f in used]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(handles), 5),
              fontsize=8.5, frameon=False)
    if title:
        fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    fig.tight_layout()
    return fig


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width) or [""]


def results_panels(res, plan: dict[str, str], state: str | None = None,
                   run: int | None = None) -> tuple[list[Panel], str]:
    """A panel per variant of ``plan`` ({variant: file}): the median-pages run unless ``run``.
    ``res``: ``results.Results``, or a results document built in memory."""
    res = model.as_results(res)
    state = state or D.default_state(res, plan)
    if state not in D.states(res):
        raise ElflayoutError(f"--state {state}: not in the results (states: {', '.join(map(str, D.states(res)))})")
    panels = []
    for v, path in plan.items():
        got = D.pick_run(res, v, state, path, run)
        if got is None:
            continue
        k, r = got
        title = f"{v} · {state} · run {k}" + (" (disturbed)" if D.disturbed(r, path) else "")
        acc = D.access_of(r, path)
        if "elflayout-preload" in D.command_of(res, v):
            # a preload plan's reads all come before the program's first fault of the file
            before = acc.npages[acc.t < (acc.ft.min() if len(acc.ft) else np.inf)].sum()
            title += f"\npreload: {int(before):,} pages read before the first fault"
        if len(set(plan.values())) > 1:
            title += f"\n{_short(path)}"
        panels.append(Panel(title, acc, D.bands(D.sections_of(res, path)), path, v,
                            (res.files.get(path) or {}).get("size")))
    if not panels:
        raise ElflayoutError(f"no runs of state {state!r} for the chosen variants")
    return panels, state


def _short(path: str, keep: int = 46) -> str:
    return path if len(path) <= keep else "…" + path[-(keep - 1):]


def check_variants(res, variants: list[str] | None) -> list[str]:
    names = D.variants(res)
    for v in variants or []:
        if v not in names:
            raise ElflayoutError(f"--variant {v}: not in the results (variants: {', '.join(names)})")
    return list(variants) if variants else names


def results_figure(res, plan: dict[str, str], state=None, run=None, x: str = "time"):
    panels, state = results_panels(res, plan, state, run)
    paths = sorted(set(plan.values()))
    if len(paths) == 1:
        title = f"Access pattern of {paths[0]}"
    else:
        title = "Access pattern of " + " vs ".join(sorted({os.path.basename(p) for p in paths}))
    return access_figure(panels, title=title, x=x)


# ----------------------------------------------------------------------------------
# profiles

PROFILE_KINDS = {  # kind -> (label, colour, marker)
    "x": ("executed", "#377eb8", "o"),
    "r": ("read", "#4daf4a", "o"),
    "w": ("written", "#e41a1c", "o"),
    "t": ("touched (fault)", "#e6550d", "x"),
}


def profile_sections(target, warnings: list | None = None) -> list[dict]:
    """ELF sections of a profile target (``profile.model.Target``): from the target
    record, the file, or its functions. What could not be used is appended to
    ``warnings``."""
    secs = D.file_sections(target.extra.get("elf_sections") or [])
    if secs:
        return secs
    path = target.path
    if os.path.isfile(path):
        if target.size not in (None, os.path.getsize(path)):
            if warnings is not None:
                warnings.append(f"{path} changed since it was profiled: section bands from the profile's functions")
        else:
            from elflayout.errors import ElflayoutError

            try:
                return D.sections_from_elf(path)
            except ElflayoutError as e:  # a damaged file: no bands from it, and say so
                if warnings is not None:
                    warnings.append(f"section bands: {e}")
    # Last resort: extents of the output sections named by the functions.
    ext: dict[str, list[int]] = {}
    for f in target.functions:
        if f.section and f.offset is not None:
            e = ext.setdefault(f.section, [f.offset, f.offset + f.size])
            e[0], e[1] = min(e[0], f.offset), max(e[1], f.offset + f.size)
    return [{"name": k, "offset": v[0], "size": v[1] - v[0]} for k, v in ext.items()]


def profile_figure(target, x: str = "sequence", title: str | None = None):
    """First-touch order over the file: x = order of first touch (or time), y = offset."""
    plt = _plt()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    pages = target.pages
    reads = target.reads
    warnings: list[str] = []
    bands = D.bands(profile_sections(target, warnings))
    size = int(target.size or 0)
    pg = np.array([p.page for p in pages], dtype=np.int64)
    first = np.array([p.first for p in pages], dtype=float)
    tt = np.array([np.nan if p.t is None else p.t for p in pages], dtype=float)
    kind = np.array([p.kind for p in pages])
    use_t = x == "time" and pages and not np.isnan(tt).all()
    xs = tt * 1e3 if use_t else first
    xlabel = "time as recorded by the profiler (ms)" if use_t else "first-access sequence number"

    height = 6.4
    fig = plt.figure(figsize=(8.6, height), dpi=100)
    gs = fig.add_gridspec(1, 3, width_ratios=[5, 1.1, 1.9], wspace=0.0, left=0.09, right=0.99, top=0.84, bottom=0.2)
    ax = fig.add_subplot(gs[0, 0])
    mx = fig.add_subplot(gs[0, 1], sharey=ax)
    # The mapped part (and any page touched beyond it), not the debug sections after it.
    last = max([int(pg.max()) + 1 if pg.size else 0] + [r.page + r.npages for r in reads])
    ymax = max(D.mapped_end(bands), last * D.PAGE) / MB or size / MB or 1.0
    ylim = (0.0, ymax * 1.01)
    _draw_bands(ax, bands)
    _draw_bands(mx, bands)
    if reads:
        rp = np.array([r.page for r in reads], dtype=np.int64)
        rn = np.array([r.npages for r in reads], dtype=np.int64)
        rf = np.array([r.first for r in reads], dtype=float)
        rt = np.array([np.nan if r.t is None else r.t for r in reads], dtype=float)
        rx = rt * 1e3 if use_t else rf
        ax.scatter(rx, (rp + rn / 2) * D.PAGE / MB, s=10 + 4 * np.sqrt(rn), color="#9e9e9e", lw=0, alpha=0.5,
                   zorder=2, label="read", rasterized=_raster(rp.size))
    handles = []
    for k, (label, colour, marker) in PROFILE_KINDS.items():
        m = kind == k
        if m.any():
            ax.scatter(xs[m], (pg[m] + 0.5) * D.PAGE / MB, s=6 if marker == "o" else 8, marker=marker, color=colour,
                       lw=0 if marker == "o" else 0.5, alpha=0.85, zorder=3, rasterized=_raster(int(m.sum())))
            handles.append(Line2D([], [], marker=marker, ls="", color=colour, markersize=5,
                                  label=f"{label}: {int(m.sum()):,} pages"))
    if reads:
        handles.append(Line2D([], [], marker="o", ls="", color="#9e9e9e", markersize=5, label="read from disk"))
    # Margin: touched vs untouched pages per slice of the file.
    _touched_margin(mx, pg, ymax, ylim)
    handles += [Patch(color="#3f007d", label="margin: touched share of slice"),
                Patch(color="#d9d9d9", label="untouched")]
    ax.set_ylim(*ylim)
    if xs.size:
        ax.set_xlim(float(np.nanmin(xs)) - 0.5, float(np.nanmax(xs)) * 1.02 + 0.5)
    # Phase boundaries (loader → static constructors → main) where the profile has them.
    phase_text = _draw_phases(ax, xs, pages, use_t)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("file offset (MB)")
    ax.grid(axis="x", color="#dddddd", lw=0.5)
    ax.text(0.0, -0.13, _profile_caption(target, pg, size, phase_text, warnings), transform=ax.transAxes,
            va="top", ha="left", fontsize=8.5)
    _label_bands(fig, mx, bands, ylim, ax.get_position().height * height)
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.09, 0.955), ncol=2, fontsize=8, frameon=False)
    fig.suptitle(title or f"First-access order in {target.path}", x=0.09, y=0.995, ha="left", va="top",
                 fontsize=12)
    return fig


def _touched_margin(mx, pg: np.ndarray, ymax: float, ylim: tuple) -> None:
    """The margin histogram of a profile figure: touched share of each slice of the file."""
    bin_pages = max(1, int(round(ymax * MB / D.PAGE / 120)))
    edges = np.arange(0, int(np.ceil(ylim[1] * MB / D.PAGE)) + bin_pages, bin_pages)
    touched, _ = np.histogram(np.unique(pg), bins=edges)
    y, h = edges[:-1] * D.PAGE / MB, bin_pages * D.PAGE / MB
    mx.barh(y, np.full(touched.shape, 1.0), height=h, align="edge", color="#d9d9d9", lw=0)
    mx.barh(y, touched / bin_pages, height=h, align="edge", color="#3f007d", lw=0)
    mx.set_xlim(0, 1.02)
    mx.set_xticks([1.0], ["100%"])
    mx.tick_params(labelleft=False, left=False, labelsize=7)
    mx.set_xlabel(f"share touched\nper {bin_pages:,}-page\nslice", fontsize=8)


def _draw_phases(ax, xs: np.ndarray, pages, use_t: bool) -> str:
    """Dashed lines at the phase boundaries (loader → static constructors → main) where the
    profile has them; returns their caption text ("" when there is at most one phase)."""
    phases = {}
    for x_, p in zip(xs, pages):
        ph = p.phase
        if ph and np.isfinite(x_) and (ph not in phases or x_ < phases[ph]):
            phases[ph] = float(x_)
    if len(phases) <= 1:
        return ""
    # Boundaries are often a few events apart: lines on the plot, names in the caption.
    order = sorted(phases.items(), key=lambda kv: kv[1])
    for ph, x0 in order[1:]:
        ax.axvline(x0, color="#555555", lw=0.7, ls="--", zorder=1)
    unit = " ms" if use_t else ""
    return "phases (dashed lines): " + ", ".join(f"{ph} from {x0:,.0f}{unit}" for ph, x0 in order)


def _profile_caption(target, pg: np.ndarray, size: int, phase_text: str, warnings: list[str]) -> str:
    """Caption under a profile figure: pages touched and read, functions, phases, warnings."""
    total = (size + D.PAGE - 1) // D.PAGE if size else None
    cap_text = f"{np.unique(pg).size:,} pages touched"
    if total:
        cap_text += f" of {total:,} in the file ({np.unique(pg).size / total:.1%})"
    nf = len(target.functions)
    if nf:
        cap_text += f"; {nf:,} functions"
    if target.reads:
        cap_text += f"; {sum(r.npages for r in target.reads):,} pages read"
    if phase_text:
        cap_text += "\n" + phase_text
    for w in warnings:
        cap_text += "\nwarning: " + w
    return cap_text


def save(fig, out, fmt: str | None = None, dpi: int = 110) -> None:
    """Save a figure to a path or binary file object, then free it."""
    plt = _plt()
    try:
        # 'tight' keeps band labels that stick out to the right inside the image.
        fig.savefig(out, format=fmt, dpi=dpi, bbox_inches="tight", pad_inches=0.15)
    finally:
        plt.close(fig)
