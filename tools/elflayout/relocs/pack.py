"""Pack the RELATIVE relocations of an already-linked shared library into DT_RELR.

Goal: the same library, loaded by stock glibc >= 2.36, with a relocation table the
loader streams in a fraction of the pages. Nothing the program sees moves.

Definitions
  packable   a RELA relocation of type R_*_RELATIVE whose target is word-aligned, lies in
             the file-backed part of a PT_LOAD (so its addend can be stored in the file)
             and whose 8 bytes no other relocation writes, not even partly (an unaligned
             neighbour overlapping it must keep its place in ld.so's order);
  kept       every other relocation of .rela.dyn, in its original order;
  run        the dynamic-linking tables from the first table that must grow (.dynstr,
             .gnu.version_r) up to .rela.dyn; only these slide, by a few bytes.

Algorithm (one copy of the file, patched in place, written atomically; each step is a
function below)
  1. Validate (``validate``): ET_DYN, supported machine, no TEXTREL, .rela.dyn agrees
     with DT_RELA*, DT_RELACOUNT no larger than the leading run of RELATIVE entries
     (glibc applies that many entries as RELATIVE whatever their type).
  2. Select and encode (``_select``): the packable relocations, their addends (stored
     in the target words by ``write_plan``: RELR means ``*where += base``) and their
     RELR encoding (elfcore.relr_encode: lld's greedy encoding).
  3. Version need (``_version_need``): add ``GLIBC_ABI_DT_RELR`` under libc.so.6 where
     glibc >= 2.36 requires it (``glibc_requires_relr_need``: version needs and a
     DT_NEEDED libc.so.*) by appending the name to .dynstr and a Vernaux to
     .gnu.version_r. A .gnu.version naming an index beyond the versions the library
     defines or needs is refused (``_check_versions``).
  4. Layout (``_layout``): slide the run forward into the space freed at the start of
     .rela.dyn (tables are found only through DT_* tags and section headers), then
     write the kept relocations and the RELR table into the old .rela.dyn space; zero
     the rest.
  5. Dynamic array (``_dynamic``): moved table addresses, DT_RELASZ shrunk,
     DT_RELACOUNT set to the leading RELATIVE count of the kept table, DT_RELR/
     DT_RELRSZ/DT_RELRENT in spare DT_NULL slots (GNU ld and gold leave some). Without
     spare slots (lld) the array is rebuilt, larger, in the freed space and PT_DYNAMIC
     points at it read-only (glibc >= 2.35 supports a read-only PT_DYNAMIC, BZ #28340);
     the old array stays where it was, unused.
  6. Symbols (``_symbols``): section symbols and _DYNAMIC of moved tables follow them.
  7. Headers (``_headers``): PT_DYNAMIC if the array moved; section headers for the
     shrunk .rela.dyn and the moved tables, and a new .relr.dyn (SHT_RELR) appended at
     the end so no section index changes.
  8. Cut (``cut_freed_pages``, on the written copy): the whole freed pages
     leave the file, the PT_LOAD holding them split in two; addresses do not change.

Bad input raises ``ElflayoutError`` (exit 2, one line) from the checks of steps 1-4;
anything else escaping from here is a bug, not a verdict on the input.
"""

from __future__ import annotations

import mmap
import os
import shutil
import time
from dataclasses import dataclass, field

import numpy as np
from elftools.elf.constants import SHN_INDICES
from elftools.elf.enums import ENUM_ST_INFO_TYPE

from elflayout import elfcore
from elflayout import layouts as L
from elflayout.errors import ElflayoutError
from elflayout.fileio import atomic_output
from elflayout.relocs import selfapply
from elflayout.relocs.arch import arch_of

GLIBC_ABI_DT_RELR = b"GLIBC_ABI_DT_RELR"
GLIBC_ABI_DT_RELR_HASH = L.elf_hash(GLIBC_ABI_DT_RELR)  # 0xfd0e42: glibc elf/dl-version.c compares it
LIBC_SONAME = b"libc.so.6"
EXTRA_DYN_SLOTS = 4  # spare DT_NULLs left in a rebuilt dynamic array for later tools
PAGE = elfcore.PAGE
FORMS = ("relr", "self")
STT_GNU_IFUNC = ENUM_ST_INFO_TYPE["STT_LOOS"]  # GNU's name for STT_LOOS
SHN_LORESERVE = SHN_INDICES.SHN_LORESERVE
READAROUND_BEFORE = 64 * 1024  # a page fault reads half of Linux's default 128 KiB window before it  # e_shstrndx at/above it means extended numbering


