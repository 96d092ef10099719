"""Split plan of one object: which units share a section, and where every reference goes.

Goal: give every function and data object its own section, as ``-ffunction-sections
-fdata-sections`` would, without changing what any byte of a link means — whatever
order the linker then puts the sections in. Where that cannot be proved for two
neighbouring units they stay in one section ("glued"), with the reason.

Definitions:
- *unit*: a function or data object with the bytes up to the next one (``extents``).
- *group*: a maximal run of glued units; each group becomes one output section.
- *target* T of a reference to section S: the offset in S it designates. For a
  relocation against S's section symbol: ``A`` for absolute types; ``A + (end of the
  instruction - r_offset)`` for PC-relative ones in code; ``A - (r_offset - table
  base)`` for PC-relative entries of a jump table in ``.rodata`` (GCC's ``.long
  .L5-.L4``); ``A`` in ``.eh_frame`` (pointers relative to the field itself).
- *address-taking* reference: ``lea`` or a data pointer (not a load/store/branch).

Steps:
1. Units of each splittable section (``extents``); sections with fewer than two, or
   in a group, TLS or mergeable, are left as they are.
2. Disassemble every code section (``disasm``). Glue a unit to the next when it falls
   through into it (its last instruction is not ret/jmp/ud2/hlt/call), when an
   instruction crosses the boundary, and keep a code section whole when a stretch of
   it cannot be decoded.
3. References the assembler resolved inside a section: to the start of another unit
   with a 32-bit displacement → a new R_X86_64_PC32 relocation; with an 8-bit one, or
   into the middle of another unit → glue the two (and everything between).
4. Every relocation against a split section's section symbol: find its target T and
   the unit holding it. An address-taking reference to a data object's start that is
   also the previous object's end (``lea arr+N(%rip)``, a loop bound) could mean
   either: glue the two — unless it is an x86-64 ``lea`` whose register, followed in
   straight-line code until overwritten, is only the base of memory operands with a
   displacement >= 0 and a zero-extended index (``upward``). Every byte read through
   it then lies at or above the next object's start; reading one past the end of the
   previous object is undefined behaviour in C, so the address designates the next
   object. AArch64 code is not analysed: the glue stays. A jump-table entry whose
   target is not in the function that loads the table's address, or a PC-relative
   reference from data without a known base, or a relocation type not listed, keeps
   the section whole.
5. Relocations against named symbols stay as they are (the symbol moves with its
   unit); their target must still lie in that unit's group, else glue. A relocation
   field must not cross a unit boundary.
6. References no relocation and no instruction shows — label differences the
   assembler resolved (``.long h1 - table``) — are guarded by ``reach``'s rules:
   unreferenced entries, constants of objects no compiler is known to have made,
   unwind ranges.
7. Groups whose section name a linker would read specially (``.text.exit``,
   ``.text.foo_unlikely``) are glued to their neighbour.

What is assumed, not proved: that compiled code never addresses an object through
its neighbour (``lea arr-8(%rip)`` folded by the assembler into the previous
object's bytes); GCC and clang put such offsets in the addressing mode's displacement.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np
from elftools.elf.enums import ENUM_RELOC_TYPE_x64, ENUM_SH_TYPE_BASE

from elflayout import arch
from elflayout.errors import ElflayoutError
from elflayout.split import disasm, disasm_a64, dwarf, dwarf_line, dwo, dwarf_write, pairs, reach, upward
from elflayout.split.extents import SPLIT_PREFIX, STT, Unit, is_code, name_conflict, splittable, units
from elflayout.split.reader import ObjectFile, Section

R = ENUM_RELOC_TYPE_x64
SHT = ENUM_SH_TYPE_BASE
# x86-64 psABI types pyelftools does not name.
R_X86_64_GOTPCRELX = 41
R_X86_64_CODE_4_GOTPCRELX = 43
PCREL = {R["R_X86_64_PC32"], R["R_X86_64_PLT32"], R["R_X86_64_PC64"], R["R_X86_64_PC16"], R["R_X86_64_PC8"]}
ABSOLUTE = {R["R_X86_64_64"], R["R_X86_64_32"], R["R_X86_64_32S"], R["R_X86_64_16"], R["R_X86_64_8"],
            R["R_X86_64_GOTOFF64"]}
_W8 = ("R_X86_64_64", "R_X86_64_PC64", "R_X86_64_GOTOFF64", "R_X86_64_GOT64", "R_X86_64_GOTPCREL64",
       "R_X86_64_GOTPC64", "R_X86_64_GOTPLT64", "R_X86_64_PLTOFF64", "R_X86_64_DTPMOD64", "R_X86_64_DTPOFF64",
       "R_X86_64_TPOFF64", "R_X86_64_TLSDESC")
_W2 = ("R_X86_64_16", "R_X86_64_PC16")
_W1 = ("R_X86_64_8", "R_X86_64_PC8")
# Bytes a relocation of each type writes (psABI table "Relocation Types"); NONE and
# TLSDESC_CALL write nothing.
WIDTH = {R[n]: 8 for n in _W8} | {R[n]: 2 for n in _W2} | {R[n]: 1 for n in _W1}
WIDTH |= {R["R_X86_64_NONE"]: 0, R["R_X86_64_TLSDESC_CALL"]: 0}
WIDTH_DEFAULT = 4


def reloc_width(obj: ObjectFile, t: int) -> int:
    """Bytes a relocation of type ``t`` writes in ``obj``'s machine."""
    return arch.object_width(t) if obj.aarch64 else WIDTH.get(t, WIDTH_DEFAULT)


