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
from elflayout.relocs import selfapply
from elflayout.relocs.pack_cut import MIN_CUT_PAGES
from elflayout.relocs.pack_input import FORMS, _fail, _Input, _read, _Selection, _select, _version_need, _VersionNeed, validate

EXTRA_DYN_SLOTS = 4  # spare DT_NULLs left in a rebuilt dynamic array for later tools
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


def _layout(inp: _Input, sel: _Selection, vn: _VersionNeed, cut: bool = True) -> _Layout:
    """Step 4: the run slid forward, then the kept relocations and the RELR table."""
    img, shdrs, names = inp.img, inp.shdrs, inp.names
    rela_i = inp.sec[".rela.dyn"]
    rela_off = inp.sh(rela_i, "sh_offset")
    rela_end = rela_off + inp.sh(rela_i, "sh_size")
    alloc = [(int(s["sh_offset"]), i) for i, s in enumerate(shdrs)
             if s["sh_flags"] & L.SHF_ALLOC and s["sh_type"] != L.SHT_NOBITS and s["sh_size"] > 0]
    run_start = min([inp.sh(i, "sh_offset") for i in vn.grow] + [rela_off])

    def load_of(start):  # the PT_LOAD holding the run from ``start`` to the end of .rela.dyn
        return next((p for p in inp.phdrs if p["p_type"] == L.PT_LOAD
                     and p["p_offset"] <= start and rela_end <= p["p_offset"] + p["p_filesz"]), None)

    reserve = _phdr_reserve(inp, alloc, int(sel.packable.sum()) * L.RELA64.itemsize) if cut else 0
    if reserve:  # the run starts right after the program headers and leaves room for one more
        start = min([o for o, _ in alloc if o >= _phdr_table_end(inp)] + [run_start])
        load = load_of(start)
        # every section that slides must sit at the address its offset maps to (damaged
        # headers do not): else no room is made, and the cut finds none
        if load is not None and all(inp.sh(i, "sh_addr") - o == int(load["p_vaddr"]) - int(load["p_offset"])
                                    for o, i in alloc if start <= o < rela_off):
            run_start = start
        else:
            reserve = 0
    in_run = sorted((o, i) for o, i in alloc if run_start <= o < rela_off)
    load = load_of(run_start)
    if load is None:
        _fail(img, "cannot grow the version tables in place: they and .rela.dyn are not in one PT_LOAD")
    movable = L.MOVABLE_TYPES | ({L.SHT_NOTE} if reserve else set())  # PT_NOTE follows its note (_headers)
    for o, i in in_run:
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
    for p in inp.phdrs:  # a note/eh_frame segment inside the run would lose its bytes
        if p["p_type"] not in (L.PT_LOAD, L.PT_PHDR) and p["p_filesz"] and \
                p["p_offset"] < rela_end and p["p_offset"] + p["p_filesz"] > run_start and \
                not (p["p_type"] == L.PT_NOTE and any(a <= p["p_offset"] and p["p_offset"] + p["p_filesz"] <= b
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
    new_rela_off = L.align_up(cur, L.RELA64.alignment)
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
                   rela_end - end + new_rela_off - L.align_up(cur, L.RELA64.alignment))


@dataclass
class _Applier:
    off: int                 # file offset of the blob (block + routine)
    entry: int               # link-time address of the routine (the new DT_INIT)
    data: bytes
    seg: int                 # program header extended to cover it
    relro: tuple             # (page, length) mprotect'ed around the application


def _applier(inp: _Input, sel: _Selection, lay: _Layout) -> _Applier:
    """Self form: room for the routine after the end of the executable PT_LOAD, inside its
    last page (the mapping covers that page already; filesz/memsz grow to say so)."""
    img, ph = inp.img, inp.phdrs
    xs = np.flatnonzero((ph["p_type"] == L.PT_LOAD) & (ph["p_flags"] & L.PF_X != 0))
    if xs.size != 1:
        _fail(img, f"{xs.size} executable PT_LOADs: the self-applying routine has no single place to go")
    k = int(xs[0])
    g = ph[k]
    if g["p_filesz"] != g["p_memsz"]:
        _fail(img, "the executable PT_LOAD has bss: no room after it for the self-applying routine")
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
    code = selfapply.for_machine(img.machine)  # x86-64 or AArch64 (pack_input refuses others)
    if at + code.size > limit:
        _fail(img, f"no room post-link for the self-applying routine ({limit - end} bytes free after the code, "
                   f"{code.size} needed): link it with 'elflayout link --pack self' instead")
    relro = code.relro(ph, PAGE)
    old_init = inp.tag(L.DT_INIT) or 0
    entry = at + vshift + selfapply.ENTRY
    relr_start = lay.relr_off + lay.vshift
    data = code.blob(relr_start, relr_start + sel.relr.nbytes, relro[0], relro[1], old_init, entry)
    return _Applier(at, entry, data, k, relro)


@dataclass
class _DynamicPatch:
    shift: dict              # section index -> file offset shift
    ashift: dict             # section index -> address shift
    new_dyn: np.ndarray
    new_dyn_off: int | None  # set when the array moved (lld: no spare slots)
    patch: tuple | None      # (offset, bytes) when rewritten in place
    note: str
    relr_addr: int


def _dynamic(inp: _Input, sel: _Selection, vn: _VersionNeed, lay: _Layout, ap: "_Applier | None") -> _DynamicPatch:
    """Step 5: the dynamic array, in place when it has 3 spare DT_NULL slots (self form:
    DT_INIT replaced, or one slot for it), else moved (relr form only)."""
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
    if ap is not None:  # self form: DT_INIT is the applier (which chains to the old one)
        if np.any(dt == L.DT_INIT):
            new_live["d_val"][dt == L.DT_INIT] = ap.entry
            add = np.zeros(0, L.DYN64)
        else:
            add = np.array([(L.DT_INIT, ap.entry)], L.DYN64)
    else:
        add = np.array([(L.DT_RELR, relr_addr), (L.DT_RELRSZ, sel.relr.nbytes), (L.DT_RELRENT, word)], L.DYN64)
    spare = inp.dyn.spare
    dyn_i = next((i for i, s in enumerate(shdrs) if s["sh_type"] == L.SHT_DYNAMIC), None)
    if spare >= add.size:
        new_dyn = np.concatenate([new_live, add, np.zeros(dyn.size - inp.dyn.count - add.size, L.DYN64)])
        return _DynamicPatch(shift, dict(shift), new_dyn, None, (inp.dyn.offset, new_dyn.tobytes()),
                        "spare DT_NULL slots", relr_addr)
    # lld: no spare slots. Rebuild the array in the freed space, read-only.
    if ap is not None:
        _fail(img, "no DT_INIT and no spare DT_NULL slot to add one: the self-applying form cannot be made "
                   "post-link (a read-only dynamic array needs glibc >= 2.35): link it with "
                   "'elflayout link --pack self' instead")
    if np.any(dt == L.DT_DEBUG):
        _fail(img, "no spare DT_NULL slot and DT_DEBUG present (an executable): ld.so writes DT_DEBUG, so the "
                   "dynamic array cannot move to read-only memory; relink with -z pack-relative-relocs")
    if dyn_i is None:
        _fail(img, "no .dynamic section header for the dynamic array that must move")
    if sel.lead == 0 and np.any(dt == L.DT_RELACOUNT):
        new_live = new_live[dt != L.DT_RELACOUNT]
    new_dyn = np.concatenate([new_live, add, np.zeros(1 + EXTRA_DYN_SLOTS, L.DYN64)])
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
    return _DynamicPatch(shift, ashift, new_dyn, new_dyn_off, None, note, relr_addr)


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


def _headers(inp: _Input, sel: _Selection, vn: _VersionNeed, lay: _Layout, dy: _DynamicPatch, ap=None):
    """Step 7: program/section headers and the ELF header; returns (blocks, tail offset, tail)."""
    img, shdrs, phdrs = inp.img, inp.shdrs, inp.phdrs
    hdr = img.elf.header
    blocks = []
    ph = phdrs.copy()
    if ap is not None:  # the executable PT_LOAD now ends after the routine
        g = ph[ap.seg]
        g["p_filesz"] = g["p_memsz"] = ap.off + len(ap.data) - int(g["p_offset"])
    if dy.new_dyn_off is not None:
        k = int(np.nonzero(ph["p_type"] == L.PT_DYNAMIC)[0][0])
        ph["p_offset"][k] = dy.new_dyn_off
        ph["p_vaddr"][k] = ph["p_paddr"][k] = dy.new_dyn_off + lay.vshift
        ph["p_filesz"][k] = ph["p_memsz"][k] = dy.new_dyn.nbytes
        ph["p_flags"][k] = L.PF_R
    for i, sft in dy.shift.items():  # a note slid with the run (_phdr_reserve): its PT_NOTE too
        x = (ph["p_type"] == L.PT_NOTE) & (ph["p_offset"] == inp.sh(i, "sh_offset"))
        if sft and shdrs[i]["sh_type"] == L.SHT_NOTE and x.any():
            ph["p_offset"][x] += np.uint64(sft)
            ph["p_vaddr"][x] += np.uint64(dy.ashift[i])
            ph["p_paddr"][x] += np.uint64(dy.ashift[i])
    if ph.tobytes() != phdrs.tobytes():
        blocks.append((hdr["e_phoff"], ph.tobytes()))
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
    new = np.zeros(1 if ap is None else 2, L.SHDR64)
    if ap is None:
        new[0] = (name(b".relr.dyn"), L.SHT_RELR, L.SHF_ALLOC, dy.relr_addr, lay.relr_off, sel.relr.nbytes,
                  0, 0, word, word)
    else:  # a table only the routine reads: PROGBITS, so no tool takes it for DT_RELR's
        new[0] = (name(b".relr.self"), L.SHT_PROGBITS, L.SHF_ALLOC, dy.relr_addr, lay.relr_off, sel.relr.nbytes,
                  0, 0, word, word)
        new[1] = (name(b".text.relr_apply"), L.SHT_PROGBITS, L.SHF_ALLOC | L.SHF_EXECINSTR,
                  ap.entry - selfapply.ENTRY, ap.off, len(ap.data), 0, 0, 16, 0)
    sh = np.concatenate([sh, new])
    # The tail (names + headers) is rewritten after the last other byte of the file.
    ends = [int(p["p_offset"] + p["p_filesz"]) for p in phdrs] + [int(hdr["e_phoff"] + phdrs.nbytes)]
    ends += [int(s["sh_offset"] + s["sh_size"]) for i, s in enumerate(shdrs)
             if i != shstr_i and s["sh_type"] != L.SHT_NOBITS]
    content_end = max(ends)
    old_tail = min(int(shdrs[shstr_i]["sh_offset"]), int(hdr["e_shoff"]))
    tail_at = old_tail if old_tail >= content_end else img.size
    sh["sh_offset"][shstr_i] = tail_at
    sh["sh_size"][shstr_i] = len(shstr)
    shoff = L.align_up(tail_at + len(shstr), L.SHDR64.alignment)
    tail = shstr + bytes(shoff - tail_at - len(shstr)) + sh.tobytes()
    ehdr = _read(img, 0, L.EHDR64.itemsize, L.EHDR64)
    ehdr["e_shoff"], ehdr["e_shnum"] = shoff, len(sh)
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
    lay = _layout(inp, sel, vn, cut)
    ap = _applier(inp, sel, lay) if form == "self" else None
    dy = _dynamic(inp, sel, vn, lay, ap)
    sym_blocks = _symbols(inp, lay, dy)
    hdr_blocks, tail_at, tail = _headers(inp, sel, vn, lay, dy, ap)
    blocks = [(lay.run_start, lay.blk.tobytes())] + sym_blocks + ([dy.patch] if dy.patch else []) + hdr_blocks
    if ap is not None:
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
    )
    return Plan(str(img.path), img.size, sel.tgt_file[sel.packable],
                sel.rel["r_addend"][sel.packable].view(np.uint64), blocks, tail_at, tail, stats,
                (lay.end, lay.rela_end) if cut else None)


