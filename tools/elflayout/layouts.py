"""ELF records as numpy dtypes, and the ELF constants used with them, declared once.

pyelftools parses read-only, record by record (its ``elftools/elf/structs.py`` builds
the same records as ``construct`` structs). Bulk tables (hundreds of thousands of
relocations or symbols) and the packer's in-place patches need the raw bytes as numpy
record arrays instead; every such layout is declared here, field for field as in the
System V gABI (ch. 4 "Object Files": ELF Header, Sections, Symbol Table, Relocation,
Program Header, Dynamic Section) and, for GNU symbol versioning, glibc's ``elf.h``
(Elf64_Verneed/Vernaux/Verdef). Little-endian only (the packer refuses big-endian).

Constants are *named* from pyelftools' ``elftools.elf.enums`` / ``constants``, so a
number appears here only where pyelftools has no name for it (said so next to it).
"""

from __future__ import annotations

import struct

import numpy as np
from elftools.elf.constants import P_FLAGS, SH_FLAGS
from elftools.elf.enums import (ENUM_D_TAG_COMMON, ENUM_DT_FLAGS, ENUM_DT_FLAGS_1, ENUM_P_TYPE_BASE,
                                ENUM_SH_TYPE_BASE, ENUM_ST_INFO_BIND, ENUM_ST_INFO_TYPE)
from elftools.elf.hash import ELFHashTable

# --- records (gABI field order and widths) ----------------------------------------------
EHDR64 = np.dtype([("e_ident", "u1", 16), ("e_type", "<u2"), ("e_machine", "<u2"), ("e_version", "<u4"),
                   ("e_entry", "<u8"), ("e_phoff", "<u8"), ("e_shoff", "<u8"), ("e_flags", "<u4"),
                   ("e_ehsize", "<u2"), ("e_phentsize", "<u2"), ("e_phnum", "<u2"), ("e_shentsize", "<u2"),
                   ("e_shnum", "<u2"), ("e_shstrndx", "<u2")])
SHDR64 = np.dtype([("sh_name", "<u4"), ("sh_type", "<u4"), ("sh_flags", "<u8"), ("sh_addr", "<u8"),
                   ("sh_offset", "<u8"), ("sh_size", "<u8"), ("sh_link", "<u4"), ("sh_info", "<u4"),
                   ("sh_addralign", "<u8"), ("sh_entsize", "<u8")])
PHDR64 = np.dtype([("p_type", "<u4"), ("p_flags", "<u4"), ("p_offset", "<u8"), ("p_vaddr", "<u8"),
                   ("p_paddr", "<u8"), ("p_filesz", "<u8"), ("p_memsz", "<u8"), ("p_align", "<u8")])
DYN64 = np.dtype([("d_tag", "<i8"), ("d_val", "<u8")])
DYN32 = np.dtype([("d_tag", "<i4"), ("d_val", "<u4")])
SYM64 = np.dtype([("st_name", "<u4"), ("st_info", "u1"), ("st_other", "u1"), ("st_shndx", "<u2"),
                  ("st_value", "<u8"), ("st_size", "<u8")])
SYM32 = np.dtype([("st_name", "<u4"), ("st_value", "<u4"), ("st_size", "<u4"), ("st_info", "u1"),
                  ("st_other", "u1"), ("st_shndx", "<u2")])
RELA64 = np.dtype([("r_offset", "<u8"), ("r_info", "<u8"), ("r_addend", "<i8")])
REL64 = np.dtype([("r_offset", "<u8"), ("r_info", "<u8")])
RELA32 = np.dtype([("r_offset", "<u4"), ("r_info", "<u4"), ("r_addend", "<i4")])
REL32 = np.dtype([("r_offset", "<u4"), ("r_info", "<u4")])
# GNU symbol versioning (glibc elf.h); chained by byte offsets, so read one by one.
VERNEED = struct.Struct("<HHIII")   # vn_version, vn_cnt, vn_file, vn_aux, vn_next
VERNAUX = struct.Struct("<IHHII")   # vna_hash, vna_flags, vna_other, vna_name, vna_next
VERDEF = struct.Struct("<HHHHIII")  # vd_version, vd_flags, vd_ndx, vd_cnt, vd_hash, vd_aux, vd_next
VERSYM_HIDDEN = 0x8000              # glibc elf.h VERSYM_HIDDEN (not named by pyelftools)