def covered_bytes(obj: ObjectFile, sec: Section) -> np.ndarray:
    """True at every byte of ``sec`` (plus 8 past its end) inside a relocation field."""
    covered = np.zeros(sec.size + 8, bool)
    ri = obj.rela_of.get(sec.index)
    if ri is not None:
        r = obj.relas[ri]
        for off, t in zip(r["r_offset"].tolist(), (r["r_info"] & 0xFFFFFFFF).tolist()):
            covered[off:off + reloc_width(obj, t)] = True
    return covered
# A data pointer this close before the next object may be that object minus a constant
# (CPython's obmalloc initialises ``usedpools`` with ``&usedpools[2k] - 16``); the two
# objects are kept together rather than guessed apart.
NEAR_NEXT = 64


@dataclass
class NewReloc:
    """A relocation added for an assembler-resolved reference (step 3)."""

    field: int       # offset in the source section
    target_unit: int
    addend_in_unit: int   # addend relative to the target unit's start
    rtype: int = 0        # AArch64: its type (x86-64: R_X86_64_PC32)


@dataclass
class SectionPlan:
    sec: Section
    units: list[Unit]
    glue: list[bool]                        # glue[k]: units k and k+1 share a section
    reasons: list[tuple[int, int, str, str]] = field(default_factory=list)   # (first, last, why, rule)
    whole: str | None = None                # why the section is kept whole
    new_relocs: list[NewReloc] = field(default_factory=list)
    groups: list[tuple[int, int]] = field(default_factory=list)   # [first unit, last unit]
    rename: bool = False                    # a single named unit: only the section's name changes
    reached: set[int] = field(default_factory=set)   # offsets some reference designates (reach.py rule 1)
    bases: set[int] = field(default_factory=set)     # offsets whose address is materialised (rule 2)
    fdes: list[tuple[int, int]] = field(default_factory=list)   # unwind entries' [begin, end) (rule 3)

    def glue_range(self, a: int, b: int, reason: str, rule: str = "neighbours") -> None:
        a, b = min(a, b), max(a, b)
        if a == b:
            return
        if not all(self.glue[a:b]):
            self.reasons.append((a, b, reason, rule))
        for k in range(a, b):
            self.glue[k] = True

    def keep_whole(self, reason: str) -> None:
        if self.whole is None:
            self.whole = reason

    def unit_at(self, off: int) -> int:
        """Unit holding section offset ``off`` (the end of the section counts as the last unit)."""
        return max(0, bisect_right(self._starts, off) - 1)

    def finish_groups(self) -> None:
        if self.whole is not None:
            self.groups = [(0, len(self.units) - 1)]
            return
        self.groups, first = [], 0
        for k in range(len(self.units)):
            if k == len(self.units) - 1 or not self.glue[k]:
                self.groups.append((first, k))
                first = k + 1

    def __post_init__(self):
        self._starts = [u.start for u in self.units]


