"""What the loader has to do for a library's dynamic relocations, and what RELR would save.

Returns plain data (the ``relocs`` JSON, docs/formats/relocs.md); cli.py prints it.
"""

from __future__ import annotations

import numpy as np

from elflayout import __version__, elfcore
from elflayout.errors import ElflayoutError
from elflayout.fileio import envelope
from elflayout import layouts as L
from elflayout.relocs import selfapply
from elflayout.relocs.arch import arch_of
from elflayout.relocs.linkself import DT_RELRHACK_BIT

FORMAT_VERSION = 1


def _vaddr_sections(img):
    """(starts, ends, names) of allocated sections by address, NOBITS included (.bss)."""
    secs = sorted((s for s in img.sections if s.flags & L.SHF_ALLOC and s.size > 0 and s.addr),
                  key=lambda s: s.addr)
    return (np.array([s.addr for s in secs], np.uint64), np.array([s.addr + s.size for s in secs], np.uint64),
            [s.name for s in secs])


def section_index_of_vaddrs(img, vaddrs) -> tuple[np.ndarray, list[str]]:
    """Per address, an index into the returned names (last name: "(none)")."""
    starts, ends, names = _vaddr_sections(img)
    v = np.asarray(vaddrs, np.uint64)
    k = np.searchsorted(starts, v, side="right").astype(np.int64) - 1
    ok = (k >= 0) & (v < ends[np.clip(k, 0, None)])
    return np.where(ok, k, len(names)), names + ["(none)"]


def section_names_of_vaddrs(img, vaddrs) -> np.ndarray:
    k, names = section_index_of_vaddrs(img, vaddrs)
    return np.array(names, dtype=object)[k]


def _count_by_section(img, vaddrs) -> dict[str, int]:
    k, names = section_index_of_vaddrs(img, vaddrs)
    c = np.bincount(k, minlength=len(names))
    return {names[i]: int(c[i]) for i in np.flatnonzero(c)}


