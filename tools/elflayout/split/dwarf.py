"""DWARF of an object to split: what in ``.debug_*`` designates a place in a split
section, and whether each such place still can be described once the section is split.

Split rewrites what gcc 12 writes with ``-g`` (DWARF 5) when a compile unit already
spans several code sections (``.text`` and ``.text.startup``/``.text.unlikely``): every
code address is then a relocation (section symbol + addend), which ``plan`` retargets
like any other. What no relocation follows, and how it is handled:

- ``.debug_line``: one sequence per section with addresses advanced by constants. The
  sequences of a split section are re-encoded, one per new section (``dwarf_write``).
- a range list entry (``DW_RLE_start_length``, or ``DW_RLE_offset_pair`` after a
  relocated ``DW_RLE_base_address``) covering several new sections: the list is
  written again as one ``DW_RLE_start_length`` per new section (``dwarf_write``).
- ``.debug_aranges``: one entry per new section (``dwarf_write``).
- ``DW_AT_high_pc`` as a constant and location list entries: their range must stay in
  the new section of their start, else the units they cover are glued.

- a unit whose only range is ``DW_AT_low_pc``/``DW_AT_high_pc`` over the split
  section (gcc's output for a unit with all code in ``.text``): its unit DIE gets
  ``DW_AT_ranges`` in the same bytes (``Unit``), its range and location list entries
  that are offsets from the unit's base address become ``DW_RLE_start_length`` /
  ``DW_LLE_start_length`` with a relocation (``dwarf_write``). An object without a range
  list section gets one from the writer (``Unit.new_section``).

DWARF 4 (``-gdwarf-4``) the same way: line tables of version 4, ``.debug_ranges`` lists
spanning new sections written again as relocated address pairs per piece, every
relocated end address of a ``.debug_ranges`` or ``.debug_loc`` pair (which ``plan``
leaves alone: it may name the next section's start) relocated against the new section
of its start, and a one-range unit's list in ``.debug_ranges``, its lists' pairs of
offsets from the unit's base turned into relocated address pairs in place (``dwarf_write``).

clang's DWARF 5 the same way through its indexes: every address is an entry of
``.debug_addr`` (one relocation each, retargeted by ``plan``) named by ``DW_FORM_addrx``,
``DW_RLE_startx_length``, ``DW_LLE_base_addressx`` etc.; lists named by
``DW_FORM_rnglistx``/``DW_FORM_loclistx`` are found through their table's offset array,
and a list written again gets its array slot pointed at the new copy. A converted unit's
``DW_AT_low_pc`` names a new ``.debug_addr`` entry holding 0, in the bytes of its index
(when they can name it; else it keeps naming the first function's start, a base no list
entry uses any more).

A ``-gsplit-dwarf`` skeleton unit the same way, its ``.dwo`` left as it is: what the
``.dwo`` describes from an address must stay in that address's new section (``dwo``).

Everything else is refused per section with the reason: DWARF versions other than 4 and 5, 64-bit
DWARF, a skeleton unit whose ``.dwo`` has offsets from the unit's base when that base
would have to become a range list, several units with indexed forms in one
object, and relocations from any other debug section. A damaged ``.debug_addr`` or an
index past its table is bad input (``Damaged``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from elftools.dwarf.dwarfinfo import DWARFInfo, DebugSectionDescriptor, DwarfConfig
from elftools.elf.enums import ENUM_RELOC_TYPE_x64

from elflayout.split.reader import ObjectFile

R_64 = ENUM_RELOC_TYPE_x64["R_X86_64_64"]
R_32 = ENUM_RELOC_TYPE_x64["R_X86_64_32"]
HANDLED = (".debug_info", ".debug_line", ".debug_aranges", ".debug_rnglists", ".debug_loclists", ".debug_ranges",
           ".debug_loc", ".debug_addr")
VERSIONS = (4, 5)
# DWARF 4 §2.17.3, §2.6.2: list sections by version, and the base selection entry's marker
RANGES = {4: ".debug_ranges", 5: ".debug_rnglists"}
LOCS = {4: ".debug_loc", 5: ".debug_loclists"}
BASE_SELECTION = 0xFFFFFFFFFFFFFFFF
# DWARF 5 §7.25 (range list entries), §7.29 (location list entries)
RLE = {"end_of_list": 0, "base_addressx": 1, "startx_endx": 2, "startx_length": 3, "offset_pair": 4,
       "base_address": 5, "start_end": 6, "start_length": 7}
LLE = {"end_of_list": 0, "base_addressx": 1, "startx_endx": 2, "startx_length": 3, "offset_pair": 4,
       "default_location": 5, "base_address": 6, "start_end": 7, "start_length": 8, "GNU_view_pair": 9}
# DWARF 5 §7.5.6: bytes of each fixed-size index form (0: ULEB128)
ADDRX_FORMS = {"DW_FORM_addrx": 0, "DW_FORM_addrx1": 1, "DW_FORM_addrx2": 2, "DW_FORM_addrx3": 3,
               "DW_FORM_addrx4": 4}
LISTX_FORMS = {"DW_FORM_rnglistx": ".debug_rnglists", "DW_FORM_loclistx": ".debug_loclists"}
# DWARF 5 §3.1.1: where each unit's indexes start, and the section they index
BASES = {"DW_AT_addr_base": ".debug_addr", "DW_AT_rnglists_base": ".debug_rnglists",
         "DW_AT_loclists_base": ".debug_loclists"}
ADDR_HEADER = 8         # DWARF 5 §7.27: unit_length, version, address_size, segment_selector_size
LIST_HEADER = 12        # §7.28/§7.29: ..., offset_entry_count


class Refused(Exception):
    """The debug information cannot be kept correct: the message says why."""


class Damaged(Refused):
    """The debug information contradicts itself (an index past its table): bad input."""


def uleb(b: bytes, p: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if p >= len(b):
            raise Refused("a LEB128 number runs past the end of its section")
        x = b[p]
        p += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, p


def sleb(b: bytes, p: int) -> tuple[int, int]:
    start = p
    v, p = uleb(b, p)
    bits = 7 * (p - start)
    return (v - (1 << bits) if v >> (bits - 1) & 1 else v), p


def enc_uleb(v: int) -> bytes:
    out = bytearray()
    while True:
        x = v & 0x7F
        v >>= 7
        out.append(x | (0x80 if v else 0))
        if not v:
            return bytes(out)


def enc_sleb(v: int) -> bytes:
    out = bytearray()
    while True:
        x = v & 0x7F
        v >>= 7
        done = (v == 0 and not x & 0x40) or (v == -1 and x & 0x40)
        out.append(x | (0 if done else 0x80))
        if done:
            return bytes(out)


@dataclass
class Reloc:
    j: int          # row in the section's RELA table
    sym: int        # original symbol index
    typ: int
    sec: int        # section the symbol is in
    addend: int     # symbol value + addend: the offset designated in ``sec``


@dataclass
class Interval:
    """Code ``[start, end]`` of section ``sec`` one debug entry describes, and the
    relocation (offset in its debug section) the entry's address hangs on."""

    sec: int
    start: int
    end: int
    anchor: int     # offset of the relocated field the interval is relative to
    anchor_at: int  # offset in ``sec`` of that relocated address
    unit: bool = False              # an offset pair from the unit's base address
    entry: tuple[int, int] = (0, 0)  # list entry bytes up to its expression (kind, offsets)
    end_at: int = -1                # DWARF 4: offset of the relocated end address field
    reloc: Reloc | None = None      # the relocation its addresses hang on (None: the unit's base)