def glibc_requires_relr_need(needed: set[bytes], has_verneed: bool) -> bool:
    """glibc's rule (elf/dl-version.c, _dl_check_map_versions, since 2.36): an object with
    DT_RELR and DT_VERNEED, one of whose DT_NEEDED names starts with "libc.so.", must
    have a GLIBC_ABI_DT_RELR version need (by hash and name, under any file) or it is
    refused with "missing GLIBC_ABI_DT_RELR dependency". Objects needing no libc.so.*
    directly (libabsl_*: only libstdc++.so.6) load without it."""
    return has_verneed and any(n.startswith(b"libc.so.") for n in needed)


class AlreadyPacked(Exception):
    """The input already has DT_RELR: nothing to do."""


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
class _Input:
    """The validated input's raw tables (numpy copies of its headers and dynamic array)."""
    img: elfcore.ElfImage
    arch: object
    shdrs: np.ndarray
    phdrs: np.ndarray
    dyn: np.ndarray          # the whole PT_DYNAMIC array
    dyn_off: int
    n_used: int              # entries before the first DT_NULL
    names: list
    sec: dict                # first section index of each name
    form: str = "relr"       # "relr" (DT_RELR, glibc >= 2.36) or "self" (selfapply.py)

    @property
    def live(self) -> np.ndarray:
        return self.dyn[:self.n_used]

    def tag(self, t):
        m = np.nonzero(self.live["d_tag"] == t)[0]
        return int(self.live["d_val"][m[0]]) if m.size else None

    def sh(self, i, f) -> int:
        return int(self.shdrs[i][f])

    def section_bytes(self, i) -> bytes:
        return _read(self.img, self.sh(i, "sh_offset"), self.sh(i, "sh_size")).tobytes()


@dataclass
class _Selection:
    rel: np.ndarray          # .rela.dyn
    types: np.ndarray
    packable: np.ndarray     # bool per entry
    tgt_file: np.ndarray     # file offset of each target (-1: not file-backed)
    kept: np.ndarray
    lead: int                # leading RELATIVE entries of the kept table (new DT_RELACOUNT)
    relr: np.ndarray


@dataclass
class _VersionNeed:
    grow: dict               # section index -> new content
    note: str
    verneednum: int | None   # new DT_VERNEEDNUM (an entry for libc.so.6 was added)


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