def relr_table(img) -> np.ndarray | None:
    """Addresses in the DT_RELR table, if the library has one (found as the loader finds it)."""
    # By type, not name: the link-time self form keeps a .relr.dyn typed SHT_PROGBITS.
    sec = next((s for s in img.sections if s.type in ("SHT_RELR", L.SHT_RELR)), None)
    addr, size = img.dt(L.DT_RELR), img.dt(L.DT_RELRSZ)
    if addr is None and sec is None:
        return None
    if addr is not None:
        off = img.vaddr_to_offset(addr)
        size = size or 0
    else:
        off, size = sec.offset, sec.size
    if off < 0 or off + size > img.size:
        raise ElflayoutError(f"{img.path}: DT_RELR table ({size} bytes at {addr:#x}) is not in the file")
    words = np.frombuffer(img.mm, np.uint64, count=size // 8, offset=off)
    try:
        return elfcore.relr_decode(words)
    except ValueError as e:
        raise ElflayoutError(f"{img.path}: damaged DT_RELR table ({e})") from None


def self_table(img) -> tuple[np.ndarray, dict] | None:
    """The table of the self-applying form (relocs/selfapply.py: the routine an executable's
    first DT_PREINIT_ARRAY entry or DT_INIT points at) as (addresses, summary), or None when
    the file has none."""
    init, p = None, None
    pre = img.dt(L.DT_PREINIT_ARRAY)
    if pre is not None:  # the file holds the routine's link-time address there (ld.so relocates it)
        off = int(img.vaddr_to_offset(pre))
        if 0 <= off <= img.size - 8:
            init = int.from_bytes(img.mm[off:off + 8], "little")
            p = selfapply.decode_at(img, init)
    if p is None:
        init = img.dt(L.DT_INIT)
        p = selfapply.decode_at(img, init)
    if p is None:
        return None
    toff, n = int(img.vaddr_to_offset(p["relr_start"])), p["relr_end"] - p["relr_start"]
    if toff < 0 or n < 0 or n % 8 or toff + n > img.size:
        raise ElflayoutError(f"{img.path}: the self-applying routine's table ({n} bytes at {p['relr_start']:#x}) "
                             "is not in the file")
    try:
        addrs = elfcore.relr_decode(np.frombuffer(img.mm, np.uint64, count=n // 8, offset=toff))
    except ValueError as e:
        raise ElflayoutError(f"{img.path}: damaged self-applied table ({e})") from None
    hidden = L.DT_RELR | DT_RELRHACK_BIT  # relrhack's hidden DT_RELR: made at link time
    lo, hi = elfcore.page_range(toff, n)
    return addrs, dict(present=True, form="link-time" if hidden in img.dynamic else "post-link",
                       count=int(addrs.size), bytes=int(n), offset=toff, pages=int(hi - lo + 1) if n else 0,
                       routine=int(init), chains_to=int(p["old_init"]))


def _relr_summary(img, relr) -> dict:
    if relr is None:
        return dict(present=False, count=0, bytes=0, pages=0)
    size = int(img.dt(L.DT_RELRSZ) or 0)
    off = img.vaddr_to_offset(img.dt(L.DT_RELR)) if img.dt(L.DT_RELR) is not None else 0  # checked by relr_table
    lo, hi = elfcore.page_range(off, size)
    return dict(present=True, count=int(relr.size), bytes=size, offset=int(off), pages=int(hi - lo + 1))


def analyze(img: elfcore.ElfImage) -> dict:
    arch = arch_of(img)
    tables = img.reloc_tables()
    rows, by_target = [], {}
    tables_out = []
    rel_offsets = np.zeros(0, np.uint64)
    target_pages = set()
    all_targets = []
    for name, t in tables.items():
        sec = img.section(name)
        types = img.reloc_types(t)
        lo, hi = elfcore.page_range(sec.offset, sec.size)
        tables_out.append(dict(section=name, offset=sec.offset, bytes=int(t.nbytes), count=int(t.size),
                               pages=int(hi - lo + 1)))
        ut, cnt = np.unique(np.asarray(types, np.int64), return_counts=True)
        for ty, c in zip(ut.tolist(), cnt.tolist()):
            rows.append(dict(table=name, type=arch.name(ty), type_number=int(ty), count=int(c),
                             bytes=int(c * t.dtype.itemsize)))
            for s, c2 in _count_by_section(img, t["r_offset"][types == ty]).items():
                by_target.setdefault(s, {}).setdefault(arch.name(ty), 0)
                by_target[s][arch.name(ty)] += c2
        if sec.addr == (img.dt(L.DT_RELA) or img.dt(L.DT_REL)):  # the table ld.so reads, wherever it is
            rel_offsets = t["r_offset"][types == arch.relative]
        all_targets.append(t["r_offset"])
    relr = relr_table(img)
    if relr is not None and relr.size:
        all_targets.append(relr)
        for s, c in _count_by_section(img, relr).items():
            by_target.setdefault(s, {}).setdefault("RELR", 0)
            by_target[s]["RELR"] += c
    st = self_table(img)
    self_sum = st[1] if st is not None else dict(present=False, count=0, bytes=0, pages=0)
    if st is not None and st[0].size:
        all_targets.append(st[0])
        for s, c in _count_by_section(img, st[0]).items():
            by_target.setdefault(s, {}).setdefault("SELF", 0)
            by_target[s]["SELF"] += c
    tgt = np.concatenate(all_targets) if all_targets else np.zeros(0, np.uint64)
    off = img.vaddr_to_offset(tgt) if tgt.size else np.zeros(0, np.int64)
    pg = off[off >= 0] // elfcore.PAGE
    target_pages = np.unique(pg)
    word = arch.word
    fileback = img.vaddr_to_offset(rel_offsets) >= 0 if rel_offsets.size else np.zeros(0, bool)
    packable = rel_offsets[(rel_offsets % word == 0) & fileback]
    relr_bytes = elfcore.relr_size(packable, word) if packable.size else 0
    main_addr = img.dt(L.DT_RELA) or img.dt(L.DT_REL)
    main = next((t for t in tables_out if img.section(t["section"]).addr == main_addr), None)
    entsize = {(True, 64): L.RELA64, (True, 32): L.RELA32, (False, 64): L.REL64, (False, 32): L.REL32}[arch.rela, arch.elfclass].itemsize
    rel_summary = dict(
        count=int(rel_offsets.size), word_aligned=int((rel_offsets % word == 0).sum()),
        file_backed=int(fileback.sum()), packable=int(packable.size),
        relr_bytes=int(relr_bytes),
        rela_bytes=int(rel_offsets.size * entsize),
        table_bytes_after_packing=(int(main["bytes"] - packable.size * entsize + relr_bytes) if main else 0),
    )
    return envelope(
        "relocs", FORMAT_VERSION,
        dict(tool=f"elflayout {__version__}", machine=img.machine, elfclass=img.elfclass, page_size=elfcore.PAGE),
        target=img.identity(),
        tables=tables_out,
        relr=_relr_summary(img, relr),
        self_applied=self_sum,
        types=rows,
        by_target_section=by_target,
        relative=rel_summary,
        pages=dict(targets=int(target_pages.size),
                   tables=int(sum(t["pages"] for t in tables_out)) + _relr_summary(img, relr)["pages"]
                   + self_sum["pages"]),
    )


def reloc_bytes_packed(img: elfcore.ElfImage) -> dict:
    """Relocation table bytes the loader reads once RELATIVE relocations are packed:
    ``rela`` the entries that stay (non-RELATIVE, or RELATIVE at an unaligned address),
    ``relr`` the optimal RELR table of the packable ones plus a ``.relr.dyn`` already
    there, ``plt`` the PLT tables as they are."""
    out = {"rela": 0, "relr": 0, "plt": 0}
    rel_t = img.relative_type()
    for name, rel in img.reloc_tables().items():
        if name.endswith(".plt"):
            out["plt"] += int(rel.nbytes)
            continue
        t = img.reloc_types(rel)
        rel_mask = (t == rel_t) & (rel["r_offset"] % img.wordsize == 0)
        out["rela"] += int(rel.nbytes) - int(rel_mask.sum()) * rel.dtype.itemsize
        if rel_mask.any():
            out["relr"] += elfcore.relr_size(np.sort(rel["r_offset"][rel_mask].astype(np.uint64)), img.wordsize)
    s = img.section(".relr.dyn")
    if s is not None:  # already packed: the table as it is
        out["relr"] += int(s.size)
    return out
