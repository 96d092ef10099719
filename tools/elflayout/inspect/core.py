"""What ``elflayout inspect`` reports, as data (the ``elflayout-inspect`` v1 body).

Everything here returns plain dicts/lists ready for JSON; ``inspect.cli`` prints them.
Bulk tables (relocations, symbols, FDEs) are read with numpy; see elfcore/symbols.
"""

from __future__ import annotations

import datetime
import os
import struct

import numpy as np

from elflayout import __version__
from elflayout import linkmap, symbols
from elflayout.arch import reloc_name
from elflayout.elfcore import PAGE, ElfImage, page_range, relr_decode, relr_size
from elflayout.errors import ElflayoutError
from elflayout.fileio import envelope
from elflayout.layouts import PF_R, PF_W, PF_X, SHF_ALLOC, SYM32, SYM64

FORMAT_KIND = "inspect"
FORMAT_VERSION = 1

# Section flags as readelf prints them.
_SHF = [(0x1, "W"), (0x2, "A"), (0x4, "X"), (0x10, "M"), (0x20, "S"), (0x40, "I"), (0x80, "L"), (0x200, "G"),
        (0x400, "T"), (0x800, "C"), (0x80000000, "E")]
SHT_RELR = 19


def _name(v, prefix: str) -> str:
    """pyelftools gives unknown enum values as ints: name them like readelf would."""
    return v if isinstance(v, str) else f"{prefix}_{v:#x}"


def shflags(f: int) -> str:
    return "".join(c for bit, c in _SHF if f & bit)


def pflags(f: int) -> str:
    return ("R" if f & PF_R else " ") + ("W" if f & PF_W else " ") + ("E" if f & PF_X else " ")


def _pages(offset: int, size: int, occupies: bool = True, page: int = PAGE):
    if not occupies or size <= 0:
        return None
    a, b = page_range(offset, size, page)
    return [a, b]


def reloc_type_name(machine: str, t: int, elfclass: int = 64) -> str:
    return reloc_name(machine, elfclass, t)


