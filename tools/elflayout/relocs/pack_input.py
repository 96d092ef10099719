"""pack-relocs, steps 1-3: read and validate the input, select the relocations to pack,
and the version need glibc requires (pack.py describes the whole algorithm).

Bad input raises ``ElflayoutError`` naming the file and the problem; ``AlreadyPacked``
says there is nothing to do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from elftools.elf.constants import SHN_INDICES
from elftools.elf.enums import ENUM_ST_INFO_TYPE

from elflayout import elfcore
from elflayout import layouts as L
from elflayout.dynamic import Dynamic
from elflayout.errors import ElflayoutError
from elflayout.relocs.arch import IRELATIVE, arch_of
from elflayout.relocs.glibc import GLIBC_ABI_DT_RELR, GLIBC_ABI_DT_RELR_HASH, LIBC_SONAME, glibc_requires_relr_need

FORMS = ("relr", "self")
STT_GNU_IFUNC = ENUM_ST_INFO_TYPE["STT_LOOS"]  # GNU's name for STT_LOOS
SHN_LORESERVE = SHN_INDICES.SHN_LORESERVE  # e_shstrndx at/above it means extended numbering


class AlreadyPacked(Exception):
    """The input already has DT_RELR: nothing to do."""




@dataclass
class _Input:
    """The validated input's raw tables (numpy copies of its headers and dynamic array)."""
    img: elfcore.ElfImage
    arch: object
    shdrs: np.ndarray
    phdrs: np.ndarray
    dyn: Dynamic             # the array PT_DYNAMIC holds, as ld.so reads it
    names: list
    sec: dict                # first section index of each name
    form: str = "relr"       # "relr" (DT_RELR, glibc >= 2.36) or "self" (selfapply.py)

    @property
    def live(self) -> np.ndarray:
        return self.dyn.live

    def tag(self, t) -> int | None:
        return self.dyn.get(t)

    @property
    def interp(self):
        """PT_INTERP's program header, or None: an executable has one (glibc finds its load
        base through PT_PHDR, which must then stay)."""
        x = np.flatnonzero(self.phdrs["p_type"] == L.PT_INTERP)
        return self.phdrs[int(x[0])] if x.size else None

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