@dataclass
class Unit:
    """The unit DIE's ``DW_AT_low_pc``/``DW_AT_high_pc`` (offsets in ``.debug_info``) and
    its abbreviation (code, table offset in ``.debug_abbrev``), to turn into
    ``DW_AT_low_pc`` 0 and ``DW_AT_ranges`` of the same size."""

    low: int
    high: int
    high_size: int
    code: int
    table: int
    base: Reloc
    low_size: int = 8       # bytes of DW_AT_low_pc's field (0: its index kept, see dwarf._index_room)
    low_form: str = "DW_FORM_addr"     # or an index into .debug_addr (DW_FORM_addrx*)

    def new_section(self, f: "Facts") -> str | None:
        """The range list section the writer adds to hold the unit's list (the object has none)."""
        return None if RANGES[f.version] in f.secs else RANGES[f.version]


@dataclass
class RangeList:
    offset: int
    intervals: list[Interval]
    users: list[int]        # rows of .rela.debug_info pointing at the list


@dataclass
class Facts:
    """What the writer needs (all offsets are in the original sections)."""

    secs: dict[str, int] = field(default_factory=dict)          # debug section name -> index
    relocs: dict[str, dict[int, Reloc]] = field(default_factory=dict)   # by field offset
    rnglists: dict[int, RangeList] = field(default_factory=dict)
    loc_starts: set[int] = field(default_factory=set)             # location lists the DIEs use
    locs: list[Interval] = field(default_factory=list)            # their bounded entries
    high_pcs: list[tuple[Interval, str]] = field(default_factory=list)
    cu_ranges: list[Interval] = field(default_factory=list)       # low_pc/high_pc of a unit
    rnglists_last_table: int = -1                                 # offset of the last table's header
    loclists_last_table: int = -1
    loc_lists: dict[int, list[Interval]] = field(default_factory=dict)   # location lists by offset
    loc_views: dict[int, int] = field(default_factory=dict)     # location list -> its views (gcc's)
    unit: Unit | None = None        # the unit DIE whose one range may become a range list
    unit_refused: str = ""          # why it cannot (the split section then stays whole)
    base: Reloc | None = None       # the relocated DW_AT_low_pc of the (only) unit DIE
    cu_bases: list[int] = field(default_factory=list)              # section of each unit's base address
    version: int = 5
    end_fields: set[tuple[int, int]] = field(default_factory=set)  # DWARF 4 end addresses (section, offset)
    bases: dict[str, int] = field(default_factory=dict)     # .debug_addr/_rnglists/_loclists -> unit's base
    addr_count: int = 0             # entries of the unit's .debug_addr table
    slots: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # (section, list) -> array slots
    returns: list[Reloc] = field(default_factory=list)      # DW_AT_call_return_pc in split sections
    base_fields: set[tuple[int, int]] = field(default_factory=set)  # (section, offset) of DW_AT_*_base
    dwo_ivs: list[tuple[Interval, str]] = field(default_factory=list)  # ranges the .dwo describes, and where
    dwo_unit: str = ""              # why the skeleton's base must stay (its .dwo has offsets from it)
    dwo_name: str = ""              # the skeleton's .dwo (for messages)
    dwo_inside: bool = False        # its sections are in the object (-gsplit-dwarf=single)
    dwo_raw: bytes = b""            # the .dwo file (when not inside)
    dwo_secs: dict[str, bytes] = field(default_factory=dict)   # its .debug_*.dwo by name without .dwo
    dwo_lists: dict[tuple[str, int], list[Interval]] = field(default_factory=dict)   # its lists read
    dwo_slots: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # their offset array slots
    dwo_by_offset: set[tuple[str, int]] = field(default_factory=set)  # lists named by DW_FORM_sec_offset
    dwo_fix: bool = False           # its offset pairs can be written again (see dwo)
    dwo_rewrite: bool = False       # ... and there is a place for the new .dwo
    dwo_name_field: tuple[str, int, str] = ("", 0, "")  # (section, field, string section) of DW_AT_dwo_name
    str_offsets_base: int = 0


