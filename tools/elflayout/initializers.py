"""Static initializers of a shared library: what it runs at load, and what that costs.

Goal: Hommey (2011) found a browser's start-up spent much of its I/O in static
initializers that touch code and data spread over the whole library before ``main``.
This lists them and, with a valgrind profile, charges each with the pages it first
touches and its time.

Definitions (glibc ``elf/dl-init.c``, ``call_init``): at load, ld.so runs the
library's ``DT_INIT`` function, then the ``DT_INIT_ARRAY`` entries in array order.
``.ctors`` (the pre-``.init_array`` scheme) is run by crtstuff's
``__do_global_ctors_aux`` from ``DT_INIT``, last entry first; modern toolchains put
constructors into ``.init_array`` and leave ``.ctors`` empty.

Steps:
1. read ``DT_INIT``, the ``DT_INIT_ARRAY`` words (the relative relocation's addend
   when the library uses RELA, the word itself with REL or RELR) and ``.ctors``;
2. name each entry with the function table (``symbols.functions``, separate debug
   file included) and the object from the profile's link-map data when present;
3. with a profile (valgrind backend): an initializer starts at the ``first`` of its
   entry function's first execution and ends where the next one starts (the last one
   at ``main`` or, for a dlopen, the end of the init phase); every page whose first
   access falls in that window is charged to it (``x``: code, ``r``/``w``: data), and
   its time is the difference of ``t`` (valgrind-dilated: compare, do not add to
   native times). An executable's initializers are also marked by the profiler (their
   first execution, ``phases.initializers``), which finds those without a function extent.
"""

from __future__ import annotations

import numpy as np

from elflayout import symbols
from elflayout.elfcore import ElfImage
from elflayout.layouts import DT_INIT, DT_INIT_ARRAY, DT_INIT_ARRAYSZ

PAGE = 4096


