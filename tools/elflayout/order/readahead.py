"""Readahead model: pages a cold start reads from a library, for a given layout.

Replays a touch sequence (the profile's, mapped onto the library) against a model of
the Linux 6.x page cache for one ``mmap``-ed file, so orderings can be compared without
linking and measuring. What is modelled (mm/filemap.c, mm/readahead.c, mm/memory.c):

1. **Loader.** ld.so ``read()``s the ELF header: ``page_cache_sync_ra`` on page 0 with an
   initial window ``get_init_ra_size(1, ra)`` (4 pages for ra ≥ 32) and a PG_readahead
   mark; then writes the partial ``.bss`` page, reads ``.dynamic`` and processes
   relocations: ``.relr.dyn``, ``.rela.dyn`` and ``.rela.plt`` read in order, each
   entry's target word written (``.data.rel.ro``, ``.got``, ``.data``). Added unless
   the profile itself already touches the relocation tables.
2. **Fault-around** (``do_fault_around``, read faults only): before reading, the
   16 pages (fault_around_bytes 64 KiB) of the aligned virtual window around the fault,
   clamped to the VMA, are mapped if already cached and not PG_readahead-marked;
   each page mapped this way lowers ``mmap_miss``.
3. **Sync mmap readahead** (``do_sync_mmap_readahead``) on a fault of an uncached page:
   ``mmap_miss`` +1 (readahead is skipped, one page read, when it exceeds
   MMAP_LOTSAMISS = 100); in a ``VM_EXEC`` mapping (6.16+: "allow arch to request folio
   size for exec memory") the window is ``[p, p + ra)`` clamped to the VMA, with no
   async part; otherwise the read-around window ``[p - ra/2, p + ra/2)`` (not clamped
   to the VMA, only to EOF) with ``async_size = ra/4`` and a PG_readahead mark on the
   page ``start + size - async_size``.
4. **Async readahead** (``do_async_mmap_readahead`` → ``page_cache_async_ra``) when a
   fault finds a cached, marked page: if it is the expected index the window moves on
   (``start += size``, ``size = get_next_ra_size``, ``async_size = size``), else the
   window restarts at the next uncached page; ``order += 2`` each time (large folios,
   4 → 16 → 32 pages; the PG_readahead mark is per folio).
5. A page already read is never read again; only pages not yet cached are counted,
   clipped to EOF. Write faults on private mappings (``do_cow_fault``) skip fault-around.

On request (``hugepage``, a what-if: ld.so does not madvise): the VM_HUGEPAGE path of
``do_sync_mmap_readahead``: two 2 MiB folios from the 512-page-aligned index, the
second async, before the ra_pages and mmap_miss checks.

Not modelled: VM_RAND_READ/VM_SEQ_READ (no madvise by ld.so), memory pressure, other processes
sharing the file's readahead state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from elflayout.elfcore import PAGE, ElfImage
from elflayout.layouts import PF_W, PF_X
from elflayout.profile.model import Target

HPAGE_PMD_NR = 512  # x86-64: 2 MiB PMD folios
MMAP_LOTSAMISS = 100  # mm/filemap.c: stop read-around when misses outnumber hits by this
FAULT_AROUND_PAGES = 16  # /sys/kernel/mm/... fault_around_bytes default 64 KiB
KIND_CODE = {"x": "x", "r": "r", "w": "w", "t": "t", "R": "R"}


@dataclass
class Vma:
    start: int  # first file page
    end: int  # one past the last file page
    exec: bool
    write: bool
    delta: int  # virtual page - file page


def vmas_of(img: ElfImage) -> list[Vma]:
    out = []
    for s in img.loads:
        if s.filesz == 0:
            continue
        fp0 = s.offset // PAGE
        fp1 = -(-(s.offset + s.filesz) // PAGE)
        out.append(Vma(fp0, fp1, bool(s.flags & PF_X), bool(s.flags & PF_W), s.vaddr // PAGE - fp0))
    return out


def _init_ra_size(req: int, maxp: int) -> int:
    n = 1 << max(0, (req - 1).bit_length())
    if n <= maxp // 32:
        return n * 4
    if n <= maxp // 4:
        return n * 2
    return maxp


def _next_ra_size(cur: int, maxp: int) -> int:
    if cur < maxp // 16:
        return 4 * cur
    if cur <= maxp // 2:
        return 2 * cur
    return maxp


@dataclass
class Simulator:
    npages: int
    vmas: list[Vma]
    ra_pages: int
    hugepage: bool = False  # the mappings were madvise(MADV_HUGEPAGE)d (VM_HUGEPAGE)
    cached: np.ndarray = field(init=False)
    mark: np.ndarray = field(init=False)  # PG_readahead: folio size (pages) of the marked folio, 0 = none
    reads: list = field(default_factory=list)  # (page, npages, cause)
    major: int = 0
    minor: int = 0

    def __post_init__(self):
        self.cached = np.zeros(self.npages, dtype=bool)
        self.mark = np.zeros(self.npages, dtype=np.int32)
        self.mapped = [np.zeros(self.npages, dtype=bool) for _ in self.vmas]
        self.ra_start = self.ra_size = self.ra_async = self.ra_order = 0
        self.mmap_miss = 0

    # -- page cache -------------------------------------------------------------------
    def _read(self, start: int, end: int, mark_at: int | None, order: int, cause: str) -> None:
        start, end = max(0, start), min(self.npages, end)
        if end <= start:
            return
        new = ~self.cached[start:end]
        if not new.any():
            return
        self.cached[start:end] = True
        idx = np.flatnonzero(new) + start
        # contiguous runs for the read log
        brk = np.flatnonzero(np.diff(idx) != 1)
        for a, b in zip(np.r_[0, brk + 1], np.r_[brk, len(idx) - 1]):
            self.reads.append((int(idx[a]), int(idx[b] - idx[a] + 1), cause))
        if mark_at is not None and start <= mark_at < end and new[mark_at - start]:
            fsz = 1 << order
            f0 = mark_at - (mark_at % fsz)
            f0, f1 = max(f0, start), min(f0 + fsz, end)
            self.mark[f0:f1] = f1 - f0

    def read_syscall(self, page: int, n: int = 1) -> None:
        """read() of n pages at ``page`` (ld.so reading the ELF header): ondemand readahead."""
        if self.cached[page:page + n].all():
            return
        size = _init_ra_size(n, self.ra_pages)
        async_size = size - n if size > n else size
        self.ra_start, self.ra_size, self.ra_async, self.ra_order = page, size, async_size, 0
        self._read(page, page + size, page + size - async_size, 0, "read")

    def _vma_for(self, page: int, kind: str) -> int | None:
        best = None
        for i, v in enumerate(self.vmas):
            if v.start <= page < v.end:
                if kind in ("w",) and v.write:
                    return i
                if kind == "x" and v.exec:
                    return i
                if best is None:
                    best = i
        return best

    def touch(self, page: int, kind: str) -> None:
        if page < 0 or page >= self.npages:
            return
        if kind == "R":
            self.read_syscall(page)
            return
        vi = self._vma_for(page, kind)
        if vi is None:
            return
        vma, mapped = self.vmas[vi], self.mapped[vi]
        if mapped[page]:
            return
        write = kind == "w"
        if not write:
            self._fault_around(page, vi)
            if mapped[page]:
                self.minor += 1
                return
        if self.cached[page]:
            self.minor += 1
            if self.mmap_miss:
                self.mmap_miss -= 1
            if self.mark[page]:
                self._async(page)
        else:
            self.major += 1
            self._sync(page, vma)
        mapped[page] = True

    def _fault_around(self, page: int, vi: int) -> None:
        v = self.vmas[vi]
        vp = page + v.delta
        w0 = vp - vp % FAULT_AROUND_PAGES - v.delta
        a, b = max(w0, v.start), min(w0 + FAULT_AROUND_PAGES, v.end, self.npages)
        m = self.mapped[vi]
        can = self.cached[a:b] & (self.mark[a:b] == 0) & ~m[a:b]
        n = int(can.sum())
        if n:
            m[a:b] |= can
            self.mmap_miss = max(0, self.mmap_miss - n)

    def _sync(self, page: int, vma: Vma) -> None:
        ra = self.ra_pages
        if self.hugepage:
            # VM_HUGEPAGE: two PMD-sized folios from the aligned index, the second async;
            # taken before the ra_pages / mmap_miss checks ("even if readahead is disabled")
            start = page - page % HPAGE_PMD_NR
            self.ra_start, self.ra_size, self.ra_async, self.ra_order = start, 2 * HPAGE_PMD_NR, HPAGE_PMD_NR, 9
            self._read(start, start + 2 * HPAGE_PMD_NR, start + HPAGE_PMD_NR, 9, "hugepage")
            return
        if self.mmap_miss < MMAP_LOTSAMISS * 10:
            self.mmap_miss += 1
        if ra == 0 or self.mmap_miss > MMAP_LOTSAMISS:
            self._read(page, page + 1, None, 0, "miss")
            return
        if vma.exec:
            start = max(page, vma.start)
            end = min(start + ra, vma.end)
            self.ra_start, self.ra_size, self.ra_async, self.ra_order = start, end - start, 0, 0
            self._read(start, end, None, 0, "exec")
        else:
            start = max(0, page - ra // 2)
            self.ra_start, self.ra_size, self.ra_async, self.ra_order = start, ra, ra // 4, 0
            self._read(start, start + ra, start + ra - ra // 4, 0, "around")

    def _async(self, page: int) -> None:
        fsz = int(self.mark[page])
        f0 = page
        while f0 > 0 and self.mark[f0 - 1] == fsz and (f0 % fsz):
            f0 -= 1
        self.mark[f0:f0 + fsz] = 0
        maxp = self.ra_pages
        expected = self.ra_start + self.ra_size - self.ra_async
        expected -= expected % max(1, fsz)
        if page == expected:
            self.ra_start += self.ra_size
            self.ra_size = max(self.ra_size, _next_ra_size(self.ra_size, maxp))
            self.ra_async = self.ra_size
        else:
            miss = np.flatnonzero(~self.cached[page + 1:min(self.npages, page + 1 + maxp)])
            if miss.size == 0:
                return
            start = page + 1 + int(miss[0])
            self.ra_start = start
            self.ra_size = _next_ra_size(start - page + maxp, maxp)
            self.ra_async = self.ra_size
        self.ra_order += 2
        order = min(self.ra_order, max(0, self.ra_size.bit_length() - 1))
        self._read(self.ra_start, self.ra_start + self.ra_size, self.ra_start + self.ra_size - self.ra_async, order,
                   "async")


def loader_touches(img: ElfImage) -> tuple[np.ndarray, np.ndarray]:
    """Pages ld.so touches in this library before running any of its code: (pages, kinds).

    Kinds: b"R" read(), b"r" read fault, b"w" write fault. Relocation entries and their
    targets interleave as ld.so processes them; each page is kept at its first touch.
    """
    pages, kinds = [np.array([0])], [np.array([b"R"])]
    for s in img.loads:
        if s.memsz > s.filesz and s.filesz and (s.offset + s.filesz) % PAGE:
            pages.append(np.array([(s.offset + s.filesz - 1) // PAGE]))
            kinds.append(np.array([b"w"]))
    dyn = img.section(".dynamic")
    if dyn is not None:
        pages.append(np.array([dyn.offset // PAGE]))
        kinds.append(np.array([b"r"]))
    relr = img.section(".relr.dyn")
    if relr is not None and relr.size:
        from elflayout.elfcore import relr_decode

        words = np.frombuffer(img.mm, dtype="<u8", count=relr.size // 8, offset=relr.offset)
        tgt = img.vaddr_to_offset(relr_decode(words))
        n = len(words)
        src = (relr.offset + np.arange(n) * 8) // PAGE
        pages += [src, tgt[tgt >= 0] // PAGE]
        kinds += [np.full(n, b"r"), np.full(int((tgt >= 0).sum()), b"w")]
    for name, rel in img.reloc_tables().items():
        sec = img.section(name)
        n = len(rel)
        if n == 0:
            continue
        src = (sec.offset + np.arange(n, dtype=np.int64) * rel.dtype.itemsize) // PAGE
        tgt = img.vaddr_to_offset(rel["r_offset"]) // PAGE
        both = np.stack([src, tgt], axis=1).ravel()
        k = np.stack([np.full(n, b"r"), np.full(n, b"w")], axis=1).ravel()
        ok = both >= 0
        pages.append(both[ok])
        kinds.append(k[ok])
    p = np.concatenate(pages).astype(np.int64)
    k = np.concatenate(kinds)
    _, first = np.unique(p, return_index=True)
    first.sort()
    return p[first], k[first]


def simulate(img: ElfImage, pages: np.ndarray, kinds: np.ndarray, read_ahead_kb: int, loader: bool,
             hugepage: bool = False) -> dict:
    """Replay touches (file pages, kinds b"x"/b"r"/b"w"/b"t") and report pages read."""
    npages = -(-img.size // PAGE)
    sim = Simulator(npages, vmas_of(img), read_ahead_kb // 4, hugepage)
    writable = np.zeros(npages + 1, dtype=bool)
    for v in sim.vmas:
        if v.write:
            writable[v.start:v.end] = True
    dyn = img.section(".dynamic")
    dyn_page = dyn.offset // PAGE if dyn is not None else -1
    if loader:
        lp, lk = loader_touches(img)
        pages = np.concatenate([lp, pages])
        kinds = np.concatenate([lk, kinds])
    else:
        pages = np.concatenate([[0], pages])
        kinds = np.concatenate([np.array([b"R"]), kinds])
    for p, k in zip(pages.tolist(), kinds.tolist()):
        k = k.decode() if isinstance(k, bytes) else k
        if k == "t":  # a traced fault: in the writable segment mostly relocation writes
            k = "w" if writable[p] and p != dyn_page else "r"
        sim.touch(p, k)
    read_pages = np.flatnonzero(sim.cached)
    sec_idx = img.section_of_offsets(read_pages * PAGE)
    names = {s.index: s.name for s in img.sections}
    by_section: dict[str, int] = {}
    for i, c in zip(*np.unique(sec_idx, return_counts=True)):
        by_section[names.get(int(i), "(other)") if i >= 0 else "(other)"] = int(c)
    causes: dict[str, int] = {}
    for _p, n, c in sim.reads:
        causes[c] = causes.get(c, 0) + n
    return {
        "pages": int(sim.cached.sum()),
        "bytes": int(sim.cached.sum()) * PAGE,
        "by_section": dict(sorted(by_section.items(), key=lambda kv: -kv[1])),
        "by_cause": causes,
        "faults": {"major": sim.major, "minor": sim.minor},
        "requests": len(sim.reads),
        "touches": int(len(pages)),
        "reads": [[p, n] for p, n, _c in sim.reads],
    }


def profile_touches(target: Target, img: ElfImage, code_bytes: int = 1, lib_map=None) -> tuple[np.ndarray, np.ndarray, dict]:
    """The profile's touch sequence as pages of ``img``: (pages, kinds, notes).

    Same build (build-id): offsets are used as they are. Another build (a relink): a
    function is placed by name (``check.lib_functions``, clone/thunk names as in
    ``resolve``); a data page by its section and its relative position in it, scaled
    to the section's size here (the profiled file must still exist for its section
    table); with ``lib_map`` (this library's link map) and the profile's own ``map``, a
    data page follows its input section instead (same name and object, same offset in
    it), which is what a data-ordered relink needs. ``code_bytes``: how much of a
    function its first execution is taken to touch from its entry (1 = the entry page
    only).
    """
    from elflayout.order.check import lib_functions
    from elflayout.order.resolve import clone_base, thunk_target

    same = bool(target.build_id) and target.build_id == img.build_id
    firsts, pages, kinds = [], [], []
    notes = {"same_build": same, "functions": 0, "functions_unplaced": 0, "pages": 0, "pages_unplaced": 0}
    funcs = None if same else lib_functions(img)
    for f in target.functions:
        first = f.first
        if same and f.offset is not None:
            off, size = f.offset, f.size or 1
        else:
            name = f.name
            c = funcs.get(name) or funcs.get(clone_base(name)) or funcs.get(thunk_target(name) or "")
            if not c:
                notes["functions_unplaced"] += 1
                continue
            off, size = c[0]
        last = off + max(1, min(size, code_bytes)) - 1
        for p in range(off // PAGE, last // PAGE + 1):
            firsts.append(first)
            pages.append(p)
            kinds.append(b"x")
        notes["functions"] += 1
    plist = target.pages
    if plist:
        pg = np.array([p.page for p in plist], dtype=np.int64)
        kd = np.array([p.kind.encode() for p in plist], dtype="S1")
        fs = np.array([p.first for p in plist], dtype=np.float64)
        if not same:
            moved = _remap_by_input_section(pg, target, img, lib_map, notes) if lib_map else None
            fallback = _remap_pages(pg, target, img, notes)
            dpg, dfirst = _dynstr_lookups(pg, fs, target, img, notes)
            pg = fallback if moved is None else np.where(moved >= 0, moved, fallback)
            if moved is not None:
                notes["pages_by_input_section"] = int((moved >= 0).sum())
            if dpg is not None:  # .dynstr reads: by name, not by relative position
                pg[dpg[0]] = -1
                firsts += [dfirst] * len(dpg[1])
                pages += dpg[1].tolist()
                kinds += [b"r"] * len(dpg[1])
        ok = pg >= 0
        if not same:
            ok &= kd != b"x"  # code pages of another build: functions place code
        notes["pages"] = int(ok.sum())
        notes["pages_unplaced"] += int((~ok).sum()) if same else 0
        firsts += fs[ok].tolist()
        pages += pg[ok].tolist()
        kinds += kd[ok].tolist()
    order = np.argsort(np.asarray(firsts, dtype=np.float64), kind="stable")
    return (np.asarray(pages, dtype=np.int64)[order] if pages else np.zeros(0, np.int64),
            np.asarray(kinds, dtype="S1")[order] if kinds else np.zeros(0, "S1"), notes)


def _remap_by_input_section(pg, target, img, lib_map, notes):
    """New pages of profiled data pages, following their input section (-1: not found)."""
    import os

    from elflayout import linkmap

    src_map, src_path = target.map, target.path
    if not (src_map and os.path.exists(src_map) and src_path and os.path.exists(src_path)):
        notes["remap_by_section"] = "the profile's own map or library is missing"
        return None
    with ElfImage(src_path) as src:
        if src.build_id != target.build_id:
            notes["remap_by_section"] = f"{src_path} is no longer the profiled build"
            return None
        a = linkmap.parse(src_map, src)
    b = linkmap.parse(lib_map, img)
    where = {}
    for k, (n, o, off) in enumerate(zip(b.name, b.object, b.offset.tolist())):
        if off >= 0 and b.size[k] > 0:
            where.setdefault((n, o), k)
    j = a.lookup_offsets(pg * PAGE)
    out = np.full(pg.shape, -1, dtype=np.int64)
    for i in np.flatnonzero(j >= 0).tolist():
        ja = int(j[i])
        k = where.get((a.name[ja], a.object[ja]))
        if k is None or a.name[ja].startswith(".text"):
            continue
        rel = min(int(pg[i] * PAGE - a.offset[ja]), int(b.size[k]) - 1)
        out[i] = (int(b.offset[k]) + max(0, rel)) // PAGE
    return out


def _dynstr_lookups(pg, fs, target, img, notes):
    """A relink's ``.dynstr`` reads are placed by name: the profiled build's touched
    ``.dynstr`` pages are dropped (their relative position says nothing once the names
    are reordered, ``order --dynstr-out``), and the pages of the names ld.so reads in
    this library (``dynstr.read_names``: its symbol relocations) are touched instead, at
    the first profiled ``.dynstr`` touch. Returns ((indices dropped, new pages), first)
    or (None, None) when the profile has no ``.dynstr`` touch or its library is gone."""
    import os

    from elflayout.order import dynstr

    src_path = target.path
    if not os.path.exists(src_path):
        return None, None
    with ElfImage(src_path) as src:
        if src.build_id != target.build_id:
            return None, None
        ss = src.section(".dynstr")
    ds = img.section(".dynstr")
    if ss is None or ds is None:
        return None, None
    hit = np.flatnonzero((pg * PAGE + PAGE > ss.offset) & (pg * PAGE < ss.offset + ss.size))
    if not len(hit):
        return None, None
    names, _rep = dynstr.read_names(img.path)
    recs, all_names = dynstr._dynsym(img)
    off = {}
    for n, o in zip(all_names, recs["st_name"].tolist()):
        off.setdefault(n, o)
    starts = np.array([off[n] for n in names if n in off], dtype=np.int64) + ds.offset
    ends = starts + np.array([len(n.encode()) for n in names if n in off], dtype=np.int64)
    new = np.stack([starts // PAGE, ends // PAGE], axis=1).ravel()
    _, first = np.unique(new, return_index=True)
    new = new[np.sort(first)]
    notes["dynstr_by_name"] = {"profiled_pages_dropped": int(len(hit)), "names": len(starts), "pages": int(len(new))}
    return (hit, new), float(np.min(fs[hit]))


def _remap_pages(pg: np.ndarray, target: Target, img: ElfImage, notes: dict) -> np.ndarray:
    import os

    out = np.full(pg.shape, -1, dtype=np.int64)
    src_path = target.path
    if not os.path.exists(src_path):
        notes["pages_unplaced"] = int(len(pg))
        notes["remap"] = "profiled file not found: data pages of another build cannot be placed"
        return out
    with ElfImage(src_path) as src:
        if src.build_id != target.build_id:
            notes["pages_unplaced"] = int(len(pg))
            notes["remap"] = f"{src_path} is no longer the profiled build"
            return out
        idx = src.section_of_offsets(pg * PAGE)
        src_secs = {s.index: s for s in src.sections}
        dst = {s.name: s for s in img.sections if s.occupies_file}
        for i in np.unique(idx[idx >= 0]).tolist():
            s = src_secs[i]
            d = dst.get(s.name)
            if d is None:
                continue
            m = idx == i
            rel = (pg[m] * PAGE - s.offset).clip(0) / max(1, s.size)
            out[m] = (d.offset + (rel * d.size).astype(np.int64).clip(0, max(0, d.size - 1))) // PAGE
    notes["pages_unplaced"] = int((out < 0).sum())
    return out
