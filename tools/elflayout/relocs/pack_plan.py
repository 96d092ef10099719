"""pack-relocs, steps 4-7: the packed file as a list of patches, computed without writing
(pack.py describes the whole algorithm; pack_input.py holds steps 1-3).

Layout of the rewritten range, the dynamic array, moved symbols and headers; the self
form also places its applier (selfapply.py) after the code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from elflayout import elfcore
from elflayout import layouts as L
from elflayout.arch import cut_granule
from elflayout.errors import ElflayoutError
from elflayout.relocs import notes, selfapply
from elflayout.relocs.pack_cut import MIN_CUT_PAGES
from elflayout.relocs.pack_input import FORMS, _fail, _Input, _read, _Selection, _select, _version_need, _VersionNeed, validate

EXTRA_DYN_SLOTS = 4  # spare DT_NULLs left in a rebuilt dynamic array for later tools
ELF64_ALIGN = 8  # sh_addralign of RELA tables and section headers (the numpy records are packed: .alignment is 1)
PAGE = elfcore.PAGE
READAROUND_BEFORE = 64 * 1024  # a page fault reads half of Linux's default 128 KiB window before it


@dataclass
class Plan:
    """Everything to change in a copy of the input, computed without writing."""
    path: str
    size: int
    addend_offsets: np.ndarray          # file offsets of (word-aligned) target words to store addends in
    addend_values: np.ndarray           # uint64
    blocks: list = field(default_factory=list)  # (file offset, bytes) patches
    truncate_at: int | None = None      # new tail (section names + headers) from here
    tail: bytes = b""
    stats: dict = field(default_factory=dict)
    free_range: tuple | None = None     # [lo, hi) file offsets of the freed, zeroed bytes


@dataclass
class _Layout:
    run_start: int
    rela_end: int
    blk: np.ndarray          # new bytes of [run_start, rela_end)
    moved: dict              # section index -> (new offset, new size)
    vshift: int              # vaddr - offset inside the run's PT_LOAD
    new_rela_off: int
    kept_bytes: bytes
    relr_off: int
    end: int                 # first free byte after the kept relocations and RELR
    freed: int               # bytes of the rewritten range nothing uses (zeroed)
    reserve: int = 0         # zero bytes left after the program header table for new entries


def _phdr_table_end(inp: _Input) -> int:
    return int(inp.img.elf.header["e_phoff"]) + inp.phdrs.nbytes


def _phdr_reserve(inp: _Input, alloc, freed: int) -> int:
    """Bytes to leave after the program header table for the entry the cut of the freed
    pages adds (``cut_freed_pages``): one entry when the table has no room after it and no
    PT_PHDR to give its place (GNU ld's libraries), else 0; only when
    the ``freed`` bytes will hold whole pages to cut (the RELR table takes a few)."""
    if np.any(inp.phdrs["p_type"] == L.PT_PHDR) or freed < (MIN_CUT_PAGES + 2) * PAGE:
        return 0
    end = _phdr_table_end(inp)
    nxt = min([o for o, _ in alloc if o >= end], default=end)
    return L.PHDR64.itemsize if nxt - end < L.PHDR64.itemsize else 0


# Segments describing one section (or a run of notes) that slide with it: _headers moves them.
SLIDING_SEGMENTS = (L.PT_NOTE, L.PT_INTERP, L.PT_GNU_PROPERTY)


def _interp_sections(inp: _Input) -> set:
    """Sections exactly covered by PT_INTERP: the path string, read by its segment only."""
    spans = {(int(p["p_offset"]), int(p["p_filesz"])) for p in inp.phdrs if p["p_type"] == L.PT_INTERP}
    return {i for i, s in enumerate(inp.shdrs) if s["sh_type"] == L.SHT_PROGBITS
            and not s["sh_flags"] & L.SHF_WRITE and (int(s["sh_offset"]), int(s["sh_size"])) in spans}


def _alloc(inp: _Input) -> list:
    """(file offset, index) of the allocated sections with bytes in the file."""
    return [(int(s["sh_offset"]), i) for i, s in enumerate(inp.shdrs)
            if s["sh_flags"] & L.SHF_ALLOC and s["sh_type"] != L.SHT_NOBITS and s["sh_size"] > 0]


def _slide_start(inp: _Input, sel: _Selection, alloc, run_start: int, rela_end: int, strict: bool) -> int | None:
    """Where a run sliding right after the program header table starts, or None when it
    may not slide: every section in it must sit at the address its offset maps to
    (damaged headers do not); ``strict`` (room for the rewrite's own entries) also
    ``_slide_blocked``."""
    rela_off = inp.sh(inp.sec[".rela.dyn"], "sh_offset")
    start = min([o for o, _ in alloc if o >= _phdr_table_end(inp)] + [run_start])
    load = next((p for p in inp.phdrs if p["p_type"] == L.PT_LOAD
                 and p["p_offset"] <= start and rela_end <= p["p_offset"] + p["p_filesz"]), None)
    if load is None or any(inp.sh(i, "sh_addr") - o != int(load["p_vaddr"]) - int(load["p_offset"])
                           for o, i in alloc if start <= o < rela_off):
        return None
    if strict and _slide_blocked(inp, sel, alloc, start, rela_off):
        return None
    return start


def _slide_blocked(inp: _Input, sel: _Selection, alloc, lo: int, hi: int) -> bool:
    """True when the file range ``[lo, hi)`` cannot slide: a section there that may not
    move, or a relocation's addend pointing into it (a pointer to a note or to the
    interpreter path would go stale)."""
    interp = _interp_sections(inp)
    for o, i in alloc:
        s = inp.shdrs[i]
        if lo <= o < hi and i not in interp and (s["sh_flags"] & L.SHF_WRITE or int(s["sh_type"])
                                                 not in L.MOVABLE_TYPES | {L.SHT_NOTE}):
            return True
        if lo <= o < hi and s["sh_type"] == L.SHT_NOTE and \
                notes.slide_problem(inp.section_bytes(i), inp.sh(i, "sh_addralign")):
            return True
    load = next((p for p in inp.phdrs if p["p_type"] == L.PT_LOAD
                 and p["p_offset"] <= lo and hi <= p["p_offset"] + p["p_filesz"]), None)
    if load is None:
        return True
    v = int(load["p_vaddr"]) - int(load["p_offset"])
    a = sel.rel["r_addend"].astype(np.int64)
    return bool(np.any((a >= lo + v) & (a < hi + v)))


def _layout(inp: _Input, sel: _Selection, vn: _VersionNeed, cut: bool = True, entries: int = 0) -> _Layout:
    """Step 4: the run slid forward, then the kept relocations and the RELR table.
    ``entries``: program headers to make room for after the table (``_phdr_need``), by
    sliding everything between it and .rela.dyn (the interpreter path and notes too)."""
    img, shdrs, names = inp.img, inp.shdrs, inp.names
    rela_i = inp.sec[".rela.dyn"]
    rela_off = inp.sh(rela_i, "sh_offset")
    rela_end = rela_off + inp.sh(rela_i, "sh_size")
    alloc = _alloc(inp)
    run_start = min([inp.sh(i, "sh_offset") for i in vn.grow] + [rela_off])

    def load_of(start):  # the PT_LOAD holding the run from ``start`` to the end of .rela.dyn
        return next((p for p in inp.phdrs if p["p_type"] == L.PT_LOAD
                     and p["p_offset"] <= start and rela_end <= p["p_offset"] + p["p_filesz"]), None)

    reserve = _phdr_reserve(inp, alloc, int(sel.packable.sum()) * L.RELA64.itemsize) if cut else 0
    reserve = max(reserve, entries * L.PHDR64.itemsize)
    if reserve:  # the run starts right after the program headers and leaves room
        start = _slide_start(inp, sel, alloc, run_start, rela_end, bool(entries))
        if start is None:
            reserve = 0
        else:
            run_start = start
    in_run = sorted((o, i) for o, i in alloc if run_start <= o < rela_off)
    load = load_of(run_start)
    if load is None:
        _fail(img, "cannot grow the version tables in place: they and .rela.dyn are not in one PT_LOAD")
    movable = L.MOVABLE_TYPES | ({L.SHT_NOTE} if reserve else set())  # PT_NOTE follows its note (_headers)
    interp = _interp_sections(inp) if reserve else set()  # so does PT_INTERP
    for o, i in in_run:
        if i in interp:
            continue
        if int(shdrs[i]["sh_type"]) not in movable or (shdrs[i]["sh_flags"] & L.SHF_WRITE):
            _fail(img, f"cannot grow .dynstr/.gnu.version_r in place: section {names[i]} lies between them "
                       "and .rela.dyn and is not a dynamic-linking table that may move")
    spans = []  # extents of adjacent note sections in the run: a PT_NOTE may cover several
    for o, i in in_run:
        if shdrs[i]["sh_type"] == L.SHT_NOTE:
            end = o + inp.sh(i, "sh_size")
            if spans and o <= L.align_up(spans[-1][1], 8):
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([o, end])
    spans += [[inp.sh(i, "sh_offset"), inp.sh(i, "sh_offset") + inp.sh(i, "sh_size")] for i in interp]
    for p in inp.phdrs:  # a note/eh_frame segment inside the run would lose its bytes
        if p["p_type"] not in (L.PT_LOAD, L.PT_PHDR) and p["p_filesz"] and \
                p["p_offset"] < rela_end and p["p_offset"] + p["p_filesz"] > run_start and \
                not (p["p_type"] in SLIDING_SEGMENTS and any(a <= p["p_offset"] and p["p_offset"] + p["p_filesz"] <= b
                                                             for a, b in spans)):
            _fail(img, f"cannot rewrite the tables: segment type {int(p['p_type']):#x} overlaps them")
    # Addends go into target words; none may sit in the bytes rewritten here.
    tf = sel.tgt_file[sel.packable]
    if np.any((tf >= run_start) & (tf < rela_end)) or \
            np.any((tf >= inp.dyn.offset) & (tf < inp.dyn.offset + inp.dyn.array.nbytes)):
        _fail(img, "a RELATIVE relocation targets the dynamic-linking tables themselves; refusing to pack")
    blk = np.zeros(rela_end - run_start, np.uint8)
    moved = {}
    cur = run_start + reserve
    for o, i in in_run:
        content = vn.grow.get(i)
        if content is None:
            content = inp.section_bytes(i)
        new = L.align_up(cur, inp.sh(i, "sh_addralign"))
        if new + len(content) > rela_end:
            _fail(img, "not enough space freed in .rela.dyn to grow the version tables")
        moved[i] = (new, len(content))
        blk[new - run_start:new - run_start + len(content)] = np.frombuffer(content, np.uint8)
        cur = new + len(content)
    new_rela_off = L.align_up(cur, ELF64_ALIGN)
    kept_bytes = sel.kept.tobytes()
    if inp.form == "self" and not cut and len(kept_bytes) + sel.relr.nbytes <= READAROUND_BEFORE:
        # Freed pages kept: at the end of the freed space, next to .rela.plt/.plt, whose
        # faults read the pages before them anyway: the self form keeps more RELA (TLS,
        # exported data), which at the front pulls one more readahead window of zeros
        # (docs/relocation-packing.md). Larger tables gain nothing there and lose a window
        # at their start. Cut (step 8), there are no zeros to read.
        new_rela_off = max(new_rela_off, (rela_end - len(kept_bytes) - sel.relr.nbytes) // 8 * 8)
    relr_off = new_rela_off + len(kept_bytes)
    end = relr_off + sel.relr.nbytes
    if end > rela_end:
        _fail(img, f"not enough space freed in .rela.dyn ({rela_end - run_start} bytes available, "
                   f"{end - run_start} needed)")
    blk[new_rela_off - run_start:relr_off - run_start] = np.frombuffer(kept_bytes, np.uint8)
    blk[relr_off - run_start:end - run_start] = sel.relr.view(np.uint8)
    return _Layout(run_start, rela_end, blk, moved, int(load["p_vaddr"]) - int(load["p_offset"]),
                   new_rela_off, kept_bytes, relr_off, end,
                   rela_end - end + new_rela_off - L.align_up(cur, ELF64_ALIGN), reserve)


@dataclass
class _Applier:
    off: int                 # file offset of the blob (block + routine)
    entry: int               # link-time address of the routine (DT_INIT or the DT_PREINIT_ARRAY entry)
    data: bytes
    seg: int | None          # program header extended to cover it; None: a new R+X PT_LOAD holds it
    relro: tuple             # (page, length) mprotect'ed around the application


@dataclass
class _SelfPlaces:
    """Self form: where the routine goes, and for an executable its preinit entry.

    The routine goes after the executable PT_LOAD, inside its last page, when the file
    has room there (``room``: (program header index, file offset)); else (lld ends the
    code on a page boundary) in a new R+X PT_LOAD after the last segment (``x``: (address,
    offset)). An executable's routine runs as the first DT_PREINIT_ARRAY entry; ld.so
    relocates that word (a RELATIVE relocation kept for it), so it lies in writable memory:
    after the dynamic array in the new RW PT_LOAD (``rw``), which follows."""
    room: tuple | None
    x: tuple | None
    rw: tuple | None
    entry: int
    preinit: int | None      # link-time address of the DT_PREINIT_ARRAY entry


def _applier_room(inp: _Input, size: int) -> tuple | None:
    """(program header index, file offset) of ``size`` free bytes after the executable
    PT_LOAD, inside its last page (the mapping covers that page already), or None."""
    ph = inp.phdrs
    xs = np.flatnonzero((ph["p_type"] == L.PT_LOAD) & (ph["p_flags"] & L.PF_X != 0))
    if xs.size != 1 or ph[int(xs[0])]["p_filesz"] != ph[int(xs[0])]["p_memsz"]:
        return None
    k = int(xs[0])
    g = ph[k]
    end = int(g["p_offset"] + g["p_filesz"])
    at = L.align_up(end, 16)
    limit = (end + PAGE - 1) // PAGE * PAGE
    vshift = int(g["p_vaddr"]) - int(g["p_offset"])
    for i, q in enumerate(ph):  # nothing else may live there, in the file or in memory
        if i != k and q["p_type"] == L.PT_LOAD:
            if int(q["p_offset"]) >= end:
                limit = min(limit, int(q["p_offset"]))
            if int(q["p_vaddr"]) >= end + vshift:
                limit = min(limit, int(q["p_vaddr"]) - vshift)
    for s in inp.shdrs:
        if s["sh_flags"] & L.SHF_ALLOC and s["sh_type"] != L.SHT_NOBITS and int(s["sh_offset"]) >= end:
            limit = min(limit, int(s["sh_offset"]))
    return (k, at) if at + size <= limit else None


def _end_slot(inp: _Input) -> tuple[int, int]:
    """(address, file offset) of a new segment after the last one: the next granule
    after everything mapped, and after the last other byte of the file."""
    loads = inp.phdrs[inp.phdrs["p_type"] == L.PT_LOAD]
    if not loads.size:
        _fail(inp.img, "no PT_LOAD segment")
    g = _granule(inp)
    return L.align_up(int((loads["p_vaddr"] + loads["p_memsz"]).max()), g), L.align_up(_tail_start(inp), g)


def _self_places(inp: _Input) -> _SelfPlaces:
    code = selfapply.for_machine(inp.img.machine)  # x86-64 or AArch64 (pack_input refuses others)
    room = _applier_room(inp, code.size)
    va, off = _end_slot(inp)
    x = None
    if room is not None:
        g = inp.phdrs[room[0]]
        entry = room[1] + int(g["p_vaddr"]) - int(g["p_offset"]) + selfapply.ENTRY
    else:
        x, entry = (va, off), va + selfapply.ENTRY
        n = L.align_up(code.size, _granule(inp))
        va, off = va + n, off + n
    if inp.interp is None:  # a library: the array moves only to take a DT_INIT it has no slot for
        rw = (va, off) if inp.tag(L.DT_INIT) is None and inp.dyn.spare < 1 else None
        return _SelfPlaces(room, x, rw, entry, None)
    # the moved array: the live entries, the two new tags, DT_NULL and the spare slots
    n_dyn = inp.live.size + 2 + 1 + EXTRA_DYN_SLOTS
    return _SelfPlaces(room, x, (va, off), entry, va + n_dyn * L.DYN64.itemsize)


def _preinit_relocation(inp: _Input, sel: _Selection, places: _SelfPlaces) -> None:
    """The DT_PREINIT_ARRAY entry's RELATIVE relocation, first in the kept table (ld.so
    applies it with the others, before it calls the preinit array)."""
    r = np.zeros(1, L.RELA64)
    r["r_offset"], r["r_info"], r["r_addend"] = places.preinit, inp.arch.relative, places.entry
    sel.kept = np.concatenate([r, sel.kept]).astype(L.RELA64)
    sel.lead += 1


def _applier(inp: _Input, sel: _Selection, lay: _Layout, places: _SelfPlaces) -> _Applier:
    """Self form: the routine's blob, where ``places`` put it."""
    img, ph = inp.img, inp.phdrs
    code = selfapply.for_machine(img.machine)
    if places.room is None and places.x is None:
        _fail(img, "no room post-link for the self-applying routine")  # not reached: x is always set
    relro = code.relro(ph, PAGE)
    old_init = (inp.tag(L.DT_INIT) or 0) if places.preinit is None else 0
    relr_start = lay.relr_off + lay.vshift
    data = code.blob(relr_start, relr_start + sel.relr.nbytes, relro[0], relro[1], old_init, places.entry)
    if places.room is not None:
        return _Applier(places.room[1], places.entry, data, places.room[0], relro)
    return _Applier(places.x[1], places.entry, data, None, relro)


