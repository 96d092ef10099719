"""``split --check``, second part: the split objects linked in *other* orders mean what
the original objects mean.

An original-order link (``check``) proves the bytes are laid out as before; it cannot
see a reference that only holds while two functions stay adjacent. So the split
objects are also linked with their sections reversed and in a seeded shuffle (lld
``--symbol-ordering-file``; gold ``--section-ordering-file``; GNU ld has neither in
the versions supported, so lld links its other orders), with ``--emit-relocs``, and
compared with the original link by meaning, not address:

- every function (``STT_FUNC`` with a size): the same instructions, where each branch
  target and RIP-relative operand is named by the symbol holding it plus the offset
  (or, outside every symbol, by its section and the 16 bytes there) and, when its
  emitted relocation names a uniquely named symbol, by that symbol plus the constant;
  each absolute relocation or relaxed GOT load in an instruction by its target's name;
- every relocated data word (the emitted relocations in allocated sections outside
  code): the same type and target name, by the symbol holding the word plus offset
  (words outside every symbol: the same multiset per output section).

AArch64 functions are compared word by word modulo their PC-relative fields
(``equivalence_a64``). An address that ends one symbol and starts the next has both names; two names match
when they share one. PC-relative words in data whose target lies outside every
symbol (a jump-table entry ``.L5 - .L4 + 4k`` past its function) are not compared
and are counted. What no comparison can see is a constant that is a difference the
assembler resolved: that is what ``run`` (``--check --run CMD``) and the split's own
rules (``reach``) are for.
"""

from __future__ import annotations

import io
import os
import random
import re
import shlex
import struct
import subprocess
import tempfile
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from elftools.common.exceptions import ELFError
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_RELOC_TYPE_x64, ENUM_ST_SHNDX, ENUM_ST_INFO_BIND

from elflayout import arch, toolchain
from elflayout.split import debugcheck, disasm, equivalence_a64
from elflayout.split.check import SAME_LAYOUT, STYLES, _inputs, inputs_machine
from elflayout.split.extents import SPLIT_PREFIX, STT

R = ENUM_RELOC_TYPE_x64
SHN_UNDEF, SHN_ABS = ENUM_ST_SHNDX["SHN_UNDEF"], ENUM_ST_SHNDX["SHN_ABS"]
STB_LOCAL = ENUM_ST_INFO_BIND["STB_LOCAL"]
ABSOLUTE, PCREL = arch.DATA_WORDS["EM_X86_64"]
# GOT loads a linker relaxes, in a non-PIC output, to an immediate (``cmp reg, imm32``
# from ``cmp reg, sym@GOTPCREL(%rip)``): the immediate is the symbol's address.
GOT_LOADS = {R["R_X86_64_GOTPCREL"], R["R_X86_64_REX_GOTPCRELX"], 41}     # 41: R_X86_64_GOTPCRELX
# Orders besides the original one; the shuffle's seed is fixed so a failure repeats.
SHUFFLE_SEED = 24
ORDERS = ("reversed", "shuffled")
# Bytes that name an address outside every symbol (a string constant, say).
CONTENT_NAME = 16
GOT_SECTIONS = (".got", ".got.plt")
UNNAMED_BRANCH = equivalence_a64.UNNAMED_BRANCH
_SYMBOLIC = re.compile(r"[+-]0x[0-9a-f]+$|^end of |^GOT\(|^PLT\(|^pointer to |^word relocated to ")
_OFFSET = re.compile(r"\+0x[0-9a-f]+$")
# As the split's own rule (plan.NEAR_NEXT): an address this close before a symbol is
# also named from it.
NEAR = 64
PLT_SECTIONS = (".plt", ".plt.sec", ".plt.got", ".iplt")
SYM64 = np.dtype([("st_name", "<u4"), ("st_info", "u1"), ("st_other", "u1"), ("st_shndx", "<u2"),
                  ("st_value", "<u8"), ("st_size", "<u8")])
RELA64 = np.dtype([("r_offset", "<u8"), ("r_info", "<u8"), ("r_addend", "<i8")])
_SIZE = re.compile(r"\b(byte|word|dword|qword|tbyte|xmmword|ymmword|zmmword) ptr \[rip")
OPERAND_BYTES = {"byte": 1, "word": 2, "dword": 4, "qword": 8, "tbyte": 10, "xmmword": 16, "ymmword": 16,
                 "zmmword": 16}