def relocations(obj: ObjectFile, index: int) -> dict[int, Reloc]:
    ri = obj.rela_of.get(index)
    if ri is None:
        return {}
    r = obj.relas[ri]
    syms = obj.symbols
    out = {}
    for j, (off, info, a) in enumerate(zip(r["r_offset"].tolist(), r["r_info"].tolist(), r["r_addend"].tolist())):
        s = info >> 32
        out[off] = Reloc(j, s, info & 0xFFFFFFFF, int(syms["st_shndx"][s]), int(syms["st_value"][s]) + a)
    return out


def facts(obj: ObjectFile, split: set[int]) -> Facts:
    """Parse the debug sections referring to sections in ``split``; raise ``Refused``."""
    f = Facts()
    for s in obj.sections:
        if s.name.startswith((".debug_", ".zdebug_")):
            f.secs[s.name] = s.index
            f.relocs[s.name] = relocations(obj, s.index)
    info = obj.sections[f.secs[".debug_info"]].data if ".debug_info" in f.secs else b""
    version = int.from_bytes(info[4:6], "little") if len(info) >= 6 else 0
    if version not in VERSIONS:
        raise Refused(f"DWARF version {version} (split rewrites DWARF 4 and 5)")
    f.version = version
    for name, rel in f.relocs.items():
        if name not in HANDLED and any(r.sec in split for r in rel.values()):
            raise Refused(f"{name} refers to it (not rewritten by split)")
    if ".zdebug_info" in f.secs or any(obj.sections[i].flags & 0x800 for i in f.secs.values()):
        raise Refused("compressed debug sections (not rewritten by split)")
    for name in (".debug_info", ".debug_line"):
        if name not in f.secs:
            raise Refused(f"no {name} beside the other debug sections")
    for name, rel in f.relocs.items():
        for off, r in rel.items():
            if r.sec in split and r.typ != R_64:
                raise Refused(f"relocation type {r.typ} at {name}+{off:#x}")
    _info(obj, f, split)
    return f