@dataclass
class _DynamicPatch:
    shift: dict              # section index -> file offset shift
    ashift: dict             # section index -> address shift
    new_dyn: np.ndarray
    new_dyn_off: int | None  # set when the array moved (lld: no spare slots)
    patch: tuple | None      # (offset, bytes) when rewritten in place
    note: str
    relr_addr: int
    new_dyn_addr: int | None = None   # link-time address of a moved array
    writable: bool = False   # moved into a new writable PT_LOAD at the end of the file (DT_DEBUG)
    seg_size: int | None = None  # that PT_LOAD's size when the program header table went in it too
    trailer: bytes = b""     # after the array in that PT_LOAD: an executable's DT_PREINIT_ARRAY entry


def _dynamic(inp: _Input, sel: _Selection, vn: _VersionNeed, lay: _Layout, ap: "_Applier | None",
             places: "_SelfPlaces | None" = None) -> _DynamicPatch:
    """Step 5: the dynamic array, in place when it has 3 spare DT_NULL slots (self form:
    DT_INIT replaced, or one slot for it), else moved. An executable's self form always
    moves it to the new RW PT_LOAD, with DT_PREINIT_ARRAY and its entry after it."""
    img, shdrs, dyn = inp.img, inp.shdrs, inp.dyn.array
    rela_i = inp.sec[".rela.dyn"]
    shift = {i: (no - inp.sh(i, "sh_offset")) for i, (no, _) in lay.moved.items()}
    shift[rela_i] = lay.new_rela_off - inp.sh(rela_i, "sh_offset")
    addr_of_old = {inp.sh(i, "sh_addr"): i for i in shift}
    new_live = inp.live.copy()
    for k in range(new_live.size):
        v = int(new_live["d_val"][k])
        if int(new_live["d_tag"][k]) in L.DT_TABLE_PTRS and v in addr_of_old:
            new_live["d_val"][k] = v + shift[addr_of_old[v]]
    dt = new_live["d_tag"]
    new_live["d_val"][dt == L.DT_RELASZ] = len(lay.kept_bytes)
    new_live["d_val"][dt == L.DT_RELACOUNT] = sel.lead
    dynstr_i = inp.sec.get(".dynstr")
    if dynstr_i in vn.grow:
        new_live["d_val"][dt == L.DT_STRSZ] = len(vn.grow[dynstr_i])
    if vn.verneednum is not None:
        new_live["d_val"][dt == L.DT_VERNEEDNUM] = vn.verneednum
    relr_addr = lay.relr_off + lay.vshift
    word = inp.arch.word
    if places is not None and places.preinit is not None:  # an executable: the routine runs first in _dl_init
        add = np.array([(L.DT_PREINIT_ARRAY, places.preinit), (L.DT_PREINIT_ARRAYSZ, word)], L.DYN64)
    elif ap is not None:  # self form: DT_INIT is the applier (which chains to the old one)
        if np.any(dt == L.DT_INIT):
            new_live["d_val"][dt == L.DT_INIT] = ap.entry
            add = np.zeros(0, L.DYN64)
        else:
            add = np.array([(L.DT_INIT, ap.entry)], L.DYN64)
    else:
        add = np.array([(L.DT_RELR, relr_addr), (L.DT_RELRSZ, sel.relr.nbytes), (L.DT_RELRENT, word)], L.DYN64)
    spare = inp.dyn.spare
    dyn_i = next((i for i, s in enumerate(shdrs) if s["sh_type"] == L.SHT_DYNAMIC), None)
    if spare >= add.size and (places is None or places.rw is None):
        new_dyn = np.concatenate([new_live, add, np.zeros(dyn.size - inp.dyn.count - add.size, L.DYN64)])
        return _DynamicPatch(shift, dict(shift), new_dyn, None, (inp.dyn.offset, new_dyn.tobytes()),
                        "spare DT_NULL slots", relr_addr)
    # lld: no spare slots. Rebuild the array in the freed space, read-only.
    if dyn_i is None:
        _fail(img, "no .dynamic section header for the dynamic array that must move")
    if sel.lead == 0 and np.any(dt == L.DT_RELACOUNT):
        new_live = new_live[dt != L.DT_RELACOUNT]
    new_dyn = np.concatenate([new_live, add, np.zeros(1 + EXTRA_DYN_SLOTS, L.DYN64)])
    if ap is not None:  # glibc < 2.35 writes the array (a read-only one needs glibc >= 2.35)
        trailer = b""
        if places.preinit is not None:
            if places.rw[0] + new_dyn.nbytes != places.preinit:
                raise AssertionError("the moved dynamic array does not end where its DT_PREINIT_ARRAY entry goes")
            trailer = int(places.entry).to_bytes(word, "little")  # ld.so writes base + entry (RELA)
        return _dynamic_writable(inp, new_dyn, shift, dyn_i, spare, relr_addr, places.rw, trailer)
    if np.any(new_live["d_tag"] == L.DT_DEBUG):
        return _dynamic_writable(inp, new_dyn, shift, dyn_i, spare, relr_addr)
    new_dyn_off = L.align_up(lay.end, L.DYN64.itemsize)
    end = new_dyn_off + new_dyn.nbytes
    if end > lay.rela_end:
        _fail(img, f"not enough space freed in .rela.dyn ({lay.rela_end - lay.run_start} bytes available, "
                   f"{end - lay.run_start} needed)")
    lay.blk[new_dyn_off - lay.run_start:end - lay.run_start] = new_dyn.view(np.uint8)
    lay.freed -= end - lay.end
    lay.end = end
    shift[dyn_i] = new_dyn_off - inp.sh(dyn_i, "sh_offset")
    ashift = dict(shift)  # address shifts equal offset shifts inside the run's PT_LOAD ...
    ashift[dyn_i] = new_dyn_off + lay.vshift - inp.sh(dyn_i, "sh_addr")  # ... .dynamic changes segment
    note = (f"no spare DT_NULL slot ({spare}): dynamic array moved to {new_dyn_off + lay.vshift:#x} "
            "(read-only PT_DYNAMIC, needs glibc >= 2.35)")
    return _DynamicPatch(shift, ashift, new_dyn, new_dyn_off, None, note, relr_addr, new_dyn_off + lay.vshift)