_BEFORE = equivalence_a64.BEFORE
_RIP = re.compile(r"\[rip(?: ([+-]) (0x[0-9a-f]+|\d+))?\]")
_NUM = re.compile(r"(?<![\w.])(?:0x[0-9a-f]+|\d+)(?![\w.])")


@dataclass
class EquivalenceResult:
    order: str
    linker: str                     # the linker that linked this order
    identical: bool
    kind: str = "meaning"
    functions_compared: int = 0
    instructions_compared: int = 0
    data_words_compared: int = 0
    not_compared: int = 0           # PC-relative data words whose target is outside every symbol
    line_addresses_compared: int = 0    # code addresses whose file:line both links' DWARF agree on
    debug_verify: str | None = None     # llvm-dwarfdump --verify: verified, fails, or why not verified
    first_difference: str | None = None
    differences: list[str] = field(default_factory=list)


@dataclass
class RunResult:
    order: str
    linker: str
    identical: bool
    first_difference: str | None = None
    kind: str = "run"


# Linkers that link the other orders, per machine: GNU ld has no ordering file; gold's
# --emit-relocs misplaces an AArch64 link's relocations when sections are reordered
# (duplicate offsets, instructions left without one).
REORDERING = {"EM_X86_64": ("lld", "gold"), "EM_AARCH64": ("lld",)}


def reorder_linker(linker: str, machine: str | None = None) -> str:
    """The linker that links the other orders when the check uses ``linker`` (objects
    for ``machine``, None: this machine's)."""
    from elflayout import emulator
    return linker if linker in REORDERING.get(machine or emulator.host_machine(), ("lld",)) else "lld"


def other_orders(originals: list[Path], split: list[Path], linker: str, style: str, cmd: str | None,
                 results: list) -> None:
    """The check's second part for one ``--linker``: append to ``results``; raise
    ``Finding`` at the first difference (nothing is then written)."""
    from elflayout.errors import Finding
    if any(r.linker == reorder_linker(linker, inputs_machine(originals)) for r in results):
        return      # lld already linked the other orders for another --linker
    for r in equivalent(originals, split, linker, style) + (run(originals, split, cmd, linker) if cmd else []):
        results.append(r)
        if not r.identical:
            raise Finding(f"check failed ({r.linker}, {r.order} order): {r.first_difference} (nothing written)")


# -- the names and orders of the split sections ------------------------------------

def _members(path: Path):
    from elflayout.split.archive import is_archive, read_archive
    raw = path.read_bytes()
    if is_archive(raw[:8]):
        return [body for _, body in read_archive(raw, str(path))]
    return [raw]


@lru_cache(maxsize=2)
def split_names(split: tuple[Path, ...]) -> tuple[list[str], list[str]]:
    """(symbols, sections) defined in the per-unit sections of the split outputs, in
    link order: what an ordering file can name."""
    from elflayout.split.reader import read_object
    prefixes = tuple(SPLIT_PREFIX.values())
    kinds = (STT["STT_FUNC"], STT["STT_OBJECT"])
    syms, secs = [], []
    for p in split:
        for k, body in enumerate(_members(p)):
            obj = read_object(body, f"{p}[{k}]")
            names = {s.index for s in obj.sections if s.name.startswith(prefixes) and s.flags & SH_FLAGS.SHF_ALLOC}
            secs += [obj.sections[i].name for i in sorted(names)]
            info, shndx = obj.symbols["st_info"], obj.symbols["st_shndx"]
            syms += [obj.sym_names[i] for i in range(1, len(obj.symbols))
                     if int(shndx[i]) in names and (info[i] & 0xF) in kinds and obj.sym_names[i]]
    return list(dict.fromkeys(syms)), list(dict.fromkeys(secs))


def order_flags(split: list[Path], linker: str, order: str, workdir: Path) -> tuple[str, list[str]]:
    """(linker used, its ordering flags) linking ``split`` in ``order``."""
    syms, secs = split_names(tuple(split))
    names = secs if linker == "gold" else syms
    if order == "reversed":
        names = names[::-1]
    else:
        names = names[:]
        random.Random(SHUFFLE_SEED).shuffle(names)
    f = workdir / f"{order}.order"
    f.write_bytes(("\n".join(names) + "\n").encode("utf-8", "surrogateescape"))   # names need not be UTF-8
    if linker == "gold":
        return "gold", [f"-Wl,--section-ordering-file={f}"]
    return "lld", [f"-Wl,--symbol-ordering-file={f}", "-Wl,--no-warn-symbol-ordering"]


