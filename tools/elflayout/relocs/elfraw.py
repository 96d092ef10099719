"""Raw ELF64 records (System V gABI, little-endian) for reading *and patching*.

pyelftools parses read-only; the packer needs the exact bytes of the dynamic array,
section and program headers, symbol tables and GNU version tables so that it can
rewrite them in place. Each layout is declared once here.
"""

from __future__ import annotations

import struct

import numpy as np

# gABI "Section Header", "Program Header", "Dynamic Section", "Symbol Table".
SHDR64 = np.dtype([("sh_name", "<u4"), ("sh_type", "<u4"), ("sh_flags", "<u8"), ("sh_addr", "<u8"),
                   ("sh_offset", "<u8"), ("sh_size", "<u8"), ("sh_link", "<u4"), ("sh_info", "<u4"),
                   ("sh_addralign", "<u8"), ("sh_entsize", "<u8")])
PHDR64 = np.dtype([("p_type", "<u4"), ("p_flags", "<u4"), ("p_offset", "<u8"), ("p_vaddr", "<u8"),
                   ("p_paddr", "<u8"), ("p_filesz", "<u8"), ("p_memsz", "<u8"), ("p_align", "<u8")])
DYN64 = np.dtype([("d_tag", "<i8"), ("d_val", "<u8")])
SYM64 = np.dtype([("st_name", "<u4"), ("st_info", "u1"), ("st_other", "u1"), ("st_shndx", "<u2"),
                  ("st_value", "<u8"), ("st_size", "<u8")])

# Dynamic tags used here (gABI + GNU extensions).
DT_NULL, DT_NEEDED, DT_PLTRELSZ, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_RELA, DT_RELASZ, DT_RELAENT = 0, 1, 2, 4, 5, 6, 7, 8, 9
DT_STRSZ, DT_REL, DT_RELSZ, DT_DEBUG, DT_TEXTREL, DT_JMPREL, DT_FLAGS = 10, 17, 18, 21, 22, 23, 30
DT_RELRSZ, DT_RELR, DT_RELRENT = 35, 36, 37
DT_GNU_HASH, DT_VERSYM, DT_RELACOUNT, DT_RELCOUNT = 0x6FFFFEF5, 0x6FFFFFF0, 0x6FFFFFF9, 0x6FFFFFFA
DT_VERDEF, DT_VERDEFNUM, DT_VERNEED, DT_VERNEEDNUM = 0x6FFFFFFC, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF
DF_TEXTREL = 0x4
DT_FLAGS_1, DF_1_PIE = 0x6FFFFFFB, 0x08000000
# Tags whose value is an address of a table that may move when tables are regrown.
DT_TABLE_PTRS = (DT_HASH, DT_STRTAB, DT_SYMTAB, DT_RELA, DT_GNU_HASH, DT_VERSYM, DT_VERDEF, DT_VERNEED)

PT_LOAD, PT_DYNAMIC = 1, 2
PF_R = 4
SHF_WRITE, SHF_ALLOC = 1, 2
SHT_STRTAB, SHT_RELA, SHT_HASH, SHT_DYNAMIC, SHT_NOBITS, SHT_DYNSYM, SHT_SYMTAB = 3, 4, 5, 6, 8, 11, 2
SHT_RELR = 19
SHT_GNU_HASH, SHT_GNU_VERDEF, SHT_GNU_VERNEED, SHT_GNU_VERSYM = 0x6FFFFFF6, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF
# Dynamic-linking tables that hold no absolute address of themselves and are only found
# through DT_* tags and section headers: safe to slide by a few bytes.
MOVABLE_TYPES = {SHT_STRTAB, SHT_HASH, SHT_DYNSYM, SHT_GNU_HASH, SHT_GNU_VERDEF, SHT_GNU_VERNEED, SHT_GNU_VERSYM}

EHDR_SHOFF, EHDR_SHNUM = 0x28, 0x3C


def elf_hash(name: bytes) -> int:
    """SysV ELF hash (gABI "Hash Table"), used in vna_hash."""
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def align_up(x: int, a: int) -> int:
    a = max(int(a), 1)
    return (x + a - 1) // a * a


def cstr(buf, off: int) -> bytes:
    end = bytes(buf[off:off + 4096]).find(b"\0")
    return bytes(buf[off:off + end]) if end >= 0 else bytes(buf[off:off + 4096])


# --- GNU symbol versioning (glibc elf.h: Elf64_Verdef/Verdaux/Verneed/Vernaux) -----------
VERNEED = struct.Struct("<HHIII")   # vn_version, vn_cnt, vn_file, vn_aux, vn_next
VERNAUX = struct.Struct("<IHHII")   # vna_hash, vna_flags, vna_other, vna_name, vna_next
VERDEF = struct.Struct("<HHHHIII")  # vd_version, vd_flags, vd_ndx, vd_cnt, vd_hash, vd_aux, vd_next


def parse_verneed(data: bytes, count: int) -> list[dict]:
    """Verneed entries (each with its Vernaux list) following vn_next/vna_next links."""
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
    out, off = [], 0
    for _ in range(count):
        if off + VERDEF.size > len(data):
            break
        _, _, ndx, _, _, _, nxt = VERDEF.unpack_from(data, off)
        out.append(ndx & 0x7FFF)
        if not nxt:
            break
        off += nxt
    return out