def _dynamic_writable(inp: _Input, new_dyn, shift: dict, dyn_i: int, spare: int, relr_addr: int, at=None,
                      trailer: bytes = b"") -> _DynamicPatch:
    """The rebuilt array where it stays writable: ld.so stores DT_DEBUG's value in it at
    start (and relocates its pointers in place), so it cannot go to the read-only freed
    space. A new RW PT_LOAD after the last segment holds it, in a new page at the end of
    the file (before the section headers); its program header needs room (``_phdr_table``).
    ``at``: its (address, offset) when the self form's routine segment comes first;
    ``trailer``: bytes after the array in the segment."""
    vaddr, off = at if at is not None else _end_slot(inp)
    shift[dyn_i] = off - inp.sh(dyn_i, "sh_offset")
    ashift = dict(shift)
    ashift[dyn_i] = vaddr - inp.sh(dyn_i, "sh_addr")
    why = (f"no spare DT_NULL slot ({spare}) and DT_DEBUG" if not trailer and at is None else
           "self form of an executable (DT_PREINIT_ARRAY -> the routine, its entry after the array)" if trailer
           else f"self form, no DT_INIT and no spare DT_NULL slot ({spare}) to add one")
    note = f"{why}: dynamic array moved to {vaddr:#x}, a new writable PT_LOAD after the last segment"
    return _DynamicPatch(shift, ashift, new_dyn, off, None, note, relr_addr, vaddr, True, trailer=trailer)