def _link(paths, linker: str, flags: list[str], style: str, out: Path,
          machine: str | None = None) -> toolchain.LinkResult:
    return toolchain.link(linker, [*flags, *STYLES[style], *SAME_LAYOUT.get(machine, []), "-Wl,--emit-relocs",
                                   "-o", out, *_inputs(paths)], machine=machine)


# -- an image, by meaning ----------------------------------------------------------

def _symbols(elf, tab) -> tuple[np.ndarray, list[str]]:
    """A symbol table as SYM64 records and names (numpy: tens of thousands of symbols)."""
    if tab is None or tab["sh_type"] not in ("SHT_SYMTAB", "SHT_DYNSYM"):
        return np.zeros(0, SYM64), []
    arr = np.frombuffer(tab.data(), SYM64)
    strs = elf.get_section(tab["sh_link"]).data()
    names = [strs[o:strs.index(b"\0", o)].decode("utf-8", "backslashreplace") for o in arr["st_name"].tolist()]
    return arr, names


class Image:
    """A linked output read for comparison: symbols by address, code, relocations."""

    def __init__(self, path: Path):
        self.elf = ELFFile(io.BytesIO(path.read_bytes()))
        self.aarch64 = self.elf["e_machine"] == "EM_AARCH64"
        self.absolute_types, self.pcrel_types = arch.DATA_WORDS[self.elf["e_machine"]]
        self._code_relocs: dict[int, tuple[int, int, str]] | None = None
        self.got_slots: list | None = None          # AArch64: (address, names) of the GOT slots
        self.secs = [s for s in self.elf.iter_sections() if s["sh_flags"] & SH_FLAGS.SHF_ALLOC
                     and s["sh_type"] != "SHT_NOBITS" and s["sh_size"]]
        self.sec_starts = sorted((s["sh_addr"], k) for k, s in enumerate(self.secs))
        self.funcs: dict[str, list[tuple[int, int]]] = {}
        self.tokens: dict[tuple, list] = {}        # (function, bytes) -> compared instructions (cached)
        self._data: dict[str, bytes] = {}
        self.absolute = None
        self.emitted: dict[int, int] | None = None     # place -> target of the kept relocations
        self.syms: list[tuple[int, int, str]] = []       # (start, end, key)
        self._names: dict[tuple, frozenset | None] = {}
        self.lea_targets: list[int] = []
        self.pc_operands: dict[int, tuple[str, int]] | None = None
        self._relocations: list | None = None
        self.leas_noted: set[str] = set()           # functions whose lea bases are in lea_targets
        tab = self.elf.get_section_by_name(".symtab")
        cur = ""
        arr, names = _symbols(self.elf, tab)
        kinds = (STT["STT_FUNC"], STT["STT_OBJECT"])
        for k in range(1, len(arr)):
            t, bind, shndx = int(arr["st_info"][k]) & 0xF, int(arr["st_info"][k]) >> 4, int(arr["st_shndx"][k])
            if t == STT["STT_FILE"]:
                cur = names[k]
            if t not in kinds or not names[k] or shndx in (SHN_UNDEF, SHN_ABS):
                continue
            key = names[k] if bind != STB_LOCAL else f"{cur}:{names[k]}"
            v, sz = int(arr["st_value"][k]), int(arr["st_size"][k])
            self.syms.append((v, v + sz, key))
            if t == STT["STT_FUNC"] and sz:
                self.funcs.setdefault(key, []).append((v, sz))
        self.syms.sort()
        self.starts = [s[0] for s in self.syms]
        self.ends: dict[int, list[str]] = {}
        for a, e, k in self.syms:
            if e > a:
                self.ends.setdefault(e, []).append(k)
        self.dyn: dict[int, tuple[str, int]] = {}       # GOT slot -> (symbol or "", addend)
        for rs in self.elf.iter_sections():
            if rs["sh_type"] == "SHT_RELA" and rs["sh_flags"] & SH_FLAGS.SHF_ALLOC:
                _, dnames = _symbols(self.elf, self.elf.get_section(rs["sh_link"]) if rs["sh_link"] else None)
                r = np.frombuffer(rs.data(), RELA64)
                for off, sym, add in zip(r["r_offset"].tolist(), (r["r_info"] >> 32).tolist(), r["r_addend"].tolist()):
                    self.dyn[off] = (dnames[sym] if sym < len(dnames) else "", add)

    def _indirect(self, addr: int, s) -> frozenset[str] | None:
        """A GOT slot by what the dynamic relocation (or, linked statically, the
        address) in it designates; a PLT entry by the GOT slot its ``jmp`` reads."""
        if s.name in GOT_SECTIONS:
            if addr in self.dyn:
                sym, add = self.dyn[addr]
                inner = frozenset([f"{sym}{add:+#x}"]) if sym else self.name(add)
            else:
                inner = self.name(int.from_bytes(self.bytes_at(addr, 8), "little"))
            return frozenset(f"GOT({n})" for n in inner)
        if s.name in PLT_SECTIONS and self.aarch64:
            slot = equivalence_a64.plt_slot(self.bytes_at(addr, 12), addr)
            return None if slot is None else frozenset(f"PLT({x})" for x in self.name(slot))
        if s.name in PLT_SECTIONS:
            for a, size, m, ops in disasm.MD.disasm_lite(self.bytes_at(addr, CONTENT_NAME), addr):
                mo = _RIP.search(ops)
                if m in ("jmp", "bnd jmp", "notrack jmp") and mo is not None:
                    d = int(mo.group(2), 0) if mo.group(2) else 0
                    slot = a + size + (-d if mo.group(1) == "-" else d)
                    return frozenset(f"PLT({x})" for x in self.name(slot))
                if m != "endbr64":
                    break
        return None

    def section_at(self, addr: int):
        k = bisect_right(self.sec_starts, (addr, 1 << 30)) - 1
        if k >= 0:
            s = self.secs[self.sec_starts[k][1]]
            if addr < s["sh_addr"] + s["sh_size"]:
                return s
        return None

    def bytes_at(self, addr: int, n: int) -> bytes:
        s = self.section_at(addr)
        if s is None:
            return b""
        if s.name not in self._data:
            self._data[s.name] = s.data()
        off = addr - s["sh_addr"]
        return self._data[s.name][off:off + n]

    def name(self, addr: int, contained_only: bool = False, place: bool = False,
             width: int | None = None, branch: bool = False) -> frozenset[str] | None:
        key = (addr, contained_only, place, width, branch)
        if key not in self._names:
            self._names[key] = self._name(addr, contained_only, place, width, branch)
        return self._names[key]

    def _name(self, addr: int, contained_only: bool, place: bool, width: int | None,
              branch: bool) -> frozenset[str] | None:
        """Every name of ``addr``: symbol+offset of the symbols holding it, and (not for
        a branch target) symbol-distance of those starting at most ``NEAR`` bytes after it; outside
        every symbol (None if ``contained_only``) the end-of of those ending there (not
        for a ``place``: a word is in one object), a PLT entry or GOT slot by what it
        reaches, else its section and contents: ``width`` bytes (an operand's size) or a
        string up to its NUL, and, read as a jump table, the table's targets."""
        s = self.section_at(addr)
        if not place and s is not None and (ind := self._indirect(addr, s)) is not None:
            # Before symbols (gold's _GLOBAL_OFFSET_TABLE_ spans .got.plt); a table
            # ending where the GOT starts keeps its end-of name (``lea table+N(%rip)``).
            return ind | {f"end of {key}" for key in self.ends.get(addr, ())}
        out = set()
        k = bisect_right(self.starts, addr) - 1
        first = self.starts[k] if k >= 0 else None
        while k >= 0 and self.starts[k] == first:     # aliases share a start
            a, e, key = self.syms[k]
            if a <= addr < max(e, a + 1):
                out.add(f"{key}+{addr - a:#x}")
            k -= 1
        # A little before a symbol may be that symbol minus a constant (&usedpools[0] - 16).
        before = set()
        k = bisect_right(self.starts, addr)
        while not place and not branch and k < len(self.starts) and self.starts[k] - addr <= NEAR:
            before.add(f"{self.syms[k][2]}-{self.starts[k] - addr:#x}")
            k += 1
        ends = {f"end of {key}" for key in (() if place else self.ends.get(addr, ()))}
        if out or contained_only:
            return frozenset(out | before | ends) if out else None
        out |= before | ends
        if branch:
            # Compiled code branches inside functions only: this is hand-written code
            # without a symbol or, far more often, data decoded as code (perlasm's
            # strings after RC4_options): not compared, on either side.
            return frozenset([UNNAMED_BRANCH])
        if s is None:
            return frozenset(["outside every section"])
        raw = self.bytes_at(addr, CONTENT_NAME)
        content = raw[:width] if width else raw[:raw.index(0) + 1] if 0 in raw else raw
        if self.emitted is None:
            self.emitted = {place: target for place, _, target, _, _, _ in self.relocations()}
        if addr in self.emitted:
            # A relocated word (the first entry of GMP's .long L(mf0)-L(mtab) table): its
            # bytes move with the order, its target does not.
            n = self.name(self.emitted[addr], contained_only=True, branch=True) or {"outside every symbol"}
            return frozenset([*out, *(f"word relocated to {x}" for x in n if not x.startswith("end of "))])
        if addr in self.dyn:
            # A pointer the dynamic linker relocates: its bytes are the link's address (gold).
            sym, add = self.dyn[addr]
            return frozenset([*out, f"pointer to {sym}{add:+#x}" if sym else
                              f"pointer to {_stable(self.name(add, branch=True))}"])
        return frozenset([*out, f"{s.name} bytes {content.hex()}", *self._as_table(addr, raw)])

    def _as_table(self, addr: int, raw: bytes) -> list[str]:
        """The bytes at ``addr`` read as a jump table, if every entry lands in a
        function: 4-byte entries relative to the table (GCC's PIC ``.long .L5-.L4``)
        or 8-byte addresses. Such a table's bytes change with the order; its targets do not."""
        out = []
        for width, rel in ((4, True), (8, False)):
            e = int.from_bytes(raw[:width], "little", signed=rel)
            n = self.name(addr + e if rel else e, contained_only=True, branch=True) if len(raw) >= width else None
            sec = self.section_at(addr + e if rel else e) if n is not None else None
            if sec is not None and sec["sh_flags"] & SH_FLAGS.SHF_EXECINSTR:
                # The first entry (what follows depends on the order), by each of its names.
                out += [f"{width}-byte table from {x}" for x in n if not x.startswith("end of ")]
        return out

    def code_relocations(self) -> dict[int, tuple[int, int, str]]:
        """Place -> (type, target address, symbol name) of the emitted relocations in code."""
        if self._code_relocs is None:
            self._code_relocs = {place: (typ, target, sym) for place, typ, target, sym, _, sec in self.relocations()
                                 if sec["sh_flags"] & SH_FLAGS.SHF_EXECINSTR}
        return self._code_relocs

    def relocations(self) -> list:
        """(place, type, target address, symbol name, addend, section) of every emitted
        relocation, read once (the code and data comparisons each walk them)."""
        if self._relocations is None:
            self._relocations = list(self._read_relocations())
        return self._relocations

    def _read_relocations(self):
        """Read with numpy: a link keeps hundreds of thousands."""
        for rs in self.elf.iter_sections():
            if rs["sh_type"] != "SHT_RELA" or not rs["sh_info"] or rs["sh_flags"] & SH_FLAGS.SHF_ALLOC:
                continue        # dynamic relocations: see _indirect
            sec = self.elf.get_section(rs["sh_info"])
            if not sec["sh_flags"] & SH_FLAGS.SHF_ALLOC:
                continue
            arr, symnames = _symbols(self.elf, self.elf.get_section(rs["sh_link"]))
            values = arr["st_value"].astype(np.int64)
            r = np.frombuffer(rs.data(), RELA64)
            syms, types = (r["r_info"] >> 32).astype(np.int64), (r["r_info"] & 0xFFFFFFFF).astype(np.int64)
            targets = values[syms] + r["r_addend"]
            for off, t, target, sym, add in zip(r["r_offset"].tolist(), types.tolist(), targets.tolist(),
                                               syms.tolist(), r["r_addend"].tolist()):
                yield off, t, target, symnames[sym], add, sec


