"""Held-out evaluation: how an order does on a startup it was not trained on.

Goal: before shipping an order learned from some workloads, predict what it costs a
workload it never saw, and name the code that costs it: the share of the held-out
workload's touched functions that sit in the ordered (hot) region, the pages the
readahead model predicts it reads, and the cold functions it touches outside the hot
region. Over a set of workloads, k-fold cross-validation (train on k−1, evaluate on the
held-out one) compares, per workload, three layouts of the *same* library: unordered
(as linked), ordered by the other workloads, ordered by the workload itself.

Definitions:
- *library*: one build (the one the profiles were recorded on: offsets identify
  functions exactly, no name matching).
- *hot set* of a training profile: the library's functions (extents of
  ``symbols.functions``) containing a function entry of the training profile.
- *virtual layout* of an order: the hot set packed at the start of the executable
  section that holds it, in training order (``first``), each function keeping its size
  and 16-byte alignment; every other function follows in its original order. That is
  what ``order --format lld`` asks lld to do with ``-ffunction-sections`` objects; data
  is not moved (a code-only what-if).
- *touches* of a profile in a layout: each function entry's entry page (``x``; the same
  convention as ``simulate --code-bytes 1``), and its data pages (``r``/``w``/``t``) where
  they are, in ``first`` order.
- *predicted pages*: ``readahead.simulate`` of the touches on the library's segments.

Steps (``cross_validate``):
1. For each workload k of a merged profile (or each of the ``held_out`` ones; the
   others only train): the training profile is the merge of the other workloads' views
   (``merge.workload_view``) by the chosen rule (``shared`` by default, as ``profile``;
   see ``profile/merge.py``), leaving out any that runs k's exact command
   (``training_set``); the held-out profile is workload k's view.
2. Virtual layouts: none (unordered), trained on the others, trained on k itself.
3. Predicted pages of k's touches in each; the cold functions k touches outside the
   others' hot set, with the pages only they touch.
4. Never worse than unordered: a held-out workload whose cross-trained layout reads
   more pages than the unordered one is flagged, with the functions that cause it (the
   cold functions whose pages nothing else touches, and which the hot region moved
   away from their neighbours).
5. Foreign pages: the pages of the others' hot region that hold none of k's functions
   (code the training workloads run and k does not), and of them those within half a
   readahead window of a page of k's code there (``near``: interleaved with its code, so
   read around rather than skipped).
6. Order only: the pages k would read if the hot region held k's own functions alone,
   in the training order: what is left of the gap to "itself" once coverage and the
   other workloads' code are taken out is the cost of walking the region in another
   sequence (``order_only_pages``).

Citation: the leave-one-out check of an orderfile against startups it was not trained
on is the question of Chromium's orderfile pipeline (``tools/cygprofile``, which
profiles several runs and phases); lld's balanced partitioning (``--bp-startup-sort``;
Hoag et al., "Optimizing Function Layout for Mobile Applications", LCTES 2023) trains on
a set of startup traces for the same reason. The page model is ``order/readahead.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from elflayout.elfcore import PAGE, ElfImage
from elflayout.errors import ElflayoutError
from elflayout.profile.model import Profile, Target

# Function start alignment assumed when packing the hot set (x86-64 GCC/clang -O2 use
# 16 for most functions; a smaller guess would make the hot region look denser than lld
# can make it).
FUNCTION_ALIGN = 16
# Cold functions listed per workload (all are counted).
MAX_LISTED = 10


@dataclass
class Layout:
    """A code layout of one library: new offset of each function extent."""
    start: np.ndarray  # original offsets, sorted
    size: np.ndarray
    names: list
    new: np.ndarray  # offsets in this layout
    hot: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # in the hot set

    def index(self, offsets: np.ndarray) -> np.ndarray:
        """Function index containing each offset (-1: none)."""
        k = np.searchsorted(self.start, offsets, side="right") - 1
        kc = np.clip(k, 0, None)
        ok = (k >= 0) & (offsets < self.start[kc] + np.maximum(self.size[kc], 1))
        return np.where(ok, k, -1)

    def move(self, offsets: np.ndarray) -> np.ndarray:
        """Offsets in this layout (code outside any function stays where it is)."""
        k = self.index(offsets)
        out = offsets.copy()
        m = k >= 0
        out[m] = self.new[k[m]] + (offsets[m] - self.start[k[m]])
        return out


def functions_of(img: ElfImage) -> Layout:
    """The library's function extents as they are (the unordered layout)."""
    from elflayout import symbols

    ft = symbols.functions(img)
    off, size = np.asarray(ft.offset, dtype=np.int64), np.asarray(ft.size, dtype=np.int64)
    o = np.argsort(off, kind="stable")
    off, size = off[o], size[o]
    keep = np.ones(off.size, dtype=bool)
    keep[1:] = off[1:] != off[:-1]  # aliases: one extent
    names = [ft.names[i] for i in o[keep].tolist()]
    off, size = off[keep], size[keep]
    return Layout(off, size, names, off.copy(), np.zeros(off.size, dtype=bool))


