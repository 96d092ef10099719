"""Hot strings: move the string literals a workload reads into a mergeable pool of their own.

Linkers merge ``SHF_MERGE|SHF_STRINGS`` input sections per output section into one pool
(lld: one ``MergeSyntheticSection`` per output section, flags, entsize and alignment,
spread over 32 hash shards), so no input order groups the few strings start-up reads: a
pool is read whole once a few of its strings are. This pre-link rewrite copies each hot
string piece (a NUL-terminated string, as the linker splits the section) of an object
into a new section ``.rodata.hotstr<entsize>.<align>`` with the same flags, entsize and
alignment, and the object's symbols that name it follow; the old section keeps the
rest. A link script puts ``*(.rodata.hotstr*)`` in an output section of its own
(``order --data-script``), where the hot pieces of every object form one small pool;
without such a script the new sections join ``.rodata`` and the pool is as before.

What is rewritten, and what is left as it is (never a wrong output):
- a string section is rewritten only when every reference to it goes through a symbol
  or its section symbol (section + addend, the linker finds the piece by the addend):
  a relocation section of its own, a COMDAT group holding it or a section linked to it
  leaves it whole;
- a piece reached by section + addend moves on x86-64 when the object can take a new
  local section symbol for its pool (inserted after the other local symbols, later
  symbol indexes shifted in relocations and group signatures); else it stays;
- a piece named by a global or weak symbol stays where it is;
- only string contents (the set ``hot``) move, all copies of a content in an object
  together, so two references that shared a piece still do; merging less than before
  (a hot and a cold copy of one content) is allowed: C and C++ do not promise equal
  literals one address.

Which strings are hot: those a run read (``profile --strings`` records them byte by
byte, ``recorded_strings``), else a static approximation, the strings relocations of the
sections that ran reach (``static_hot_strings``).

``check_object`` proves each rewritten object against its original (every other byte,
header and relocation the same; every symbol names the same content at the same place
in its piece) independently of the writer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elflayout.errors import ElflayoutError
# the hot-strings file and the strings a run read: profile records them too (a lower stage)
from elflayout.stringsets import (MAX_STRING, format_strings, read_strings_file,  # noqa: F401
                                  recorded_strings, strings_in)
from elflayout.layouts import EHDR64, SHDR64, SYM64, align_up
from elflayout.split.reader import SHN_LORESERVE, SHT, ObjectFile, read_object

HOT_PREFIX = ".rodata.hotstr"
OBJECT = "(object)"     # ObjectReport.kept's key for the whole object
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHF_MERGE, SHF_STRINGS, SHF_LINK_ORDER, SHF_GROUP = 0x10, 0x20, 0x80, 0x200
STB_LOCAL = 0
STT_SECTION = 3
SHN_UNDEF = 0
# section types holding symbol indexes other than RELA and GROUP: a rewrite that inserts
# symbols leaves objects with them as they are
SHT_SYMTAB_SHNDX, SHT_LLVM_ADDRSIG, SHT_LLVM_CALL_GRAPH_PROFILE = 18, 0x6FFF4C03, 0x6FFF4C09


def hot_name(entsize: int, align: int) -> str:
    """The hot pool's section name: never matched by ``.rodata.str*`` patterns."""
    return f"{HOT_PREFIX}{entsize}.{align}"


def string_pieces(data: bytes, entsize: int) -> list[tuple[int, int]]:
    """``(start, end)`` of each string as the linker splits a SHF_STRINGS section: up to
    and including the first all-zero unit of ``entsize`` bytes. ValueError when the last
    one is not terminated (the linker refuses such a section)."""
    if entsize == 1:
        if data and data[-1]:
            raise ValueError("string not NUL-terminated")
        ends = np.cumsum([len(p) + 1 for p in data.split(b"\0")[:-1]]).tolist()
        return list(zip([0, *ends[:-1]], ends))
    out, pos, zero = [], 0, b"\0" * entsize
    while pos < len(data):
        end = pos
        while end + entsize <= len(data) and data[end:end + entsize] != zero:
            end += entsize
        if end + entsize > len(data):
            raise ValueError("string not NUL-terminated")
        out.append((pos, end + entsize))
        pos = end + entsize
    return out


# hot_left of an object left as it is: every string pool of it may hold a hot piece
ALL_POOLS = ".rodata.str*"