def _read(img, off, n, dtype=np.uint8):
    if off < 0 or n < 0 or off + n > img.size:
        _fail(img, f"truncated or inconsistent ELF file (a table of {n} bytes at offset {off:#x} is outside the file)")
    return np.frombuffer(img.mm, dtype=dtype, count=n // np.dtype(dtype).itemsize, offset=off).copy()


def _fail(img, msg):
    raise ElflayoutError(f"{img.path}: {msg}")


def read_input(img, form: str = "relr") -> _Input:
    """The raw tables of a consistent x86-64 ET_DYN file (headers, dynamic array);
    ElflayoutError naming the problem otherwise."""
    hdr = img.elf.header
    if hdr["e_type"] != "ET_DYN":
        _fail(img, f"not a shared object (e_type {hdr['e_type']}); pack-relocs rewrites ET_DYN libraries")
    arch = arch_of(img)
    if not arch.pack_supported:
        _fail(img, f"packing {img.machine} ELF{img.elfclass} is not implemented yet (x86-64 only; "
                   "the relocation tables in relocs/arch.py are ready for it)")
    if hdr["e_ident"]["EI_DATA"] != "ELFDATA2LSB":
        _fail(img, "big-endian ELF is not supported")
    if hdr["e_phentsize"] != L.PHDR64.itemsize or hdr["e_shentsize"] != L.SHDR64.itemsize:
        _fail(img, f"inconsistent header sizes (e_phentsize {hdr['e_phentsize']}, e_shentsize {hdr['e_shentsize']})")
    if hdr["e_shnum"] == 0 or hdr["e_shstrndx"] == 0 or hdr["e_shstrndx"] >= min(SHN_LORESERVE, hdr["e_shnum"]):
        _fail(img, "no usable section headers (stripped with --strip-section-headers, or extended numbering)")
    for s in img.loads:
        if s.offset + s.filesz > img.size:
            _fail(img, f"truncated ELF file (PT_LOAD at offset {s.offset:#x} ends past the file's {img.size} bytes)")
    shdrs = _read(img, hdr["e_shoff"], hdr["e_shnum"] * L.SHDR64.itemsize, L.SHDR64)
    phdrs = _read(img, hdr["e_phoff"], hdr["e_phnum"] * L.PHDR64.itemsize, L.PHDR64)
    pdyn = np.nonzero(phdrs["p_type"] == L.PT_DYNAMIC)[0]
    if pdyn.size != 1:
        _fail(img, "no PT_DYNAMIC segment (a static object has no dynamic relocations)")
    dyn_off, dyn_sz = int(phdrs["p_offset"][pdyn[0]]), int(phdrs["p_filesz"][pdyn[0]])
    if dyn_off + dyn_sz > img.size or dyn_sz % L.DYN64.itemsize:
        _fail(img, "inconsistent PT_DYNAMIC (outside the file or not a whole number of entries)")
    dyn = _read(img, dyn_off, dyn_sz, L.DYN64)
    if not np.any(dyn["d_tag"] == L.DT_NULL):
        _fail(img, "inconsistent dynamic array (no DT_NULL terminator)")
    names = [s.name for s in img.sections]
    return _Input(img, arch, shdrs, phdrs, dyn, dyn_off, int(np.argmax(dyn["d_tag"] == L.DT_NULL)), names,
                  {n: i for i, n in reversed(list(enumerate(names)))}, form)


def validate(img, form: str = "relr") -> _Input:
    """Step 1: reject what cannot be packed; return the input's raw tables."""
    inp = read_input(img, form)
    tag = inp.tag
    if tag(L.DT_TEXTREL) is not None or (tag(L.DT_FLAGS) or 0) & L.DF_TEXTREL:
        _fail(img, "has text relocations (DT_TEXTREL): relocating read-only code cannot be packed safely")
    if tag(L.DT_RELR) is not None:
        raise AlreadyPacked(f"{img.path}: already packed (has DT_RELR)")
    rela = img.section(".rela.dyn")
    if rela is None or rela.type != "SHT_RELA":
        _fail(img, "no .rela.dyn section (no RELA dynamic relocations to pack)")
    ent = L.RELA64.itemsize
    if tag(L.DT_RELA) != rela.addr or tag(L.DT_RELASZ) != rela.size or (tag(L.DT_RELAENT) or ent) != ent:
        _fail(img, f"inconsistent: DT_RELA/DT_RELASZ ({tag(L.DT_RELA)}/{tag(L.DT_RELASZ)}) do not describe "
                   f".rela.dyn ({rela.addr:#x}/{rela.size})")
    if rela.size % ent:
        _fail(img, f"inconsistent: .rela.dyn size is not a multiple of {ent}")
    if img.vaddr_to_offset(rela.addr) != rela.offset:
        _fail(img, "inconsistent: .rela.dyn is not where its PT_LOAD maps it")
    return inp


def overlapped(starts: np.ndarray, widths: np.ndarray, mine: np.ndarray) -> np.ndarray:
    """Per entry selected by ``mine``: does any *other* entry write one of its bytes?

    Entries write ``[start, start + width)``. Sorted by start, an entry overlaps an
    earlier one iff the largest end before it exceeds its start, a later one iff the
    next start is below its end (equal starts overlap both ways).
    """
    order = np.argsort(starts, kind="stable")
    s = starts[order].astype(np.int64)
    e = s + widths[order]
    prev_end = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]))
    next_start = np.concatenate((s[1:], [np.iinfo(np.int64).max]))
    hit = np.zeros(starts.size, bool)
    hit[order] = (prev_end > s) | (next_start < e)
    return hit & mine


