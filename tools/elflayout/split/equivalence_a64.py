"""AArch64 functions compared by meaning for the other-order links of ``split --check``.

Every 4-byte word of a function is compared between the original link and a link in
another order, modulo its PC-relative field: ``b``, ``bl``, ``b.cond``, ``cbz``,
``tbz``, ``adr`` and literal ``ldr`` by the names of the address they reach (a PLT
entry by the symbol its GOT slot holds); ``adrp`` and ``:lo12:`` instructions by the
target of their emitted relocation, after checking that the page and the low 12 bits
encoded are that target's. What cannot be related (an ``adrp`` without relocation, a
relocation of another type, a branch outside every symbol, a field that does not
encode its relocation's target) compares equal to nothing: the check fails.
"""

from __future__ import annotations

import re

from elflayout import arch
from elflayout.split import disasm_a64 as d64

PAGE_SIZE = 4096
IMM12 = 0x003FFC00
LOADS = frozenset(arch.AARCH64_LO12_SHIFT) - {arch.AARCH64_ADD_LO12}
BRANCH_RELOCS = frozenset({arch.R_AARCH64_CALL26, arch.R_AARCH64_JUMP26, d64.R_CONDBR19, d64.R_TSTBR14})
NEAR_RELOCS = frozenset({d64.R_LD_PREL_LO19, d64.R_ADR_PREL_LO21})
# PLT entries (AArch64 ELF ABI; lld, GNU ld, gold): [bti c;] adrp x16, slot; ldr x17, [x16, :lo12:slot]
BTI_C = 0xD503245F
ADRP_X16 = (0x9F00001F, 0x90000010)
LDR_X17_X16 = (0xFFC003FF, 0xF9400211)
UNNAMED_BRANCH = "a branch target outside every symbol"
BEFORE = re.compile(r"-0x[0-9a-f]+$")       # a symbol-distance name (see equivalence.Image.name)


class Unrelated:
    """A token equal to nothing: a word the check cannot relate between two links."""

    def __init__(self, why: str):
        self.why = why

    def __eq__(self, other) -> bool:
        return False

    __hash__ = None

    def __str__(self) -> str:
        return self.why


def _form(w: int) -> str | None:
    return next((m for mask, val, m, *_ in d64.PCREL_FORMS if w & mask == val), None)


def _field(m: str) -> int:
    return arch.AARCH64_OBJECT[d64.PCREL_OF[m][0]].mask


def _reached(pc: int, w: int, m: str) -> int:
    _, fld, scale = d64.PCREL_OF[m]
    base = pc & ~(PAGE_SIZE - 1) if m == "adrp" else pc
    return base + d64._imm(w, fld, scale)


def plt_slot(raw: bytes, addr: int) -> int | None:
    """The GOT slot the PLT entry at ``addr`` (its bytes ``raw``) jumps through, or None."""
    words = [int.from_bytes(raw[k:k + 4], "little") for k in range(0, len(raw) - 3, 4)]
    if words and words[0] == BTI_C:
        words, addr = words[1:], addr + 4
    if len(words) < 2 or words[0] & ADRP_X16[0] != ADRP_X16[1] or words[1] & LDR_X17_X16[0] != LDR_X17_X16[1]:
        return None
    return _reached(addr, words[0], "adrp") + ((words[1] >> 10) & 0xFFF) * 8


def _literal_width(w: int) -> int:
    """Bytes a literal ``ldr`` (or ``ldrsw``, SIMD ``ldr``) reads (Arm ARM C4.1.66)."""
    opc = w >> 30
    if w >> 26 & 1:
        return (4, 8, 16, 4)[opc]
    return (4, 8, 4, 1)[opc]     # prfm: 1


def _decoded(img, pc: int, w: int, m: str):
    names = img.name(_reached(pc, w, m), branch=m in d64.BRANCHES, width=_literal_width(w) if m == "ldr" else None)
    if UNNAMED_BRANCH in names:
        return Unrelated(f"{m} at {pc:#x} reaches {_reached(pc, w, m):#x}, outside every symbol"),
    return m, w & ~_field(m), names


