"""A simulated dynamic loader: proof that a packed library relocates to the same bytes.

``relocated_image(path, base)`` maps the PT_LOAD segments of a file into a flat image
(index = link-time address, bss zero) and applies its dynamic relocations the way
glibc's ld.so does, in glibc's order: DT_RELR first, then the DT_RELA range, then
DT_JMPREL (eager binding). Tables are found through the dynamic array, as the loader
finds them, never through section headers. Values:

  RELATIVE  B + A            RELR       word += B
  64        S + A            GLOB_DAT, JUMP_SLOT   S
  IRELATIVE mix(B + A)       (stands for "call the resolver at B + A")
  TLS       fixed fake module id / offsets derived from S and A

where B is the load base and S a fixed fake address derived from the symbol's *name*
(so input and output agree even if their symbol tables sit at different places).

``compare(a, b)`` relocates both files at two bases and compares every byte of the
images, except the dynamic-linking tables themselves (relocation tables, dynamic
array, symbol/version/hash tables), which the packer legitimately rewrites; those are
checked field by field instead (``compare_tables``).
"""

from __future__ import annotations

import contextlib
import hashlib

import numpy as np

from elflayout import elfcore
from elflayout import layouts as L
from elflayout.errors import ElflayoutError, Finding
from elflayout.relocs import arch as A
from elflayout.relocs import realload, selfapply
from elflayout.relocs.glibc import GLIBC_ABI_DT_RELR, GLIBC_ABI_DT_RELR_HASH, glibc_requires_relr_need

CHUNK = 1 << 24  # bytes compared at a time
MAX_IMAGE = 1 << 30  # address span simulated; three images' worth is held at once
BASES = (0x7F3A_5C00_0000, 0x0000_5555_0000_0000)  # two page-aligned bases, different high bits
MASK = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
_MIX = np.uint64(0x9E37_79B9_7F4A_7C15)
FAKE_MODID = np.uint64(0x4D0D)
FAKE_TP = np.uint64(0xFFFF_FFFF_FFF0_0000)  # "TLS block offset" of symbol 0 (this module)
# Section types that are dynamic-linking metadata (rewritten by the packer, compared apart).
META_TYPES = {L.SHT_RELA, L.SHT_RELR, L.SHT_DYNAMIC, L.SHT_DYNSYM, L.SHT_HASH, L.SHT_GNU_HASH,
              L.SHT_GNU_VERDEF, L.SHT_GNU_VERNEED, L.SHT_GNU_VERSYM, L.SHT_REL}


def _fake(name: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(name, digest_size=8).digest(), "little") & ~0xF