def _same(a, b) -> bool:
    """Tokens equal, name sets matching when they share a name. Not compared: a branch
    target outside every symbol on either side, and a place named by a symbol on one
    side and only by its contents on the other (``lea approx_tab-512(%rip)`` in GMP
    lands in whatever precedes the table)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, frozenset) and isinstance(y, frozenset):
            if not x & y and UNNAMED_BRANCH not in x | y and _symbolic(x) == _symbolic(y):
                return False
        elif x != y:
            return False
    return True


def _symbolic(names: frozenset[str]) -> bool:
    return any(_SYMBOLIC.search(n) for n in names)


def _rip_target(end: int, mo: re.Match) -> int:
    d = int(mo.group(2), 0) if mo.group(2) else 0
    return end + (-d if mo.group(1) == "-" else d)


def _pc_operands(img: Image) -> dict[int, tuple[str, int]]:
    """Field place -> (symbol, its address) of the PC-relative relocations in code
    against a symbol whose name is unique in the link. Such an operand is that symbol
    plus a constant in every order, wherever the constant lands (``lea
    _pcre2_utf8_table4-0xc0(%rip)``: whatever table precedes it by 0xc0 bytes)."""
    if img.pc_operands is None:
        bare = Counter(key.rsplit(":", 1)[-1] for _, _, key in img.syms)
        img.pc_operands = {place: (sym, target - add)
                           for place, typ, target, sym, add, sec in img.relocations()
                           if typ in img.pcrel_types and sym and bare[sym] == 1
                           and sec["sh_flags"] & SH_FLAGS.SHF_EXECINSTR}
    return img.pc_operands


def _code_tokens(img: Image, addr: int, size: int, absrel: dict[int, int]):
    data = img.bytes_at(addr, size)
    operands = _pc_operands(img)
    out = []
    for a, n, m, ops in disasm.MD.disasm_lite(data, addr):
        end = a + n
        mo = _RIP.search(ops)
        if disasm.is_branch(m) and _NUM.fullmatch(ops):
            out.append((m, img.name(int(ops, 0), branch=True)))
        elif mo is not None:
            w = _SIZE.search(ops)
            target = _rip_target(end, mo)
            if m == "lea":
                img.lea_targets.append(target)
            names = img.name(target, width=OPERAND_BYTES[w.group(1)] if w else None)
            rel = next((operands[f] for f in range(a + 1, end) if f in operands), None)
            if rel is not None:
                names = names | {f"operand {rel[0]}{target - rel[1]:+#x}"}
            out.append((m, _RIP.sub("[rip]", ops), names))
        else:
            fields = [t for f, t in absrel.items() if a <= f < end] if absrel else []
            if fields:
                out.append((m, _NUM.sub("N", ops), *(img.name(t) for t in fields)))
            else:
                out.append((m, ops))
    return out


def _lea_bases(img: Image, addr: int, size: int) -> None:
    """Note the addresses a function's ``lea`` loads (jump-table bases, see
    ``_data_words``) without comparing it: a function that shares its name with another
    is not compared, but the tables it loads are still there."""
    for a, n, m, ops in disasm.MD.disasm_lite(img.bytes_at(addr, size), addr):
        if m == "lea" and (mo := _RIP.search(ops)) is not None:
            img.lea_targets.append(_rip_target(a + n, mo))


def _absolute_in_code(img: Image) -> tuple[list[int], list[int]]:
    """Sorted places and targets of the absolute relocations in code (static links),
    and of GOT loads, which a non-PIC link may relax to the symbol's address."""
    out = sorted((place, target - add if typ in GOT_LOADS else target)
                 for place, typ, target, _, add, sec in img.relocations()
                 if typ in img.absolute_types | GOT_LOADS and sec["sh_flags"] & SH_FLAGS.SHF_EXECINSTR)
    return [p for p, _ in out], [t for _, t in out]


