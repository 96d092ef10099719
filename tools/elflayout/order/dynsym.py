"""Dynamic-symbol order: the symbols ld.so looks up at start-up together at the front of
``.dynsym``, ``.gnu.version`` and the ``.gnu.hash`` chains, after the link.

Why: for every symbol relocation ld.so reads the referencing ``.dynsym`` and
``.gnu.version`` entries, walks the defining object's ``.gnu.hash`` chain to the entry
whose hash matches and reads that entry and its name. Linkers order the hashed symbols by
bucket, i.e. by hash: the 9,300 symbols libLLVM-16 resolves when ``llc --version`` starts
lie on every one of the 285 pages of its ``.dynsym`` (48,478 symbols), and all of
``.gnu.version`` and of the chains are read too.

What the table allows: the hashed symbols of one bucket form one contiguous run (the
bucket holds the index of its first symbol, the entry whose low bit is set ends it); the
undefined symbols, not hashed, come before ``symoffset``. Runs may come in any order and
the symbols inside a run in any order (the walk compares each entry's hash, then name and
version), but for an unversioned lookup ld.so keeps the first of several same-name
definitions, so same-name entries keep their relative order. The bucket count is ours to
choose too: linkers size it at four symbols a bucket, so most runs holding a looked-up
symbol hold three others; in the same bytes, a bloom filter of fewer words (lld gives 12
to 24 bits a symbol) pays for more buckets and shorter runs. The filter only spares the
walk of a chain for a name the library does not define: a smaller one lets more of
those walks through, never changes what a lookup finds.

Citation: glibc ``elf/dl-lookup.c`` (``do_lookup_x``: bloom word, bucket, chain walk,
``check_match``), ``elf/dl-setup_hash.c``; the GNU hash section as lld's
``GnuHashTableSection`` writes it.

Steps:
1. Read the table; check every hashed symbol lies in its bucket's run and every run ends
   with the end bit: anything else is refused (nothing written).
2. Hot names: the names ld.so reads (``order.dynstr.read_names``). A run is hot if one of
   its symbols has a hot name. Hot runs first, in the order of their first hot name; inside
   one, the hot-named symbols first; then the other runs in their own order.
3. ``shape``: halve the bloom filter (never below MIN_BLOOM_BITS bits a symbol) for
   buckets when the modelled pages read go down; the runs of step 2 are then those of
   the new bucket count.
4. Permute the ``.dynsym`` and ``.gnu.version`` records, write the header, bloom filter,
   buckets and chain, map the symbol index of every relocation table linked to
   ``.dynsym``. Section sizes and every other byte stay.
5. ``verify``: every record and relocation the same but for the symbol index, which names
   the same record; a GNU hash lookup (bloom filter included) of every hashed name finds
   the same record.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from elflayout.elfcore import PAGE, ElfImage
from elflayout.errors import ElflayoutError
from elflayout.fileio import rewrite_in_place, write_proved
from elflayout.layouts import DT_HASH, DT_JMPREL, DT_PLTRELSZ, DT_REL, DT_RELA, DT_RELASZ, DT_RELSZ, SHF_ALLOC

GNU_HASH_HEADER = 16  # nbuckets, symoffset, bloom words, bloom shift (4 bytes each)
CHAIN_END = 1  # low bit of a chain word: last symbol of its bucket's run
RELOC_TYPES = ("SHT_RELA", "SHT_REL")
# A hashed symbol sets 2 bits: at 2 bits a symbol 4 lookups in 10 of a name not defined pass
# (1 in 20 at 8). A lookup that passes walks one chain, in pages start-up reads anyway when
# it looks up thousands of names (libLLVM-16: .gnu.hash read whole at 8 bits as at 2).
MIN_BLOOM_BITS = 2
_R_SYM_SHIFT = {64: 32, 32: 8}


def gnu_hash(name: bytes) -> int:
    """The GNU hash of a symbol name (DJB: h = h * 33 + c, from 5381, 32 bits)."""
    h = 5381
    for c in name:
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


def gnu_hash_layout(img: ElfImage, gh) -> tuple[tuple[int, int, int, int], tuple[int, int, int]]:
    """The header of the GNU hash section ``gh`` (nbuckets, symoffset, bloom words,
    shift) and the file offsets of its bloom filter, buckets and chain."""
    h = np.frombuffer(img.mm, ("<" if img.elf.little_endian else ">") + "u4", 4, gh.offset)
    nb, symoffset, maskwords, shift = (int(x) for x in h)
    bloom_at = gh.offset + GNU_HASH_HEADER
    bucket_at = bloom_at + img.wordsize * maskwords
    return (nb, symoffset, maskwords, shift), (bloom_at, bucket_at, bucket_at + 4 * nb)


class Tables:
    """The symbol tables of one image: raw records, names, hashes, the GNU hash layout."""

    def __init__(self, img: ElfImage):
        self.img = img
        sec = {s.type: s for s in img.sections if s.type in ("SHT_DYNSYM", "SHT_GNU_HASH", "SHT_GNU_versym")}
        if "SHT_DYNSYM" not in sec or "SHT_GNU_HASH" not in sec:
            raise ElflayoutError(f"{img.path}: no .dynsym or .gnu.hash: nothing to order")
        if img.dt(DT_HASH) is not None:
            raise ElflayoutError(f"{img.path}: has a SysV .hash (DT_HASH) as well: its chains would need the same "
                                 "order (link with --hash-style=gnu)")
        self.bo = "<" if img.elf.little_endian else ">"
        self.sym, self.gh, self.ver = sec["SHT_DYNSYM"], sec["SHT_GNU_HASH"], sec.get("SHT_GNU_versym")
        self.dynsym_index = self.sym.index
        es = self.sym.entsize or (24 if img.elfclass == 64 else 16)
        self.records = np.frombuffer(img.mm, np.uint8, self.sym.size // es * es, self.sym.offset).reshape(-1, es)
        self.n = len(self.records)
        self.versym = None if self.ver is None else np.frombuffer(img.mm, self.bo + "u2", self.n, self.ver.offset)
        st_name = self.records[:, :4].copy().view(self.bo + "u4").ravel()
        blob = bytes(img.mm[img.section(".dynstr").offset:][:img.section(".dynstr").size]) \
            if img.section(".dynstr") else b""
        self.names = [blob[o:blob.index(b"\0", o)] for o in st_name.tolist()]
        self._read_hash()

    def _read_hash(self) -> None:
        (self.nbuckets, self.symoffset, self.maskwords, self.shift), (self.bloom_at, self.bucket_at, self.chain_at) = \
            gnu_hash_layout(self.img, self.gh)
        if not 0 < self.symoffset <= self.n or self.chain_at + 4 * (self.n - self.symoffset) > \
                self.gh.offset + self.gh.size or self.nbuckets == 0:
            raise ElflayoutError(f"{self.img.path}: .gnu.hash does not fit its section or .dynsym")
        self.buckets = np.frombuffer(self.img.mm, self.bo + "u4", self.nbuckets, self.bucket_at)
        self.chain = np.frombuffer(self.img.mm, self.bo + "u4", self.n - self.symoffset, self.chain_at)
        self.hashes = np.array([gnu_hash(n) for n in self.names[self.symoffset:]], dtype=np.uint32)

    def runs(self) -> list[list[int]]:
        """The bucket runs in file order (symbol indices); refuses a table they do not explain."""
        b = self.hashes.astype(np.int64) % self.nbuckets
        ends = (self.chain & CHAIN_END).astype(bool)
        if len(b) and not ends[-1]:
            raise ElflayoutError(f"{self.img.path}: .gnu.hash: the last chain does not end")
        out, start = [], 0
        for k in np.flatnonzero(ends).tolist():
            run = list(range(start, k + 1))
            if (b[start:k + 1] != b[start]).any() or int(self.buckets[b[start]]) != start + self.symoffset \
                    or ((self.chain[start:k + 1] ^ self.hashes[start:k + 1]) & ~np.uint32(CHAIN_END)).any():
                raise ElflayoutError(f"{self.img.path}: .gnu.hash: symbols {start + self.symoffset}.. are not one "
                                     "bucket's run in the order the linker writes")
            out.append([i + self.symoffset for i in run])
            start = k + 1
        return out

    def reloc_sections(self) -> list:
        """Relocation sections linked to .dynsym; refuses dynamic relocations outside them."""
        secs = [s for s in self.img.sections if s.type in RELOC_TYPES
                and self.img.elf.get_section(s.index)["sh_link"] == self.dynsym_index]
        if any(not s.flags & SHF_ALLOC for s in secs):
            raise ElflayoutError(f"{self.img.path}: a relocation section not loaded refers to .dynsym")
        spans = [(s.addr, s.addr + s.size) for s in secs]
        for at, size in ((DT_RELA, DT_RELASZ), (DT_REL, DT_RELSZ), (DT_JMPREL, DT_PLTRELSZ)):
            a, n = self.img.dt(at), self.img.dt(size)
            if a is not None and n and not any(lo <= a and a + n <= hi for lo, hi in spans):
                raise ElflayoutError(f"{self.img.path}: dynamic relocations at {a:#x} lie outside the relocation "
                                     "sections of .dynsym")
        return secs

    def lookup(self, name: bytes) -> int | None:
        """Index of NAME's first definition found as ld.so's GNU hash walk finds it."""
        h = gnu_hash(name)
        word = self.img.wordsize * 8
        bloom = int(np.frombuffer(self.img.mm, self.bo + ("u8" if word == 64 else "u4"), 1,
                                  self.bloom_at + self.img.wordsize * ((h // word) % self.maskwords))[0])
        if not (bloom >> (h % word)) & (bloom >> ((h >> self.shift) % word)) & 1:
            return None
        i = int(self.buckets[h % self.nbuckets])
        while i >= self.symoffset:
            c = int(self.chain[i - self.symoffset])
            if (c | CHAIN_END) == (h | CHAIN_END) and self.names[i] == name:
                return i
            if c & CHAIN_END:
                return None
            i += 1
        return None


def _rank(hot_names) -> dict:
    rank = {}
    for n in hot_names:
        rank.setdefault(n.encode() if isinstance(n, str) else n, len(rank))
    return rank


def _runs(t: Tables, nbuckets: int) -> list[list[int]]:
    """The hashed symbols grouped by bucket of an ``nbuckets`` table, each group in index
    order (same-name entries share a hash, so they keep their order)."""
    runs: dict[int, list[int]] = {}
    for k, h in enumerate((t.hashes.astype(np.int64) % nbuckets).tolist()):
        runs.setdefault(h, []).append(k + t.symoffset)
    return list(runs.values())


def plan(t: Tables, hot_names, nbuckets: int | None = None) -> np.ndarray:
    """Step 2: the new order, ``perm[new index] = old index``, for a table of ``nbuckets``
    buckets (default: the linker's)."""
    rank = _rank(hot_names)
    runs = t.runs()  # the linker's table, checked
    if nbuckets not in (None, t.nbuckets):
        runs = _runs(t, nbuckets)
    hot, cold = [], []
    for run in runs:
        r = [rank[t.names[i]] for i in run if t.names[i] in rank]
        if r:
            first = [i for i in run if t.names[i] in rank]
            hot.append((min(r), first + [i for i in run if t.names[i] not in rank]))
        else:
            cold.append(run)
    hot.sort(key=lambda x: x[0])
    order = list(range(t.symoffset)) + [i for _, run in hot for i in run] + [i for run in cold for i in run]
    return np.array(order, dtype=np.int64)


def shape(t: Tables, hot_names, min_bloom_bits: float = MIN_BLOOM_BITS) -> tuple[int, int]:
    """(bloom words, buckets) of the rewritten table, in the linker's bytes: the bloom
    filter halved trades for buckets (fewer symbols a bucket, so
    fewer cold symbols in the runs read) when the modelled pages of the runs read, their
    chain words, the buckets and the bloom filter (each read whole at start-up) go down;
    never below ``min_bloom_bits`` bits a hashed symbol."""
    word = t.img.wordsize
    rank = _rank(hot_names)
    hashed = t.n - t.symoffset
    es = t.records.shape[1]

    def pages(n: int) -> int:
        return -(-n // PAGE)

    best = None
    for k in range(t.maskwords.bit_length()):
        mw = t.maskwords >> k
        if mw < 1 or (mw << k) != t.maskwords or mw * word * 8 < min_bloom_bits * hashed:
            break
        nb = t.nbuckets + (t.maskwords - mw) * word // 4
        region = sum(len(r) for r in _runs(t, nb) if any(t.names[i] in rank for i in r))
        cost = pages((t.symoffset + region) * es) + pages(4 * region) + pages(4 * nb) + pages(mw * word)
        if best is None or cost < best[0]:
            best = (cost, mw, nb)
    return (best[1], best[2]) if best else (t.maskwords, t.nbuckets)


def _write_hash(t: Tables, out: bytearray, perm: np.ndarray, maskwords: int, nbuckets: int) -> None:
    """Header, bloom filter, buckets and chain of the reordered table, in the section's bytes."""
    word = t.img.wordsize
    h = t.hashes[perm[t.symoffset:] - t.symoffset]
    bits = word * 8
    bloom = np.zeros(maskwords, dtype=np.uint64)
    h64 = h.astype(np.uint64)
    idx = ((h64 // np.uint64(bits)) % np.uint64(maskwords)).astype(np.int64)
    mask = (np.uint64(1) << (h64 % np.uint64(bits))) | (np.uint64(1) << ((h64 >> np.uint64(t.shift)) % np.uint64(bits)))
    np.bitwise_or.at(bloom, idx, mask)
    bucket = (h.astype(np.int64) % nbuckets)
    last = np.ones(len(h), dtype=bool)
    last[:-1] = bucket[:-1] != bucket[1:]
    chain = (h & ~np.uint32(CHAIN_END)) | last.astype(np.uint32)
    buckets = np.zeros(nbuckets, dtype=np.uint32)
    first = np.ones(len(h), dtype=bool)
    first[1:] = last[:-1]
    buckets[bucket[first]] = np.flatnonzero(first) + t.symoffset
    parts = [np.array([nbuckets, t.symoffset, maskwords, t.shift], dtype=t.bo + "u4").tobytes(),
             bloom.astype(t.bo + ("u8" if word == 8 else "u4")).tobytes(),
             buckets.astype(t.bo + "u4").tobytes(), chain.astype(t.bo + "u4").tobytes()]
    table = b"".join(parts)
    if len(table) != t.chain_at + 4 * len(t.chain) - t.gh.offset:
        raise RuntimeError(f"{t.img.path}: the rewritten .gnu.hash would change size")
    out[t.gh.offset:t.gh.offset + len(table)] = table


def _write_relocs(t: Tables, out: bytearray, new_of_old: np.ndarray) -> int:
    """Map each relocation's symbol index; returns the number of relocations changed."""
    shift = np.uint64(_R_SYM_SHIFT[t.img.elfclass])
    changed = 0
    for s in t.reloc_sections():
        dt = t.img.reloc_dtype(s).newbyteorder(t.bo)
        rel = np.frombuffer(t.img.mm, dt, s.size // dt.itemsize, s.offset).copy()
        info = rel["r_info"].astype(np.uint64)
        new = new_of_old[(info >> shift).astype(np.int64)].astype(np.uint64)
        info2 = (new << shift) | (info & ((np.uint64(1) << shift) - np.uint64(1)))
        changed += int((info2 != info).sum())
        rel["r_info"] = info2
        out[s.offset:s.offset + rel.nbytes] = rel.tobytes()
    return changed


def reorder(src: str | Path, dst: str | Path, hot_names, reshape: bool = True,
            min_bloom_bits: float = MIN_BLOOM_BITS) -> dict:
    """Write SRC to DST with its hot dynamic symbols first (steps 1–4), proved by ``verify``;
    ``reshape``: bloom words and buckets as ``shape`` chooses (else the linker's)."""
    with ElfImage(src) as img:
        t = Tables(img)
        maskwords, nbuckets = shape(t, hot_names, min_bloom_bits) if reshape else (t.maskwords, t.nbuckets)
        perm = plan(t, hot_names, nbuckets)
        new_of_old = np.empty(t.n, dtype=np.int64)
        new_of_old[perm] = np.arange(t.n)
        out = bytearray(img.mm)
        out[t.sym.offset:t.sym.offset + t.records.size] = t.records[perm].tobytes()
        if t.versym is not None:
            out[t.ver.offset:t.ver.offset + 2 * t.n] = t.versym[perm].tobytes()
        _write_hash(t, out, perm, maskwords, nbuckets)
        changed = _write_relocs(t, out, new_of_old)
        want = {n.encode() if isinstance(n, str) else n for n in hot_names}
        hot = sum(1 for i in range(t.symoffset, t.n) if t.names[perm[i]] in want)
        moved = int((perm != np.arange(t.n)).sum())
    write_proved(src, dst, bytes(out), verify)
    return {"symbols": t.n, "hashed": t.n - t.symoffset, "hot": hot, "moved": moved, "relocations_changed": changed,
            "buckets": [t.nbuckets, nbuckets], "bloom_words": [t.maskwords, maskwords]}


def verify(src: str | Path, dst: str | Path) -> None:
    """Step 5. A difference is our bug (RuntimeError: exit 3), never a kept output."""
    with ElfImage(src) as a_img, ElfImage(dst) as b_img:
        a, b = Tables(a_img), Tables(b_img)
        if a_img.size != b_img.size or (a.n, a.symoffset, a.shift, a.chain_at + 4 * len(a.chain)) != \
                (b.n, b.symoffset, b.shift, b.chain_at + 4 * len(b.chain)) or b.maskwords & (b.maskwords - 1):
            raise RuntimeError(f"{dst}: dynamic-symbol order changed the file's size or the hash table's shape")
        key_a = {a.records[i].tobytes() + (b"" if a.versym is None else a.versym[i].tobytes()): i for i in range(a.n)}
        new_of_old = np.full(a.n, -1, dtype=np.int64)
        for j in range(b.n):
            i = key_a.get(b.records[j].tobytes() + (b"" if b.versym is None else b.versym[j].tobytes()), -1)
            if i < 0 or new_of_old[i] >= 0:
                raise RuntimeError(f"{dst}: .dynsym record {j} is not one of the original records")
            new_of_old[i] = j
        if (new_of_old[:a.symoffset] != np.arange(a.symoffset)).any():
            raise RuntimeError(f"{dst}: an undefined (unhashed) symbol moved")
        _verify_rest(a, b, new_of_old, dst)
        for i in range(a.symoffset, a.n):
            fa = a.lookup(a.names[i])
            fb = b.lookup(a.names[i])
            if fa is None or fb is None or new_of_old[fa] != fb:
                raise RuntimeError(f"{dst}: the lookup of {a.names[i].decode(errors='replace')!r} finds another symbol")
        b.runs()


def _verify_rest(a: Tables, b: Tables, new_of_old: np.ndarray, dst) -> None:
    """Every byte outside the tables equal; relocations equal but for the mapped symbol."""
    ma, mb = a.img.mm, b.img.mm
    spans = sorted([(a.sym.offset, a.sym.offset + a.sym.size), (a.gh.offset, a.chain_at + 4 * len(a.chain))]
                   + ([(a.ver.offset, a.ver.offset + a.ver.size)] if a.ver is not None else []))
    relocs = a.reloc_sections()
    spans += [(s.offset, s.offset + s.size) for s in relocs]
    at = 0
    for lo, hi in sorted(spans) + [(a.img.size, a.img.size)]:
        if ma[at:lo] != mb[at:lo]:
            raise RuntimeError(f"{dst}: dynamic-symbol order changed bytes outside its tables ({at:#x}..{lo:#x})")
        at = max(at, hi)
    shift = np.uint64(_R_SYM_SHIFT[a.img.elfclass])
    ta, tb = a.img.reloc_tables(), b.img.reloc_tables()
    for s in relocs:
        ra, rb = ta.get(s.name), tb.get(s.name)
        if ra is None or rb is None or len(ra) != len(rb):
            raise RuntimeError(f"{dst}: relocation table {s.name} changed its size")
        ia, ib = ra["r_info"].astype(np.uint64), rb["r_info"].astype(np.uint64)
        mask = (np.uint64(1) << shift) - np.uint64(1)
        same = (new_of_old[(ia >> shift).astype(np.int64)] == (ib >> shift).astype(np.int64)) & \
               ((ia & mask) == (ib & mask)) & (ra["r_offset"] == rb["r_offset"])
        if "r_addend" in ra.dtype.names:
            same &= ra["r_addend"] == rb["r_addend"]
        if not same.all():
            raise RuntimeError(f"{dst}: relocation {int(np.flatnonzero(~same)[0])} of {s.name} changed")


def reorder_in_place(path: str | Path, hot_names, **kw) -> dict:
    """``reorder`` PATH onto itself (a temporary file beside it, then renamed)."""
    return rewrite_in_place(path, lambda src, dst: reorder(src, dst, hot_names, **kw), "dynsym")