# r_info packs the symbol index and the relocation type (gABI "Relocation":
# ELF64_R_SYM(i) = i >> 32, ELF64_R_TYPE(i) = i & 0xffffffff; ELF32: >> 8 and & 0xff).
_R_SYM_SHIFT = {64: 32, 32: 8}


def r_sym(info, elfclass: int = 64):
    """Symbol index of ``r_info`` (an int or a numpy array of them), ELF64_R_SYM/ELF32_R_SYM."""
    shift = _R_SYM_SHIFT[elfclass]
    return info >> np.uint64(shift) if isinstance(info, np.ndarray) else int(info) >> shift


def r_type(info, elfclass: int = 64):
    """Relocation type of ``r_info`` (an int or a numpy array of them), ELF64_R_TYPE/ELF32_R_TYPE."""
    mask = (1 << _R_SYM_SHIFT[elfclass]) - 1
    return info & np.uint64(mask) if isinstance(info, np.ndarray) else int(info) & mask


def r_info(sym, rtype, elfclass: int = 64):
    """``r_info`` of a symbol index and a relocation type, ELF64_R_INFO/ELF32_R_INFO."""
    shift = _R_SYM_SHIFT[elfclass]
    if isinstance(sym, np.ndarray) or isinstance(rtype, np.ndarray):
        return (np.asarray(sym).astype(np.uint64) << np.uint64(shift)) | np.asarray(rtype).astype(np.uint64)
    return (int(sym) << shift) | int(rtype)


def st_type(info):
    """Symbol type of ``st_info`` (ELF64_ST_TYPE; an int or a numpy array)."""
    return info & 0xF


def st_bind(info):
    """Symbol binding of ``st_info`` (ELF64_ST_BIND; an int or a numpy array)."""
    return info >> 4


