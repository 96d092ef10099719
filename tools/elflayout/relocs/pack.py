"""Pack the RELATIVE relocations of an already-linked shared library into DT_RELR.

Goal: the same library, loaded by stock glibc >= 2.36, with a relocation table the
loader streams in a fraction of the pages. Nothing the program sees moves.

Definitions
  packable   a RELA relocation of type R_*_RELATIVE whose target is word-aligned, lies in
             the file-backed part of a PT_LOAD (so its addend can be stored in the file)
             and is hit by no other relocation;
  kept       every other relocation of .rela.dyn, in its original order;
  run        the dynamic-linking tables from the first table that must grow (.dynstr,
             .gnu.version_r) up to .rela.dyn; only these slide, by a few bytes.

Algorithm (one copy of the file, patched in place, written atomically)
  1. Validate (ET_DYN, supported machine, no TEXTREL, .rela.dyn agrees with DT_RELA*).
  2. Store each packable addend in its target word (RELR means ``*where += base``).
  3. Encode the packable addresses as RELR (elfcore.relr_encode: lld's greedy encoding).
  4. Add the ``GLIBC_ABI_DT_RELR`` version need under libc.so.6 (glibc 2.36 refuses a
     DT_RELR object that needs libc.so.6 versions without it): append the name to
     .dynstr and a Vernaux to .gnu.version_r, sliding the run forward into the space
     freed at the start of .rela.dyn (tables are found only through DT_* tags and
     section headers; the tags, headers and section symbols are updated).
  5. Write the kept relocations, then the RELR table, into the old .rela.dyn space;
     zero the rest.
  6. Dynamic array: shrink DT_RELASZ, set DT_RELACOUNT to the leading RELATIVE count of
     the kept table, add DT_RELR/DT_RELRSZ/DT_RELRENT in spare DT_NULL slots (GNU ld
     and gold leave some). Without spare slots (lld) the dynamic array is rebuilt,
     larger, in the freed space and PT_DYNAMIC points at it read-only (glibc >= 2.35
     supports a read-only PT_DYNAMIC, BZ #28340); the old array stays where it was,
     unused.
  7. Section headers: .rela.dyn shrunk, moved tables, a new .relr.dyn (SHT_RELR),
     appended at the end so no section index changes.
"""

from __future__ import annotations

import mmap
import os
import shutil
import time
from dataclasses import dataclass, field

import numpy as np

from elflayout import elfcore
from elflayout.errors import ElflayoutError
from elflayout.fileio import atomic_output
from elflayout.relocs import elfraw as R
from elflayout.relocs.arch import arch_of

GLIBC_ABI_DT_RELR = b"GLIBC_ABI_DT_RELR"
GLIBC_ABI_DT_RELR_HASH = 0x0FD0E42  # glibc elf/dl-version.c checks this exact value
LIBC_SONAME = b"libc.so.6"
EXTRA_DYN_SLOTS = 4  # spare DT_NULLs left in a rebuilt dynamic array for later tools


class AlreadyPacked(Exception):
    """The input already has DT_RELR: nothing to do."""


@dataclass
class Plan:
    """Everything to change in a copy of the input, computed without writing."""
    path: str
    size: int
    addend_offsets: np.ndarray          # file offsets of target words to store addends in
    addend_values: np.ndarray           # uint64
    blocks: list = field(default_factory=list)  # (file offset, bytes) patches
    truncate_at: int | None = None      # new tail (section names + headers) from here
    tail: bytes = b""
    stats: dict = field(default_factory=dict)


