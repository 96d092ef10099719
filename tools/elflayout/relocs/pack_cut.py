"""pack-relocs, step 8: cut the whole freed pages out of the written file (pack.py
describes the whole algorithm)."""

from __future__ import annotations

import mmap
import os

import numpy as np

from elflayout import elfcore
from elflayout import layouts as L
from elflayout.arch import cut_granule

PAGE = elfcore.PAGE
# Fewer whole freed pages than this stay in the file: the cut adds a PT_LOAD, which is
# worth it only when it saves read-around of zeros.
MIN_CUT_PAGES = 2
# Linux's default read_ahead_kb: ``elflayout link`` cuts in whole multiples of it when code
# follows the freed pages within it (GNU ld, gold). ext4 reads into large folios aligned to
# their size, and a PG_readahead mark covers a whole folio: a cut of a few pages moves the
# code against those boundaries, and the readahead chain the relocation tables start runs
# on into cold code (GNU ld's libstdc++: a 4-page cut read 27 pages more than the unpacked
# link, uncut 1 fewer). lld puts read-only data there: its cut stays (uncut: 6 pages more).
READAHEAD_UNIT = 128 * 1024


def cut_freed_pages(path, lo: int, hi: int, unit: int = 0) -> dict:
    """Step 8: take the whole pages of the freed range ``[lo, hi)`` out of the file.

    Read-around at the edges of the hot tables reads the zeros the RELATIVE relocations
    left (libpython: 33 pages, one window on each side of the hole). The PT_LOAD holding
    them is split in two around the hole: addresses stay, only the file offsets of what
    follows drop by the cut (a multiple of the page size, of the segments' p_align on
    arm64: ``arch.cut_granule``, so every segment keeps offset ≡ vaddr mod p_align); ld.so maps the gap PROT_NONE, as for any gap between
    segments. The program header table stays where it is (strip and objcopy rewrite a
    file that has it elsewhere, and the library no longer loads): the new entry takes
    the room after the table, else PT_PHDR's place (optional in a shared library: ld.so
    finds the table in the PT_LOAD that maps e_phoff); GNU ld leaves neither, so
    ``_layout`` slides the tables after the table (the build-id note with them) by one
    entry (``_phdr_reserve``). Returns
    ``{"pages": n, "bytes": n}`` (0 pages and the reason when nothing was cut).
    ``unit`` (bytes, a power of two; 0: none): when code follows the freed pages within
    ``unit``, cut only whole multiples of it, so that code keeps its alignment to it
    (``READAHEAD_UNIT``)."""
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        out = _cut(mm, lo, hi, unit)
        if out.get("pages"):
            mm.flush()
            f.truncate(len(mm) - out["bytes"])
        os.fsync(f.fileno())
    return out


def _code_follows(ph, end: int, unit: int) -> bool:
    """Whether an executable PT_LOAD has file bytes in ``[end, end + unit)``."""
    x = (ph["p_type"] == L.PT_LOAD) & ((ph["p_flags"] & L.PF_X) != 0) & (ph["p_filesz"] > 0)
    return bool(np.any(x & (ph["p_offset"] < end + unit) & (ph["p_offset"] + ph["p_filesz"] > end)))