def _dwarfinfo(obj: ObjectFile, f: Facts) -> DWARFInfo:
    import io

    def desc(name):
        i = f.secs.get(name)
        if i is None:
            return None
        data = bytearray(obj.sections[i].data)
        # (relocations applied as if every section were at 0: the unit's bases and string
        # offsets then read right; addresses are taken from the relocations themselves)
        for off, r in f.relocs.get(name, {}).items():
            width = {R_64: 8, R_32: 4}.get(r.typ)
            if width and off + width <= len(data):
                data[off:off + width] = (r.addend % (1 << 8 * width)).to_bytes(width, "little")
        return DebugSectionDescriptor(io.BytesIO(bytes(data)), name, None, len(data), 0)

    cfg = DwarfConfig(little_endian=True, machine_arch="x64", default_address_size=8)
    keys = ["info", "aranges", "abbrev", "frame", "str", "loc", "ranges", "line", "pubtypes", "pubnames", "addr",
            "str_offsets", "line_str", "loclists", "rnglists", "types"]
    # Only the DIE tree is read: the sections the DIEs' own forms need.
    wanted = {"info", "abbrev", "str", "line_str", "line", "str_offsets", "addr", "rnglists", "loclists"}
    kw = {f"debug_{k}_sec": desc(f".debug_{k}") if k in wanted else None for k in keys}
    return DWARFInfo(cfg, eh_frame_sec=None, debug_sup_sec=None, gnu_debugaltlink_sec=None, **kw)


def _info(obj: ObjectFile, f: Facts, split: set[int]) -> None:
    """Every DIE: indexed forms refused; low_pc/high_pc intervals; list references."""
    rel = f.relocs[".debug_info"]
    try:
        dw = _dwarfinfo(obj, f)
        for cu in dw.iter_CUs():
            if cu["version"] != f.version:
                raise Refused(f"DWARF version {cu['version']} beside {f.version} in one object")
            if cu.dwarf_format() != 32 or cu["address_size"] != 8:
                raise Refused("64-bit DWARF or an address size other than 8")
            top = cu.get_top_DIE()
            skeleton = f.version == 5 and cu["unit_type"] == "DW_UT_skeleton"
            if f.version == 5 and cu["unit_type"] not in ("DW_UT_compile", "DW_UT_skeleton"):
                raise Refused(f"unit type {cu['unit_type']}")
            if f.cu_bases and f.bases:
                raise Refused("several compile units with indexed DWARF 5 forms in one object")
            _bases(obj, f, top, rel)
            low = top.attributes.get("DW_AT_low_pc")
            r = _address(f, rel, low) if low is not None else None
            f.cu_bases.append(r.sec if r is not None else -1)
            f.base = r
            same_code = 0
            for die in cu.iter_DIEs():
                _die(obj, f, rel, die, die.offset == top.offset, split)
                same_code += die.abbrev_code == top.abbrev_code
            if skeleton:
                from elflayout.split import dwo     # (it reads lists with this module)
                dwo.read(obj, f, cu, top, r)
                f.dwo_rewrite = f.dwo_fix and obj.dwo_out is not None and \
                    os.path.realpath(obj.dwo_out) != os.path.realpath(f.dwo_name)
            _unit(obj, f, cu, top, r, same_code)
        if len(f.cu_bases) > 1 and f.unit is not None:
            f.unit, f.unit_refused = None, "the object holds several compile units"
    except Refused:
        raise
    except Exception as e:  # pyelftools' parse errors: damaged or unknown DWARF
        if isinstance(e, KeyError) and e.args and isinstance(e.args[0], int):
            raise Damaged(f".debug_abbrev: unknown DWARF form {e.args[0]:#x}") from None
        raise Refused(f"debug information not understood ({type(e).__name__}: {e})") from None


def _bases(obj: ObjectFile, f: Facts, top, rel: dict[int, Reloc]) -> None:
    """The unit's DW_AT_addr_base/_rnglists_base/_loclists_base, each checked against the
    header of the table it points into (``Damaged`` when it does not fit)."""
    for attr, name in BASES.items():
        a = top.attributes.get(attr)
        if a is None:
            continue
        r = rel.get(a.offset)
        if a.form != "DW_FORM_sec_offset" or r is None or _section_name(f, r.sec) != name:
            raise Damaged(f"{attr} in {a.form} is not a relocated offset into {name}")
        data = obj.sections[r.sec].data
        head = ADDR_HEADER if name == ".debug_addr" else LIST_HEADER
        h = r.addend - head
        if h < 0 or r.addend > len(data):
            raise Damaged(f"{attr} {r.addend:#x} is not after a table header of {name}")
        length, version = int.from_bytes(data[h:h + 4], "little"), int.from_bytes(data[h + 4:h + 6], "little")
        if length >= 0xFFFFFFF0 or version != 5 or data[h + 6] != 8 or data[h + 7] or h + 4 + length > len(data):
            raise Damaged(f"{name}: the table at {h:#x} is not 32-bit DWARF 5 with 8-byte addresses "
                          f"within the section")
        f.bases[name] = r.addend
        f.base_fields.add((f.secs[".debug_info"], a.offset))
        if name == ".debug_addr":
            f.addr_count = (h + 4 + length - r.addend) // 8
        else:
            count = f.bases[name + "#"] = int.from_bytes(data[h + 8:h + 12], "little")    # offset_entry_count
            if r.addend + 4 * count > h + 4 + length:
                raise Damaged(f"{name}: the table at {h:#x} has {count} offsets, more than it holds")


