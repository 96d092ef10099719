"""First-access ordering ("icegrind order").

Goal: place what a startup touches in the order it first touches it, packed together at
the start of each output section, so that the pages it needs are few and contiguous and
the kernel's read-around (a window around each faulting page) reads mostly wanted
bytes. Everything never touched follows in its original link order, so a cold startup
never pays for it and other workloads keep their old locality.

Citation: Mike Hommey, "Reducing Firefox startup I/O in libxul.so" (2011), which orders
libxul's objects by the first-access sequence recorded by the valgrind tool icegrind;
the same order at function granularity is what lld's ``--symbol-ordering-file`` and
gold's ``--section-ordering-file`` were added for.

Definitions:
- *first*: the global sequence number of an entry's first access in the profile (all
  kinds of events share one sequence, so code and data interleave correctly).
- *function entry*: a profiled function (name, object, first); resolved to a link name
  and its input section(s) by ``resolve.resolve``.
- *data section*: an input section outside ``.text*`` (``.rodata.X``, ``.data.rel.ro.X``,
  ``.data.X`` …), ordered only when objects were built with ``-fdata-sections``.
- *associated data*: ``.rodata.<function>``, the jump tables and switch tables GCC and
  clang put beside a function under ``-ffunction-sections``; its key is the function's
  first access, since the function reads its table the first time it switches.

Steps:
1. Function entries come in *first* order (the profile parser guarantees it).
2. Resolve every entry to link names (resolution report kept in ``Layout.report``);
   later duplicates of a link name are dropped, so each section is placed once at its
   first access.
   Code sections the profile attributes to no function (crt files' ``.text``) are
   merged in by first access, named by a symbol inside them (lld only).
3. Data sections with a recorded first access come from (a) the profile's ``sections``
   list, (b) its data ``pages`` mapped onto input section extents of the profiled build
   when the universe (a link map of that build) has them, except big sections touched
   on few of their pages (SPARSE_*). Key = the earliest first access of any page the
   extent overlaps (every overlapping extent counts, however many share a page). Pages
   first touched by the loader are left out: relocation processing writes every
   .data.rel.ro page, so those touches carry no order.
4. Associated data of each resolved function gets the function's *first* as key, unless
   step 3 gave it an earlier one (only sections the universe knows: without a link map
   the guesses would only bloat the output), and only the function's own object's
   section when the map says which objects have it: a data object of another object
   may bear the function's name (counted as ``same_name_in_other_object``).
5. Data sections are sorted by key (stable); symbols defined in them are collected for
   linkers that order by symbol (lld).
6. Objects: the profile's ``objects`` list by *first*; else the objects of the resolved
   function entries in order. Untouched objects are appended by the writer in original
   link order.
"""

from __future__ import annotations

import numpy as np

from elflayout.order.algorithms import Layout
from elflayout.order.resolve import Universe, resolve
from elflayout.pages import PAGE
from elflayout.profile.model import Target

NAME = "first-access"

# Input-section prefixes that hold code; everything else allocatable is data.
TEXT_PREFIXES = (".text",)
# Input sections ordered as data (.init/.fini/.plt are the linker's business)
DATA_PREFIXES = (".rodata", ".data", ".tdata")
# A data section of more than SPARSE_MIN_PAGES pages with fewer than SPARSE_DENSITY of
# them touched stays where it is: moving it would put its untouched bulk in the hot
# region (page-granular touches cannot tell which bytes of a shared page were read).
SPARSE_MIN_PAGES = 4
SPARSE_DENSITY = 0.5


def compute(target: Target, universe: Universe | None = None, *, data: bool = True) -> Layout:
    funcs = target.functions
    resolved, report = resolve(funcs, universe)
    # resolve() dropped duplicates, so pair by name through a dict of first values
    first_of: dict[str, float] = {}
    for f in funcs:
        first_of.setdefault(f.name, f.first)
    placed = [r for r in resolved if r.link_name is not None]

    placed, n_sec = _merge_code_sections(target, universe, placed, first_of)
    report["code_sections_without_function"] = n_sec
    layout = Layout(functions=placed, report={"algorithm": NAME, "functions": report})
    if data:
        _order_data(target, universe, placed, first_of, layout)
    layout.objects = _order_objects(target, funcs, placed)
    return layout


