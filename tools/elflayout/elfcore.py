"""Fast, read-only access to an ELF file for every stage.

pyelftools parses headers, sections and segments (lazily); bulk tables that can be
hundreds of thousands of entries long (relocations) are read with numpy straight from
an mmap of the file, because a Python loop over libLLVM's 407k relocations is seconds.
Errors come out as ``ElflayoutError`` naming the file and the problem.
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from elftools.common.exceptions import ELFError, ELFParseError
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_D_TAG

from elflayout.arch import RELATIVE_TYPE
from elflayout.dynamic import Dynamic
from elflayout.errors import ElflayoutError
from elflayout.layouts import (DF_1_NOW, DF_BIND_NOW, DT_BIND_NOW, DT_FLAGS, DT_FLAGS_1, DT_STRSZ, DT_STRTAB, REL32, REL64,
                               RELA32, RELA64, SHF_ALLOC, r_type)

PAGE = 4096



@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: str
    offset: int
    size: int
    addr: int
    flags: int
    align: int
    entsize: int

    @property
    def occupies_file(self) -> bool:
        return self.type != "SHT_NOBITS" and self.size > 0


@dataclass(frozen=True)
class Segment:
    index: int
    type: str
    flags: int
    offset: int
    filesz: int
    vaddr: int
    memsz: int
    align: int


def page_range(offset: int, size: int, page: int = PAGE) -> tuple[int, int]:
    """First and last page (4 KiB unless ``page``) of the file bytes [offset, offset+size) (inclusive)."""
    if size <= 0:
        return (offset // page, offset // page - 1)
    return (offset // page, (offset + size - 1) // page)


class ElfImage:
    """An ELF file opened read-only (mmap) with cached tables."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        p = self.path
        if not p.exists():
            raise ElflayoutError(f"{p}: no such file")
        if p.is_dir():
            raise ElflayoutError(f"{p}: is a directory, not an ELF file")
        try:
            self._f = open(p, "rb")
        except OSError as e:
            raise ElflayoutError(f"{p}: cannot open: {e.strerror}") from None
        self.size = os.fstat(self._f.fileno()).st_size
        if self.size < 16 or self._f.read(4) != b"\x7fELF":
            self._f.close()
            raise ElflayoutError(f"{p}: not an ELF file")
        self._f.seek(0)
        self.mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
        self.buf = np.frombuffer(self.mm, dtype=np.uint8)
        try:
            self.elf = ELFFile(self._f)
            hdr = self.elf.header
            shend = hdr["e_shoff"] + hdr["e_shnum"] * hdr["e_shentsize"]
            phend = hdr["e_phoff"] + hdr["e_phnum"] * hdr["e_phentsize"]
            if shend > self.size or phend > self.size:
                raise ElflayoutError(f"{p}: truncated ELF file (headers end at {max(shend, phend)}, file has {self.size} bytes)")
            self.sections  # parse now so a damaged file fails here, in one place
            for g in self.loads:
                if g.offset + g.filesz > self.size:
                    raise ElflayoutError(f"{p}: truncated or malformed ELF file (PT_LOAD at offset {g.offset:#x} "
                                         f"ends at {g.offset + g.filesz}, file has {self.size} bytes)")
            for s in self.sections:
                if s.occupies_file and s.offset + s.size > self.size:
                    raise ElflayoutError(
                        f"{p}: truncated ELF file (section {s.name} ends at {s.offset + s.size}, file has {self.size} bytes)"
                    )
        except (ELFError, ELFParseError, AssertionError, KeyError, ValueError) as e:
            raise ElflayoutError(f"{p}: malformed ELF file ({e})") from None
        except Exception as e:  # pyelftools raises bare struct/construct errors on garbage
            if isinstance(e, ElflayoutError):
                raise
            raise ElflayoutError(f"{p}: malformed or truncated ELF file ({type(e).__name__}: {e})") from None

    # -- identity -----------------------------------------------------------------
    @property
    def machine(self) -> str:
        return self.elf.header["e_machine"]

    @property
    def elfclass(self) -> int:
        return self.elf.elfclass

    @property
    def wordsize(self) -> int:
        return self.elfclass // 8

    @property
    def is_x86_64(self) -> bool:
        return self.machine == "EM_X86_64" and self.elfclass == 64

    @functools.cached_property
    def build_id(self) -> str | None:
        for s in self.elf.iter_sections():
            if s["sh_type"] == "SHT_NOTE":
                for n in s.iter_notes():
                    if n["n_type"] == "NT_GNU_BUILD_ID":
                        d = n["n_desc"]  # bytes when pyelftools could not decode it (damaged note)
                        return d.hex() if isinstance(d, (bytes, bytearray)) else d
        return None

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.mm).hexdigest()

    def identity(self) -> dict:
        """What ties data to this exact file (docs/formats.md, "target identity")."""
        return {
            "path": str(self.path.resolve()),
            "build_id": self.build_id,
            "size": self.size,
            "sha256": self.sha256,
        }

    # -- tables ---------------------------------------------------------------------
    @functools.cached_property
    def sections(self) -> list[Section]:
        out = []
        for i, s in enumerate(self.elf.iter_sections()):
            h = s.header
            out.append(
                Section(i, s.name, h["sh_type"], h["sh_offset"], h["sh_size"], h["sh_addr"], h["sh_flags"],
                        h["sh_addralign"], h["sh_entsize"])
            )
        return out

    def section(self, name: str) -> Section | None:
        for s in self.sections:
            if s.name == name:
                return s
        return None

    @functools.cached_property
    def segments(self) -> list[Segment]:
        out = []
        for i, s in enumerate(self.elf.iter_segments()):
            h = s.header
            out.append(Segment(i, h["p_type"], h["p_flags"], h["p_offset"], h["p_filesz"], h["p_vaddr"], h["p_memsz"], h["p_align"]))
        return out

    @functools.cached_property
    def loads(self) -> list[Segment]:
        return [s for s in self.segments if s.type == "PT_LOAD"]

    @functools.cached_property
    def dynamic(self) -> Dynamic:
        """The dynamic array, found as ld.so finds it: through PT_DYNAMIC (dynamic.py)."""
        return Dynamic.read(self.mm, self.segments, elfclass=self.elfclass, little=self.elf.little_endian,
                            path=self.path)

    def dt(self, tag: int | str) -> int | None:
        """The value of a dynamic tag (``layouts.DT_*``; a pyelftools name such as "DT_INIT"
        also works, a misspelt one raises KeyError), None when absent."""
        return self.dynamic.get(ENUM_D_TAG[tag] if isinstance(tag, str) else tag)

    def dt_string(self, value: int) -> str:
        """The name a DT_NEEDED, DT_SONAME, DT_RPATH or DT_RUNPATH value points at: the string
        at that offset of the table DT_STRTAB/DT_STRSZ give, as ld.so reads it."""
        start, end = self._dt_strtab
        if not 0 <= value < end - start:
            raise ElflayoutError(f"{self.path}: dynamic string offset {value:#x} outside DT_STRTAB")
        nul = self.mm.find(b"\0", start + value, end)
        return self.mm[start + value:nul if nul >= 0 else end].decode("utf-8", "replace")

    @functools.cached_property
    def _dt_strtab(self) -> tuple[int, int]:
        addr = self.dt(DT_STRTAB)
        off = self.vaddr_to_offset(addr) if addr is not None else -1
        if off < 0:
            raise ElflayoutError(f"{self.path}: DT_STRTAB is missing or not in the file")
        size = self.dt(DT_STRSZ)
        return off, self.size if size is None else min(off + size, self.size)

    @property
    def binds_now(self) -> bool:
        """Linked with ``-z now`` (DT_BIND_NOW, DF_BIND_NOW or DF_1_NOW): GNU ld's script
        then has no ``.got.plt`` output section and its RELRO ends right before ``.data``."""
        return (self.dt(DT_BIND_NOW) is not None or bool((self.dt(DT_FLAGS) or 0) & DF_BIND_NOW)
                or bool((self.dt(DT_FLAGS_1) or 0) & DF_1_NOW))

    # -- address translation ----------------------------------------------------------
    def vaddr_to_offset(self, vaddr):
        """File offsets of virtual addresses (scalar or array); -1 where not file-backed."""
        v = np.atleast_1d(np.asarray(vaddr, dtype=np.uint64))
        out = np.full(v.shape, -1, dtype=np.int64)
        for seg in self.loads:
            m = (v >= seg.vaddr) & (v < seg.vaddr + seg.filesz)
            out[m] = (v[m] - seg.vaddr + seg.offset).astype(np.int64)
        return out if np.ndim(vaddr) else int(out[0])

    def offset_to_vaddr(self, offset):
        """Virtual addresses of file offsets (scalar or array); -1 where not in a PT_LOAD."""
        o = np.atleast_1d(np.asarray(offset, dtype=np.int64))
        out = np.full(o.shape, -1, dtype=np.int64)
        for seg in self.loads:
            m = (o >= seg.offset) & (o < seg.offset + seg.filesz)
            out[m] = o[m] - seg.offset + seg.vaddr
        return out if np.ndim(offset) else int(out[0])

    def section_of_offsets(self, offsets) -> np.ndarray:
        """Index into ``self.sections`` of the allocated section holding each file offset (-1: none)."""
        secs = [s for s in self.sections if s.occupies_file and (s.flags & SHF_ALLOC)]
        secs.sort(key=lambda s: s.offset)
        starts = np.array([s.offset for s in secs], dtype=np.int64)
        ends = np.array([s.offset + s.size for s in secs], dtype=np.int64)
        idx = np.array([s.index for s in secs], dtype=np.int64)
        o = np.asarray(offsets, dtype=np.int64)
        k = np.searchsorted(starts, o, side="right") - 1
        ok = (k >= 0) & (o < ends[np.clip(k, 0, None)])
        return np.where(ok, idx[np.clip(k, 0, None)], -1)

    # -- relocations --------------------------------------------------------------------
    def reloc_tables(self) -> dict[str, np.ndarray]:
        """Dynamic relocation tables as numpy record arrays, keyed by section name.

        Found through SHT_RELA/SHT_REL sections that are SHF_ALLOC (the ones the loader
        reads), i.e. .rela.dyn and .rela.plt on x86-64.
        """
        out = {}
        for s in self.sections:
            if s.type not in ("SHT_RELA", "SHT_REL") or not (s.flags & SHF_ALLOC) or s.size == 0:
                continue
            dt = self.reloc_dtype(s)
            n = s.size // dt.itemsize
            out[s.name] = np.frombuffer(self.mm, dtype=dt, count=n, offset=s.offset)
        return out

    def reloc_dtype(self, s) -> np.dtype:
        """The record layout of relocation section ``s`` (SHT_RELA or SHT_REL) in this file's class."""
        if self.elfclass == 64:
            return RELA64 if s.type == "SHT_RELA" else REL64
        return RELA32 if s.type == "SHT_RELA" else REL32

    def reloc_types(self, rel: np.ndarray) -> np.ndarray:
        return r_type(rel["r_info"], self.elfclass)

    def relative_type(self) -> int | None:
        return RELATIVE_TYPE.get(self.machine)

    def close(self) -> None:
        # numpy views keep the mmap exported; drop ours first.
        self.buf = None
        try:
            self.mm.close()
        except BufferError:
            pass
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def relr_encode(offsets: np.ndarray, wordsize: int = 8) -> np.ndarray:
    """Encode relocation addresses as a DT_RELR table (gABI proposal, as lld writes it).

    The table is a sequence of words: an even word is an address (relocated, and the
    start of a run); an odd word is a bitmap whose bit i (1..nbits) says that
    ``where + (i-1)*wordsize`` is relocated, where ``where`` starts one word past the
    last address and advances nbits words per bitmap (nbits = 8*wordsize-1, 63 on
    64-bit). Greedy encoding, identical to lld's ``RelrSection::updateAllocSize``: a
    run goes on while each next window of nbits words holds an address.

    ``offsets`` must be word-aligned addresses. Vectorised: the Python loop runs once
    per run (an address word), over chunks of addresses, and the bitmaps are built
    with numpy; gaps of two windows or more always end a run, so runs are searched
    only inside the segments between such gaps.
    """
    a = np.sort(np.asarray(offsets, dtype=np.uint64), kind="stable")
    if a.size:
        a = a[np.concatenate(([True], a[1:] != a[:-1]))]
    if a.size and np.any(a % np.uint64(wordsize)):
        raise ValueError("RELR can only encode word-aligned addresses")
    dtype = np.uint64 if wordsize == 8 else np.uint32
    n = a.size
    if n == 0:
        return np.zeros(0, dtype=dtype)
    nbits = wordsize * 8 - 1
    span = np.uint64(nbits * wordsize)
    ws = np.uint64(wordsize)
    # Segment ends: after a gap of >= 2 windows no run can continue.
    brk = np.flatnonzero(np.diff(a) >= np.uint64(2) * span) + 1
    seg_end = np.repeat(np.append(brk, n), np.diff(np.concatenate(([0], brk, [n]))))
    chunk = 4096
    starts = []
    i = 0
    while i < n:
        starts.append(i)
        b, end, prev, k = a[i], int(seg_end[i]), -1, i + 1
        while k < end:
            hi = min(end, k + chunk)
            m = ((a[k:hi] - b - ws) // span).astype(np.int64)
            gaps = np.flatnonzero(np.diff(m, prepend=prev) >= 2)
            if gaps.size:
                k += int(gaps[0])
                break
            prev, k = int(m[-1]), hi
        i = k
    st = np.array(starts, dtype=np.int64)
    is_start = np.zeros(n, dtype=bool)
    is_start[st] = True
    rid = np.cumsum(is_start) - 1
    rel = a - a[st][rid]                       # 0 for the run's address itself
    fol = ~is_start
    m = np.zeros(n, dtype=np.int64)
    m[fol] = ((rel[fol] - ws) // span).astype(np.int64)
    nwin = np.zeros(st.size, dtype=np.int64)
    np.maximum.at(nwin, rid[fol], m[fol] + 1)
    word_at = np.concatenate(([0], np.cumsum(1 + nwin)[:-1]))
    out = np.zeros(int((1 + nwin).sum()), dtype=np.uint64)
    out[word_at] = a[st]
    widx = word_at[rid[fol]] + 1 + m[fol]
    bit = ((rel[fol] - ws) % span) // ws + np.uint64(1)
    np.bitwise_or.at(out, widx, np.left_shift(np.uint64(1), bit))
    out[widx] |= np.uint64(1)
    return out.astype(dtype)


def relr_decode(words: np.ndarray, wordsize: int = 8) -> np.ndarray:
    """Sorted addresses encoded by a DT_RELR table (the inverse of :func:`relr_encode`).

    Vectorised: each bitmap word's ``where`` is its run's address word plus one word plus
    ``nbits`` words per bitmap since that address; set bits are expanded with one numpy
    operation. Raises ValueError for a table that starts with a bitmap (no address yet).
    """
    w = np.asarray(words).astype(np.uint64)
    if w.size == 0:
        return np.zeros(0, np.uint64)
    is_addr = (w & np.uint64(1)) == 0
    if not is_addr[0]:
        raise ValueError("RELR table starts with a bitmap")
    idx = np.arange(w.size)
    last = np.maximum.accumulate(np.where(is_addr, idx, 0))
    nbits = wordsize * 8 - 1
    k = (idx - last - 1).astype(np.uint64)  # bitmap number since the last address word
    with np.errstate(over="ignore"):  # damaged tables wrap around; the caller range-checks
        where = w[last] + np.uint64(wordsize) + k * np.uint64(nbits * wordsize)
        bm = ~is_addr
        bits = (w[bm, None] >> np.arange(1, nbits + 1, dtype=np.uint64)) & np.uint64(1)
        addrs = where[bm, None] + np.arange(nbits, dtype=np.uint64) * np.uint64(wordsize)
    return np.sort(np.concatenate([w[is_addr], addrs[bits.astype(bool)]]))


def relr_size(offsets: np.ndarray, wordsize: int = 8) -> int:
    """Bytes of the optimal RELR table for these word-aligned addresses."""
    return int(relr_encode(offsets, wordsize).size) * wordsize