def _clipped(img: Image, key: str) -> int:
    """The function's size, cut at the next symbol's start: a hand-written ``.size``
    may run over the functions after it (libgcrypt's twofish), which need not follow it
    in another order."""
    (addr, size), = img.funcs[key]
    k = bisect_right(img.starts, addr)
    return min(size, img.starts[k] - addr) if k < len(img.starts) else size


def _function_tokens(img: Image, key: str, absolute, size: int) -> list:
    if (key, size) not in img.tokens:
        (addr, _), = img.funcs[key]
        if img.aarch64:
            img.tokens[key, size] = equivalence_a64.code_tokens(img, addr, size)
            return img.tokens[key, size]
        places, targets = absolute
        lo, hi = bisect_right(places, addr - 1), bisect_right(places, addr + size - 1)
        img.tokens[key, size] = _code_tokens(img, addr, size, dict(zip(places[lo:hi], targets[lo:hi])))
    return img.tokens[key, size]


def compare_code(a: Image, b: Image, res: EquivalenceResult) -> None:
    if a.absolute is None:
        a.absolute = _absolute_in_code(a)
    abs_b = _absolute_in_code(b)
    same = equivalence_a64.same if a.aarch64 else _same
    for key in sorted(set(a.funcs) & set(b.funcs)):
        if len(a.funcs[key]) != 1 or len(b.funcs[key]) != 1:
            continue        # one name for several functions: which is which cannot be told
        (aa, az), (ba, bz) = a.funcs[key][0], b.funcs[key][0]
        res.functions_compared += 1
        if az != bz:
            res.differences.append(f"function {key}: {az} bytes in the original link, {bz} in the other order")
            continue
        n = min(_clipped(a, key), _clipped(b, key))
        ta, tb = _function_tokens(a, key, a.absolute, n), _function_tokens(b, key, abs_b, n)
        res.instructions_compared += len(ta)
        for k, (x, y) in enumerate(zip(ta, tb)):
            if not same(x, y):
                res.differences.append(f"function {key}, instruction {k}: {_show(x)} in the original link, "
                                       f"{_show(y)} in the other order")
                break
        else:
            if len(ta) != len(tb):
                res.differences.append(f"function {key}: {len(ta)} instructions, then {len(tb)}")
    for img in (a, b) if not a.aarch64 else ():     # AArch64 tables are not relocated: no lea bases
        for key, spans in img.funcs.items():
            if (len(a.funcs.get(key, ())) != 1 or len(b.funcs.get(key, ())) != 1) and key not in img.leas_noted:
                img.leas_noted.add(key)     # the original image serves every other order
                for addr, size in spans:
                    _lea_bases(img, addr, size)
    for key in sorted(set(a.funcs) ^ set(b.funcs)):
        res.differences.append(f"function {key} only in the {'original' if key in a.funcs else 'other-order'} link")


