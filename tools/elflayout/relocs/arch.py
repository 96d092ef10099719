"""Per-machine relocation tables (one place, so i386/aarch64 can follow x86-64).

Numbers from the psABI documents: System V AMD64 psABI §4.4 "Relocation Types",
i386 psABI, ELF for the Arm 64-bit Architecture (AAELF64) §5.7. ``kind`` says how the
simulated loader (simload.py) computes a value; ``width`` is the bytes written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
}), pack_supported=True)

I386 = Arch("EM_386", 32, False, 8, _t("R_386_", {
    0: ("NONE", NONE, 0), 1: ("32", ABS, 4), 2: ("PC32", PCREL, 4), 5: ("COPY", COPY, 0),
    6: ("GLOB_DAT", ABS_NOADD, 4), 7: ("JMP_SLOT", ABS_NOADD, 4), 8: ("RELATIVE", RELATIVE, 4),
    14: ("TLS_TPOFF", TPOFF, 4), 35: ("TLS_DTPMOD32", DTPMOD, 4), 36: ("TLS_DTPOFF32", DTPOFF, 4),
    42: ("IRELATIVE", IRELATIVE, 4),
}))

AARCH64 = Arch("EM_AARCH64", 64, True, 1027, _t("R_AARCH64_", {
    0: ("NONE", NONE, 0), 257: ("ABS64", ABS, 8), 1024: ("COPY", COPY, 0), 1025: ("GLOB_DAT", ABS_NOADD, 8),
    1026: ("JUMP_SLOT", ABS_NOADD, 8), 1027: ("RELATIVE", RELATIVE, 8), 1028: ("TLS_DTPMOD", DTPMOD, 8),
    1029: ("TLS_DTPREL", DTPOFF, 8), 1030: ("TLS_TPREL", TPOFF, 8), 1031: ("TLSDESC", DTPOFF, 16),
    1032: ("IRELATIVE", IRELATIVE, 8),
}))

ARCHES = {(a.machine, a.elfclass): a for a in (X86_64, I386, AARCH64)}


def arch_of(img) -> Arch:
    """The relocation table of an opened ``ElfImage``; bad input if we have none."""
    a = ARCHES.get((img.machine, img.elfclass))
    if a is None:
        raise ElflayoutError(f"{img.path}: {img.machine} ELF{img.elfclass} is not supported "
                             f"(supported: {', '.join(f'{m[3:]}/{c}' for m, c in ARCHES)})")
    return a
