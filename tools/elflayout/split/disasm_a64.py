"""AArch64 code sections: instruction boundaries and the PC-relative references the
assembler resolved itself.

GNU as and clang's integrated assembler resolve ``b``, ``bl``, ``b.cond``,
``cbz``/``cbnz``, ``tbz``/``tbnz``, ``adr`` and literal ``ldr`` to a local symbol of
the same section and leave no relocation; ``adrp`` and ``:lo12:`` operands always get
one (a page depends on the final address). Instructions are 4 bytes; the ``$x``/``$d``
mapping symbols (AAELF64 "Mapping symbols") say which bytes are code: literal pools and
tables inside ``.text`` are data, never decoded, and stay in the unit holding them.
A code section without mapping symbols cannot be told apart from data and is reported
as undecodable (the caller keeps it whole).

Only the encodings that matter are decoded, by their fixed bit patterns (Arm ARM C4.1):
PC-relative forms, and the instructions after which control never reaches the next one.
"""

from __future__ import annotations

import capstone
import numpy as np

from elflayout.arch import R_AARCH64_CALL26, R_AARCH64_JUMP26
from elflayout.split.disasm import Code, InternalRef

INSN = 4
# Last instructions after which control never reaches the following bytes (as on
# x86-64, a final call is accepted: a call to a noreturn function ends GCC's code).
TERMINATORS = frozenset({"ret", "b", "br", "bl", "blr", "brk", "udf", "hlt", "eret"})
PADDING = frozenset({"nop"})
# (mask, value, mnemonic, relocation type, immediate: (lowest bit, bits), scale) of the
# PC-relative forms; the displacement counts from the instruction's own address.
R_CONDBR19, R_TSTBR14, R_ADR_PREL_LO21, R_LD_PREL_LO19, R_ADR_PREL_PG_HI21 = 280, 279, 274, 273, 275
PCREL_FORMS = (
    (0xFC000000, 0x94000000, "bl", R_AARCH64_CALL26, (0, 26), 4),
    (0xFC000000, 0x14000000, "b", R_AARCH64_JUMP26, (0, 26), 4),
    (0xFF000000, 0x54000000, "b.cond", R_CONDBR19, (5, 19), 4),
    (0x7E000000, 0x34000000, "cbz", R_CONDBR19, (5, 19), 4),
    (0x7E000000, 0x36000000, "tbz", R_TSTBR14, (5, 14), 4),
    (0x3B000000, 0x18000000, "ldr", R_LD_PREL_LO19, (5, 19), 4),   # ldr/ldrsw/prfm literal, SIMD too
    (0x9F000000, 0x10000000, "adr", R_ADR_PREL_LO21, None, 1),
    (0x9F000000, 0x90000000, "adrp", R_ADR_PREL_PG_HI21, None, 4096),
)
BRANCHES = frozenset({"bl", "b", "b.cond", "cbz", "tbz"})
# Other instructions by (mask, value): the ends of control flow and padding.
OTHER_FORMS = (
    (0xFFFFFC1F, 0xD65F0000, "ret"), (0xFFFFFBFF, 0xD65F0BFF, "ret"),       # ret, retaa/retab
    (0xFFFFFC1F, 0xD61F0000, "br"), (0xFEFFF800, 0xD61F0800, "br"),         # br, braa/brab(z)
    (0xFFFFFC1F, 0xD63F0000, "blr"), (0xFEFFF800, 0xD63F0800, "blr"),
    (0xFFE0001F, 0xD4200000, "brk"), (0xFFE0001F, 0xD4400000, "hlt"), (0xFFFF0000, 0x00000000, "udf"),
    (0xFFFFFFFF, 0xD69F03E0, "eret"), (0xFFFFFFFF, 0xD503201F, "nop"),
)


MD = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)


def pc_relative(data: bytes, off: int) -> bool:
    """Whether the instruction at ``off`` is one of ``PCREL_FORMS``."""
    w = int.from_bytes(data[off:off + 4], "little")
    return any(w & mask == val for mask, val, *_ in PCREL_FORMS)


def is_mapping(name: str, kind: str) -> bool:
    """``$x``, ``$x.N`` (kind "x") or ``$d``, ``$d.N`` (kind "d")."""
    return name == "$" + kind or name.startswith("$" + kind + ".")


def code_ranges(marks: list[tuple[int, str]], size: int) -> list[tuple[int, int]]:
    """[start, end) of the code stretches given the section's mapping symbols (offset, "x"/"d")."""
    out, begin = [], None
    for off, kind in sorted((min(off, size), kind) for off, kind in marks) + [(size, "end")]:
        if kind == "x" and begin is None:
            begin = off
        elif kind != "x" and begin is not None:
            if off > begin:
                out.append((begin, off))
            begin = None
    return out


def _imm(w: int, field, scale: int) -> int:
    if field is None:       # adr/adrp: immhi:immlo
        v = (((w >> 5) & 0x7FFFF) << 2) | ((w >> 29) & 3)
        bits = 21
    else:
        lo, bits = field
        v = (w >> lo) & ((1 << bits) - 1)
    if v >> (bits - 1):
        v -= 1 << bits
    return v * scale


FORMS = [(mask, val, m) for mask, val, m, *_ in PCREL_FORMS] + list(OTHER_FORMS)
NAMES = [m for _, _, m in FORMS] + ["insn"]
PCREL_OF = {m: (rtype, fld, scale) for _, _, m, rtype, fld, scale in PCREL_FORMS}


def classify(words: np.ndarray) -> np.ndarray:
    """Index into ``NAMES`` of every instruction word (the first form that matches)."""
    out = np.full(len(words), len(FORMS), np.int64)
    for k in range(len(FORMS) - 1, -1, -1):
        mask, val, _ = FORMS[k]
        out[(words & np.uint32(mask)) == np.uint32(val)] = k
    return out


def analyse(data: bytes, covered: np.ndarray, ranges: list[tuple[int, int]] | None) -> Code:
    """Decode the code stretches ``ranges`` of ``data`` (None: no mapping symbols, so
    nothing can be decoded safely); ``covered[k]`` is True where byte k is inside a
    relocation field (that instruction's reference is the relocation's)."""
    if ranges is None:
        return Code(np.zeros(0, np.int64), np.zeros(0, np.int64), [], undecodable=[0],
                    terminators=TERMINATORS, padding=PADDING, machine="AArch64")
    starts, mnems, internal, undecodable = [], [], [], []
    pcrel = np.array([m in PCREL_OF for m in NAMES])
    for lo, hi in ranges:
        if lo % INSN or (hi - lo) % INSN:
            undecodable.append(lo)
            continue
        words = np.frombuffer(data, "<u4", (hi - lo) // INSN, lo)
        kinds = classify(words)
        offs = lo + INSN * np.arange(len(words), dtype=np.int64)
        starts.append(offs)
        mnems += [NAMES[k] for k in kinds.tolist()]
        free = ~covered[lo:hi].reshape(-1, INSN).any(1)
        for j in np.flatnonzero(pcrel[kinds] & free).tolist():
            off, w, m = int(offs[j]), int(words[j]), NAMES[kinds[j]]
            if m == "adrp":
                undecodable.append(off)     # a page the assembler resolved: never seen, not proved
                continue
            rtype, fld, scale = PCREL_OF[m]
            internal.append(InternalRef(off, off, off, INSN, off + _imm(w, fld, scale), m in BRANCHES, m == "adr",
                                        rtype=rtype, mnemonic=m))
    s = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    return Code(s, s + INSN, mnems, internal, undecodable, terminators=TERMINATORS, padding=PADDING,
                machine="AArch64")