def _granule(inp: _Input) -> int:
    """Alignment of a new segment: the page, or an arm64 file's p_align (arch.cut_granule)."""
    machine = int(_read(inp.img, 0, L.EHDR64.itemsize, L.EHDR64)[0]["e_machine"])
    return cut_granule(machine, inp.phdrs["p_type"], inp.phdrs["p_align"], PAGE)


def _tail_start(inp: _Input) -> int:
    """Where the section names and headers are rewritten: their old place when nothing
    follows it, else the end of the file."""
    img, phdrs, shdrs, hdr = inp.img, inp.phdrs, inp.shdrs, inp.img.elf.header
    shstr_i = hdr["e_shstrndx"]
    ends = [int(p["p_offset"] + p["p_filesz"]) for p in phdrs] + [int(hdr["e_phoff"] + phdrs.nbytes)]
    ends += [int(s["sh_offset"] + s["sh_size"]) for i, s in enumerate(shdrs)
             if i != shstr_i and s["sh_type"] != L.SHT_NOBITS]
    old_tail = min(int(shdrs[shstr_i]["sh_offset"]), int(hdr["e_shoff"]))
    return old_tail if old_tail >= max(ends) else img.size


def _phdr_with_dynamic(inp: _Input, dy: _DynamicPatch, size: int) -> _PhdrTable:
    """Too little freed space for the table (a few dozen relocations): it goes after the
    dynamic array in the new writable segment, whose file offset then equals its address
    less the first PT_LOAD's difference (for AT_PHDR, as above): the file gets a hole of
    zeros (sparse where the file system allows) as long as the last segment's bss."""
    first = inp.phdrs[inp.phdrs["p_type"] == L.PT_LOAD][0]
    off = dy.new_dyn_addr - (int(first["p_vaddr"]) - int(first["p_offset"]))
    if off < dy.new_dyn_off:
        _fail(inp.img, "no room for the program header table: segments map addresses below their file offsets")
    dyn_i = next(i for i, s in enumerate(inp.shdrs) if s["sh_type"] == L.SHT_DYNAMIC)
    dy.shift[dyn_i] += off - dy.new_dyn_off
    dy.new_dyn_off = off
    at = off + L.align_up(dy.new_dyn.nbytes + len(dy.trailer), 8)
    dy.seg_size = at + size - off
    return _PhdrTable(at, True, f"moved after it, into its segment ({off - _tail_start(inp):,} bytes of zeros "
                                "before it: too little space freed for the table)")


