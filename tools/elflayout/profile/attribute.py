"""Raw first-access events of one target → functions, sections, objects, pages.

Address → function: ``elflayout.symbols`` (symtab, dynsym, then ``.eh_frame`` FDE
extents, so stripped libraries still get function boundaries). Function/address →
input section and object file: ``elflayout.linkmap`` (GNU ld, gold, lld, mold maps),
when ``--map`` is given. Address → ELF output section: the section headers.

Phases (valgrind backend): ``loader`` until the first execution of one of the target's
ELF initialisers (DT_INIT, DT_INIT_ARRAY entries), ``init`` from then until the main
executable's first instruction (ld.so hands over after running the initialisers of
the libraries loaded at start-up), ``main`` afterwards. A target opened later by
dlopen gets ``loader`` then ``main`` (its initialisers run inside main).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from elftools.common.exceptions import DWARFError, ELFError

from elflayout import symbols
from elflayout.elfcore import PAGE, ElfImage
from elflayout import initializers
from elflayout.pages import expand
from elflayout.profile.model import EVENT_DTYPE

PHASE_NAMES = np.array(["loader", "init", "main"], dtype=object)


def init_entries(img: ElfImage) -> np.ndarray:
    """File offsets of the target's ELF initialisers (DT_INIT, .ctors, DT_INIT_ARRAY entries)."""
    return initializers.offsets(img)


def phases(events: np.ndarray, init_offsets: np.ndarray, entry_seq: int | None,
           first_map_seq: int | None = None) -> tuple[np.ndarray, dict]:
    """Phase index (0 loader, 1 init, 2 main) per event, and the boundaries used."""
    x = events[events["kind"] == b"x"]
    init_seq = None
    if init_offsets.size and x.size:
        lo, hi = x["offset"], x["offset"] + x["length"]
        k = np.searchsorted(init_offsets, lo, side="left")
        hit = (k < init_offsets.size) & (init_offsets[np.clip(k, 0, init_offsets.size - 1)] < hi)
        if hit.any():
            init_seq = int(x["seq"][hit].min())
    main_seq = entry_seq
    dlopened = entry_seq is not None and first_map_seq is not None and first_map_seq > entry_seq
    seq = events["seq"]
    ph = np.full(seq.shape, 2, dtype=np.int8)
    if dlopened:
        if init_seq is not None:
            ph[seq < init_seq] = 0
    else:
        if main_seq is not None:
            ph[seq < main_seq] = 1
        if init_seq is not None:
            ph[seq < init_seq] = 0
        elif main_seq is not None:
            ph[seq < main_seq] = 0
    return ph, {"init_start": init_seq, "main_start": main_seq, "dlopened": dlopened}


