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
   window restarts at the gap ``page_cache_next_miss`` reports if it is at most ra_pages
   away (reported late past a large folio: ``Simulator._next_miss``); ``order += 2``
   each time, and the window's end is rounded down to a folio of that order. Folios are
   laid out as ``page_cache_ra_order`` allocates them (aligned, 4 → 16 → 32 pages; one
   page each from the first that would overlap a cached page on); the PG_readahead mark
   is on the folio holding the mark index.
5. A page already read is never read again; only pages not yet cached are counted,
   clipped to EOF. Write faults on private mappings (``do_cow_fault``) skip fault-around.

On request (``hugepage``, a what-if: ld.so does not madvise): the VM_HUGEPAGE path of
``do_sync_mmap_readahead``: two 2 MiB folios from the 512-page-aligned index, the
second async, before the ra_pages and mmap_miss checks.

**Page size** (``page_size``: 4, 16 or 64 KiB, as arm64 kernels run): the model works
in pages of that size: ``ra_pages = read_ahead_kb / page``, fault-around covers
fault_around_bytes (64 KiB: 4 pages of 16 KiB, none beyond the faulting page at 64 KiB),
PMD folios are ``page / 8`` pages; on arm64 (``exec_folio_bytes`` 64 KiB, the kernel's
``exec_folio_order()``, 6.16+) a VM_EXEC sync read starts at the folio-aligned index and
ends rounded up to a folio. Profiles and measurements are in 4 KiB pages: figures at 16
and 64 KiB are modelled, not measured.

Not modelled: VM_RAND_READ/VM_SEQ_READ (no madvise by ld.so), memory pressure, other processes
sharing the file's readahead state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from elflayout import elfcore
from elflayout.elfcore import PAGE, ElfImage
from elflayout.errors import ElflayoutError
from elflayout.layouts import PF_W, PF_X

HPAGE_PMD_NR = 512  # x86-64: 2 MiB PMD folios (4 KiB pages: a page table holds page / 8 entries)
MMAP_LOTSAMISS = 100  # mm/filemap.c: stop read-around when misses outnumber hits by this
XA_CHUNK_SIZE = 64  # include/linux/xarray.h: slots per xarray node
FAULT_AROUND_BYTES = 65536  # /sys/kernel/mm/... fault_around_bytes default 64 KiB
FAULT_AROUND_PAGES = FAULT_AROUND_BYTES // PAGE
PAGE_SIZES = (4096, 16384, 65536)  # arm64 kernels' page sizes; x86-64 has 4 KiB only
EXEC_FOLIO_BYTES = {"EM_AARCH64": 65536}  # arch exec_folio_order(): arm64 asks 64 KiB (contpte)
KIND_CODE = {"x": "x", "r": "r", "w": "w", "t": "t", "R": "R"}


@dataclass
class Vma:
    start: int  # first file page
    end: int  # one past the last file page
    exec: bool
    write: bool
    delta: int  # virtual page - file page