class Loaded:
    """One file opened for simulation: its dynamic array, tables and symbol names."""

    def __init__(self, path):
        self.img = elfcore.ElfImage(path)
        img = self.img
        self.arch = A.arch_of(img)
        if self.arch.elfclass != 64:
            raise ElflayoutError(f"{img.path}: the simulated loader handles ELF64 only")
        try:
            self.ehdr, self.phdrs, _ = L.read_headers(img.mm)
        except ValueError as e:
            raise ElflayoutError(f"{img.path}: truncated ELF file ({e})") from None
        self.dynamic = img.dynamic  # through PT_DYNAMIC, as ld.so and the packer read it
        if self.dynamic.segments != 1:
            raise ElflayoutError(f"{img.path}: no PT_DYNAMIC")
        self.dyn = self.dynamic.live
        self.dyn_range = self.dynamic.range
        self._raw = self._relr = None

    def tag(self, t, default=None):
        return self.dynamic.get(t, default)

    def at(self, vaddr, nbytes, dtype=np.uint8):
        if vaddr is None:
            raise ElflayoutError(f"{self.img.path}: a dynamic table is in the section headers but its DT_* tag "
                                 "is missing")
        if nbytes < 0:
            raise ElflayoutError(f"{self.img.path}: dynamic table at {vaddr:#x} has a negative size")
        off = self.img.vaddr_to_offset(vaddr)
        if off < 0 or off + nbytes > self.img.size:
            raise ElflayoutError(f"{self.img.path}: dynamic table at {vaddr:#x} is not in the file")
        return np.frombuffer(self.img.mm, dtype, nbytes // np.dtype(dtype).itemsize, off)

    def rela(self, tag_addr, tag_size):
        """A whole RELA table by its tags (for counts; ``rela_ranges`` is the loader's view)."""
        a, n = self.tag(tag_addr), self.tag(tag_size, 0)
        if a is None or n == 0:
            return np.zeros(0, L.RELA64)
        return self.at(a, n, L.RELA64)

    def relr(self) -> np.ndarray:
        if self._relr is None:
            a, n = self.tag(L.DT_RELR), self.tag(L.DT_RELRSZ, 0)
            self._relr = np.zeros(0, np.uint64) if a is None or n == 0 else \
                elfcore.relr_decode(self.at(a, n, np.uint64))
        return self._relr

    def origin_levels(self) -> int | None:
        """How far above the file's directory DT_RPATH/DT_RUNPATH reach through ``$ORIGIN``
        (``$ORIGIN/../lib``: 1); None without ``$ORIGIN``."""
        strtab = self.at(self.tag(L.DT_STRTAB), self.tag(L.DT_STRSZ, 0)).tobytes()
        tags = np.isin(self.dyn["d_tag"], (L.DT_RPATH, L.DT_RUNPATH))
        up = None
        for v in self.dyn["d_val"][tags].tolist():
            for p in L.cstr(strtab, int(v)).replace(b"${ORIGIN}", b"$ORIGIN").split(b":"):
                if p.startswith(b"$ORIGIN"):
                    up = max(up or 0, p.split(b"/").count(b".."))
        return up

    def needed(self) -> set[bytes]:
        """DT_NEEDED names."""
        strtab = self.at(self.tag(L.DT_STRTAB), self.tag(L.DT_STRSZ, 0)).tobytes()
        return {L.cstr(strtab, int(v)) for v in self.dyn["d_val"][self.dyn["d_tag"] == L.DT_NEEDED]}

    def sym_fake(self, symidx: np.ndarray) -> np.ndarray:
        """Fake address per symbol index, from the symbol's name (0 for index 0)."""
        out = np.zeros(symidx.size, np.uint64)
        u, inv = np.unique(symidx, return_inverse=True)
        if not u.size:
            return out
        st, sy = self.tag(L.DT_STRTAB), self.tag(L.DT_SYMTAB)
        # ld.so reads entry i wherever it lies: past the table, the bytes of whatever
        # follows, which a rewrite that moves the table changes (the fake would not see it)
        n = next((x.size // L.SYM64.itemsize for x in self.img.sections if x.type == "SHT_DYNSYM" and x.addr == sy), None)
        if n is not None and int(u.max()) >= n:
            raise ElflayoutError(f"{self.img.path}: a relocation names dynamic symbol {int(u.max()):,}, past the end "
                                 f"of .dynsym ({n:,} symbols)")
        strsz = self.tag(L.DT_STRSZ, 0)
        strtab = self.at(st, strsz).tobytes()
        syms = self.at(sy, (int(u.max()) + 1) * L.SYM64.itemsize, L.SYM64)
        vals = np.array([0 if i == 0 else _fake(L.cstr(strtab, int(syms["st_name"][i]))) for i in u.tolist()],
                        np.uint64)
        return vals[inv]

    def image(self, base: int, last: bool = False) -> np.ndarray:
        """The relocated image at load base ``base`` (uint8, index = link-time vaddr).
        ``last``: no image follows, relocate the unrelocated one in place (no copy:
        Chromium's executable maps 297 MB)."""
        loads = self.phdrs[self.phdrs["p_type"] == L.PT_LOAD]
        if not loads.size:
            raise ElflayoutError(f"{self.img.path}: no PT_LOAD segment")
        size = L.align_up(int((loads["p_vaddr"] + loads["p_memsz"]).max()), 8)
        if size > MAX_IMAGE or np.any(loads["p_offset"] + loads["p_filesz"] > self.img.size) \
                or np.any(loads["p_filesz"] > loads["p_memsz"]):
            raise ElflayoutError(f"{self.img.path}: PT_LOAD segments span {size:,} bytes or lie outside the file: "
                                 f"too large or inconsistent for the simulated loader (limit {MAX_IMAGE >> 20} MiB)")
        if self._raw is None:  # the mapped, unrelocated image: built once, copied per base
            self._raw = np.zeros(size, np.uint8)
            buf = self.img.buf
            for p in loads:
                v, o, n = int(p["p_vaddr"]), int(p["p_offset"]), int(p["p_filesz"])
                self._raw[v:v + n] = buf[o:o + n]
        im = self._raw if last else self._raw.copy()
        if last:
            self._raw = None
        w = im.view("<u8")
        B = np.uint64(base)
        relr = self.relr()
        if relr.size:
            if np.any(relr % 8) or relr.max() + 8 > size:
                raise ElflayoutError(f"{self.img.path}: DT_RELR address outside the image or misaligned")
            w[(relr // 8).astype(np.int64)] += B
        for t, nrelative in self.rela_ranges():
            self._apply(im, w, t, nrelative, B)
        ap = self.applier()
        if ap is not None and ap["via"] == "preinit" and int(w[ap["preinit"] // 8]) != (base + ap["entry"]) % 2**64:
            ap = None  # ld.so would not call the routine: its table stays unapplied (the images differ)
        if ap is not None:  # DT_INIT/DT_PREINIT_ARRAY runs it after relocation, before any other initializer
            words = im[ap["relr_start"]:ap["relr_end"]].view("<u8") if ap["relr_end"] <= size else None
            if words is None or ap["relr_start"] % 8 or (ap["relr_end"] - ap["relr_start"]) % 8:
                raise ElflayoutError(f"{self.img.path}: self-applying table outside the image or misaligned")
            addrs = elfcore.relr_decode(words.copy())
            if addrs.size and (np.any(addrs % 8) or addrs.max() + 8 > size):
                raise ElflayoutError(f"{self.img.path}: self-applied address outside the image or misaligned")
            w[(addrs // 8).astype(np.int64)] += B
        return im

    def applier(self) -> dict | None:
        """The self-applying routine (relocs/selfapply.py) DT_INIT points at (``via``
        "init"), or an executable's first DT_PREINIT_ARRAY entry (``via`` "preinit", at
        link-time address ``preinit``: the file holds the routine's address there and ld.so
        must relocate it to that, which ``image`` verifies), if it is one."""
        pre, presz = self.tag(L.DT_PREINIT_ARRAY), self.tag(L.DT_PREINIT_ARRAYSZ, 0)
        if pre is not None and presz >= 8 and pre % 8 == 0:
            off = self.img.vaddr_to_offset(pre)
            if 0 <= off <= self.img.size - 8:
                ap = self._blob_at(int.from_bytes(self.img.mm[off:off + 8], "little"))
                if ap is not None:
                    return dict(ap, via="preinit", preinit=pre)
        ap = self._blob_at(self.tag(L.DT_INIT))
        return None if ap is None else dict(ap, via="init")

    def _blob_at(self, entry) -> dict | None:
        ap = selfapply.decode_at(self.img, entry)
        return ap if ap is not None and ap["entry"] == entry else None

    def rela_ranges(self) -> list[tuple[np.ndarray, int]]:
        """The RELA ranges ld.so processes, in its order, with their DT_RELACOUNT.

        glibc (elf/dynamic-link.h, _ELF_DYNAMIC_DO_RELOC): DT_JMPREL ending where
        DT_RELA ends is taken out of it; when not lazy and DT_JMPREL follows DT_RELA
        directly, both are one range (so IRELATIVE of .rela.dyn waits for the PLT);
        otherwise DT_JMPREL is a second range.
        """
        ent = L.RELA64.itemsize
        start, size = self.tag(L.DT_RELA), self.tag(L.DT_RELASZ, 0)
        if start is None:
            start, size = 0, 0
        nrel = self.tag(L.DT_RELACOUNT, 0)
        jstart, jsize = self.tag(L.DT_JMPREL), self.tag(L.DT_PLTRELSZ, 0)
        ranges = [[start, size, nrel]]
        if jstart is not None and jsize:
            if start + size == jstart + jsize:
                ranges[0][1] -= jsize
            if ranges[0][0] + ranges[0][1] == jstart:
                ranges[0][1] += jsize
            else:
                ranges.append([jstart, jsize, 0])
        out = []
        for a, n, nr in ranges:
            if n < 0 or n % ent:
                raise ElflayoutError(f"{self.img.path}: relocation table size {n} is not a whole number of entries")
            t = self.at(a, n, L.RELA64) if n else np.zeros(0, L.RELA64)
            if nr > t.size:
                raise ElflayoutError(f"{self.img.path}: DT_RELACOUNT {nr} exceeds the {t.size} relocations of its table")
            out.append((t, nr))
        return out

    def _apply(self, im, w, t, nrelative, B):
        """Apply one range as glibc's elf_dynamic_do_Rela (elf/do-rel.h) does.

        Order: the first ``nrelative`` entries as RELATIVE whatever their type, then the
        others in table order except IRELATIVE, then the IRELATIVE ones in table order.
        Writes of whole aligned words that no narrower or unaligned write touches are
        applied at once (the last one of a word wins, as in sequence); the rest one by
        one in ld.so's order, so a partial overlap resolves exactly as in the loader.
        """
        if not t.size:
            return
        arch = self.arch
        types = L.r_type(t["r_info"]).astype(np.int64)
        syms = L.r_sym(t["r_info"]).astype(np.int64)
        P = t["r_offset"]
        Aa = t["r_addend"].view(np.uint64)
        S = self.sym_fake(syms)
        ut, inv = np.unique(types, return_inverse=True)
        inv = inv.reshape(-1)
        k = np.array([arch.types[x].kind if x in arch.types else "?" for x in ut.tolist()], dtype=object)[inv]
        width = np.array([arch.types[x].width if x in arch.types else 0 for x in ut.tolist()], np.int64)[inv]
        k[:nrelative], width[:nrelative] = A.RELATIVE, arch.word
        if np.any(k == "?"):
            bad = int(types[k == "?"][0])
            raise ElflayoutError(f"{self.img.path}: relocation type {bad} is not known to the simulated loader")
        with np.errstate(over="ignore"):
            val = np.select(
                [k == A.RELATIVE, k == A.ABS, k == A.ABS_NOADD, k == A.IRELATIVE, k == A.TPOFF,
                 k == A.DTPMOD, k == A.DTPOFF, k == A.PCREL],
                [B + Aa, S + Aa, S, (B + Aa) * _MIX, np.where(syms == 0, FAKE_TP, S ^ FAKE_TP) + Aa,
                 np.where(syms == 0, FAKE_MODID, S >> np.uint64(20)), (S & np.uint64(0xFFFF)) + Aa,
                 S + Aa - (B + P)], default=np.uint64(0)).astype(np.uint64)
        irel = k == A.IRELATIVE
        order = np.concatenate([np.flatnonzero(~irel), np.flatnonzero(irel)])
        P, val, width = P[order], val[order], width[order]
        live = width > 0
        if np.any(live & ((P > np.uint64(im.size)) | (P + width.astype(np.uint64) > np.uint64(im.size)))):
            bad = int(P[live & (P + width.astype(np.uint64) > np.uint64(im.size))][0])
            raise ElflayoutError(f"{self.img.path}: relocation at {bad:#x} is outside the image")
        fast = live & (width == 8) & (P % 8 == 0)
        slow = np.flatnonzero(live & ~fast)
        idx = (P // 8).astype(np.int64)
        # Words any narrow/unaligned write touches: every write to them goes in sequence.
        touched = np.unique(np.concatenate([idx[slow], ((P[slow] + width[slow].astype(np.uint64) - 1) // 8)
                                            .astype(np.int64)])) if slow.size else np.zeros(0, np.int64)
        seq = fast & np.isin(idx, touched)
        bulk = fast & ~seq
        bi, bv = idx[bulk], val[bulk]
        u, last = np.unique(bi[::-1], return_index=True)  # the last write of a word wins
        w[u] = bv[::-1][last]
        for i in np.flatnonzero(seq | (live & ~fast)).tolist():
            p, n = int(P[i]), int(width[i])
            data = int(val[i]).to_bytes(8, "little") * 2
            im[p:p + n] = np.frombuffer(data[:n], np.uint8)

    def file_bytes(self, addrs: np.ndarray) -> np.ndarray:
        """The file's bytes at link-time addresses ``addrs`` (-1 where not file-backed)."""
        offs = np.asarray(self.img.vaddr_to_offset(addrs), np.int64)
        return np.where(offs >= 0, self.img.buf[np.maximum(offs, 0)].astype(np.int64), -1)

    def loader_writes(self, addrs: np.ndarray) -> np.ndarray:
        """Which of the link-time byte addresses ``addrs`` a relocation of this file
        writes: ld.so's RELA ranges and DT_RELR, and the self-applying routine's table."""
        starts, ends = [], []
        for t, nrelative in self.rela_ranges():
            types = L.r_type(t["r_info"]).astype(np.int64)
            u, inv = np.unique(types, return_inverse=True)
            width = np.array([self.arch.types[x].width if x in self.arch.types else self.arch.word
                              for x in u.tolist()], np.int64)[inv.reshape(-1)]
            width[:nrelative] = self.arch.word
            starts.append(t["r_offset"].astype(np.int64))
            ends.append(starts[-1] + np.maximum(width, 1))
        words = [self.relr()]
        ap = self.applier()
        if ap is not None and ap["relr_end"] > ap["relr_start"]:
            words.append(elfcore.relr_decode(self.at(ap["relr_start"], ap["relr_end"] - ap["relr_start"],
                                                     np.uint64).copy()))
        for w in words:
            starts.append(w.astype(np.int64))
            ends.append(starts[-1] + self.arch.word)
        s, e = np.concatenate(starts), np.concatenate(ends)
        if not s.size:
            return np.zeros(len(addrs), bool)
        order = np.argsort(s, kind="stable")
        s, e = s[order], np.maximum.accumulate(e[order])  # reach of every write starting at or before
        i = np.searchsorted(s, addrs, side="right") - 1
        return (i >= 0) & (addrs < e[np.maximum(i, 0)])

    def meta_ranges(self) -> list[tuple[int, int]]:
        """Address ranges of dynamic-linking metadata in this file (excluded from the byte compare)."""
        # ELF header (e_shoff/e_shnum change) and program headers: checked in compare_tables.
        hdr = self.img.elf.header
        out = [self.dyn_range, (0, hdr["e_ehsize"])]
        v = self.img.offset_to_vaddr(int(hdr["e_phoff"]))  # the table's address (BOLT's: not its offset)
        if v >= 0:
            out.append((v, v + hdr["e_phnum"] * hdr["e_phentsize"]))
        ap = self.applier()
        if ap is not None:  # the routine (in the code segment's padding or a segment) and its table
            out += [(ap["entry"] - selfapply.ENTRY, ap["entry"] - selfapply.ENTRY + ap["size"]),
                    (ap["relr_start"], ap["relr_end"])]
            if ap["via"] == "preinit":
                out.append((ap["preinit"], ap["preinit"] + 8))
        for s in self.img.sections:
            t = L.sh_type_number(s.type)
            alloc_strtab = t == L.SHT_STRTAB and s.flags & L.SHF_ALLOC
            # notes may slide with the tables (pack_plan._phdr_reserve): compared by content (_notes)
            if (t in META_TYPES or alloc_strtab or t == L.SHT_NOTE) and s.flags & L.SHF_ALLOC:
                out.append((s.addr, s.addr + s.size))
        for p in self.phdrs:  # so may the interpreter path
            if p["p_type"] == L.PT_INTERP:
                out.append((int(p["p_vaddr"]), int(p["p_vaddr"] + p["p_memsz"])))
        return out

    def close(self):
        self.img.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _section_at(img, vaddr) -> str:
    for s in img.sections:
        if s.flags & L.SHF_ALLOC and s.addr <= vaddr < s.addr + s.size:
            return s.name
    return "(no section)"


def _joined(ph: np.ndarray) -> np.ndarray:
    """Program headers with a PT_LOAD split around a cut of freed pages (``pack.
    cut_freed_pages``: same flags, the first part without bss, a page-aligned gap) joined
    back into one, as it was before the cut."""
    out, i = [], 0
    while i < ph.size:
        p = ph[i].copy()
        q = ph[i + 1] if i + 1 < ph.size else None
        if q is not None and p["p_type"] == q["p_type"] == L.PT_LOAD and p["p_flags"] == q["p_flags"] \
                and p["p_filesz"] == p["p_memsz"] and int(q["p_vaddr"]) % elfcore.PAGE == 0 \
                and int(q["p_vaddr"]) > int(p["p_vaddr"] + p["p_memsz"]) \
                and int(q["p_vaddr"]) - int(p["p_vaddr"]) - (int(q["p_offset"]) - int(p["p_offset"])) > 0:
            p["p_filesz"] = int(q["p_vaddr"] + q["p_filesz"]) - int(p["p_vaddr"])
            p["p_memsz"] = int(q["p_vaddr"] + q["p_memsz"]) - int(p["p_vaddr"])
            i += 1
        out.append(p)
        i += 1
    return np.array(out, L.PHDR64)


def _misplaced(ph: np.ndarray) -> list:
    """Segments with file bytes whose offset is not the one their PT_LOAD maps to their
    address (the image compare reads through PT_LOADs only)."""
    loads = ph[ph["p_type"] == L.PT_LOAD]
    out = []
    for p in ph[(ph["p_type"] != L.PT_LOAD) & (ph["p_filesz"] > 0)]:
        v, o = int(p["p_vaddr"]), int(p["p_offset"])
        home = [q for q in loads if q["p_vaddr"] <= v and v + int(p["p_filesz"]) <= q["p_vaddr"] + q["p_filesz"]]
        if not home or o - int(home[0]["p_offset"]) != v - int(home[0]["p_vaddr"]):
            out.append(p)
    return out


# Segments that slide with the tables after the program headers (pack_plan.SLIDING_SEGMENTS)
SLIDING = (L.PT_NOTE, L.PT_INTERP, L.PT_GNU_PROPERTY)


def _offsets_aside(ph: np.ndarray) -> np.ndarray:
    """File offsets zeroed (the image compare proves each address holds the same bytes)
    and PT_PHDR left out (optional in a shared library; the cut may give its place to
    the split PT_LOAD)."""
    ph = ph[ph["p_type"] != L.PT_PHDR].copy()
    ph["p_offset"] = 0
    x = np.isin(ph["p_type"], SLIDING)  # they slide with the tables after the headers (_notes compares them)
    ph["p_vaddr"][x] = ph["p_paddr"][x] = 0
    return ph


def added_loads(a: Loaded, b: Loaded) -> list[int] | None:
    """Indices of the PT_LOADs of ``b`` after everything ``a`` maps: a writable one holding
    its moved dynamic array (pack_plan._dynamic_writable), and a read-execute one holding
    exactly its self-applying routine (pack_plan._self_places); None if there are others.
    Their contents are checked tag by tag and by ``applier``."""
    la = a.phdrs[a.phdrs["p_type"] == L.PT_LOAD]
    end = int((la["p_vaddr"] + la["p_memsz"]).max()) if la.size else 0
    lo, hi = b.dyn_range
    ap = b.applier()
    x = [i for i, p in enumerate(b.phdrs) if p["p_type"] == L.PT_LOAD and int(p["p_vaddr"]) >= end]
    kinds = []
    for i in x:
        p = b.phdrs[i]
        v, n = int(p["p_vaddr"]), int(p["p_filesz"])
        if p["p_flags"] == L.PF_R | L.PF_W and v <= lo and hi <= v + n:
            kinds.append("dynamic")
        elif p["p_flags"] == L.PF_R | L.PF_X and ap is not None and v == ap["entry"] - selfapply.ENTRY \
                and n == ap["size"] == int(p["p_memsz"]):
            kinds.append("routine")
        else:
            return None
    return x if len(set(kinds)) == len(kinds) else None


def _phdr_problems(a: Loaded, b: Loaded) -> list[str]:
    """An executable's PT_PHDR must stay and describe the table (glibc's load base is
    AT_PHDR less its address), in a PT_LOAD mapping the table's offset at its address."""
    def ok(l):  # None: no PT_PHDR
        x = np.flatnonzero(l.phdrs["p_type"] == L.PT_PHDR)
        if not x.size:
            return None
        p, h = l.phdrs[int(x[0])], l.ehdr[0]
        return (int(p["p_offset"]) == int(h["e_phoff"]) and int(p["p_filesz"]) == int(h["e_phnum"]) * 56
                and l.img.offset_to_vaddr(int(p["p_offset"])) == int(p["p_vaddr"]))

    oa, ob = ok(a), ok(b)
    if oa is not None and ob is None and np.any(a.phdrs["p_type"] == L.PT_INTERP):
        return ["the output has no PT_PHDR (an executable needs it: glibc computes its load base from it)"]
    if oa and ob is False:
        return ["the output's PT_PHDR does not describe its program header table where a PT_LOAD maps it"]
    return []


def _notes(l: "Loaded") -> list[bytes]:
    return [l.img.buf[int(p["p_offset"]):int(p["p_offset"] + p["p_filesz"])].tobytes()
            for p in l.phdrs if p["p_type"] in SLIDING]


def compare_tables(a: Loaded, b: Loaded) -> list[str]:
    """Field-by-field checks of what the byte compare leaves out; returns problems found."""
    bad = []
    ha, hb = a.ehdr.copy(), b.ehdr.copy()
    for h in (ha, hb):  # where the headers are may change (pack's cut of freed pages), not what
        h["e_shoff"] = h["e_shnum"] = h["e_shstrndx"] = h["e_phoff"] = h["e_phnum"] = 0
    if ha.tobytes() != hb.tobytes():
        bad.append("ELF header differs in more than e_shoff/e_shnum/e_shstrndx/e_phoff/e_phnum")
    extra = added_loads(a, b) or []
    pb_raw = b.phdrs[~np.isin(np.arange(b.phdrs.size), extra)]
    pa, pb = _offsets_aside(_joined(a.phdrs)), _offsets_aside(_joined(pb_raw))
    bad += _phdr_problems(a, b)
    if _notes(a) != _notes(b):
        bad.append("PT_NOTE/PT_INTERP/PT_GNU_PROPERTY contents differ")
    # a damaged input may have such a segment already: the output only keeps it
    before = {(int(p["p_type"]), int(p["p_vaddr"])) for p in _misplaced(a.phdrs)}
    bad += [f"segment {int(p['p_type']):#x} at vaddr {int(p['p_vaddr']):#x}: its file offset is not where its PT_LOAD "
            "maps that address" for p in _misplaced(b.phdrs) if (int(p["p_type"]), int(p["p_vaddr"])) not in before]
    if ap_b := b.applier():  # the code segment grew to hold the routine: nothing else
        pb = pb.copy()
        x = (pb["p_type"] == L.PT_LOAD) & (pb["p_flags"] & L.PF_X != 0)
        if x.sum() == 1 and pa.size == pb.size:
            pb["p_filesz"][x], pb["p_memsz"][x] = pa["p_filesz"][x], pa["p_memsz"][x]
    if pa.size != pb.size or not np.array_equal(pa[pa["p_type"] != L.PT_DYNAMIC], pb[pb["p_type"] != L.PT_DYNAMIC]):
        bad.append("program headers other than PT_DYNAMIC differ")
    if not np.array_equal(a.rela(L.DT_JMPREL, L.DT_PLTRELSZ), b.rela(L.DT_JMPREL, L.DT_PLTRELSZ)):
        bad.append("the DT_JMPREL tables differ")  # where it is may change (link --pack self), not what
    same_tags = {L.DT_NEEDED, L.DT_SONAME, L.DT_RPATH, L.DT_RUNPATH, L.DT_PLTRELSZ, L.DT_PLTGOT,
                 L.DT_INIT, L.DT_FINI, L.DT_INIT_ARRAY, L.DT_FINI_ARRAY, L.DT_INIT_ARRAYSZ, L.DT_FINI_ARRAYSZ,
                 L.DT_FLAGS, L.DT_FLAGS_1, L.DT_VERDEFNUM, L.DT_PLTREL}
    ap_b = b.applier()
    if ap_b is not None and ap_b["machine"] != b.img.machine:
        bad.append(f"the self-applying routine is {ap_b['machine']} code in an {b.img.machine} library")
    if ap_b is not None and a.applier() is None and ap_b["via"] == "init":
        if ap_b["old_init"] != (a.tag(L.DT_INIT) or 0):
            bad.append("the self-applying routine does not chain to the input's DT_INIT")
        same_tags = same_tags - {L.DT_INIT}
    if ap_b is not None and ap_b["via"] == "preinit":  # the routine is the only preinit entry, chains to none
        if a.tag(L.DT_PREINIT_ARRAY) is not None or b.tag(L.DT_PREINIT_ARRAYSZ) != 8 or ap_b["old_init"]:
            bad.append("the self-applying routine is not the executable's only DT_PREINIT_ARRAY entry")
    for t in sorted(same_tags):
        va = a.dyn["d_val"][a.dyn["d_tag"] == t].tolist()
        vb = b.dyn["d_val"][b.dyn["d_tag"] == t].tolist()
        if va != vb:
            bad.append(f"dynamic tag {t:#x} differs: {va} vs {vb}")
    tables = [(L.DT_GNU_HASH, None), (L.DT_HASH, None), (L.DT_VERDEF, None)]
    sa = {s.addr: s for s in a.img.sections}
    sb = {s.addr: s for s in b.img.sections}
    for t, _ in tables:
        x, y = a.tag(t), b.tag(t)
        if (x is None) != (y is None):
            bad.append(f"dynamic tag {t:#x} present in one file only")
        elif x is not None and x in sa and y in sb:
            n = sa[x].size
            if sb[y].size != n or not np.array_equal(a.at(x, n), b.at(y, n)):
                bad.append(f"table of dynamic tag {t:#x} ({sa[x].name}) differs")
    nsym = next((s.size for s in a.img.sections if s.type == "SHT_DYNSYM"), 0)
    if nsym:
        ya, yb = a.at(a.tag(L.DT_SYMTAB), nsym, L.SYM64), b.at(b.tag(L.DT_SYMTAB), nsym, L.SYM64)
        for f in ("st_name", "st_info", "st_other", "st_shndx", "st_size"):
            if not np.array_equal(ya[f], yb[f]):
                bad.append(f".dynsym field {f} differs")
        va = ya["st_value"]
        if np.count_nonzero(va != yb["st_value"]) > np.count_nonzero(L.st_type(ya["st_info"]) == L.STT_SECTION):
            bad.append(".dynsym values of non-section symbols differ")
        sz_a = a.tag(L.DT_STRSZ, 0)
        if not np.array_equal(a.at(a.tag(L.DT_STRTAB), sz_a), b.at(b.tag(L.DT_STRTAB), sz_a)):
            bad.append(".dynstr of the input is not a prefix of the output's")
        vs = next((s.size for s in a.img.sections if s.type == "SHT_GNU_versym"), 0)
        if vs and not np.array_equal(a.at(a.tag(L.DT_VERSYM), vs), b.at(b.tag(L.DT_VERSYM), vs)):
            bad.append(".gnu.version differs")
    bad += _compare_verneed(a, b)
    return bad


def verneed_names(l: Loaded):
    vn, num = l.tag(L.DT_VERNEED), l.tag(L.DT_VERNEEDNUM, 0)
    if vn is None:
        return []
    sec = next((s for s in l.img.sections if s.addr == vn), None)
    data = l.at(vn, sec.size if sec else num * 64).tobytes()
    strtab = l.at(l.tag(L.DT_STRTAB), l.tag(L.DT_STRSZ, 0)).tobytes()
    return [(L.cstr(strtab, e["file"]), [(L.cstr(strtab, x["name"]), x["hash"], x["other"], x["flags"]) for x in e["aux"]])
            for e in L.parse_verneed(data, num)]


def _compare_verneed(a: Loaded, b: Loaded) -> list[str]:
    """The output's version needs are the input's plus at most GLIBC_ABI_DT_RELR, which
    must be there when glibc requires it (glibc.glibc_requires_relr_need)."""
    va, vb = verneed_names(a), verneed_names(b)
    extra = [(f, x) for f, xs in vb for x in xs if x[0] == GLIBC_ABI_DT_RELR]
    files_a = {f for f, _ in va}
    rest_b = [(f, [x for x in xs if x[0] != GLIBC_ABI_DT_RELR]) for f, xs in vb]
    rest_b = [(f, xs) for f, xs in rest_b if xs or f in files_a]  # drop a libc.so.6 entry added for it
    rest_a = [(f, [x for x in xs if x[0] != GLIBC_ABI_DT_RELR]) for f, xs in va]
    if rest_a != rest_b:
        return ["version needs differ beyond GLIBC_ABI_DT_RELR"]
    if b.tag(L.DT_RELR) is not None and glibc_requires_relr_need(b.needed(), b.tag(L.DT_VERNEED) is not None) \
            and not any(x[1] == GLIBC_ABI_DT_RELR_HASH for _, x in extra):
        return ["DT_RELR without a GLIBC_ABI_DT_RELR version need although libc.so.* is DT_NEEDED "
                "(glibc >= 2.36 refuses it)"]
    return []


def compare(path_a, path_b, bases=BASES) -> dict:
    """Relocate both files at each base and compare the images; returns a result dict."""
    a, b = Loaded(path_a), Loaded(path_b)
    try:
        excl = sorted(a.meta_ranges() + b.meta_ranges())
        res = dict(bases=[hex(x) for x in bases], equal=True, first_difference=None,
                   excluded_bytes=0, compared_bytes=0, table_problems=compare_tables(a, b),
                   relocations=dict(input=_counts(a), output=_counts(b)))
        extra = added_loads(a, b)
        excl = _merged(excl)
        for n, base in enumerate(bases):
            last = n == len(bases) - 1
            ia, ib = a.image(base, last), b.image(base, last)
            if ib.size > ia.size and extra and min(int(b.phdrs[i]["p_vaddr"]) for i in extra) >= ia.size:
                ib = ib[:ia.size]  # beyond: the moved dynamic array, the routine: checked apart
            if ia.size != ib.size:
                res.update(equal=False, first_difference=dict(base=hex(base), reason="image sizes differ"))
                break
            excluded = sum(min(hi, ia.size) - lo for lo, hi in excl if lo < ia.size)
            res["excluded_bytes"], res["compared_bytes"] = int(excluded), int(ia.size - excluded)
            first, ndiff = None, 0
            for lo, hi in excl:  # compared apart (compare_tables): blanked in both copies
                ia[lo:hi] = 0
                ib[lo:hi] = 0
            for lo in range(0, ia.size, CHUNK):  # chunks: no image-sized temporaries
                d = np.flatnonzero(ia[lo:lo + CHUNK] != ib[lo:lo + CHUNK])
                if d.size and first is None:
                    first = lo + int(d[0])
                ndiff += d.size
            del ia, ib
            if first is not None:
                res.update(equal=False, first_difference=dict(
                    base=hex(base), vaddr=hex(first), section=_section_at(a.img, first), bytes_differing=ndiff))
                break
        if res["table_problems"]:
            res["equal"] = False
        return res
    finally:
        a.close()
        b.close()


def _merged(ranges) -> list[tuple[int, int]]:
    """Sorted, overlapping or touching ``[lo, hi)`` ranges merged."""
    out = []
    for lo, hi in sorted(r for r in ranges if r[1] > r[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _counts(l: Loaded) -> dict:
    ap = l.applier()
    n = 0
    if ap is not None:
        n = int(elfcore.relr_decode(l.at(ap["relr_start"], ap["relr_end"] - ap["relr_start"], np.uint64)).size)
    return dict(rela=int(l.rela(L.DT_RELA, L.DT_RELASZ).size), jmprel=int(l.rela(L.DT_JMPREL, L.DT_PLTRELSZ).size),
                relr=int(l.relr().size), self_applied=n)



def is_executable(path) -> bool:
    """A PIE (DF_1_PIE or PT_INTERP): glibc refuses to dlopen it."""
    l = Loaded(path)
    try:
        interp = np.any(l.phdrs["p_type"] == L.PT_INTERP)
        return bool(interp or (l.tag(L.DT_FLAGS_1, 0) & L.DF_1_PIE))
    finally:
        l.close()



def _writable_ranges(a: Loaded, b: Loaded) -> list[tuple[int, int]]:
    """Link-time ranges of the file-backed part of ``a``'s writable PT_LOADs, less both
    files' dynamic-linking metadata (``meta_ranges``: the packer rewrites it and
    ``compare_tables`` checks it field by field; ld.so also relocates DT_* pointers in
    place). .bss is left out: nothing is packed there, and constructors store
    run-dependent values in it (timestamps, seeds)."""
    out = []
    for p in a.phdrs[(a.phdrs["p_type"] == L.PT_LOAD) & (a.phdrs["p_flags"] & L.PF_W != 0)]:
        out.append((int(p["p_vaddr"]), int(p["p_vaddr"] + p["p_filesz"])))
    for lo, hi in a.meta_ranges() + b.meta_ranges():
        cut = []
        for x, y in out:
            cut += [r for r in ((x, min(y, lo)), (max(x, hi), y)) if r[0] < r[1]]
        out = cut
    return out



def real_load_compare(path_a, path_b, timeout: float = 300, root=None, emulator=None) -> dict:
    """dlopen both files (realload.compare_loads: ASLR off, RTLD_NOW, fresh processes,
    inside ``chroot root`` when given) and compare their file-backed writable bytes
    (``_writable_ranges``).

    Besides the bytes that differ between two loads of ``path_a`` itself, differing bytes
    that no relocation of either file writes and that are equal in both files are left
    out (counted as ``unstable_bytes``): code stored them, not the loader. A heap address
    taken from a free chunk does not move with the control load's heap shift, and ld.so's
    own allocations differ between input and output (one more version need), so such a
    constructor value can differ in every load (libabsl_flags_parse's flag registry under
    one interpreter's start-up). Packing changes only what relocations write, and the
    simulated loader compares every byte of the images. Returns dict(equal,
    compared_bytes, unstable_bytes, differing_bytes) or dict(error=...) when a file does
    not load.
    """
    with Loaded(path_a) as a, Loaded(path_b) as b:
        def by_code(addrs):
            return ~(a.loader_writes(addrs) | b.loader_writes(addrs)) & (a.file_bytes(addrs) == b.file_bytes(addrs))

        return realload.compare_loads(path_a, path_b, _writable_ranges(a, b), by_code, timeout, root, emulator,
                                      loader_writes=lambda x: a.loader_writes(x) | b.loader_writes(x))


def real_start_compare(path_a, path_b, timeout: float = 300) -> dict:
    """Start both executables up to their entry point (realstart.compare_starts: ptrace,
    ASLR off, one mirrored directory) and compare their file-backed writable bytes, with
    the same allowances as ``real_load_compare``."""
    from elflayout.relocs import realstart

    with Loaded(path_a) as a, Loaded(path_b) as b:
        def by_code(addrs):
            return ~(a.loader_writes(addrs) | b.loader_writes(addrs)) & (a.file_bytes(addrs) == b.file_bytes(addrs))

        if int(a.ehdr[0]["e_entry"]) != int(b.ehdr[0]["e_entry"]):
            return dict(equal=False, compared_bytes=0, reason="entry points differ")
        return realstart.compare_starts(path_a, path_b, int(a.ehdr[0]["e_entry"]), _writable_ranges(a, b),
                                        by_code, timeout, up=a.origin_levels())


def _check_executable(src, tmp, res: dict, status, root, run, emulator=None) -> dict:
    """``check`` for an executable: real starts up to the entry point, then ``run``."""
    from elflayout.relocs import realstart

    from elflayout import emulator as emulation

    res["dlopen"] = "skipped (a PIE executable cannot be dlopen'ed: started instead)"
    if root is not None:
        res["real_load"] = "skipped (--root: executables are started on this machine only)"
        return res
    hdr = emulation.header(src)
    if emulator is not None or (hdr and hdr[0] != emulation.host_machine()):
        res["real_load"] = "skipped (a foreign executable: the real start traces native programs only)"
        return res
    with status("check: starting the input and the packed executable up to their entry point"):
        real = real_start_compare(src, tmp)
    if "error" in real:
        if str(src) in real["error"]:
            raise ElflayoutError(f"{src}: the input itself does not start ({real['error']}); nothing to prove against")
        raise Finding(f"check failed: the packed executable does not start: {real['error']} (output not written)")
    res["real_load"] = real
    if not real["equal"]:
        raise Finding(f"check failed: at the entry point, {real.get('differing_bytes', '?')} writable bytes differ "
                      f"from the input's ({real.get('reason', 'same load address, ASLR off')}; output not written)")
    if run is not None:
        with status(f"check: running both with {run}"):
            with Loaded(src) as a:
                up = a.origin_levels() or 0
            r = realstart.compare_runs(src, tmp, run, up=up)
        res["run"] = r
        if not r["comparable"]:
            raise ElflayoutError(f"{src}: --run {run!r}: two runs of the input itself give different output; "
                                 "it cannot judge the packed file")
        if not r["equal"]:
            raise Finding(f"check failed: --run {run!r}: exit status or output differ (input {r['status']}, packed "
                          f"{r['packed_status']}; output not written)")
    return res


def check(src, tmp, *, real_load: bool = True, status=None, root=None, emulator=None, run: str | None = None) -> dict:
    """``pack-relocs --check``: prove ``tmp`` (the packed file) equivalent to ``src``.

    1. Simulated loader at two load bases, every byte compared, tables field by field.
    2. (``real_load``) Both dlopen'ed with ASLR off, file-backed writable bytes equal;
       executables are started instead, up to their entry point (realstart.py), and
       with ``run`` (shell words) both run with those arguments, same output required.
    Raises Finding (exit 1) on a difference, ElflayoutError (exit 2) when the input
    itself does not load (real loads happen inside ``chroot root`` when given; an arm64
    library's under ``emulator``, by default qemu-aarch64 with the arm64 root or ``root``);
    returns the comparison document otherwise. ``status(msg)``
    gives a context manager that shows progress (the CLI's spinner).
    """
    status = status or (lambda msg: contextlib.nullcontext())
    with status("check: relocating input and output at two load bases"):
        res = compare(src, tmp)
    if not res["equal"]:
        d = res["first_difference"]
        if res["table_problems"]:
            raise Finding(f"check failed: {res['table_problems'][0]} (output not written)")
        where = f"at {d.get('vaddr')} ({d.get('section')}), load base {d['base']}" if "vaddr" in d else d.get("reason")
        raise Finding(f"check failed: relocated images differ {where}; {d.get('bytes_differing', '?')} bytes differ "
                      "(output not written)")
    if not real_load:
        return res
    if is_executable(tmp):
        return _check_executable(src, tmp, res, status, root, run, emulator)
    if run is not None:
        raise ElflayoutError(f"{src}: --run applies to executables; a library is checked by loading it")
    with status("check: real loads of the input and the packed library"):
        real = real_load_compare(src, tmp, root=root, emulator=emulator)
    if "error" in real:
        why = realload.dlopen_check(src, root=root, emulator=emulator)
        if why is not None:
            raise ElflayoutError(f"{src}: the input itself does not load ({why}); nothing to prove against")
        raise Finding(f"check failed: dlopen of the packed library failed: {real['error']} (output not written)")
    res["dlopen"], res["real_load"] = "ok", real
    if not real["equal"]:
        raise Finding(f"check failed: after a real load, {real.get('differing_bytes', '?')} writable bytes differ "
                      f"from the input's ({real.get('reason', 'same load address, ASLR off')}; output not written)")
    return res