def _exec_ranges(img: ElfImage) -> list[tuple[int, int]]:
    from elftools.elf.constants import SH_FLAGS

    return [(s.offset, s.offset + s.size) for s in img.sections
            if s.occupies_file and s.flags & SH_FLAGS.SHF_EXECINSTR and s.size]


def code_sections(ranges: list, universe, base: Layout) -> list[tuple[float, int, int, str]]:
    """The code input sections holding none of ``base``'s functions that the profile ran
    (``ranges``: ``placement.code_outside_functions``), as (first, offset, size, name)
    from the profiled build's link map (``universe`` extents): crtbeginS.o's ``.text``,
    assembler files' code. The ordering places them at their first access
    (``first_access``), so the what-if moves them as it moves functions."""
    ext = getattr(universe, "extents", None)
    if ext is None or not len(ext) or not ranges:
        return []
    off, size = ext["offset"], ext["size"]
    firsts: dict[int, float] = {}
    for first, a, b, _sec, whole in ranges:
        if whole:
            continue
        for j in np.flatnonzero((off < b) & (off + size > a) & (size > 0)).tolist():
            if universe.extent_names[j].startswith(".text"):
                firsts[j] = min(firsts.get(j, first), first)
    out = []
    for j, first in sorted(firsts.items(), key=lambda kv: kv[1]):
        lo, hi = int(off[j]), int(off[j] + size[j])
        if not ((base.start >= lo) & (base.start < hi)).any():
            out.append((first, lo, hi - lo, f"<{universe.extent_names[j]} of {universe.extent_objects[j]}>"))
    return out


def with_code(base: Layout, code: list) -> Layout:
    """``base`` with the extents of ``code`` (``code_sections``) as functions."""
    if not code:
        return base
    start = np.concatenate([base.start, np.array([c[1] for c in code], dtype=np.int64)])
    size = np.concatenate([base.size, np.array([c[2] for c in code], dtype=np.int64)])
    names = base.names + [c[3] for c in code]
    o = np.argsort(start, kind="stable")
    return Layout(start[o], size[o], [names[i] for i in o.tolist()], start[o].copy(), np.zeros(o.size, dtype=bool))