@dataclass
class ObjectReport:
    name: str
    moved_pieces: int = 0
    moved_bytes: int = 0
    pinned_pieces: int = 0                              # hot, but reached by section + addend or a global
    pinned_bytes: int = 0
    addend_pieces: int = 0                              # moved pieces reached by section + addend
    sections: int = 0                                   # string sections split
    kept: dict[str, str] = field(default_factory=dict)  # section -> why left whole
    hot_left: set[str] = field(default_factory=set)     # string sections still holding a hot piece


def _eligible(obj: ObjectFile, sec) -> str | None:
    """Why the string section ``sec`` must be left whole, else None."""
    if sec.sh_type != SHT["SHT_PROGBITS"] or sec.entsize not in (1, 2, 4) or sec.size % sec.entsize:
        return "not a plain string table"
    if sec.flags & (SHF_WRITE | SHF_EXECINSTR | SHF_GROUP | SHF_LINK_ORDER) or not sec.flags & SHF_ALLOC:
        return "flags other than alloc+merge+strings"
    if sec.index in obj.rela_of:
        return "has relocations of its own"
    for s in obj.sections:
        if s.sh_type == SHT["SHT_GROUP"] and sec.index in np.frombuffer(s.data, "<u4")[1:]:
            return "member of a section group"
        if s.flags & SHF_LINK_ORDER and s.link == sec.index:
            return f"{s.name} is linked to it"
    adds = section_addends(obj, sec.index)
    if len(adds) and (adds.min() < 0 or adds.max() >= sec.size):
        return "section + addend outside its strings"
    return None


def section_refs(obj: ObjectFile, index: int) -> dict[int, np.ndarray]:
    """Per RELA section, which of its relocations name section ``index``'s own symbol
    (section + addend: the linker finds the string by the addend)."""
    syms, out = obj.symbols, {}
    for ri, r in obj.relas.items():
        idx = (r["r_info"] >> 32).astype(np.int64)
        hit = (syms["st_shndx"][idx] == index) & ((syms["st_info"][idx] & 0xF) == STT_SECTION)
        if hit.any():
            out[ri] = np.flatnonzero(hit)
    return out


def section_addends(obj: ObjectFile, index: int) -> np.ndarray:
    refs = section_refs(obj, index)
    return np.concatenate([obj.relas[ri]["r_addend"][w] for ri, w in refs.items()]) if refs else np.zeros(0, np.int64)


def _pieces_of(obj: ObjectFile, sec) -> tuple[list[tuple[int, int]], np.ndarray] | str:
    """The section's pieces and, per symbol defined in it, its piece (or why not)."""
    try:
        pieces = string_pieces(sec.data, sec.entsize)
    except ValueError as e:
        return str(e)
    # the section symbol stays (no relocation uses it: ``_eligible``)
    mine = np.flatnonzero((obj.symbols["st_shndx"] == sec.index) & ((obj.symbols["st_info"] & 0xF) != STT_SECTION))
    starts = np.array([a for a, _ in pieces], dtype=np.int64)
    vals = obj.symbols["st_value"][mine].astype(np.int64)
    if len(mine) and (vals >= sec.size).any():
        return "a symbol past its last string"
    which = np.searchsorted(starts, vals, side="right") - 1
    return pieces, np.stack([mine, which]) if len(mine) else np.zeros((2, 0), np.int64)


def can_add_symbols(obj: ObjectFile) -> bool:
    """Whether a local section symbol can be inserted (``rewrite_object``'s by-addend
    moves): x86-64, locals before globals as the gABI asks, and no section other than
    RELA and GROUP indexing symbols."""
    if obj.aarch64 or not obj.symtab_index or _indexes_symbols(obj):
        return False
    first = obj.sections[obj.symtab_index].info
    bind = obj.symbols["st_info"] >> 4
    return 0 < first <= len(obj.symbols) and not (bind[:first] != STB_LOCAL).any() \
        and not (bind[first:] == STB_LOCAL).any()


def _indexes_symbols(obj: ObjectFile) -> str | None:
    """A section other than RELA and GROUP naming symbols by index, if any. An
    address-significance table with sh_link 0 (left so by ``strip``/``objcopy``) is one
    every linker ignores, so its stale indexes are harmless."""
    for s in obj.sections:
        if s.sh_type in (SHT_SYMTAB_SHNDX, SHT_LLVM_CALL_GRAPH_PROFILE) or s.sh_type == SHT_LLVM_ADDRSIG and s.link:
            return s.name
    return None