@dataclass
class RelocFix:
    """Section-symbol relocation ``rela[j]`` of RELA section ``rela_index`` now goes to unit ``unit`` of ``sec``."""

    rela_index: int
    j: int
    sec: int
    unit: int


@dataclass
class Plan:
    obj: ObjectFile
    sections: dict[int, SectionPlan]        # split candidates by section index
    fixes: list[RelocFix]
    unchanged: str | None = None            # why the object is copied as it is
    debug: object = None                    # dwarf_write.Debug: debug sections to rewrite
    dwo_file: tuple[str, bytes] | None = None   # (path, bytes) of a .dwo written again (by the writer)

    @property
    def splits(self) -> dict[int, SectionPlan]:
        """Sections rewritten: split in several, or one function/object renamed ``.text.<symbol>``."""
        return {i: sp for i, sp in self.sections.items() if len(sp.groups) > 1 or sp.rename}


def make_plan(obj: ObjectFile) -> Plan:
    cands: dict[int, SectionPlan] = {}
    for sec in obj.sections:
        if splittable(obj, sec) is None:
            us = units(obj, sec)
            if len(us) > 1:
                cands[sec.index] = SectionPlan(sec, us, [False] * (len(us) - 1))
            elif us[0].name and sec.size and name_conflict(sec.name, us[0].name) is None:
                # One function in .text: named .text.<function> as -ffunction-sections would,
                # so gold's and GNU ld's ordering files can name it.
                cands[sec.index] = SectionPlan(sec, us, [], rename=True)
    if not cands or obj.symtab_index == 0:
        return Plan(obj, {}, [], unchanged="nothing to split (already one section per function and object)")
    _link_order_users(obj, cands)
    debug = _debug_rules(obj, cands)
    code = _disassemble(obj, cands)
    for i, sp in cands.items():
        if i in code:
            _code_rules(sp, code[i])
    fixes = _relocation_rules(obj, cands, code, debug.facts.end_fields if debug else set())
    if obj.aarch64:
        pairs.page_pairs(obj, cands, code)
    _reach_rules(obj, cands, code)
    for sp in cands.values():
        _name_rules(sp)
    for sp in cands.values():
        sp.rename = sp.rename and sp.whole is None
    if all(len(sp.groups) <= 1 and not sp.rename for sp in cands.values()):
        return Plan(obj, cands, [], unchanged="every split section had to stay whole")
    return Plan(obj, cands, fixes, debug=debug)


def _link_order_users(obj: ObjectFile, cands: dict[int, SectionPlan]) -> None:
    from elftools.elf.constants import SH_FLAGS
    for s in obj.sections:
        if s.flags & SH_FLAGS.SHF_LINK_ORDER and s.link in cands:
            cands[s.link].keep_whole(f"{s.name} is link-ordered to it")


DEBUG_HINT = "compile with -ffunction-sections -fdata-sections to keep -g, or strip it, objcopy --strip-debug, to split"
ONE_RANGE = (".debug_info describes it as one range (the compile unit's DW_AT_low_pc/DW_AT_high_pc), which "
             "cannot become a range list: {why}; " + DEBUG_HINT)