def vmas_of(img: ElfImage, page: int = PAGE) -> list[Vma]:
    out = []
    for s in img.loads:
        if s.filesz == 0:
            continue
        fp0 = s.offset // page
        fp1 = -(-(s.offset + s.filesz) // page)
        out.append(Vma(fp0, fp1, bool(s.flags & PF_X), bool(s.flags & PF_W), s.vaddr // page - fp0))
    return out


def check_page_size(img: ElfImage, page: int) -> None:
    """A library loads with ``page``-sized pages only if its segments are congruent
    modulo it (ld.so maps each at offset ≡ vaddr mod page)."""
    if page not in PAGE_SIZES:
        raise ElflayoutError(f"page size {page}: choose 4, 16 or 64 KiB")
    bad = [s for s in img.loads if (s.vaddr - s.offset) % page]
    if bad:
        raise ElflayoutError(f"{img.path}: does not load with {page // 1024} KiB pages (PT_LOAD at offset "
                             f"{bad[0].offset:#x} has vaddr {bad[0].vaddr:#x}: linked with a max-page-size below "
                             f"{page // 1024} KiB)")


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
    fault_around: int = FAULT_AROUND_PAGES  # pages of fault_around_bytes
    pmd_pages: int = HPAGE_PMD_NR
    exec_folio: int = 1  # pages of exec_folio_order() (1: the architecture asks none)
    cached: np.ndarray = field(init=False)
    mark: np.ndarray = field(init=False)  # PG_readahead: folio size (pages) of the marked folio, 0 = none
    reads: list = field(default_factory=list)  # (page, npages, cause)
    triggers: list = field(default_factory=list)  # (folio start, folio pages, kind): marks that started a read
    major: int = 0
    minor: int = 0

    def __post_init__(self):
        self.cached = np.zeros(self.npages, dtype=bool)
        self.mark = np.zeros(self.npages, dtype=np.int32)
        self.folio = np.arange(self.npages, dtype=np.int64)  # first page of each cached page's folio
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
        self._lay_folios(start, end, order)
        self.cached[start:end] = True
        idx = np.flatnonzero(new) + start
        # contiguous runs for the read log
        brk = np.flatnonzero(np.diff(idx) != 1)
        for a, b in zip(np.r_[0, brk + 1], np.r_[brk, len(idx) - 1]):
            self.reads.append((int(idx[a]), int(idx[b] - idx[a] + 1), cause))
        if mark_at is not None and start <= mark_at < end and new[mark_at - start]:
            f0 = int(self.folio[mark_at])  # ra_alloc_folio marks the folio holding the mark index
            f1 = f0 + int(np.count_nonzero(self.folio[f0:end] == f0))
            self.mark[f0:f1] = f1 - f0

    def _lay_folios(self, start: int, end: int, order: int) -> None:
        """Folios of the uncached pages of a window as ``page_cache_ra_order`` allocates
        them: 2**order pages, smaller where the index is unaligned or the window ends;
        from the first folio that would overlap a cached page on, one page each (the
        ``-EEXIST`` fallback to ``do_page_cache_ra``)."""
        i = start
        while i < end:
            o = order
            if i & ((1 << o) - 1):
                o = (i & -i).bit_length() - 1
            while o > 0 and i + (1 << o) > end:
                o -= 1
            if self.cached[i:i + (1 << o)].any():
                break
            self.folio[i:i + (1 << o)] = i
            i += 1 << o
        rest = np.flatnonzero(~self.cached[i:end]) + i
        self.folio[rest] = rest

    def _next_miss(self, index: int, max_scan: int) -> int:
        """``page_cache_next_miss(mapping, index, max_scan)`` (mm/filemap.c) as the kernel
        computes it: ``xas_load`` leaves the xarray cursor on the first slot of the large
        folio holding ``index`` while ``xa_index`` stays at ``index``, and ``xas_next``
        steps both, so the gap found past a large folio is reported ``index - folio
        start`` pages later (until the cursor leaves the 64-slot node and is set again by
        ``xa_index``). Measured on 6.18: a fault inside a marked 16-page folio, except on
        its last page, finds the gap 33 pages away and starts no read."""
        node = index - index % XA_CHUNK_SIZE
        if index >= self.npages or not self.cached[index]:
            return index
        slot = int(self.folio[index])
        for n in range(max_scan):
            if slot >= self.npages or not self.cached[slot]:
                return index + n
            slot += 1
            if slot - node == XA_CHUNK_SIZE:  # __xas_next: up and down the tree again, by xa_index
                i = index + n + 1
                node = i - i % XA_CHUNK_SIZE
                slot = i  # xas_set_offset: the slot of xa_index itself, aligned again
        return index + max_scan

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
                n, folio = len(self.reads), (int(self.folio[page]), int(self.mark[page]), kind)
                self._async(page)
                if len(self.reads) > n:
                    self.triggers.append(folio)
        else:
            self.major += 1
            self._sync(page, vma)
        mapped[page] = True

    def _fault_around(self, page: int, vi: int) -> None:
        v = self.vmas[vi]
        vp = page + v.delta
        w0 = vp - vp % self.fault_around - v.delta
        a, b = max(w0, v.start), min(w0 + self.fault_around, v.end, self.npages)
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
            pmd = self.pmd_pages
            order = pmd.bit_length() - 1
            start = page - page % pmd
            self.ra_start, self.ra_size, self.ra_async, self.ra_order = start, 2 * pmd, pmd, order
            self._read(start, start + 2 * pmd, start + pmd, order, "hugepage")
            return
        if self.mmap_miss < MMAP_LOTSAMISS * 10:
            self.mmap_miss += 1
        if ra == 0 or self.mmap_miss > MMAP_LOTSAMISS:
            self._read(page, page + 1, None, 0, "miss")
            return
        if vma.exec:
            f = self.exec_folio  # arm64: from the folio-aligned index, whole folios
            start = max(page - page % f, vma.start)
            end = min(-(-(start + ra) // f) * f, vma.end)
            self.ra_start, self.ra_size, self.ra_async, self.ra_order = start, end - start, 0, 0
            self._read(start, end, None, 0, "exec")
        else:
            start = max(0, page - ra // 2)
            self.ra_start, self.ra_size, self.ra_async, self.ra_order = start, ra, ra // 4, 0
            self._read(start, start + ra, start + ra - ra // 4, 0, "around")

    def _async(self, page: int) -> None:
        maxp = self.ra_pages
        if not maxp:  # page_cache_async_ra: no readahead, the mark stays
            return
        fsz = int(self.mark[page])
        f0 = int(self.folio[page])
        self.mark[f0:f0 + fsz] = 0
        expected = self.ra_start + self.ra_size - self.ra_async
        expected -= expected % max(1, fsz)
        if page == expected:
            self.ra_start += self.ra_size
            self.ra_size = max(self.ra_size, _next_ra_size(self.ra_size, maxp))
            self.ra_async = self.ra_size
        else:
            # "Hit a marked folio without valid readahead state": page_cache_next_miss
            start = self._next_miss(page + 1, maxp)
            if start - page > maxp or start >= self.npages:
                return
            self.ra_start = start
            self.ra_size = _next_ra_size(start - page + maxp, maxp)
            self.ra_async = self.ra_size
        self.ra_order += 2
        # the window ends on a folio boundary of the new order (capped by ra_pages' lowest bit)
        align = 1 << min(self.ra_order, (maxp & -maxp).bit_length() - 1)
        end = self.ra_start + self.ra_size
        if end - end % align > self.ra_start:
            self.ra_size -= end % align
        self.ra_async = self.ra_size
        order = min(self.ra_order, max(0, self.ra_size.bit_length() - 1))
        self._read(self.ra_start, self.ra_start + self.ra_size, self.ra_start + self.ra_size - self.ra_async, order,
                   "async")


def loader_touches(img: ElfImage, page: int = PAGE) -> tuple[np.ndarray, np.ndarray]:
    """Pages ld.so touches in this library before running any of its code: (pages, kinds).

    Kinds: b"R" read(), b"r" read fault, b"w" write fault. Relocation entries and their
    targets interleave as ld.so processes them; each page is kept at its first touch.
    """
    pages, kinds = [np.array([0])], [np.array([b"R"])]
    for s in img.loads:
        if s.memsz > s.filesz and s.filesz and (s.offset + s.filesz) % page:
            pages.append(np.array([(s.offset + s.filesz - 1) // page]))
            kinds.append(np.array([b"w"]))
    dyn = img.dynamic
    if dyn.present:
        pages.append(np.array([dyn.offset // page]))
        kinds.append(np.array([b"r"]))
    relr = img.section(".relr.dyn")
    if relr is not None and relr.size:
        from elflayout.elfcore import relr_decode

        words = np.frombuffer(img.mm, dtype="<u8", count=relr.size // 8, offset=relr.offset)
        tgt = img.vaddr_to_offset(relr_decode(words))
        n = len(words)
        src = (relr.offset + np.arange(n) * 8) // page
        pages += [src, tgt[tgt >= 0] // page]
        kinds += [np.full(n, b"r"), np.full(int((tgt >= 0).sum()), b"w")]
    for name, rel in img.reloc_tables().items():
        sec = img.section(name)
        n = len(rel)
        if n == 0:
            continue
        src = (sec.offset + np.arange(n, dtype=np.int64) * rel.dtype.itemsize) // page
        tgt = img.vaddr_to_offset(rel["r_offset"]) // page
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
             hugepage: bool = False, page_size: int = PAGE, triggers: list | None = None) -> dict:
    """Replay touches (4 KiB file pages, kinds b"x"/b"r"/b"w"/b"t") and report pages
    read, in pages of ``page_size`` bytes (``page_size``: the module docstring).
    ``triggers``: a list to extend with (first page, pages, kind) of each marked folio
    (PG_readahead) whose touch started an asynchronous read."""
    if page_size != PAGE:
        check_page_size(img, page_size)
    page = page_size
    pages = np.asarray(pages, dtype=np.int64) * elfcore.PAGE // page
    npages = -(-img.size // page)
    sim = Simulator(npages, vmas_of(img, page), max(0, read_ahead_kb * 1024 // page), hugepage,
                    fault_around=max(1, FAULT_AROUND_BYTES // page), pmd_pages=page // 8,
                    exec_folio=max(1, EXEC_FOLIO_BYTES.get(img.machine, 0) // page))
    writable = np.zeros(npages + 1, dtype=bool)
    for v in sim.vmas:
        if v.write:
            writable[v.start:v.end] = True
    dyn = img.dynamic
    dyn_page = dyn.offset // page if dyn.present else -1
    if loader:
        lp, lk = loader_touches(img, page)
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
    if triggers is not None:
        triggers.extend(sim.triggers)
    read_pages = np.flatnonzero(sim.cached)
    sec_idx = img.section_of_offsets(read_pages * page)
    names = {s.index: s.name for s in img.sections}
    by_section: dict[str, int] = {}
    for i, c in zip(*np.unique(sec_idx, return_counts=True)):
        by_section[names.get(int(i), "(other)") if i >= 0 else "(other)"] = int(c)
    causes: dict[str, int] = {}
    for _p, n, c in sim.reads:
        causes[c] = causes.get(c, 0) + n
    return {
        "pages": int(sim.cached.sum()),
        "bytes": int(sim.cached.sum()) * page,
        "by_section": dict(sorted(by_section.items(), key=lambda kv: -kv[1])),
        "by_cause": causes,
        "faults": {"major": sim.major, "minor": sim.minor},
        "requests": len(sim.reads),
        "touches": int(len(pages)),
        "reads": [[p, n] for p, n, _c in sim.reads],
    }
