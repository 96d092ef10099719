"""Per-machine facts in one place: relocation tables and names, R_*_RELATIVE.

Numbers from the psABI documents: System V AMD64 psABI §4.4 "Relocation Types",
i386 psABI, ELF for the Arm 64-bit Architecture (AAELF64) §5.7; names as readelf spells
them. ``kind`` says how the simulated loader (relocs/simload.py) computes a value;
``width`` is the bytes written. inspect, pack-relocs and the loaders all name and
classify relocations from here (pyelftools' AArch64 enum is wrong for 1028-1033).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elftools.elf import enums

from elflayout.errors import ElflayoutError

# How a relocation's value is formed (B = load base, A = addend, S = symbol address).
NONE, RELATIVE, ABS, ABS_NOADD, IRELATIVE, TPOFF, DTPMOD, DTPOFF, COPY, PCREL = (
    "none", "B+A", "S+A", "S", "ifunc(B+A)", "tpoff(S)+A", "dtpmod(S)", "dtpoff(S)+A", "copy", "S+A-P")


@dataclass(frozen=True)
class RelType:
    name: str
    kind: str
    width: int


@dataclass(frozen=True)
class Arch:
    machine: str            # pyelftools e_machine name
    elfclass: int           # 32 or 64
    rela: bool              # RELA (explicit addends) or REL
    relative: int           # R_*_RELATIVE: the only type RELR can express
    types: dict[int, RelType] = field(default_factory=dict)
    pack_supported: bool = False  # pack-relocs implemented and tested for this machine
    self_supported: bool = False  # pack-relocs --format self: selfapply.py's applier is code of this machine

    @property
    def word(self) -> int:
        return self.elfclass // 8

    def name(self, t: int) -> str:
        rt = self.types.get(int(t))
        return rt.name if rt else f"R_{self.machine[3:]}_{int(t)}"


def _t(prefix, table):
    return {n: RelType(prefix + name, kind, w) for n, (name, kind, w) in table.items()}


X86_64 = Arch("EM_X86_64", 64, True, 8, _t("R_X86_64_", {
    0: ("NONE", NONE, 0), 1: ("64", ABS, 8), 2: ("PC32", PCREL, 4), 5: ("COPY", COPY, 0),
    6: ("GLOB_DAT", ABS_NOADD, 8), 7: ("JUMP_SLOT", ABS_NOADD, 8), 8: ("RELATIVE", RELATIVE, 8),
    10: ("32", ABS, 4), 11: ("32S", ABS, 4), 16: ("DTPMOD64", DTPMOD, 8), 17: ("DTPOFF64", DTPOFF, 8),
    18: ("TPOFF64", TPOFF, 8), 24: ("PC64", PCREL, 8), 36: ("TLSDESC", DTPOFF, 16),
    37: ("IRELATIVE", IRELATIVE, 8), 38: ("RELATIVE64", RELATIVE, 8),
}), pack_supported=True, self_supported=True)

I386 = Arch("EM_386", 32, False, 8, _t("R_386_", {
    0: ("NONE", NONE, 0), 1: ("32", ABS, 4), 2: ("PC32", PCREL, 4), 5: ("COPY", COPY, 0),
    6: ("GLOB_DAT", ABS_NOADD, 4), 7: ("JUMP_SLOT", ABS_NOADD, 4), 8: ("RELATIVE", RELATIVE, 4),
    14: ("TLS_TPOFF", TPOFF, 4), 35: ("TLS_DTPMOD32", DTPMOD, 4), 36: ("TLS_DTPOFF32", DTPOFF, 4),
    42: ("IRELATIVE", IRELATIVE, 4),
}))

AARCH64 = Arch("EM_AARCH64", 64, True, 1027, _t("R_AARCH64_", {
    0: ("NONE", NONE, 0), 257: ("ABS64", ABS, 8), 1024: ("COPY", COPY, 0), 1025: ("GLOB_DAT", ABS_NOADD, 8),
    1026: ("JUMP_SLOT", ABS_NOADD, 8), 1027: ("RELATIVE", RELATIVE, 8), 1028: ("TLS_DTPMOD64", DTPMOD, 8),
    1029: ("TLS_DTPREL64", DTPOFF, 8), 1030: ("TLS_TPREL64", TPOFF, 8), 1031: ("TLSDESC", DTPOFF, 16),
    1032: ("IRELATIVE", IRELATIVE, 8),
}), pack_supported=True, self_supported=True)

ARCHES = {(a.machine, a.elfclass): a for a in (X86_64, I386, AARCH64)}

# Relocation types of AArch64 relocatable objects (AAELF64 §5.7.3-5.7.8), as ``split``
# reads and writes them. ``form`` says what a type designates: every one of them
# designates S + A (the place P only enters the value the linker writes), and how the
# reference uses it decides the split's rules:
#   DATA    an address taken (ABS64 in data, ``add :lo12:``, ``adr``)
#   LOAD    a load or store at the address (``ldr :lo12:``, literal ``ldr``)
#   PAGE    the 4 KiB page of the address (``adrp``): paired with a LO12 type
#   BRANCH  a branch target
#   PCREL   a PC-relative word in data (``.word sym - .``: .eh_frame)
# Types not listed here (GOT, TLS, MOVW, PLT32) are only followed against a named symbol.
# ``mask``: the instruction bits the linker fills (the rest is opcode and registers);
# ``veneer``: a linker inserts a veneer when the target is out of the field's reach
# (only b and bl, AAELF64 §5.7.8 "Call and Jump relocations"); the others fail to link.
OBJ_DATA, OBJ_LOAD, OBJ_PAGE, OBJ_BRANCH, OBJ_PCREL = "data", "load", "page", "branch", "pcrel"


@dataclass(frozen=True)
class ObjReloc:
    name: str
    form: str
    width: int
    mask: int = 0           # 0: the whole field (data words)
    veneer: bool = False
    reach: int = 0          # bytes either way the field reaches (0: everywhere)


def _o(table):
    return {n: ObjReloc("R_AARCH64_" + name, *rest) for n, (name, *rest) in table.items()}


R_AARCH64_CALL26, R_AARCH64_JUMP26 = 283, 282
AARCH64_OBJECT = _o({
    257: ("ABS64", OBJ_DATA, 8), 258: ("ABS32", OBJ_DATA, 4), 259: ("ABS16", OBJ_DATA, 2),
    260: ("PREL64", OBJ_PCREL, 8), 261: ("PREL32", OBJ_PCREL, 4), 262: ("PREL16", OBJ_PCREL, 2),
    273: ("LD_PREL_LO19", OBJ_LOAD, 4, 0x00FFFFE0, False, 1 << 20),
    274: ("ADR_PREL_LO21", OBJ_DATA, 4, 0x60FFFFE0, False, 1 << 20),
    275: ("ADR_PREL_PG_HI21", OBJ_PAGE, 4, 0x60FFFFE0),
    276: ("ADR_PREL_PG_HI21_NC", OBJ_PAGE, 4, 0x60FFFFE0),
    277: ("ADD_ABS_LO12_NC", OBJ_DATA, 4, 0x003FFC00),
    278: ("LDST8_ABS_LO12_NC", OBJ_LOAD, 4, 0x003FFC00),
    279: ("TSTBR14", OBJ_BRANCH, 4, 0x0007FFE0, False, 1 << 15),
    280: ("CONDBR19", OBJ_BRANCH, 4, 0x00FFFFE0, False, 1 << 20),
    R_AARCH64_JUMP26: ("JUMP26", OBJ_BRANCH, 4, 0x03FFFFFF, True, 1 << 27),
    R_AARCH64_CALL26: ("CALL26", OBJ_BRANCH, 4, 0x03FFFFFF, True, 1 << 27),
    284: ("LDST16_ABS_LO12_NC", OBJ_LOAD, 4, 0x003FFC00),
    285: ("LDST32_ABS_LO12_NC", OBJ_LOAD, 4, 0x003FFC00),
    286: ("LDST64_ABS_LO12_NC", OBJ_LOAD, 4, 0x003FFC00),
    299: ("LDST128_ABS_LO12_NC", OBJ_LOAD, 4, 0x003FFC00),
})


def object_width(t: int) -> int:
    """Bytes an AArch64 object relocation of type ``t`` writes (4 for instructions)."""
    o = AARCH64_OBJECT.get(int(t))
    return o.width if o else 4

# R_*_RELATIVE of machines without a full table (inspect's RELR estimate): AAELF32,
# ELFv2 (PPC64), RISC-V psABI.
RELATIVE_TYPE = {**{a.machine: a.relative for a in ARCHES.values()},
                 "EM_ARM": 23, "EM_PPC64": 22, "EM_RISCV": 3}

# Names of other types and machines (inspect of any ELF file): pyelftools' enums,
# except where they are wrong.
_WRONG = {"EM_AARCH64": range(1028, 1034)}
_OTHER_NAMES = {
    "EM_X86_64": enums.ENUM_RELOC_TYPE_x64,
    "EM_386": enums.ENUM_RELOC_TYPE_i386,
    "EM_AARCH64": enums.ENUM_RELOC_TYPE_AARCH64,
    "EM_ARM": enums.ENUM_RELOC_TYPE_ARM,
    "EM_MIPS": enums.ENUM_RELOC_TYPE_MIPS,
    "EM_PPC": enums.ENUM_RELOC_TYPE_PPC,
    "EM_PPC64": enums.ENUM_RELOC_TYPE_PPC64,
    "EM_S390": enums.ENUM_RELOC_TYPE_S390X,
    "EM_LOONGARCH": enums.ENUM_RELOC_TYPE_LOONGARCH,
}


def reloc_name(machine: str, elfclass: int, t: int) -> str:
    """readelf's name of relocation type ``t``: our tables first (pyelftools names
    AArch64's 1028-1033 wrongly and is used for no AArch64 type), then pyelftools'."""
    a = ARCHES.get((machine, elfclass))
    if a is not None and int(t) in a.types:
        return a.types[int(t)].name
    if a is AARCH64 and int(t) in AARCH64_OBJECT:
        return AARCH64_OBJECT[int(t)].name
    if int(t) in _WRONG.get(machine, ()):
        return f"type {t}"
    for k, v in _OTHER_NAMES.get(machine, {}).items():
        if v == t and not k.startswith("_"):
            return k
    return f"type {t}"


EM_AARCH64 = 183
PT_LOAD = 1


def cut_granule(e_machine: int, p_types, p_aligns, page: int = 4096) -> int:
    """The unit in which whole pages may leave a file (pack-relocs' cut): the file
    offsets after the hole drop by a multiple of it, so every PT_LOAD keeps offset ≡
    vaddr mod p_align. An arm64 library must load on 4, 16 and 64 KiB kernels: its
    segments' p_align (Debian links with 64 KiB); x86-64 kernels have 4 KiB pages."""
    if e_machine != EM_AARCH64:
        return page
    aligns = [int(a) for t, a in zip(p_types, p_aligns) if int(t) == PT_LOAD]
    return max([page, *aligns])


def arch_of(img) -> Arch:
    """The relocation table of an opened ``ElfImage``; bad input if we have none."""
    a = ARCHES.get((img.machine, img.elfclass))
    if a is None:
        raise ElflayoutError(f"{img.path}: {img.machine} ELF{img.elfclass} is not supported "
                             f"(supported: {', '.join(f'{m[3:]}/{c}' for m, c in ARCHES)})")
    return a


# Relocation types of whole data words: (absolute, PC-relative). The other-order check of
# ``split --check`` names such a word by its target.
DATA_WORDS = {
    "EM_X86_64": (frozenset({1, 10, 11}), frozenset({2, 24, 4})),        # 64, 32, 32S; PC32, PC64, PLT32
    "EM_AARCH64": (frozenset({257, 258, 259}), frozenset({260, 261, 262})),  # ABS64/32/16; PREL64/32/16
}
# AArch64 :lo12: relocations of an instruction: the right shift of the address's low
# 12 bits stored in its imm12 (add: bytes; loads and stores: units of the access size).
AARCH64_ADD_LO12 = 277           # ADD_ABS_LO12_NC: an address, no access
AARCH64_LO12_SHIFT = {AARCH64_ADD_LO12: 0, 278: 0, 284: 1, 285: 2, 286: 3, 299: 4}
AARCH64_PAGE = frozenset({275, 276})       # ADR_PREL_PG_HI21(_NC): the adrp of a symbol's page
AARCH64_GOT_PAGE, AARCH64_GOT_LO12 = 311, 312     # ADR_GOT_PAGE, LD64_GOT_LO12_NC: a symbol's GOT slot
