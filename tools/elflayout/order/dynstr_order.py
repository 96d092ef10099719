"""Dynamic-string order after the link: the strings ld.so reads at start-up together at
the front of ``.dynstr``, for linkers that give no say over it.

Why: lld puts the names of ``-u`` options first in ``.dynstr`` (``order.dynstr``); gold
assigns string offsets in hash-table order, GNU ld and mold in their own, so the few
hundred names ld.so compares at start-up lie on every page of the table (libstdc++
linked by gold: 73 pages of ``.dynstr``, read almost whole).

What the table allows: ``.dynstr`` is a run of NUL-terminated strings, and a reference
(an offset) names the bytes from it to the next NUL. gold shares suffixes: one offset
may point into another string (``_ZNSt...D1Ev`` and ``D1Ev``). A *piece* here is one
string with its NUL (the bytes after a NUL up to the next one); moving whole pieces and
mapping each reference to the same place in its piece keeps every reference naming the
same bytes and every sharing valid, in the same size.

References (the ELF gABI and the GNU versioning extension): ``.dynsym`` st_name; the
string-valued ``.dynamic`` tags (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH,
DT_AUXILIARY, DT_FILTER, DT_CONFIG, DT_DEPAUDIT, DT_AUDIT); ``.gnu.version_d``
vda_name; ``.gnu.version_r`` vn_file and vna_name. A section of another type linked to
``.dynstr``, a dynamic tag not known, a table not where the dynamic array says, are
refused (nothing written): their string references are not known.

Citation: glibc ``elf/dl-load.c`` (DT_NEEDED, DT_RUNPATH read when the library is
loaded), ``elf/dl-version.c`` (``match_symbol`` compares vna_name with the needed
object's vda_name), ``elf/dl-lookup.c`` (``check_match`` strcmp()s each candidate's
name and version name).

Steps:
1. ``references``: every string reference of the file (field offset, width, value);
   a value outside the table, a table not NUL-terminated: the input is damaged (refused).
2. ``plan``: the pieces in the new order: the empty string at offset 0 first; then those
   holding a string ld.so reads before relocating (the dynamic-tag strings, the version
   names); then those holding a name of ``hot_names`` (``order.dynstr.read_names``), in
   that order; then the others in their own order.
3. ``reorder``: write the pieces and every reference mapped; ``verify`` proves the
   output before it is kept.
4. ``verify`` (independent of steps 1-3 for what it compares: pyelftools reads both
   files): every symbol, dynamic entry and version entry names the same string as
   before and is otherwise the same; ``.dynstr`` holds the same strings; with the old
   reference values written back the file equals the input but for ``.dynstr``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.fileio import rewrite_in_place, write_proved
from elflayout.layouts import VERDEF, VERNAUX, VERNEED, DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME, DT_STRSZ, DT_STRTAB, \
    DT_VERDEF, DT_VERDEFNUM, DT_VERNEED, DT_VERNEEDNUM

from elftools.elf.enums import ENUM_D_TAG_COMMON

DT_STRING_TAGS = frozenset((DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH) + tuple(
    ENUM_D_TAG_COMMON[n] for n in ("DT_AUXILIARY", "DT_FILTER", "DT_CONFIG", "DT_DEPAUDIT", "DT_AUDIT")))
# every other tag pyelftools knows holds a number or an address, not a string offset
DT_KNOWN_TAGS = frozenset(ENUM_D_TAG_COMMON.values()) - DT_STRING_TAGS
STRING_USERS = ("SHT_DYNSYM", "SHT_DYNAMIC", "SHT_GNU_verdef", "SHT_GNU_verneed")
VERDAUX_SIZE = 8   # vda_name, vda_next (layouts has no struct for it: nothing else reads it)


@dataclass
class Refs:
    """The string references of one file: field offsets, widths (4 or 8), values; and
    which of them ld.so reads before relocating (``early``)."""

    at: list[int]
    width: list[int]
    value: list[int]
    early: list[bool]
    symbols: int = 0


def _fail(img: ElfImage, what: str):
    raise ElflayoutError(f"{img.path}: {what}")


def _table(img: ElfImage):
    """(.dynstr section, its bytes) as DT_STRTAB/DT_STRSZ name them; refuses a damaged one."""
    sec = img.section(".dynstr")
    if sec is None or sec.type != "SHT_STRTAB" or not sec.occupies_file:
        _fail(img, "no .dynstr string table")
    if sec.offset + sec.size > img.size:
        _fail(img, ".dynstr lies past the end of the file")
    if img.dt(DT_STRTAB) != sec.addr or img.dt(DT_STRSZ) != sec.size:
        _fail(img, "DT_STRTAB/DT_STRSZ do not name the .dynstr section")
    blob = bytes(img.mm[sec.offset:sec.offset + sec.size])
    if blob[0] != 0 or blob[-1] != 0:
        _fail(img, "damaged .dynstr: it does not begin and end with a NUL byte")
    return sec, blob


def _u(img: ElfImage, fmt: str, at: int) -> tuple:
    return struct.unpack_from(("<" if img.elf.little_endian else ">") + fmt, img.mm, at)


def references(img: ElfImage) -> tuple[object, bytes, Refs]:
    """Step 1: (.dynstr section, its bytes, every reference to it)."""
    sec, blob = _table(img)
    refs = Refs([], [], [], [])
    users = [s for s in img.sections if img.elf.get_section(s.index)["sh_link"] == sec.index and s.type != "SHT_NULL"]
    for s in users:
        if s.type not in STRING_USERS:
            _fail(img, f"section {s.name} ({s.type}) is linked to .dynstr: its string references are not known, "
                       ".dynstr not reordered")
        if s.offset + s.size > img.size:
            _fail(img, f"{s.name} lies past the end of the file")
    for s in users:
        {"SHT_DYNSYM": _symbols, "SHT_DYNAMIC": _dynamic}.get(s.type, _versions)(img, s, refs)
    if img.dynamic.present and not any(s.type == "SHT_DYNAMIC" for s in users):
        _fail(img, "the dynamic array's section is not linked to .dynstr")
    for v in refs.value:
        if not 0 <= v < len(blob):
            _fail(img, f"damaged .dynstr reference: offset {v:#x} outside the table ({len(blob):#x} bytes)")
    return sec, blob, refs


def _add(refs: Refs, at: int, width: int, value: int, early: bool) -> None:
    refs.at.append(at)
    refs.width.append(width)
    refs.value.append(value)
    refs.early.append(early)


def _symbols(img: ElfImage, s, refs: Refs) -> None:
    """st_name of every symbol (the first word of each entry), read at once: libLLVM has 48,000."""
    es = s.entsize or (24 if img.elfclass == 64 else 16)
    n = s.size // es
    names = np.ndarray((n,), ("<" if img.elf.little_endian else ">") + "u4", img.mm, s.offset, (es,))
    refs.at += (s.offset + es * np.arange(n)).tolist()
    refs.width += [4] * n
    refs.value += names.tolist()
    refs.early += [False] * n
    refs.symbols += n


def _dynamic(img: ElfImage, s, refs: Refs) -> None:
    dyn = img.dynamic
    if dyn.offset != s.offset:
        _fail(img, f"{s.name} is not where PT_DYNAMIC says the dynamic array is")
    w = dyn.array.dtype.itemsize // 2
    for k, (tag, val) in enumerate(dyn):   # the entries before DT_NULL
        if tag in DT_STRING_TAGS:
            _add(refs, s.offset + 2 * w * k + w, w, val, True)
        elif tag not in DT_KNOWN_TAGS:
            _fail(img, f"dynamic tag {tag:#x} not known: it may name a string, .dynstr not reordered")


def _chain(img: ElfImage, s, count: int, size: int, next_at: int):
    """Offsets of ``count`` entries of a version section linked by the 4-byte field at
    ``next_at`` (relative offsets), each checked to lie in the section."""
    at = s.offset
    for _ in range(count):
        if not s.offset <= at <= s.offset + s.size - size:
            _fail(img, f"damaged {s.name}: an entry lies outside the section")
        yield at
        nxt = _u(img, "I", at + next_at)[0]
        at += nxt
        if nxt == 0:
            return


# per version section: its tags, (entry size, cnt, aux, next, name or None), (aux size, next, name)
VERSION_TABLES = {
    "SHT_GNU_verdef": ((DT_VERDEF, DT_VERDEFNUM), (VERDEF.size, 6, 12, 16, None), (VERDAUX_SIZE, 4, 0)),
    "SHT_GNU_verneed": ((DT_VERNEED, DT_VERNEEDNUM), (VERNEED.size, 2, 8, 12, 4), (VERNAUX.size, 12, 8)),
}


def _versions(img: ElfImage, s, refs: Refs) -> None:
    """vda_name of ``.gnu.version_d``; vn_file and vna_name of ``.gnu.version_r``."""
    (at_tag, num_tag), (size, cnt_at, aux_at, next_at, name_at), (aux_size, aux_next, aux_name) = VERSION_TABLES[s.type]
    if img.dt(at_tag) != s.addr:
        _fail(img, f"the dynamic array does not name {s.name} where it is")
    n = img.dt(num_tag) or img.elf.get_section(s.index)["sh_info"]
    for at in _chain(img, s, n, size, next_at):
        cnt, aux = _u(img, "H", at + cnt_at)[0], _u(img, "I", at + aux_at)[0]
        if name_at is not None:
            _add(refs, at + name_at, 4, _u(img, "I", at + name_at)[0], True)
        for a in _chain(img, _Sub(s, at + aux), cnt, aux_size, aux_next):
            _add(refs, a + aux_name, 4, _u(img, "I", a + aux_name)[0], True)


class _Sub:
    """A version section seen from one of its entries (the aux chain starts there)."""

    def __init__(self, s, at: int):
        self.name, self.offset, self.size = s.name, at, s.offset + s.size - at


def pieces(blob: bytes) -> np.ndarray:
    """Start offsets of the NUL-terminated strings of ``blob`` (the last ends the table)."""
    nul = np.flatnonzero(np.frombuffer(blob, np.uint8) == 0)
    return np.concatenate(([0], nul[:-1] + 1)).astype(np.int64)


def plan(blob: bytes, refs: Refs, hot_names) -> tuple[np.ndarray, np.ndarray, dict]:
    """Step 2: (old start of each piece in the new order, piece index of each reference,
    counts)."""
    starts = pieces(blob)
    value = np.asarray(refs.value, dtype=np.int64)
    piece = np.searchsorted(starts, value, side="right") - 1
    rank = {}
    for n in hot_names:
        rank.setdefault(n.encode() if isinstance(n, str) else n, len(rank))
    big = len(rank) + 1
    key = np.full(len(starts), np.inf)
    key[0] = -2.0
    early = np.asarray(refs.early, dtype=bool)
    np.minimum.at(key, piece[early], -1.0)
    ends = {int(v): blob.index(b"\0", int(v)) for v in value[~early].tolist()}
    for p, v in zip(piece[~early].tolist(), value[~early].tolist()):
        r = rank.get(blob[v:ends[v]], big)
        if r < big and r < key[p]:
            key[p] = r
    order = np.lexsort((np.arange(len(starts)), key))
    hot = int((key < big).sum())
    return starts[order], piece, {"strings": len(starts), "first": hot, "references": len(value),
                                  "first_bytes": int(_lengths(starts, len(blob))[order][:hot].sum())}


def _lengths(starts: np.ndarray, size: int) -> np.ndarray:
    return np.diff(np.append(starts, size))


def reorder(src: str | Path, dst: str | Path, hot_names) -> dict:
    """Write SRC to DST with ``.dynstr`` in the order of ``plan`` (steps 1-3), proved by
    ``verify``; ElflayoutError (nothing written) when SRC cannot be rewritten."""
    with ElfImage(src) as img:
        sec, blob, refs = references(img)
        old_order, piece, st = plan(blob, refs, hot_names)
        lengths = _lengths(pieces(blob), len(blob))
        starts = pieces(blob)
        idx = np.searchsorted(starts, old_order)
        new_start = np.empty(len(starts), dtype=np.int64)
        new_start[idx] = np.concatenate(([0], np.cumsum(lengths[idx])[:-1]))
        table = b"".join(blob[o:o + n] for o, n in zip(old_order.tolist(), lengths[idx].tolist()))
        out = bytearray(img.mm)
        bo = "<" if img.elf.little_endian else ">"
        out[sec.offset:sec.offset + len(table)] = table
        value = np.asarray(refs.value, dtype=np.int64)
        new = new_start[piece] + value - starts[piece]
        for at, w, v in zip(refs.at, refs.width, new.tolist()):
            struct.pack_into(bo + ("I" if w == 4 else "Q"), out, at, v)
        st["moved"] = int((new != value).sum())
    if len(table) != len(blob):
        raise RuntimeError(f"{src}: the reordered .dynstr would change size")
    write_proved(src, dst, bytes(out), verify)
    return st


def reorder_in_place(path: str | Path, hot_names) -> dict:
    """``reorder`` PATH onto itself (a temporary file beside it, then renamed)."""
    return rewrite_in_place(path, lambda src, dst: reorder(src, dst, hot_names), "dynstr")


def verify(src: str | Path, dst: str | Path) -> None:
    """Step 4. A difference is our bug (RuntimeError: exit 3), never a kept output."""
    with ElfImage(src) as a, ElfImage(dst) as b:
        if a.size != b.size:
            raise RuntimeError(f"{dst}: .dynstr order changed the file's size")
        _same_names(a, b, dst)
        sa, blob_a, ra = references(a)
        sb, blob_b, rb = references(b)
        if (ra.at, ra.width) != (rb.at, rb.width) or sorted(blob_a.split(b"\0")) != sorted(blob_b.split(b"\0")):
            raise RuntimeError(f"{dst}: .dynstr order changed the references' places or the strings")
        for va, vb in zip(ra.value, rb.value):
            if blob_a[va:blob_a.index(b"\0", va)] != blob_b[vb:blob_b.index(b"\0", vb)]:
                raise RuntimeError(f"{dst}: a .dynstr reference names another string")
        back = bytearray(b.mm)
        bo = "<" if a.elf.little_endian else ">"
        for at, w, v in zip(ra.at, ra.width, ra.value):
            struct.pack_into(bo + ("I" if w == 4 else "Q"), back, at, v)
        back[sa.offset:sa.offset + sa.size] = blob_a
        if back != a.mm[:]:
            raise RuntimeError(f"{dst}: .dynstr order changed bytes outside the table and its references")


def _same_names(a: ElfImage, b: ElfImage, dst) -> None:
    """What pyelftools reads: symbol names and records, dynamic strings, version names."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.gnuversions import GNUVerDefSection, GNUVerNeedSection

    def seen(img):
        out = []
        for s in img.elf.iter_sections():
            if s.name == ".dynsym":
                out += [(y.name, dict(y.entry, st_name=0)) for y in s.iter_symbols()]
            elif isinstance(s, DynamicSection):
                out += [(t.entry.d_tag, getattr(t, "needed", None) or getattr(t, "soname", None)
                         or getattr(t, "rpath", None) or getattr(t, "runpath", None)
                         or (None if t.entry.d_tag in _STRING_NAMES else t.entry.d_val)) for t in s.iter_tags()]
            elif isinstance(s, (GNUVerDefSection, GNUVerNeedSection)):
                for v, aux in s.iter_versions():
                    out.append((getattr(v, "name", None), _fields(v.entry)))
                    out += [(x.name, _fields(x.entry)) for x in aux]
        return out

    if seen(a) != seen(b):
        raise RuntimeError(f"{dst}: .dynstr order changed a name pyelftools reads")