def ordered_layout(img: ElfImage, base: Layout, train: Target, hot_last: bool = False, code: list = (),
                   gaps=()) -> Layout:
    """The virtual layout of an order trained on ``train`` (see Definitions); ``hot_last``:
    the hot set ending its section instead (``algorithms.hot_last``), the cold functions
    packed from its start. ``code``: code sections (``code_sections``, in ``base``: see
    ``with_code``) placed among the functions at their first access. ``gaps``: file-offset
    ranges [lo, hi) no hot function of a first-access layout overlaps (cold code fills
    them: ``order.marks``)."""
    offs = [f.offset for f in train.functions if f.offset is not None]
    if code:
        firsts = [f.first for f in train.functions if f.offset is not None] + [c[0] for c in code]
        offs = [offs[i] if i < len(offs) else code[i - len(offs)][1]
                for i in sorted(range(len(firsts)), key=firsts.__getitem__)]
    offs = np.array(offs, dtype=np.int64)
    idx = base.index(offs)
    hot = list(dict.fromkeys(i for i in idx.tolist() if i >= 0))  # training order, once each
    is_hot = np.zeros(base.start.size, dtype=bool)
    is_hot[hot] = True
    new = base.start.copy()
    for lo, hi in _exec_ranges(img):
        inside = np.flatnonzero((base.start >= lo) & (base.start < hi))
        if not inside.size:
            continue
        here, cold = [i for i in hot if lo <= base.start[i] < hi], [i for i in inside.tolist() if not is_hot[i]]
        if hot_last:
            # the section's bytes outside function symbols (assembly tables, padding) stay
            # before the touched code, which ends the section as lld links it
            pos = _pack(new, base, cold, lo)
            end = _pack(new, base, here, max(pos, hi - _span(base, here)))
        else:
            end = _pack(new, base, cold, _pack(new, base, here, lo, gaps))
            end -= sum(min(b, end) - max(a, lo) for a, b in gaps if a < end and b > lo)  # cold code fills them
        if end > hi + FUNCTION_ALIGN * len(inside):
            raise ElflayoutError(f"{img.path}: packed functions overflow their section ({end - hi} bytes)")
    return Layout(base.start, base.size, base.names, new, is_hot)