def _stable(names: frozenset[str]) -> str:
    """One name of a set that does not depend on the order: neither a symbol-distance
    nor an end-of one."""
    return min((n for n in names if not _BEFORE.search(n) and not n.startswith("end of ")), default=min(names))


def _show(tok) -> str:
    return " ".join(sorted(x)[0] if isinstance(x, frozenset) else str(x) for x in tok)


def _data_words(img: Image, res: EquivalenceResult, count: bool):
    placed, bags = {}, {}
    bases = sorted(set(img.lea_targets))
    for place, typ, target, symname, addend, sec in img.relocations():
        if sec["sh_flags"] & SH_FLAGS.SHF_EXECINSTR or sec.name == ".eh_frame":
            continue
        if typ in img.absolute_types:
            what = img.name(target)
        elif typ in img.pcrel_types and symname and (held := img.name(target, contained_only=True)):
            what = held         # sym - . (a type-table entry): it designates sym + addend
        elif typ in img.pcrel_types:
            # A table entry .L5 - .L4: the place it designates is base + value, the base
            # being the nearest table start code loads with lea at or before the entry.
            # Another object's table may start between in one order and not in the other,
            # so the entry is named by the function it lands in, without the offset.
            k = bisect_right(bases, place) - 1
            names = img.name(target - (place - bases[k]), contained_only=True, branch=True) if k >= 0 else None
            what = frozenset(_OFFSET.sub("", n) for n in names) if names else None
            if what is None:
                res.not_compared += count
                continue
        else:
            what = frozenset([f"{symname}{addend:+#x}"])
        at = img.name(place, contained_only=True, place=True)
        if at is None:
            bags.setdefault(sec.name, []).append((typ, what))
        else:
            placed[min(at)] = (typ, what)
    return placed, bags