_STRING_NAMES = {"DT_AUXILIARY", "DT_FILTER", "DT_CONFIG", "DT_DEPAUDIT", "DT_AUDIT"}


def _fields(entry) -> dict:
    return {k: v for k, v in dict(entry).items() if k not in ("vda_name", "vn_file", "vna_name")}


def read_pages(img: ElfImage, hot_names) -> list[int]:
    """File pages ld.so reads for the strings it compares before the code runs, in the
    order it reads them: the dynamic-tag and version strings, then per name of
    ``hot_names`` (in order) the lookup in this library: the bloom word, bucket and chain
    word of its GNU hash, its ``.dynsym`` and ``.gnu.version`` records, its string. For
    the readahead model (``tail.predict``): these tables are read together, so where the
    strings lie decides which windows of the tables the reads cover."""
    from elflayout.elfcore import PAGE

    sec, blob, refs = references(img)
    es = img.section(".dynsym").entsize if img.section(".dynsym") else 0
    first = {}
    for k, v in enumerate(refs.value[:refs.symbols]):
        first.setdefault(blob[v:blob.index(b"\0", v)], k)
    out = [p for v, early in zip(refs.value, refs.early) if early
           for p in range((sec.offset + v) // PAGE, (sec.offset + blob.index(b"\0", v)) // PAGE + 1)]
    lookup = _lookup_offsets(img)
    for n in hot_names:
        name = n.encode() if isinstance(n, str) else n
        k = first.get(name)
        if k is None:
            continue
        v = refs.value[k]
        at = lookup(k, name) + [refs.at[k], refs.at[k] + es - 1]
        out += [a // PAGE for a in at] + list(range((sec.offset + v) // PAGE, (sec.offset + v + len(name)) // PAGE + 1))
    return list(dict.fromkeys(out))


def _lookup_offsets(img: ElfImage):
    """``f(symbol index, name)``: file offsets of the GNU hash words and the version
    record a lookup of that symbol reads ([] without a GNU hash table)."""
    from elflayout.order.dynsym import GNU_HASH_HEADER, gnu_hash, gnu_hash_layout

    gh, ver = img.section(".gnu.hash"), img.section(".gnu.version")
    if gh is None or gh.size < GNU_HASH_HEADER:
        return lambda k, name: []
    (nb, symoffset, maskwords, _shift), (bloom, buckets, chain) = gnu_hash_layout(img, gh)
    w = img.wordsize

    def at(k: int, name: bytes) -> list[int]:
        h = gnu_hash(name)
        out = [bloom + w * ((h // (8 * w)) % max(maskwords, 1)), buckets + 4 * (h % max(nb, 1))]
        out += [chain + 4 * (k - symoffset)] if k >= symoffset else []
        return out + ([ver.offset + 2 * k] if ver is not None else [])
    return at


def predict(path: str | Path, target, lib_map, hot_names) -> int:
    """Pages the readahead model predicts for the profile ``target`` on PATH, the reads
    of ``read_pages`` included."""
    from elflayout.order import tail

    return tail.predict(path, target, lib_map, lambda img: read_pages(img, hot_names))[0]
