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
2. **Constants** (objects without ``.comment``: no compiler is known to have made
   them — Debian strips ``.comment`` from its static libraries, so this is most
   archives): a difference is only useful added to an address the code materialises.
   A *base* is an offset of a code section that a RIP-relative operand, a relocation
   from data or from a non-branch instruction, or a ``call`` to its own end
   designates; the *constants* are every 4- and 8-byte little-endian word at every
   offset of every allocated section, and every immediate and displacement of every
   instruction, outside relocation fields. In a section whose extents are not
   declared, ``base + constant`` must not land in another unit. A section declares
   its extents when every function begins an unwind entry (FDE) ending inside it —
   what GCC and clang write by default on x86-64, and careful assembly; there single
   constants are everywhere in compiled code, so only tables count: ``TABLE``
   consecutive aligned words (outside ``.eh_frame``) landing, from one base, exactly
   on the starts of as many other units (``.long h1-h0, h2-h0, h3-h0``). Where the rule fires the units between stay together.
3. **Unwind ranges** (every object): an ``.eh_frame`` FDE describes
   ``[pc_begin, pc_begin + pc_range)``; the range is a constant, so the units it spans
   stay together.
"""

from __future__ import annotations

import re

from elftools.elf.constants import SH_FLAGS
from elftools.elf.enums import ENUM_ST_INFO_BIND

import numpy as np

from elflayout.split import disasm
from elflayout.split.reader import ObjectFile

STB = ENUM_ST_INFO_BIND
# Sections whose relocations describe code rather than reach it.
NOT_REACHING = (".eh_frame", ".debug_", ".zdebug_")
# Constant widths scanned by rule 2 (``.long`` and ``.quad``).
WORDS = (np.dtype("<i4"), np.dtype("<i8"))
_NUMBER = re.compile(r"(?<![\w.])(?:0x[0-9a-f]+|\d+)(?![\w.])")
_RIP_OPERAND = re.compile(r"\[rip[^\]]*\]")
# Entries of a table of differences (rule 2, declared extents): consecutive aligned
# words, each landing on the start of a different unit. Three, because pairs of small
# integers in compiled code's data land on two starts of 16-byte-aligned functions.
TABLE = 3
# eh_frame: a 32-bit length of 0xffffffff announces a 64-bit one (DWARF 5, 7.2.2).
DWARF64_ESCAPE = 0xFFFFFFFF


def describes_only(name: str) -> bool:
    return name.startswith(NOT_REACHING)


def compiled(obj: ObjectFile) -> bool:
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


def constants(obj: ObjectFile, limit: int, understood: dict[int, list[tuple[int, int]]],
              all_words: list | None = None) -> dict[int, tuple[str, int]]:
    """Rule 2's constants with ``0 < |value| <= limit``: value -> (section name, offset)
    of one place holding it outside every relocation field and every field in
    ``understood`` (section -> [(offset, width)]: displacements of the PC-relative
    references the disassembly found, which the split already follows)."""
    out: dict[int, tuple[str, int]] = {}
    for sec, dt, vals, clean, cum in all_words if all_words is not None else words(obj, understood):
        keep = np.flatnonzero(clean & (np.abs(vals) <= limit) & (vals != 0))
        for v, off in zip(vals[keep].tolist(), keep.tolist()):
            out.setdefault(v, (sec.name, off))
        if sec.flags & SH_FLAGS.SHF_EXECINSTR and dt == WORDS[0]:
            for v, off in (_a64_operands(obj, sec, cum) if obj.aarch64 else _operands(sec.data, cum)):
                if 0 < abs(v) <= limit:
                    out.setdefault(v, (sec.name, off))
    return out


def words(obj: ObjectFile, understood: dict[int, list[tuple[int, int]]]):
    """(section, dtype, value at every offset, True where no relocated or understood
    byte is in the word, prefix sums of those bytes) for each width of ``WORDS``."""
    from elflayout.split.plan import covered_bytes
    for sec in obj.sections:
        if sec.nobits or not sec.size or not sec.flags & SH_FLAGS.SHF_ALLOC:
            continue
        raw = np.frombuffer(sec.data, np.uint8)
        covered = covered_bytes(obj, sec)
        for off, w in understood.get(sec.index, ()):
            covered[off:off + w] = True
        cum = np.concatenate([[0], np.cumsum(covered[:len(raw)], dtype=np.int64)])
        for dt in WORDS:
            n = len(raw) - dt.itemsize + 1
            if n <= 0:
                continue
            vals = np.lib.stride_tricks.sliding_window_view(raw, dt.itemsize)[:n].copy().view(dt).ravel()
            yield sec, dt, vals, cum[dt.itemsize:dt.itemsize + n] == cum[:n], cum


def table_reach(sp, all_words: list) -> None:
    """Rule 2 for a section with declared extents: a *table* — two neighbouring words
    (``.long h1-h0, h2-h0``) that, added to one base, both land exactly on the start
    of a unit other than the base's — keeps those units together. Single constants
    are not read here: compiled code is full of them."""
    if not sp.bases:
        return
    starts = np.array([u.start for u in sp.units], np.int64)
    bases = np.array(sorted(sp.bases), np.int64)
    own = starts[np.searchsorted(starts, bases, "right") - 1]
    dist = np.unique((starts[None, :] - bases[:, None]).ravel())
    for sec, dt, vals, clean, _ in all_words:
        w = dt.itemsize
        if sec.name == ".eh_frame":
            continue        # its lengths are rule 3's
        hit = clean & np.isin(vals, dist) & (vals != 0)
        hit[np.arange(len(hit)) % w != 0] = False       # .long/.quad tables are aligned
        n = len(hit) - (TABLE - 1) * w
        if n <= 0:
            continue
        run = np.ones(n, bool)
        for j in range(TABLE):
            run &= hit[j * w:j * w + n]
        for i in np.flatnonzero(run).tolist():
            xs = bases[:, None] + vals[i:i + TABLE * w:w][None, :].astype(np.int64)
            ok = np.isin(xs, starts).all(1) & (xs != own[:, None]).all(1)
            for k in np.flatnonzero(ok).tolist():
                us = sorted({sp.unit_at(int(x)) for x in xs[k]})
                if len(us) < TABLE:
                    continue
                u = sp.unit_at(int(bases[k]))
                sp.glue_range(min(u, us[0]), max(u, us[-1]),
                              f"{sec.name}+{i:#x} holds a table of {w}-byte differences from {sp.sec.name}+"
                              f"{int(bases[k]):#x} ({sp.units[u].name}) to "
                              f"{', '.join(sp.units[v].name for v in us)} (hand-written code)", "assembler constant")


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


def _a64_operands(obj: ObjectFile, sec, cum: np.ndarray):
    """As ``_operands`` for AArch64: the immediates of every instruction of the code
    stretches (``$x``) that is not PC-relative (those the disassembly follows)."""
    from elflayout.split import disasm_a64
    from elflayout.split.plan import mapped_code
    for lo, hi in mapped_code(obj, sec) or [(0, sec.size - sec.size % 4)]:
        pos = lo
        while pos < hi:
            last = pos
            for addr, n, m, ops in disasm_a64.MD.disasm_lite(sec.data[pos:hi], pos):
                last = addr + n
                if cum[addr + n] != cum[addr] or not ops or disasm_a64.pc_relative(sec.data, addr):
                    continue
                for num in _NUMBER.findall(ops):
                    v = int(num, 0)
                    yield (v - (1 << 64) if v >= 1 << 63 else v), addr
            pos = max(last, pos) + (4 if last < hi else 0)   # an undecodable word: skip it


def constant_reach(sp, consts: dict[int, tuple[str, int]]) -> None:
    """Rule 2 for one code section plan without declared extents."""
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
        for j in np.flatnonzero(hit).tolist():
            v = int(units[j])
            c = int(vals[j])
            where, off = consts[c]
            sp.glue_range(u, v, f"{sp.sec.name}+{base:#x} (an address taken in {sp.units[u].name}) plus the "
                                f"constant {c:#x} at {where}+{off:#x} is in {sp.units[v].name}: it may be a "
                                "difference the assembler resolved (hand-written code)", "assembler constant")


def declared(obj: ObjectFile, sp) -> bool:
    """Whether every function of the section begins an unwind entry (FDE) that ends
    inside it: the extents a compiler declares with ``-fasynchronous-unwind-tables``
    (GCC's and clang's default on x86-64), and careful assembly with ``.cfi_startproc``."""
    begins = dict(sp.fdes)
    for u in sp.units:
        first = min(int(obj.symbols["st_value"][i]) for i in u.symbols) if u.symbols else u.start
        end = begins.get(first)
        if end is None or end > u.end:
            return False
    return True


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
