"""The split DWARF (``.dwo``) of a ``-gsplit-dwarf`` skeleton unit: what in it
designates code of a split section.

Every address the ``.dwo`` names is an entry of the skeleton's ``.debug_addr``,
relocated in the object and retargeted by ``plan`` like any relocation. The ``.dwo``
itself is left as it is (never rewritten, nor copied), so each range it describes from
one address must stay in the new section of that address: a subprogram's
``DW_AT_low_pc`` index and ``DW_AT_high_pc`` length, a list's ``startx_length``,
offset pairs after a ``base_addressx`` (``plan`` glues the units they cover). Offset
pairs from the unit's base, the skeleton's ``DW_AT_low_pc`` (clang's range lists),
need that base to stay: the skeleton's one range then cannot become a range list.

The ``.dwo`` is ``DW_AT_comp_dir``/``DW_AT_dwo_name``, or the object itself when it
holds ``.debug_*.dwo`` sections (``-gsplit-dwarf=single``). A missing or unreadable
``.dwo``, or one of another build (its DWO id differs), is bad input.
"""

from __future__ import annotations

import io
import os

from elftools.common.exceptions import ELFError
from elftools.dwarf.die import DIE, AttributeValue
from elftools.dwarf.dwarfinfo import DebugSectionDescriptor, DWARFInfo, DwarfConfig
from elftools.elf.elffile import ELFFile

from elflayout.split import dwarf
from elflayout.split.dwarf import ADDRX_FORMS, LISTX_FORMS, LLE, RLE, Damaged, Facts, Interval, Refused

SHF_COMPRESSED = 0x800
STRX_FORMS = ("DW_FORM_strx", "DW_FORM_strx1", "DW_FORM_strx2", "DW_FORM_strx3", "DW_FORM_strx4")
STR_OFFSETS_HEADER = 8      # DWARF 5 §7.26: unit_length, version, padding
# DWARF 5 §7.5.5 classes: attributes whose DW_FORM_sec_offset names a list
RANGE_ATTRS = ("DW_AT_ranges", "DW_AT_start_scope")
LOC_ATTRS = ("DW_AT_location", "DW_AT_string_length", "DW_AT_return_addr", "DW_AT_data_member_location",
             "DW_AT_frame_base", "DW_AT_segment", "DW_AT_static_link", "DW_AT_use_location",
             "DW_AT_vtable_elem_location")
NO_ADDRESS = ("DW_AT_GNU_locviews", "DW_AT_stmt_list", "DW_AT_macros", "DW_AT_GNU_macros", "DW_AT_macro_info",
              "DW_AT_str_offsets_base", "DW_AT_addr_base", "DW_AT_loclists_base", "DW_AT_rnglists_base")


class Unreadable(Damaged):
    """The ``.dwo`` is missing or cannot be read: bad input, named by its path."""


def read(obj, f: Facts, cu, top, base: dwarf.Reloc | None) -> None:
    """Intervals of the skeleton unit's ``.dwo`` into ``f.dwo_ivs``, its call return
    addresses into ``f.returns``, and ``f.dwo_unit`` (why the unit's base must stay)."""
    name, secs = _sections(obj, f, top)
    f.dwo_name = name
    dw = _dwarfinfo(obj, f, secs)
    want = cu.header.get("dwo_id")
    units = [u for u in dw.iter_CUs() if u["unit_type"] == "DW_UT_split_compile"]
    unit = next((u for u in units if u.header.get("dwo_id") == want), None)
    if unit is None:
        raise Damaged(f"{name} holds no split unit of DWO id {want:#x} (the .dwo of another build?)")
    if unit.dwarf_format() != 32 or unit["address_size"] != 8:
        raise Refused(f"{name}: 64-bit DWARF or an address size other than 8")
    _inject_bases(unit, f)
    a = top.attributes.get("DW_AT_str_offsets_base")
    r = f.relocs[".debug_info"].get(a.offset) if a is not None else None
    f.str_offsets_base = r.addend if r is not None else 0
    lists: dict[tuple[str, int], None] = {}
    for die in unit.iter_DIEs():
        _die(f, die, name, secs, lists)
    for (sec, off) in lists:
        _list(f, secs, sec, off, name, base)
    f.dwo_secs = secs
    _rewritable(obj, f, top)


