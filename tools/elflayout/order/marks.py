"""Readahead marks left cold: first-access hot code kept off the folio an asynchronous
readahead window is marked on, when touching it would read a window of cold code.

Why: the kernel marks the first folio of every asynchronous readahead window it reads
(PG_readahead; ``page_cache_async_ra`` sets ``async_size = size``), and a fault on a marked
folio reads the next window, ``read_ahead_kb`` on. First-access puts the hot code right
after the read-only segment, inside the windows the loader's reads start from the file's
start (ld.so's ``read()`` of the header marks a page whose fault, after the read-around
of the relocation tables, reads the next window). When the hot code runs onto the mark of
such a window and ends early in the next one, that next window is read for a few pages of
hot code (libzstd built with ``-g``: 32 pages). Cold code on the marked folio stops the
chain; the hot code past it is read by the window already read, or by the forward read of
an executable mapping's fault (``readahead.py``), which marks nothing.

Steps (``search``):
1. The readahead model replays the profile on the first-access virtual layout of the
   profiled library (``heldout.ordered_layout``), with the unloaded sections at each place
   ``tuck`` can put them.
2. The first marked folio a touch of hot code reads from becomes a gap: the folio's pages
   widened by ``SLACK`` pages each side (the link's ``.text`` starts a little off the
   profiled library's) that no hot function may overlap; kept only if the model then
   predicts fewer pages; repeated up to ``MAX_GAPS`` times.
3. The place and gaps of the fewest pages (``tuck.choose``) win.
In the link (``fill``), cold code sections, in link order, fill each gap: they are listed
in the ordering file before the first hot function past it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from elflayout.elfcore import PAGE, ElfImage
from elflayout.order.defaults import Step

SLACK = 2
MAX_GAPS = 4


def _gap(trig: list, p: dict | None, hot_pages: set, gaps: list) -> tuple[int, int] | None:
    """The first trigger (``readahead.simulate``'s) by a touch of hot code not yet in a
    gap, as a gap in the profiled library's file offsets; ``p``: the tuck plan simulated."""
    for f0, n, kind in trig:
        if kind != "x":
            continue
        if p is not None and f0 * PAGE >= p["hole"] + p["delta"]:
            f0 -= p["delta"] // PAGE
        if not hot_pages & set(range(f0, f0 + n)):
            continue
        lo, hi = max(0, f0 - SLACK) * PAGE, (f0 + n + SLACK) * PAGE
        if not any(a <= lo and hi <= b for a, b in gaps):
            return lo, hi
    return None


def search(path, target, read_ahead_kb: int, move: bool | None, universe=None) -> dict:
    """The first-access layout of ``target`` (a profile of the library PATH) with gaps
    (see Steps): {"pages", "place", "gaps": [(lo, hi)], "layout", "plain": pages without
    gaps, "start": where the hot code starts without gaps}. ``move``: as ``tuck.choose``;
    ``universe``: the profiled build's map, as ``defaults.predict_algorithms`` takes it."""
    from elflayout.order import heldout, tuck
    from elflayout.order.placement import code_outside_functions
    from elflayout.order.readahead import simulate
    from elflayout.order.simulation import touches_relocations

    with ElfImage(path) as img, tuck.copies(path) as cs:
        base = heldout.functions_of(img)
        outside = code_outside_functions(target, img, base)
        code = heldout.code_sections(outside, universe, base)
        base = heldout.with_code(base, code)

        def run(im, p, gaps, trig=None):
            lay = heldout.ordered_layout(img, base, target, code=code, gaps=gaps)
            pg, kd = heldout.touches(target, lay, outside, code, bodies=True)
            loader = not touches_relocations(img, pg)
            pg = pg if p is None else tuck.moved_pages(im, p, pg, kd)
            return simulate(im, pg, kd, read_ahead_kb, loader, triggers=trig)["pages"], lay

        plain, found, start = {}, {}, None
        for a, (im, p) in cs.items():
            gaps, trig = [], []
            n, lay = run(im, p, gaps, trig)
            plain[a] = n
            start = int(lay.new[lay.hot].min()) if lay.hot.any() else 0
            for _ in range(MAX_GAPS):
                hot = set(np.unique(lay.new[lay.hot] // PAGE).tolist())
                g = _gap(trig, p, hot, gaps)
                if g is None:
                    break
                trig2 = []
                n2, lay2 = run(im, p, sorted(gaps + [g]), trig2)
                if n2 >= n:
                    break
                gaps, n, lay, trig = sorted(gaps + [g]), n2, lay2, trig2
            found[a] = (n, gaps, lay)
    best = tuck.choose({a: f[0] for a, f in found.items()}, move)
    return {"pages": found[best][0], "place": best, "gaps": found[best][1], "layout": found[best][2],
            "plain": plain[tuck.choose(plain, move)], "start": start}


def _fill_points(lay, gaps: list, start: int) -> list[tuple[list[int], int]]:
    """For each gap: (the hot functions placed past it, in layout order; bytes from the
    end of the hot code before it, or the hot code's ``start``, to the gap's end), in the
    virtual layout ``lay``."""
    hot = np.flatnonzero(lay.hot)
    hot = hot[np.argsort(lay.new[hot], kind="stable")]
    out = []
    for lo, hi in gaps:
        past, before = hot[lay.new[hot] >= hi], hot[lay.new[hot] < lo]
        if past.size:
            end = max((int(lay.new[i]) + max(int(lay.size[i]), 1) for i in before.tolist()), default=start)
            out.append((past.tolist(), hi - end))
    return out


def fill(layout, universe, lay, gaps: list, start: int) -> dict:
    """Insert cold code sections (``hot_last.cold_sections``, sized by their function in
    the profiled library, a name defined once there) into ``layout.functions`` before the
    first hot function past each gap, at least the gap's bytes each; returns {"ranges",
    "sections", "bytes"} of what was inserted."""
    from elflayout.order.algorithms.hot_last import cold_sections

    sizes, seen = {}, set()
    for name, size, hot in zip(lay.names, lay.size.tolist(), lay.hot.tolist()):
        if name in seen or hot:
            sizes.pop(name, None)
        else:
            sizes[name] = int(size)
        seen.add(name)
    pool = [(r, sizes.get(r.link_name, 0)) for r, _sec, _obj in cold_sections(layout, universe)[0]]
    pool = [(r, n) for r, n in pool if n > 0]
    st = {"ranges": 0, "sections": 0, "bytes": 0}
    for past, need in _fill_points(lay, gaps, start):
        # before the first of them the ordering names (code sections without a symbol it lists stay put)
        names = {lay.names[i]: n for n, i in enumerate(past)}
        hits = [(names[r.name if r.name in names else r.link_name], k) for k, r in enumerate(layout.functions)
                if r.name in names or r.link_name in names]
        if not hits:
            continue
        at = min(hits)[1]
        got, used = 0, []
        while pool and got < need:
            r, n = pool.pop(0)
            used.append(r)
            got += n
        if got < need:
            break
        layout.functions[at:at] = used
        st = {"ranges": st["ranges"] + 1, "sections": st["sections"] + len(used), "bytes": st["bytes"] + got}
    return st


def step(o, fmt: str, move: bool | None, read_ahead_kb: int):
    """The readahead-marks step of ``link``: (the ordering, with cold code filling the
    gaps ``search`` finds when the model predicts fewer pages; the ``Step``)."""
    from elflayout.order import formats

    t, u = o.target, o.universe
    if fmt != "lld" or o.request.algorithm != "first-access":
        return o, Step("readahead marks", False, "first-access with lld only")
    if not getattr(u, "text_order", None):
        return o, Step("readahead marks", False, "needs the link map's cold sections (--objects-from)")
    try:
        with ElfImage(t.path) as img:
            same = bool(t.build_id) and img.build_id == t.build_id
    except (OSError, ValueError):
        same = False
    if not same:
        return o, Step("readahead marks", False, f"the profiled library {t.path} is not there")
    found = search(t.path, t, read_ahead_kb, move, u)
    if not found["gaps"] or found["pages"] >= found["plain"]:
        return o, Step("readahead marks", False, "no marked folio of hot code reads cold code")
    layout = dataclasses.replace(o.layout, functions=list(o.layout.functions))
    st = fill(layout, u, found["layout"], found["gaps"], found["start"])
    if not st["ranges"]:
        return o, Step("readahead marks", False, "no cold code to fill the marked folios with")
    text, stats = formats.write_lld(layout)
    ranges = ", ".join(f"{a // PAGE:#x}-{b // PAGE - 1:#x}" for a, b in found["gaps"])
    return dataclasses.replace(o, layout=layout, text=text, stats=stats), Step(
        "readahead marks", f"{st['ranges']} kept cold", f"readahead model at read_ahead_kb {read_ahead_kb}: "
        f"{found['plain']:,} -> {found['pages']:,} pages", f"{st['sections']:,} cold sections "
        f"({st['bytes']:,} bytes) fill file pages {ranges} of the profiled library")