def addrx(f: Facts, index: int) -> Reloc | None:
    """The relocation of entry ``index`` of the unit's ``.debug_addr`` table."""
    if ".debug_addr" not in f.bases or not 0 <= index < f.addr_count:
        raise Damaged(f".debug_addr: index {index} past the unit's {f.addr_count} entries")
    return f.relocs[".debug_addr"].get(f.bases[".debug_addr"] + 8 * index)


def _address(f: Facts, rel: dict[int, Reloc], a) -> Reloc | None:
    """The relocation an address attribute designates (DW_FORM_addr or an index)."""
    if a.form in ADDRX_FORMS:
        return addrx(f, a.raw_value)
    return rel.get(a.offset) if a.form == "DW_FORM_addr" else None


def _listx(obj: ObjectFile, f: Facts, a) -> tuple[str, int]:
    """(section, offset) of the list a DW_FORM_rnglistx/loclistx value names; its array slot noted."""
    name = LISTX_FORMS[a.form]
    if name not in f.bases or not 0 <= a.raw_value < f.bases[name + "#"]:
        raise Damaged(f"{a.name}: list index {a.raw_value} past the offsets of {name}")
    base = f.bases[name]
    slot = base + 4 * a.raw_value
    data = obj.sections[f.secs[name]].data
    off = base + int.from_bytes(data[slot:slot + 4], "little")
    if off >= len(data):
        raise Damaged(f"{name}: list offset {off:#x} past the end of the section")
    f.slots.setdefault((name, off), []).append(slot)
    return name, off


def _die(obj: ObjectFile, f: Facts, rel: dict[int, Reloc], die, top: bool, split: set[int]) -> None:
    at = die.attributes
    for a in at.values():
        r = rel.get(a.offset)
        if a.name in BASES:
            continue    # (read by _bases)
        if a.form in LISTX_FORMS:
            name, off = _listx(obj, f, a)
            if name == RANGES[5]:
                f.rnglists.setdefault(off, RangeList(off, [], []))
            else:
                f.loc_starts.add(off)
            continue
        if a.name == "DW_AT_call_return_pc":
            ret = _address(f, rel, a)
            if ret is not None and ret.sec in split:
                f.returns.append(ret)
        if a.form == "DW_FORM_sec_offset" and r is not None:
            target = _section_name(f, r.sec)
            if target == RANGES[f.version]:
                lst = f.rnglists.get(r.addend)
                if lst is None:
                    lst = f.rnglists[r.addend] = RangeList(r.addend, [], [])
                lst.users.append(r.j)
            elif target == LOCS[f.version] and a.name != "DW_AT_GNU_locviews":
                # (location views are pairs of numbers before the list, no addresses)
                f.loc_starts.add(r.addend)
                views = at.get("DW_AT_GNU_locviews")
                rv = rel.get(views.offset) if views is not None else None
                if rv is not None and rv.sec == r.sec:
                    f.loc_views[r.addend] = rv.addend
    low, high = at.get("DW_AT_low_pc"), at.get("DW_AT_high_pc")
    if low is None or high is None:
        return
    r = _address(f, rel, low)
    if r is None or r.sec not in split:
        return
    if high.form == "DW_FORM_addr" or high.form in ADDRX_FORMS:
        raise Refused("DW_AT_high_pc as an address (not rewritten by split)")
    iv = Interval(r.sec, r.addend, r.addend + int(high.value), low.offset, r.addend, reloc=r)
    if top:
        f.cu_ranges.append(iv)
    else:
        f.high_pcs.append((iv, die.tag))


HIGH_PC_SIZES = {"DW_FORM_data4": 4, "DW_FORM_data8": 8}