def _debug_rules(obj: ObjectFile, cands: dict[int, SectionPlan]):
    """Sections the debug information refers to: kept whole where ``dwarf`` cannot
    describe them split (with the reason), units glued where an entry must stay in one
    section. Returns what the writer needs to rewrite the debug sections, or None."""
    users = set()
    for ri, r in obj.relas.items():
        d = obj.sections[obj.sections[ri].info]
        if d.name.startswith((".debug_", ".zdebug_")) and len(r):
            users |= set(obj.symbols["st_shndx"][(r["r_info"] >> 32).astype(np.int64)].tolist()) & set(cands)
    if not users:
        return None
    try:
        f = dwarf.facts(obj, set(cands))
        for iv in f.cu_ranges:
            sp = cands[iv.sec]
            if f.unit is None and sp.unit_at(iv.start) != sp.unit_at(max(iv.start, iv.end - 1)):
                sp.keep_whole(ONE_RANGE.format(why=f.unit_refused or "not a unit DIE"))
        split = {i for i in cands if cands[i].whole is None}
        f = dwarf.facts(obj, split)
        dwarf.lists(obj, f, split)
        lines = dwarf_line.parse(obj.sections[f.secs[".debug_line"]].data, f.relocs[".debug_line"], split)
        _line_references(f, lines)
        dwarf.check_bounds(obj, f, split, dwarf.aranges(obj, f, split))
    except dwarf.Damaged as e:
        what = "" if isinstance(e, dwo.Unreadable) else "damaged debug information: "
        raise ElflayoutError(f"{obj.name}: {what}{e}") from None
    except (dwarf.Refused, IndexError, ValueError) as e:
        why = e if isinstance(e, dwarf.Refused) else f"damaged ({type(e).__name__})"
        for i in users:
            cands[i].keep_whole(f"DWARF debug information: {why}; {DEBUG_HINT}")
        return None
    for iv in [*f.locs, *(iv for iv, _ in f.high_pcs)]:
        # (a DWARF 5 offset pair away from its base's new section is written again
        # with its own relocated start: only its own bytes must stay together)
        _glue_interval(cands, iv, iv.start if f.version == 5 and iv.entry != (0, 0) else iv.anchor_at, "DWARF")
    for iv, where in f.dwo_ivs:
        # (kept as it is in the .dwo: every range stays with its anchor; offset pairs from
        # a unit base that becomes a range list are written again with their own start)
        again = (f.unit is not None) if iv.unit else (f.dwo_rewrite and iv.entry != (0, 0))
        _glue_interval(cands, iv, iv.start if again else iv.anchor_at, f"the {where}")
    _return_addresses(cands, f.returns)
    return dwarf_write.Debug(f, lines)


def _glue_interval(cands: dict[int, SectionPlan], iv, anchor: int, who: str) -> None:
    """Units from ``anchor`` to the end of interval ``iv`` kept together."""
    sp = cands.get(iv.sec)
    if sp is None or sp.whole is not None:
        return
    a = min(sp.unit_at(anchor), sp.unit_at(iv.start))
    b = sp.unit_at(max(iv.start, iv.end - 1))
    if a != b:
        sp.glue_range(a, b, f"{who} describes {sp.sec.name}+{iv.start:#x}..{iv.end:#x} from "
                            f"{sp.units[a].name} as one range")


def _return_addresses(cands: dict[int, SectionPlan], returns: list) -> None:
    """A call's return address (DW_AT_call_return_pc) is the end of the call: when the call
    ends its function (a call that does not return), that address is also the next
    unit's start and would follow the next unit to wherever it goes."""
    for r in returns:
        sp = cands.get(r.sec)
        if sp is None or sp.whole is not None:
            continue
        k = sp.unit_at(r.addend)
        if k > 0 and sp.units[k].start == r.addend:
            sp.glue_range(k - 1, k, f"DWARF's return address of a call ending {sp.units[k - 1].name} is "
                                    f"{sp.units[k].name}'s start")


def _line_references(f, lines) -> None:
    """Relocations naming .debug_line must name a table's start (DW_AT_stmt_list), the
    only offsets the rewrite keeps."""
    starts = {u.offset for u in lines}
    line = f.secs[".debug_line"]
    for name, rel in f.relocs.items():
        for off, r in rel.items():
            if r.sec == line and r.addend not in starts:
                raise dwarf.Refused(f"{name}+{off:#x} points into .debug_line+{r.addend:#x}, not a table's start")


def _disassemble(obj: ObjectFile, cands: dict[int, SectionPlan]) -> dict[int, disasm.Code]:
    out = {}
    func = STT["STT_FUNC"]
    for sec in obj.sections:
        if not is_code(sec) or sec.nobits or sec.size == 0:
            continue
        covered = covered_bytes(obj, sec)
        if obj.aarch64:
            out[sec.index] = disasm_a64.analyse(sec.data, covered, mapped_code(obj, sec))
            continue
        syms = obj.symbols
        restarts = syms["st_value"][(syms["st_shndx"] == sec.index) & ((syms["st_info"] & 0xF) == func)]
        out[sec.index] = disasm.analyse(sec.data, covered, restarts.tolist())
    return out


def mapped_code(obj: ObjectFile, sec: Section) -> list[tuple[int, int]] | None:
    """The code stretches of an AArch64 section by its ``$x``/``$d`` mapping symbols,
    None when it has none."""
    here = np.flatnonzero(obj.symbols["st_shndx"] == sec.index).tolist()
    marks = [(int(obj.symbols["st_value"][i]), kind) for i in here for kind in "xd"
             if disasm_a64.is_mapping(obj.sym_names[i], kind)]
    return disasm_a64.code_ranges(marks, sec.size) if marks else None


