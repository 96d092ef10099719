"""Rules against references no relocation and no instruction shows: label differences
the assembler resolved itself (``.long h1 - table``, ``mov $(h1-h0), %ecx``).

Such a difference is a plain constant in the object's bytes. Moving ``h1`` away from
``table`` changes what it means, and nothing in the object says so. Compilers do not
emit them between functions (GCC's and clang's jump tables sit in ``.rodata`` and
carry a relocation per entry), hand-written assembly does (perlasm's ``.long
.Lx-.Ly`` tables). Three rules, applied after ``plan``'s own:

1. **Unreferenced entries** (every object): a function whose start no relocation
   (outside ``.eh_frame`` and debug sections, which describe code and do not reach
   it), no disassembled call, jump or RIP-relative operand designates and that has no
   global or weak symbol is reached, if at all, in a way this tool cannot see: it stays
   glued to its predecessor.
2. **Constants of hand-written objects** (no ``.comment``: no compiler made them): a
   difference is only useful added to an address the code materialises. For every
   *base* of a code section — an offset a RIP-relative operand, a relocation from data
   or a non-branch instruction, or a ``call`` to its own end designates — and every
   constant the object holds without a relocation (each 4- and 8-byte little-endian
   word at every offset of every section with contents), ``base + constant`` must not
   land in another unit of that section; where it does the units between stay
   together. That proves a boundary as far as a single base plus a single stored
   word goes; a difference kept in a 1- or 2-byte field, or formed from two
   constants, is not seen (see docs/splitting.md).
3. **Unwind ranges** (every object): an ``.eh_frame`` FDE describes
   ``[pc_begin, pc_begin + pc_range)``; the range is a constant, so the units it spans
   stay together.
"""

from __future__ import annotations

import re

from elftools.elf.constants import SH_FLAGS
from elftools.elf.enums import ENUM_SH_TYPE_BASE, ENUM_ST_INFO_BIND

import numpy as np

from elflayout.split import disasm
from elflayout.split.reader import ObjectFile

SHT = ENUM_SH_TYPE_BASE
STB = ENUM_ST_INFO_BIND
# Sections whose relocations describe code rather than reach it.
NOT_REACHING = (".eh_frame", ".debug_", ".zdebug_")
# Constant widths scanned by rule 2 (``.long`` and ``.quad``).
WORDS = (np.dtype("<i4"), np.dtype("<i8"))
_NUMBER = re.compile(r"(?<![\w.])(?:0x[0-9a-f]+|\d+)(?![\w.])")
_RIP_OPERAND = re.compile(r"\[rip[^\]]*\]")
# eh_frame: a 32-bit length of 0xffffffff announces a 64-bit one (DWARF 5, 7.2.2).
DWARF64_ESCAPE = 0xFFFFFFFF


def describes_only(name: str) -> bool:
    return name.startswith(NOT_REACHING)


def compiled(obj: ObjectFile) -> bool:
    if __import__("os").environ.get("EXP") in ("all", "start"):
        return False
    if __import__("os").environ.get("EXP") == "off":
        return True
    """Whether a compiler made the object: GCC and clang write their ``.ident`` into
    ``.comment``; the assembler alone writes none."""
    return any(s.name == ".comment" and s.size > 0 for s in obj.sections)


def unreferenced_entries(obj: ObjectFile, sp) -> None:
    """Rule 1 for one code section plan."""
    bind, shndx, value = obj.symbols["st_info"] >> 4, obj.symbols["st_shndx"], obj.symbols["st_value"]
    here = shndx == sp.sec.index
    public = set(value[here & ((bind == STB["STB_GLOBAL"]) | (bind == STB["STB_WEAK"]))].tolist())
    for k in range(1, len(sp.units)):
        u = sp.units[k]
        if u.start not in sp.reached and u.start not in public:
            sp.glue_range(k - 1, k, f"nothing refers to {u.name} (no relocation, call, jump or lea reaches "
                                    "its start): it may be reached through a difference the assembler resolved",
                          "unreferenced entry")