def _unit(obj: ObjectFile, f: Facts, cu, top, base: Reloc | None, same_code: int) -> None:
    """Whether the unit DIE's one range can become ``DW_AT_ranges`` (``f.unit``), else why not."""
    at = top.attributes
    low, high = at.get("DW_AT_low_pc"), at.get("DW_AT_high_pc")
    if low is None or high is None or base is None or "DW_AT_ranges" in at:
        return
    why, ranges = "", RANGES[f.version]
    low_size = 8 if low.form == "DW_FORM_addr" else _index_room(obj, f, low)
    if f.dwo_unit and not f.dwo_rewrite:
        why = f.dwo_unit + ("" if not f.dwo_fix else " (no place given for a new .dwo)" if not obj.dwo_out else
                            f" (the new .dwo would replace {f.dwo_name})")
    elif high.form not in HIGH_PC_SIZES:
        why = f"the unit's DW_AT_high_pc in {high.form}"
    elif isinstance(low_size, str):
        why = low_size
    elif same_code != 1:
        why = "the unit DIE's abbreviation is shared with other DIEs"
    elif ranges in f.secs and section_symbol(obj, f.secs[ranges]) is None:
        why = f"no section symbol of {ranges} to hold the unit's range list"
    elif ".debug_abbrev" not in f.secs or f.relocs[".debug_abbrev"]:
        why = "no .debug_abbrev, or relocations in it"
    elif any(r.sec == f.secs[".debug_abbrev"] and r.addend for rel in f.relocs.values() for r in rel.values()):
        why = "a reference into .debug_abbrev past its first table"
    if why:
        f.unit_refused = why
        return
    f.unit = Unit(low.offset, high.offset, HIGH_PC_SIZES[high.form], top.abbrev_code, cu["debug_abbrev_offset"], base,
                  low_size, low.form)


def _index_room(obj: ObjectFile, f: Facts, low) -> int | str:
    """Bytes of the unit's DW_AT_low_pc index, if a new last ``.debug_addr`` entry
    (holding 0) can be named in them; 0 when not: the index is kept, the unit's base
    then the start of its first function's new section (no list entry is relative to
    it any more: still correct, if not what a compiler writes); a string: why not."""
    if low.form not in ADDRX_FORMS:
        return f"the unit's DW_AT_low_pc in {low.form}"
    addr = obj.sections[f.secs[".debug_addr"]]
    if f.bases[".debug_addr"] + 8 * f.addr_count != addr.size:
        return 0
    size = ADDRX_FORMS[low.form]
    if size == 0:
        size = uleb(obj.sections[f.secs[".debug_info"]].data, low.offset)[1] - low.offset
        room = 1 << 7 * size
    else:
        room = 1 << 8 * size
    return size if f.addr_count < room else 0


def section_symbol(obj: ObjectFile, index: int) -> int | None:
    """The STT_SECTION symbol of section ``index``."""
    syms = obj.symbols
    hit = ((syms["st_info"] & 0xF) == 3) & (syms["st_shndx"] == index)
    return int(hit.argmax()) if hit.any() else None


def _section_name(f: Facts, index: int) -> str:
    for n, i in f.secs.items():
        if i == index:
            return n
    return ""


def lists(obj: ObjectFile, f: Facts, split: set[int]) -> None:
    """Parse the range lists and location lists the DIEs refer to. Offset pairs from the
    unit's base address are refused when that base is in a split section and the unit
    keeps it (no ``f.unit``)."""
    unit_base = _unit_base(f, split)
    if f.version == 4:
        _lists4(obj, f, split, unit_base)
        return
    if f.unit is not None:      # (its range list goes at the end of the last table)
        if ".debug_rnglists" in f.secs:
            f.rnglists_last_table = tables(obj.sections[f.secs[".debug_rnglists"]].data, ".debug_rnglists")
    for name, kinds, starts in ((".debug_rnglists", RLE, sorted(f.rnglists)),
                                (".debug_loclists", LLE, sorted(f.loc_starts))):
        if not starts:
            continue
        if name not in f.secs:
            raise Refused(f"{name} is referred to but missing")
        data = obj.sections[f.secs[name]].data
        last = tables(data, name)
        rel = f.relocs[name]
        for s in starts:
            ivs = walk(data, s, rel, kinds, name, unit_base, lambda i: addrx(f, i))
            if kinds is RLE:
                f.rnglists[s].intervals = ivs
                f.rnglists_last_table = last
            else:
                f.locs += ivs
                f.loc_lists[s] = ivs
                f.loclists_last_table = last


