"""Read one relocatable x86-64 or AArch64 (ELF64 little-endian) object (ET_REL) into plain data the splitter can rewrite.

pyelftools checks and parses the ELF header and section headers; the symbol table and
the RELA tables, which the splitter rewrites wholesale, are read as numpy record arrays
(layouts declared once in ``elflayout.layouts``) because per-entry parsing of ~10^5 relocations per
archive through pyelftools' structs is too slow for the 10-second budget of a
libpython-sized archive. Bad input raises ``ElflayoutError`` naming the file.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
from elftools.common.exceptions import ELFError
from elftools.elf.constants import SH_FLAGS, SHN_INDICES
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_SH_TYPE_BASE

from elflayout.errors import ElflayoutError
from elflayout.layouts import RELA64, SHDR64, SYM64

SHT = ENUM_SH_TYPE_BASE
# gABI "Sections": indexes from here on are reserved (extended numbering not handled).
SHN_LORESERVE = SHN_INDICES.SHN_LORESERVE


@dataclass
class Section:
    """One section header and its bytes (``data`` is empty for SHT_NOBITS)."""

    index: int
    name: str
    sh_type: int
    flags: int
    addr: int
    link: int
    info: int
    align: int
    entsize: int
    size: int
    data: bytes

    @property
    def nobits(self) -> bool:
        return self.sh_type == SHT["SHT_NOBITS"]


@dataclass
class ObjectFile:
    """A relocatable object: sections by index, its symbol table and RELA tables."""

    name: str                       # for messages: "lib.a(member.o)" or a path
    raw: bytes
    sections: list[Section]
    symtab_index: int               # 0 when the object has no symbol table
    symbols: np.ndarray             # SYM64 records (index 0 is the null symbol)
    sym_names: list[str]
    rela_of: dict[int, int] = field(default_factory=dict)   # target section -> its RELA section
    dwo_out: str | None = None      # where a rewritten .dwo of a -gsplit-dwarf skeleton goes (None: nowhere)
    relas: dict[int, np.ndarray] = field(default_factory=dict)  # RELA section index -> RELA64 records
    e_flags: int = 0
    osabi: int = 0
    machine: str = "EM_X86_64"      # pyelftools' e_machine name: EM_X86_64 or EM_AARCH64

    @property
    def aarch64(self) -> bool:
        return self.machine == EM_AARCH64


# Machines split reads: x86-64 and AArch64 LP64 (ELF64 little-endian; big-endian and
# ILP32 AArch64 objects are other ABIs).
EM_AARCH64 = "EM_AARCH64"
MACHINES = ("EM_X86_64", EM_AARCH64)
ONLY = "only x86-64 and little-endian LP64 AArch64 objects can be split"


def _err(name: str, what: str) -> ElflayoutError:
    return ElflayoutError(f"{name}: {what}")


def _check_links(name: str, sections: list[Section], nsyms: int) -> None:
    """Indexes the writer renumbers must name what they index: a group's members and
    signature symbol, a link-ordered section's link."""
    n = len(sections)
    for s in sections:
        if s.flags & SH_FLAGS.SHF_LINK_ORDER and s.link >= n:
            raise _err(name, f"{s.name}: linked to section {s.link}, past the {n} sections")
        if s.sh_type == SHT["SHT_GROUP"]:
            if s.size % 4:
                raise _err(name, f"{s.name}: group size {s.size} is not a whole number of words")
            if s.info >= nsyms:
                raise _err(name, f"{s.name}: group signature symbol {s.info} outside the symbol table")
            words = np.frombuffer(s.data, "<u4")[1:]
            if len(words) and (int(words.max()) >= n or int(words.min()) == 0):
                raise _err(name, f"{s.name}: group member index outside the {n} sections")


# LLVM bitcode, raw and in its wrapper (llvm/Bitcode/BitcodeReader.cpp: 'BC' 0xC0DE, 0x0B17C0DE)
BITCODE_MAGICS = (b"BC\xc0\xde", b"\xde\xc0\x17\x0b")
GCC_LTO_PREFIX = ".gnu.lto_"
LTO_HINT = ("the code is generated at link time, so there is nothing to split: order the LTO link itself (its "
            "code generation takes -ffunction-sections) or split the objects of a build without -flto")