def _first_per_key(keys: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Indices of the earliest (by seq) row for each distinct key, in first-access order."""
    if keys.size == 0:
        return np.zeros(0, dtype=np.int64)
    o = np.lexsort((seq, keys))
    k = keys[o]
    first = np.ones(k.size, dtype=bool)
    first[1:] = k[1:] != k[:-1]
    idx = o[first]
    return idx[np.argsort(seq[idx], kind="stable")]


def _explode_runs(start: np.ndarray, end: np.ndarray, table_start: np.ndarray, table_end: np.ndarray):
    """Pairs (run index, table index) for every table extent intersecting a run [start, end)."""
    if start.size == 0 or table_start.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    si = np.searchsorted(table_start, start, side="right") - 1
    ei = np.searchsorted(table_start, end - 1, side="right") - 1
    si = np.clip(si, 0, None)
    cnt = np.where(ei >= si, ei - si + 1, 0)
    run = np.repeat(np.arange(start.size), cnt)
    base = np.repeat(np.cumsum(cnt) - cnt, cnt)
    tab = si[run] + (np.arange(run.size) - base)
    ok = (table_start[tab] < end[run]) & (table_end[tab] > start[run])
    return run[ok], tab[ok]


def dwarf_units(img: ElfImage, warnings: list | None = None):
    """(start offsets, end offsets, names) of DWARF compile units, sorted; None without DWARF.

    Used as objects when no link map is given: a CU is one compiled source file (its
    DW_AT_name; a split-DWARF skeleton's DW_AT_dwo_name). ``.debug_aranges`` is used for the
    CUs it lists (fast), each other CU's top DIE (low_pc/high_pc or DW_AT_ranges) for the rest.
    """
    try:
        if not img.elf.has_dwarf_info() or img.section(".debug_info") is None:
            return None
        dw = img.elf.get_dwarf_info()
        ranges = []  # (vaddr, end, name)
        names = {}

        def cu_name(cu):
            if cu.cu_offset not in names:
                at = cu.get_top_DIE().attributes
                a = at.get("DW_AT_name") or at.get("DW_AT_dwo_name") or at.get("DW_AT_GNU_dwo_name")
                names[cu.cu_offset] = a.value.decode(errors="replace") if a else f"cu@{cu.cu_offset:#x}"
            return names[cu.cu_offset]

        ar = dw.get_aranges() if img.section(".debug_aranges") is not None else None
        covered = set()
        if ar is not None:
            for e in ar.entries:
                if e.length:
                    ranges.append((e.begin_addr, e.begin_addr + e.length, cu_name(dw.get_CU_at(e.info_offset))))
                    covered.add(e.info_offset)
        # CUs .debug_aranges leaves out (clang writes it for assembly sources only): their top DIE
        if ar is None or _cus_left(dw, covered):
            rl = dw.range_lists()
            for cu in dw.iter_CUs():
                if cu.cu_offset not in covered:
                    ranges += [(lo, hi, cu_name(cu)) for lo, hi in _cu_extents(cu, rl)]
    except (ELFError, DWARFError, KeyError, ValueError, AssertionError, IndexError) as e:
        # damaged or unusual DWARF: objects are optional, but the profile says why it has none
        if warnings is not None:
            warnings.append(f"DWARF compile units unreadable ({type(e).__name__}: {e}): no objects without --map")
        return None
    if not ranges:
        return None
    v = np.array([r[0] for r in ranges], dtype=np.uint64)
    n = np.array([r[1] - r[0] for r in ranges], dtype=np.int64)
    o = img.vaddr_to_offset(v)
    ok = o >= 0
    order = np.flatnonzero(ok)[np.argsort(o[ok], kind="stable")]
    return o[order], o[order] + n[order], [ranges[i][2] for i in order.tolist()]


def _cus_left(dw, covered: set) -> bool:
    """Whether some compile unit has no .debug_aranges entry (header walk only)."""
    return any(cu.cu_offset not in covered for cu in dw.iter_CUs())


def _cu_extents(cu, rl) -> list[tuple[int, int]]:
    """[begin, end) addresses of one CU from its top DIE: low_pc/high_pc, or DW_AT_ranges
    (DWARF 4 .debug_ranges offsets from the CU's base; DWARF 5 entries pyelftools marks
    absolute, e.g. clang's DW_RLE_startx_length, are addresses already)."""
    at = cu.get_top_DIE().attributes
    if "DW_AT_low_pc" in at and "DW_AT_high_pc" in at:
        lo, hi = at["DW_AT_low_pc"].value, at["DW_AT_high_pc"]
        end = hi.value if hi.form == "DW_FORM_addr" else lo + hi.value
        return [(lo, end)] if end > lo else []
    if "DW_AT_ranges" not in at or rl is None:
        return []
    base = at["DW_AT_low_pc"].value if "DW_AT_low_pc" in at else 0
    out = []
    for r in rl.get_range_list_at_offset(at["DW_AT_ranges"].value, cu=cu):
        if not hasattr(r, "begin_offset"):     # a base-address entry
            base = r.base_address
        elif r.end_offset > r.begin_offset:
            add = 0 if getattr(r, "is_absolute", False) else base
            out.append((add + r.begin_offset, add + r.end_offset))
    return out


def _r6(x) -> float:
    return round(float(x), 6)


@dataclass
class _Run:
    """One target's events in sequence order, and what attribution needs of them."""
    ev: np.ndarray
    ph: np.ndarray | None
    xm: np.ndarray  # indices of code runs
    xs: np.ndarray  # their [start, end) file offsets
    xe: np.ndarray
    out_names: list

    def out_name(self, i: int):
        return self.out_names[i] if i >= 0 else None

    def phase_of(self, i: int):
        return None if self.ph is None else PHASE_NAMES[self.ph[i]]

    def when(self, e: int) -> dict:
        return {"first": int(self.ev["seq"][e]), "phase": self.phase_of(e), "t": _r6(self.ev["t"][e])}


def build_target(img: ElfImage, events: np.ndarray, *, functions=None, linkmap=None, phase_idx=None,
                 map_path=None) -> tuple[dict, dict]:
    """The profile's target entry for ``img`` from its events (EVENT_DTYPE, any order).

    Returns (target dict, stats dict); ``stats["warnings"]`` lists what could not be
    attributed and why. ``functions`` is a ``symbols.FunctionTable`` (computed when
    None); ``linkmap`` a parsed and attached ``LinkMap`` or None. Steps: 1. sort the
    events; 2. code runs → functions; 3. → input sections and objects (link map, else
    DWARF units, else output sections); 4. pages; 5. reads and fault-around windows.
    """
    assert events.dtype == EVENT_DTYPE
    order = np.argsort(events["seq"], kind="stable")
    ev = events[order]
    xm = np.flatnonzero(ev["kind"] == b"x")
    xs = ev["offset"][xm]
    run = _Run(ev, phase_idx[order] if phase_idx is not None else None, xm, xs,
               xs + np.maximum(ev["length"][xm], 1), [s.name for s in img.sections])
    ft = functions if functions is not None else symbols.functions(img)
    warnings: list[str] = []
    cus = dwarf_units(img, warnings) if linkmap is None else None

    tgt = img.identity()
    tgt["map"] = str(map_path) if map_path else None
    funs, covered = _functions(run, img, ft, linkmap, cus)
    sections, objects = _sections_objects(run, img, linkmap, cus)
    pages, data_objects = _pages(run, img, linkmap)
    reads, windows = _extents(run, b"a"), _extents(run, b"m")

    tgt.update(functions=funs, sections=sections, objects=objects, pages=pages, reads=reads)
    if windows or reads:
        tgt["windows"] = windows
    if data_objects:
        tgt["data_objects"] = data_objects
    stats = {
        "code_runs": int(xm.size),
        "code_runs_outside_functions": int((~covered).sum()),
        "functions": len(funs),
        "functions_named": sum(1 for f in funs if f["source"] != "eh_frame"),
        "function_table": ft.counts(),
        "pages": {k: sum(1 for p in pages if p["kind"] == k) for k in "xrwt"},
        "reads": len(reads),
    }
    tgt["stats"] = stats
    return tgt, {**stats, "warnings": warnings}


def _functions(run: _Run, img: ElfImage, ft, linkmap, cus) -> tuple[list[dict], np.ndarray]:
    """Step 2: each function's first execution; and which code runs fell in a function."""
    ev, xm = run.ev, run.xm
    fst, fen = ft.offset, ft.offset + np.maximum(ft.size, 1)
    rix, fidx = _explode_runs(run.xs, run.xe, fst, fen)
    pick = _first_per_key(fidx, ev["seq"][xm][rix])
    fsel = fidx[pick]
    fev = xm[rix[pick]]  # event index of each function's first execution
    covered = np.zeros(xm.size, dtype=bool)
    covered[rix] = True
    cu_of_fun = None
    if cus is not None and fsel.size:
        fo = ft.offset[fsel]
        k = np.searchsorted(cus[0], fo, side="right") - 1
        kc = np.clip(k, 0, None)
        cu_of_fun = np.where((k >= 0) & (fo < cus[1][kc]), k, -1)
    lm_sec = linkmap.lookup_offsets(ft.offset[fsel]) if linkmap is not None and fsel.size else None
    fout = img.section_of_offsets(ft.offset[fsel]) if fsel.size else np.zeros(0, np.int64)
    funs = []
    for j in range(fsel.size):
        f, e = int(fsel[j]), int(fev[j])
        d = {"name": ft.names[f], "offset": int(ft.offset[f]), "size": int(ft.size[f])}
        osec = run.out_name(int(fout[j]))
        if lm_sec is not None and lm_sec[j] >= 0:
            s = int(lm_sec[j])
            d["section"], d["object"] = linkmap.name[s], linkmap.object[s]
        else:
            d["section"], d["object"] = osec, None
            if cu_of_fun is not None and cu_of_fun[j] >= 0:
                d["object"] = cus[2][int(cu_of_fun[j])]
        d["output_section"] = osec
        d["source"] = symbols.SOURCES[int(ft.source[f])]
        d.update(run.when(e))
        funs.append(d)
    return funs, covered


def _sections_objects(run: _Run, img: ElfImage, linkmap, cus) -> tuple[list[dict], list[dict]]:
    """Step 3: first execution of each input section and object (link map), else of each
    DWARF compile unit as an object and each output section."""
    ev, xm = run.ev, run.xm
    sections, objects = [], []
    if not xm.size:
        return sections, objects
    if linkmap is not None:
        rix, sidx = _explode_runs(run.xs, run.xe, *_lm_extents(linkmap))
        sidx = _lm_order(linkmap)[sidx] if sidx.size else sidx
        for p in _first_per_key(sidx, ev["seq"][xm][rix]):
            s, e = int(sidx[p]), int(xm[rix[p]])
            sections.append({"name": linkmap.name[s], "object": linkmap.object[s], "output_section": linkmap.output[s],
                             **run.when(e)})
        seen = {}
        for s in sections:
            if s["object"] not in seen:
                seen[s["object"]] = {"object": s["object"], "first": s["first"], "phase": s["phase"], "t": s["t"]}
        return sections, list(seen.values())
    if cus is not None:
        rix, cidx = _explode_runs(run.xs, run.xe, cus[0], cus[1])
        seen = {}
        for p in _first_per_key(cidx, ev["seq"][xm][rix]):
            name = cus[2][int(cidx[p])]
            if name not in seen:
                seen[name] = {"object": name, **run.when(int(xm[rix[p]])), "from": "dwarf"}
        objects = list(seen.values())
    so = img.section_of_offsets(run.xs)
    for p in _first_per_key(so, ev["seq"][xm]):
        name = run.out_name(int(so[p]))
        sections.append({"name": name, "object": None, "output_section": name, **run.when(int(xm[p]))})
    return sections, objects


# page key = page * 4 + kind code, so one sort finds each (page, kind)'s first access
_PAGE_KINDS = "xrwt"


def _pages(run: _Run, img: ElfImage, linkmap) -> tuple[list[dict], list[dict]]:
    """Step 4: first access of each (page, kind): code pages from the runs (every page a
    run spans), data pages from r/w/t events; with a link map, each object's first data
    access (valgrind --data records the exact address of a page's first access)."""
    ev, xm = run.ev, run.xm
    pk, pseq, pev = [], [], []
    if xm.size:
        p0, p1 = run.xs // PAGE, (run.xe - 1) // PAGE
        cnt = p1 - p0 + 1
        r = np.repeat(np.arange(xm.size), cnt)
        pk.append(expand(p0, cnt) * 4 + 0)
        pseq.append(ev["seq"][xm][r])
        pev.append(xm[r])
    for code, kind in ((1, b"r"), (2, b"w"), (3, b"t")):
        m = np.flatnonzero(ev["kind"] == kind)
        if m.size:
            pk.append(ev["offset"][m] // PAGE * 4 + code)
            pseq.append(ev["seq"][m])
            pev.append(m)
    if not pk:
        return [], []
    keys, seqs, evs = np.concatenate(pk), np.concatenate(pseq), np.concatenate(pev)
    sel = _first_per_key(keys, seqs)
    first_off = ev["offset"][evs[sel]]
    psec = img.section_of_offsets(first_off)
    pages = []
    for j, p in enumerate(sel):
        e = int(evs[p])
        pages.append({"page": int(keys[p] // 4), "kind": _PAGE_KINDS[int(keys[p] % 4)], "first": int(seqs[p]),
                      "section": run.out_name(int(psec[j])), "phase": run.phase_of(e), "t": _r6(ev["t"][e])})
    data_objects = []
    dm = np.isin(keys[sel] % 4, (1, 2)) if linkmap is not None else np.zeros(0, bool)
    if dm.any():
        ls = linkmap.lookup_offsets(first_off[dm])
        seen = {}
        for j, s in zip(np.flatnonzero(dm).tolist(), ls.tolist()):
            if s >= 0 and linkmap.object[s] not in seen:
                seen[linkmap.object[s]] = {"object": linkmap.object[s], "first": pages[j]["first"],
                                           "kind": pages[j]["kind"], "phase": pages[j]["phase"]}
        data_objects = list(seen.values())
    return pages, data_objects


def _extents(run: _Run, kind: bytes) -> list[dict]:
    """Step 5 (trace backend): folios added to the page cache (``a``) or fault-around
    windows mapped (``m``), in order."""
    ev = run.ev
    return [{"page": int(ev["offset"][e] // PAGE), "npages": int(max(1, ev["length"][e] // PAGE)),
             "first": int(ev["seq"][e]), "t": _r6(ev["t"][e])} for e in np.flatnonzero(ev["kind"] == kind).tolist()]


def _lm_order(lm):
    keep = np.flatnonzero((lm.size > 0) & (lm.offset >= 0))
    return keep[np.argsort(lm.offset[keep], kind="stable")]


def _lm_extents(lm):
    o = _lm_order(lm)
    return lm.offset[o], lm.offset[o] + lm.size[o]