@dataclass
class _PhdrTable:
    """Where the program header table goes and the entries it holds."""
    off: int                 # file offset (e_phoff)
    moved: bool
    note: str


def _phdr_room(inp: _Input) -> int:
    """Whole entries of room after the table in place: nothing starts there and its bytes are zero."""
    end = _phdr_table_end(inp)
    starts = [int(s["sh_offset"]) for s in inp.shdrs if s["sh_type"] != L.SHT_NOBITS and s["sh_size"]
              and s["sh_offset"] >= end] + [int(p["p_offset"]) for p in inp.phdrs if p["p_filesz"]
                                             and p["p_offset"] >= end]
    n = (min(starts, default=inp.img.size) - end) // L.PHDR64.itemsize
    while n > 0 and np.any(_read(inp.img, end, n * L.PHDR64.itemsize)):
        n -= 1
    return max(n, 0)


def _phdr_need(inp: _Input, lay: _Layout, dy: _DynamicPatch, cut: bool, ap: "_Applier | None") -> int:
    """Program headers the rewrite adds (the writable dynamic segment, the routine's
    segment, the cut's split) beyond the room after the table in place; 0 when they fit
    or when a library's cut takes PT_PHDR's place (or keeps its pages)."""
    ph = inp.phdrs
    extra = (1 if dy.writable else 0) + (1 if ap is not None and ap.seg is None else 0)
    pages = lay.rela_end // PAGE - L.align_up(lay.end, PAGE) // PAGE
    cut_entry = 1 if cut and pages >= MIN_CUT_PAGES else 0
    give_phdr = inp.interp is None and np.any(ph["p_type"] == L.PT_PHDR)
    room = _phdr_room(inp) + lay.reserve // L.PHDR64.itemsize
    if extra + cut_entry <= room + (1 if give_phdr and cut_entry else 0):
        return 0
    if not extra and (give_phdr or inp.interp is None):
        return 0
    return extra + cut_entry - room