def _rewritable(obj, f: Facts, top) -> None:
    """Whether the ``.dwo``'s offset pairs from the unit's base can be written again as
    ``startx_length`` entries naming new ``.debug_addr`` entries (``f.dwo_fix``): lists
    named by index only, one table per list section, the address table last in its
    section, and the skeleton's ``DW_AT_dwo_name`` a string split can point elsewhere
    (``f.dwo_name_field``), the ``.dwo`` sections not in the object itself."""
    used = {k for k, ivs in f.dwo_lists.items() if any(iv.unit or iv.entry != (0, 0) for iv in ivs)}
    why = ""
    if not used:
        return
    if f.dwo_inside:
        why = "the .dwo sections are in the object (-gsplit-dwarf=single), which its links name by its old path"
    elif any(k in f.dwo_by_offset for k in used):
        why = "a list of offsets from the unit's base is named by a section offset"
    elif any(dwarf.tables(f.dwo_secs[sec], sec) != 0 for sec, _ in used):
        why = "a .dwo list section holds several tables"
    elif f.bases[".debug_addr"] + 8 * f.addr_count != obj.sections[f.secs[".debug_addr"]].size:
        why = "the unit's .debug_addr table is not the last of its section"
    else:
        a = top.attributes.get("DW_AT_dwo_name")
        forms = {"DW_FORM_strp": ".debug_str", "DW_FORM_line_strp": ".debug_line_str",
                 **{x: ".debug_str" for x in STRX_FORMS}}
        sec = forms.get(a.form) if a is not None else None
        table = f.secs.get(".debug_str_offsets") if a is not None and a.form in STRX_FORMS else None
        if sec is None or sec not in f.secs or (a.form in STRX_FORMS and (table is None or not f.str_offsets_base)):
            why = f"DW_AT_dwo_name in {a.form if a is not None else 'no form'} (not rewritten by split)"
        else:
            field = f.str_offsets_base + 4 * a.raw_value if a.form in STRX_FORMS else a.offset
            rel_sec = ".debug_str_offsets" if a.form in STRX_FORMS else ".debug_info"
            if field not in f.relocs.get(rel_sec, {}):
                why = "DW_AT_dwo_name's string without a relocation"
            else:
                f.dwo_name_field = (rel_sec, field, sec)
    f.dwo_fix = not why
    if why and f.dwo_unit:
        f.dwo_unit += f" ({why})"


def _sections(obj, f: Facts, top) -> tuple[str, dict[str, bytes]]:
    """(name for messages, ``.debug_*.dwo`` contents by name without ``.dwo``)."""
    own = {s.name[:-4]: s for s in obj.sections if s.name.startswith(".debug_") and s.name.endswith(".dwo")}
    f.dwo_inside = bool(own)
    if own:
        if any(s.flags & SHF_COMPRESSED for s in own.values()):
            raise Refused("compressed .dwo sections (not read by split)")
        return f"{obj.name} (its .dwo sections)", {k: s.data for k, s in own.items()}
    at = top.attributes
    dwo = at.get("DW_AT_dwo_name") or at.get("DW_AT_GNU_dwo_name")
    if dwo is None or not isinstance(dwo.value, bytes):
        raise Damaged("a -gsplit-dwarf skeleton unit without DW_AT_dwo_name")
    comp = at.get("DW_AT_comp_dir")
    d = comp.value.decode(errors="replace") if comp is not None and isinstance(comp.value, bytes) else ""
    path = os.path.join(d, dwo.value.decode(errors="replace"))
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        elf = ELFFile(io.BytesIO(raw))
        out = {}
        for s in elf.iter_sections():
            if s.name.startswith(".debug_") and s.name.endswith(".dwo"):
                if s["sh_flags"] & SHF_COMPRESSED:
                    raise Refused(f"{path}: compressed .dwo sections (not read by split)")
                out[s.name[:-4]] = s.data()
    except OSError as e:
        raise Unreadable(f"{path}: its split DWARF (DW_AT_comp_dir/DW_AT_dwo_name) cannot be read: "
                         f"{e.strerror or e}") from None
    except (ELFError, ValueError) as e:
        raise Damaged(f"{path}: not a readable ELF file ({e})") from None
    for k in (".debug_info", ".debug_abbrev"):
        if k not in out:
            raise Damaged(f"{path}: no {k}.dwo")
    f.dwo_raw = raw
    return path, out


def _dwarfinfo(obj, f: Facts, secs: dict[str, bytes]) -> DWARFInfo:
    def desc(name, data):
        return None if data is None else DebugSectionDescriptor(io.BytesIO(data), name, None, len(data), 0)

    addr = obj.sections[f.secs[".debug_addr"]].data if ".debug_addr" in f.secs else None
    kw = {f"debug_{k}_sec": desc(f".debug_{k}.dwo", secs.get(f".debug_{k}"))
          for k in ("info", "abbrev", "str", "str_offsets", "loclists", "rnglists")}
    kw |= {f"debug_{k}_sec": None for k in ("aranges", "frame", "loc", "ranges", "line", "pubtypes", "pubnames",
                                            "line_str", "types")}
    kw["debug_addr_sec"] = desc(".debug_addr", addr)     # (values unused: entries are read by index)
    cfg = DwarfConfig(little_endian=True, machine_arch="x64", default_address_size=8)
    return DWARFInfo(cfg, eh_frame_sec=None, debug_sup_sec=None, gnu_debugaltlink_sec=None, **kw)