def _select(inp: _Input) -> _Selection:
    """Step 2: the relocations to pack and their RELR encoding."""
    img, arch = inp.img, inp.arch
    tables = img.reloc_tables()
    rel = tables.get(".rela.dyn")
    if rel is None:  # an empty .rela.dyn
        raise AlreadyPacked(f"{img.path}: .rela.dyn is empty (nothing to do)")
    types = img.reloc_types(rel)
    is_rel = types == arch.relative
    count = inp.tag(L.DT_RELACOUNT)
    if count is not None:
        run = int(np.argmin(is_rel)) if not is_rel.all() else rel.size
        if count > run:
            _fail(img, f"inconsistent: DT_RELACOUNT {count} exceeds the {run} leading RELATIVE relocations "
                       "(ld.so would apply the others as RELATIVE too; the input does not load as linked)")
    r_off = rel["r_offset"]
    word = arch.word
    tgt_file = img.vaddr_to_offset(r_off)
    packable = is_rel & (r_off % word == 0) & (tgt_file >= 0) & (tgt_file % word == 0)
    # A word any other relocation writes, even partly, keeps its place in ld.so's order.
    others = [t for n, t in tables.items() if n != ".rela.dyn"]
    starts = np.concatenate([r_off] + [t["r_offset"] for t in others])
    all_types = np.concatenate([types] + [img.reloc_types(t) for t in others])
    widths = write_widths(arch, all_types)
    mine = np.zeros(starts.size, bool)
    mine[:rel.size] = packable
    packable &= ~overlapped(starts, widths, mine)[:rel.size]
    if inp.form == "self":
        packable &= ~read_before_init(inp, r_off, all_types)
    if not packable.any():
        raise AlreadyPacked(f"{img.path}: no packable RELATIVE relocations (nothing to do)")
    kept = rel[~packable]
    kept_types = types[~packable]
    lead = int(np.argmin(kept_types == arch.relative)) if np.any(kept_types != arch.relative) else kept.size
    relr = elfcore.relr_encode(r_off[packable], word)  # sorts; addresses are link-time vaddrs
    return _Selection(rel, types, packable, tgt_file, kept, lead, relr)


def read_before_init(inp: _Input, r_off: np.ndarray, all_types: np.ndarray) -> np.ndarray:
    """Self form: targets something reads between relocation and our DT_INIT, which must
    stay with ld.so (in RELA):

    - the TLS initialization image (PT_TLS): copied into threads' static TLS right after
      relocation;
    - exported data objects (defined STT_OBJECT in .dynsym): an executable's COPY
      relocations copy them when it is relocated, before any initializer.

    IRELATIVE resolvers, and those of exported ifunc symbols that ld.so binds, run during
    relocation and may read anything: such a library is refused for the self form."""
    img = inp.img
    irel = [t for t, rt in inp.arch.types.items() if rt.kind == "ifunc(B+A)"]
    if np.isin(all_types, irel).any():
        _fail(img, "has IRELATIVE relocations (ifunc resolvers run during relocation, before a self-applying "
                   "routine): use the relr form (glibc >= 2.36)")
    lo, hi = [], []
    for p in inp.phdrs[inp.phdrs["p_type"] == L.PT_TLS]:
        lo.append(int(p["p_vaddr"]))
        hi.append(int(p["p_vaddr"] + p["p_memsz"]))
    ds = inp.sec.get(".dynsym")
    if ds is not None and int(inp.shdrs[ds]["sh_type"]) == L.SHT_DYNSYM:
        n = inp.sh(ds, "sh_size") // L.SYM64.itemsize * L.SYM64.itemsize
        sy = _read(img, inp.sh(ds, "sh_offset"), n, L.SYM64)
        ifn = ((sy["st_info"] & 0xF) == STT_GNU_IFUNC) & (sy["st_shndx"] != 0)
        if ifn.any():
            _fail(img, f"defines {int(ifn.sum())} ifunc symbol(s) (ld.so runs their resolvers while relocating, "
                       "before a self-applying routine): use the relr form (glibc >= 2.36)")
        obj = ((sy["st_info"] & 0xF) == L.STT_OBJECT) & (sy["st_shndx"] != 0) & (sy["st_size"] > 0) & \
              ((sy["st_info"] >> 4) != L.STB_LOCAL)
        lo += sy["st_value"][obj].astype(np.int64).tolist()
        hi += (sy["st_value"][obj] + sy["st_size"][obj]).astype(np.int64).tolist()
    if not lo:
        return np.zeros(r_off.size, bool)
    order = np.argsort(lo)
    los, his = np.array(lo, np.int64)[order], np.maximum.accumulate(np.array(hi, np.int64)[order])
    v = r_off.astype(np.int64)
    k = np.searchsorted(los, v, side="right") - 1
    return (k >= 0) & (v < his[np.clip(k, 0, None)])