def _phdr_table(inp: _Input, lay: _Layout, dy: _DynamicPatch, cut: bool, ap: "_Applier | None" = None) -> _PhdrTable:
    """Step 7a: room for the program headers the rewrite adds (``_phdr_need``).

    The table stays at e_phoff when ``_layout`` made room after it: GNU strip and objcopy
    write it right after the ELF header whatever e_phoff says, and shift every section
    that overlaps it (the output does not start). Else (a section that may not move
    follows it): a library may give PT_PHDR's place to the cut; an executable may not (glibc computes
    its load base from PT_PHDR). Without room after the table it moves into the freed
    space, right after the tables, with one spare entry for the cut: the PT_LOAD there
    maps it at an address that is its offset plus the first PT_LOAD's difference, so
    the kernel's AT_PHDR is right whichever way it is computed (Linux < 5.18 adds
    e_phoff to the first segment's address)."""
    img, ph = inp.img, inp.phdrs
    phoff = int(img.elf.header["e_phoff"])
    here = _PhdrTable(phoff, False, "in place")
    if not _phdr_need(inp, lay, dy, cut, ap):
        return here
    extra = (1 if dy.writable else 0) + (1 if ap is not None and ap.seg is None else 0)
    at = L.align_up(lay.end, 8)  # p_align of PT_PHDR
    size = (ph.size + extra + 1) * L.PHDR64.itemsize
    first = ph[ph["p_type"] == L.PT_LOAD][0]
    why = None
    if at + size > lay.rela_end:
        why = (f"not enough space freed in .rela.dyn for the program header table "
               f"({lay.rela_end - lay.end} bytes left, {size} needed)")
    elif lay.vshift != int(first["p_vaddr"]) - int(first["p_offset"]):
        why = "the freed space is not mapped like the first PT_LOAD: the program header table cannot move there"
    if why is not None:
        if dy.writable:
            return _phdr_with_dynamic(inp, dy, size)
        if extra:
            _fail(img, f"no room for the program header of the self-applying routine's segment ({why})")
        return _PhdrTable(phoff, False, f"in place ({why}; freed pages kept)")
    lay.blk[at - lay.run_start:at + size - lay.run_start] = 0
    lay.freed -= at + size - lay.end
    lay.end = at + size
    return _PhdrTable(at, True, f"moved to {at + lay.vshift:#x} (no room after it for the new entries; "
                                "PT_PHDR follows)")


def _symbols(inp: _Input, lay: _Layout, dy: _DynamicPatch) -> list:
    """Step 6: symbols defined in moved sections (section symbols, _DYNAMIC) follow them."""
    blocks = []
    moved_idx = np.array([i for i, s in dy.shift.items() if s], dtype=np.int64)
    if not moved_idx.size:
        return blocks
    moved_shift = np.array([dy.ashift[i] for i in moved_idx], dtype=np.int64)
    order = np.argsort(moved_idx)
    for si, s in enumerate(inp.shdrs):
        if s["sh_type"] not in (L.SHT_DYNSYM, L.SHT_SYMTAB):
            continue
        n = int(s["sh_size"]) // L.SYM64.itemsize * L.SYM64.itemsize
        syms = _read(inp.img, int(s["sh_offset"]), n, L.SYM64)
        hit = np.isin(syms["st_shndx"], moved_idx)
        if not hit.any():
            continue
        pos = order[np.searchsorted(moved_idx[order], syms["st_shndx"][hit])]
        syms["st_value"][hit] = (syms["st_value"][hit].astype(np.int64) + moved_shift[pos]).astype(np.uint64)
        if si in lay.moved:  # .dynsym slid with the run: patch the copy inside the block
            no = lay.moved[si][0] - lay.run_start
            lay.blk[no:no + syms.nbytes] = syms.view(np.uint8)
        else:
            blocks.append((int(s["sh_offset"]), syms.tobytes()))
    return blocks


