"""AArch64 ``adrp`` + ``:lo12:`` pairs: the two halves of one address must stay in one section.

``adrp x0, S+A1`` gives the 4 KiB page of one address, ``add x1, x0, :lo12:S+A2`` (or
``ldr``/``str [x0, :lo12:S+A2]``) the low 12 bits of another; the pair means
``S+A2`` only while both lie in the same page, which holds in every link as long as
``S+A1`` and ``S+A2`` stay in one output section at their original distance. GCC's
section anchors make that common: one ``adrp x0, .LANCHOR0`` serves the accesses to
every static object of ``.data`` or ``.bss`` of a function (``:lo12:.LANCHOR0+N``).
So the units of the two targets are kept together.

Which ``adrp`` feeds a ``:lo12:``: walking back from it in straight-line code, the
first ``adrp`` writing the register the low part reads (``Rn``), when no instruction
between writes that register (capstone's register writes; a call clobbers x0-x18 and
x30) and no branch can enter between them (the targets of every direct branch, resolved
or relocated, into the section; a function with an indirect ``br``, or an object with
exception tables, is not walked). Failing that, every ``adrp`` of the same function
writing the register may feed it (an over-approximation of the dataflow); else every one
of the section writing it; else the target section is kept whole.
"""

from __future__ import annotations

from collections import defaultdict

import capstone

from elflayout import arch
from elflayout.split.extents import STT

_MD = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
_MD.detail = True
# Registers a call may change (AAPCS64: x0-x18 caller-saved, x30 the link register).
CALL_CLOBBERS = frozenset(range(19)) | {30}
_ALIASES = {"fp": 29, "lr": 30, "x29": 29, "x30": 30}

# GCC's section anchors (gcc/config/aarch64/aarch64.cc TARGET_MIN/MAX_ANCHOR_OFFSET): an
# address computed in a register from a local symbol (``add :lo12:``, ``adr``) may be an
# anchor, from which the code reaches other static objects of the section with the
# instruction's own immediate (``ldr w2, [x1, #16]``), no relocation saying so.
ANCHOR_BEFORE, ANCHOR_AFTER = 256, 4095
ADDRESS_INSNS = frozenset({277, 274})       # ADD_ABS_LO12_NC, ADR_PREL_LO21
# ADD_ABS_LO12_NC and LDST{8,16,32,64,128}_ABS_LO12_NC: the instruction's Rn holds the page.
LO12 = frozenset({277, 278, 284, 285, 286, 299})
REG = 0x1F      # Rd at bits 0-4, Rn at bits 5-9


def anchor_reach(sp, target: int, where: str) -> None:
    """Keep together the units of ``sp`` an anchor at ``target`` reaches."""
    a = sp.unit_at(max(0, target - ANCHOR_BEFORE))
    b = sp.unit_at(min(sp.sec.size, target + ANCHOR_AFTER))
    if a != b:
        sp.glue_range(a, b, f"{where} computes the address {sp.sec.name}{target:+#x}, which may be a section anchor: "
                            f"code reaches {ANCHOR_BEFORE} bytes before it to {ANCHOR_AFTER} after it with immediates")


def page_pairs(obj, cands: dict, code: dict) -> None:
    """Glue, in every split section, the units an ``adrp`` and its ``:lo12:`` users designate."""
    info, shndx, values = obj.symbols["st_info"], obj.symbols["st_shndx"], obj.symbols["st_value"]
    sect = STT["STT_SECTION"]
    entries = _branch_targets(obj, code)
    walk = not any(s.name == ".gcc_except_table" for s in obj.sections)
    for ri, r in obj.relas.items():
        c = obj.sections[ri].info
        if c not in code or not len(r):
            continue
        data, seg = obj.sections[c].data, cands.get(c)
        pages, lows = [], []
        for off, s, t, a in zip(r["r_offset"].tolist(), (r["r_info"] >> 32).tolist(),
                                (r["r_info"] & 0xFFFFFFFF).tolist(), r["r_addend"].tolist()):
            o = arch.AARCH64_OBJECT.get(t)
            if o is None or (o.form != arch.OBJ_PAGE and t not in LO12) or off + 4 > len(data):
                continue
            tsec = int(shndx[s])
            if tsec not in cands:
                continue
            target = a + (0 if (info[s] & 0xF) == sect else int(values[s]))
            w = int.from_bytes(data[off:off + 4], "little")
            unit = seg.unit_at(off) if seg is not None else 0
            row = (off, unit, tsec, target)
            (pages if o.form == arch.OBJ_PAGE else lows).append((w & REG if o.form == arch.OBJ_PAGE
                                                                 else (w >> 5) & REG, row))
        walker = _Walker(data, code[c], seg, entries.get(c, set())) if walk else None
        _pair(obj, cands, c, pages, lows, walker)


