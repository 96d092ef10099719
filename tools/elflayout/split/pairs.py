"""AArch64 ``adrp`` + ``:lo12:`` pairs: the two halves of one address must stay in one section.

``adrp x0, S+A1`` gives the 4 KiB page of one address, ``add x1, x0, :lo12:S+A2`` (or
``ldr``/``str [x0, :lo12:S+A2]``) the low 12 bits of another; the pair means
``S+A2`` only while both lie in the same page, which holds in every link as long as
``S+A1`` and ``S+A2`` stay in one output section at their original distance. GCC's
section anchors make that common: one ``adrp x0, .LANCHOR0`` serves the accesses to
every static object of ``.data`` or ``.bss`` of a function (``:lo12:.LANCHOR0+N``).
So the units of the two targets are kept together.

Which ``adrp`` feeds a ``:lo12:`` is found without control flow: every ``adrp`` of
the same function writing the register the low part reads (``Rn``) may, over-
approximating the real dataflow; else every one of the section writing it; else the
target section is kept whole.
"""

from __future__ import annotations

from collections import defaultdict

from elflayout import arch
from elflayout.split.extents import STT

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
        _pair(obj, cands, c, pages, lows)


def _pair(obj, cands: dict, c: int, pages: list, lows: list) -> None:
    by_reg_unit, by_reg = defaultdict(list), defaultdict(list)
    for reg, row in pages:
        by_reg_unit[(reg, row[1])].append(row)
        by_reg[reg].append(row)
    name = obj.sections[c].name
    for reg, (off, unit, tsec, target) in lows:
        sp = cands[tsec]
        if sp.whole is not None:
            continue
        feeds = by_reg_unit.get((reg, unit)) or by_reg.get(reg)
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
