"""Rewrite the debug sections of a split object (see ``dwarf``): ``.debug_line``
sequences per new section, ``.debug_aranges`` entries per new section, and range
lists that now span several new sections appended as ``DW_RLE_start_length`` per
piece. A unit whose one ``DW_AT_low_pc``/``DW_AT_high_pc`` range covers a split
section gets ``DW_AT_ranges`` instead, and its lists' offset pairs from the unit's
base become entries with a relocated start. Everything else in ``.debug_*`` keeps its
bytes; its relocations were retargeted with the code's.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from elflayout.split import dwarf_line
from elflayout.split.dwarf import section_symbol as dwarf_section_symbol
from elflayout.split.dwarf import ADDR_HEADER as dwarf_ADDR_HEADER
from elflayout.split.dwarf import LIST_HEADER as dwarf_LIST_HEADER
from elflayout.split.dwarf import (ADDRX_FORMS, LLE, LOCS, R_32, R_64, RANGES, RLE, Facts, Interval, crosses, enc_uleb,
                                   uleb)
from elflayout.split.extents import STT
from elflayout.split.reader import RELA64

STT_SECTION = STT["STT_SECTION"]


@dataclass
class Debug:
    """What ``plan`` learnt: the facts and the parsed line tables."""

    facts: Facts
    lines: list[dwarf_line.Unit]


class _Ctx:
    def __init__(self, plan, splits, starts, relas, grp_sym, mp):
        self.obj, self.splits, self.starts = plan.obj, splits, starts
        self.relas, self.grp_sym, self.mp = relas, grp_sym, mp

    def span(self, sec: int, off: int):
        """(group, start, end) of the new section holding ``off`` of split section ``sec``."""
        sp = self.splits.get(sec)
        if sp is None:
            return None
        u = sp.unit_at(off)
        g = next(k for k, (a, b) in enumerate(sp.groups) if a <= u <= b)
        a, b = sp.groups[g]
        return g, sp.units[a].start, sp.units[b].end

    def bounds(self, sec: int, off: int):
        """[start, end] of the new section holding ``off``; None for a section not split."""
        span = self.span(sec, off)
        return None if span is None else span[1:]

    def pieces(self, sec: int, start: int, end: int):
        """(group, start, end) of each new section ``[start, end)`` overlaps."""
        g, lo, hi = self.span(sec, start)
        out = [(g, start, min(end, hi))]
        sp = self.splits[sec]
        while end > hi:
            g += 1
            a, b = sp.groups[g]
            lo, hi = sp.units[a].start, sp.units[b].end
            out.append((g, lo, min(end, hi)))
        return out

    def rela_index(self, name: str) -> int | None:
        return self.obj.rela_of.get(self.facts.secs[name])


def rewrite(plan, debug: Debug, splits, starts, relas, grp_sym, mp) -> dict[int, bytes]:
    """New contents of rewritten debug sections by index; ``relas`` is updated in place."""
    c = _Ctx(plan, splits, starts, relas, grp_sym, mp)
    c.plan, c.facts = plan, debug.facts
    f = c.facts
    c.convert = f.unit is not None and f.unit.base.sec in splits
    out = {}
    line_moves = _line(c, debug.lines, out)
    if f.version == 4:
        (list_moves, unit_list), loc_moves = _ranges4(c, out), _loc4(c, out)
    else:
        list_moves, unit_list = _rnglists(c, out)
        loc_moves = _loclists(c, out)
    added = f.unit.new_section(f) if c.convert else None
    if added:
        unit_list = _new_ranges(c, added, out)
    if ".debug_aranges" in f.secs:
        _aranges(c, out)
    for name, moves in ((".debug_line", line_moves), (RANGES[f.version], list_moves),
                        (LOCS[f.version], loc_moves)):
        if moves:
            _patch_addends(c, f.secs[name], moves, out)
    c.addr_extra = []
    dwo_new = _dwo_lists(c) if f.dwo_rewrite else {}
    if c.convert:
        _unit_die(c, unit_list, out)
    elif c.addr_extra:
        _addr_append(c, out, [])
    if dwo_new:
        _dwo_output(c, dwo_new, out)
    return out


def _rows(c: _Ctx, name: str) -> np.ndarray:
    ri = c.rela_index(name)
    return c.relas[("copy", ri)] if ri is not None else np.zeros(0, RELA64)


def _shifted(rows: np.ndarray, lo: int, hi: int, delta: int) -> list[tuple]:
    sel = rows[(rows["r_offset"] >= lo) & (rows["r_offset"] < hi)]
    return [(int(o) + delta, int(i), int(a)) for o, i, a in zip(sel["r_offset"], sel["r_info"], sel["r_addend"])]


def _store(c: _Ctx, name: str, data: bytes, rel: list[tuple], out: dict) -> None:
    out[c.facts.secs[name]] = bytes(data)
    ri = c.rela_index(name)
    arr = np.array(sorted(rel), RELA64) if rel else np.zeros(0, RELA64)
    if ri is None:
        if rel:     # (offset pairs only before): a RELA section the writer adds
            c.relas[("new", c.facts.secs[name])] = arr
        return
    c.relas[("copy", ri)] = arr


def _reloc(c: _Ctx, at: int, sec: int, g: int, off: int) -> tuple:
    """A relocation of the 8-byte field at ``at`` to ``off`` of split section ``sec``, group ``g``."""
    lo = c.splits[sec].units[c.splits[sec].groups[g][0]].start
    return (at, (c.grp_sym[(sec, g)] << 32) | R_64, off - lo)


def _line(c: _Ctx, units: list[dwarf_line.Unit], out: dict) -> dict[int, int]:
    if not any(s.sec in c.splits for u in units for s in u.sequences):
        return {}
    data = c.obj.sections[c.facts.secs[".debug_line"]].data
    rows = _rows(c, ".debug_line")
    new, rel, moves = bytearray(), [], {}
    for u in units:
        base = len(new)
        moves[u.offset] = base
        new += data[u.offset:u.program]
        rel += _shifted(rows, u.offset, u.program, base - u.offset)
        for s in u.sequences:
            if s.sec not in c.splits:
                rel += _shifted(rows, s.begin, s.end, len(new) - s.begin)
                new += data[s.begin:s.end]
                continue
            sp = c.splits[s.sec]
            for g, (a, b) in enumerate(sp.groups):
                enc = dwarf_line.encode(u, s, sp.units[a].start, sp.units[b].end)
                if enc is not None:
                    body, field_at, addr = enc
                    rel.append(_reloc(c, len(new) + field_at, s.sec, g, addr))
                    new += body
        new[base:base + 4] = (len(new) - base - 4).to_bytes(4, "little")
    _store(c, ".debug_line", new, rel, out)
    return moves


def _rnglists(c: _Ctx, out: dict) -> tuple[dict[int, int], int]:
    """Lists that span new sections (or hang on a converted unit's base) appended again;
    with a converted unit, its own list last. The moves and that list's offset."""
    f = c.facts
    todo = [lst for lst in f.rnglists.values()
            if any(crosses(iv, c.bounds) or (c.convert and iv.unit) for iv in lst.intervals)]
    if (not todo and not c.convert) or ".debug_rnglists" not in f.secs:
        return {}, -1
    data = c.obj.sections[f.secs[".debug_rnglists"]].data
    rel = _shifted(_rows(c, ".debug_rnglists"), 0, len(data), 0)
    new, moves = bytearray(data), {}
    for lst in sorted(todo, key=lambda x: x.offset):
        moves[lst.offset] = len(new)
        for iv in lst.intervals:
            new += _entry(c, iv, len(new), rel)
        new.append(RLE["end_of_list"])
    unit_list = -1
    if c.convert:
        unit_list = len(new)
        for iv in f.cu_ranges:
            new += _entry(c, iv, len(new), rel)
        new.append(RLE["end_of_list"])
    t = f.rnglists_last_table
    new[t:t + 4] = (len(new) - t - 4).to_bytes(4, "little")
    _point_slots(f, ".debug_rnglists", moves, new)
    _store(c, ".debug_rnglists", new, rel, out)
    return moves, unit_list


def _point_slots(f: Facts, name: str, moves: dict[int, int], new: bytearray) -> None:
    """Offset array entries (``DW_FORM_rnglistx``/``loclistx``) of moved lists pointed at
    the new copies (relative to the unit's base, as the originals)."""
    for old, to in moves.items():
        for slot in f.slots.get((name, old), []):
            new[slot:slot + 4] = (to - f.bases[name]).to_bytes(4, "little")


def _new_ranges(c: _Ctx, name: str, out: dict) -> int:
    """The range list section added for the converted unit (the object had none): one
    table of no offsets holding the unit's list (DWARF 4: just the list); its offset."""
    rel: list = []
    if name == RANGES[5]:
        body = bytearray(bytes(12))     # unit_length (below), version 5, 8-byte addresses, no offsets
        body[4:8] = bytes([5, 0, 8, 0])
        for iv in c.facts.cu_ranges:
            body += _entry(c, iv, len(body), rel)
        body.append(RLE["end_of_list"])
        body[0:4] = (len(body) - 4).to_bytes(4, "little")
        at = 12
    else:
        body = bytearray()
        for iv in c.facts.cu_ranges:
            body += _pairs4(c, iv, len(body), rel)
        body += bytes(16)
        at = 0
    out[name] = bytes(body)
    c.relas[("newsec", name)] = np.array(sorted(rel), RELA64)
    return at


def _entry(c: _Ctx, iv: Interval, at: int, rel: list) -> bytes:
    """DW_RLE_start_length entries for ``iv`` at section offset ``at``."""
    out = bytearray()
    if iv.sec in c.splits:
        for g, s, e in c.pieces(iv.sec, iv.start, iv.end):
            if e == s and iv.end > iv.start:
                continue
            rel.append(_reloc(c, at + len(out) + 1, iv.sec, g, s))
            out += bytes([RLE["start_length"]]) + bytes(8) + enc_uleb(e - s)
        return bytes(out)
    r = c.facts.base if iv.unit else iv.reloc
    value = int(c.obj.symbols["st_value"][r.sym])
    rel.append((at + 1, (int(c.mp[r.sym]) << 32) | R_64, iv.start - value))
    return bytes([RLE["start_length"]]) + bytes(8) + enc_uleb(iv.end - iv.start)


def _ranges4(c: _Ctx, out: dict) -> tuple[dict[int, int], int]:
    """DWARF 4 ``.debug_ranges``: lists spanning new sections appended again as one pair
    of relocated addresses per piece; every relocated end address retargeted."""
    f, name = c.facts, ".debug_ranges"
    if name not in f.secs:
        return {}, -1
    todo = [lst for lst in f.rnglists.values() if any(crosses(iv, c.bounds) for iv in lst.intervals)]
    data = c.obj.sections[f.secs[name]].data
    new, moves = bytearray(data), {}
    rel = _retarget4(c, [iv for lst in f.rnglists.values() for iv in lst.intervals], new,
                     _shifted(_rows(c, name), 0, len(data), 0))
    for lst in sorted(todo, key=lambda x: x.offset):
        moves[lst.offset] = len(new)
        for iv in lst.intervals:
            new += _pairs4(c, iv, len(new), rel)
        new += bytes(16)    # (end of list)
    unit_list = -1
    if c.convert:
        unit_list = len(new)
        for iv in f.cu_ranges:
            new += _pairs4(c, iv, len(new), rel)
        new += bytes(16)
    _store(c, name, new, rel, out)
    return moves, unit_list


def _pairs4(c: _Ctx, iv: Interval, at: int, rel: list) -> bytes:
    """DWARF 4 address pairs for ``iv`` at section offset ``at``, both relocated."""
    out = bytearray()
    if iv.sec not in c.splits:
        r = c.facts.relocs[".debug_ranges"][iv.anchor]
        value, sym = int(c.obj.symbols["st_value"][r.sym]), int(c.mp[r.sym])
        rel += [(at, (sym << 32) | R_64, iv.start - value), (at + 8, (sym << 32) | R_64, iv.end - value)]
        return bytes(16)
    for g, s, e in c.pieces(iv.sec, iv.start, iv.end):
        if e == s and iv.end > iv.start:
            continue
        rel += [_reloc(c, at + len(out), iv.sec, g, s), _reloc(c, at + len(out) + 8, iv.sec, g, e)]
        out += bytes(16)
    return bytes(out)


def _retarget4(c: _Ctx, ivs: list[Interval], data: bytearray, rel: list) -> list:
    """``rel`` with the DWARF 4 end address of each interval (left alone by ``plan``)
    relocated against the new section holding its last byte; with a converted unit,
    pairs of offsets from its base (now 0) become pairs of relocated addresses in place."""
    fixed = {}
    for iv in ivs:
        last = c.span(iv.sec, max(iv.start, iv.end - 1)) if iv.sec in c.splits else None
        if iv.unit and c.convert:
            at = iv.entry[0]
            data[at:at + 16] = bytes(16)
            fixed[at] = _reloc(c, at, iv.sec, c.span(iv.sec, iv.start)[0], iv.start)
            fixed[at + 8] = _reloc(c, at + 8, iv.sec, last[0], iv.end)
        elif iv.end_at >= 0 and last is not None:
            fixed[iv.end_at] = _reloc(c, iv.end_at, iv.sec, last[0], iv.end)
    return [fixed.pop(o, (o, i, a)) for o, i, a in rel] + list(fixed.values())


def _loc4(c: _Ctx, out: dict) -> dict[int, int]:
    """DWARF 4 ``.debug_loc``: bytes kept (entries leaving their new section glue its
    units), relocated end addresses retargeted."""
    f, name = c.facts, ".debug_loc"
    if name in f.secs and any((iv.end_at >= 0 or iv.unit) and iv.sec in c.splits for iv in f.locs):
        data = bytearray(c.obj.sections[f.secs[name]].data)
        rel = _retarget4(c, f.locs, data, _shifted(_rows(c, name), 0, len(data), 0))
        _store(c, name, data, rel, out)
    return {}


def _rewritten(c: _Ctx, iv: Interval) -> bool:
    """Whether location list entry ``iv`` is written again: an offset pair from the
    converted unit's base, or from a base address in another new section."""
    if iv.unit:
        return c.convert
    return iv.entry != (0, 0) and crosses(iv, c.bounds)


def _loclists(c: _Ctx, out: dict) -> dict[int, int]:
    """Location lists with offset pairs from the converted unit's base, or from a base
    address now in another new section, appended again, those pairs as
    ``DW_LLE_start_length`` with a relocated start (one entry for one: a separate list
    of location views still counts the same entries)."""
    f = c.facts
    todo = sorted(s for s, ivs in f.loc_lists.items() if any(_rewritten(c, iv) for iv in ivs))
    if not todo:
        return {}
    data = c.obj.sections[f.secs[".debug_loclists"]].data
    rows = _rows(c, ".debug_loclists")
    rel = _shifted(rows, 0, len(data), 0)
    new, moves = bytearray(data), {}
    marks = sorted({*f.loc_starts, *f.loc_views.values()})
    for start in todo:
        v = f.loc_views.get(start, start)
        if v < start and bisect.bisect_right(marks, v) == bisect.bisect_left(marks, start):
            moves[v] = len(new)     # (its views just before it, as gcc lays them out)
            new += data[v:start]
        moves[start] = len(new)
        p = start
        for iv in f.loc_lists[start]:
            if not _rewritten(c, iv):
                continue
            at, after = iv.entry
            rel += _shifted(rows, p, at, len(new) - p)
            new += data[p:at]
            g, lo, _ = c.span(iv.sec, iv.start)
            rel.append(_reloc(c, len(new) + 1, iv.sec, g, iv.start))
            new += bytes([LLE["start_length"]]) + bytes(8) + enc_uleb(iv.end - iv.start)
            p = after
        n, q = uleb(data, p)    # (p: the last rewritten entry's expression)
        end = _list_end(data, q + n)
        rel += _shifted(rows, p, end, len(new) - p)
        new += data[p:end]
    t = f.loclists_last_table
    new[t:t + 4] = (len(new) - t - 4).to_bytes(4, "little")
    _point_slots(f, ".debug_loclists", moves, new)
    _store(c, ".debug_loclists", new, rel, out)
    return moves


def _list_end(data: bytes, p: int, kinds: dict = LLE) -> int:
    """Offset just past the end of the location (or range) list going on at ``p``
    (an entry boundary; ``dwarf.lists`` read the same list without error)."""
    loc = kinds is LLE
    while True:
        k = data[p]
        p += 1
        if k == kinds["end_of_list"]:
            return p
        fields = {kinds["base_addressx"]: "u", kinds["startx_endx"]: "uu", kinds["startx_length"]: "uu",
                  kinds["offset_pair"]: "uu", kinds["base_address"]: "a", kinds["start_end"]: "aa",
                  kinds["start_length"]: "au"}
        if loc:
            fields |= {LLE["default_location"]: "", LLE["GNU_view_pair"]: "uu"}
        for x in fields[k]:
            p = p + 8 if x == "a" else uleb(data, p)[1]
        if loc and k not in (LLE["base_address"], LLE["base_addressx"], LLE["GNU_view_pair"]):
            n, p = uleb(data, p)
            p += n


DW_AT_LOW_PC, DW_AT_HIGH_PC, DW_AT_RANGES, DW_AT_IDENTIFIER_CASE = 0x11, 0x12, 0x55, 0x42
DW_FORM_DATA4, DW_FORM_SEC_OFFSET, DW_FORM_IMPLICIT_CONST = 0x06, 0x17, 0x21


def _unit_die(c: _Ctx, unit_list: int, out: dict) -> None:
    """The unit DIE: ``DW_AT_low_pc`` 0 (no relocation: the base of nothing now) and, in
    ``DW_AT_high_pc``'s bytes, ``DW_AT_ranges`` pointing at ``unit_list`` (plus, for an
    8-byte ``DW_AT_high_pc``, ``DW_AT_identifier_case`` 0: case sensitive, the default),
    through its abbreviation rewritten in place (no other DIE uses it)."""
    f, u = c.facts, c.facts.unit
    info = bytearray(c.obj.sections[f.secs[".debug_info"]].data)
    if u.low_form == "DW_FORM_addr":
        info[u.low:u.low + 8] = bytes(8)
    elif u.low_size:
        info[u.low:u.low + u.low_size] = _zero_entry(c, out, u)
    if c.addr_extra and not _zeroed(u):
        _addr_append(c, out, [])
    info[u.high:u.high + u.high_size] = bytes(u.high_size)
    rows = _rows(c, ".debug_info")
    rel = [(int(o), int(i), int(a)) for o, i, a in zip(rows["r_offset"], rows["r_info"], rows["r_addend"])
           if int(o) != u.low]
    added = u.new_section(f)
    sym = c.grp_sym[("new", added)] if added else c.mp[dwarf_section_symbol(c.obj, f.secs[RANGES[f.version]])]
    rel.append((u.high, (int(sym) << 32) | R_32, unit_list))
    _store(c, ".debug_info", info, rel, out)
    abbrev = c.obj.sections[f.secs[".debug_abbrev"]].data
    out[f.secs[".debug_abbrev"]] = _abbrev(abbrev, u.table, u.code, u.high_size)


def _zeroed(u) -> bool:
    """Whether the converted unit's DW_AT_low_pc names a new ``.debug_addr`` entry holding 0."""
    return u.low_form != "DW_FORM_addr" and bool(u.low_size)


def _zero_entry(c: _Ctx, out: dict, u) -> bytes:
    """A new last ``.debug_addr`` entry holding 0 (no relocation); the bytes of its index
    in ``u.low_size`` bytes of ``u.low_form`` (ULEB128 padded with continuation bytes)."""
    f = c.facts
    _addr_append(c, out, [None])
    k = f.addr_count
    if ADDRX_FORMS[u.low_form]:
        return k.to_bytes(u.low_size, "little")
    return bytes(0x80 | (k >> 7 * j) & 0x7F for j in range(u.low_size - 1)) + bytes([k >> 7 * (u.low_size - 1)])


def _addr_append(c: _Ctx, out: dict, first: list) -> None:
    """``first`` (None: an entry holding 0) then ``c.addr_extra`` ((section, group,
    offset): relocated) appended to the unit's ``.debug_addr`` table, the last of its section."""
    f = c.facts
    i = f.secs[".debug_addr"]
    data = bytearray(c.obj.sections[i].data)
    rel = _shifted(_rows(c, ".debug_addr"), 0, len(data), 0)
    for e in [*first, *c.addr_extra]:
        if e is not None:
            rel.append(_reloc(c, len(data), *e))
        data += bytes(8)
    h = f.bases[".debug_addr"] - dwarf_ADDR_HEADER
    data[h:h + 4] = (len(data) - h - 4).to_bytes(4, "little")
    _store(c, ".debug_addr", data, rel, out)


def _dwo_lists(c: _Ctx) -> dict[str, bytes]:
    """The ``.dwo``'s lists holding offset pairs from the unit's base (now 0), or from a
    base address now in another new section, appended again to their table, those pairs
    as ``startx_length`` naming new ``.debug_addr`` entries (``c.addr_extra``), the offset
    array pointed at the copies. By section name."""
    f = c.facts
    first = f.addr_count + (1 if c.convert and _zeroed(f.unit) else 0)
    new_secs = {}

    def again(iv):
        return c.convert if iv.unit else iv.entry != (0, 0) and crosses(iv, c.bounds)

    for name, kinds in ((".debug_rnglists", RLE), (".debug_loclists", LLE)):
        todo = sorted(off for (sec, off), ivs in f.dwo_lists.items() if sec == name and any(map(again, ivs)))
        if not todo:
            continue
        data = f.dwo_secs[name]
        new = bytearray(data)
        for off in todo:
            at_new, p = len(new), off
            for iv in f.dwo_lists[(name, off)]:
                if not again(iv):
                    continue
                at, after = iv.entry
                new += data[p:at]
                c.addr_extra.append((iv.sec, c.span(iv.sec, iv.start)[0], iv.start))
                new += bytes([kinds["startx_length"]]) + enc_uleb(first + len(c.addr_extra) - 1)
                new += enc_uleb(iv.end - iv.start)
                p = after
            q = p
            if kinds is LLE:    # (p: the last rewritten entry's expression)
                n, q = uleb(data, p)
                q += n
            end = _list_end(data, q, kinds)
            new += data[p:end]
            for slot in f.dwo_slots[(name, off)]:
                new[slot:slot + 4] = (at_new - dwarf_LIST_HEADER).to_bytes(4, "little")
        new[0:4] = (len(new) - 4).to_bytes(4, "little")
        new_secs[name] = bytes(new)
    return new_secs


def _dwo_output(c: _Ctx, new: dict[str, bytes], out: dict) -> None:
    """The rewritten ``.dwo`` sections: a new ``.dwo`` file at ``obj.dwo_out`` which the
    skeleton's ``DW_AT_dwo_name`` now names."""
    f = c.facts
    c.plan.dwo_file = (c.obj.dwo_out, dwo_file(f.dwo_raw, {k + ".dwo": v for k, v in new.items()}))
    rel_sec, field, str_sec = f.dwo_name_field
    i = f.secs[str_sec]
    strings = out.get(i, c.obj.sections[i].data)
    out[i] = strings + c.obj.dwo_out.encode() + b"\0"
    if rel_sec == ".debug_info":
        info = f.secs[".debug_info"]
        key = ("copy", c.obj.rela_of[info])
        hit = c.relas[key]["r_offset"] == field
        c.relas[key]["r_addend"][hit] = len(strings)
        return
    rows = _rows(c, rel_sec)
    rel = [(o, i_, len(strings) if o == field else a) for o, i_, a in _shifted(rows, 0, 1 << 62, 0)]
    _store(c, rel_sec, c.obj.sections[f.secs[rel_sec]].data, rel, out)


def dwo_file(raw: bytes, new: dict[str, bytes]) -> bytes:
    """ELF file ``raw`` with the contents of the sections named in ``new`` replaced: the
    new bytes appended, their section headers pointed at them (no section is allocated
    in a .dwo: nothing else moves)."""
    from elftools.elf.elffile import ELFFile
    import io
    elf = ELFFile(io.BytesIO(raw))
    shoff, entsize = elf["e_shoff"], elf["e_shentsize"]
    data = bytearray(raw)
    for k, sec in enumerate(elf.iter_sections()):
        if sec.name in new:
            data += bytes(-len(data) % 8)
            h = shoff + k * entsize
            data[h + 24:h + 32] = len(data).to_bytes(8, "little")      # sh_offset (Elf64_Shdr)
            data[h + 32:h + 40] = len(new[sec.name]).to_bytes(8, "little")      # sh_size
            data += new[sec.name]
    return bytes(data)


def _abbrev(data: bytes, table: int, code: int, high_size: int) -> bytes:
    """``.debug_abbrev`` with declaration ``code`` of the table at ``table`` changed:
    ``DW_AT_high_pc`` becomes ``DW_AT_ranges`` (and ``DW_AT_identifier_case``)."""
    p = table
    while True:
        k, p = uleb(data, p)
        if k == 0:
            raise AssertionError(f"abbreviation {code} not found")
        _, p = uleb(data, p)
        p += 1      # DW_CHILDREN_*
        while True:
            at = p
            name, p = uleb(data, p)
            form, p = uleb(data, p)
            if form == DW_FORM_IMPLICIT_CONST:
                _, p = uleb(data, p)
            if name == 0 and form == 0:
                break
            if k == code and name == DW_AT_HIGH_PC:
                spec = enc_uleb(DW_AT_RANGES) + enc_uleb(DW_FORM_SEC_OFFSET)
                if high_size == 8:
                    spec += enc_uleb(DW_AT_IDENTIFIER_CASE) + enc_uleb(DW_FORM_DATA4)
                return data[:at] + spec + data[p:]


ARANGES_HEADER = 16     # unit_length, version, debug_info offset, sizes, padding to 2 * 8


def _aranges(c: _Ctx, out: dict) -> None:
    name = ".debug_aranges"
    data = c.obj.sections[c.facts.secs[name]].data
    orig = c.facts.relocs[name]
    if not any(r.sec in c.splits for r in orig.values()):
        return
    rows = _rows(c, name)
    new, rel, p = bytearray(), [], 0
    while p < len(data):
        length = int.from_bytes(data[p:p + 4], "little")
        end = p + 4 + length
        base = len(new)
        new += data[p:p + ARANGES_HEADER]
        rel += _shifted(rows, p, p + ARANGES_HEADER, base - p)
        for q in range(p + ARANGES_HEADER, end, 16):
            r = orig.get(q)
            n = int.from_bytes(data[q + 8:q + 16], "little")
            if r is None or r.sec not in c.splits:
                rel += _shifted(rows, q, q + 16, len(new) - q)
                new += data[q:q + 16]
                continue
            for g, s, e in c.pieces(r.sec, r.addend, r.addend + n):
                if e == s and n:
                    continue    # (a zero tuple would end the set)
                rel.append(_reloc(c, len(new), r.sec, g, s))
                new += bytes(8) + (e - s).to_bytes(8, "little")
        new[base:base + 4] = (len(new) - base - 4).to_bytes(4, "little")
        p = end
    _store(c, name, new, rel, out)


def _patch_addends(c: _Ctx, sec: int, moves: dict[int, int], rewritten: dict) -> None:
    """Relocations against section ``sec``'s symbol whose addend names a moved table or
    list (``DW_AT_stmt_list``, ``DW_AT_ranges``), in debug sections kept as they are; not
    a unit's ``DW_AT_rnglists_base``/``_loclists_base``, which names the offset array
    (where a list also starts when the array is empty)."""
    syms = c.obj.symbols
    for ri, r in c.obj.relas.items():
        target = c.obj.sections[ri].info
        if target in c.facts.secs.values() and target not in rewritten:
            key = ("copy", ri)
            if key not in c.relas:
                continue
            s = (r["r_info"] >> 32).astype(np.int64)
            hit = (syms["st_shndx"][s] == sec) & ((syms["st_info"][s] & 0xF) == STT_SECTION)
            for j in np.flatnonzero(hit).tolist():
                a = int(r["r_addend"][j])
                if a in moves and (target, int(r["r_offset"][j])) not in c.facts.base_fields:
                    c.relas[key]["r_addend"][j] = moves[a]