def _read(img, off, n, dtype=np.uint8):
    return np.frombuffer(img.mm, dtype=dtype, count=n // np.dtype(dtype).itemsize, offset=off).copy()


def _fail(img, msg):
    raise ElflayoutError(f"{img.path}: {msg}")


def validate(img) -> tuple:
    """Reject what cannot be packed; return (arch, shdrs, phdrs, dyn, dyn_off, n_used).

    ``dyn`` is the whole PT_DYNAMIC array, ``n_used`` the entries before its first DT_NULL.
    """
    hdr = img.elf.header
    if hdr["e_type"] != "ET_DYN":
        _fail(img, f"not a shared object (e_type {hdr['e_type']}); pack-relocs rewrites ET_DYN libraries")
    arch = arch_of(img)
    if not arch.pack_supported:
        _fail(img, f"packing {img.machine} ELF{img.elfclass} is not implemented yet (x86-64 only; "
                   "the relocation tables in relocs/arch.py are ready for it)")
    if hdr["e_ident"]["EI_DATA"] != "ELFDATA2LSB":
        _fail(img, "big-endian ELF is not supported")
    if hdr["e_phentsize"] != R.PHDR64.itemsize or hdr["e_shentsize"] != R.SHDR64.itemsize:
        _fail(img, f"inconsistent header sizes (e_phentsize {hdr['e_phentsize']}, e_shentsize {hdr['e_shentsize']})")
    if hdr["e_shnum"] == 0 or hdr["e_shstrndx"] == 0 or hdr["e_shstrndx"] >= min(0xFF00, hdr["e_shnum"]):
        _fail(img, "no usable section headers (stripped with --strip-section-headers, or extended numbering)")
    for s in img.loads:
        if s.offset + s.filesz > img.size:
            _fail(img, f"truncated ELF file (PT_LOAD at offset {s.offset:#x} ends past the file's {img.size} bytes)")
    shdrs = _read(img, hdr["e_shoff"], hdr["e_shnum"] * R.SHDR64.itemsize, R.SHDR64)
    phdrs = _read(img, hdr["e_phoff"], hdr["e_phnum"] * R.PHDR64.itemsize, R.PHDR64)
    pdyn = np.nonzero(phdrs["p_type"] == R.PT_DYNAMIC)[0]
    if pdyn.size != 1:
        _fail(img, "no PT_DYNAMIC segment (a static object has no dynamic relocations)")
    dyn_off, dyn_sz = int(phdrs["p_offset"][pdyn[0]]), int(phdrs["p_filesz"][pdyn[0]])
    if dyn_off + dyn_sz > img.size or dyn_sz % 16:
        _fail(img, "inconsistent PT_DYNAMIC (outside the file or not a whole number of entries)")
    dyn = _read(img, dyn_off, dyn_sz, R.DYN64)
    tags = dyn["d_tag"]
    if not np.any(tags == R.DT_NULL):
        _fail(img, "inconsistent dynamic array (no DT_NULL terminator)")
    n_used = int(np.argmax(tags == R.DT_NULL))
    live = dyn[:n_used]

    def tag(t):
        m = np.nonzero(live["d_tag"] == t)[0]
        return int(live["d_val"][m[0]]) if m.size else None

    if tag(R.DT_TEXTREL) is not None or (tag(R.DT_FLAGS) or 0) & R.DF_TEXTREL:
        _fail(img, "has text relocations (DT_TEXTREL): relocating read-only code cannot be packed safely")
    if tag(R.DT_RELR) is not None:
        raise AlreadyPacked(f"{img.path}: already packed (has DT_RELR)")
    rela = img.section(".rela.dyn")
    if rela is None or rela.type != "SHT_RELA":
        _fail(img, "no .rela.dyn section (no RELA dynamic relocations to pack)")
    if tag(R.DT_RELA) != rela.addr or tag(R.DT_RELASZ) != rela.size or (tag(R.DT_RELAENT) or 24) != 24:
        _fail(img, f"inconsistent: DT_RELA/DT_RELASZ ({tag(R.DT_RELA)}/{tag(R.DT_RELASZ)}) do not describe "
                   f".rela.dyn ({rela.addr:#x}/{rela.size})")
    if rela.size % 24:
        _fail(img, "inconsistent: .rela.dyn size is not a multiple of 24")
    if img.vaddr_to_offset(rela.addr) != rela.offset:
        _fail(img, "inconsistent: .rela.dyn is not where its PT_LOAD maps it")
    return arch, shdrs, phdrs, dyn, dyn_off, n_used


def _member(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.isin for a large ``a`` and a small ``b``: binary search, 10x faster here."""
    if not b.size:
        return np.zeros(a.shape, bool)
    b = np.sort(b)
    k = np.minimum(np.searchsorted(b, a), b.size - 1)
    return b[k] == a


def plan_pack(img) -> Plan:
    """Compute the packed file as a list of patches (raises AlreadyPacked / ElflayoutError)."""
    t0 = time.perf_counter()
    arch, shdrs, phdrs, dyn, dyn_off, n_used = validate(img)
    word = arch.word
    names = [s.name for s in img.sections]
    sec = {n: i for i, n in reversed(list(enumerate(names)))}  # first section of each name
    rela_i = sec[".rela.dyn"]
    rela_off, rela_size = int(shdrs[rela_i]["sh_offset"]), int(shdrs[rela_i]["sh_size"])
    rel = img.reloc_tables().get(".rela.dyn")
    if rel is None:  # an empty .rela.dyn
        raise AlreadyPacked(f"{img.path}: .rela.dyn is empty (nothing to do)")
    types = img.reloc_types(rel)
    r_off = rel["r_offset"]

    # -- 1. which RELATIVE relocations can become RELR --------------------------------
    is_rel = types == arch.relative
    tgt_file = img.vaddr_to_offset(r_off)
    packable = is_rel & (r_off % word == 0) & (tgt_file >= 0) & (tgt_file % word == 0)
    # A word hit twice (by a kept relocation, or two RELATIVE ones) keeps its original order.
    other = np.concatenate([r_off[~packable]] + [t["r_offset"] for n, t in img.reloc_tables().items()
                                                 if n != ".rela.dyn"])
    packable &= ~_member(r_off, other)
    srt = np.sort(r_off[packable])
    dup = srt[1:][srt[1:] == srt[:-1]]  # sort-based: numpy 2's hash unique is slow here
    if dup.size:
        packable &= ~_member(r_off, dup)
    n_pack = int(packable.sum())
    if n_pack == 0:
        raise AlreadyPacked(f"{img.path}: no packable RELATIVE relocations (nothing to do)")
    kept = rel[~packable]
    kept_types = types[~packable]
    lead = int(np.argmin(kept_types == arch.relative)) if np.any(kept_types != arch.relative) else kept.size
    relr = elfcore.relr_encode(r_off[packable], word)  # sorts; addresses are link-time vaddrs
    relr_bytes = relr.size * word
    t_enc = time.perf_counter()

    # -- 2. version need GLIBC_ABI_DT_RELR ------------------------------------------
    live = dyn[:n_used]

    def tag(t):
        m = np.nonzero(live["d_tag"] == t)[0]
        return int(live["d_val"][m[0]]) if m.size else None

    dynstr_i = sec.get(".dynstr")
    if dynstr_i is None or int(shdrs[dynstr_i]["sh_addr"]) != tag(R.DT_STRTAB):
        _fail(img, "inconsistent: .dynstr section does not match DT_STRTAB")
    strtab = _read(img, int(shdrs[dynstr_i]["sh_offset"]), int(shdrs[dynstr_i]["sh_size"])).tobytes()
    needed = {R.cstr(strtab, int(v)) for t, v in zip(live["d_tag"], live["d_val"]) if t == R.DT_NEEDED}
    grow = {}        # section index -> new content
    verneed_note = "not needed (no DT_VERNEED: glibc only checks objects with version needs)"
    new_verneednum = None
    vn_i = sec.get(".gnu.version_r")
    if tag(R.DT_VERNEED) is not None:
        if vn_i is None or int(shdrs[vn_i]["sh_addr"]) != tag(R.DT_VERNEED):
            _fail(img, "inconsistent: .gnu.version_r section does not match DT_VERNEED")
        vn_data = _read(img, int(shdrs[vn_i]["sh_offset"]), int(shdrs[vn_i]["sh_size"])).tobytes()
        try:
            entries = R.parse_verneed(vn_data, tag(R.DT_VERNEEDNUM) or 0)
        except ValueError as e:
            _fail(img, f"inconsistent .gnu.version_r ({e})")
        libc = [e for e in entries if R.cstr(strtab, e["file"]) == LIBC_SONAME]
        has = any(R.cstr(strtab, a["name"]) == GLIBC_ABI_DT_RELR for e in libc for a in e["aux"])
        if has:
            verneed_note = "already present"
        elif LIBC_SONAME not in needed and not libc:
            verneed_note = "not needed (libc.so.6 is not DT_NEEDED)"
        else:
            new_str = bytearray()
            at = strtab.find(b"\0" + GLIBC_ABI_DT_RELR + b"\0")
            if at >= 0:
                name_off = at + 1
            else:
                name_off = len(strtab)
                new_str += GLIBC_ABI_DT_RELR + b"\0"
            vd_i = sec.get(".gnu.version_d")
            ndx = [a["other"] & 0x7FFF for e in entries for a in e["aux"]]
            if tag(R.DT_VERDEF) is not None and vd_i is not None:
                vd = _read(img, int(shdrs[vd_i]["sh_offset"]), int(shdrs[vd_i]["sh_size"])).tobytes()
                ndx += R.verdef_indices(vd, tag(R.DT_VERDEFNUM) or 0)
            aux = dict(hash=GLIBC_ABI_DT_RELR_HASH, flags=0, other=max(ndx + [1]) + 1, name=name_off)
            if libc:
                libc[0]["aux"].append(aux)
            else:  # needs libc.so.6 but no versioned symbol from it: add the entry
                at = strtab.find(b"\0" + LIBC_SONAME + b"\0")
                if at < 0:
                    _fail(img, "libc.so.6 is DT_NEEDED but its name is not in .dynstr")
                entries.append(dict(version=1, file=at + 1, aux=[aux]))
                new_verneednum = len(entries)
            grow[vn_i] = R.build_verneed(entries)
            if new_str:
                grow[dynstr_i] = strtab + bytes(new_str)
            verneed_note = f"added under libc.so.6 (version index {aux['other']})"
    assert R.elf_hash(GLIBC_ABI_DT_RELR) == GLIBC_ABI_DT_RELR_HASH

    # -- 3. layout of the rewritten block [run_start, rela_end) -------------------------
    rela_end = rela_off + rela_size
    alloc = [(int(s["sh_offset"]), i) for i, s in enumerate(shdrs)
             if s["sh_flags"] & R.SHF_ALLOC and s["sh_type"] != R.SHT_NOBITS and s["sh_size"] > 0]
    run_start = min([int(shdrs[i]["sh_offset"]) for i in grow] + [rela_off])
    in_run = sorted((o, i) for o, i in alloc if run_start <= o < rela_off)
    load = next((p for p in phdrs if p["p_type"] == R.PT_LOAD
                 and p["p_offset"] <= run_start and rela_end <= p["p_offset"] + p["p_filesz"]), None)
    if load is None:
        _fail(img, "cannot grow the version tables in place: they and .rela.dyn are not in one PT_LOAD")
    for o, i in in_run:
        if int(shdrs[i]["sh_type"]) not in R.MOVABLE_TYPES or (shdrs[i]["sh_flags"] & R.SHF_WRITE):
            _fail(img, f"cannot grow .dynstr/.gnu.version_r in place: section {names[i]} lies between them "
                       "and .rela.dyn and is not a dynamic-linking table that may move")
    for p in phdrs:  # a note/eh_frame segment inside the run would lose its bytes
        if p["p_type"] not in (R.PT_LOAD,) and p["p_filesz"] and \
                p["p_offset"] < rela_end and p["p_offset"] + p["p_filesz"] > run_start and p["p_type"] != 6:
            _fail(img, f"cannot rewrite the tables: segment type {int(p['p_type']):#x} overlaps them")
    vshift = int(load["p_vaddr"]) - int(load["p_offset"])
    # Addends go into target words; none may sit in the bytes rewritten below.
    tf = tgt_file[packable]
    if np.any((tf >= run_start) & (tf < rela_end)) or np.any((tf >= dyn_off) & (tf < dyn_off + dyn.nbytes)):
        _fail(img, "a RELATIVE relocation targets the dynamic-linking tables themselves; refusing to pack")
    blk = np.zeros(rela_end - run_start, np.uint8)
    moved = {}       # section index -> (new offset, new size)
    cur = run_start
    for o, i in in_run:
        content = grow.get(i)
        if content is None:
            content = _read(img, o, int(shdrs[i]["sh_size"])).tobytes()
        new = R.align_up(cur, int(shdrs[i]["sh_addralign"]))
        moved[i] = (new, len(content))
        blk[new - run_start:new - run_start + len(content)] = np.frombuffer(content, np.uint8)
        cur = new + len(content)
    new_rela_off = R.align_up(cur, 8)
    kept_bytes = kept.tobytes()
    relr_off = new_rela_off + len(kept_bytes)
    end = relr_off + relr_bytes

    # -- 4. dynamic array ------------------------------------------------------------
    shift = {i: (no - int(shdrs[i]["sh_offset"])) for i, (no, _) in moved.items()}
    shift[rela_i] = new_rela_off - rela_off
    addr_of_old = {int(shdrs[i]["sh_addr"]): i for i in shift}
    new_live = live.copy()
    for k in range(new_live.size):
        t = int(new_live["d_tag"][k])
        if t in R.DT_TABLE_PTRS and int(new_live["d_val"][k]) in addr_of_old:
            new_live["d_val"][k] = int(new_live["d_val"][k]) + shift[addr_of_old[int(new_live["d_val"][k])]]
    dt = new_live["d_tag"]
    new_live["d_val"][dt == R.DT_RELASZ] = len(kept_bytes)
    new_live["d_val"][dt == R.DT_RELACOUNT] = lead
    if dynstr_i in grow:
        new_live["d_val"][dt == R.DT_STRSZ] = len(grow[dynstr_i])
    if new_verneednum is not None:
        new_live["d_val"][dt == R.DT_VERNEEDNUM] = new_verneednum
    relr_addr = relr_off + vshift
    add = np.array([(R.DT_RELR, relr_addr), (R.DT_RELRSZ, relr_bytes), (R.DT_RELRENT, word)], R.DYN64)
    spare = dyn.size - n_used - 1
    dyn_i = next((i for i, s in enumerate(shdrs) if s["sh_type"] == R.SHT_DYNAMIC), None)
    new_dyn_off = None
    if spare >= 3:
        slots = "spare DT_NULL slots"
        new_dyn = np.concatenate([new_live, add, np.zeros(dyn.size - n_used - 3, R.DYN64)])
        dyn_patch = (dyn_off, new_dyn.tobytes())
    else:
        # lld: no spare slots. Rebuild the array in the freed space, read-only.
        if np.any(dt == R.DT_DEBUG):
            _fail(img, "no spare DT_NULL slot and DT_DEBUG present (an executable): ld.so writes DT_DEBUG, so the "
                       "dynamic array cannot move to read-only memory; relink with -z pack-relative-relocs")
        if lead == 0 and np.any(dt == R.DT_RELACOUNT):
            new_live = new_live[dt != R.DT_RELACOUNT]
        new_dyn = np.concatenate([new_live, add, np.zeros(1 + EXTRA_DYN_SLOTS, R.DYN64)])
        new_dyn_off = R.align_up(end, 16)
        end = new_dyn_off + new_dyn.nbytes
        slots = (f"no spare DT_NULL slot ({spare}): dynamic array moved to {new_dyn_off + vshift:#x} "
                 "(read-only PT_DYNAMIC, needs glibc >= 2.35)")
        dyn_patch = None
    if end > rela_end:
        _fail(img, f"not enough space freed in .rela.dyn ({rela_end - run_start} bytes available, "
                   f"{end - run_start} needed)")
    blk[new_rela_off - run_start:relr_off - run_start] = np.frombuffer(kept_bytes, np.uint8)
    blk[relr_off - run_start:relr_off - run_start + relr_bytes] = relr.view(np.uint8)
    if new_dyn_off is not None:
        blk[new_dyn_off - run_start:new_dyn_off - run_start + new_dyn.nbytes] = new_dyn.view(np.uint8)
        shift[dyn_i] = new_dyn_off - int(shdrs[dyn_i]["sh_offset"])
    # Address shifts equal offset shifts inside the run's PT_LOAD; .dynamic changes segment.
    ashift = dict(shift)
    if new_dyn_off is not None:
        ashift[dyn_i] = new_dyn_off + vshift - int(shdrs[dyn_i]["sh_addr"])

    # -- 5. symbols that belong to moved sections (section symbols, _DYNAMIC) ----------
    blocks = []
    moved_idx = np.array([i for i, s in shift.items() if s], dtype=np.int64)
    moved_shift = np.array([ashift[i] for i in moved_idx], dtype=np.int64)
    for si, s in enumerate(shdrs):
        if s["sh_type"] not in (R.SHT_DYNSYM, R.SHT_SYMTAB) or not moved_idx.size:
            continue
        syms = _read(img, int(s["sh_offset"]), int(s["sh_size"]) // 24 * 24, R.SYM64)
        hit = np.isin(syms["st_shndx"], moved_idx)
        if not hit.any():
            continue
        order = np.argsort(moved_idx)
        pos = order[np.searchsorted(moved_idx[order], syms["st_shndx"][hit])]
        syms["st_value"][hit] = (syms["st_value"][hit].astype(np.int64) + moved_shift[pos]).astype(np.uint64)
        if si in moved:  # .dynsym slid with the run: patch the copy inside the block
            no = moved[si][0] - run_start
            blk[no:no + syms.nbytes] = syms.view(np.uint8)
        else:
            blocks.append((int(s["sh_offset"]), syms.tobytes()))
    blocks.insert(0, (run_start, blk.tobytes()))
    if dyn_patch:
        blocks.append(dyn_patch)

    # -- 6. program and section headers ---------------------------------------------
    hdr = img.elf.header
    if new_dyn_off is not None:
        ph = phdrs.copy()
        k = int(np.nonzero(ph["p_type"] == R.PT_DYNAMIC)[0][0])
        ph["p_offset"][k] = new_dyn_off
        ph["p_vaddr"][k] = ph["p_paddr"][k] = new_dyn_off + vshift
        ph["p_filesz"][k] = ph["p_memsz"][k] = new_dyn.nbytes
        ph["p_flags"][k] = R.PF_R
        blocks.append((hdr["e_phoff"], ph.tobytes()))
    sh = shdrs.copy()
    for i, s in shift.items():
        sh["sh_offset"][i] = int(sh["sh_offset"][i]) + s  # s < 0 for a .dynamic moved down
        sh["sh_addr"][i] = int(sh["sh_addr"][i]) + ashift[i]
    for i, (_, n) in moved.items():
        sh["sh_size"][i] = n
    sh["sh_size"][rela_i] = len(kept_bytes)
    if new_verneednum is not None:
        sh["sh_info"][vn_i] = new_verneednum  # SHT_GNU_verneed: sh_info = number of entries
    if new_dyn_off is not None:
        sh["sh_size"][dyn_i] = new_dyn.nbytes
        sh["sh_flags"][dyn_i] &= ~np.uint64(R.SHF_WRITE)
    shstr_i = hdr["e_shstrndx"]
    shstr = _read(img, int(sh["sh_offset"][shstr_i]), int(sh["sh_size"][shstr_i])).tobytes()
    at = shstr.find(b".relr.dyn\0")
    if at < 0 or (at and shstr[at - 1] != 0):
        at = len(shstr)
        shstr += b".relr.dyn\0"
    relr_sh = np.zeros(1, R.SHDR64)
    relr_sh[0] = (at, R.SHT_RELR, R.SHF_ALLOC, relr_addr, relr_off, relr_bytes, 0, 0, word, word)
    sh = np.concatenate([sh, relr_sh])
    # The tail (names + headers) is rewritten after the last other byte of the file.
    ends = [int(p["p_offset"] + p["p_filesz"]) for p in phdrs] + [int(hdr["e_phoff"] + phdrs.nbytes)]
    ends += [int(s["sh_offset"] + s["sh_size"]) for i, s in enumerate(shdrs)
             if i != shstr_i and s["sh_type"] != R.SHT_NOBITS]
    content_end = max(ends)
    old_tail = min(int(shdrs[shstr_i]["sh_offset"]), int(hdr["e_shoff"]))
    tail_at = old_tail if old_tail >= content_end else img.size
    sh["sh_offset"][shstr_i] = tail_at
    sh["sh_size"][shstr_i] = len(shstr)
    shoff = R.align_up(tail_at + len(shstr), 8)
    tail = shstr + bytes(shoff - tail_at - len(shstr)) + sh.tobytes()
    ehdr = bytearray(img.mm[:64])
    ehdr[R.EHDR_SHOFF:R.EHDR_SHOFF + 8] = shoff.to_bytes(8, "little")
    ehdr[R.EHDR_SHNUM:R.EHDR_SHNUM + 2] = len(sh).to_bytes(2, "little")
    blocks.append((0, bytes(ehdr)))

    stats = dict(
        relocations=int(rel.size), relative=int(is_rel.sum()), packed=n_pack,
        kept=int(kept.size), kept_relative=int((kept_types == arch.relative).sum()),
        rela_dyn_bytes_before=int(rela_size), rela_dyn_bytes_after=len(kept_bytes),
        relr_bytes=int(relr_bytes), relr_words=int(relr.size),
        relr_addr=int(relr_addr), rela_addr=int(new_rela_off + vshift),
        relacount=lead, dynamic=slots, version_need=verneed_note,
        moved_sections={names[i]: int(s) for i, s in shift.items() if s and i != rela_i},
        freed_bytes=int(rela_end - end), encode_s=round(t_enc - t0, 3),
    )
    return Plan(str(img.path), img.size, tgt_file[packable], rel["r_addend"][packable].view(np.uint64),
                blocks, tail_at, tail, stats)


def write_plan(plan: Plan, src, dst) -> None:
    """Copy ``src`` once to ``dst`` (a fresh temporary file) and patch it in place."""
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.truncate(plan.truncate_at)
        f.seek(plan.truncate_at)
        f.write(plan.tail)
        f.flush()
        mm = mmap.mmap(f.fileno(), 0)
        try:
            buf = np.frombuffer(mm, np.uint8)
            offs = plan.addend_offsets
            aligned = offs % 8 == 0
            w = buf[: buf.size // 8 * 8].view("<u8")
            w[offs[aligned] // 8] = plan.addend_values[aligned]
            for o, v in zip(offs[~aligned].tolist(), plan.addend_values[~aligned].tolist()):
                buf[o:o + 8] = np.frombuffer(int(v).to_bytes(8, "little"), np.uint8)
            for o, data in plan.blocks:
                buf[o:o + len(data)] = np.frombuffer(data, np.uint8)
            del w, buf
            mm.flush()
        finally:
            mm.close()
        os.fsync(f.fileno())


def pack(src, out, verify=None) -> dict:
    """Pack ``src`` into ``out`` atomically; returns the plan's statistics plus timings.

    ``verify(src, tmp)`` (optional) runs on the finished temporary file before it is
    renamed to ``out``; if it raises, ``out`` is left as it was. Raises AlreadyPacked
    when there is nothing to do (the caller decides what that means).
    """
    t0 = time.perf_counter()
    img = elfcore.ElfImage(src)
    try:
        plan = plan_pack(img)
    except (ElflayoutError, AlreadyPacked):
        raise
    except Exception as e:  # damaged tables pyelftools or numpy trip over: still one line, exit 2
        raise ElflayoutError(f"{src}: malformed or inconsistent ELF file ({type(e).__name__}: {e})") from None
    finally:
        img.close()
    t1 = time.perf_counter()
    st = dict(plan.stats)
    with atomic_output(out, mode=os.stat(src).st_mode & 0o777) as tmp:
        write_plan(plan, src, tmp)
        t2 = time.perf_counter()
        if verify is not None:
            st["check"] = verify(src, tmp)
    st.update(plan_s=round(t1 - t0, 3), write_s=round(t2 - t1, 3), pack_s=round(t2 - t0, 3),
              total_s=round(time.perf_counter() - t0, 3))
    return st