def _inject_bases(unit, f: Facts) -> None:
    """A split unit's string, list and address bases are implicit (DWARF 5 §3.1.3):
    given to pyelftools, which reads them from the top DIE, before it parses any DIE."""
    top = DIE(cu=unit, stream=unit.dwarfinfo.debug_info_sec.stream, offset=unit.cu_die_offset)
    implicit = {"DW_AT_str_offsets_base": STR_OFFSETS_HEADER, "DW_AT_loclists_base": dwarf.LIST_HEADER,
                "DW_AT_rnglists_base": dwarf.LIST_HEADER, "DW_AT_addr_base": f.bases.get(".debug_addr", 0)}
    for k, v in implicit.items():
        top.attributes.setdefault(k, AttributeValue(k, "DW_FORM_sec_offset", v, v, -1, []))
    unit._dielist.insert(0, top)
    unit._diemap.insert(0, unit.cu_die_offset)
    top._translate_indirect_attributes()


def _die(f: Facts, die, name: str, secs: dict[str, bytes], lists: dict) -> None:
    at = die.attributes
    for a in at.values():
        if a.form in LISTX_FORMS:
            key, slot = _listx(secs, LISTX_FORMS[a.form], a.raw_value, name)
            lists[key] = None
            f.dwo_slots.setdefault(key, []).append(slot)
        elif a.form == "DW_FORM_sec_offset" and a.name in RANGE_ATTRS + LOC_ATTRS:
            key = (".debug_rnglists" if a.name in RANGE_ATTRS else ".debug_loclists", a.raw_value)
            lists[key] = None
            f.dwo_by_offset.add(key)
        elif a.form == "DW_FORM_sec_offset" and a.name not in NO_ADDRESS:
            raise Refused(f"{a.name} as a section offset in {name} (not read by split)")
        elif a.form == "DW_FORM_addr":
            raise Refused(f"{a.name} as an address in {name}, without a relocation")
        elif a.name == "DW_AT_call_return_pc" and a.form in ADDRX_FORMS:
            r = dwarf.addrx(f, a.raw_value)
            if r is not None:
                f.returns.append(r)
    low, high = at.get("DW_AT_low_pc"), at.get("DW_AT_high_pc")
    if low is None or high is None:
        return
    r = dwarf.addrx(f, low.raw_value)
    if r is None:
        return
    if high.form == "DW_FORM_addr" or high.form in ADDRX_FORMS:
        raise Refused(f"DW_AT_high_pc as an address in {name} (not read by split)")
    iv = Interval(r.sec, r.addend, r.addend + int(high.raw_value), -1, r.addend, reloc=r)
    f.dwo_ivs.append((iv, f"{die.tag} at {die.offset:#x} of {name}"))


def _listx(secs: dict[str, bytes], sec: str, index: int, name: str) -> tuple[tuple[str, int], int]:
    """((section, offset), array slot) of list ``index`` of the ``.dwo``'s first table
    (its offsets relative to the end of the table's header, DWARF 5 §7.28)."""
    data = secs.get(sec)
    if data is None or len(data) < dwarf.LIST_HEADER:
        raise Damaged(f"{name}: a list index into {sec}.dwo, which is missing")
    count = int.from_bytes(data[8:12], "little")
    if not 0 <= index < count:
        raise Damaged(f"{name}: list index {index} past the {count} offsets of {sec}.dwo")
    slot = dwarf.LIST_HEADER + 4 * index
    off = dwarf.LIST_HEADER + int.from_bytes(data[slot:slot + 4], "little")
    if off >= len(data):
        raise Damaged(f"{name}: {sec}.dwo offset {off:#x} past the end of the section")
    return (sec, off), slot


def _list(f: Facts, secs: dict[str, bytes], sec: str, off: int, name: str, base) -> None:
    data = secs.get(sec)
    if data is None:
        raise Damaged(f"{name}: a list in {sec}.dwo, which is missing")
    dwarf.tables(data, f"{sec}.dwo of {name}")
    kinds = RLE if sec == ".debug_rnglists" else LLE
    where = f"{'range' if kinds is RLE else 'location'} list at {off:#x} of {name}"
    ivs = dwarf.walk(data, off, {}, kinds, where, base if base is not None else True,
                     lambda i: dwarf.addrx(f, i))
    f.dwo_lists[(sec, off)] = ivs
    for iv in ivs:
        if iv.unit:
            f.dwo_unit = f.dwo_unit or (f"{where} holds offsets from the unit's base address (the skeleton's "
                                        "DW_AT_low_pc), which must stay where it is")
            iv = Interval(iv.sec, iv.start, iv.end, -1, base.addend, True, iv.entry, reloc=base)
        f.dwo_ivs.append((iv, where))