def _code_rules(sp: SectionPlan, code: disasm.Code) -> None:
    """Steps 2 and 3."""
    us, name = sp.units, sp.sec.name
    if code.undecodable:
        k = code.undecodable[0]
        sp.keep_whole(f"{name} has no $x/$d mapping symbols: code and data cannot be told apart"
                      if code.machine == "AArch64" and not len(code.starts) else
                      f"{name}+{k:#x}: adrp resolved by the assembler (a page of the section itself)"
                      if code.machine == "AArch64" and code.insn_at(k) >= 0 else
                      f"bytes at {name}+{k:#x} cannot be decoded as {code.machine} code")
        return
    for k in range(len(us) - 1):
        last = code.last_real(us[k].start, us[k].end)
        if last is not None and last not in code.terminators:
            sp.glue_range(k, k + 1, f"{us[k].name} falls through into {us[k + 1].name} (ends with {last})")
        i = code.insn_at(us[k].end - 1)
        if i >= 0 and code.ends[i] > us[k].end:
            sp.glue_range(k, k + 1, f"an instruction crosses from {us[k].name} into {us[k + 1].name}")
    for ref in code.internal:
        if not 0 <= ref.target <= sp.sec.size:
            sp.keep_whole(f"{name}+{ref.insn:#x} refers outside the section without a relocation")
            return
        u, v = sp.unit_at(ref.insn), sp.unit_at(ref.target)
        sp.reached.add(ref.target)
        if not ref.branch or (ref.target == ref.end and code.mnemonics[code.insn_at(ref.insn)] == "call"):
            sp.bases.add(ref.target)    # an operand's address, or a call pushing its own end
        if u == v:
            continue
        if ref.target != us[v].start:
            sp.glue_range(u, v, f"{us[u].name} refers into the middle of {us[v].name} "
                                f"({name}+{ref.insn:#x} -> {us[v].name}+{ref.target - us[v].start:#x})")
        elif ref.width != 4:
            sp.glue_range(u, v, f"{us[u].name} reaches {us[v].name} with an {8 * ref.width}-bit displacement")
        elif ref.rtype and not arch.AARCH64_OBJECT[ref.rtype].veneer:
            sp.glue_range(u, v, f"{us[u].name} reaches {us[v].name} with {ref.mnemonic} ({name}+{ref.insn:#x}): "
                                f"{_no_veneer(ref.rtype)}")
        else:
            sp.new_relocs.append(NewReloc(ref.field, v, (ref.target - us[v].start) - (ref.end - ref.field),
                                          ref.rtype))


def _no_veneer(rtype: int) -> str:
    o = arch.AARCH64_OBJECT[rtype]
    return (f"{o.name} reaches ±{o.reach >> 10} KiB and linkers add no veneer for it, so another order "
            "could put them out of reach")


