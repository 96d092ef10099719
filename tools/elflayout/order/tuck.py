"""Move the sections no segment loads (.symtab, .strtab, .comment, .debug_*) from the file's
tail into a hole between two loadable segments.

Why: a page fault near the end of the last PT_LOAD makes the kernel's mmap read-around (and
its asynchronous read-ahead) read up to half a window past it, and right after the last
PT_LOAD lie ``.symtab`` and ``.strtab`` — pages no one uses at start-up. Once the file ends
where its last segment ends, the read-around stops at end of file. In the hole they are read
only if the pages around the hole are, so where they go is decided by the readahead model
when a profile is given (``predict_places``, ``choose``): the touches replayed with the
sections left at the tail and in every hole, the fewest pages wins. Without a profile, a
rule: where the order leaves code cold (``cold_hole``): with ``hot-last`` the start of
``.text`` is cold (the hole before the first executable PT_LOAD, ``default_hole``); with
``first-access`` its end is (the hole after the last executable PT_LOAD), and the hot
start of ``.text`` stays within the read-ahead of the headers the loader reads first. The
rule can be wrong: on libzstd built with ``-g`` and ordered hot-last, the hole before the
code lies within the read-ahead from the file's start either way.

What moves: every section that occupies the file, is not SHF_ALLOC and lies after the end of
the last PT_LOAD's file bytes, and the section header table. The segments from the hole on
shift in the file by a multiple of the largest PT_LOAD alignment (their addresses and bytes
stay as they are), so what the loader maps is byte-for-byte the same.
"""

from __future__ import annotations

import contextlib
import struct
import tempfile
from pathlib import Path

import numpy as np

from elflayout.elfcore import PAGE, ElfImage
from elflayout.errors import ElflayoutError
from elflayout.fileio import rewrite_in_place, write_proved
from elflayout.layouts import PF_W, PF_X, SHF_ALLOC

# The place that leaves the unloaded sections where the linker put them, after the last segment.
TAIL = "tail"

# Offsets of the fields rewritten, per ELF class: (e_shoff, its format), (p_offset in a
# program header, format), (sh_offset in a section header, format).
_FIELDS = {32: ((0x20, "I"), (4, "I"), (16, "I")), 64: ((0x28, "Q"), (8, "Q"), (24, "Q"))}