def file_info(img: ElfImage, page: int = PAGE) -> dict:
    h = img.elf.header
    ident = img.identity()
    if not isinstance(ident["build_id"], (str, type(None))):  # a damaged note: pyelftools gives raw bytes
        ident["build_id"] = bytes(ident["build_id"]).hex()
    return {
        **ident,
        "class": img.elfclass,
        "endian": "little" if img.elf.little_endian else "big",
        "type": _name(h["e_type"], "ET"),
        "machine": _name(img.machine, "EM"),
        "x86_64": img.is_x86_64,
        "entry": h["e_entry"],
        "pages": -(-img.size // page),
    }


def segments(img: ElfImage, page: int = PAGE) -> list[dict]:
    return [{
        "index": s.index, "type": _name(s.type, "PT"), "flags": pflags(s.flags).replace(" ", "") or "-", "offset": s.offset,
        "filesz": s.filesz, "vaddr": s.vaddr, "memsz": s.memsz, "align": s.align,
        "pages": _pages(s.offset, s.filesz, page=page),
    } for s in img.segments]


def _containing_load(img: ElfImage, sec) -> int | None:
    """Program-header index of the PT_LOAD holding a section (by address if NOBITS)."""
    if not sec.flags & SHF_ALLOC:  # not loaded
        return None
    for seg in img.loads:
        if sec.type == "SHT_NOBITS" or sec.size == 0:
            if seg.vaddr <= sec.addr <= seg.vaddr + seg.memsz and sec.addr + sec.size <= seg.vaddr + seg.memsz:
                return seg.index
        elif seg.offset <= sec.offset and sec.offset + sec.size <= seg.offset + seg.filesz:
            return seg.index
    return None


def sections(img: ElfImage, page: int = PAGE) -> list[dict]:
    out = []
    for s in img.sections:
        if s.index == 0:
            continue
        out.append({
            "index": s.index, "name": s.name, "type": _name(s.type, "SHT"),
            "flags": shflags(s.flags), "addr": s.addr, "offset": s.offset, "size": s.size, "align": s.align,
            "entsize": s.entsize, "pages": _pages(s.offset, s.size, s.occupies_file, page),
            "segment": _containing_load(img, s),
        })
    return out


def relocations(img: ElfImage) -> dict:
    """Dynamic relocations by table and by type, and the optimal RELR size of the RELATIVE ones."""
    tabs = img.reloc_tables()
    rel_t = img.relative_type()
    tables, by_type = [], {}
    rel_offsets = []
    for name, r in tabs.items():
        ent = r.dtype.itemsize
        tables.append({"section": name, "count": int(r.size), "entsize": ent, "bytes": int(r.size) * ent})
        ty = img.reloc_types(r)
        if ty.size and int(ty.max()) < 4096:  # bincount beats unique on 400k small type numbers
            c = np.bincount(ty.astype(np.int64))
            u = np.flatnonzero(c)
            c = c[u]
        else:
            u, c = np.unique(ty, return_counts=True)
        for t, n in zip(u.tolist(), c.tolist()):
            d = by_type.setdefault(t, {"type": reloc_type_name(img.machine, t, img.elfclass), "number": t, "count": 0, "bytes": 0})
            d["count"] += n
            d["bytes"] += n * ent
        if rel_t is not None:
            rel_offsets.append(r["r_offset"][ty == rel_t].astype(np.uint64))
    # An existing DT_RELR table (already packed): its addresses count as RELATIVE too.
    relr_existing = None
    for s in img.sections:
        if (s.type == "SHT_RELR" or s.type == SHT_RELR or s.name == ".relr.dyn") and s.size:
            words = np.frombuffer(img.mm, dtype=np.uint64 if img.wordsize == 8 else np.uint32,
                                  count=s.size // img.wordsize, offset=s.offset)
            addrs = relr_decode(words, img.wordsize)
            relr_existing = {"section": s.name, "bytes": s.size, "count": int(addrs.size)}
            rel_offsets.append(addrs.astype(np.uint64))
    relative = None
    if rel_t is not None:
        offs = np.concatenate(rel_offsets) if rel_offsets else np.zeros(0, np.uint64)
        aligned = offs[offs % np.uint64(img.wordsize) == 0]
        n_rel = int(sum(d["count"] for t, d in by_type.items() if t == rel_t))
        rela_ent = max((t["entsize"] for t in tables), default=3 * img.wordsize)
        relr = relr_size(aligned, img.wordsize) if aligned.size else 0
        relative = {
            "type": reloc_type_name(img.machine, rel_t, img.elfclass), "count": n_rel,
            "word_aligned": int(aligned.size), "relr_bytes": relr, "relr_words": relr // img.wordsize,
            "rel_bytes": n_rel * rela_ent,
            # bytes freed if every RELATIVE relocation (and any existing RELR table) became one optimal RELR table
            "saved_bytes": n_rel * rela_ent + (relr_existing["bytes"] if relr_existing else 0) - relr,
        }
    return {
        "tables": tables,
        "by_type": sorted(by_type.values(), key=lambda d: -d["count"]),
        "relative": relative,
        "relr_existing": relr_existing,
        "count": int(sum(t["count"] for t in tables)),
        "bytes": int(sum(t["bytes"] for t in tables)),
    }


def symbol_counts(img: ElfImage) -> dict:
    out = {}
    dt = SYM64 if img.elfclass == 64 else SYM32
    for key, want in (("symtab", "SHT_SYMTAB"), ("dynsym", "SHT_DYNSYM")):
        sec = next((s for s in img.sections if s.type == want), None)
        if sec is None:
            out[key] = None
            continue
        n = sec.size // dt.itemsize
        syms = np.frombuffer(img.mm, dtype=dt, count=n, offset=sec.offset)[1:]  # entry 0 is null
        typ = syms["st_info"] & 0xF
        bind = syms["st_info"] >> 4
        undef = syms["st_shndx"] == 0
        out[key] = {
            "section": sec.name, "bytes": sec.size, "count": int(syms.size),
            "defined": int((~undef).sum()), "undefined": int(undef.sum()),
            "functions": int(((typ == 2) | (typ == 10))[~undef].sum()), "objects": int((typ == 1)[~undef].sum()),
            "global": int((bind == 1).sum()), "weak": int((bind == 2).sum()), "local": int((bind == 0).sum()),
        }
    return out


def function_summary(img: ElfImage, listing: bool = False) -> dict:
    """Counts of function extents by source; with ``listing`` every extent too (file-offset order)."""
    ft = symbols.functions(img)
    c = ft.counts()
    out = {
        "count": len(ft), "from_symtab": c["symtab"], "from_dynsym": c["dynsym"], "from_eh_frame": c["eh_frame"],
        "fde_count": ft.fde_count, "bytes": int(ft.size.sum()),
    }
    if listing:
        out["list"] = [{"name": n, "source": symbols.SOURCES[k], "offset": o, "vaddr": v, "size": z}
                       for n, k, o, v, z in zip(ft.names, ft.source.tolist(), ft.offset.tolist(), ft.vaddr.tolist(),
                                                ft.size.tolist())]
    return out


def map_summary(img: ElfImage, map_path, page: int = PAGE) -> dict:
    lm = linkmap.parse(map_path, img)
    _check_map_matches(img, lm)
    objs = lm.object_summary()
    for o in objs:
        o["pages"] = None if o["offset_start"] is None else list(page_range(o["offset_start"], o["offset_end"] - o["offset_start"], page))
    off, size = lm.offset, lm.size
    ok = (off >= 0) & (size > 0)
    p0 = np.where(ok, off // page, -1).tolist()
    p1 = np.where(ok, (off + size - 1) // page, -1).tolist()
    offl = np.where(off >= 0, off, -1).tolist()
    ins = [{"output": o, "name": n, "object": ob, "vaddr": v, "size": s, "offset": f if f >= 0 else None,
            "pages": [a, b] if a >= 0 else None}
           for o, n, ob, v, s, f, a, b in zip(lm.output, lm.name, lm.object, lm.vaddr.tolist(), size.tolist(), offl, p0, p1)]
    return {
        "path": str(lm.path), "flavour": lm.flavour, "output_sections": len(lm.output_sections),
        "input_sections": ins, "objects": objs, "symbols": len(lm.sym_name), "discarded": lm.discarded,
    }


def _check_map_matches(img: ElfImage, lm) -> None:
    """A map of a different link would attribute bytes wrongly: refuse it."""
    secs = {s.name: s for s in img.sections if s.flags & SHF_ALLOC and s.size}
    compared = 0
    for o in lm.output_sections:
        s = secs.get(o["name"])
        if s is None or not o["size"]:
            continue
        compared += 1
        if s.addr != o["vaddr"] or s.size != o["size"]:
            raise ElflayoutError(
                f"{lm.path}: link map does not match {img.path}: {o['name']} is {o['size']:#x} bytes at "
                f"{o['vaddr']:#x} in the map, {s.size:#x} bytes at {s.addr:#x} in the file")
    if compared == 0:
        raise ElflayoutError(f"{lm.path}: link map shares no output section with {img.path}")


def inspect(path: str | os.PathLike, map_path: str | os.PathLike | None = None, argv=None,
            functions: bool = False, page_size: int = PAGE) -> dict:
    """The full ``elflayout-inspect`` v1 document of one ELF file (``functions``: list every
    extent); page ranges in pages of ``page_size`` bytes (arm64 kernels: 4, 16 or 64 KiB)."""
    for f in (path, map_path):
        # a FIFO or device would block or read forever: refuse before opening
        if f is not None and os.path.exists(f) and not (os.path.isfile(f) or os.path.isdir(f)):
            raise ElflayoutError(f"{f}: not a regular file")
    try:
        with ElfImage(path) as img:
            body = _body(img, map_path, functions, page_size)
    except ElflayoutError:
        raise
    except (OverflowError, IndexError, struct.error, UnicodeDecodeError) as e:
        raise ElflayoutError(f"{path}: malformed ELF file ({type(e).__name__}: {e})") from None
    except Exception as e:
        if not type(e).__module__.startswith("elftools"):
            raise
        raise ElflayoutError(f"{path}: malformed ELF file ({type(e).__name__}: {e})") from None
    meta = {
        "tool": f"elflayout {__version__}",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": list(argv) if argv is not None else None,
        "page_size": page_size,
    }
    return envelope(FORMAT_KIND, FORMAT_VERSION, meta, **body)


def _body(img: ElfImage, map_path, functions: bool = False, page: int = PAGE) -> dict:
    """Everything but the envelope; damaged files may raise pyelftools/numpy errors."""
    notes = []
    if img.machine == "EM_AARCH64" and img.elfclass == 64:
        notes.append("AArch64: profile (qemu backend) and pack-relocs run under qemu-user; "
                     "split and order's relinks (link) are x86-64-specific")
    elif not img.is_x86_64:
        notes.append(f"not x86-64 ({img.machine}, ELF{img.elfclass}): relocation names and the RELATIVE type come "
                     f"from the {img.machine} table; profile, order and pack-relocs are x86-64-specific")
    if page != PAGE and any((s.vaddr - s.offset) % page for s in img.loads):
        notes.append(f"does not load with {page // 1024} KiB pages: a PT_LOAD's offset and address differ "
                     f"modulo {page // 1024} KiB (linked with a smaller max-page-size)")
    if img.relative_type() is None:
        notes.append(f"no R_*_RELATIVE type known for {img.machine}: RELR size not computed")
    info = file_info(img, page)
    return {
        "file": info,
        "segments": segments(img, page),
        "sections": sections(img, page),
        "relocations": relocations(img),
        "symbols": symbol_counts(img),
        "functions": function_summary(img, functions),
        "map": map_summary(img, map_path, page) if map_path else None,
        "notes": notes,
    }