def _program_headers(inp: _Input, lay: _Layout, dy: _DynamicPatch, ap, pt: _PhdrTable) -> np.ndarray:
    """Step 7b: the new program header table (entries for the routine, a moved dynamic
    array and its writable segment, the moved table and PT_PHDR)."""
    ph = inp.phdrs.copy()
    if ap is not None and ap.seg is not None:  # the executable PT_LOAD now ends after the routine
        g = ph[ap.seg]
        g["p_filesz"] = g["p_memsz"] = ap.off + len(ap.data) - int(g["p_offset"])
    new = []  # PT_LOADs after the last one, sorted by address: the routine's, the dynamic array's
    if ap is not None and ap.seg is None:
        va, n = ap.entry - selfapply.ENTRY, len(ap.data)
        new.append((L.PT_LOAD, L.PF_R | L.PF_X, ap.off, va, va, n, n, _granule(inp)))
    if dy.new_dyn_off is not None:
        k = int(np.nonzero(ph["p_type"] == L.PT_DYNAMIC)[0][0])
        ph["p_offset"][k] = dy.new_dyn_off
        ph["p_vaddr"][k] = ph["p_paddr"][k] = dy.new_dyn_addr
        ph["p_filesz"][k] = ph["p_memsz"][k] = dy.new_dyn.nbytes
        ph["p_flags"][k] = L.PF_R | (L.PF_W if dy.writable else 0)
        if dy.writable:
            n = dy.seg_size or dy.new_dyn.nbytes + len(dy.trailer)
            new.append((L.PT_LOAD, L.PF_R | L.PF_W, dy.new_dyn_off, dy.new_dyn_addr, dy.new_dyn_addr, n, n,
                        _granule(inp)))
    if new:  # after the last PT_LOAD: they stay sorted by address
        last = int(np.flatnonzero(ph["p_type"] == L.PT_LOAD)[-1])
        ph = np.concatenate([ph[:last + 1], np.array(new, L.PHDR64), ph[last + 1:]]).astype(L.PHDR64)
    x = ph["p_type"] == L.PT_PHDR  # it describes the table, grown in place or moved
    if pt.moved:
        ph["p_offset"][x] = pt.off
        ph["p_vaddr"][x] = ph["p_paddr"][x] = pt.off + lay.vshift
    ph["p_filesz"][x] = ph["p_memsz"][x] = ph.nbytes
    return ph


def _headers(inp: _Input, sel: _Selection, vn: _VersionNeed, lay: _Layout, dy: _DynamicPatch, ap=None,
             pt: _PhdrTable | None = None):
    """Step 7: program/section headers and the ELF header; returns (blocks, tail offset, tail)."""
    img, shdrs, phdrs = inp.img, inp.shdrs, inp.phdrs
    hdr = img.elf.header
    blocks = []
    pt = pt or _PhdrTable(int(hdr["e_phoff"]), False, "in place")
    ph = _program_headers(inp, lay, dy, ap, pt)
    slid = {i for i in dy.shift if shdrs[i]["sh_type"] == L.SHT_NOTE} | _interp_sections(inp)
    for i, sft in dy.shift.items():  # a note or the interpreter path slid with the run: its segments too
        x = np.isin(ph["p_type"], SLIDING_SEGMENTS) & (ph["p_offset"] == inp.sh(i, "sh_offset"))
        if sft and i in slid and x.any():
            ph["p_offset"][x] += np.uint64(sft)
            ph["p_vaddr"][x] += np.uint64(dy.ashift[i])
            ph["p_paddr"][x] += np.uint64(dy.ashift[i])
    if pt.moved:  # the old table is not read any more
        blocks.append((int(hdr["e_phoff"]), bytes(phdrs.nbytes)))
    if ph.tobytes() != phdrs.tobytes() or pt.moved:
        blocks.append((pt.off, ph.tobytes()))
    sh = shdrs.copy()
    for i, s in dy.shift.items():
        sh["sh_offset"][i] = int(sh["sh_offset"][i]) + s  # s < 0 for a .dynamic moved down
        sh["sh_addr"][i] = int(sh["sh_addr"][i]) + dy.ashift[i]
    for i, (_, n) in lay.moved.items():
        sh["sh_size"][i] = n
    sh["sh_size"][inp.sec[".rela.dyn"]] = len(lay.kept_bytes)
    if vn.verneednum is not None:
        sh["sh_info"][inp.sec[".gnu.version_r"]] = vn.verneednum  # SHT_GNU_verneed: sh_info = entries
    if dy.new_dyn_off is not None:
        dyn_i = next(i for i, s in enumerate(shdrs) if s["sh_type"] == L.SHT_DYNAMIC)
        sh["sh_size"][dyn_i] = dy.new_dyn.nbytes
        if not dy.writable:
            sh["sh_flags"][dyn_i] &= ~np.uint64(L.SHF_WRITE)
    shstr_i = hdr["e_shstrndx"]
    shstr = _read(img, int(sh["sh_offset"][shstr_i]), int(sh["sh_size"][shstr_i])).tobytes()

    def name(n: bytes) -> int:
        nonlocal shstr
        at = shstr.find(n + b"\0")
        if at < 0 or (at and shstr[at - 1] != 0):
            at = len(shstr)
            shstr += n + b"\0"
        return at

    word = inp.arch.word
    new = np.zeros(1 if ap is None else 3 if dy.trailer else 2, L.SHDR64)
    if ap is None:
        new[0] = (name(b".relr.dyn"), L.SHT_RELR, L.SHF_ALLOC, dy.relr_addr, lay.relr_off, sel.relr.nbytes,
                  0, 0, word, word)
    else:  # a table only the routine reads: PROGBITS, so no tool takes it for DT_RELR's
        new[0] = (name(b".relr.self"), L.SHT_PROGBITS, L.SHF_ALLOC, dy.relr_addr, lay.relr_off, sel.relr.nbytes,
                  0, 0, word, word)
        new[1] = (name(b".text.relr_apply"), L.SHT_PROGBITS, L.SHF_ALLOC | L.SHF_EXECINSTR,
                  ap.entry - selfapply.ENTRY, ap.off, len(ap.data), 0, 0, 16, 0)
    if dy.trailer:  # the executable's new DT_PREINIT_ARRAY (one entry: the routine)
        new[2] = (name(b".preinit_array"), L.SHT_PREINIT_ARRAY, L.SHF_ALLOC | L.SHF_WRITE,
                  dy.new_dyn_addr + dy.new_dyn.nbytes, dy.new_dyn_off + dy.new_dyn.nbytes, len(dy.trailer),
                  0, 0, word, word)
    sh = np.concatenate([sh, new])
    # The tail (names + headers) is rewritten after the last other byte of the file;
    # a writable dynamic segment goes first, in a page of its own.
    tail_at = _tail_start(inp)
    pieces = []  # the new segments' bytes, in file order
    if ap is not None and ap.seg is None:
        pieces.append((ap.off, ap.data))
    if dy.writable:
        n = dy.seg_size or dy.new_dyn.nbytes + len(dy.trailer)
        pieces.append((dy.new_dyn_off, dy.new_dyn.tobytes() + dy.trailer + bytes(n - dy.new_dyn.nbytes
                                                                                  - len(dy.trailer))))
    head = b""
    for off, data in pieces:
        head += bytes(off - tail_at - len(head)) + data
    names_at = tail_at + len(head)
    sh["sh_offset"][shstr_i] = names_at
    sh["sh_size"][shstr_i] = len(shstr)
    shoff = L.align_up(names_at + len(shstr), ELF64_ALIGN)
    tail = head + shstr + bytes(shoff - names_at - len(shstr)) + sh.tobytes()
    ehdr = _read(img, 0, L.EHDR64.itemsize, L.EHDR64)
    ehdr["e_shoff"], ehdr["e_shnum"] = shoff, len(sh)
    ehdr["e_phoff"], ehdr["e_phnum"] = pt.off, ph.size
    blocks.append((0, ehdr.tobytes()))
    return blocks, tail_at, tail


