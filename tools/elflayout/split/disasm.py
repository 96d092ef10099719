"""Disassemble code sections (capstone) to find what relocations alone do not say.

The assembler resolves a PC-relative reference between two places of the same section
itself and leaves no relocation (``call helper`` to a ``static`` function, ``lea
fn(%rip)`` taking its address, a ``jmp`` into another function). After a split those
places can move apart, so each such reference must become a relocation, and one that
cannot (an 8-bit displacement) forces the two functions to stay together.
Relocated references need the disassembly too: the place a PC-relative relocation
designates is ``S + A + (end of instruction - r_offset)``, so the instruction's end
is needed to tell "start of the next function" from "4 bytes before it".

One linear sweep per section (``Cs.disasm_lite``: GCC and clang put no data in
``.text`` on x86-64); a stop before the end of the section is reported as
undecodable and the caller keeps that section whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import capstone
import numpy as np

MD = _MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_MD_DETAIL = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_MD_DETAIL.detail = True

# Last instructions after which control never reaches the following bytes. A final
# ``call`` is accepted: GCC and clang end a function with a call to a noreturn function
# (abort, Py_FatalError) and nothing after it.
TERMINATORS = {"ret", "jmp", "ljmp", "ud2", "hlt", "retf", "iretq", "iret", "sysret", "sysretq", "call"}
PADDING = {"nop", "int3"}
BRANCHES = {"call", "jmp", "jrcxz", "jecxz", "loop", "loope", "loopne", "xbegin"}
_IMM = re.compile(r"^(?:0x[0-9a-f]+|\d+)$")
_RIP = re.compile(r"\[rip(?: ([+-]) (0x[0-9a-f]+|\d+))?\]")


@dataclass
class InternalRef:
    """A PC-relative reference the assembler resolved inside the section (no relocation)."""

    insn: int          # instruction start (section offset)
    end: int           # where the displacement counts from (x86-64: the instruction's end; AArch64: its start)
    field: int         # offset of the displacement field (AArch64: the instruction)
    width: int         # 1 or 4 bytes
    target: int        # section offset it designates
    branch: bool       # call/jmp/jcc (else a RIP-relative memory operand)
    lea: bool          # the address is taken (lea; AArch64 adr)
    rtype: int = 0     # AArch64: the relocation type expressing it (x86-64: always R_X86_64_PC32)
    mnemonic: str = ""


@dataclass
class Code:
    """One code section's instruction boundaries and internal references."""

    starts: np.ndarray
    ends: np.ndarray
    mnemonics: list[str]
    internal: list[InternalRef] = field(default_factory=list)
    undecodable: list[int] = field(default_factory=list)   # offsets where decoding stopped
    terminators: frozenset = frozenset(TERMINATORS)
    padding: frozenset = frozenset(PADDING)
    machine: str = "x86-64"

    def insn_at(self, off: int) -> int:
        """Index of the instruction containing ``off``, or -1."""
        i = int(np.searchsorted(self.starts, off, "right")) - 1
        return i if i >= 0 and off < self.ends[i] else -1

    def last_real(self, lo: int, hi: int) -> str | None:
        """Mnemonic of the last non-padding instruction starting in [lo, hi)."""
        a = int(np.searchsorted(self.starts, lo, "left"))
        b = int(np.searchsorted(self.starts, hi, "left"))
        for i in range(b - 1, a - 1, -1):
            m = self.mnemonics[i].split()[-1]
            if m not in self.padding:
                return m
        return None


_branch_memo: dict[str, bool] = {}


def is_branch(m: str) -> bool:
    """Whether mnemonic ``m`` (prefixes allowed) transfers control to its operand."""
    return _branch_memo[m] if m in _branch_memo else _is_branch(m)


def _is_branch(m: str) -> bool:
    b = _branch_memo.get(m)
    if b is None:
        w = m.split()[-1]
        b = _branch_memo[m] = w in BRANCHES or (w.startswith("j") and w != "jmp" and len(w) <= 4)
    return b


def analyse(data: bytes, covered: np.ndarray, restarts: list[int]) -> Code:
    """Sweep ``data``; ``covered[k]`` is True where byte k is inside a relocation field
    (a reference through it is the relocation's, not the assembler's). ``restarts``:
    offsets (symbol starts) where decoding resumes after an undecodable stretch."""
    starts, ends, mnems, internal, undecodable = [], [], [], [], []
    size = len(data)
    # Prefix sums: an instruction [a, e) holds relocated bytes iff cum[e] > cum[a].
    cum = np.concatenate([[0], np.cumsum(covered[:size], dtype=np.int64)]).tolist()
    pos = 0
    restarts = sorted(set(r for r in restarts if 0 <= r < size))
    add_start, add_end, add_mnem, memo = starts.append, ends.append, mnems.append, _branch_memo
    while pos < size:
        last = pos
        for addr, n, m, ops in _MD.disasm_lite(data[pos:], pos):
            add_start(addr)
            end = addr + n
            add_end(end)
            add_mnem(m)
            last = end
            if cum[end] != cum[addr]:
                continue
            if "rip" in ops:
                mo = _RIP.search(ops)
                if mo is None:
                    undecodable.append(addr)
                    continue
                disp = int(mo.group(2), 0) if mo.group(2) else 0
                disp = -disp if mo.group(1) == "-" else disp
                insn = next(_MD_DETAIL.disasm(data[addr:end], addr))
                internal.append(InternalRef(addr, end, addr + insn.disp_offset, insn.disp_size or 4, end + disp,
                                            False, m == "lea"))
            elif (memo[m] if m in memo else _is_branch(m)) and _IMM.match(ops):
                target = int(ops, 0)      # capstone prints targets below 10 in decimal
                rel32 = int.from_bytes(data[end - 4:end], "little", signed=True) if n >= 5 else None
                if rel32 is not None and end + rel32 == target:
                    internal.append(InternalRef(addr, end, end - 4, 4, target, True, False))
                elif end + int.from_bytes(data[end - 1:end], "little", signed=True) == target:
                    internal.append(InternalRef(addr, end, end - 1, 1, target, True, False))
                else:
                    undecodable.append(addr)
        if last >= size:
            break
        undecodable.append(last)
        nxt = [r for r in restarts if r > last]
        pos = nxt[0] if nxt else size
    return Code(np.array(starts, np.int64), np.array(ends, np.int64), mnems, internal, undecodable)