def _cut(data: mmap.mmap, lo: int, hi: int, unit: int = 0) -> dict:
    """``cut_freed_pages`` on the file's map: the headers rewritten, the bytes after the
    hole moved down (the caller truncates)."""
    ehdr, ph, sh = L.read_headers(data)  # the written copy: valid headers (plan_pack made them)
    eh = ehdr[0]
    phoff, phnum, shoff, shnum = int(eh["e_phoff"]), int(eh["e_phnum"]), int(eh["e_shoff"]), int(eh["e_shnum"])

    def nothing(why):
        return {"pages": 0, "bytes": 0, "why": why}

    granule = cut_granule(int(eh["e_machine"]), ph["p_type"], ph["p_align"], PAGE)
    a, b = L.align_up(lo, PAGE), hi // PAGE * PAGE
    if unit > granule and _code_follows(ph, b, unit):
        b = a + max(b - a, 0) // unit * unit
        if b - a < unit:
            return nothing(f"fewer than {unit // 1024} KiB of whole freed pages, and code follows them within "
                           f"{unit // 1024} KiB: a smaller cut moves that code against the large folios and "
                           f"readahead marks of the windows the relocation tables open")
    b = a + max(b - a, 0) // granule * granule
    if b - a < MIN_CUT_PAGES * PAGE:
        return nothing(f"fewer than {MIN_CUT_PAGES} whole freed pages" if granule == PAGE else
                       f"fewer than {max(MIN_CUT_PAGES * PAGE, granule) // 1024} KiB of whole freed pages "
                       f"(segments aligned to {granule // 1024} KiB)")
    loads = np.flatnonzero(ph["p_type"] == L.PT_LOAD)
    k = next((int(i) for i in loads if ph["p_offset"][i] <= lo and hi <= ph["p_offset"][i] + ph["p_filesz"][i]), None)
    if k is None or any(data[lo:hi]):
        return nothing("the freed range is not zeroed inside one PT_LOAD")
    table_end = phoff + phnum * L.PHDR64.itemsize
    if phoff < b and table_end > a:
        return nothing("the program header table lies in the freed range")
    after = [int(sh["sh_offset"][i]) for i in range(shnum) if sh["sh_type"][i] != L.SHT_NOBITS and sh["sh_size"][i]
             and sh["sh_offset"][i] >= table_end]
    after += [int(q["p_offset"]) for q in ph if q["p_filesz"] and q["p_offset"] >= table_end]
    # room: nothing starts there, and its bytes are unused (BOLT leaves bytes outside any section)
    grow = (min(after, default=len(data)) - table_end >= L.PHDR64.itemsize
            and not any(data[table_end:table_end + L.PHDR64.itemsize]))
    phdr = np.flatnonzero(ph["p_type"] == L.PT_PHDR)
    if not grow and not phdr.size:
        return nothing("no room for one more program header and no PT_PHDR to give its place")
    if not grow and np.any(ph["p_type"] == L.PT_INTERP):  # glibc: an executable's load base = AT_PHDR - PT_PHDR
        return nothing("no room for one more program header, and an executable's PT_PHDR must stay")
    if any(sh["sh_type"][i] != L.SHT_NOBITS and sh["sh_size"][i] and sh["sh_offset"][i] < b
           and sh["sh_offset"][i] + sh["sh_size"][i] > a for i in range(shnum)):
        return nothing("a section lies in the freed range")
    cut = b - a
    seg = ph[k].copy()
    vshift = int(seg["p_vaddr"]) - int(seg["p_offset"])
    first, second = seg.copy(), seg.copy()
    first["p_filesz"] = first["p_memsz"] = a - int(seg["p_offset"])
    second["p_offset"] = a
    second["p_vaddr"] = second["p_paddr"] = b + vshift
    second["p_filesz"] = int(seg["p_offset"] + seg["p_filesz"]) - b
    second["p_memsz"] = int(seg["p_offset"] + seg["p_memsz"]) - b
    ph["p_offset"][ph["p_offset"] >= b] -= np.uint64(cut)
    ph = np.concatenate([ph[:k], [first, second], ph[k + 1:]]).astype(L.PHDR64)
    if grow:
        x = ph["p_type"] == L.PT_PHDR
        ph["p_filesz"][x] = ph["p_memsz"][x] = ph.nbytes
    else:
        ph = ph[ph["p_type"] != L.PT_PHDR]
    sh["sh_offset"][(sh["sh_offset"] >= a) & (sh["sh_offset"] < b)] = a  # empty sections in the cut
    sh["sh_offset"][sh["sh_offset"] >= b] -= np.uint64(cut)
    eh["e_phnum"] = ph.size
    if phoff >= b:  # a table after the hole (BOLT puts it at the end) moves with the bytes
        eh["e_phoff"] = phoff - cut
    if shoff >= b:
        eh["e_shoff"] = shoff - cut
    data[phoff:phoff + ph.nbytes] = ph.tobytes()
    data[0:L.EHDR64.itemsize] = eh.tobytes()
    data.move(a, b, len(data) - b)
    new_shoff = int(eh["e_shoff"])
    data[new_shoff:new_shoff + sh.nbytes] = sh.tobytes()
    return {"pages": cut // PAGE, "bytes": cut, "program_header": "added" if grow else "in PT_PHDR's place"}
