"""Function extents of an ELF file: symbol tables plus ``.eh_frame`` FDEs.

Stripped libraries (Debian's libLLVM-16 has no ``.symtab``) still carry one FDE per
function for unwinding, so FDE extents recover the function boundaries that the
exported ``.dynsym`` symbols do not name.

Merge rule (``functions``):

1. ``.symtab`` STT_FUNC/STT_GNU_IFUNC symbols with size > 0 that are defined
   (st_shndx != SHN_UNDEF). Aliases (several symbols at one address) keep one name:
   GLOBAL before WEAK before LOCAL, then the first in table order.
2. ``.dynsym`` symbols of the same kind at addresses ``.symtab`` did not name (with a
   full ``.symtab`` this adds nothing; without one it is the only source of names).
3. ``.eh_frame`` FDE extents [pc_begin, pc_begin + pc_range) that do not intersect any
   named extent fill the gaps. They are named ``fde_<vaddr in hex>`` (e.g.
   ``fde_e2f680``); ``FunctionTable.named`` tells real names from these.

FDEs are read without a Python loop over them: the ``.eh_frame_hdr`` binary-search
table (gABI/LSB "eh_frame_hdr") gives every FDE's address; the FDE headers are then
read with numpy for each distinct pointer encoding of their CIEs (x86-64 compilers
use DW_EH_PE_pcrel|DW_EH_PE_sdata4 = 0x1b). Encodings that are not fixed-size
absolute/pc-relative, or a library without ``.eh_frame_hdr``, fall back to pyelftools.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from elftools.elf.enums import ENUM_ST_INFO_BIND, ENUM_ST_INFO_TYPE

from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.layouts import SYM32, SYM64

SOURCES = ("symtab", "dynsym", "eh_frame")
SRC_SYMTAB, SRC_DYNSYM, SRC_EH_FRAME = 0, 1, 2

STT_FUNC = ENUM_ST_INFO_TYPE["STT_FUNC"]
STT_GNU_IFUNC = ENUM_ST_INFO_TYPE["STT_LOOS"]  # GNU's name for STT_LOOS (pyelftools keeps the generic one)
STB_LOCAL, STB_GLOBAL, STB_WEAK = (ENUM_ST_INFO_BIND[n] for n in ("STB_LOCAL", "STB_GLOBAL", "STB_WEAK"))

# DWARF exception-header pointer encodings (LSB 5.0, "DWARF Exception Header Encoding").
DW_EH_PE_omit = 0xFF
_FMT_SIZE = {0x02: (2, "<u2"), 0x03: (4, "<u4"), 0x04: (8, "<u8"),
             0x0A: (2, "<i2"), 0x0B: (4, "<i4"), 0x0C: (8, "<i8")}  # udataN / sdataN
DW_EH_PE_pcrel, DW_EH_PE_datarel = 0x10, 0x30

# Structured view handed to other stages (design brief): one record per function.
FUNC_DTYPE = np.dtype([("name", "<i8"), ("offset", "<i8"), ("vaddr", "<i8"), ("size", "<i8"), ("source", "u1")])


@dataclass
class FunctionTable:
    """Function extents sorted by file offset.

    ``offset``/``vaddr``/``size`` are int64 arrays, ``source`` a uint8 array of indices
    into :data:`SOURCES`, ``names[i]`` the symbol name (``fde_<hex>`` for FDE-only
    functions). Extents of different entries do not overlap, except where a symbol
    table itself declares nested functions.
    """

    offset: np.ndarray
    vaddr: np.ndarray
    size: np.ndarray
    source: np.ndarray
    names: list
    fde_count: int = 0  # FDEs found in .eh_frame (before merging)
    symbol_counts: dict = field(default_factory=dict)  # function symbols per table

    def __len__(self) -> int:
        return int(self.offset.size)

    @property
    def named(self) -> np.ndarray:
        """True where the name is a real symbol (not an FDE placeholder)."""
        return self.source != SRC_EH_FRAME

    def counts(self) -> dict:
        """Functions per source, e.g. {"symtab": 0, "dynsym": 30123, "eh_frame": 74000}."""
        c = np.bincount(self.source, minlength=len(SOURCES))
        return {s: int(c[i]) for i, s in enumerate(SOURCES)}

    def lookup(self, file_offsets) -> np.ndarray:
        """Index of the function containing each file offset, -1 where none does."""
        o = np.asarray(file_offsets, dtype=np.int64)
        k = np.searchsorted(self.offset, o, side="right") - 1
        kc = np.clip(k, 0, None)
        if self.offset.size == 0:
            return np.full(o.shape, -1, dtype=np.int64)
        hit = (k >= 0) & (o < self.offset[kc] + self.size[kc])
        return np.where(hit, k, -1).astype(np.int64)

    def records(self) -> np.ndarray:
        """The table as a numpy structured array (``name`` indexes ``names``)."""
        r = np.empty(len(self), dtype=FUNC_DTYPE)
        r["name"] = np.arange(len(self))
        r["offset"], r["vaddr"], r["size"], r["source"] = self.offset, self.vaddr, self.size, self.source
        return r

    def by_name(self) -> dict:
        """name -> index (first occurrence)."""
        out: dict = {}
        for i, n in enumerate(self.names):
            out.setdefault(n, i)
        return out


# -- symbol tables ------------------------------------------------------------------------

def _cstrings(img: ElfImage, strtab_off: int, strtab_size: int, idx: np.ndarray) -> list[str]:
    """NUL-terminated strings at byte indices ``idx`` of a string table.

    The ends come from one numpy scan for NULs; an all-ASCII table (the usual case) is
    decoded once and sliced, which is ~3x faster than decoding 100k names one by one.
    """
    raw = bytes(img.mm[strtab_off:strtab_off + strtab_size])
    if not raw.endswith(b"\0"):
        raw += b"\0"
    nul = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 0)
    starts = np.minimum(np.asarray(idx, dtype=np.int64), len(raw) - 1)
    ends = nul[np.searchsorted(nul, starts)]
    if raw.isascii():
        text = raw.decode("ascii")
        return [text[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    return [raw[a:b].decode("utf-8", "replace") for a, b in zip(starts.tolist(), ends.tolist())]


def read_symbols(img: ElfImage, table: str) -> tuple[np.ndarray, list[str]] | None:
    """Defined function symbols of ``.symtab`` or ``.dynsym`` (records, names); None if absent."""
    want = "SHT_SYMTAB" if table == "symtab" else "SHT_DYNSYM"
    sec = next((s for s in img.sections if s.type == want), None)
    if sec is None:
        return None
    dt = SYM64 if img.elfclass == 64 else SYM32
    n = sec.size // dt.itemsize
    if sec.offset + n * dt.itemsize > img.size:
        raise ElflayoutError(f"{img.path}: {sec.name} extends past the end of the file")
    syms = np.frombuffer(img.mm, dtype=dt, count=n, offset=sec.offset)
    typ = syms["st_info"] & 0xF
    keep = ((typ == STT_FUNC) | (typ == STT_GNU_IFUNC)) & (syms["st_size"] > 0) & (syms["st_shndx"] != 0)
    syms = syms[keep]
    link = img.elf.get_section(sec.index)["sh_link"]
    strsec = img.sections[link] if 0 < link < len(img.sections) else None
    if strsec is None:
        return syms, [f"sym_{v:x}" for v in syms["st_value"].tolist()]
    return syms, _cstrings(img, strsec.offset, strsec.size, syms["st_name"])


def _symbol_extents(img: ElfImage, sources) -> tuple[np.ndarray, np.ndarray, np.ndarray, list, dict]:
    vaddr, size, src, names, counts = [], [], [], [], {}
    seen = np.zeros(0, dtype=np.int64)
    for code, table in ((SRC_SYMTAB, "symtab"), (SRC_DYNSYM, "dynsym")):
        if table not in sources:
            continue
        got = read_symbols(img, table)
        if got is None:
            counts[table] = None
            continue
        syms, nm = got
        counts[table] = int(syms.size)
        v = syms["st_value"].astype(np.int64)
        bind = syms["st_info"] >> 4
        prio = np.select([bind == STB_GLOBAL, bind == STB_WEAK], [0, 1], 2)
        order = np.lexsort((np.arange(v.size), prio, v))  # by address, then preference, then table order
        v_s = v[order]
        first = np.ones(v_s.size, dtype=bool)
        first[1:] = v_s[1:] != v_s[:-1]
        pick = order[first]
        pick = pick[~np.isin(v[pick], seen)]  # an earlier table already named this address
        seen = np.concatenate([seen, v[pick]])
        vaddr.append(v[pick])
        size.append(syms["st_size"][pick].astype(np.int64))
        src.append(np.full(pick.size, code, dtype=np.uint8))
        names.extend(nm[i] for i in pick.tolist())
    if not vaddr:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8), [], counts
    return np.concatenate(vaddr), np.concatenate(size), np.concatenate(src), names, counts


# -- .eh_frame ----------------------------------------------------------------------------

def _read_encoded(img: ElfImage, off: int, enc: int, field_vaddr: int, datarel_base: int = 0) -> tuple[int, int]:
    """One encoded pointer at file offset ``off``: (value, bytes consumed)."""
    fmt = enc & 0x0F
    if fmt == 0x00:  # absptr: native word
        fmt = 0x04 if img.wordsize == 8 else 0x03
    if fmt in (0x01, 0x09):  # uleb128 / sleb128
        val, shift, n = 0, 0, 0
        while True:
            b = img.mm[off + n]
            val |= (b & 0x7F) << shift
            shift += 7
            n += 1
            if not b & 0x80:
                break
        if fmt == 0x09 and b & 0x40:
            val -= 1 << shift
    elif fmt in _FMT_SIZE:
        n, dt = _FMT_SIZE[fmt]
        val = int(np.frombuffer(img.mm, dtype=dt, count=1, offset=off)[0])
    else:
        raise ValueError(f"unsupported pointer encoding {enc:#x}")
    app = enc & 0x70
    if app == DW_EH_PE_pcrel:
        val += field_vaddr
    elif app == DW_EH_PE_datarel:
        val += datarel_base
    return val, n


def _uleb(mm, off: int) -> tuple[int, int]:
    val, shift, n = 0, 0, 0
    while True:
        b = mm[off + n]
        val |= (b & 0x7F) << shift
        shift += 7
        n += 1
        if not b & 0x80:
            return val, n


def _cie_fde_encoding(img: ElfImage, cie_off: int) -> int:
    """The 'R' augmentation (FDE pointer encoding) of the CIE at file offset ``cie_off``."""
    mm = img.mm
    length = int.from_bytes(mm[cie_off:cie_off + 4], "little")
    p = cie_off + 4
    if length == 0xFFFFFFFF:
        p += 8
    p += 4  # CIE id (0)
    version = mm[p]
    p += 1
    end = mm.find(b"\0", p)
    aug = bytes(mm[p:end]).decode("ascii", "replace")
    p = end + 1
    if "eh" in aug:
        p += img.wordsize
    _, n = _uleb(mm, p)  # code alignment
    p += n
    _, n = _uleb(mm, p)  # data alignment (sleb; only its length matters)
    p += n
    if version == 1:
        p += 1
    else:
        _, n = _uleb(mm, p)
        p += n
    if not aug.startswith("z"):
        return 0x00  # no augmentation data: absptr
    _, n = _uleb(mm, p)
    p += n
    for c in aug[1:]:
        if c == "R":
            return mm[p]
        if c == "L":
            p += 1
        elif c == "P":
            penc = mm[p]
            _, n = _read_encoded(img, p + 1, penc & 0x7F, 0)
            p += 1 + n
        elif c in "SB":
            pass
        else:
            break
    return 0x00


def _eh_frame_hdr_table(img: ElfImage) -> tuple[np.ndarray, np.ndarray] | None:
    """(initial locations, FDE vaddrs) from ``.eh_frame_hdr``; None if absent/unusable."""
    hdr = img.section(".eh_frame_hdr")
    if hdr is None:
        seg = next((s for s in img.segments if s.type == "PT_GNU_EH_FRAME"), None)
        if seg is None:
            return None
        h_off, h_vaddr, h_size = seg.offset, seg.vaddr, seg.filesz
    else:
        h_off, h_vaddr, h_size = hdr.offset, hdr.addr, hdr.size
    if h_size < 4:
        return None
    mm = img.mm
    version, ptr_enc, cnt_enc, tab_enc = mm[h_off], mm[h_off + 1], mm[h_off + 2], mm[h_off + 3]
    if version != 1 or cnt_enc == DW_EH_PE_omit or tab_enc == DW_EH_PE_omit:
        return None
    p = h_off + 4
    try:
        _, n = _read_encoded(img, p, ptr_enc, h_vaddr + 4, h_vaddr)
        p += n
        count, n = _read_encoded(img, p, cnt_enc, h_vaddr + (p - h_off), h_vaddr)
        p += n
    except ValueError:
        return None
    # The table must be datarel-relative fixed-size pairs to be binary-searchable.
    if (tab_enc & 0x70) != DW_EH_PE_datarel or (tab_enc & 0x0F) not in _FMT_SIZE:
        return None
    width, dt = _FMT_SIZE[tab_enc & 0x0F]
    if count < 0 or p + count * 2 * width > h_off + h_size:
        raise ElflayoutError(f"{img.path}: .eh_frame_hdr table ({count} entries) runs past its section")
    t = np.frombuffer(img.mm, dtype=dt, count=2 * count, offset=p).astype(np.int64).reshape(-1, 2)
    return t[:, 0] + h_vaddr, t[:, 1] + h_vaddr


def fde_extents(img: ElfImage) -> tuple[np.ndarray, np.ndarray]:
    """(pc_begin vaddrs, pc_range sizes) of every FDE in ``.eh_frame``, sorted by pc_begin."""
    if img.section(".eh_frame") is None and not any(s.type == "PT_GNU_EH_FRAME" for s in img.segments):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    try:
        tab = _eh_frame_hdr_table(img)
        if tab is not None:
            got = _fde_extents_vectorised(img, *tab)
            if got is not None:
                return got
        return _fde_extents_pyelftools(img)
    except ElflayoutError:
        raise
    except (ValueError, IndexError) as e:
        raise ElflayoutError(f"{img.path}: malformed .eh_frame ({e})") from None


def _fde_extents_vectorised(img: ElfImage, init_loc: np.ndarray, fde_vaddr: np.ndarray):
    if init_loc.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    fde_off = img.vaddr_to_offset(fde_vaddr.astype(np.uint64))
    if np.any(fde_off < 0) or np.any(fde_off + 16 > img.size):
        raise ElflayoutError(f"{img.path}: .eh_frame_hdr points outside the file")
    b = img.buf

    def u32(at):
        at = at[:, None] + np.arange(4)
        return (b[at].astype(np.uint32) << np.array([0, 8, 16, 24], dtype=np.uint32)).sum(axis=1, dtype=np.uint32)

    length = u32(fde_off)
    if np.any(length == 0xFFFFFFFF):
        return None  # 64-bit DWARF FDEs: rare, let pyelftools handle them
    cie_ptr = u32(fde_off + 4).astype(np.int64)
    cie_off = fde_off + 4 - cie_ptr
    uniq, inv = np.unique(cie_off, return_inverse=True)
    encs = np.array([_cie_fde_encoding(img, int(c)) for c in uniq], dtype=np.int64)[inv]
    begin = np.zeros(fde_off.size, np.int64)
    rng = np.zeros(fde_off.size, np.int64)
    for enc in np.unique(encs).tolist():
        fmt = enc & 0x0F or (0x04 if img.wordsize == 8 else 0x03)
        if fmt not in _FMT_SIZE or (enc & 0x70) not in (0, DW_EH_PE_pcrel) or enc & 0x80:
            return None
        width, dt = _FMT_SIZE[fmt]
        m = encs == enc
        o = fde_off[m] + 8
        at = o[:, None] + np.arange(2 * width)
        raw = b[at].copy().view(np.dtype(dt)).reshape(-1, 2).astype(np.int64)
        pcb = raw[:, 0]
        if enc & 0x70 == DW_EH_PE_pcrel:
            pcb = pcb + img.offset_to_vaddr(o)
        begin[m] = pcb
        r = raw[:, 1]
        if dt.startswith("<u") and width == 4:
            r = r & 0xFFFFFFFF
        rng[m] = r
    if not np.array_equal(begin, init_loc):
        raise ElflayoutError(f"{img.path}: .eh_frame_hdr table disagrees with the FDEs it points to")
    order = np.argsort(begin, kind="stable")
    return begin[order], rng[order]


def _fde_extents_pyelftools(img: ElfImage):
    from elftools.dwarf.callframe import FDE

    try:
        if not img.elf.has_dwarf_info() and img.section(".eh_frame") is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        dw = img.elf.get_dwarf_info(follow_links=False)
        entries = dw.EH_CFI_entries() if dw.has_EH_CFI() else []
    except Exception as e:  # pyelftools raises assorted errors on damaged CFI
        raise ElflayoutError(f"{img.path}: cannot parse .eh_frame ({type(e).__name__}: {e})") from None
    begin, rng = [], []
    for e in entries:
        if isinstance(e, FDE):
            begin.append(e.header["initial_location"])
            rng.append(e.header["address_range"])
    begin = np.array(begin, dtype=np.int64)
    rng = np.array(rng, dtype=np.int64)
    order = np.argsort(begin, kind="stable")
    return begin[order], rng[order]


# -- merge --------------------------------------------------------------------------------

def functions(img: ElfImage, sources=SOURCES) -> FunctionTable:
    """Function extents of ``img`` (see the module docstring for the merge rule)."""
    bad = set(sources) - set(SOURCES)
    if bad:
        raise ValueError(f"unknown function sources {sorted(bad)}; known: {', '.join(SOURCES)}")
    vaddr, size, src, names, counts = _symbol_extents(img, sources)
    fde_count = 0
    if "eh_frame" in sources:
        fb, fr = fde_extents(img)
        fde_count = int(fb.size)
        keep = fr > 0
        fb, fr = fb[keep], fr[keep]
        if vaddr.size and fb.size:
            o = np.argsort(vaddr, kind="stable")
            ns, ne = vaddr[o], vaddr[o] + size[o]
            ne_max = np.maximum.accumulate(ne)  # tolerate nested symbol extents
            k = np.searchsorted(ns, fb, side="right") - 1
            starts_inside = (k >= 0) & (fb < ne_max[np.clip(k, 0, None)])
            nxt = np.searchsorted(ns, fb, side="right")
            runs_into = (nxt < ns.size) & (ns[np.clip(nxt, 0, ns.size - 1)] < fb + fr)
            free = ~(starts_inside | runs_into)
            fb, fr = fb[free], fr[free]
        # identical FDE extents (rare) keep one
        if fb.size:
            u = np.ones(fb.size, dtype=bool)
            u[1:] = fb[1:] != fb[:-1]
            fb, fr = fb[u], fr[u]
        vaddr = np.concatenate([vaddr, fb])
        size = np.concatenate([size, fr])
        src = np.concatenate([src, np.full(fb.size, SRC_EH_FRAME, dtype=np.uint8)])
        names = names + [f"fde_{v:x}" for v in fb.tolist()]
    offset = img.vaddr_to_offset(vaddr.astype(np.uint64)) if vaddr.size else np.zeros(0, np.int64)
    ok = offset >= 0  # drop extents outside file-backed PT_LOADs (e.g. ET_REL objects)
    order = np.flatnonzero(ok)[np.argsort(offset[ok], kind="stable")]
    return FunctionTable(
        offset=offset[order].astype(np.int64),
        vaddr=vaddr[order].astype(np.int64),
        size=size[order].astype(np.int64),
        source=src[order],
        names=[names[i] for i in order.tolist()],
        fde_count=fde_count,
        symbol_counts=counts,
    )
