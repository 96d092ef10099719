"""Placement of a profile's touches on a library: the pages a profiled startup touches,
in the order it touches them, as pages of a given build (``readahead.simulate``
replays them).

The profiled build itself: offsets as recorded. Another build (a relink): a function
is placed by name, a data page by its input section (with both link maps) or else by
its relative position in its output section, ``.dynstr`` reads by the names ld.so
looks up; what cannot be placed is counted in the notes.
"""

from __future__ import annotations

import numpy as np

from elflayout.elfcore import PAGE, ElfImage
from elflayout.layouts import SHF_EXECINSTR
from elflayout.profile.model import Target


def profile_touches(target: Target, img: ElfImage, code_bytes: int = 1, lib_map=None) -> tuple[np.ndarray, np.ndarray, dict]:
    """The profile's touch sequence as pages of ``img``: (pages, kinds, notes).

    Same build (build-id): offsets are used as they are. Another build (a relink): a
    function is placed by name (``check.lib_functions``, clone/thunk names as in
    ``resolve``); a data page by its section and its relative position in it, scaled
    to the section's size here (the profiled file must still exist for its section
    table); with ``lib_map`` (this library's link map) and the profile's own ``map``, a
    data page follows its input section instead (same name and object, same offset in
    it), which is what a data-ordered relink needs. ``code_bytes``: how much of a
    function its first execution is taken to touch from its entry (1 = the entry page
    only).
    """
    from elflayout.order.check import lib_functions
    from elflayout.order.resolve import clone_base, thunk_target

    same = bool(target.build_id) and target.build_id == img.build_id
    firsts, pages, kinds = [], [], []
    notes = {"same_build": same, "functions": 0, "functions_unplaced": 0, "pages": 0, "pages_unplaced": 0}
    funcs = None if same else lib_functions(img)
    moved_funcs = []  # (profiled offset, size, offset here, size here) of another build's functions
    for f in target.functions:
        first = f.first
        if same and f.offset is not None:
            off, size = f.offset, f.size or 1
        else:
            name = f.name
            c = funcs.get(name) or funcs.get(clone_base(name)) or funcs.get(thunk_target(name) or "")
            if not c:
                notes["functions_unplaced"] += 1
                continue
            off, size = c[0]
            if f.offset is not None:
                moved_funcs.append((f.offset, max(f.size or 1, 1), off, max(size, 1)))
        last = off + max(1, min(size, code_bytes)) - 1
        for p in range(off // PAGE, last // PAGE + 1):
            firsts.append(first)
            pages.append(p)
            kinds.append(b"x")
        notes["functions"] += 1
    plist = target.pages
    if plist:
        pg = np.array([p.page for p in plist], dtype=np.int64)
        kd = np.array([p.kind.encode() for p in plist], dtype="S1")
        fs = np.array([p.first for p in plist], dtype=np.float64)
        if not same:
            maps = _both_maps(target, img, lib_map, notes) if lib_map else None
            moved = follow_input_sections(*maps, pg, _after_loader(plist)) if maps else None
            named = [p.section for p in plist]
            fallback = _remap_pages(pg, target, img, notes, named)
            dpg, dfirst = _dynstr_lookups(pg, fs, target, img, notes, named)
            pg = fallback if moved is None else np.where(moved >= 0, moved, fallback)
            _loader_structures(pg, kd, plist, target, img)
            if moved is not None:
                notes["pages_by_input_section"] = int((moved >= 0).sum())
            if dpg is not None:  # .dynstr reads: by name, not by relative position
                pg[dpg[0]] = -1
                firsts += [dfirst] * len(dpg[1])
                pages += dpg[1].tolist()
                kinds += [b"r"] * len(dpg[1])
            extra = [(f, p, b"x") for f, p in _code_outside(target, img, maps, notes)]
            extra += [(f, p, b"x") for f, p in _function_bodies(plist, moved_funcs)]
            extra += [(f, p, b"r") for f, p in _relocation_reads(plist, target, img)]
            for first, p, kind in extra:
                firsts.append(first)
                pages.append(p)
                kinds.append(kind)
        ok = pg >= 0
        if not same:
            ok &= kd != b"x"  # code pages of another build: functions place code
        notes["pages"] = int(ok.sum())
        notes["pages_unplaced"] += int((~ok).sum()) if same else 0
        firsts += fs[ok].tolist()
        pages += pg[ok].tolist()
        kinds += kd[ok].tolist()
    order = np.argsort(np.asarray(firsts, dtype=np.float64), kind="stable")
    return (np.asarray(pages, dtype=np.int64)[order] if pages else np.zeros(0, np.int64),
            np.asarray(kinds, dtype="S1")[order] if kinds else np.zeros(0, "S1"), notes)


def _after_loader(plist) -> np.ndarray:
    """Sorted distinct data pages touched after the loader phase (what the ordering reads
    its data order from: ld.so's relocation pass writes every relocated page)."""
    return np.unique(np.array([p.page for p in plist if p.kind != "x" and p.phase != "loader"], dtype=np.int64))


def _both_maps(target, img, lib_map, notes):
    """(the profiled build's link map, this library's ``lib_map``), parsed with file
    offsets, or None (noted) when the profile's own map or library is gone."""
    import os

    from elflayout import linkmap

    src_map, src_path = target.map, target.path
    if not (src_map and os.path.exists(src_map) and src_path and os.path.exists(src_path)):
        notes["remap_by_section"] = "the profile's own map or library is missing"
        return None
    with ElfImage(src_path) as src:
        if src.build_id != target.build_id:
            notes["remap_by_section"] = f"{src_path} is no longer the profiled build"
            return None
        a = linkmap.parse(src_map, src)
    return a, linkmap.parse(lib_map, img)


# A gap of at least this many bytes between sized functions of a code section is code
# without a sized symbol (crt files' frame_dummy, assembler loops); shorter ones are the
# functions' alignment padding.
GAP_MIN = 64


def code_outside_functions(target: Target, img: ElfImage, base=None) -> list[tuple[float, int, int, object, bool]]:
    """What the profile ran outside its functions, as byte ranges of the profiled build
    ``img``: (first, start, end, section, whole). On each executed page that no profiled
    function spans, the bytes of code sections no sized function symbol covers: a section
    holding no function (``.init``, ``.plt``, ``.fini``) wholly (``whole``), in the others
    the gaps of at least GAP_MIN bytes. Which of them ran is not recorded: each counts.
    ``base``: ``heldout.functions_of(img)`` when the caller has it."""
    from elflayout.order.heldout import functions_of

    spanned = set()
    for f in target.functions:
        if f.offset is not None:
            spanned.update(range(f.offset // PAGE, (f.offset + max(f.size, 1) - 1) // PAGE + 1))
    run: dict[int, float] = {}
    for p in target.pages:
        if p.kind == "x" and p.page not in spanned:
            run[p.page] = min(run.get(p.page, p.first), p.first)
    if not run:
        return []
    base = functions_of(img) if base is None else base
    out = []
    for sec in img.sections:
        if not (sec.occupies_file and sec.flags & SHF_EXECINSTR and sec.size):
            continue
        lo, hi = sec.offset, sec.offset + sec.size
        inside = np.flatnonzero((base.start >= lo) & (base.start < hi))
        gaps, cur = [], lo
        for i in inside.tolist():
            if base.start[i] - cur >= GAP_MIN:
                gaps.append((cur, int(base.start[i])))
            cur = max(cur, int(base.start[i] + max(base.size[i], 1)))
        if hi - cur >= GAP_MIN or not inside.size:
            gaps.append((cur, hi))
        for a, b in gaps:
            for page in range(a // PAGE, (b - 1) // PAGE + 1):
                if page in run:
                    out.append((run[page], max(a, page * PAGE), min(b, page * PAGE + PAGE), sec, not inside.size))
    return out


def _code_outside(target: Target, img: ElfImage, maps, notes) -> list[tuple[float, int]]:
    """(first, page of ``img``) of the code the profile ran outside its functions
    (``code_outside_functions``) in this relink: a section holding no function by its
    relative position in the same-named section, other code by its input section (with
    both link maps); what cannot be placed is counted in the notes."""
    import os

    if not os.path.exists(target.path):
        return []
    with ElfImage(target.path) as src:
        if src.build_id != target.build_id:
            return []
        ranges = code_outside_functions(target, src)
    dst = {s.name: s for s in img.sections if s.occupies_file}
    out, lost = [], 0
    for first, a, b, sec, whole in ranges:
        d = dst.get(sec.name)
        ends = None
        if whole and d is not None:
            ends = [d.offset + min(x - sec.offset, d.size - 1) for x in (a, b - 1)]
        elif maps is not None:
            got = follow_offsets(*maps, np.array([a, b - 1], dtype=np.int64))
            ends = got.tolist() if (got >= 0).all() else None
        if ends is None:
            lost += 1
            continue
        out += [(first, p) for p in range(ends[0] // PAGE, ends[1] // PAGE + 1)]
    if ranges:
        notes["code_outside_functions"] = {"ranges": len(ranges), "unplaced": lost}
    return out


def follow_input_sections(a, b, pg: np.ndarray, touched: np.ndarray | None = None) -> np.ndarray:
    """Pages in link map ``b``'s library of the file pages ``pg`` of ``a``'s (both maps
    with file offsets), each following the input section holding its first byte, at the
    same offset in it; -1: not found. Data read from code too (assembler files keep
    constant tables in ``.text``: sha256's K256 is read, not run); the caller drops
    code pages, which functions place. ``touched``: the profile's data pages after the
    loader (``shared_page_starts``)."""
    offs = pg * PAGE if touched is None else shared_page_starts(a, pg, touched)
    out = follow_offsets(a, b, offs)
    return np.where(out >= 0, out // PAGE, -1)


def shared_page_starts(a, pg: np.ndarray, touched: np.ndarray) -> np.ndarray:
    """The offset of ``a``'s file to follow for each touched page ``pg``: its first byte,
    except on the last page of a big section touched nowhere else (``touched``: sorted
    pages), which it shares with the sections after it: then the first of those. The
    ordering takes that page for the neighbours' touch and leaves the big section in place
    (``first_access``: sparse sections), so the relink has the neighbours in its hot data
    while the big section's end lies among cold data."""
    from elflayout.order.algorithms.first_access import SPARSE_DENSITY, SPARSE_MIN_PAGES, _touches_inside

    offs = np.asarray(pg, dtype=np.int64) * PAGE
    j = a.lookup_offsets(offs)
    live = np.flatnonzero((a.size > 0) & (a.offset >= 0))
    starts = np.sort(a.offset[live])
    for i in np.flatnonzero(j >= 0).tolist():
        k = int(j[i])
        lo, end = int(a.offset[k]), int(a.offset[k] + a.size[k])
        npg = (end - 1) // PAGE - lo // PAGE + 1
        if end >= offs[i] + PAGE or npg <= SPARSE_MIN_PAGES or _touches_inside(touched, lo, end - lo):
            continue
        hit = np.searchsorted(touched, [lo // PAGE, (end - 1) // PAGE + 1])
        if hit[1] - hit[0] >= SPARSE_DENSITY * npg:
            continue
        n = int(np.searchsorted(starts, end))
        if n < starts.size and starts[n] < offs[i] + PAGE:  # the next section starts on this page
            offs[i] = starts[n]
    return offs


def follow_offsets(a, b, offsets: np.ndarray) -> np.ndarray:
    """File offsets in link map ``b``'s library of the file ``offsets`` of ``a``'s, each
    following the input section holding it, at the same offset in it; -1: not found."""
    # A name and object can repeat (lld's merged-constant and string pools are each
    # "<internal>:(.rodata)"): the n-th occurrence in one map is the n-th in the other.
    where = _occurrences(b)
    rank_a = _occurrence_rank(a)
    theirs = _objects_in(a, b)
    offsets = np.asarray(offsets, dtype=np.int64)
    j = a.lookup_offsets(offsets)
    out = np.full(offsets.shape, -1, dtype=np.int64)
    for i in np.flatnonzero(j >= 0).tolist():
        ja = int(j[i])
        ks = where.get((a.name[ja], theirs.get(a.object[ja], a.object[ja])))
        k = None if not ks else ks[min(rank_a.get(ja, 0), len(ks) - 1)]
        if k is None:
            continue
        rel = min(int(offsets[i] - a.offset[ja]), int(b.size[k]) - 1)
        out[i] = int(b.offset[k]) + max(0, rel)
    return out


def _objects_in(a, b) -> dict[str, str]:
    """Map ``a``'s object names to map ``b``'s where they differ: the same object at
    another path (``link`` splits the objects into a temporary directory, so the profiled
    split build and the relink name every object differently), matched by file name when
    that name is unique in both maps (``resolve.same_objects``)."""
    from elflayout.order.resolve import same_objects

    mine = a.objects
    return {o: t for o, t in zip(mine, same_objects(mine, b.objects)) if o != t}


def loader_pages(img: ElfImage) -> dict[str, int]:
    """Pages ld.so touches for the file's structure, not for a symbol: the partial page
    of each PT_LOAD whose ``.bss`` starts mid-page (zeroed by a write), and ``.dynamic``."""
    out = {}
    for s in img.loads:
        if s.memsz > s.filesz and s.filesz and (s.offset + s.filesz) % PAGE:
            out[f"bss@{s.vaddr:#x}"] = (s.offset + s.filesz - 1) // PAGE
    if img.dynamic.present:
        out["dynamic"] = img.dynamic.offset // PAGE
    return out


def _function_bodies(plist, moved_funcs) -> list[tuple[float, int]]:
    """(first, page here) of the executed pages that a profiled function spans but no
    profiled function enters: the body of a long function, run later than its entry.
    Placed at the same offset in the function here (clamped to its size here)."""
    if not moved_funcs:
        return []
    fn = np.array(moved_funcs, dtype=np.int64)
    entries = set((fn[:, 0] // PAGE).tolist())
    out = []
    for p in plist:
        if p.kind != "x" or p.page in entries:
            continue
        lo = p.page * PAGE
        k = np.flatnonzero((fn[:, 0] < lo + PAGE) & (fn[:, 0] + fn[:, 1] > lo))
        if k.size:
            o, _s, new, size = fn[k[0]].tolist()
            out.append((p.first, (new + min(max(lo - o, 0), size - 1)) // PAGE))
    return out


# The relocation tables ld.so reads, in the order it applies them (glibc: DT_RELR first).
RELOCATION_TABLES = (".relr.dyn", ".rela.dyn", ".rel.dyn", ".rela.plt", ".rel.plt")


def _relocation_reads(plist, target, img) -> list[tuple[float, int]]:
    """(first, page) of ld.so's relocation pass in this relink: every page of its
    relocation tables, at the profiled loader's first read of one of the profiled
    build's. Their sizes and places change with the link (packed, ``.dynstr``
    reordered), so neither input sections nor relative positions place them; and once
    the touches hold them the model does not add its own loader pass, which would put
    the whole relocation pass before the version checks the profile saw first."""
    import os

    if not os.path.exists(target.path):
        return []
    with ElfImage(target.path) as src:
        if src.build_id != target.build_id:
            return []
        spans = [(s.offset // PAGE, (s.offset + s.size - 1) // PAGE) for s in src.sections
                 if s.name in RELOCATION_TABLES and s.size and s.occupies_file]
    firsts = [p.first for p in plist if p.phase == "loader" and p.kind != "x"
              and any(a <= p.page <= b for a, b in spans)]
    if not firsts:
        return []
    here = [img.section(n) for n in RELOCATION_TABLES]
    return [(min(firsts), p) for s in here if s is not None and s.size
            for p in range(s.offset // PAGE, (s.offset + s.size - 1) // PAGE + 1)]


def _loader_structures(pg, kd, plist, target, img) -> None:
    """In place: the profiled loader touches of a structure page (``loader_pages``) go to
    the same structure here. Followed by the input section at the page's start, the
    partial ``.bss`` page lands mid-``.data`` and ld.so's first read-around there is
    centred wrongly. The n-th ``.bss`` page of one file is the n-th of the other."""
    import os

    if not os.path.exists(target.path):
        return
    with ElfImage(target.path) as src:
        if src.build_id != target.build_id:
            return
        old = loader_pages(src)
    new = loader_pages(img)
    pairs = [(old["dynamic"], new["dynamic"])] if "dynamic" in old and "dynamic" in new else []
    pairs += list(zip([v for k, v in old.items() if k.startswith("bss")], [v for k, v in new.items() if k.startswith("bss")]))
    phase = np.array([p.phase == "loader" for p in plist], dtype=bool)
    orig = np.array([p.page for p in plist], dtype=np.int64)
    for o, n in pairs:
        pg[phase & (orig == o) & (kd != b"x")] = n


def _occurrences(m) -> dict[tuple[str, str], list[int]]:
    """Placed, non-empty input sections of link map ``m`` by (name, object), in file order."""
    where: dict[tuple[str, str], list[int]] = {}
    for k in np.argsort(m.offset, kind="stable").tolist():
        if m.offset[k] >= 0 and m.size[k] > 0:
            where.setdefault((m.name[k], m.object[k]), []).append(k)
    return where


def _occurrence_rank(m) -> dict[int, int]:
    """For each placed input section of ``m``: how many of the same (name, object) precede it."""
    return {k: r for ks in _occurrences(m).values() for r, k in enumerate(ks)}


def _dynstr_lookups(pg, fs, target, img, notes, named=None):
    """A relink's ``.dynstr`` reads are placed by name: the profiled build's touched
    ``.dynstr`` pages are dropped (their relative position says nothing once the names
    are reordered, ``order --dynstr-out``), and the pages of the names ld.so reads in
    this library (``dynstr.read_names``: its symbol relocations) are touched instead, at
    the first profiled ``.dynstr`` touch. ``named``: the section the profile recorded for
    each page; a page ``.dynstr`` shares, first read in another section (``.gnu.hash``,
    ``.dynsym``), is that section's read. Returns ((indices dropped, new pages), first)
    or (None, None) when the profile has no ``.dynstr`` touch or its library is gone."""
    import os

    from elflayout.order import dynstr

    src_path = target.path
    if not os.path.exists(src_path):
        return None, None
    with ElfImage(src_path) as src:
        if src.build_id != target.build_id:
            return None, None
        ss = src.section(".dynstr")
    ds = img.section(".dynstr")
    if ss is None or ds is None:
        return None, None
    inside = (pg * PAGE + PAGE > ss.offset) & (pg * PAGE < ss.offset + ss.size)
    if named is not None:
        inside &= np.array([n in (None, ".dynstr") for n in named], dtype=bool)
    hit = np.flatnonzero(inside)
    if not len(hit):
        return None, None
    names, _rep = dynstr.read_names(img.path)
    recs, all_names = dynstr._dynsym(img)
    off = {}
    for n, o in zip(all_names, recs["st_name"].tolist()):
        off.setdefault(n, o)
    starts = np.array([off[n] for n in names if n in off], dtype=np.int64) + ds.offset
    ends = starts + np.array([len(n.encode()) for n in names if n in off], dtype=np.int64)
    new = np.stack([starts // PAGE, ends // PAGE], axis=1).ravel()
    _, first = np.unique(new, return_index=True)
    new = new[np.sort(first)]
    notes["dynstr_by_name"] = {"profiled_pages_dropped": int(len(hit)), "names": len(starts), "pages": int(len(new))}
    return (hit, new), float(np.min(fs[hit]))


def _remap_pages(pg: np.ndarray, target: Target, img: ElfImage, notes: dict, named=None) -> np.ndarray:
    """Pages of ``img`` at the same relative position in the same-named section as the
    profiled pages ``pg``: the section the profile recorded for the page (``named``) when
    the page holds it, else the one at the page's start."""
    import os

    out = np.full(pg.shape, -1, dtype=np.int64)
    src_path = target.path
    if not os.path.exists(src_path):
        notes["pages_unplaced"] = int(len(pg))
        notes["remap"] = "profiled file not found: data pages of another build cannot be placed"
        return out
    with ElfImage(src_path) as src:
        if src.build_id != target.build_id:
            notes["pages_unplaced"] = int(len(pg))
            notes["remap"] = f"{src_path} is no longer the profiled build"
            return out
        idx = src.section_of_offsets(pg * PAGE)
        src_secs = {s.index: s for s in src.sections}
        by_name = {s.name: s for s in src.sections if s.occupies_file and s.size}
        for i, n in enumerate(named or ()):
            s = by_name.get(n)
            if s is not None and s.offset < (pg[i] + 1) * PAGE and pg[i] * PAGE < s.offset + s.size:
                idx[i] = s.index
        dst = {s.name: s for s in img.sections if s.occupies_file}
        for i in np.unique(idx[idx >= 0]).tolist():
            s = src_secs[i]
            d = dst.get(s.name)
            if d is None:
                continue
            m = idx == i
            rel = (pg[m] * PAGE - s.offset).clip(0) / max(1, s.size)
            out[m] = (d.offset + (rel * d.size).astype(np.int64).clip(0, max(0, d.size - 1))) // PAGE
    notes["pages_unplaced"] = int((out < 0).sum())
    return out