def _relocated(img, pc: int, w: int, m: str | None, typ: int, target: int, sym: str):
    if (typ in BRANCH_RELOCS and m in d64.BRANCHES) or (typ in NEAR_RELOCS and m in ("ldr", "adr")):
        return _decoded(img, pc, w, m)      # a call may reach a PLT entry, named by its symbol
    if typ in arch.AARCH64_PAGE and m == "adrp":
        if _reached(pc, w, m) != target & ~(PAGE_SIZE - 1):
            return Unrelated(f"adrp at {pc:#x} loads page {_reached(pc, w, m):#x}, "
                             f"its relocation's target {target:#x} is on another"),
        # Outside every symbol, named by its first byte: the :lo12: instruction names it fully.
        return m, w & ~_field(m), "page of", img.name(target, width=1)
    if typ in (arch.AARCH64_GOT_PAGE, arch.AARCH64_GOT_LO12):
        return _got(img, pc, w, m, typ, target, sym)
    shift = arch.AARCH64_LO12_SHIFT.get(typ)
    if shift is not None:
        lo = target & (PAGE_SIZE - 1)
        if lo & ((1 << shift) - 1) or (w & IMM12) >> 10 != lo >> shift:
            return Unrelated(f"the :lo12: instruction at {pc:#x} does not encode {target:#x}"),
        # A load or store reads 1 << shift bytes there; an add's address is named as lea's.
        return w & ~IMM12, "low 12 bits of", img.name(target, width=1 << shift if typ in LOADS else None)
    return Unrelated(f"{arch.reloc_name('EM_AARCH64', 64, typ)} at {pc:#x}: not compared"),


def _got(img, pc: int, w: int, m: str | None, typ: int, target: int, sym: str):
    """An adrp of a GOT slot's page or the ldr of its low 12 bits: some slot there must
    hold the relocation's symbol."""
    names = img.name(target)
    want = {f"GOT({n})" for n in _held(names) or names} | ({f"GOT({sym}+0x0)"} if sym else set())
    if typ == arch.AARCH64_GOT_PAGE and m == "adrp":
        page = _reached(pc, w, m)
        hits = [a for a, names in got_slots(img) if a & ~(PAGE_SIZE - 1) == page and names & want]
        field = _field(m)
    elif typ == arch.AARCH64_GOT_LO12:
        lo = ((w & IMM12) >> 10) * 8
        hits = [a for a, names in got_slots(img) if a & (PAGE_SIZE - 1) == lo and names & want]
        field = IMM12
    else:
        hits = []
    if not hits:
        name = arch.reloc_name("EM_AARCH64", 64, typ)
        return Unrelated(f"{name} at {pc:#x} reaches no GOT slot of {sym or hex(target)}"),
    return w & ~field, "GOT slot of", frozenset(want)


def got_slots(img) -> list[tuple[int, frozenset]]:
    """(address, names) of every 8-byte slot of the GOT sections."""
    if img.got_slots is None:
        img.got_slots = []
        for s in img.secs:
            if s.name in (".got", ".got.plt"):
                img.got_slots += [(a, img.name(a)) for a in range(s["sh_addr"], s["sh_addr"] + s["sh_size"], 8)]
    return img.got_slots


def code_tokens(img, addr: int, size: int) -> list:
    """One token per 4-byte word of the function at ``addr`` (see module doc)."""
    data = img.bytes_at(addr, size)
    relocs = img.code_relocations()
    out = []
    for off in range(0, len(data) - 3, 4):
        pc, w = addr + off, int.from_bytes(data[off:off + 4], "little")
        m = _form(w)
        if pc in relocs:
            out.append(_relocated(img, pc, w, m, *relocs[pc]))
        elif m == "adrp":
            out.append((Unrelated(f"adrp at {pc:#x} without a relocation"),))
        elif m is not None:
            out.append(_decoded(img, pc, w, m))
        else:
            out.append((w,))
    if len(data) % 4:
        out.append((data[len(data) - len(data) % 4:],))
    return out


def _held(names: frozenset) -> frozenset:
    """The names of symbols holding the address: not those of a neighbour (the end of
    the one before, a distance to the one after), which another order changes."""
    return frozenset(n for n in names if not n.startswith("end of ") and not BEFORE.search(n))


def same(a, b) -> bool:
    """Tokens equal; name sets sharing a name, a holding symbol's when both sides have
    one (no exception: a name set never matches contents only on the other side)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, frozenset) and isinstance(y, frozenset):
            hx, hy = _held(x), _held(y)
            if not (hx & hy if hx and hy else x & y):
                return False
        elif not x == y:
            return False
    return True