def _merge_code_sections(target, universe, placed, first_of):
    """Step 2b: code the profiler could attribute to an input section but to no function
    (crtbeginS.o's ``.text`` with frame_dummy, whose symbols have no size) is placed at
    its first access too, named by a symbol the link map lists in it (lld) and by its
    section and object (a GNU ld script names the file; gold cannot, see formats)."""
    from elflayout.order.resolve import Resolved, object_member, same_object

    oss = getattr(universe, "object_section_symbols", None) if universe is not None else None
    if not oss:
        return placed, 0
    by_member: dict = {}
    for (n, o), v in oss.items():
        if n.startswith(TEXT_PREFIXES) and o:
            by_member.setdefault((n, object_member(o)), []).append((o, v))
    have = {(sec, o) for r in placed for sec in r.sections for o in r.objects}
    extra = []
    for s in target.sections:
        name, obj, f = s.name, s.object, s.first
        if not name.startswith(TEXT_PREFIXES) or (name, obj) in have:
            continue
        syms = oss.get((name, obj))
        if syms is None:
            syms = next((v for o, v in by_member.get((name, object_member(obj)), ()) if same_object(o, obj)), None) if obj else None
        if not syms:
            continue
        key = f"<section {name} of {obj}>"
        first_of[key] = f
        extra.append(Resolved(key, syms[0], [name], [obj], "section"))
    if not extra:
        return placed, 0
    big = float("inf")
    merged = sorted(placed + extra, key=lambda r: first_of.get(r.name, big) if r.first is None else r.first)
    return merged, len(extra)