def _relocation_rules(obj: ObjectFile, cands: dict[int, SectionPlan], code: dict[int, disasm.Code],
                      ends: set[tuple[int, int]]) -> list[RelocFix]:
    """Steps 4 and 5. ``ends``: DWARF 4 end addresses (section, offset) ``dwarf_write``
    retargets to the new section of their start."""
    info, shndx, values = obj.symbols["st_info"], obj.symbols["st_shndx"], obj.symbols["st_value"]
    sect = STT["STT_SECTION"]
    secsym = {i: int(shndx[i]) for i in range(1, len(obj.symbols)) if (info[i] & 0xF) == sect and shndx[i] in cands}
    eh = {s.index for s in obj.sections if s.name == ".eh_frame"}
    decoded, bases = _decode_relocations(obj, code)
    fixes, labels = [], {}
    for ri, d, offs, syms, types, adds in decoded:
        here = cands.get(d.index)
        c = code.get(d.index)
        for j, (off, s, t, a) in enumerate(zip(offs, syms, types, adds)):
            if here is not None:
                k = here.unit_at(off)
                if off + reloc_width(obj, t) > here.units[k].end and k + 1 < len(here.units):
                    here.glue_range(k, k + 1, f"a relocation at {d.name}+{off:#x} crosses into "
                                              f"{here.units[k + 1].name}")
            if (d.index, off) in ends:
                continue
            tsec = secsym.get(s)
            named = tsec is None and shndx[s] in cands and (info[s] & 0xF) != sect
            if tsec is None and not named:
                continue
            sp = cands[int(shndx[s])]
            sv = 0 if tsec is not None else int(values[s])
            if obj.aarch64:
                got = _a64_target(obj, sp, d, off, t, sv, a, named, d.index in eh)
            else:
                got = _x86_target(sp, d, off, t, sv, a, named, c, d.index in eh, bases, code)
            if got is None:
                continue
            target, addr_taking, branch = got
            if not 0 <= target <= sp.sec.size:
                sp.keep_whole(f"relocation at {d.name}+{off:#x} designates {sp.sec.name}{target:+#x}, outside it")
                continue
            _note_reach(sp, d, target, branch)
            v = sp.unit_at(target)
            us = sp.units
            if named:
                u = sp.unit_at(sv)
                if not (us[u].start <= target <= us[u].end):
                    sp.glue_range(u, v, f"{d.name}+{off:#x} reaches {us[v].name} through {obj.sym_names[s]}")
                continue
            if addr_taking and not is_code(sp.sec):
                if v > 0 and target == us[v].start and us[v - 1].symend == target \
                        and not _lea_designates_next(obj, d, c, off, code, bases, labels):
                    sp.glue_range(v - 1, v, f"{d.name}+{off:#x} points at the end of {us[v - 1].name} "
                                            f"or the start of {us[v].name}")
                elif v + 1 < len(us) and target != us[v].start and us[v + 1].start - target <= NEAR_NEXT:
                    sp.glue_range(v, v + 1, f"{d.name}+{off:#x} points {us[v + 1].start - target} bytes before "
                                            f"{us[v + 1].name}: maybe a negative offset from it")
            fixes.append(RelocFix(ri, j, sp.sec.index, v))
    for sp in cands.values():
        sp.finish_groups()
    return fixes


def _lea_designates_next(obj: ObjectFile, d: Section, c: disasm.Code | None, off: int,
                         code: dict[int, disasm.Code], bases: dict, labels: dict[int, set[int] | None]) -> bool:
    """Whether the reference at ``d+off`` is a lea ``upward`` proves designates the object
    starting at its target rather than the end of the one before. ``labels``: cache of
    ``_code_labels`` by code section. AArch64 code is not analysed: the glue stays."""
    k = c.insn_at(off) if c is not None and not obj.aarch64 else -1
    if k < 0 or c.mnemonics[k] != "lea":
        return False
    if d.index not in labels:
        labels[d.index] = _code_labels(obj, d.index, code, bases)
    if labels[d.index] is None:
        return False
    # Landing pads are reached through .gcc_except_table's label differences, which no
    # relocation shows: then nothing before the lea is known to run right before it.
    landing_pads = any(s.name.startswith(".gcc_except_table") for s in obj.sections)
    return upward.reads_upward(d.data, c, k, labels[d.index], cross_lea=not landing_pads)


def _code_labels(obj: ObjectFile, sec: int, code: dict[int, disasm.Code], bases: dict) -> set[int] | None:
    """Offsets of code section ``sec`` that control may reach other than by falling
    through, over-approximated: symbol starts, the targets of references the assembler
    resolved, and every place a relocation in an allocated section designates there
    (None when one cannot be told)."""
    from elftools.elf.constants import SH_FLAGS
    values, shndx = obj.symbols["st_value"], obj.symbols["st_shndx"]
    labels = set(values[shndx == sec].tolist()) | {ref.target for ref in code[sec].internal}
    for ri, r in obj.relas.items():
        d = obj.sections[obj.sections[ri].info]
        syms = (r["r_info"] >> 32).astype(np.int64)
        hits = np.flatnonzero(shndx[syms] == sec).tolist()
        if not hits or not d.flags & SH_FLAGS.SHF_ALLOC:
            continue
        dc = code.get(d.index)
        for j in hits:
            off, t = int(r["r_offset"][j]), int(r["r_info"][j] & 0xFFFFFFFF)
            sa = int(values[syms[j]]) + int(r["r_addend"][j])
            if t not in PCREL or d.name == ".eh_frame":
                labels.add(sa)
                continue
            if dc is not None:
                k = dc.insn_at(off)
                if k < 0:
                    return None
                labels.add(sa + int(dc.ends[k]) - off)
                continue
            base = _table_base(bases.get(d.index, []), off)
            if base is None:
                return None
            labels.add(sa - (off - base[0]))
    return labels