def _branch_targets(obj, code: dict) -> dict[int, set[int]]:
    """Code section -> offsets a direct branch may enter at: resolved branches, and
    branch relocations against the section's symbols from anywhere (a cold part's way back)."""
    out = {c: {ref.target for ref in k.internal if ref.branch} for c, k in code.items()}
    info, shndx, values = obj.symbols["st_info"], obj.symbols["st_shndx"], obj.symbols["st_value"]
    for r in obj.relas.values():
        for s, t, a in zip((r["r_info"] >> 32).tolist(), (r["r_info"] & 0xFFFFFFFF).tolist(), r["r_addend"].tolist()):
            o = arch.AARCH64_OBJECT.get(t)
            if o is not None and o.form == arch.OBJ_BRANCH and int(shndx[s]) in out:
                out[int(shndx[s])].add(a + (0 if (info[s] & 0xF) == STT["STT_SECTION"] else int(values[s])))
    return out


class _Walker:
    """Straight-line walks back from a ``:lo12:`` to the ``adrp`` feeding it."""

    def __init__(self, data: bytes, code, seg, entries: set[int]):
        self.data, self.code, self.seg, self.entries = data, code, seg, entries
        self.indirect: dict[int, bool] = {}

    def _has_br(self, unit: int) -> bool:
        if unit not in self.indirect:
            u = self.seg.units[unit] if self.seg is not None else None
            lo, hi = (u.start, u.end) if u else (0, len(self.data))
            a, b = (int(x) for x in self.code.starts.searchsorted([lo, hi]))
            self.indirect[unit] = any(m == "br" for m in self.code.mnemonics[a:b])
        return self.indirect[unit]

    def feed(self, off: int, reg: int, unit: int, adrps: dict[int, int]) -> int | None:
        """Offset of the one adrp that reaches the :lo12: at ``off`` reading ``reg``, or None."""
        lo = self.seg.units[unit].start if self.seg is not None else 0
        if self._has_br(unit):
            return None
        k = off - 4
        while k >= lo:
            if k + 4 in self.entries or self.code.insn_at(k) < 0:
                return None
            if adrps.get(k) == reg:
                return k
            written = _writes(self.data, k)
            if written is None or reg in written:
                return None
            k -= 4
        return None


def _writes(data: bytes, off: int) -> set[int] | None:
    """General registers the instruction at ``off`` writes (a call: all it may change)."""
    insn = next(_MD.disasm(data[off:off + 4], off), None)
    if insn is None:
        return None
    if insn.mnemonic in ("bl", "blr", "blraa", "blrab", "blraaz", "blrabz", "svc"):
        return set(CALL_CLOBBERS)
    out = set()
    for r in insn.regs_access()[1]:
        n = insn.reg_name(r)
        if n in _ALIASES:
            out.add(_ALIASES[n])
        elif n[:1] in "xw" and n[1:].isdigit():
            out.add(int(n[1:]))
    return out


def _pair(obj, cands: dict, c: int, pages: list, lows: list, walker) -> None:
    by_reg_unit, by_reg = defaultdict(list), defaultdict(list)
    at = {}
    for reg, row in pages:
        by_reg_unit[(reg, row[1])].append(row)
        by_reg[reg].append(row)
        at[row[0]] = (reg, row)
    adrps = {k: v[0] for k, v in at.items()}
    name = obj.sections[c].name
    for reg, (off, unit, tsec, target) in lows:
        sp = cands[tsec]
        if sp.whole is not None:
            continue
        one = walker.feed(off, reg, unit, adrps) if walker is not None else None
        feeds = [at[one][1]] if one is not None else by_reg_unit.get((reg, unit)) or by_reg.get(reg)
        if not feeds or not any(f[2] == tsec for f in feeds):
            sp.keep_whole(f"{name}+{off:#x}: :lo12: of {sp.sec.name}{target:+#x} with no adrp of x{reg} to "
                          f"{sp.sec.name} found: the page it adds to is not known")
            continue
        v = sp.unit_at(target)
        for foff, _, fsec, ftarget in feeds:
            u = sp.unit_at(ftarget)
            if fsec == tsec and u != v:
                sp.glue_range(u, v, f"adrp at {name}+{foff:#x} ({sp.units[u].name}) and :lo12: at {name}+{off:#x} "
                                    f"({sp.units[v].name}) form one address: they must stay in one page")