def _words(img: ElfImage, vaddr: int, size: int) -> np.ndarray:
    """Pointer-sized values of [vaddr, vaddr+size) as the loader sees them after relative
    relocation (RELA: the addend; REL/RELR: the word in place)."""
    w = img.wordsize
    off = img.vaddr_to_offset(vaddr)
    if off < 0 or size <= 0:
        return np.zeros(0, dtype=np.int64)
    vals = np.frombuffer(img.mm, dtype="<u8" if w == 8 else "<u4", count=size // w, offset=off).astype(np.int64)
    rtype = img.relative_type()
    for rel in img.reloc_tables().values():
        if "r_addend" not in rel.dtype.names:
            continue
        m = (rel["r_offset"] >= vaddr) & (rel["r_offset"] < vaddr + size) & (img.reloc_types(rel) == rtype)
        if m.any():
            vals[((rel["r_offset"][m] - vaddr) // w).astype(np.int64)] = rel["r_addend"][m]
    return vals


def entries(img: ElfImage) -> list[dict]:
    """Initializers in run order: ``{via, index, vaddr, offset}`` (step 1)."""
    out = []
    v = img.dt(DT_INIT)
    if v:
        out.append({"via": "DT_INIT", "index": 0, "vaddr": int(v)})
    ctors = next((s for s in img.sections if s.name == ".ctors" and s.size), None)
    if ctors is not None:
        vals = _words(img, ctors.addr, ctors.size)
        live = [int(x) for x in vals if x not in (0, -1)]  # list is framed by -1 and 0
        out += [{"via": ".ctors (from DT_INIT)", "index": i, "vaddr": x} for i, x in enumerate(reversed(live))]
    ia, sz = img.dt(DT_INIT_ARRAY), img.dt(DT_INIT_ARRAYSZ)
    if ia and sz:
        for i, x in enumerate(_words(img, ia, sz).tolist()):
            if x not in (0, -1):
                out.append({"via": "DT_INIT_ARRAY", "index": i, "vaddr": int(x)})
    for e in out:
        e["offset"] = int(img.vaddr_to_offset(e["vaddr"]))
    return out


def offsets(img: ElfImage) -> np.ndarray:
    """Sorted unique file offsets of the initializers (for phase detection)."""
    offs = np.array([e["offset"] for e in entries(img)], dtype=np.int64)
    return np.unique(offs[offs >= 0])


def describe(img: ElfImage, debug_files=(), profile_target=None) -> dict:
    """Initializers named (step 2) and, with a profile target, charged (step 3)."""
    ft = symbols.functions(img, debug_files=debug_files)
    es = entries(img)
    idx = ft.lookup(np.array([e["offset"] for e in es], dtype=np.int64)) if es else np.zeros(0, np.int64)
    for e, k in zip(es, idx.tolist()):
        sec = next((s.name for s in img.sections if s.addr <= e["vaddr"] < s.addr + s.size and s.addr), None)
        # _init in .init has no symbol in a stripped library and no FDE: name its section
        e["function"] = ft.names[k] if k >= 0 else (f"({sec})" if sec else None)
        e["code_page"] = e["offset"] // PAGE if e["offset"] >= 0 else None
        e["object"] = None
    doc = {"count": len(es), "initializers": es, "function_names_from": ft.symbol_counts.get("debug_file") or
           ("symtab" if ft.symbol_counts.get("symtab") else "dynsym/eh_frame")}
    if profile_target is not None:
        doc.update(charge(es, profile_target))
    return doc


def charge(es: list[dict], t) -> dict:
    """Pages and time of each initializer from a profile target (``profile.model.Target``)
    (step 3)."""
    by_off = {}
    for f in t.functions:
        if f.offset is not None:
            by_off.setdefault(int(f.offset), f)
    pages = [p for p in t.pages if p.first is not None]
    phases = t.phases or {}
    end_all = phases.get("main_start")
    if end_all is None:
        init_firsts = [p.first for p in pages if p.phase == "init"]
        end_all = max(init_firsts) + 1 if init_firsts else None
    # an executable's initializers are also marked by the profiler (``phases.initializers``):
    # that finds the ones with no function extent (no symbol, no FDE), as in Chromium
    marked = {int(m["offset"]): m for m in phases.get("initializers") or [] if m.get("first") is not None}
    started = []
    for e in es:
        f = by_off.get(e["offset"])
        m = marked.get(e["offset"])
        e["object"] = f.object if f else None
        if f is not None and f.first is not None:
            started.append((int(f.first), f.t, e))
        elif m is not None:
            started.append((int(m["first"]), m.get("t"), e))
        else:
            # unseen: did not run, or (no function extent, not marked) ran unrecognised
            e.update(ran=False if f is not None or e["offset"] in marked else None,
                     code_pages=0, data_pages=0, pages=0, t_s=None)
    started.sort(key=lambda x: x[0])
    # DT_INIT (_init) has no sized symbol: it starts where the profile's init phase does
    init_start = phases.get("init_start")
    if es and es[0]["via"] == "DT_INIT" and not es[0].get("ran", True) and init_start is not None \
            and (not started or init_start < started[0][0]):
        t0 = min((p.t for p in pages if p.first >= init_start and p.t is not None), default=None)
        started.insert(0, (int(init_start), t0, es[0]))
    charged = 0
    for i, (first, t0, e) in enumerate(started):
        end = started[i + 1][0] if i + 1 < len(started) else end_all
        t1 = started[i + 1][1] if i + 1 < len(started) else _t_at(pages, end)
        mine = [p for p in pages if p.first >= first and (end is None or p.first < end)]
        code = {p.page for p in mine if p.kind == "x"}
        data = {p.page for p in mine if p.kind in ("r", "w")}
        e.update(ran=True, code_pages=len(code), data_pages=len(data - code), pages=len(code | data),
                 t_s=None if t0 is None or t1 is None else round(max(t1 - t0, 0.0), 6),
                 last=i + 1 == len(started))
        charged += e["pages"]
    init_pages = {p.page for p in pages if p.phase == "init"}
    return {"ran": len(started), "pages_charged": charged, "init_phase_pages": len(init_pages),
            "time_note": "t is valgrind-dilated (50-100x): compare initializers, do not add to native times; the "
                         "last one's time runs to main (or the end of the init phase), so it includes what other "
                         "objects initialise after it"}


def _t_at(pages, first) -> float | None:
    if first is None:
        return None
    ts = [p.t for p in pages if p.first < first and p.t is not None]
    return max(ts) if ts else None