def write_widths(arch, types: np.ndarray) -> np.ndarray:
    """Bytes written per relocation; an unknown type counts as a whole word (conservative)."""
    u, inv = np.unique(np.asarray(types, np.int64), return_inverse=True)
    w = np.array([max(arch.types[t].width, 1) if t in arch.types else arch.word for t in u.tolist()], np.int64)
    return w[inv.reshape(-1)]


def _check_versions(inp: _Input) -> tuple[list, list]:
    """The version needs and every version index the library defines or needs; refuse a
    .gnu.version naming an index beyond them (ld.so would read past its version array,
    and adding a version need would change what it reads)."""
    img, tag, sec = inp.img, inp.tag, inp.sec
    entries, ndx = [], [0, 1]  # VER_NDX_LOCAL, VER_NDX_GLOBAL
    if tag(L.DT_VERNEED) is not None:
        vn_i = sec.get(".gnu.version_r")
        if vn_i is None or inp.sh(vn_i, "sh_addr") != tag(L.DT_VERNEED):
            _fail(img, "inconsistent: .gnu.version_r section does not match DT_VERNEED")
        try:
            entries = L.parse_verneed(inp.section_bytes(vn_i), tag(L.DT_VERNEEDNUM) or 0)
        except ValueError as e:
            _fail(img, f"inconsistent .gnu.version_r ({e})")
        ndx += [a["other"] & ~L.VERSYM_HIDDEN for e in entries for a in e["aux"]]
    vd_i = sec.get(".gnu.version_d")
    if tag(L.DT_VERDEF) is not None and vd_i is not None:
        ndx += L.verdef_indices(inp.section_bytes(vd_i), tag(L.DT_VERDEFNUM) or 0)
    vs_i, ds_i = sec.get(".gnu.version"), sec.get(".dynsym")
    if tag(L.DT_VERSYM) is not None and vs_i is not None and ds_i is not None:
        if inp.sh(vs_i, "sh_addr") != tag(L.DT_VERSYM):
            _fail(img, "inconsistent: .gnu.version section does not match DT_VERSYM")
        n = min(inp.sh(ds_i, "sh_size") // L.SYM64.itemsize, inp.sh(vs_i, "sh_size") // 2)
        versym = _read(img, inp.sh(vs_i, "sh_offset"), 2 * n, np.dtype("<u2")) & ~np.uint16(L.VERSYM_HIDDEN)
        if versym.size and int(versym.max()) > max(ndx):
            k = int(np.argmax(versym))
            _fail(img, f"inconsistent .gnu.version: symbol {k} has version index {int(versym[k])}, but the "
                       f"library defines or needs versions up to {max(ndx)} only")
    return entries, ndx


def _version_need(inp: _Input) -> _VersionNeed:
    """Step 3: GLIBC_ABI_DT_RELR under libc.so.6, when glibc requires it."""
    img, tag, sec = inp.img, inp.tag, inp.sec
    dynstr_i = sec.get(".dynstr")
    if dynstr_i is None or inp.sh(dynstr_i, "sh_addr") != tag(L.DT_STRTAB):
        _fail(img, "inconsistent: .dynstr section does not match DT_STRTAB")
    strtab = inp.section_bytes(dynstr_i)
    live = inp.live
    needed = {L.cstr(strtab, int(v)) for t, v in zip(live["d_tag"], live["d_val"]) if t == L.DT_NEEDED}
    out = _VersionNeed({}, "not needed (no DT_VERNEED: glibc only checks objects with version needs)", None)
    entries, ndx = _check_versions(inp)
    if inp.form == "self":
        out.note = "not needed (self-applying form: no DT_RELR)"
        return out
    if tag(L.DT_VERNEED) is None:
        return out
    vn_i = sec.get(".gnu.version_r")
    libc = [e for e in entries if L.cstr(strtab, e["file"]) == LIBC_SONAME]
    if any(L.cstr(strtab, a["name"]) == GLIBC_ABI_DT_RELR for e in entries for a in e["aux"]):
        out.note = "already present"
        return out
    if not glibc_requires_relr_need(needed, True):
        out.note = "not needed (no libc.so.* in DT_NEEDED)"
        return out
    new_str = b""
    at = strtab.find(b"\0" + GLIBC_ABI_DT_RELR + b"\0")
    if at >= 0:
        name_off = at + 1
    else:
        name_off, new_str = len(strtab), GLIBC_ABI_DT_RELR + b"\0"
    aux = dict(hash=GLIBC_ABI_DT_RELR_HASH, flags=0, other=max(ndx + [1]) + 1, name=name_off)
    if libc:
        libc[0]["aux"].append(aux)
    else:  # needs libc.so.6 but no versioned symbol from it: add the entry
        at = strtab.find(b"\0" + LIBC_SONAME + b"\0")
        if at < 0:
            _fail(img, "libc.so.6 is DT_NEEDED but its name is not in .dynstr")
        entries.append(dict(version=1, file=at + 1, aux=[aux]))
        out.verneednum = len(entries)
    out.grow[vn_i] = L.build_verneed(entries)
    if new_str:
        out.grow[dynstr_i] = strtab + new_str
    out.note = f"added under libc.so.6 (version index {aux['other']})"
    return out


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
            np.any((tf >= inp.dyn_off) & (tf < inp.dyn_off + inp.dyn.nbytes)):
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
    if at + selfapply.SIZE > limit:
        _fail(img, f"no room post-link for the self-applying routine ({limit - end} bytes free after the code, "
                   f"{selfapply.SIZE} needed): link it with 'elflayout link --pack self' instead")
    relro = (0, 0)
    for q in ph[ph["p_type"] == L.PT_GNU_RELRO]:
        lo, hi = int(q["p_vaddr"]) // PAGE * PAGE, int(q["p_vaddr"] + q["p_memsz"]) // PAGE * PAGE
        relro = (lo, hi - lo)  # what glibc's _dl_protect_relro made read-only
    old_init = inp.tag(L.DT_INIT) or 0
    entry = at + vshift + selfapply.ENTRY
    relr_start = lay.relr_off + lay.vshift
    data = selfapply.blob(relr_start, relr_start + sel.relr.nbytes, relro[0], relro[1], old_init, entry)
    return _Applier(at, entry, data, k, relro)


@dataclass
class _Dynamic:
    shift: dict              # section index -> file offset shift
    ashift: dict             # section index -> address shift
    new_dyn: np.ndarray
    new_dyn_off: int | None  # set when the array moved (lld: no spare slots)
    patch: tuple | None      # (offset, bytes) when rewritten in place
    note: str
    relr_addr: int


def _dynamic(inp: _Input, sel: _Selection, vn: _VersionNeed, lay: _Layout, ap: "_Applier | None") -> _Dynamic:
    """Step 5: the dynamic array, in place when it has 3 spare DT_NULL slots (self form:
    DT_INIT replaced, or one slot for it), else moved (relr form only)."""
    img, shdrs, dyn = inp.img, inp.shdrs, inp.dyn
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
    spare = dyn.size - inp.n_used - 1
    dyn_i = next((i for i, s in enumerate(shdrs) if s["sh_type"] == L.SHT_DYNAMIC), None)
    if spare >= add.size:
        new_dyn = np.concatenate([new_live, add, np.zeros(dyn.size - inp.n_used - add.size, L.DYN64)])
        return _Dynamic(shift, dict(shift), new_dyn, None, (inp.dyn_off, new_dyn.tobytes()),
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
    return _Dynamic(shift, ashift, new_dyn, new_dyn_off, None, note, relr_addr)


def _symbols(inp: _Input, lay: _Layout, dy: _Dynamic) -> list:
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


def _headers(inp: _Input, sel: _Selection, vn: _VersionNeed, lay: _Layout, dy: _Dynamic, ap=None):
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


def write_plan(plan: Plan, src, dst) -> None:
    """Copy ``src`` once to ``dst`` (a fresh temporary file) and patch it in place."""
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.truncate(plan.truncate_at)
        f.seek(plan.truncate_at)
        f.write(plan.tail)
        f.flush()
        mm = mmap.mmap(f.fileno(), 0)
        try:
            buf = np.frombuffer(mm, np.uint8)
            w = buf[: buf.size // 8 * 8].view("<u8")
            w[plan.addend_offsets // 8] = plan.addend_values  # packable targets are word-aligned (_select)
            for o, data in plan.blocks:
                buf[o:o + len(data)] = np.frombuffer(data, np.uint8)
            del w, buf
            mm.flush()
        finally:
            mm.close()
        os.fsync(f.fileno())


def pack(src, out, verify=None, *, replace: bool = False, form: str = "relr", cut: bool = True) -> dict:
    """Pack ``src`` into ``out`` atomically; returns the plan's statistics plus timings.

    ``verify(src, tmp)`` (optional) runs on the finished temporary file before it is
    renamed to ``out``; if it raises, ``out`` is left as it was. Without ``replace`` an
    existing ``out`` is never overwritten, even one created meanwhile by another run.
    Raises AlreadyPacked when there is nothing to do (the caller decides what that means).
    """
    t0 = time.perf_counter()
    with elfcore.ElfImage(src) as img:
        plan = plan_pack(img, form, cut)
    t1 = time.perf_counter()
    st = dict(plan.stats)
    with atomic_output(out, mode=os.stat(src).st_mode & 0o777, replace=replace) as tmp:
        write_plan(plan, src, tmp)
        if plan.free_range is not None:
            st["cut"] = cut_freed_pages(tmp, *plan.free_range)
        t2 = time.perf_counter()
        if verify is not None:
            st["check"] = verify(src, tmp)
    st.update(plan_s=round(t1 - t0, 3), write_s=round(t2 - t1, 3), pack_s=round(t2 - t0, 3),
              total_s=round(time.perf_counter() - t0, 3))
    return st


# Fewer whole freed pages than this stay in the file: the cut adds a PT_LOAD, which is
# worth it only when it saves read-around of zeros
MIN_CUT_PAGES = 2


def cut_freed_pages(path, lo: int, hi: int) -> dict:
    """Step 8: take the whole pages of the freed range ``[lo, hi)`` out of the file.

    Read-around at the edges of the hot tables reads the zeros the RELATIVE relocations
    left (libpython: 33 pages, one window on each side of the hole). The PT_LOAD holding
    them is split in two around the hole: addresses stay, only the file offsets of what
    follows drop by the cut (a multiple of the page size, so every segment keeps
    offset ≡ vaddr mod page); ld.so maps the gap PROT_NONE, as for any gap between
    segments. The program header table stays where it is (strip and objcopy rewrite a
    file that has it elsewhere, and the library no longer loads): the new entry takes
    the room after the table, else PT_PHDR's place (optional in a shared library: ld.so
    finds the table in the PT_LOAD that maps e_phoff); GNU ld leaves neither, so
    ``_layout`` slides the tables after the table (the build-id note with them) by one
    entry (``_phdr_reserve``). Returns
    ``{"pages": n, "bytes": n}`` (0 pages and the reason when nothing was cut)."""
    with open(path, "r+b") as f:
        data = bytearray(f.read())
    eh = np.frombuffer(data, L.EHDR64, count=1).copy()[0]
    phoff, phnum, shoff, shnum = int(eh["e_phoff"]), int(eh["e_phnum"]), int(eh["e_shoff"]), int(eh["e_shnum"])
    ph = np.frombuffer(data, L.PHDR64, count=phnum, offset=phoff).copy()
    sh = np.frombuffer(data, L.SHDR64, count=shnum, offset=shoff).copy()

    def nothing(why):
        return {"pages": 0, "bytes": 0, "why": why}

    a, b = L.align_up(lo, PAGE), hi // PAGE * PAGE
    if b - a < MIN_CUT_PAGES * PAGE:
        return nothing(f"fewer than {MIN_CUT_PAGES} whole freed pages")
    loads = np.flatnonzero(ph["p_type"] == L.PT_LOAD)
    k = next((int(i) for i in loads if ph["p_offset"][i] <= lo and hi <= ph["p_offset"][i] + ph["p_filesz"][i]), None)
    if k is None or any(data[lo:hi]):
        return nothing("the freed range is not zeroed inside one PT_LOAD")
    table_end = phoff + phnum * L.PHDR64.itemsize
    if phoff < b and table_end > a:
        return nothing("the program header table lies in the freed range")
    after = [int(sh["sh_offset"][i]) for i in range(shnum) if sh["sh_type"][i] != L.SHT_NOBITS and sh["sh_size"][i]
             and sh["sh_offset"][i] >= table_end]
    after += [int(q["p_offset"]) for q in ph if q["p_filesz"] and q["p_offset"] >= table_end]
    # room: nothing starts there, and its bytes are unused (BOLT leaves bytes outside any section)
    grow = (min(after, default=len(data)) - table_end >= L.PHDR64.itemsize
            and not any(data[table_end:table_end + L.PHDR64.itemsize]))
    phdr = np.flatnonzero(ph["p_type"] == L.PT_PHDR)
    if not grow and not phdr.size:
        return nothing("no room for one more program header and no PT_PHDR to give its place")
    if any(sh["sh_type"][i] != L.SHT_NOBITS and sh["sh_size"][i] and sh["sh_offset"][i] < b
           and sh["sh_offset"][i] + sh["sh_size"][i] > a for i in range(shnum)):
        return nothing("a section lies in the freed range")
    cut = b - a
    seg = ph[k].copy()
    vshift = int(seg["p_vaddr"]) - int(seg["p_offset"])
    first, second = seg.copy(), seg.copy()
    first["p_filesz"] = first["p_memsz"] = a - int(seg["p_offset"])
    second["p_offset"] = a
    second["p_vaddr"] = second["p_paddr"] = b + vshift
    second["p_filesz"] = int(seg["p_offset"] + seg["p_filesz"]) - b
    second["p_memsz"] = int(seg["p_offset"] + seg["p_memsz"]) - b
    ph["p_offset"][ph["p_offset"] >= b] -= np.uint64(cut)
    ph = np.concatenate([ph[:k], [first, second], ph[k + 1:]]).astype(L.PHDR64)
    if grow:
        x = ph["p_type"] == L.PT_PHDR
        ph["p_filesz"][x] = ph["p_memsz"][x] = ph.nbytes
    else:
        ph = ph[ph["p_type"] != L.PT_PHDR]
    sh["sh_offset"][(sh["sh_offset"] >= a) & (sh["sh_offset"] < b)] = a  # empty sections in the cut
    sh["sh_offset"][sh["sh_offset"] >= b] -= np.uint64(cut)
    eh["e_phnum"] = ph.size
    if phoff >= b:  # a table after the hole (BOLT puts it at the end) moves with the bytes
        eh["e_phoff"] = phoff - cut
    if shoff >= b:
        eh["e_shoff"] = shoff - cut
    data[phoff:phoff + ph.nbytes] = ph.tobytes()
    out = data[:a] + data[b:]
    out[0:L.EHDR64.itemsize] = eh.tobytes()
    new_shoff = int(eh["e_shoff"])
    out[new_shoff:new_shoff + sh.nbytes] = sh.tobytes()
    with open(path, "r+b") as f:
        f.write(out)
        f.truncate(len(out))
        f.flush()
        os.fsync(f.fileno())
    return {"pages": cut // PAGE, "bytes": cut, "program_header": "added" if grow else "in PT_PHDR's place"}