def _read(img, off, n, dtype=np.uint8):
    if off < 0 or n < 0 or off + n > img.size:
        _fail(img, f"truncated or inconsistent ELF file (a table of {n} bytes at offset {off:#x} is outside the file)")
    return np.frombuffer(img.mm, dtype=dtype, count=n // np.dtype(dtype).itemsize, offset=off).copy()


def _fail(img, msg):
    raise ElflayoutError(f"{img.path}: {msg}")


def read_input(img, form: str = "relr") -> _Input:
    """The raw tables of a consistent x86-64 or AArch64 ET_DYN file (headers, dynamic array);
    ElflayoutError naming the problem otherwise."""
    hdr = img.elf.header
    if hdr["e_type"] != "ET_DYN":
        _fail(img, f"not position-independent (e_type {hdr['e_type']}); pack-relocs rewrites ET_DYN shared "
                   "libraries and PIE executables")
    arch = arch_of(img)
    if not arch.pack_supported:
        _fail(img, f"packing {img.machine} ELF{img.elfclass} is not implemented yet (x86-64 and AArch64 only; "
                   "the relocation tables in elflayout/arch.py are ready for it)")
    if form == "self" and not arch.self_supported:
        _fail(img, f"the self-applying form is not implemented for {img.machine} (no applier routine for it): "
                   f"use --format relr (glibc >= 2.36)")
    if hdr["e_ident"]["EI_DATA"] != "ELFDATA2LSB":
        _fail(img, "big-endian ELF is not supported")
    if hdr["e_phentsize"] != L.PHDR64.itemsize or hdr["e_shentsize"] != L.SHDR64.itemsize:
        _fail(img, f"inconsistent header sizes (e_phentsize {hdr['e_phentsize']}, e_shentsize {hdr['e_shentsize']})")
    if hdr["e_shnum"] == 0 or hdr["e_shstrndx"] == 0 or hdr["e_shstrndx"] >= min(SHN_LORESERVE, hdr["e_shnum"]):
        _fail(img, "no usable section headers (stripped with --strip-section-headers, or extended numbering)")
    for s in img.loads:
        if s.offset + s.filesz > img.size:
            _fail(img, f"truncated ELF file (PT_LOAD at offset {s.offset:#x} ends past the file's {img.size} bytes)")
    try:
        _, phdrs, shdrs = L.read_headers(img.mm)
    except ValueError as e:
        _fail(img, f"truncated or inconsistent ELF file ({e})")
    dyn = img.dynamic
    if dyn.segments != 1:
        _fail(img, "no PT_DYNAMIC segment (a static object has no dynamic relocations)")
    if not dyn.whole:
        _fail(img, "inconsistent PT_DYNAMIC (outside the file or not a whole number of entries)")
    if not dyn.terminated:
        _fail(img, "inconsistent dynamic array (no DT_NULL terminator)")
    names = [s.name for s in img.sections]
    return _Input(img, arch, shdrs, phdrs, dyn, names, {n: i for i, n in reversed(list(enumerate(names)))}, form)


def validate(img, form: str = "relr") -> _Input:
    """Step 1: reject what cannot be packed; return the input's raw tables."""
    inp = read_input(img, form)
    _check_segments(inp)
    tag = inp.tag
    if tag(L.DT_TEXTREL) is not None or (tag(L.DT_FLAGS) or 0) & L.DF_TEXTREL:
        _fail(img, "has text relocations (DT_TEXTREL): relocating read-only code cannot be packed safely")
    if inp.interp is None and (tag(L.DT_FLAGS_1) or 0) & L.DF_1_PIE:
        _fail(img, "a static PIE (DF_1_PIE without PT_INTERP): it relocates itself with its own copy of "
                   "ld.so's code, which may predate DT_RELR; not packed")
    if form == "self" and inp.interp is not None:
        _self_executable(inp)
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


def _check_segments(inp: _Input) -> None:
    """Every segment's bytes inside the file and its addresses below 2**63: the plan adds
    offsets and sizes, which must not wrap (a damaged header would otherwise look small)."""
    for k, p in enumerate(inp.phdrs):
        off, n = int(p["p_offset"]), int(p["p_filesz"])
        if off + n > inp.img.size:
            _fail(inp.img, f"program header {k} maps file bytes {off:#x}..{off + n:#x}, past the end of the "
                           f"file ({inp.img.size:#x} bytes)")
        a, m = int(p["p_vaddr"]), int(p["p_memsz"])
        if a + m >= 1 << 63:
            _fail(inp.img, f"program header {k} at {a:#x} of {m:#x} bytes ends outside the address space")
        if int(p["p_type"]) == L.PT_LOAD and not int(p["p_flags"]) & L.PF_W and m != n:
            # ld.so zero-fills such a segment's last page past p_filesz, bytes the packed
            # layout may use (arm64 fuzz, self form: 25 bytes different after a real load)
            _fail(inp.img, f"read-only PT_LOAD {k} has p_memsz {m:#x} != p_filesz {n:#x}: ld.so would zero "
                           "the rest of its last page")


def _self_executable(inp: _Input) -> None:
    """An executable's self form runs the routine as the first DT_PREINIT_ARRAY entry (ld.so
    calls the executable's preinit array after relocating everything and before the
    libraries' initializers, on every glibc; an executable's DT_INIT runs through its own
    _init before glibc 2.34, and after the libraries' initializers from 2.34 on)."""
    img = inp.img
    if img.machine != "EM_X86_64":
        _fail(img, f"the self-applying form of an executable is made for x86-64 only ({img.machine}: its "
                   "code segments may be guarded by BTI, and the real start that proves it runs natively only); "
                   "use the relr form (glibc >= 2.36)")
    if inp.tag(L.DT_PREINIT_ARRAY) is not None:
        _fail(img, "already has a DT_PREINIT_ARRAY: the self-applying routine would have to run before its "
                   "entries, whose pointers it may relocate; use the relr form (glibc >= 2.36)")


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
    irel = [t for t, rt in inp.arch.types.items() if rt.kind == IRELATIVE]
    if np.isin(all_types, irel).any():
        _fail(img, "has IRELATIVE relocations (ifunc resolvers run during relocation, before a self-applying "
                   "routine): use the relr form (glibc >= 2.36)")
    lo, hi = [], []
    for p in inp.phdrs[inp.phdrs["p_type"] == L.PT_TLS]:
        a, n = int(p["p_vaddr"]), int(p["p_memsz"])  # below 2**63: _check_segments
        lo.append(a)
        hi.append(a + n)
    ds = inp.sec.get(".dynsym")
    if ds is not None and int(inp.shdrs[ds]["sh_type"]) == L.SHT_DYNSYM:
        n = inp.sh(ds, "sh_size") // L.SYM64.itemsize * L.SYM64.itemsize
        sy = _read(img, inp.sh(ds, "sh_offset"), n, L.SYM64)
        ifn = (L.st_type(sy["st_info"]) == STT_GNU_IFUNC) & (sy["st_shndx"] != 0)
        if ifn.any():
            _fail(img, f"defines {int(ifn.sum())} ifunc symbol(s) (ld.so runs their resolvers while relocating, "
                       "before a self-applying routine): use the relr form (glibc >= 2.36)")
        obj = (L.st_type(sy["st_info"]) == L.STT_OBJECT) & (sy["st_shndx"] != 0) & (sy["st_size"] > 0) & \
              (L.st_bind(sy["st_info"]) != L.STB_LOCAL)
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