def read_object(raw: bytes, name: str) -> ObjectFile:
    """Parse ``raw`` as an x86-64 or AArch64 relocatable object, or raise ``ElflayoutError``."""
    if raw[:4] in BITCODE_MAGICS:
        raise _err(name, f"LLVM bitcode (clang -flto), not machine code: {LTO_HINT}")
    if raw[:4] != b"\x7fELF":
        raise _err(name, "not an ELF file")
    try:
        elf = ELFFile(io.BytesIO(raw))
        hdr = elf.header
        if hdr.e_machine == EM_AARCH64 and not elf.little_endian:
            raise _err(name, f"big-endian AArch64 object (aarch64_be): {ONLY}")
        if hdr.e_machine == EM_AARCH64 and elf.elfclass != 64:
            raise _err(name, f"ILP32 AArch64 object (ELF32): {ONLY}")
        if elf.elfclass != 64 or not elf.little_endian:
            raise _err(name, f"not a 64-bit little-endian ELF file ({ONLY})")
        if hdr.e_machine not in MACHINES:
            raise _err(name, f"foreign architecture {hdr.e_machine} ({ONLY})")
        if hdr.e_type != "ET_REL":
            raise _err(name, f"not a relocatable object (e_type {hdr.e_type}); split reads .o files and .a archives")
        if hdr.e_shoff + hdr.e_shnum * hdr.e_shentsize > len(raw) or hdr.e_shnum == 0:
            raise _err(name, "truncated (section headers past the end of the file)")
        if hdr.e_shentsize != SHDR64.itemsize:
            raise _err(name, f"unexpected section header size {hdr.e_shentsize}")
        # Section headers as one numpy read (pyelftools' per-header parse costs more
        # than the whole split on archives of many small objects).
        shdrs = np.frombuffer(raw, SHDR64, hdr.e_shnum, hdr.e_shoff)
        if hdr.e_shstrndx >= hdr.e_shnum:
            raise _err(name, "section name table index out of range")
        sn = shdrs[hdr.e_shstrndx]
        shstr = raw[int(sn["sh_offset"]):int(sn["sh_offset"]) + int(sn["sh_size"])]
        sections = []
        for i, h in enumerate(shdrs.tolist()):
            nm, t, flags, addr, off, size, link, info, align, entsize = h
            nobits = t == SHT["SHT_NOBITS"]
            if not nobits and off + size > len(raw):
                raise _err(name, f"truncated (section {i} past the end of the file)")
            end = shstr.find(b"\0", nm)
            if nm >= len(shstr) or end < 0:
                raise _err(name, f"section {i}: name outside the section name table")
            if align & (align - 1):     # gABI: 0, or a power of two
                raise _err(name, f"section {i}: alignment {align} is not a power of two")
            sections.append(Section(i, shstr[nm:end].decode("utf-8", "surrogateescape"), t, flags, addr, link, info,
                                    max(1, align), entsize, size, b"" if nobits else raw[off:off + size]))
        e_flags, osabi, machine = hdr.e_flags, hdr.e_ident.EI_OSABI, hdr.e_machine
    except (ELFError, ValueError, KeyError, IndexError, EOFError) as e:
        raise _err(name, f"truncated or corrupt ELF ({e})") from None
    except Exception as e:  # construct's StreamError/ConstructError on short reads
        if type(e).__module__.startswith("construct") or type(e).__module__.startswith("elftools"):
            raise _err(name, f"truncated or corrupt ELF ({type(e).__name__})") from None
        raise
    if any(s.name.startswith(GCC_LTO_PREFIX) for s in sections) and \
            not any(s.flags & SH_FLAGS.SHF_EXECINSTR and s.size for s in sections):
        raise _err(name, f"GCC LTO bytecode only (gcc -flto without -ffat-lto-objects): {LTO_HINT}")
    if len(sections) >= SHN_LORESERVE:
        raise _err(name, "extended section numbering is not supported")
    symtab = [s for s in sections if s.sh_type == SHT["SHT_SYMTAB"]]
    if len(symtab) > 1:
        raise _err(name, "more than one symbol table")
    obj = ObjectFile(name, raw, sections, 0, np.zeros(1, SYM64), [""], e_flags=e_flags,
                     osabi=0 if isinstance(osabi, str) else osabi, machine=machine)
    if symtab:
        st = symtab[0]
        if st.size % SYM64.itemsize or st.link >= len(sections):
            raise _err(name, f"{st.name}: malformed symbol table")
        obj.symtab_index = st.index
        obj.symbols = np.frombuffer(st.data, SYM64).copy()
        strtab = sections[st.link].data
        names = []
        for n in obj.symbols["st_name"].tolist():
            end = strtab.find(b"\0", n)
            if n >= len(strtab) or end < 0:
                raise _err(name, f"{st.name}: symbol name offset {n} outside its string table")
            names.append(strtab[n:end].decode("utf-8", "surrogateescape"))
        obj.sym_names = names
        shndx = obj.symbols["st_shndx"]
        past = np.flatnonzero((shndx >= len(sections)) & (shndx < SHN_LORESERVE))
        if len(past):
            i = int(past[0])
            raise _err(name, f"{st.name}: symbol {i} ({names[i]!r}) names section {int(shndx[i])}, past the "
                             f"{len(sections)} sections")
    _check_links(name, sections, len(obj.symbols))
    for s in sections:
        if s.sh_type == SHT["SHT_REL"]:
            raise _err(name, f"{s.name}: SHT_REL relocations (x86-64 and AArch64 objects use RELA)")
        if s.sh_type != SHT["SHT_RELA"]:
            continue
        if s.size % RELA64.itemsize or s.info >= len(sections) or s.info == 0:
            raise _err(name, f"{s.name}: malformed relocation section")
        if s.link != obj.symtab_index:
            raise _err(name, f"{s.name}: relocations against a table other than the symbol table")
        r = np.frombuffer(s.data, RELA64).copy()
        if len(r) and int((r["r_info"] >> 32).max()) >= len(obj.symbols):
            raise _err(name, f"{s.name}: relocation against a symbol index outside the symbol table")
        if s.info in obj.rela_of:
            raise _err(name, f"{s.name}: second relocation section for {sections[s.info].name}")
        obj.rela_of[s.info] = s.index
        obj.relas[s.index] = r
    return obj