def _lists4(obj: ObjectFile, f: Facts, split: set[int], unit_base) -> None:
    """DWARF 4 ``.debug_ranges`` and ``.debug_loc``: no table headers, lists of address pairs."""
    for name, starts in ((".debug_ranges", sorted(f.rnglists)), (".debug_loc", sorted(f.loc_starts))):
        if not starts:
            continue
        if name not in f.secs:
            raise Refused(f"{name} is referred to but missing")
        data, rel = obj.sections[f.secs[name]].data, f.relocs[name]
        for s in starts:
            ivs = _walk4(data, s, rel, name, unit_base, name == ".debug_loc")
            f.end_fields |= {(f.secs[name], iv.end_at) for iv in ivs if iv.end_at >= 0}
            if name == ".debug_ranges":
                f.rnglists[s].intervals = ivs
            else:
                f.locs += ivs
                f.loc_lists[s] = ivs


def _walk4(data: bytes, p: int, rel: dict[int, Reloc], name: str, unit_base, loc: bool) -> list[Interval]:
    """Intervals of the DWARF 4 list at ``p``: pairs of relocated addresses (the end then
    rewritten by ``dwarf_write``), or offsets from a base selection entry or the unit's base."""
    out: list[Interval] = []
    base: tuple[Reloc, int] | None = None
    while True:
        if p + 16 > len(data):
            raise Refused(f"{name}: list runs past the end of the section")
        at = p
        rs, p = _addr(data, p, rel, name)
        re_, p = _addr(data, p, rel, name)
        a, b = int.from_bytes(data[at:at + 8], "little"), int.from_bytes(data[at + 8:at + 16], "little")
        if rs is None and re_ is None and a == b == 0:
            return out
        if rs is None and a == BASE_SELECTION:
            if re_ is None:
                raise Refused(f"{name}+{at:#x}: base address without a relocation")
            base = (re_, at + 8)
            continue
        if rs is not None and re_ is not None:
            if rs.sec != re_.sec:
                raise Refused(f"{name}+{at:#x}: start and end in different sections")
            out.append(Interval(rs.sec, rs.addend, re_.addend, at, rs.addend, end_at=at + 8))
        elif rs is not None or re_ is not None:
            raise Refused(f"{name}+{at:#x}: only one address of a pair relocated")
        elif base is not None:
            r, field_at = base
            out.append(Interval(r.sec, r.addend + a, r.addend + b, field_at, r.addend))
        elif isinstance(unit_base, Reloc):
            u = unit_base.addend
            out.append(Interval(unit_base.sec, u + a, u + b, -1, u + a, True, (at, at + 16)))
        elif unit_base is False:
            raise Refused(f"{name}+{at:#x}: offset pair relative to the unit's base address")
        if loc:
            if p + 2 > len(data):
                raise Refused(f"{name}: list runs past the end of the section")
            p += 2 + int.from_bytes(data[p:p + 2], "little")


def _unit_base(f: Facts, split: set[int]):
    """How offset pairs from the unit's base are read: the base's relocation (pairs become
    intervals), True (no relocated base: ignored as before), False (refused)."""
    if len(f.cu_bases) != 1:
        return False
    if f.cu_bases[0] == -1:
        return True
    if f.cu_bases[0] in split and f.unit is None:
        return False
    return f.base


def tables(data: bytes, name: str) -> int:
    """Check every table header of a DWARF 5 list section; offset of the last one."""
    p, last = 0, -1
    while p < len(data):
        if p + 12 > len(data):
            raise Refused(f"{name}: truncated table header at {p:#x}")
        length = int.from_bytes(data[p:p + 4], "little")
        version = int.from_bytes(data[p + 4:p + 6], "little")
        if length >= 0xFFFFFFF0 or version != 5 or data[p + 6] != 8 or data[p + 7] != 0:
            raise Refused(f"{name}: table at {p:#x} is not 32-bit DWARF 5 with 8-byte addresses")
        last, p = p, p + 4 + length
    if p != len(data):
        raise Refused(f"{name}: last table runs past the end of the section")
    return last


def _addr(data: bytes, p: int, rel: dict[int, Reloc], name: str) -> tuple[Reloc | None, int]:
    r = rel.get(p)
    if r is not None and int.from_bytes(data[p:p + 8], "little"):
        raise Refused(f"{name}+{p:#x}: relocated address with a nonzero field")
    return r, p + 8


def _start(data: bytes, p: int, rel: dict[int, Reloc], name: str, index, indexed: bool) -> tuple[Reloc | None, int]:
    """The address operand at ``p``: a relocated field, or a ULEB128 index into ``.debug_addr``."""
    if not indexed:
        return _addr(data, p, rel, name)
    i, p = uleb(data, p)
    return index(i), p