def _pack(new: np.ndarray, base: Layout, order: list[int], pos: int, gaps=()) -> int:
    """Place ``order``'s functions from ``pos`` (FUNCTION_ALIGN apart) in ``new``, none
    overlapping a range of ``gaps``; the end."""
    for i in order:
        pos = -(-pos // FUNCTION_ALIGN) * FUNCTION_ALIGN
        for a, b in gaps:
            if pos < b and pos + max(int(base.size[i]), 1) > a:
                pos = b
        new[i] = pos
        pos += max(int(base.size[i]), 1)
    return pos


def _span(base: Layout, order: list[int]) -> int:
    """Bytes ``order``'s functions take packed from an aligned start (alignment included)."""
    return _pack(np.zeros(base.start.size, dtype=np.int64), base, order, 0) if order else 0


def touches(target: Target, layout: Layout, outside: list = (), code: list = (),
            bodies: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(pages, kinds) of a profile of this very build in ``layout``, in first order.
    ``outside``: code it ran outside its functions (``placement.code_outside_functions``):
    the parts of it in ``code`` sections (``code_sections``) where ``layout`` moves them,
    the rest (``.init``, ``.plt``, code no map names) in place. ``bodies``: also the
    executed pages of long functions past their entry (``_bodies``), moved with them."""
    fo = [f.offset for f in target.functions if f.offset is not None]
    ff = [f.first for f in target.functions if f.offset is not None]
    for first, a, b, _sec, _whole in outside:
        parts = [(max(a, c[1]), min(b, c[1] + c[2])) for c in code if c[1] < b and c[1] + c[2] > a] or [(a, b)]
        for lo, hi in parts:
            fo += [lo, hi - 1]
            ff += [first, first]
    if bodies:
        for first, off in _bodies(target):
            fo.append(off)
            ff.append(first)
    fo, ff = np.array(fo, dtype=np.int64), np.array(ff, dtype=np.float64)
    data = [p for p in target.pages if p.kind != "x"]
    dp = np.array([p.page for p in data], dtype=np.int64)
    df = np.array([p.first for p in data], dtype=np.float64)
    dk = np.array([p.kind.encode() for p in data], dtype="S1")
    pages = np.concatenate([layout.move(fo) // PAGE, dp])
    kinds = np.concatenate([np.full(fo.size, b"x", dtype="S1"), dk])
    o = np.argsort(np.concatenate([ff, df]), kind="stable")
    return pages[o], kinds[o]


def _bodies(target: Target) -> list[tuple[float, int]]:
    """(first, offset) of the executed pages a profiled function spans but no profiled
    function enters (the body of a long function): the offset of the page's first byte
    in that function, which a layout moves with it."""
    fn = [(f.offset, max(f.size or 1, 1)) for f in target.functions if f.offset is not None]
    entries = {o // PAGE for o, _s in fn}
    out = []
    for p in target.pages:
        if p.kind == "x" and p.page not in entries:
            lo = p.page * PAGE
            hit = [o for o, s in fn if o < lo + PAGE and o + s > lo]
            if hit:
                out.append((p.first, max(lo, hit[0])))
    return out


def predict(img: ElfImage, target: Target, layout: Layout, read_ahead_kb: int) -> dict:
    from elflayout.order.readahead import simulate

    pages, kinds = touches(target, layout)
    return simulate(img, pages, kinds, read_ahead_kb, loader=True)


def _same_build(img: ElfImage, t: Target, what: str) -> None:
    if not t.build_id or t.build_id != img.build_id:
        raise ElflayoutError(f"{what}: profile of build {t.build_id or '?'} but {img.path} is {img.build_id}: "
                             "held-out evaluation needs profiles recorded on this very library")


def evaluate(img: ElfImage, heldout: Target, train: Target, read_ahead_kb: int,
             base: Layout | None = None) -> dict:
    """The held-out figures of one workload against an order trained on ``train``."""
    base = base or functions_of(img)
    lay = ordered_layout(img, base, train)
    offs = np.array([f.offset for f in heldout.functions if f.offset is not None], dtype=np.int64)
    k = base.index(offs)
    k = k[k >= 0]
    inside = lay.hot[k]
    hot_pages = set((lay.new[lay.hot] // PAGE).tolist()) | set(((lay.new[lay.hot] + np.maximum(
        base.size[lay.hot], 1) - 1) // PAGE).tolist())
    entry_pages = lay.new[k] // PAGE
    cold = k[~inside]
    # pages only cold functions touch: what the order costs this workload
    warm = set(entry_pages[inside].tolist()) | hot_pages
    cold_only = sorted(set((lay.new[cold] // PAGE).tolist()) - warm)
    names = [base.names[i] for i in cold.tolist()]
    # hot-region pages holding none of its code: what the others' code costs it there
    def pages_of(ix):
        got = set()
        for i in ix.tolist():
            got.update(range(int(lay.new[i]) // PAGE, (int(lay.new[i]) + max(int(base.size[i]), 1) - 1) // PAGE + 1))
        return got

    region, spans = pages_of(np.flatnonzero(lay.hot)), pages_of(k[inside])
    pred = predict(img, heldout, lay, read_ahead_kb)
    return {
        "functions": int(k.size),
        "in_hot_region": int(inside.sum()),
        "in_hot_fraction": float(inside.mean()) if k.size else None,
        "pages_touched": int(np.unique(entry_pages).size),
        "pages_in_hot_region": int(np.isin(np.unique(entry_pages), list(hot_pages)).sum()),
        "hot_region_functions": int(lay.hot.sum()),
        "hot_region_pages": len(region),
        "foreign_pages": len(region - spans),
        "foreign_near_pages": _near(region - spans, spans, read_ahead_kb * 1024 // PAGE // 2),
        "cold_functions": len(names),
        "cold_examples": names[:MAX_LISTED],
        "cold_only_pages": len(cold_only),
        "predicted_pages": pred["pages"],
        "predicted_requests": pred["requests"],
    }


def _near(pages: set, of: set, dist: int) -> int:
    """How many of ``pages`` lie within ``dist`` pages of one of ``of``."""
    if not pages or not of:
        return 0
    ref = np.array(sorted(of))
    q = np.array(sorted(pages))
    i = np.clip(np.searchsorted(ref, q), 1, ref.size - 1) if ref.size > 1 else np.zeros(q.size, dtype=int)
    d = np.minimum(np.abs(q - ref[i]), np.abs(q - ref[np.maximum(i - 1, 0)]))
    return int((d <= dist).sum())


def same_command(a: dict, b: dict) -> bool:
    """Two workload descriptions (``metadata.workloads`` entries) run the same command
    under the same conditions (argv, stdout, environment)."""
    return all(a.get(k) == b.get(k) for k in ("argv", "stdout", "env"))


def training_set(workloads: list[dict], k: int) -> list[int]:
    """Indices of the workloads an order held out from workload ``k`` trains on: every
    other workload except any that runs k's exact command (a duplicate would not be
    held out)."""
    return [j for j, w in enumerate(workloads) if j != k and not same_command(w, workloads[k])]


def train_on(profile: Profile, views: list[Profile], idx: list[int], rule: str) -> Profile:
    """The training profile: workloads ``idx`` of ``profile`` (their ``views``) merged by ``rule``."""
    from elflayout.profile import model
    from elflayout.profile.merge import merge

    if len(idx) == 1:
        return views[idx[0]]
    wl = profile.workloads
    return model.parse(merge([views[j] for j in idx], [wl[j].get("name") for j in idx], rule=rule))


def cross_validate(img: ElfImage, profile: Profile, rule: str = "shared", read_ahead_kb: int = 128,
                   target: str | None = None, progress=None, held_out: list[str] | None = None) -> list[dict]:
    """Leave-one-out over the workloads of a merged profile (see Steps). ``held_out``:
    the names of the workloads to evaluate (default: all); the others only train."""
    from elflayout.profile.merge import workload_view

    wl = profile.workloads
    if len(wl) < 2:
        raise ElflayoutError(f"{profile.source}: cross-validation needs a profile of several workloads "
                             f"(profile --workload ... or merge); this one has {len(wl)}")
    names = [w.get("name") for w in wl]
    unknown = sorted(set(held_out or ()) - set(names))
    if unknown:
        raise ElflayoutError(f"{profile.source}: no workload named {unknown[0]!r} (has {', '.join(map(str, names))})")
    t0 = profile.target(target)
    _same_build(img, t0, profile.source)
    views = [workload_view(profile, k) for k in range(len(wl))]
    base = functions_of(img)
    rows = []
    for k, w in enumerate(wl):
        if held_out is not None and w.get("name") not in held_out:
            continue
        if progress:
            progress(f"workload {k + 1}/{len(wl)}: {w.get('name')}")
        held = views[k].target(t0.path)
        idx = training_set(wl, k)
        if not idx:
            raise ElflayoutError(f"{profile.source}: nothing to train on without {w.get('name')!r} "
                                 "(every other workload runs the same command)")
        train = train_on(profile, views, idx, rule).target(t0.path)
        cross = evaluate(img, held, train, read_ahead_kb, base)
        # the same training order restricted to k's own functions: the part of the gap
        # that is order (k walks the hot region in another sequence), not coverage
        mine = {f.offset for f in held.functions}
        same = dataclasses.replace(train, functions=[f for f in train.functions if f.offset in mine])
        order_only = predict(img, held, ordered_layout(img, base, same), read_ahead_kb)["pages"]
        unordered = predict(img, held, base, read_ahead_kb)["pages"]
        self_pages = predict(img, held, ordered_layout(img, base, held), read_ahead_kb)["pages"]
        row = {"workload": w.get("name"), "trained_on": [names[j] for j in idx],
               "duplicates_left_out": len(wl) - 1 - len(idx), **cross, "unordered_pages": unordered,
               "self_pages": self_pages, "order_only_pages": order_only,
               "vs_self": cross["predicted_pages"] / self_pages - 1 if self_pages else None,
               "worse_than_unordered": cross["predicted_pages"] > unordered}
        if row["worse_than_unordered"]:
            row["culprits"] = cross["cold_examples"]
        rows.append(row)
    return rows


def table_lines(rows: list[dict]) -> list[str]:
    """The cross-validation table, for the terminal."""
    hdr = f"{'held-out workload':<28} {'funcs':>6} {'in hot':>7} {'cold':>5} {'unordered':>10} {'others':>8} " \
          f"{'itself':>8} {'vs itself':>9} {'order only':>10} {'foreign':>8} {'near':>6}"
    out = [hdr, "-" * len(hdr)]
    for r in rows:
        frac = "-" if r["in_hot_fraction"] is None else f"{100 * r['in_hot_fraction']:.1f}%"
        vs = "-" if r["vs_self"] is None else f"{100 * r['vs_self']:+.1f}%"
        flag = "  WORSE than unordered" if r["worse_than_unordered"] else ""
        out.append(f"{str(r['workload'])[:28]:<28} {r['functions']:>6,} {frac:>7} {r['cold_functions']:>5,} "
                   f"{r['unordered_pages']:>10,} {r['predicted_pages']:>8,} {r['self_pages']:>8,} {vs:>9} "
                   f"{r['order_only_pages']:>10,} {r['foreign_pages']:>8,} {r['foreign_near_pages']:>6,}{flag}")
        if r.get("culprits"):
            out.append(f"    culprits (cold functions it touches outside the hot region): {', '.join(r['culprits'])}")
    out.append("pages: predicted by the readahead model (order/readahead.py) for virtual code layouts of this "
               "library; 'others' = ordered by the other workloads, 'itself' = by the held-out workload, "
               "'order only' = the others' order of the held-out workload's own functions alone; 'foreign' = pages of the "
               "others' hot region that hold none of the held-out workload's code, 'near' = those of them within half a "
               "readahead window of a page it touches (read around, not skipped)")
    return out


def evaluate_relink(img: ElfImage, heldout: Target, train: Target | None, read_ahead_kb: int,
                    lib_map: str | None = None) -> dict:
    """Held-out figures for a real ordered relink (another build than the training
    profile's; the held-out one may be of either): functions are matched by name (``check.lib_functions``, clones and thunks as in
    ``resolve``); the hot set is the training profile's functions as placed in ``img``;
    pages are predicted from the held-out touches placed by ``placement.profile_touches``."""
    from elflayout.order.check import lib_functions
    from elflayout.order.placement import profile_touches
    from elflayout.order.readahead import simulate
    from elflayout.order.resolve import clone_base, thunk_target

    funcs = lib_functions(img)

    def place(name):
        c = funcs.get(name) or funcs.get(clone_base(name)) or funcs.get(thunk_target(name) or "")
        return c[0] if c and len(c) == 1 else None

    from elflayout.order.simulation import touches_relocations

    pages, kinds, notes = profile_touches(heldout, img, 1, lib_map)
    # as simulate does: the loader's pass unless the profile recorded it
    pred = simulate(img, pages, kinds, read_ahead_kb, loader=not touches_relocations(img, pages))
    res = {"predicted_pages": pred["pages"], "predicted_requests": pred["requests"],
           "functions_unplaced": notes["functions_unplaced"]}
    if train is None:
        return res
    hot = {place(f.name) for f in train.functions} - {None}
    hot_pages = {p for o, s in hot for p in range(o // PAGE, (o + max(s, 1) - 1) // PAGE + 1)}
    placed = [(f.name, place(f.name)) for f in heldout.functions]
    placed = [(n, e) for n, e in placed if e is not None]
    inside = [e in hot for _n, e in placed]
    cold = [n for (n, _e), i in zip(placed, inside) if not i]
    entry = {e[0] // PAGE for _n, e in placed}
    warm = hot_pages | {e[0] // PAGE for (_n, e), i in zip(placed, inside) if i}
    res.update({
        "functions": len(placed),
        "in_hot_region": sum(inside),
        "in_hot_fraction": sum(inside) / len(placed) if placed else None,
        "pages_touched": len(entry),
        "pages_in_hot_region": len(entry & hot_pages),
        "hot_region_functions": len(hot),
        "cold_functions": len(cold),
        "cold_examples": cold[:MAX_LISTED],
        "cold_only_pages": len({e[0] // PAGE for (_n, e), i in zip(placed, inside) if not i} - warm),
    })
    return res


def summary_lines(res: dict, what: str) -> list[str]:
    lines = [f"held-out:  {what}"]
    if "functions" in res:
        frac = "-" if res["in_hot_fraction"] is None else f"{100 * res['in_hot_fraction']:.1f}%"
        lines.append(f"           {res['in_hot_region']:,} of {res['functions']:,} touched functions ({frac}) in the "
                     f"ordered region ({res['hot_region_functions']:,} functions); {res['pages_in_hot_region']:,} of "
                     f"{res['pages_touched']:,} entry pages")
        lines.append(f"           {res['cold_functions']:,} cold functions outside it, {res['cold_only_pages']:,} pages "
                     f"only they touch" + (": " + ", ".join(res["cold_examples"]) if res["cold_examples"] else ""))
    lines.append(f"           {res['predicted_pages']:,} pages predicted (readahead model) in "
                 f"{res['predicted_requests']:,} reads")
    return lines