def compare_data(a: Image, b: Image, res: EquivalenceResult) -> None:
    pa, ga = _data_words(a, res, True)
    pb, gb = _data_words(b, res, False)
    for place in sorted(set(pa) | set(pb)):
        res.data_words_compared += 1
        if place not in pa or place not in pb or pa[place][0] != pb[place][0] or not pa[place][1] & pb[place][1]:
            x, y = pa.get(place), pb.get(place)
            res.differences.append(f"data word {place}: {_show(x) if x else 'none'} in the original link, "
                                   f"{_show(y) if y else 'none'} in the other order")
    for sec in sorted(set(ga) | set(gb)):
        # Counted by type: their targets' names hang on co-located aliases (gold puts
        # the zero-size .cold symbols of several functions at one address).
        xa = Counter(t for t, _ in ga.get(sec, []))
        xb = Counter(t for t, _ in gb.get(sec, []))
        res.data_words_compared += sum(xa.values())
        if xa != xb:
            res.differences.append(f"relocated words of {sec} outside every symbol differ "
                                   f"({sum((xa - xb).values())} only in the original link)")


def equivalent(originals: list[Path], split: list[Path], linker: str, style: str) -> list[EquivalenceResult]:
    """Link ``originals`` in order and ``split`` in every order of ``ORDERS``; compare."""
    from elflayout import emulator

    out = []
    with tempfile.TemporaryDirectory(prefix="elflayout-split-order-") as td:
        td = Path(td)
        machine = inputs_machine(originals)
        machine = None if machine == emulator.host_machine() else machine
        base_linker = reorder_linker(linker, machine)
        a = td / "original.out"
        r = _link(originals, base_linker, [], style, a, machine)
        if not r.ok:
            return [EquivalenceResult(o, base_linker, False, first_difference=_failed("original", r))
                    for o in ORDERS]
        try:
            img_a = Image(a)
        except UNREADABLE as e:
            return [EquivalenceResult(o, base_linker, False, first_difference=_unreadable("original", e))
                    for o in ORDERS]
        for order in ORDERS:
            used, flags = order_flags(split, base_linker, order, td)
            b = td / f"{order}.out"
            r = _link(split, used, flags, style, b, machine)
            res = EquivalenceResult(order, used, False)
            if not r.ok:
                res.first_difference = _failed(f"split ({order})", r)
            else:
                try:
                    img_b = Image(b)
                    compare_code(img_a, img_b, res)
                    compare_data(img_a, img_b, res)
                    res.line_addresses_compared, line_diffs, res.debug_verify = debugcheck.compare(a, b)
                    res.differences += line_diffs
                except UNREADABLE as e:
                    res.differences = [_unreadable(order, e)]
                res.identical = not res.differences
                res.first_difference = res.differences[0] if res.differences else None
            out.append(res)
    return out