def walk(data: bytes, p: int, rel: dict[int, Reloc], kinds: dict, name: str, unit_base, index) -> list[Interval]:
    """Intervals of the list at ``p``: bounded entries relative to their relocated anchor
    (a relocated field, or an entry of ``.debug_addr``: ``index(i)``, anchor -1)."""
    out: list[Interval] = []
    base: tuple[Reloc, int] | None = None
    loc = kinds is LLE
    while True:
        if p >= len(data):
            raise Refused(f"{name}: list runs past the end of the section")
        k, at = data[p], p
        p += 1
        if k == kinds["end_of_list"]:
            return out
        if k == kinds["offset_pair"]:
            a, p = uleb(data, p)
            b, p = uleb(data, p)
            if base is not None:
                r, field_at = base
                out.append(Interval(r.sec, r.addend + a, r.addend + b, field_at, r.addend, entry=(at, p), reloc=r))
            elif isinstance(unit_base, Reloc):
                u = unit_base.addend
                out.append(Interval(unit_base.sec, u + a, u + b, -1, u + a, True, (at, p)))
            elif not unit_base:
                raise Refused(f"{name}+{at:#x}: offset pair relative to the unit's base address")
        elif k in (kinds["base_address"], kinds["base_addressx"]):
            r, p = _start(data, p, rel, name, index, k == kinds["base_addressx"])
            if r is None:
                raise Refused(f"{name}+{at:#x}: base address without a relocation")
            base = (r, at + 1 if k == kinds["base_address"] else -1)
        elif k in (kinds["start_length"], kinds["startx_length"]):
            r, p = _start(data, p, rel, name, index, k == kinds["startx_length"])
            n, p = uleb(data, p)
            if r is None:
                raise Refused(f"{name}+{at:#x}: start address without a relocation")
            out.append(Interval(r.sec, r.addend, r.addend + n, at + 1, r.addend, reloc=r))
        elif loc and k == kinds["GNU_view_pair"]:
            _, p = uleb(data, p)
            _, p = uleb(data, p)
            continue
        elif loc and k == kinds["default_location"]:
            pass
        else:
            raise Refused(f"{name}+{at:#x}: list entry kind {k} (not rewritten by split)")
        if loc and k not in (kinds["base_address"], kinds["base_addressx"]):
            n, p = uleb(data, p)
            p += n      # the expression: its relocations (DW_OP_addr) are retargeted in place


def aranges(obj: ObjectFile, f: Facts, split: set[int]) -> list[Interval]:
    """Tuples of ``.debug_aranges`` in split sections (32-bit sets of 8-byte addresses)."""
    if ".debug_aranges" not in f.secs:
        return []
    data, rel, out, p = obj.sections[f.secs[".debug_aranges"]].data, f.relocs[".debug_aranges"], [], 0
    while p < len(data):
        length = int.from_bytes(data[p:p + 4], "little")
        end = p + 4 + length
        if length >= 0xFFFFFFF0 or end > len(data) or data[p + 10:p + 12] != bytes([8, 0]) or (length - 12) % 16:
            raise Refused(f".debug_aranges: set at {p:#x} is not 32-bit with 8-byte addresses")
        for q in range(p + 16, end, 16):
            r = rel.get(q)
            if r is not None and r.sec in split:
                n = int.from_bytes(data[q + 8:q + 16], "little")
                out.append(Interval(r.sec, r.addend, r.addend + n, q, r.addend))
        p = end
    return out


def check_bounds(obj: ObjectFile, f: Facts, split: set[int], more: list[Interval]) -> None:
    """Every interval in a split section lies inside it."""
    ivs = [*f.locs, *f.cu_ranges, *(iv for iv, _ in f.high_pcs), *(iv for iv, _ in f.dwo_ivs), *more,
           *(iv for lst in f.rnglists.values() for iv in lst.intervals)]
    for iv in ivs:
        if iv.sec in split and not 0 <= iv.start <= iv.end <= obj.sections[iv.sec].size:
            raise Refused(f"a range {iv.start:#x}..{iv.end:#x} outside {obj.sections[iv.sec].name}")


def crosses(iv: Interval, group_span) -> bool:
    """Whether ``iv`` leaves the new section of its anchor; ``group_span(sec, off)`` is
    the [start, end] of the group holding ``off`` (None for a section not split)."""
    span = group_span(iv.sec, iv.anchor_at)
    if span is None:
        return False
    lo, hi = span
    return not (lo <= iv.start <= iv.end <= hi)


__all__ = ["Facts", "Interval", "Refused", "facts", "lists", "crosses", "uleb", "sleb", "enc_uleb", "enc_sleb",
           "relocations"]