def read_headers(buf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Copies of the ELF header (one record), program headers and section headers of the
    ELF64 little-endian file whose bytes are ``buf``. ValueError if a table lies outside it."""
    ehdr = np.frombuffer(buf, EHDR64, count=1).copy()
    h = ehdr[0]
    tables = []
    for off, n, dt in ((h["e_phoff"], h["e_phnum"], PHDR64), (h["e_shoff"], h["e_shnum"], SHDR64)):
        off, n = int(off), int(n)
        if off + n * dt.itemsize > len(buf):
            raise ValueError(f"a header table of {n} entries at offset {off:#x} is outside the file")
        tables.append(np.frombuffer(buf, dt, count=n, offset=off).copy() if n else np.zeros(0, dt))
    return ehdr, tables[0], tables[1]


def field_offset(dtype: np.dtype, name: str) -> int:
    """Byte offset of a field in a record (e.g. e_shoff in the ELF header)."""
    return dtype.fields[name][1]


def _named(enum: dict, *names: str) -> tuple[int, ...]:
    return tuple(enum[n] for n in names)


# --- constants, by pyelftools' names -------------------------------------------------------
(DT_NULL, DT_NEEDED, DT_PLTRELSZ, DT_PLTGOT, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_RELA, DT_RELASZ, DT_RELAENT,
 DT_STRSZ, DT_SYMENT, DT_INIT, DT_FINI, DT_SONAME, DT_RPATH, DT_SYMBOLIC, DT_REL, DT_RELSZ, DT_RELENT,
 DT_PLTREL, DT_DEBUG, DT_TEXTREL, DT_JMPREL, DT_BIND_NOW, DT_INIT_ARRAY, DT_FINI_ARRAY, DT_INIT_ARRAYSZ,
 DT_FINI_ARRAYSZ, DT_RUNPATH, DT_FLAGS) = _named(
    ENUM_D_TAG_COMMON, "DT_NULL", "DT_NEEDED", "DT_PLTRELSZ", "DT_PLTGOT", "DT_HASH", "DT_STRTAB", "DT_SYMTAB",
    "DT_RELA", "DT_RELASZ", "DT_RELAENT", "DT_STRSZ", "DT_SYMENT", "DT_INIT", "DT_FINI", "DT_SONAME",
    "DT_RPATH", "DT_SYMBOLIC", "DT_REL", "DT_RELSZ", "DT_RELENT", "DT_PLTREL", "DT_DEBUG", "DT_TEXTREL",
    "DT_JMPREL", "DT_BIND_NOW", "DT_INIT_ARRAY", "DT_FINI_ARRAY", "DT_INIT_ARRAYSZ", "DT_FINI_ARRAYSZ",
    "DT_RUNPATH", "DT_FLAGS")
(DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ, DT_RELRSZ, DT_RELR, DT_RELRENT, DT_GNU_HASH, DT_VERSYM, DT_RELACOUNT,
 DT_RELCOUNT, DT_FLAGS_1, DT_VERDEF, DT_VERDEFNUM, DT_VERNEED, DT_VERNEEDNUM) = _named(
    ENUM_D_TAG_COMMON, "DT_PREINIT_ARRAY", "DT_PREINIT_ARRAYSZ", "DT_RELRSZ", "DT_RELR", "DT_RELRENT",
    "DT_GNU_HASH", "DT_VERSYM", "DT_RELACOUNT", "DT_RELCOUNT", "DT_FLAGS_1", "DT_VERDEF", "DT_VERDEFNUM",
    "DT_VERNEED", "DT_VERNEEDNUM")
DF_TEXTREL, DF_BIND_NOW = _named(ENUM_DT_FLAGS, "DF_TEXTREL", "DF_BIND_NOW")
DF_1_PIE, DF_1_NOW = _named(ENUM_DT_FLAGS_1, "DF_1_PIE", "DF_1_NOW")
# Tags whose value is an address of a table that may move when tables are regrown.
DT_TABLE_PTRS = (DT_HASH, DT_STRTAB, DT_SYMTAB, DT_RELA, DT_GNU_HASH, DT_VERSYM, DT_VERDEF, DT_VERNEED)

PT_NULL, PT_LOAD, PT_DYNAMIC, PT_INTERP, PT_NOTE, PT_PHDR, PT_TLS, PT_GNU_RELRO = _named(
    ENUM_P_TYPE_BASE, "PT_NULL", "PT_LOAD", "PT_DYNAMIC", "PT_INTERP", "PT_NOTE", "PT_PHDR", "PT_TLS", "PT_GNU_RELRO")
PF_X, PF_W, PF_R = P_FLAGS.PF_X, P_FLAGS.PF_W, P_FLAGS.PF_R
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = SH_FLAGS.SHF_WRITE, SH_FLAGS.SHF_ALLOC, SH_FLAGS.SHF_EXECINSTR
(SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_HASH, SHT_DYNAMIC, SHT_NOTE, SHT_NOBITS, SHT_REL,
 SHT_DYNSYM, SHT_INIT_ARRAY, SHT_RELR, SHT_GNU_HASH, SHT_GNU_VERDEF, SHT_GNU_VERNEED, SHT_GNU_VERSYM) = _named(
    ENUM_SH_TYPE_BASE, "SHT_NULL", "SHT_PROGBITS", "SHT_SYMTAB", "SHT_STRTAB", "SHT_RELA", "SHT_HASH",
    "SHT_DYNAMIC", "SHT_NOTE", "SHT_NOBITS", "SHT_REL", "SHT_DYNSYM", "SHT_INIT_ARRAY", "SHT_RELR",
    "SHT_GNU_HASH", "SHT_GNU_verdef", "SHT_GNU_verneed", "SHT_GNU_versym")
SHT_BY_NAME = {k: v for k, v in ENUM_SH_TYPE_BASE.items() if k.startswith("SHT_")}  # pyelftools' names
SHT_PREINIT_ARRAY = ENUM_SH_TYPE_BASE["SHT_PREINIT_ARRAY"]
STT_SECTION, STT_OBJECT = ENUM_ST_INFO_TYPE["STT_SECTION"], ENUM_ST_INFO_TYPE["STT_OBJECT"]
STB_LOCAL = ENUM_ST_INFO_BIND["STB_LOCAL"]
# Dynamic-linking tables that hold no absolute address of themselves and are only found
# through DT_* tags and section headers: safe to slide by a few bytes.
PT_GNU_PROPERTY = 0x6474E553  # the .note.gnu.property note again (x86 ISA level, CET)
MOVABLE_TYPES = {SHT_STRTAB, SHT_HASH, SHT_DYNSYM, SHT_GNU_HASH, SHT_GNU_VERDEF, SHT_GNU_VERNEED, SHT_GNU_VERSYM}


def sh_type_number(t) -> int:
    """Section type as a number, from pyelftools' name (unknown types stay numbers)."""
    return t if isinstance(t, int) else SHT_BY_NAME.get(t, -1)


def elf_hash(name: bytes) -> int:
    """SysV ELF hash (gABI "Hash Table"), used in vna_hash; pyelftools' implementation."""
    return ELFHashTable.elf_hash(name)


def align_up(x: int, a: int) -> int:
    a = max(int(a), 1)
    return (x + a - 1) // a * a


def cstr(buf, off: int) -> bytes:
    """The NUL-terminated string at ``off`` (at most 4 KiB; empty past the end)."""
    end = bytes(buf[off:off + 4096]).find(b"\0")
    return bytes(buf[off:off + end]) if end >= 0 else bytes(buf[off:off + 4096])


# --- GNU symbol versioning ------------------------------------------------------------------
def parse_verneed(data: bytes, count: int) -> list[dict]:
    """Verneed entries (each with its Vernaux list) following vn_next/vna_next links.

    Raises ValueError on links that leave the table or loop (damaged input).
    """
    out, off = [], 0
    for _ in range(count):
        if off + VERNEED.size > len(data):
            raise ValueError("version needs run past .gnu.version_r")
        ver, cnt, file, aux, nxt = VERNEED.unpack_from(data, off)
        auxes, a = [], off + aux
        for _ in range(cnt):
            if a + VERNAUX.size > len(data):
                raise ValueError("version need aux runs past .gnu.version_r")
            h, fl, other, name, anext = VERNAUX.unpack_from(data, a)
            auxes.append(dict(hash=h, flags=fl, other=other, name=name))
            a += anext
        out.append(dict(version=ver, file=file, aux=auxes))
        if not nxt:
            break
        off += nxt
    return out


def build_verneed(entries: list[dict]) -> bytes:
    """Serialise Verneed entries in the layout linkers use (entry, then its auxes)."""
    out = bytearray()
    for i, e in enumerate(entries):
        n = len(e["aux"])
        last = i == len(entries) - 1
        out += VERNEED.pack(e["version"], n, e["file"], VERNEED.size if n else 0,
                            0 if last else VERNEED.size + n * VERNAUX.size)
        for j, a in enumerate(e["aux"]):
            out += VERNAUX.pack(a["hash"], a["flags"], a["other"], a["name"], 0 if j == n - 1 else VERNAUX.size)
    return bytes(out)


def verdef_indices(data: bytes, count: int) -> list[int]:
    """Version indices (vd_ndx) defined by a .gnu.version_d table."""
    out, off = [], 0
    for _ in range(count):
        if off + VERDEF.size > len(data):
            break
        _, _, ndx, _, _, _, nxt = VERDEF.unpack_from(data, off)
        out.append(ndx & ~VERSYM_HIDDEN)
        if not nxt:
            break
        off += nxt
    return out