def _x86_target(sp, d, off, t, sv, a, named, c, in_eh, bases, code) -> tuple[int, bool, bool] | None:
    """(target, address-taking, branch) of an x86-64 relocation, or None when there is
    nothing to follow (a named GOT/TLS/PLT reference) or the section had to stay whole."""
    if t in ABSOLUTE:
        return sv + a, True, False
    if t in PCREL:
        if c is not None:
            k = c.insn_at(off)
            if k < 0:
                sp.keep_whole(f"relocation at {d.name}+{off:#x} is outside any instruction")
                return None
            return sv + a + int(c.ends[k]) - off, c.mnemonics[k] == "lea", disasm.is_branch(c.mnemonics[k])
        if in_eh:
            return sv + a, True, False
        target = _table_target(sp, d, off, sv + a, bases.get(d.index, []), code)
        return None if target is None else (target, True, False)
    if named:
        _note_reach(sp, d, sv, False)
        return None     # GOT/TLS/PLT relocations against a named symbol: the symbol moves with its unit
    sp.keep_whole(f"relocation type {t} at {d.name}+{off:#x} against the section")
    return None


def _a64_target(obj, sp, d, off, t, sv, a, named, in_eh) -> tuple[int, bool, bool] | None:
    """As ``_x86_target`` for AArch64: every listed type designates S + A. A reference
    whose field reaches less than the whole library without a veneer (b.cond, cbz,
    tbz, adr, literal ldr) keeps its own unit and its target's together."""
    o, sa = arch.AARCH64_OBJECT.get(t), sv + a
    if o is None:
        if named:
            _note_reach(sp, d, sv, False)
            return None     # GOT/TLS relocations against a named symbol: the symbol moves with its unit
        sp.keep_whole(f"relocation {arch.reloc_name(obj.machine, 64, t)} at {d.name}+{off:#x} against the section")
        return None
    if o.form == arch.OBJ_PCREL and not in_eh and not named:
        sp.keep_whole(f"PC-relative word at {d.name}+{off:#x} against the section: the base it counts from "
                      "is not known")
        return None
    if o.reach and not o.veneer and d.index == sp.sec.index and 0 <= sa <= sp.sec.size:
        u, v = sp.unit_at(off), sp.unit_at(sa)
        if u != v:
            sp.glue_range(u, v, f"{d.name}+{off:#x} in {sp.units[u].name} reaches {sp.units[v].name} with "
                                f"{o.name}: {_no_veneer(t)}")
    if o.form == arch.OBJ_DATA and t in pairs.ADDRESS_INSNS and not named and not is_code(sp.sec):
        pairs.anchor_reach(sp, sa, f"{d.name}+{off:#x}")
    return sa, o.form == arch.OBJ_DATA, o.form == arch.OBJ_BRANCH


def _note_reach(sp: SectionPlan, d: Section, target: int, branch: bool) -> None:
    if not reach.describes_only(d.name):
        sp.reached.add(target)
        if not branch:
            sp.bases.add(target)


def _reach_rules(obj: ObjectFile, cands: dict[int, SectionPlan], code: dict[int, disasm.Code]) -> None:
    """Rules against differences the assembler resolved (``reach``): unreferenced
    entries, constants of hand-written objects, unwind ranges."""
    info, shndx, values = obj.symbols["st_info"], obj.symbols["st_shndx"], obj.symbols["st_value"]
    for ri, r in obj.relas.items():
        eh = obj.sections[ri].info
        if obj.sections[eh].name != ".eh_frame" or not len(r):
            continue
        fdes = reach.fde_ranges(obj, eh)
        for off, s, a in zip(r["r_offset"].tolist(), (r["r_info"] >> 32).tolist(), r["r_addend"].tolist()):
            sp = cands.get(int(shndx[s]))
            if sp is not None and off in fdes and sp.whole is None:
                sv = 0 if (info[s] & 0xF) == STT["STT_SECTION"] else int(values[s])
                sp.fdes.append((sv + a, sv + a + fdes[off]))
                reach.unwind_ranges(sp, sv + a, fdes[off])
    coded = [sp for i, sp in cands.items() if i in code and sp.whole is None and len(sp.units) > 1]
    for sp in coded:
        reach.unreferenced_entries(obj, sp)
    if coded and not reach.compiled(obj):
        _constant_rules(obj, coded, code)
    for sp in cands.values():
        sp.finish_groups()