def _order_data(target: Target, universe, placed, first_of, layout: Layout) -> None:
    key: dict[tuple[str, str | None], float] = {}
    big = float("inf")
    # 3a. sections the profiler attributed directly
    for s in target.sections:
        if s.name.startswith(DATA_PREFIXES):
            k = (s.name, s.object)
            key[k] = min(key.get(k, big), s.first)
    # 3b. data pages of the profiled build → input section extents from its link map
    ext = getattr(universe, "extents", None) if universe is not None else None
    n_from_pages = n_sparse = 0
    sparse: dict[tuple[str, str | None], float] = {}
    inner = None
    if ext is not None and len(ext):
        for j, f, touched in _extents_touched(target, ext, universe.extent_names):
            npg = int((ext["offset"][j] + max(int(ext["size"][j]), 1) - 1) // PAGE - ext["offset"][j] // PAGE + 1)
            # a big section touched on a few of its pages (often only the page it shares
            # with a touched neighbour) would stretch the hot region by its whole size
            if npg > SPARSE_MIN_PAGES and touched < SPARSE_DENSITY * npg:
                k = (universe.extent_names[j], universe.extent_objects[j])
                if inner is None:
                    inner = _touched_pages(target)
                if _touches_inside(inner, int(ext["offset"][j]), int(ext["size"][j])):
                    sparse[k] = min(sparse.get(k, big), f)
                n_sparse += 1
                continue
            k = (universe.extent_names[j], universe.extent_objects[j])
            if f < key.get(k, big):
                key[k] = f
                n_from_pages += 1
    # 4. associated data: .rodata.<function> goes with its function
    # (only with a universe: unverified guesses would only bloat gold/ld-script files)
    # A data object may share the function's name in another object (unicodedata.o's
    # table code_hash, codeobject.o's function code_hash): only the function's own object's
    # section goes with it, when the link says which objects have the section
    from elflayout.order.resolve import same_object

    known = universe.sections if universe is not None else set()
    owners = _section_owners(universe) if known else {}
    n_assoc = n_other = 0
    for r in placed if known else ():
        f = first_of.get(r.name)
        for nm in (".rodata." + r.link_name,):
            if nm not in known:
                continue
            objs = owners.get(nm)
            if objs:
                mine = [o for o in objs if any(same_object(o, ro) for ro in r.objects)]
                if not mine:
                    n_other += 1
                    continue
                k = (nm, mine[0] if len(objs) > 1 else None)
            else:
                k = (nm, None)
            fk = f if f is not None else big
            if fk < key.get(k, big):
                key[k] = fk
                n_assoc += 1
    # 5. sort; stable on insertion order for equal keys. The linker's own input (lld's
    # "<internal>" pools of merged strings and constants, named after their first input
    # section since lld 15) is no input section a script can name: "*(.rodata.str1.1)"
    # would move every object's strings into the hot pool, read whole (arm64 libLLVM: +137 pages)
    linker_made = [k for k in key if k[1] and k[1].startswith("<")]
    for k in linker_made:
        del key[k]
    items = sorted(key.items(), key=lambda kv: kv[1])
    layout.data = [k for k, _ in items]
    layout.data_sparse = [k for k, _ in sorted(sparse.items(), key=lambda kv: kv[1])
                          if k not in key and not (k[1] and k[1].startswith("<"))]
    syms = []
    if universe is not None:
        by_sec = getattr(universe, "section_symbols", {})
        for name, _obj in layout.data:
            syms.extend(by_sec.get(name, ())[:1])  # one symbol moves the section
    layout.data_symbols = list(dict.fromkeys(syms))
    layout.report["data"] = {"sections": len(layout.data), "from_pages": n_from_pages,
                             "associated": n_assoc, "same_name_in_other_object": n_other,
                             "sparse_left_in_place": n_sparse, "linker_made_left_in_place": len(linker_made),
                             "symbols_for_lld": len(layout.data_symbols)}


def _section_owners(universe) -> dict[str, set[str]]:
    """Input section name → the objects the link map lists it in (extents, or sections
    that define symbols)."""
    out: dict[str, set[str]] = {}
    for n, o in zip(universe.extent_names, universe.extent_objects):
        if o:
            out.setdefault(n, set()).add(o)
    for n, o in getattr(universe, "object_section_symbols", {}):
        if o:
            out.setdefault(n, set()).add(o)
    return out


def _order_objects(target: Target, funcs, placed) -> list[str]:
    objs = [o.object for o in target.objects]
    if not objs:
        objs = [f.object for f in funcs]
        objs += [o for r in placed for o in r.objects]
    return list(dict.fromkeys(o for o in objs if o))


def _touched_pages(target: Target) -> np.ndarray:
    """Sorted distinct data pages touched after the loader phase."""
    return np.unique(np.array([p.page for p in target.pages if p.kind in ("r", "w", "t") and p.phase != "loader"],
                              dtype=np.int64))


def _touches_inside(pages: np.ndarray, offset: int, size: int) -> bool:
    """Whether a touched page lies wholly inside [offset, offset + size): a page the
    section shares with a neighbour may have been touched for the neighbour alone."""
    first, last = -(-offset // PAGE), (offset + size) // PAGE - 1
    return first <= last and bool(np.searchsorted(pages, last, side="right") > np.searchsorted(pages, first))


def _bytes_read(runs: np.ndarray, ext, names, hit: np.ndarray) -> np.ndarray:
    """Which extents of ``hit`` are data loads read, when the profile recorded the
    read-only data byte by byte (``profile --strings``): a read-only extent on a touched
    page counts only if a loaded byte lies in it (a page holds many small tables and
    strings; one read made all of them hot); other extents keep the page rule."""
    off = ext["offset"][hit].astype(np.int64)
    end = off + ext["size"][hit].astype(np.int64)
    ro = np.array([names[j].startswith(".rodata") for j in hit.tolist()], dtype=bool)
    if not runs.size:
        return ~ro
    k = np.searchsorted(runs[:, 0], end, side="left") - 1   # last run starting before the end
    read = (k >= 0) & (runs[np.clip(k, 0, None), 0] + runs[np.clip(k, 0, None), 1] > off)
    return ~ro | read


def _extents_touched(target: Target, ext, names) -> list[tuple[int, float, int]]:
    """Step 3b: (extent index, earliest first, distinct pages touched) of every data
    extent that overlaps a data page touched after the loader phase.

    ld.so's relocation pass writes every .data.rel.ro page whatever the order: only
    touches after it (phases init/main) say which data the program needs first. Exact for
    any number of extents per page: each extent's page range is looked up in the sorted
    touched pages, and the earliest first over that range is a segmented minimum."""
    pages = [p for p in target.pages if p.kind in ("r", "w", "t") and p.phase != "loader"]
    if not pages:
        return []
    pg = np.array([p.page for p in pages], dtype=np.int64)
    fi = np.array([p.first for p in pages], dtype=np.float64)
    tp, inv = np.unique(pg, return_inverse=True)  # touched pages, sorted
    tf = np.full(tp.size, np.inf)
    np.minimum.at(tf, inv, fi)  # earliest first per page
    starts = ext["offset"] // PAGE
    ends = (ext["offset"] + np.maximum(ext["size"], 1) - 1) // PAGE
    lo = np.searchsorted(tp, starts, side="left")
    hi = np.searchsorted(tp, ends, side="right")
    text = np.array([n.startswith(TEXT_PREFIXES) for n in names], dtype=bool)
    hit = np.flatnonzero((hi > lo) & ~text)
    runs = target.rodata_read()
    if runs is not None and hit.size:
        hit = hit[_bytes_read(runs, ext, names, hit)]
    if not hit.size:
        return []
    # min of tf[lo:hi] per extent: reduceat over (lo, hi) pairs, even results; a sentinel
    # keeps hi == len(tp) a valid index
    tfs = np.append(tf, np.inf)
    mins = np.minimum.reduceat(tfs, np.stack([lo[hit], hi[hit]], axis=1).ravel())[::2]
    return list(zip(hit.tolist(), mins.tolist(), (hi[hit] - lo[hit]).tolist()))
