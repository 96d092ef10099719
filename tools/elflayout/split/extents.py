"""Which sections are split, and the extent of every function and data object in them.

A *unit* starts at each function (``STT_FUNC``, code) or data object (``STT_OBJECT``,
data) symbol of the section, locals included, and runs to the next one: bytes between
symbols (alignment padding, unnamed code, jump tables, string constants without a
symbol) stay with the preceding symbol; bytes before the first symbol go with the
first. ``symend`` is the end of the unit's named bytes (the largest ``st_value +
st_size`` of its symbols), needed to recognise a pointer one past an object's end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elftools.elf.constants import SH_FLAGS
from elftools.elf.enums import ENUM_ST_INFO_BIND, ENUM_ST_INFO_TYPE

from elflayout.split.reader import ObjectFile, Section

STT = ENUM_ST_INFO_TYPE
STB = ENUM_ST_INFO_BIND

# Section -> prefix of its per-symbol sections, as GCC names them under
# -ffunction-sections -fdata-sections (".text.hot" keeps its prefix so GNU ld's default
# script still groups the hot functions).
SPLIT_PREFIX = {
    ".text": ".text.", ".text.hot": ".text.hot.", ".text.unlikely": ".text.unlikely.",
    ".text.startup": ".text.startup.", ".data": ".data.", ".data.rel": ".data.rel.",
    ".data.rel.local": ".data.rel.local.", ".data.rel.ro": ".data.rel.ro.",
    ".data.rel.ro.local": ".data.rel.ro.local.", ".rodata": ".rodata.", ".bss": ".bss.",
}
# Input-section names with a meaning of their own in GNU ld's default script or lld:
# a function whose section would be called e.g. ".text.exit" or ".text.foo_unlikely"
# would be placed elsewhere by the linker, so it is kept with its neighbour instead.
_TEXT_SPECIAL = ("unlikely", "exit", "startup", "hot", "sorted", "split")   # GNU ld 2.40; lld's -z keep-text-section-prefix
# gold moves every input section whose name merely *starts* with one of these to the
# front of .text (Layout::special_ordering_of_input_section: a plain prefix test), so
# ".text.exit_handler" goes with ".text.exit".
_GOLD_TEXT_PREFIXES = ("unlikely", "exit", "startup", "hot", "sorted")
NOT_SPLIT_FLAGS = SH_FLAGS.SHF_GROUP | SH_FLAGS.SHF_TLS | SH_FLAGS.SHF_MERGE | SH_FLAGS.SHF_LINK_ORDER


@dataclass
class Unit:
    start: int
    end: int
    symend: int
    name: str                     # the symbol naming its section
    symbols: list[int] = field(default_factory=list)   # symbol indexes starting here


def splittable(obj: ObjectFile, sec: Section) -> str | None:
    """None if ``sec`` may be split, else why not."""
    if sec.name not in SPLIT_PREFIX:
        return "not a section that -ffunction-sections/-fdata-sections would split"
    if sec.flags & NOT_SPLIT_FLAGS:
        return "section in a group, TLS, mergeable or link-ordered"
    return None


def is_code(sec: Section) -> bool:
    return bool(sec.flags & SH_FLAGS.SHF_EXECINSTR)


def units(obj: ObjectFile, sec: Section) -> list[Unit]:
    """Units of ``sec`` in offset order (one unit when fewer than two symbols start in it)."""
    want = STT["STT_FUNC"] if is_code(sec) else STT["STT_OBJECT"]
    info = obj.symbols["st_info"]
    shndx = obj.symbols["st_shndx"]
    value = obj.symbols["st_value"]
    size = obj.symbols["st_size"]
    by_start: dict[int, list[int]] = {}
    ends: dict[int, int] = {}
    for i in range(1, len(obj.symbols)):
        if shndx[i] != sec.index or (info[i] & 0xF) != want:
            continue
        v = int(value[i])
        if v >= sec.size:
            continue
        by_start.setdefault(v, []).append(i)
        ends[v] = max(ends.get(v, v), v + int(size[i]))
    starts = sorted(by_start)
    if not starts:
        return [Unit(0, sec.size, 0, "", [])]
    if starts[0] != 0:
        # Bytes before the first symbol belong to the first unit.
        by_start[0] = by_start.pop(starts[0])
        ends[0] = ends.pop(starts[0])
        starts[0] = 0
    out = []
    for k, s in enumerate(starts):
        e = starts[k + 1] if k + 1 < len(starts) else sec.size
        syms = by_start[s]
        out.append(Unit(s, e, ends[s], _section_name_symbol(obj, syms), syms))
    return out


def _section_name_symbol(obj: ObjectFile, syms: list[int]) -> str:
    """GCC names the section after the function's assembler name: prefer a global or
    weak symbol over a local alias (``foo.localalias``)."""
    binds = [(obj.symbols["st_info"][i] >> 4) for i in syms]
    for i, b in zip(syms, binds):
        if b in (STB["STB_GLOBAL"], STB["STB_WEAK"]):
            return obj.sym_names[i]
    named = [i for i in syms if obj.sym_names[i] and not obj.sym_names[i].endswith(".localalias")]
    return obj.sym_names[(named or syms)[0]]


def name_conflict(secname: str, sym: str) -> str | None:
    """Why ``SPLIT_PREFIX[secname] + sym`` would be placed differently by a linker, or None."""
    if not sym:
        return "no symbol to name its section"
    new = SPLIT_PREFIX[secname] + sym
    if secname == ".text":
        for w in _TEXT_SPECIAL:
            if sym == w or sym.startswith(w + ".") or (w == "unlikely" and sym.endswith("_unlikely")):
                return f"section name {new} has a meaning of its own to GNU ld/lld"
        for w in _GOLD_TEXT_PREFIXES:
            if sym.startswith(w):
                return f"section name {new} starts with .text.{w}, which gold places apart"
    for other in SPLIT_PREFIX:
        if len(other) > len(secname) and (new == other or new.startswith(other + ".")):
            return f"section name {new} would be read as {other}"
    return None