def _constant_rules(obj: ObjectFile, coded: list[SectionPlan], code: dict[int, disasm.Code]) -> None:
    """Rule 2 of ``reach`` for an object no compiler is known to have made: every
    constant in sections without declared extents, tables in sections with them."""
    understood = {i: [(ref.field, ref.width) for ref in c.internal] for i, c in code.items()}
    all_words = list(reach.words(obj, understood))
    consts = None
    for sp in coded:
        if reach.declared(obj, sp):
            reach.table_reach(sp, all_words)
            continue
        if consts is None:
            consts = reach.constants(obj, max(p.sec.size for p in coded), understood, all_words)
        reach.constant_reach(sp, consts)


def _decode_relocations(obj: ObjectFile, code: dict[int, disasm.Code]) -> tuple[list, dict]:
    """Every RELA section as lists (offsets, symbols, types, addends), and the table bases:
    offsets in data sections whose address code loads with lea (step 4)."""
    info, shndx = obj.symbols["st_info"], obj.symbols["st_shndx"]
    sect = STT["STT_SECTION"]
    bases: dict[int, list[tuple[int, int, int]]] = {}   # data sec -> [(offset, code sec, insn offset)]
    decoded = []
    for ri, r in obj.relas.items():
        d = obj.sections[obj.sections[ri].info]
        offs, syms = r["r_offset"].tolist(), (r["r_info"] >> 32).tolist()
        types, adds = (r["r_info"] & 0xFFFFFFFF).tolist(), r["r_addend"].tolist()
        decoded.append((ri, d, offs, syms, types, adds))
        if d.index not in code:
            continue
        c = code[d.index]
        for off, s, t, a in zip(offs, syms, types, adds):
            if t not in PCREL or (info[s] & 0xF) != sect:
                continue
            k = c.insn_at(off)
            if k >= 0 and c.mnemonics[k] == "lea":
                bases.setdefault(int(shndx[s]), []).append((a + int(c.ends[k]) - off, d.index, int(c.starts[k])))
    for v in bases.values():
        v.sort()
    return decoded, bases


def _table_target(sp: SectionPlan, d: Section, off: int, sa: int, bases, code) -> int | None:
    """Target of a PC-relative entry at ``d+off`` (``.long .L5-.L4``): the table base is the
    nearest lea-loaded offset at or before it; its entries must land in the function that
    loads it."""
    found = _table_base(bases, off)
    if found is None:
        sp.keep_whole(f"PC-relative reference from {d.name}+{off:#x} with no table base found")
        return None
    base, csec, insn = found
    target = sa - (off - base)
    if csec != sp.sec.index:
        sp.keep_whole(f"jump table at {d.name}+{base:#x} is loaded from another section")
        return None
    if 0 <= target <= sp.sec.size:
        u, v = sp.unit_at(insn), sp.unit_at(target)
        if u != v:
            sp.glue_range(u, v, f"jump table {d.name}+{base:#x} of {sp.units[u].name} reaches {sp.units[v].name}")
    return target


def _table_base(bases: list[tuple[int, int, int]], off: int) -> tuple[int, int, int] | None:
    """The nearest lea-loaded (offset, code section, instruction) at or before ``off``."""
    k = bisect_right(bases, (off, 1 << 62, 1 << 62)) - 1
    return bases[k] if k >= 0 else None


def _name_rules(sp: SectionPlan) -> None:
    """Step 7 (repeated: a glue can change a group's name)."""
    for _ in range(len(sp.units)):
        changed = False
        for a, _b in sp.groups:
            why = name_conflict(sp.sec.name, sp.units[a].name)
            if why and len(sp.groups) > 1:
                if a > 0:
                    sp.glue_range(a - 1, a, why)
                else:
                    sp.glue_range(a, a + 1, why)
                changed = True
        sp.finish_groups()
        if not changed:
            return


__all__ = ["Plan", "SectionPlan", "make_plan", "SPLIT_PREFIX"]
