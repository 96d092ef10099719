"""Prove that an x86-64 ``lea`` of one data object's end is only read upward.

``lea index1(%rip), %rdx`` where the object before ``index1`` ends exactly there could
mean "one past the end of the previous object" or "the start of ``index1``". When the
address is only ever used as the base of memory operands whose offset from it is
provably non-negative, every byte read through it lies at or above ``index1``'s start:
reading one past the end of the previous object is undefined behaviour in C, so the
address designates ``index1``.

The proof follows the lea's destination register R forward in straight-line code
(``reads_upward``), at most ``WINDOW`` instructions, until R is fully overwritten. It
fails — and the caller keeps the two objects together — at a control transfer, at a
place something else may jump to (``labels``), at any use of R other than as a memory
base with a displacement >= 0, and at a write to part of R. An index register in such
an operand must be zero-extended: its last write, found backward in straight-line
code, writes the 32-bit register (every 32-bit write clears the upper half on x86-64)
or is ``movzx`` into the 64-bit one.
"""

from __future__ import annotations

import capstone
from capstone import x86

from elflayout.split import disasm

WINDOW = 16          # instructions followed after the lea
BACK = 32            # instructions scanned back for an index register's last write
_TRANSFERS = {capstone.CS_GRP_JUMP, capstone.CS_GRP_CALL, capstone.CS_GRP_RET, capstone.CS_GRP_INT,
              capstone.CS_GRP_IRET, capstone.CS_GRP_BRANCH_RELATIVE}
_READ, _WRITE = capstone.CS_AC_READ, capstone.CS_AC_WRITE
_LEGACY = ("ax", "bx", "cx", "dx")
_NAMED = ("si", "di", "bp", "sp")


def _families() -> dict[str, tuple[int, int]]:
    """Register name -> (general-purpose register, width in bits)."""
    fam: dict[str, tuple[int, int]] = {}
    for n, x in enumerate(_LEGACY):
        for name, w in ((f"r{x}", 64), (f"e{x}", 32), (x, 16), (f"{x[0]}l", 8), (f"{x[0]}h", 8)):
            fam[name] = (n, w)
    for n, x in enumerate(_NAMED, 4):
        for name, w in ((f"r{x}", 64), (f"e{x}", 32), (x, 16), (f"{x}l", 8)):
            fam[name] = (n, w)
    for n in range(8, 16):
        for name, w in ((f"r{n}", 64), (f"r{n}d", 32), (f"r{n}w", 16), (f"r{n}b", 8)):
            fam[name] = (n, w)
    return fam


_FAMILY = _families()
_RSP = _FAMILY["rsp"][0]
_MD = disasm._MD_DETAIL


def _reg(ins, reg: int) -> tuple[int, int] | None:
    return _FAMILY.get(ins.reg_name(reg)) if reg else None


def _decode(data: bytes, c: disasm.Code, i: int):
    s, e = int(c.starts[i]), int(c.ends[i])
    return next(_MD.disasm(data[s:e], s), None)


def _transfers(ins) -> bool:
    return bool(_TRANSFERS.intersection(ins.groups)) or disasm.is_branch(ins.mnemonic) \
        or ins.mnemonic.split()[-1] in disasm.TERMINATORS


def reads_upward(data: bytes, c: disasm.Code, k: int, labels: set[int], cross_lea: bool = True) -> bool:
    """Whether the address instruction ``k`` of ``c`` (a RIP-relative lea) loads is only
    read at or above itself. ``labels``: offsets control may reach other than by falling
    through. ``cross_lea``: whether an index register's last write may be looked for
    before the lea (not when landing pads, which no relocation shows, may lie there)."""
    lea = _decode(data, c, k)
    if lea is None or lea.mnemonic != "lea" or len(lea.operands) != 2:
        return False
    dst = _reg(lea, lea.operands[0].reg) if lea.operands[0].type == x86.X86_OP_REG else None
    src = lea.operands[1]
    if dst is None or dst[1] != 64 or dst[0] == _RSP or src.type != x86.X86_OP_MEM \
            or src.mem.base != x86.X86_REG_RIP or src.mem.index or src.mem.segment:
        return False
    for i in range(k + 1, min(k + 1 + WINDOW, len(c.starts))):
        ins = _decode(data, c, i)
        if ins is None or int(c.starts[i]) in labels or _transfers(ins):
            return False
        step = _step(ins, dst[0], lambda idx, i=i: _zero_extended(data, c, i, idx, k, labels, cross_lea))
        if step is not None:
            return step
    return False


def _step(ins, r: int, index_ok) -> bool | None:
    """One instruction after the lea: False when it uses R other than as a base read
    upward or writes part of it, True when it fully overwrites R, None when R lives on."""
    if any(_reg(ins, x) and _reg(ins, x)[0] == r for x in (*ins.regs_read, *ins.regs_write)):
        return False        # implicit use or update of R (string instructions, cdq, mul ...)
    if ins.mnemonic in ("xor", "sub") and len(ins.operands) == 2 and \
            all(o.type == x86.X86_OP_REG for o in ins.operands) and ins.operands[0].reg == ins.operands[1].reg:
        f = _reg(ins, ins.operands[0].reg)      # xor %edx,%edx: reads nothing, writes 0
        return None if f is None or f[0] != r else f[1] >= 32
    kill = based = False
    for op in ins.operands:
        if op.type == x86.X86_OP_MEM:
            base, index = _reg(ins, op.mem.base), _reg(ins, op.mem.index)
            if index is not None and index[0] == r:
                return False
            if base is None or base[0] != r:
                continue
            if base[1] != 64 or op.mem.segment or op.mem.disp < 0 or ins.mnemonic == "lea" \
                    or ins.mnemonic.startswith("nop"):
                return False
            if op.mem.index and (index is None or index[1] != 64 or op.mem.scale <= 0 or not index_ok(index)):
                return False        # (a vector index, as in a gather, is sign-extended)
            based = True
        elif op.type == x86.X86_OP_REG and (f := _reg(ins, op.reg)) is not None and f[0] == r:
            if op.access & _READ or not op.access & _WRITE or f[1] < 32 \
                    or ins.mnemonic.startswith("cmov"):
                return False
            kill = True
    # Every access regs_access reports must be one of those above.
    reads, writes = ({_reg(ins, x) for x in regs} - {None} for regs in ins.regs_access())
    if {w for n, w in reads if n == r} - ({64} if based else set()) \
            or ({w for n, w in writes if n == r} and not kill):
        return False
    return True if kill else None


def _zero_extended(data: bytes, c: disasm.Code, use: int, index: tuple[int, int], lea: int,
                   labels: set[int], cross_lea: bool) -> bool:
    """Whether 64-bit register ``index`` is zero-extended from 32 bits when instruction
    ``use`` reads it: its last write in straight-line code before ``use`` writes the
    32-bit register, or is ``movzx`` into the 64-bit one."""
    j = use
    for _ in range(BACK):
        if j <= lea and (int(c.starts[j]) in labels or not cross_lea):
            return False      # another path may reach here with another value
        j -= 1
        ins = _decode(data, c, j) if j >= 0 else None
        if ins is None or _transfers(ins):
            return False
        written = {_reg(ins, x) for x in ins.regs_access()[1]} - {None}
        widths = {w for n, w in written if n == index[0]}
        if not widths:
            continue
        if ins.mnemonic.startswith("cmov"):
            return False
        return widths == {32} or (widths == {64} and ins.mnemonic == "movzx")
    return False


__all__ = ["reads_upward", "WINDOW"]