# A linker may copy damaged input fields (a relocation section's entry size, a symbol
# index) into its output; such a link cannot be compared, so nothing is proved and the
# check refuses rather than passing or crashing.
UNREADABLE = (ELFError, IndexError, KeyError, ValueError, struct.error)


def _unreadable(what: str, e: Exception) -> str:
    return f"the {what} link cannot be compared ({type(e).__name__}: {e})"


def _failed(what: str, r: toolchain.LinkResult) -> str:
    return f"the {what} objects do not link: {toolchain.first_error(r.output)}"


# -- --run: a test program linked both ways ---------------------------------------

def run(originals: list[Path], split: list[Path], cmd: str, linker: str, timeout: float = 600) -> list[RunResult]:
    """Run the shell command ``cmd`` once with the original objects and once per order
    of ``ORDERS`` with the split ones; compare exit status and output. ``cmd`` finds the
    objects in ``$ELFLAYOUT_OBJECTS`` (shell-quoted, link order) and the linker and
    ordering flags in ``$ELFLAYOUT_LDFLAGS``; it runs in a fresh directory."""
    base_linker = reorder_linker(linker)
    out = []
    with tempfile.TemporaryDirectory(prefix="elflayout-split-run-") as td:
        td = Path(td)
        want = _run_once(cmd, originals, [toolchain.linker_flag(base_linker)], td / "original", timeout)
        for order in ORDERS:
            used, flags = order_flags(split, base_linker, order, td)
            got = _run_once(cmd, split, [toolchain.linker_flag(used), *flags], td / order, timeout)
            diff = None if got == want else (
                f"--run {order} order: exit {got[0]} and {len(got[1])} bytes of output, where the original "
                f"objects gave exit {want[0]} and {len(want[1])} bytes" + _first_line_diff(want[1], got[1]))
            out.append(RunResult(order, used, diff is None, diff))
    return out


def _run_once(cmd: str, objs: list[Path], flags: list[str], wd: Path, timeout: float) -> tuple[int, str]:
    wd.mkdir()
    env = dict(os.environ, ELFLAYOUT_OBJECTS=" ".join(shlex.quote(str(Path(p).resolve())) for p in objs),
               ELFLAYOUT_LDFLAGS=" ".join(shlex.quote(f) for f in flags))
    try:
        r = subprocess.run(["sh", "-c", cmd], cwd=wd, env=env, capture_output=True, text=True, timeout=timeout,
                           errors="replace")
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout:.0f} s"
    return r.returncode, r.stdout


def _first_line_diff(a: str, b: str) -> str:
    for k, (x, y) in enumerate(zip(a.splitlines(), b.splitlines())):
        if x != y:
            return f" (line {k + 1}: {y[:80]!r} instead of {x[:80]!r})"
    return ""