def plan_section(obj: ObjectFile, sec, hot, by_addend: bool = False) -> tuple[list[int], list[int], str | None]:
    """Pieces of ``sec`` whose content is in ``hot``: those to move and those that must
    stay (``pinned``), or why the section stays whole. ``by_addend``: pieces reached by
    section + addend may move (the caller gives the pool a section symbol)."""
    why = _eligible(obj, sec)
    if why:
        return [], [], why
    got = _pieces_of(obj, sec)
    if isinstance(got, str):
        return [], [], got
    pieces, owner = got
    starts = np.array([a for a, _ in pieces], dtype=np.int64)
    pinned = set() if by_addend else \
        set((np.searchsorted(starts, section_addends(obj, sec.index), side="right") - 1).tolist())
    for si, pi in owner.T.tolist():
        if int(obj.symbols["st_info"][si]) >> 4 != STB_LOCAL:
            pinned.add(pi)
    pinned |= {k for k, (a, _) in enumerate(pieces) if a % sec.align}
    want = [k for k, (a, b) in enumerate(pieces) if b - a > sec.entsize and sec.data[a:b] in hot]
    # copies of one content move together or not at all: references that shared a string still do
    stay = {sec.data[slice(*pieces[k])] for k in pinned}
    mv = [k for k in want if sec.data[slice(*pieces[k])] not in stay]
    return mv, [k for k in want if k not in set(mv)], None


def _pack(data: bytes, pieces, keep, align: int) -> tuple[bytes, dict[int, int]]:
    """The pieces ``keep`` laid out in order, each at the next offset with its old
    alignment remainder (zero units fill the gaps: empty strings to the linker)."""
    out, where = bytearray(), {}
    for k in keep:
        a, b = pieces[k]
        pos = align_up(len(out) - a % align, align) + a % align if align > 1 else len(out)
        out += b"\0" * (pos - len(out))
        where[k] = pos
        out += data[a:b]
    return bytes(out), where


def rewrite_object(raw: bytes, name: str, hot, by_addend: bool = False) -> tuple[bytes, ObjectReport]:
    """``raw`` with the pieces whose content is in ``hot`` moved into hot pools (``raw``
    itself when nothing moves). ``hot``: a set of piece contents, terminator included;
    ``by_addend``: pieces reached by section + addend move too where the object allows.
    An object this cannot read (bitcode, another machine) or whose rewrite is not proved
    is returned as it is, the reason in ``kept[OBJECT]``."""
    rep = ObjectReport(name)
    try:
        obj = read_object(raw, name)
    except ElflayoutError as e:
        rep.kept[OBJECT] = f"not rewritten: {str(e).removeprefix(name + ': ')}"
        rep.hot_left = {ALL_POOLS}
        return raw, rep
    by_addend = by_addend and can_add_symbols(obj)
    syms = obj.symbols.copy()
    changed, new_secs, relas, redirect = {}, [], {}, []
    for sec in obj.sections:
        if not (sec.flags & SHF_MERGE and sec.flags & SHF_STRINGS and sec.flags & SHF_ALLOC) or not sec.size:
            continue    # .comment and the like: never loaded
        mv, pin, why = plan_section(obj, sec, hot, by_addend)
        if why:
            rep.kept[sec.name] = why
        # wide strings (L"..."): a set of strings read names none of them
        if pin or why and _holds(sec, hot) or sec.entsize > 1:
            rep.hot_left.add(sec.name)
        if not (mv or pin):
            continue
        pieces, owner = _pieces_of(obj, sec)
        rep.pinned_pieces += len(pin)
        rep.pinned_bytes += sum(pieces[k][1] - pieces[k][0] for k in pin)
        if not mv:
            continue
        moved = set(mv)
        cold, cold_at = _pack(sec.data, pieces, [k for k in range(len(pieces)) if k not in moved], sec.align)
        hotd, hot_at = _pack(sec.data, pieces, mv, sec.align)
        new_index = len(obj.sections) + len(new_secs)
        for si, pi in owner.T.tolist():
            at, ndx = (hot_at, new_index) if pi in moved else (cold_at, sec.index)
            syms["st_value"][si] = at[pi] + int(obj.symbols["st_value"][si]) - pieces[pi][0]
            syms["st_shndx"][si] = ndx
        hits = _follow_addends(obj, sec.index, pieces, moved, cold_at, hot_at, relas)
        if hits:
            redirect.append((new_index, hits))
            rep.addend_pieces += len({int(k) for w in hits.values() for k in w[1]})
        changed[sec.index] = cold
        new_secs.append((sec, hotd))
        rep.sections += 1
        rep.moved_pieces += len(mv)
        rep.moved_bytes += sum(pieces[k][1] - pieces[k][0] for k in mv)
    if not new_secs:
        return raw, rep
    if len(obj.sections) + len(new_secs) >= SHN_LORESERVE:
        return raw, _refused(rep, "too many sections for standard ELF numbering")
    syms = _insert_section_symbols(obj, syms, relas, redirect)
    out = _write(obj, syms, changed, new_secs, relas, len(redirect))
    try:
        check_object(raw, out, name, hot)
    except ElflayoutError as e:
        return raw, _refused(rep, str(e).removeprefix(name + ": "))
    return out, rep