def plan_pack(img, form: str = "relr", cut: bool = True) -> Plan:
    """Compute the packed file as a list of patches (raises AlreadyPacked / ElflayoutError).

    ``form``: "relr" (DT_RELR, glibc >= 2.36) or "self" (self-applying, any glibc).
    ``cut``: cut the whole freed pages out of the file (step 8); False keeps
    every file offset (the zeros stay, read-around may read them).
    """
    if form not in FORMS:
        raise ValueError(f"unknown packed form {form!r}")
    t0 = time.perf_counter()
    inp = validate(img, form)
    sel = _select(inp)
    t_enc = time.perf_counter()
    vn = _version_need(inp)
    places = _self_places(inp) if form == "self" else None
    if places is not None and places.preinit is not None:
        _preinit_relocation(inp, sel, places)
    lay = _layout(inp, sel, vn, cut)
    ap = _applier(inp, sel, lay, places) if form == "self" else None
    dy = _dynamic(inp, sel, vn, lay, ap, places)
    need = _phdr_need(inp, lay, dy, cut, ap)
    if need and _slide_start(inp, sel, _alloc(inp), lay.run_start, lay.rela_end, True) is not None:
        # again, with room made after the table in place (GNU strip keeps it there)
        try:
            lay2 = _layout(inp, sel, vn, cut, lay.reserve // L.PHDR64.itemsize + need)
            ap2 = _applier(inp, sel, lay2, places) if form == "self" else None
            lay, ap, dy = lay2, ap2, _dynamic(inp, sel, vn, lay2, ap2, places)
        except ElflayoutError:  # too little freed space to slide the tables: the table moves
            pass
    pt = _phdr_table(inp, lay, dy, cut, ap)
    sym_blocks = _symbols(inp, lay, dy)
    if pt.moved or dy.writable:
        dy.note += f"; program header table {pt.note}"
    hdr_blocks, tail_at, tail = _headers(inp, sel, vn, lay, dy, ap, pt)
    blocks = [(lay.run_start, lay.blk.tobytes())] + sym_blocks + ([dy.patch] if dy.patch else []) + hdr_blocks
    if ap is not None and ap.seg is not None:
        blocks.append((ap.off, ap.data))
    rela_i = inp.sec[".rela.dyn"]
    is_rel = sel.types == inp.arch.relative
    stats = dict(
        relocations=int(sel.rel.size), relative=int(is_rel.sum()), packed=int(sel.packable.sum()),
        kept=int(sel.kept.size), kept_relative=int((sel.types[~sel.packable] == inp.arch.relative).sum()),
        rela_dyn_bytes_before=inp.sh(rela_i, "sh_size"), rela_dyn_bytes_after=len(lay.kept_bytes),
        relr_bytes=int(sel.relr.nbytes), relr_words=int(sel.relr.size),
        relr_addr=int(dy.relr_addr), rela_addr=int(lay.new_rela_off + lay.vshift),
        relacount=sel.lead, dynamic=dy.note, version_need=vn.note, form=form,
        applier=(dict(entry=int(ap.entry), bytes=len(ap.data), relro=[int(x) for x in ap.relro])
                 if ap is not None else None),
        moved_sections={inp.names[i]: int(s) for i, s in dy.shift.items() if s and i != rela_i},
        freed_bytes=int(lay.freed), encode_s=round(t_enc - t0, 3),
        strip_safe=not pt.moved,
    )
    return Plan(str(img.path), img.size, sel.tgt_file[sel.packable],
                sel.rel["r_addend"][sel.packable].view(np.uint64), blocks, tail_at, tail, stats,
                (lay.end, lay.rela_end) if cut else None)