def _round_up(n: int, a: int) -> int:
    return -(-n // a) * a


def default_hole(img: ElfImage) -> int:
    """The PT_LOAD the hole follows by default: the one before the first executable
    PT_LOAD (0 when that is the first). Its neighbours are the end of the read-only data
    (``.eh_frame``, cold at start-up) and the start of ``.text`` (cold with hot-last);
    after the first PT_LOAD of a packed library instead lie ``.dynamic`` and the
    relocation tables ld.so reads, and the read-around there reads the moved tables."""
    loads = img.loads
    first_x = next((i for i, g in enumerate(loads) if g.flags & PF_X), 0)
    return max(first_x - 1, 0)


def plan(img: ElfImage, after: int | None = None) -> dict:
    """Where everything goes: {"hole": file offset of the hole, "delta": bytes inserted,
    "moved": {section index: new offset}, "shoff": new e_shoff, "end": new file size}.
    ``after``: the hole follows the file bytes of PT_LOAD number ``after`` (0: the first;
    None: ``default_hole``)."""
    loads = img.loads
    after = default_hole(img) if after is None else after
    if len(loads) < 2 or not 0 <= after < len(loads) - 1:
        raise ElflayoutError(f"{img.path}: no hole after PT_LOAD {after} (the file has {len(loads)} PT_LOAD)")
    hole = loads[after + 1].offset
    tail = max(g.offset + g.filesz for g in loads)
    moving = [s for s in img.sections if s.occupies_file and not s.flags & SHF_ALLOC and s.offset >= tail]
    hdr = img.elf.header
    if not moving and hdr["e_shoff"] < tail:
        raise ElflayoutError(f"{img.path}: nothing after the last segment to move")
    for s in img.sections:
        if s.occupies_file and s.offset >= tail and s not in moving:
            raise ElflayoutError(f"{img.path}: section {s.name} lies after the last segment but is loaded")
        if s.occupies_file and s.offset < hole < s.offset + s.size:
            raise ElflayoutError(f"{img.path}: section {s.name} spans the hole at {hole:#x}")
    for g in img.segments:
        if g.offset < hole < g.offset + g.filesz:
            raise ElflayoutError(f"{img.path}: segment {g.type} spans the hole at {hole:#x}")
    if hdr["e_phoff"] + hdr["e_phnum"] * hdr["e_phentsize"] > hole:
        raise ElflayoutError(f"{img.path}: the program headers lie after the hole at {hole:#x}")
    cur, moved = hole, {}
    for s in sorted(moving, key=lambda s: s.offset):
        cur = _round_up(cur, max(s.align, 1))
        moved[s.index] = cur
        cur += s.size
    shoff = _round_up(cur, 8)
    cur = shoff + img.elf.num_sections() * hdr["e_shentsize"]  # e_shnum is 0 past 0xff00 sections
    grain = max([PAGE] + [g.align for g in loads])
    delta = _round_up(cur - hole, grain)
    return {"hole": hole, "delta": delta, "moved": moved, "shoff": shoff, "tail": tail, "end": tail + delta,
            "after": after, "after_code": bool(loads[after].flags & PF_X)}


def cold_hole(img: ElfImage, algorithm: str | None) -> int:
    """The PT_LOAD after which the hole is coldest for code ordered by ``algorithm``:
    ``first-access`` (hot code first) after the last executable PT_LOAD that another
    follows; anything else (``hot-last``, no order) ``default_hole``."""
    loads = img.loads
    if algorithm == "first-access":
        execs = [i for i, g in enumerate(loads[:-1]) if g.flags & PF_X]
        if execs:
            return execs[-1]
    return default_hole(img)


def tuck(src: str | Path, dst: str | Path, after: int | None = None) -> dict:
    """Write SRC to DST with its unloaded tail moved into the hole after PT_LOAD ``after``;
    returns the plan (``plan``) plus "moved_names"."""
    with ElfImage(src) as img:
        p = plan(img, after)
        data = bytes(img.mm)
        hdr = img.elf.header
        fmt = "<" if img.elf.little_endian else ">"
        (e_shoff, fo), (p_off, pf), (sh_off, sf) = _FIELDS[img.elfclass]
        hole, delta = p["hole"], p["delta"]
        out = bytearray(data[:hole]) + bytearray(delta) + bytearray(data[hole:p["tail"]])
        for s in img.sections:
            if s.index in p["moved"]:
                out[p["moved"][s.index]:p["moved"][s.index] + s.size] = data[s.offset:s.offset + s.size]
        shdrs = bytearray(data[hdr["e_shoff"]:hdr["e_shoff"] + img.elf.num_sections() * hdr["e_shentsize"]])
        for s in img.sections:
            at = s.index * hdr["e_shentsize"] + sh_off
            old = struct.unpack_from(fmt + sf, shdrs, at)[0]
            new = p["moved"].get(s.index, old + delta if old >= hole and s.index else old)
            struct.pack_into(fmt + sf, shdrs, at, new)
        out[p["shoff"]:p["shoff"] + len(shdrs)] = shdrs
        struct.pack_into(fmt + fo, out, e_shoff, p["shoff"])
        for g in img.segments:
            if g.offset >= hole:
                at = hdr["e_phoff"] + g.index * hdr["e_phentsize"] + p_off
                struct.pack_into(fmt + pf, out, at, g.offset + delta)
        names = [s.name for s in img.sections if s.index in p["moved"]]
    write_proved(src, dst, bytes(out), verify)
    return p | {"moved_names": names}


def _mapped(img: ElfImage, g) -> bytes:
    """Segment ``g``'s file bytes with e_shoff and the program header table blanked: the
    offsets there are the one thing tuck changes (the headers are compared field by field)."""
    data = bytearray(img.mm[g.offset:g.offset + g.filesz])
    h = img.elf.header
    (e_shoff, fo), _, _ = _FIELDS[img.elfclass]
    at, n = e_shoff - g.offset, struct.calcsize("<" + fo)
    if 0 <= at and at + n <= len(data):
        data[at:at + n] = bytes(n)
    lo, hi = h["e_phoff"] - g.offset, h["e_phoff"] + h["e_phnum"] * h["e_phentsize"] - g.offset
    lo, hi = max(lo, 0), min(hi, len(data))
    if lo < hi:
        data[lo:hi] = bytes(hi - lo)
    return bytes(data)


def verify(src: str | Path, dst: str | Path) -> None:
    """Prove DST maps exactly what SRC maps: the same program headers but for file offsets,
    each segment's file bytes equal, and every section's bytes and header equal but for its
    offset. Anything else is a bug of ours (exit 3), never a written output."""
    with ElfImage(src) as a, ElfImage(dst) as b:
        if len(a.segments) != len(b.segments) or len(a.sections) != len(b.sections):
            raise RuntimeError(f"{dst}: tuck changed the number of segments or sections")
        for x, y in zip(a.segments, b.segments):
            if (x.type, x.flags, x.vaddr, x.filesz, x.memsz, x.align) != (y.type, y.flags, y.vaddr, y.filesz,
                                                                          y.memsz, y.align) \
                    or (x.offset - y.offset) % max(x.align, 1) \
                    or _mapped(a, x) != _mapped(b, y):
                raise RuntimeError(f"{dst}: tuck changed segment {x.index} ({x.type})")
        for x, y in zip(a.sections, b.sections):
            same_data = not x.occupies_file or a.mm[x.offset:x.offset + x.size] == b.mm[y.offset:y.offset + y.size]
            if (x.name, x.type, x.size, x.addr, x.flags) != (y.name, y.type, y.size, y.addr, y.flags) or not same_data:
                raise RuntimeError(f"{dst}: tuck changed section {x.name}")


def tuck_in_place(path: str | Path, after: int | None = None, algorithm: str | None = None) -> dict:
    """``tuck`` PATH onto itself (a temporary file beside it, then renamed); ``after`` None:
    the ``cold_hole`` for code ordered by ``algorithm``."""
    if after is None:
        with ElfImage(path) as img:
            after = cold_hole(img, algorithm)
    return rewrite_in_place(path, lambda src, dst: tuck(src, dst, after), "tuck")


def holes(img: ElfImage) -> list[int]:
    """The PT_LOAD numbers a hole can follow (``plan`` accepts them); none when nothing
    lies after the last segment."""
    out = []
    for after in range(len(img.loads) - 1):
        try:
            plan(img, after)
        except ElflayoutError:
            continue
        out.append(after)
    return out


def where(img: ElfImage, after) -> str:
    """The place in words: "at the tail", "before the code", "after the code" or after
    which PT_LOAD."""
    if after == TAIL:
        return "at the tail"
    loads = img.loads
    if after + 1 >= len(loads):     # after the last segment, not at the file's tail
        return f"after PT_LOAD {after}, the last"
    if loads[after + 1].flags & PF_X and not loads[after].flags & PF_X:
        return "before the code"
    if loads[after].flags & PF_X and not loads[after + 1].flags & PF_X:
        return "after the code"
    return f"after PT_LOAD {after}"


def moved_pages(img: ElfImage, p: dict, pages, kinds) -> np.ndarray:
    """File pages of touches of ``img`` (4 KiB pages, kinds b"x"/b"r"/b"w"/b"t") once
    tucked as plan ``p`` says: pages from the hole on move by ``delta``. On the page the
    hole cuts in two, a touch goes with the segment after the hole when its kind is that
    segment's (code into an executable one, a write into a writable one that follows a
    read-only one), else stays with the segment before."""
    pages = np.asarray(pages, dtype=np.int64)
    step = p["delta"] // PAGE
    out = np.where(pages * PAGE >= p["hole"], pages + step, pages)
    if p["hole"] % PAGE:
        prev, nxt = img.loads[p["after"]], img.loads[p["after"] + 1]
        k = np.asarray(kinds, dtype="S1")
        goes = (k == b"x") & bool(nxt.flags & PF_X)
        goes |= (k == b"w") & bool(nxt.flags & PF_W and not prev.flags & PF_W)
        out = np.where((pages == p["hole"] // PAGE) & goes, pages + step, out)
    return out


@contextlib.contextmanager
def copies(path):
    """PATH as it is and tucked after each PT_LOAD of ``holes`` (in a temporary
    directory), open: {place: (ElfImage, plan or None)}, ``TAIL`` for PATH itself."""
    with ElfImage(path) as img:
        plans = {a: plan(img, a) for a in holes(img)}
    with tempfile.TemporaryDirectory(prefix="elflayout-tuck-") as td, contextlib.ExitStack() as st:
        out = {TAIL: (st.enter_context(ElfImage(path)), None)}
        for a, p in plans.items():
            dst = Path(td) / f"after{a}"
            tuck(path, dst, a)
            out[a] = (st.enter_context(ElfImage(dst)), p)
        yield out


def predict_places(path, touch_sets: dict, read_ahead_kb: int, loader: bool | None) -> dict:
    """Pages the readahead model predicts for each set of touches of PATH as it is
    (``touch_sets``: name -> (pages, kinds)) with the unloaded sections at each place
    (``copies``): {name: {place: pages}}. ``loader``: model ld.so's relocation pass
    (None: unless the touches hold it, ``simulation.touches_relocations``)."""
    from elflayout.order.readahead import simulate
    from elflayout.order.simulation import touches_relocations

    with copies(path) as cs:
        img = cs[TAIL][0]
        out = {}
        for n, (pg, kd) in touch_sets.items():
            ld = not touches_relocations(img, np.asarray(pg)) if loader is None else loader
            out[n] = {a: simulate(im, pg if p is None else moved_pages(im, p, pg, kd), kd, read_ahead_kb, ld)["pages"]
                      for a, (im, p) in cs.items()}
        return out


def choose(pred: dict, move: bool | None, preferred: int | None = None):
    """The place of the fewest predicted pages (``pred``: place -> pages): ``move`` True,
    among the holes (a tie: ``preferred``, else the first); None, ``TAIL`` too, which a
    hole must beat; False: ``TAIL``."""
    inside = sorted(a for a in pred if a != TAIL)
    if move is False or not inside:
        return TAIL
    best = min(inside, key=lambda a: (pred[a], a != preferred, a))
    if move is None and pred.get(TAIL) is not None and pred[best] >= pred[TAIL]:
        return TAIL
    return best
