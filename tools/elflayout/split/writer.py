"""Write the split object: the original sections with each split section replaced by
its groups (``.text.<symbol>``, each followed by its ``.rela`` section), a rebuilt
symbol table and retargeted relocations.

Hand-written on purpose: no maintained Python library rewrites relocatable objects
with new sections (pyelftools only reads; LIEF's ET_REL support cannot add sections
with their relocations and symbols consistently; ``objcopy`` can add sections but not
move symbols and relocations into them). The layout follows the gABI: ELF header,
section contents in index order at their alignment, section header table last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from elftools.elf.constants import SH_FLAGS
from elftools.elf.enums import ENUM_E_TYPE, ENUM_ST_INFO_BIND, ENUM_SH_TYPE_BASE

from elflayout import arch
from elflayout.layouts import EHDR64, SHDR64, SYM64, align_up
from elflayout.split import dwarf_write
from elflayout.split.extents import SPLIT_PREFIX, STT
from elflayout.split.plan import R, Plan, SectionPlan
from elflayout.split.reader import RELA64, SHN_LORESERVE

SHT = ENUM_SH_TYPE_BASE
STB_LOCAL = ENUM_ST_INFO_BIND["STB_LOCAL"]
GRP_COMDAT = 1
# File offsets in a relocatable object carry no alignment meaning (sh_addralign is for
# addresses): padding them beyond a page would only grow the file, up to exabytes for a
# damaged alignment.
MAX_FILE_ALIGN = 4096


@dataclass
class _Out:
    name: str
    sh_type: int
    flags: int
    link: int
    info: int
    align: int
    entsize: int
    data: bytes
    size: int


def _align_of(sec_align: int, start: int) -> int:
    """Alignment of a group starting at ``start``: the section's, or less when the
    original offset was less aligned (so an original-order link lays it out identically)."""
    if start == 0:
        return sec_align
    return min(sec_align, start & -start)


def write(plan: Plan) -> bytes:
    """Bytes of the split object described by ``plan`` (which must split something)."""
    obj = plan.obj
    splits = plan.splits
    starts = {i: [sp.units[a].start for a, _ in sp.groups] for i, sp in splits.items()}
    # 1. Symbol table rows (index order) and the old -> new symbol index map.
    rows, mp, grp_sym, nlocal = _symbol_rows(plan, splits)
    # 2. Relocations of every output RELA section.
    relas = _relocations(plan, splits, starts, mp, grp_sym)
    replaced = dwarf_write.rewrite(plan, plan.debug, splits, starts, relas, grp_sym, mp) if plan.debug else {}
    # 3. Section numbering (empty group RELA sections are dropped).
    order, new_index, group_index = _section_order(plan, splits, relas)
    # 4. Symbols: section indexes and values relative to their group.
    symbols = _renumbered_symbols(obj, splits, starts, rows, new_index, group_index)
    # 5. Section contents and headers.
    replaced |= _cleared_fields(splits)
    outs = _section_outputs(obj, splits, order, new_index, group_index, symbols, nlocal, relas, mp, replaced)
    return _layout(obj, outs)


def _cleared_fields(splits: dict) -> dict[int, bytes]:
    """Split AArch64 sections whose new relocations' instruction fields are cleared, as
    an assembler leaves them: linkers may OR the value into the field (RELA addends are
    explicit, the field's old bits would corrupt it)."""
    out = {}
    for t, sp in splits.items():
        data = None
        for nr in sp.new_relocs:
            if not nr.rtype or _group_of(sp, sp.unit_at(nr.field)) == _group_of(sp, nr.target_unit):
                continue
            data = bytearray(sp.sec.data) if data is None else data
            w = int.from_bytes(data[nr.field:nr.field + 4], "little") & ~arch.AARCH64_OBJECT[nr.rtype].mask
            data[nr.field:nr.field + 4] = (w & 0xFFFFFFFF).to_bytes(4, "little")
        if data is not None:
            out[t] = bytes(data)
    return out


def _section_order(plan: Plan, splits: dict, relas: dict) -> tuple[list[tuple], dict[int, int], dict[tuple, int]]:
    """The output sections in order (copies, groups and their RELA sections) and the new
    index of every copied section and every group."""
    obj = plan.obj
    secs = obj.sections
    split_rela = {obj.rela_of[i] for i in splits if i in obj.rela_of}
    order: list[tuple] = []
    for s in secs[1:]:
        if s.index in splits:
            for g in range(len(splits[s.index].groups)):
                order.append(("group", s.index, g))
                if len(relas.get((s.index, g), ())):
                    order.append(("grouprela", s.index, g))
        elif s.index not in split_rela:
            order.append(("copy", s.index))
            if len(relas.get(("new", s.index), ())):
                order.append(("newrela", s.index))
    for name in new_sections(plan):
        order.append(("newsec", name))
        if len(relas.get(("newsec", name), ())):
            order.append(("newsecrela", name))
    if len(order) + 1 >= SHN_LORESERVE:
        raise ValueError("too many sections for standard ELF numbering")
    new_index: dict[int, int] = {0: 0}
    group_index: dict[tuple[int, int], int] = {}
    for k, item in enumerate(order, 1):
        if item[0] == "copy":
            new_index[item[1]] = k
        elif item[0] == "group":
            group_index[(item[1], item[2])] = k
        elif item[0] == "newsec":
            group_index[("new", item[1])] = k
    return order, new_index, group_index


def _renumbered_symbols(obj, splits: dict, starts: dict, rows: list, new_index: dict, group_index: dict) -> np.ndarray:
    """The output symbol table: section indexes renumbered, values relative to their group."""
    secs = obj.sections
    symbols = np.zeros(len(rows), SYM64)
    for k, (i, sg) in enumerate(rows):
        if sg is not None:
            symbols[k]["st_info"] = (STB_LOCAL << 4) | STT["STT_SECTION"]
            symbols[k]["st_shndx"] = group_index[sg]
            if i >= 0:
                symbols[k]["st_name"] = obj.symbols[i]["st_name"]
            continue
        sym = obj.symbols[i].copy()
        s = int(sym["st_shndx"])
        if s in splits:
            sp = splits[s]
            g = _group_of(sp, sp.unit_at(int(sym["st_value"])))
            sym["st_value"] = int(sym["st_value"]) - starts[s][g]
            sym["st_shndx"] = group_index[(s, g)]
        elif 0 < s < SHN_LORESERVE:
            if s not in new_index:
                raise ValueError(f"symbol {obj.sym_names[i]} is defined in relocation section {secs[s].name}")
            sym["st_shndx"] = new_index[s]
        symbols[k] = sym
    return symbols


def _section_outputs(obj, splits: dict, order: list[tuple], new_index: dict, group_index: dict,
                     symbols: np.ndarray, nlocal: int, relas: dict, mp, replaced: dict) -> list:
    """Contents and headers of the output sections, in ``order``."""
    secs = obj.sections
    symtab_new = new_index[obj.symtab_index]
    outs: list[_Out] = [_Out("", SHT["SHT_NULL"], 0, 0, 0, 0, 0, b"", 0)]
    for item in order:
        if item[0] in ("newsec", "newsecrela"):
            outs.append(_new_output(item, replaced, relas, symtab_new, group_index))
            continue
        s = secs[item[1]]
        if item[0] == "copy":
            data, link, info = replaced.get(s.index, s.data), s.link, s.info
            if s.sh_type == SHT["SHT_SYMTAB"]:
                data, link, info = symbols.tobytes(), new_index[s.link], nlocal
            elif s.sh_type == SHT["SHT_RELA"]:
                data, link, info = relas[("copy", s.index)].tobytes(), symtab_new, new_index[s.info]
            elif s.sh_type == SHT["SHT_GROUP"]:
                words = np.frombuffer(s.data, "<u4").copy()
                for w in range(1, len(words)):
                    if int(words[w]) in splits or int(words[w]) not in new_index:
                        raise ValueError(f"group member {secs[int(words[w])].name} was split "
                                         "(or holds relocations of a split section)")
                    words[w] = new_index[int(words[w])]
                data, link, info = words.tobytes(), symtab_new, int(mp[s.info])
            elif s.flags & SH_FLAGS.SHF_LINK_ORDER and s.link:
                link = new_index[s.link]
            outs.append(_Out(s.name, s.sh_type, s.flags, link, info, s.align, s.entsize, data,
                             s.size if s.nobits else len(data)))
            continue
        if item[0] == "newrela":
            data = relas[("new", s.index)].tobytes()
            outs.append(_Out(".rela" + s.name, SHT["SHT_RELA"], SH_FLAGS.SHF_INFO_LINK, symtab_new,
                             new_index[s.index], 8, RELA64.itemsize, data, len(data)))
            continue
        sp = splits[s.index]
        a, b = sp.groups[item[2]]
        start, end = sp.units[a].start, sp.units[b].end
        gname = SPLIT_PREFIX[s.name] + sp.units[a].name
        if item[0] == "group":
            outs.append(_Out(gname, s.sh_type, s.flags, 0, 0, _align_of(s.align, start), s.entsize,
                             b"" if s.nobits else replaced.get(s.index, s.data)[start:end], end - start))
        else:
            rflags = secs[obj.rela_of[s.index]].flags if s.index in obj.rela_of else SH_FLAGS.SHF_INFO_LINK
            data = relas[(s.index, item[2])].tobytes()
            outs.append(_Out(".rela" + gname, SHT["SHT_RELA"], rflags, symtab_new,
                             group_index[(s.index, item[2])], 8, RELA64.itemsize, data, len(data)))
    return outs


def _new_output(item: tuple, replaced: dict, relas: dict, symtab_new: int, group_index: dict) -> _Out:
    """An added debug section (its bytes in ``replaced`` under its name) or its RELA section."""
    kind, name = item
    if kind == "newsec":
        data = replaced[name]
        return _Out(name, SHT["SHT_PROGBITS"], 0, 0, 0, 1, 0, data, len(data))
    data = relas[("newsec", name)].tobytes()
    return _Out(".rela" + name, SHT["SHT_RELA"], SH_FLAGS.SHF_INFO_LINK, symtab_new, group_index[("new", name)], 8,
                RELA64.itemsize, data, len(data))


def _symbol_rows(plan: Plan, splits: dict[int, SectionPlan]):
    """Rows of the new symbol table: ``(old index, None)`` for a kept symbol, ``(old
    index or -1, (section, group))`` for a group's section symbol. A split section's own
    section symbol becomes its first group's; the other groups' follow it (locals must
    precede globals, gABI "Symbol Table")."""
    obj = plan.obj
    old = obj.symbols
    nlocal_old = int(obj.sections[obj.symtab_index].info)
    sect = STT["STT_SECTION"]
    own: dict[int, int] = {}
    for i in range(1, len(old)):
        if (old["st_info"][i] & 0xF) == sect and int(old["st_shndx"][i]) in splits:
            own.setdefault(int(old["st_shndx"][i]), i)
    first_of = {i: s for s, i in own.items()}
    extra = [s for s in splits if s not in own]
    added = [(-1, ("new", name)) for name in new_sections(plan)]     # (their section symbols)
    rows: list[tuple[int, tuple | None]] = []
    for i in range(len(old)):
        if i == nlocal_old:
            rows += [(-1, (s, g)) for s in extra for g in range(len(splits[s].groups))] + added
        if i in first_of:
            s = first_of[i]
            rows.append((i, (s, 0)))
            rows += [(-1, (s, g)) for g in range(1, len(splits[s].groups))]
        else:
            rows.append((i, None))
    if nlocal_old >= len(old):
        rows += [(-1, (s, g)) for s in extra for g in range(len(splits[s].groups))] + added
    mp = np.zeros(len(old), np.int64)
    grp_sym = {}
    nlocal = 0
    for k, (i, sg) in enumerate(rows):
        if i >= 0:
            mp[i] = k
        if sg is not None:
            grp_sym[sg] = k
        if sg is not None or (i >= 0 and (old["st_info"][i] >> 4) == STB_LOCAL):
            nlocal = k + 1
    return rows, mp, grp_sym, nlocal


def new_sections(plan: Plan) -> list[str]:
    """Debug sections the writer adds: a range list section for a unit whose one range
    becomes a list, in an object that had none."""
    f = plan.debug.facts if plan.debug else None
    if f is None or f.unit is None or f.unit.base.sec not in plan.splits:
        return []
    name = f.unit.new_section(f)
    return [name] if name else []


def _group_of(sp: SectionPlan, unit: int) -> int:
    lo, hi = 0, len(sp.groups) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sp.groups[mid][0] <= unit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _relocations(plan: Plan, splits: dict[int, SectionPlan], starts: dict, mp: np.ndarray, grp_sym: dict) -> dict:
    """RELA records per output: ``("copy", rela index)`` or ``(split section, group)``."""
    obj = plan.obj
    fixes: dict[int, list] = {}
    for f in plan.fixes:
        fixes.setdefault(f.rela_index, []).append(f)
    out = {}
    for ri, r in obj.relas.items():
        r = r.copy()
        sym = mp[(r["r_info"] >> 32).astype(np.int64)]
        typ = (r["r_info"] & 0xFFFFFFFF).astype(np.int64)
        add = r["r_addend"].copy()
        for f in fixes.get(ri, ()):
            sp = splits.get(f.sec)
            if sp is None:
                continue
            g = _group_of(sp, f.unit)
            sym[f.j] = grp_sym[(f.sec, g)]
            add[f.j] -= starts[f.sec][g]
        r["r_info"] = (sym.astype(np.uint64) << np.uint64(32)) | typ.astype(np.uint64)
        r["r_addend"] = add
        t = obj.sections[ri].info
        if t not in splits:
            out[("copy", ri)] = r
            continue
        sp = splits[t]
        offs = r["r_offset"].astype(np.int64)
        gstart = np.array(starts[t], np.int64)
        g_of = np.searchsorted(gstart, offs, "right") - 1
        for g in range(len(sp.groups)):
            part = r[g_of == g].copy()
            part["r_offset"] -= np.uint64(gstart[g])
            out[(t, g)] = part
    for t, sp in splits.items():
        extra = []
        for nr in sp.new_relocs:
            gs = _group_of(sp, sp.unit_at(nr.field))
            gt = _group_of(sp, nr.target_unit)
            if gs == gt:
                continue
            add = nr.addend_in_unit + sp.units[nr.target_unit].start - starts[t][gt]
            info = (grp_sym[(t, gt)] << 32) | (nr.rtype or R["R_X86_64_PC32"])
            extra.append((gs, nr.field - starts[t][gs], info, add))
        for g in range(len(sp.groups)):
            mine = [(o, i, a) for gs, o, i, a in extra if gs == g]
            cur = out.get((t, g), np.zeros(0, RELA64))
            if mine:
                cur = np.concatenate([cur, np.array(mine, RELA64)])
                cur = cur[np.argsort(cur["r_offset"], kind="stable")]
            out[(t, g)] = cur
    return out


def _layout(obj, outs: list[_Out]) -> bytes:
    """ELF header, contents in index order, section headers; section names in a new .shstrtab."""
    names = bytearray(b"\0")
    name_off = {}
    shstr_old = None
    for o in outs[1:]:
        if o.sh_type == SHT["SHT_STRTAB"] and o.name == ".shstrtab":
            shstr_old = o
    if shstr_old is None:
        shstr_old = _Out(".shstrtab", SHT["SHT_STRTAB"], 0, 0, 0, 1, 0, b"", 0)
        outs.append(shstr_old)
    for o in outs[1:]:
        if o.name not in name_off:
            name_off[o.name] = len(names)
            names += o.name.encode("utf-8", "surrogateescape") + b"\0"
    shstr_old.data = bytes(names)
    shstr_old.size = len(names)
    buf = bytearray(EHDR64.itemsize)
    hdrs = np.zeros(len(outs), SHDR64)
    for k, o in enumerate(outs[1:], 1):
        nobits = o.sh_type == SHT["SHT_NOBITS"]
        off = align_up(len(buf), max(1, min(o.align, MAX_FILE_ALIGN)))
        if not nobits:
            buf += b"\0" * (off - len(buf))
            buf += o.data
        h = hdrs[k]
        h["sh_name"], h["sh_type"], h["sh_flags"] = name_off[o.name], o.sh_type, o.flags
        h["sh_offset"], h["sh_size"], h["sh_link"], h["sh_info"] = off, o.size, o.link, o.info
        h["sh_addralign"], h["sh_entsize"] = o.align, o.entsize
    shoff = align_up(len(buf), 8)
    buf += b"\0" * (shoff - len(buf))
    buf += hdrs.tobytes()
    shstrndx = next(k for k, o in enumerate(outs) if o is shstr_old)
    eh = np.zeros(1, EHDR64)
    eh["e_ident"] = np.frombuffer(obj.raw, np.uint8, count=16)
    eh["e_machine"] = np.frombuffer(obj.raw, EHDR64, count=1)["e_machine"]
    eh["e_type"], eh["e_version"], eh["e_shoff"], eh["e_flags"] = ENUM_E_TYPE["ET_REL"], 1, shoff, obj.e_flags
    eh["e_ehsize"], eh["e_shentsize"] = EHDR64.itemsize, SHDR64.itemsize
    eh["e_shnum"], eh["e_shstrndx"] = len(outs), shstrndx
    buf[:EHDR64.itemsize] = eh.tobytes()
    return bytes(buf)