def _holds(sec, hot) -> bool:
    """Whether a string section holds a piece of ``hot``."""
    try:
        return any(sec.data[a:b] in hot for a, b in string_pieces(sec.data, max(sec.entsize, 1)))
    except ValueError:
        return True     # not split as the linker would: it may hold one


def _refused(rep: ObjectReport, why: str) -> ObjectReport:
    rep.kept[OBJECT] = why
    rep.hot_left = {ALL_POOLS}
    rep.moved_pieces = rep.moved_bytes = rep.sections = rep.addend_pieces = 0
    return rep


def _follow_addends(obj: ObjectFile, index: int, pieces, moved: set, cold_at: dict, hot_at: dict,
                    relas: dict) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Section + addend relocations of string section ``index`` follow their piece: a
    kept piece's addend into the repacked section, a moved piece's into the pool (those
    are returned, {RELA section: (relocation indexes, pieces)}, for the pool's symbol)."""
    starts = np.array([a for a, _ in pieces], dtype=np.int64)
    is_moved = np.zeros(len(pieces), dtype=bool)
    is_moved[list(moved)] = True
    # each piece's new offset: in the pool when moved, else in the repacked section
    new_at = np.array([(hot_at if is_moved[k] else cold_at).get(k, -1) for k in range(len(pieces))], dtype=np.int64)
    hits = {}
    for ri, w in section_refs(obj, index).items():
        r = relas.setdefault(ri, obj.relas[ri].copy())
        add = obj.relas[ri]["r_addend"][w]
        pk = np.searchsorted(starts, add, side="right") - 1
        if (pk < 0).any() or (new_at[pk] < 0).any():
            raise KeyError("a relocation names a string piece with no new place")
        into = is_moved[pk]
        r["r_addend"][w] = new_at[pk] + add - starts[pk]
        if into.any():
            hits[ri] = (w[into], pk[into])
    return hits


def _insert_section_symbols(obj: ObjectFile, syms: np.ndarray, relas: dict, redirect: list) -> np.ndarray:
    """The symbol table with a local section symbol for each pool in ``redirect``
    (after the other locals: later indexes shift by as many) and every relocation's
    symbol index shifted; ``redirect``'s relocations name their pool's symbol."""
    if not redirect:
        return syms
    first, k = obj.sections[obj.symtab_index].info, len(redirect)
    new = np.zeros(k, syms.dtype)
    new["st_info"] = (STB_LOCAL << 4) | STT_SECTION
    new["st_shndx"] = [ndx for ndx, _ in redirect]
    for ri in obj.relas:
        r = relas.setdefault(ri, obj.relas[ri].copy())
        sym = r["r_info"] >> np.uint64(32)
        shifted = np.where(sym >= first, sym + np.uint64(k), sym)
        r["r_info"] = (shifted << np.uint64(32)) | (r["r_info"] & np.uint64(0xFFFFFFFF))
    for j, (_, hits) in enumerate(redirect):
        for ri, (w, _) in hits.items():
            r = relas[ri]
            r["r_info"][w] = (np.uint64(first + j) << np.uint64(32)) | (r["r_info"][w] & np.uint64(0xFFFFFFFF))
    return np.concatenate([syms[:first], new, syms[first:]])


def _write(obj: ObjectFile, syms: np.ndarray, changed: dict, new_secs: list, relas: dict, added: int = 0) -> bytes:
    """The original bytes with changed sections rewritten in place (they only shrink),
    changed relocation tables in place, the symbol table in place (or, when ``added``
    symbols were inserted after the locals, after the end, with group signatures
    following), and after the end the hot sections, a longer section name table and a
    new section header table (old indexes kept, new ones appended)."""
    raw = obj.raw
    eh = np.frombuffer(raw, EHDR64, 1).copy()
    shdrs = np.frombuffer(raw, SHDR64, len(obj.sections), int(eh["e_shoff"][0])).copy()
    buf = bytearray(raw)
    for i, data in changed.items():
        off, size = int(shdrs[i]["sh_offset"]), int(shdrs[i]["sh_size"])
        buf[off:off + size] = data + b"\0" * (size - len(data))
        shdrs[i]["sh_size"] = len(data)
    for i, table in [*([] if added else [(obj.symtab_index, syms)]), *relas.items()]:
        off = int(shdrs[i]["sh_offset"])
        buf[off:off + table.nbytes] = table.tobytes()
    if added:
        st = shdrs[obj.symtab_index]
        first = int(st["sh_info"])
        for g in obj.sections:
            if g.sh_type == SHT["SHT_GROUP"] and shdrs[g.index]["sh_info"] >= first:
                shdrs[g.index]["sh_info"] += added
        buf += b"\0" * (align_up(len(buf), 8) - len(buf))
        st["sh_offset"], st["sh_size"], st["sh_info"] = len(buf), syms.nbytes, first + added
        shdrs[obj.symtab_index] = st
        buf += syms.tobytes()
    strndx = int(eh["e_shstrndx"][0])
    shstr = bytearray(obj.sections[strndx].data)
    rows = []
    for sec, data in new_secs:
        buf += b"\0" * (align_up(len(buf), sec.align) - len(buf))
        row = shdrs[sec.index].copy()
        row["sh_name"] = len(shstr)
        shstr += hot_name(sec.entsize, sec.align).encode() + b"\0"
        row["sh_offset"], row["sh_size"] = len(buf), len(data)
        buf += data
        rows.append(row)
    shdrs[strndx]["sh_offset"], shdrs[strndx]["sh_size"] = len(buf), len(shstr)
    buf += shstr
    buf += b"\0" * (align_up(len(buf), 8) - len(buf))
    eh["e_shoff"], eh["e_shnum"] = len(buf), len(shdrs) + len(rows)
    buf += shdrs.tobytes() + np.array(rows, SHDR64).tobytes()
    buf[:EHDR64.itemsize] = eh.tobytes()
    return bytes(buf)


def _seen(obj: ObjectFile, si: int, cache: dict) -> tuple:
    """What symbol ``si`` names as the linker sees it: (its piece's content, offset in
    it) in a string section, else (section, value)."""
    s = obj.symbols[si]
    ndx = int(s["st_shndx"])
    sec = obj.sections[ndx] if 0 < ndx < len(obj.sections) else None
    if sec is None or not (sec.flags & SHF_MERGE and sec.flags & SHF_STRINGS) or (s["st_info"] & 0xF) == STT_SECTION:
        return ("section", ndx, int(s["st_value"]))
    return ("string", sec.flags, sec.entsize, sec.align, *_piece_view(obj, ndx, int(s["st_value"]), cache))


def check_object(orig: bytes, new: bytes, name: str, hot=None) -> None:
    """Prove ``new`` links as ``orig`` does, up to where hot strings sit: raise
    ElflayoutError (an internal error: the writer is wrong) otherwise."""
    try:
        _check(read_object(orig, name), read_object(new, f"{name} (hot strings)"), hot)
    except (ValueError, ElflayoutError) as e:
        raise ElflayoutError(f"{name}: hot-strings rewrite not proved ({e})") from None


def _check(a: ObjectFile, b: ObjectFile, hot) -> None:
    n = len(a.sections)
    if len(b.sections) < n or a.symtab_index != b.symtab_index:
        raise ValueError("sections renumbered")
    old = _symbol_map(a, b, n)
    fwd = np.flatnonzero(old >= 0)        # a's symbol i is b's fwd[i]
    strndx = np.frombuffer(a.raw, EHDR64, 1)["e_shstrndx"][0]
    for x, y in zip(a.sections, b.sections):
        info = x.info + len(b.symbols) - len(a.symbols) if x.index == a.symtab_index else \
            int(fwd[x.info]) if x.sh_type == SHT["SHT_GROUP"] and x.info < len(fwd) else x.info
        same = (x.name, x.sh_type, x.flags, x.link, info, x.align, x.entsize) == \
               (y.name, y.sh_type, y.flags, y.link, y.info, y.align, y.entsize)
        if not same:
            raise ValueError(f"section {x.index} header changed")
        strings = x.flags & SHF_MERGE and x.flags & SHF_STRINGS
        if x.index == strndx:
            if not y.data.startswith(x.data):
                raise ValueError("section names changed")
        elif x.index != a.symtab_index and x.sh_type != SHT["SHT_RELA"] and not strings and x.data != y.data:
            raise ValueError(f"section {x.name} content changed")
        if strings and x.data != y.data:
            string_pieces(y.data, y.entsize)
    kinds = {(x.flags, x.entsize, x.align) for x in a.sections if x.flags & SHF_MERGE and x.flags & SHF_STRINGS}
    for y in b.sections[n:]:
        if (y.flags, y.entsize, y.align) not in kinds or y.sh_type != SHT["SHT_PROGBITS"] \
                or y.name != hot_name(y.entsize, y.align) or y.link or y.info:
            raise ValueError(f"added section {y.name} is not a hot string pool")
        pieces = string_pieces(y.data, y.entsize)
        if hot is not None and any(y.data[p:q] not in hot and y.data[p:q] != b"\0" * y.entsize for p, q in pieces):
            raise ValueError(f"{y.name} holds a string not asked for")
    kept = old >= 0
    if a.sym_names != [nm for nm, k in zip(b.sym_names, kept) if k]:
        raise ValueError("symbol names changed")
    for f in ("st_name", "st_info", "st_other", "st_size"):
        if not np.array_equal(a.symbols[f], b.symbols[f][kept]):
            raise ValueError(f"symbol field {f} changed")
    ca, cb = {}, {}
    for si, sj in enumerate(np.flatnonzero(kept).tolist()):
        if si and _seen(a, si, ca) != _seen(b, sj, cb):
            raise ValueError(f"symbol {a.sym_names[si]!r} names another string")
    _check_relocs(a, b, old, ca, cb)


def _symbol_map(a: ObjectFile, b: ObjectFile, n: int) -> np.ndarray:
    """Per symbol of ``b``, its index in ``a``, or -1 for an inserted one: only local
    section symbols of added pools, right after ``a``'s locals, may be inserted."""
    k = len(b.symbols) - len(a.symbols)
    old = np.arange(len(b.symbols), dtype=np.int64)
    if not k:
        return old
    first = a.sections[a.symtab_index].info if a.symtab_index else 0
    if k < 0 or not 0 < first <= len(a.symbols):
        raise ValueError("symbol table changed")
    if _indexes_symbols(b):
        raise ValueError(f"symbols inserted under {_indexes_symbols(b)}, which indexes them")
    new = b.symbols[first:first + k]
    if (new["st_info"] != (STB_LOCAL << 4 | STT_SECTION)).any() or new["st_name"].any() or new["st_value"].any() \
            or new["st_size"].any() or new["st_other"].any() or (new["st_shndx"] < n).any() \
            or len(set(new["st_shndx"].tolist())) != k or (new["st_shndx"] >= len(b.sections)).any():
        raise ValueError("inserted symbols are not section symbols of added pools")
    old[first:first + k] = -1
    old[first + k:] -= k
    return old


def _check_relocs(a: ObjectFile, b: ObjectFile, old: np.ndarray, ca: dict, cb: dict) -> None:
    """The same relocations (symbol indexes through ``old``); an addend differs, or a
    string table changed under it, only where it names a string by section + addend
    and still names the same place in the same string, maybe through an added pool's
    section symbol."""
    if a.rela_of != b.rela_of:
        raise ValueError("relocation sections changed")
    changed = {x.index for x, y in zip(a.sections, b.sections)
               if x.flags & SHF_MERGE and x.flags & SHF_STRINGS and x.data != y.data}
    # symbols through which an addend names a string of a changed table
    by_addend = ((a.symbols["st_info"] & 0xF) == STT_SECTION) & np.isin(a.symbols["st_shndx"], list(changed))
    for k, ra in a.relas.items():
        rb = b.relas[k]
        where = a.sections[a.sections[k].info].name
        if len(ra) != len(rb) or not (np.array_equal(ra["r_offset"], rb["r_offset"])
                                      and np.array_equal(ra["r_info"] & 0xFFFFFFFF, rb["r_info"] & 0xFFFFFFFF)):
            raise ValueError(f"relocations of {where} changed")
        sym = (ra["r_info"] >> 32).astype(np.int64)
        symb = old[(rb["r_info"] >> 32).astype(np.int64)]
        look = by_addend[sym]
        if ((ra["r_addend"] != rb["r_addend"]) & ~look).any() or ((symb != sym) & ~look).any():
            raise ValueError(f"an addend of {where} changed")
        for j in np.flatnonzero(look).tolist():
            ndx = int(a.symbols["st_shndx"][sym[j]])
            nb = ndx if symb[j] >= 0 else int(b.symbols["st_shndx"][int(rb["r_info"][j] >> 32)])
            if symb[j] >= 0 and symb[j] != sym[j] or \
                    _piece_view(a, ndx, int(ra["r_addend"][j]), ca) != _piece_view(b, nb, int(rb["r_addend"][j]), cb):
                raise ValueError(f"a relocation of {where} names another string")


def _piece_view(obj: ObjectFile, ndx: int, off: int, cache: dict) -> tuple[bytes, int]:
    """(content of the string holding offset ``off`` of section ``ndx``, ``off`` in it)."""
    sec = obj.sections[ndx]
    if ndx not in cache:
        pieces = string_pieces(sec.data, sec.entsize)
        cache[ndx] = (np.array([p for p, _ in pieces], dtype=np.int64), pieces)
    starts, pieces = cache[ndx]
    k = int(np.searchsorted(starts, off, side="right")) - 1
    if k < 0 or not pieces[k][0] <= off < pieces[k][1]:
        raise ValueError(f"offset {off} of {sec.name} outside every string")
    p, q = pieces[k]
    return sec.data[p:q], off - p


# -- which strings are hot ---------------------------------------------------------------------

def referenced_strings(raw: bytes, name: str, sections=None, by_addend: bool = False) -> set[bytes]:
    """Contents of the string pieces that relocations in ``sections`` (input section
    names; None: all) reach through symbols (``by_addend``: and through section +
    addend, as data tables do): the static approximation of the strings code that ran
    may read."""
    obj = read_object(raw, name)
    out, cache = set(), {}
    strings = {s.index for s in obj.sections if s.flags & SHF_MERGE and s.flags & SHF_STRINGS}
    for target, ri in obj.rela_of.items():
        if sections is not None and obj.sections[target].name not in sections:
            continue
        r = obj.relas[ri]
        for si in np.unique(r["r_info"] >> 32).tolist():
            s = obj.symbols[si]
            if by_addend and (s["st_info"] & 0xF) == STT_SECTION and int(s["st_shndx"]) in strings:
                for add in np.unique(r["r_addend"][(r["r_info"] >> 32) == si]).tolist():
                    try:
                        out.add(_piece_view(obj, int(s["st_shndx"]), int(add), cache)[0])
                    except ValueError:
                        continue
                continue
            try:
                seen = _seen(obj, int(si), cache)
            except ValueError:
                continue
            if seen[0] == "string":
                out.add(seen[4])
    return out


def hot_sections(layout) -> dict[str, set[str]]:
    """Input sections that ran or were touched, by object (link-map names:
    ``archive(member)`` or a path), from an ordering's ``Layout``."""
    out: dict[str, set[str]] = {}
    for r in layout.functions:
        for sec, ob in zip(r.sections, r.objects):
            if ob and not ob.startswith("<"):
                out.setdefault(ob, set()).add(sec)
    for sec, ob in layout.data:
        if ob and not ob.startswith("<"):
            out.setdefault(ob, set()).add(sec)
    return out


def _by_file(objects) -> dict[str, set[str] | None]:
    """Link-map object names grouped by file: archive -> its members; object -> None."""
    out: dict[str, set[str] | None] = {}
    for ob in objects:
        if ob.endswith(")") and "(" in ob:
            a, m = ob[:-1].split("(", 1)
            out.setdefault(a, set()).add(m)
        else:
            out[ob] = None
    return out


def static_hot_strings(sections: dict[str, set[str]], by_addend: bool = False) -> set[bytes]:
    """The static approximation: strings that relocations of the sections that ran
    (``hot_sections``) reach, read from the objects and archive members themselves
    (``by_addend``: by section + addend too)."""
    from elflayout.split import archive

    out: set[bytes] = set()
    for path, members in _by_file(sections).items():
        try:
            raw = Path(path).read_bytes()
        except OSError as e:
            raise ElflayoutError(f"{path}: cannot read ({e.strerror})") from None
        if members is None:
            out |= referenced_strings(raw, path, sections[path], by_addend)
            continue
        for mname, body in archive.read_archive(raw, path):
            if mname in members and body[:4] == b"\x7fELF":
                out |= referenced_strings(body, f"{path}({mname})", sections[f"{path}({mname})"], by_addend)
    return out


def rewrite_members(members: list[tuple[str, bytes]], archive_name: str, hot, only=None,
                    by_addend: bool = False) -> tuple[list, list[ObjectReport]]:
    """``rewrite_object`` over an archive's members (those named in ``only``; None: all), in order."""
    out, reps = [], []
    for mname, body in members:
        if body[:4] != b"\x7fELF" or only is not None and mname not in only:
            out.append((mname, body))
            continue
        b, rep = rewrite_object(body, f"{archive_name}({mname})", hot, by_addend)
        out.append((mname, b))
        reps.append(rep)
    return out, reps


def rewrite_inputs(paths, outdir, hot, only=None, by_addend: bool = False) -> tuple[dict[str, Path], dict]:
    """Each object or archive of ``paths`` with its pieces of ``hot`` moved
    (``rewrite_object``) into ``outdir/<key>/<same name>`` (key: the hot set), members
    in order; ``only``: link-map object names (``archive(member)``, paths) to rewrite,
    None: all. Returns {input: rewritten path} for the inputs that changed, and totals."""
    from elflayout.fileio import atomic_output
    from elflayout.split import archive

    only_by = _by_file(only) if only is not None else None
    key = hashlib.sha256(b"".join(sorted(hot)) + (b"\0by addend" if by_addend else b"")).hexdigest()[:12]
    res, tot = {}, {"objects": 0, "objects_changed": 0, "moved_pieces": 0, "moved_bytes": 0, "pinned_pieces": 0,
                    "pinned_bytes": 0, "addend_pieces": 0, "kept": {}, "hot_left": {}}
    for k, p in enumerate(map(Path, paths)):
        if only_by is not None and str(p) not in only_by:
            continue
        raw = p.read_bytes()
        members = archive.read_archive(raw, str(p)) if archive.is_archive(raw) else None
        if members is None:
            new, reps = rewrite_object(raw, str(p), hot, by_addend)
            reps = [reps]
        else:
            want = only_by.get(str(p)) if only_by is not None else None
            new, reps = rewrite_members([(m, b) for m, b in members], str(p), hot, want, by_addend)
        for r in reps:
            _add(tot, r)
        if not any(r.moved_pieces for r in reps):
            continue
        dest = Path(outdir) / key / str(k) / p.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(dest) as tmp:
            if members is None:
                Path(tmp).write_bytes(new)
            else:
                archive.write_archive(Path(tmp), new)
        res[str(p)] = dest
    return res, tot


def _add(tot: dict, r: ObjectReport) -> None:
    tot["objects"] += 1
    tot["objects_changed"] += r.moved_pieces > 0
    for f in ("moved_pieces", "moved_bytes", "pinned_pieces", "pinned_bytes", "addend_pieces"):
        tot[f] += getattr(r, f)
    for why in r.kept.values():
        tot["kept"][why] = tot["kept"].get(why, 0) + 1
    if r.hot_left:
        tot["hot_left"][r.name] = sorted(r.hot_left)


def retarget_script(text: str, moved: dict[str, Path]) -> str:
    """A linker script's file patterns (``archive:member``, ``object``) of the inputs
    ``rewrite_inputs`` replaced, naming the new files instead."""
    import re

    for old, new in moved.items():
        text = re.sub(rf"(^|\s){re.escape(old)}(?=[:(])", lambda m: m.group(1) + str(new), text, flags=re.M)
    return text