def constants(obj: ObjectFile, limit: int, understood: dict[int, list[tuple[int, int]]]) -> dict[int, tuple[str, int]]:
    """Rule 2's constants with ``0 < |value| <= limit``: value -> (section name, offset)
    of one place holding it outside every relocation field and every field in
    ``understood`` (section -> [(offset, width)]: displacements of the PC-relative
    references the disassembly found, which the split already follows)."""
    from elflayout.split.plan import WIDTH, WIDTH_DEFAULT
    out: dict[int, tuple[str, int]] = {}
    for sec in obj.sections:
        if sec.nobits or not sec.size or not sec.flags & SH_FLAGS.SHF_ALLOC:
            continue
        raw = np.frombuffer(sec.data, np.uint8)
        covered = np.zeros(len(raw) + 8, bool)
        ri = obj.rela_of.get(sec.index)
        if ri is not None:
            r = obj.relas[ri]
            for off, t in zip(r["r_offset"].tolist(), (r["r_info"] & 0xFFFFFFFF).tolist()):
                covered[off:off + WIDTH.get(t, WIDTH_DEFAULT)] = True
        for off, w in understood.get(sec.index, ()):
            covered[off:off + w] = True
        cum = np.concatenate([[0], np.cumsum(covered[:len(raw)], dtype=np.int64)])
        for dt in WORDS:
            n = len(raw) - dt.itemsize + 1
            if n <= 0:
                continue
            vals = np.lib.stride_tricks.sliding_window_view(raw, dt.itemsize)[:n].copy().view(dt).ravel()
            clean = cum[dt.itemsize:dt.itemsize + n] == cum[:n]
            keep = np.flatnonzero(clean & (np.abs(vals) <= limit) & (vals != 0))
            for v, off in zip(vals[keep].tolist(), keep.tolist()):
                out.setdefault(v, (sec.name, off))
        if sec.flags & SH_FLAGS.SHF_EXECINSTR:
            for v, off in _operands(sec.data, cum):
                if 0 < abs(v) <= limit:
                    out.setdefault(v, (sec.name, off))
    return out


def _operands(data: bytes, cum: np.ndarray):
    """(value, instruction offset) of every immediate and displacement of every
    instruction without relocated or understood bytes: 1- and 2-byte ones too
    (``lea (h1-h0)(%rax)`` has an 8-bit displacement). Branch targets and RIP-relative
    displacements are references the disassembly already follows."""
    for addr, n, m, ops in disasm.MD.disasm_lite(data, 0):
        if cum[addr + n] != cum[addr] or disasm.is_branch(m) or not ops:
            continue
        for num in _NUMBER.findall(_RIP_OPERAND.sub("", ops)):
            v = int(num, 0)
            if v >= 1 << 63:
                v -= 1 << 64
            yield v, addr
            if 1 << 31 <= v < 1 << 32:
                yield v - (1 << 32), addr


def constant_reach(sp, consts: dict[int, tuple[str, int]]) -> None:
    """Rule 2 for one code section plan of a hand-written object."""
    if not sp.bases or not consts:
        return
    size = sp.sec.size
    vals = np.array(sorted(consts), np.int64)
    starts = np.array([u.start for u in sp.units], np.int64)
    for base in sorted(sp.bases):
        u = sp.unit_at(base)
        x = base + vals
        ok = (x >= 0) & (x <= size)
        units = np.searchsorted(starts, x, "right") - 1
        hit = ok & (units != u)
        if __import__("os").environ.get("EXP") == "start":
            hit &= starts[np.clip(units, 0, len(starts) - 1)] == x
        for j in np.flatnonzero(hit).tolist():
            v = int(units[j])
            c = int(vals[j])
            where, off = consts[c]
            sp.glue_range(u, v, f"{sp.sec.name}+{base:#x} (an address taken in {sp.units[u].name}) plus the "
                                f"constant {c:#x} at {where}+{off:#x} is in {sp.units[v].name}: it may be a "
                                "difference the assembler resolved (hand-written code)", "assembler constant")


def fde_ranges(obj: ObjectFile, eh_index: int) -> dict[int, int]:
    """``.eh_frame`` offset of every FDE's pc_begin field -> its pc_range (4-byte
    fields: the encoding GNU as and the compilers write on x86-64)."""
    data = obj.sections[eh_index].data
    out, pos = {}, 0
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "little")
        if length == 0 or length == DWARF64_ESCAPE:
            break          # terminator, or a 64-bit record this rule does not read
        body = pos + 4
        cie_ptr = int.from_bytes(data[body:body + 4], "little")
        if cie_ptr != 0 and body + 12 <= len(data):
            out[body + 4] = int.from_bytes(data[body + 8:body + 12], "little", signed=True)
        pos = body + length
    return out


def unwind_ranges(sp, begin: int, length: int) -> None:
    """Rule 3: the FDE covering ``[begin, begin + length)`` of ``sp``'s section."""
    if length <= 0:
        return
    u, v = sp.unit_at(begin), sp.unit_at(begin + length - 1)
    if u != v:
        sp.glue_range(u, v, f"one unwind entry (.eh_frame FDE) covers {sp.units[u].name} to {sp.units[v].name}",
                      "unwind range")
