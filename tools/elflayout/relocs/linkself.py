"""The link-time self-applying form: for libraries whose linked file has no room for the
post-link one (lld outputs: no free bytes after the code, no spare dynamic slot).

Prior art: Mozilla's relrhack (Mike Hommey, Firefox ``build/unix/elfhack/relrhack.cpp``
and ``inject.c``): link with ``-z pack-relative-relocs`` and an injected applier, then
hide DT_RELR/DT_RELRSZ/DT_RELRENT under tags glibc ignores (the tag | 0x8000000) and drop
the ``GLIBC_ABI_DT_RELR`` version need, so the library loads on glibc < 2.36 and applies
its own packed relocations.

Here the applier is the post-link form's routine (``selfapply``), with its semantics:
it runs as DT_INIT before the library's initializers, chains to the old DT_INIT, makes
RELRO writable and read-only again, and what ld.so must relocate itself (the TLS image,
exported data that copy relocations may copy: ``pack_input.read_before_init``) goes back to
RELA; IRELATIVE users are refused. The link gets an injected object (``INJECT``) with
two sections the linker keeps (SHF_GNU_RETAIN): ``.elflayout.self``, room for the
routine, and ``.elflayout.rela``, room for RELA grown by those relocations (sized by a
first link: ``NeedRoom``). A weak hidden ``_init`` makes sure DT_INIT exists (crti.o's
wins when linked).

``convert`` rewrites the linked file in a copy: RELA moved into ``.elflayout.rela`` with
the kept RELATIVE entries first (old ``.rela.dyn`` zeroed, SHT_PROGBITS), the rest of the
DT_RELR addresses re-encoded in place in ``.relr.dyn`` (SHT_PROGBITS, as relrhack does),
the routine written into ``.elflayout.self`` and made DT_INIT, the tags hidden, the
version need unlinked from its chain. No address moves.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elflayout import elfcore
from elflayout import layouts as L
from elflayout.errors import ElflayoutError, Finding
from elflayout.fileio import atomic_output
from elflayout.relocs import selfapply, simload
from elflayout.relocs.glibc import GLIBC_ABI_DT_RELR, GLIBC_ABI_DT_RELR_HASH, glibc_requires_relr_need, glibc_version
from elflayout.relocs.pack_input import _read, overlapped, read_before_init, read_input, write_widths
from elflayout.relocs.realload import dlopen_check
from elflayout.relocs.simload import Loaded, verneed_names
from elflayout.toolchain import assembler, target_machine

DT_RELRHACK_BIT = 0x8000000  # relrhack.h: the hidden tags are DT_RELR* | this bit
TEXT_SECTION = ".elflayout.self"
RELA_SECTION = ".elflayout.rela"
INJECT = """\t.section {text},"axR",@progbits
\t.balign 16
\t.fill {size},1,{fill}
\t.weak _init
\t.hidden _init
\t.type _init,@function
_init:
\tret
\t.section {rela},"aR",@progbits
\t.balign 8
\t.fill {rela_bytes},1,0
\t.section .note.GNU-stack,"",@progbits
"""
# What fills the routine's room until convert writes it: a trap (x86-64 int3; AArch64
# zero words are udf #0).
FILL = {"EM_X86_64": 0xCC, "EM_AARCH64": 0}
PACK_FLAG = ("-z", "pack-relative-relocs")


class NeedRoom(Exception):
    """``.elflayout.rela`` is too small: relink with ``rela_bytes`` reserved."""

    def __init__(self, rela_bytes: int):
        super().__init__(f"{rela_bytes} bytes of RELA room needed")
        self.rela_bytes = rela_bytes


def inject_object(dest: Path, rela_bytes: int, machine: str = "EM_X86_64") -> Path:
    """Assemble the injected object of ``machine`` (the link's target) into ``dest`` (GNU
    as of that machine: the linker's toolchain has it)."""
    if machine not in FILL:
        raise ElflayoutError(f"--pack self: no self-applying routine for {machine} (x86-64 and AArch64 only)")
    src, obj = dest / "elflayout-self.s", dest / "elflayout-self.o"
    src.write_text(INJECT.format(text=TEXT_SECTION, rela=RELA_SECTION, size=selfapply.for_machine(machine).size,
                                 fill=FILL[machine], rela_bytes=max(8, L.align_up(rela_bytes, 8))))
    asm = assembler(machine)
    try:
        r = subprocess.run([*asm, "-o", str(obj), str(src)], capture_output=True, text=True)
    except FileNotFoundError:
        raise ElflayoutError(f"{asm[0]}: command not found (GNU binutils for {machine} assembles the injected "
                             "applier: apt-get install " + ("binutils" if asm[0] == "as" else
                                                            f"binutils-{asm[0][:-3]}") + ")") from None
    if r.returncode:
        raise ElflayoutError(f"{asm[0]}: cannot assemble the injected applier: {r.stderr.strip()[-200:]}")
    return obj


def _section(inp, name: str) -> int:
    i = inp.sec.get(name)
    if i is None:
        raise ElflayoutError(f"{inp.img.path}: no {name} section: the injected object was not linked in "
                             "(or the section was renamed or discarded by a linker script)")
    return i


def _drop_relr_need(inp) -> tuple[int, bytes] | None:
    """Unlink GLIBC_ABI_DT_RELR from its Verneed's chain of Vernaux (vn_cnt - 1); returns
    the patched .gnu.version_r (offset, bytes), or None without one. Its version index
    names no symbol, so no .gnu.version entry changes."""
    vn = inp.tag(L.DT_VERNEED)
    if vn is None:
        return None
    img = inp.img
    off = img.vaddr_to_offset(vn)
    strtab_off = img.vaddr_to_offset(inp.tag(L.DT_STRTAB))
    if off < 0 or strtab_off < 0:
        raise ElflayoutError(f"{img.path}: DT_VERNEED or DT_STRTAB is not in the file")
    strtab = _read(img, strtab_off, inp.tag(L.DT_STRSZ) or 0).tobytes()
    size = max((s.size for s in img.sections if s.addr == vn), default=0)
    data = bytearray(_read(img, off, size).tobytes())
    at = 0
    for _ in range(inp.tag(L.DT_VERNEEDNUM) or 0):
        _, cnt, _, aux, nxt = L.VERNEED.unpack_from(data, at)
        prev, a = None, at + aux
        for _ in range(cnt):
            _, _, _, name, anext = L.VERNAUX.unpack_from(data, a)
            if L.cstr(strtab, name) == GLIBC_ABI_DT_RELR:
                if prev is None:  # first of the chain: the Verneed skips it
                    L.VERNEED.pack_into(data, at, *L.VERNEED.unpack_from(data, at)[:3],
                                        aux + anext if anext else 0, nxt)
                else:
                    h, f, o, n, pn = L.VERNAUX.unpack_from(data, prev)
                    L.VERNAUX.pack_into(data, prev, h, f, o, n, pn + anext if anext else 0)
                v = L.VERNEED.unpack_from(data, at)
                L.VERNEED.pack_into(data, at, v[0], v[1] - 1, *v[2:])
                return off, bytes(data)
            prev, a = a, a + anext
        if not nxt:
            break
        at += nxt
    return None


def convert(src, dst) -> dict:
    """Write to ``dst`` the self-applying form of ``src``, a library linked with
    ``-z pack-relative-relocs`` and the injected object. Raises NeedRoom when RELA must
    grow more than ``.elflayout.rela`` allows, ElflayoutError on input it cannot convert."""
    t0 = time.perf_counter()
    with elfcore.ElfImage(src) as img:
        inp = read_input(img, "self")
        blocks, stats = _plan(inp)
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        for off, data in blocks:
            f.seek(off)
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    stats["convert_s"] = round(time.perf_counter() - t0, 3)
    return stats


def _contiguous(inp, chain: list[int]) -> bool:
    """lld's order: .rela.dyn, .relr.dyn, .rela.plt, then .elflayout.rela (created first,
    before .rodata), back to back in one PT_LOAD (alignment padding only)."""
    for a, b in zip(chain, chain[1:]):
        gap = inp.sh(b, "sh_addr") - inp.sh(a, "sh_addr") - inp.sh(a, "sh_size")
        if not 0 <= gap < 16 or inp.sh(b, "sh_offset") - inp.sh(a, "sh_offset") != \
                inp.sh(b, "sh_addr") - inp.sh(a, "sh_addr"):
            return False
    return True


def _rewrite_run(inp, chain, table, enc, blocks, sh, live, dt) -> int:
    """Rewrite the run .rela.dyn .. .elflayout.rela as [RELA grown][JMPREL][table][zeros]:
    no hole, no second copy, tables in ld.so's reading order. Returns the table's address."""
    rela_i, relr_i, rrela_i = chain[0], chain[1], chain[-1]
    plt_i = chain[2] if len(chain) == 4 else None
    off0, addr0 = inp.sh(rela_i, "sh_offset"), inp.sh(rela_i, "sh_addr")
    end = inp.sh(rrela_i, "sh_offset") + inp.sh(rrela_i, "sh_size")
    plt = inp.section_bytes(plt_i) if plt_i is not None else b""
    parts = [table.tobytes(), plt, enc.tobytes()]
    used = sum(map(len, parts))
    if off0 + used > end:
        raise NeedRoom(used - (inp.sh(rrela_i, "sh_offset") - off0))
    blocks.append((off0, b"".join(parts) + bytes(end - off0 - used)))
    sh["sh_size"][rela_i] = table.nbytes
    at = off0 + table.nbytes
    if plt_i is not None:
        sh["sh_offset"][plt_i], sh["sh_addr"][plt_i] = at, addr0 + at - off0
        live["d_val"][dt == L.DT_JMPREL] = addr0 + at - off0
        at += len(plt)
    sh["sh_offset"][relr_i], sh["sh_addr"][relr_i] = at, addr0 + at - off0
    relr_new = addr0 + at - off0
    at += enc.nbytes
    sh["sh_offset"][rrela_i], sh["sh_addr"][rrela_i], sh["sh_size"][rrela_i] = at, addr0 + at - off0, end - at
    return relr_new


@dataclass
class _Edit:
    """The copy being planned: patches, section headers, the dynamic array's live part."""
    blocks: list
    sh: np.ndarray
    dyn: np.ndarray
    live: np.ndarray
    dt: np.ndarray           # the live tags as read (before any is hidden)


def _relr_input(inp) -> tuple[int, np.ndarray]:
    """The linker's DT_RELR table: its section index and the addresses it encodes."""
    img, arch, tag = inp.img, inp.arch, inp.tag
    if tag(L.DT_TEXTREL) is not None or (tag(L.DT_FLAGS) or 0) & L.DF_TEXTREL:
        raise ElflayoutError(f"{img.path}: has text relocations (DT_TEXTREL)")
    relr_addr, relr_sz = tag(L.DT_RELR), tag(L.DT_RELRSZ) or 0
    if relr_addr is None:
        raise ElflayoutError(f"{img.path}: no DT_RELR: the linker did not pack (does it support "
                             "-z pack-relative-relocs? lld >= 15, GNU ld >= 2.38, mold)")
    if (tag(L.DT_RELRENT) or arch.word) != arch.word:
        raise ElflayoutError(f"{img.path}: DT_RELRENT {tag(L.DT_RELRENT)} is not {arch.word}")
    relr_i = next((i for i, s in enumerate(inp.shdrs) if int(s["sh_addr"]) == relr_addr
                   and int(s["sh_type"]) == L.SHT_RELR), None)
    if relr_i is None or inp.sh(relr_i, "sh_size") != relr_sz:
        raise ElflayoutError(f"{img.path}: no SHT_RELR section matches DT_RELR/DT_RELRSZ")
    return relr_i, elfcore.relr_decode(_read(img, inp.sh(relr_i, "sh_offset"), relr_sz, np.uint64), arch.word)


def _kept_for_ld_so(inp, addrs: np.ndarray, tables: dict, rela: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which DT_RELR addresses must stay with ld.so (``read_before_init``) and the file
    offsets of those; refuses overlaps with other relocations."""
    img, arch = inp.img, inp.arch
    all_types = np.concatenate([img.reloc_types(t) for t in tables.values()] or [np.zeros(0, np.uint64)])
    keep = read_before_init(inp, addrs, all_types)  # refuses IRELATIVE users
    kept = addrs[keep]
    tgt = img.vaddr_to_offset(kept) if kept.size else np.zeros(0, np.int64)
    if np.any(tgt < 0):
        raise ElflayoutError(f"{img.path}: a DT_RELR address is not file-backed")
    # A kept word another relocation also writes would change places in ld.so's order.
    others = np.concatenate([t["r_offset"] for t in tables.values()] or [np.zeros(0, np.uint64)])
    starts = np.concatenate([kept, others])
    wid = np.concatenate([np.full(kept.size, arch.word), write_widths(arch, all_types)])
    mine = np.zeros(starts.size, bool)
    mine[:kept.size] = True
    if overlapped(starts, wid, mine).any():
        raise ElflayoutError(f"{img.path}: a RELR word is also written by another relocation")
    return keep, tgt


def _grow_rela(inp, ed: _Edit, kept, tgt, rela, rela_i, relr_i, rrela_i, enc) -> int | None:
    """Step 1: the kept RELATIVE relocations go first in RELA (addend = the word lld
    stored in place). Returns the table's new address when the run was rewritten."""
    img, arch, tag = inp.img, inp.arch, inp.tag
    if tag(L.DT_RELA) is None or not rela.size:
        raise ElflayoutError(f"{img.path}: {kept.size} relocations must stay with ld.so but the library has no "
                             "DT_RELA to hold them (no spare dynamic slot)")
    new = np.zeros(kept.size, L.RELA64)
    new["r_offset"], new["r_info"] = kept, L.r_info(0, arch.relative)
    if np.any(tgt % arch.word):
        raise ElflayoutError(f"{img.path}: a DT_RELR word is not aligned in the file")
    new["r_addend"] = np.frombuffer(img.mm, np.int64, count=img.size // 8)[tgt // 8]
    table = np.concatenate([new, rela])
    live, dt, sh = ed.live, ed.dt, ed.sh
    live["d_val"][dt == L.DT_RELASZ] = table.nbytes
    live["d_val"][dt == L.DT_RELACOUNT] = live["d_val"][dt == L.DT_RELACOUNT] + kept.size
    plt_i = next((i for i, x in enumerate(inp.shdrs) if int(x["sh_type"]) == L.SHT_RELA
                  and tag(L.DT_JMPREL) is not None and int(x["sh_addr"]) == tag(L.DT_JMPREL)), None)
    chain = [rela_i, relr_i] + ([plt_i] if plt_i is not None else []) + [rrela_i]
    if _contiguous(inp, chain):
        return _rewrite_run(inp, chain, table, enc, ed.blocks, sh, live, dt)
    if table.nbytes > inp.sh(rrela_i, "sh_size"):
        raise NeedRoom(table.nbytes)
    ed.blocks.append((inp.sh(rrela_i, "sh_offset"), table.tobytes()))
    ed.blocks.append((inp.sh(rela_i, "sh_offset"), bytes(rela.nbytes)))
    sh["sh_type"][rela_i] = L.SHT_PROGBITS  # stale: no tool should read it as RELA
    dsym = next((i for i, x in enumerate(inp.shdrs) if int(x["sh_type"]) == L.SHT_DYNSYM), 0)
    sh["sh_type"][rrela_i], sh["sh_size"][rrela_i] = L.SHT_RELA, table.nbytes
    sh["sh_entsize"][rrela_i], sh["sh_link"][rrela_i] = L.RELA64.itemsize, dsym
    live["d_val"][dt == L.DT_RELA] = inp.sh(rrela_i, "sh_addr")
    return None


def _routine(inp, ed: _Edit, text_i: int, relr_new: int, enc: np.ndarray) -> tuple[int, int, tuple]:
    """Step 3: the routine, as DT_INIT, chaining to the old one; returns (entry, old
    DT_INIT, RELRO pages)."""
    img = inp.img
    ap = selfapply.for_machine(img.machine)  # pack_input refuses machines without one
    if inp.sh(text_i, "sh_size") < ap.size or not inp.sh(text_i, "sh_flags") & L.SHF_EXECINSTR:
        raise ElflayoutError(f"{img.path}: {TEXT_SECTION} is not {ap.size} executable bytes")
    old_init = inp.tag(L.DT_INIT)
    if old_init is None:
        raise ElflayoutError(f"{img.path}: no DT_INIT (the injected weak _init was not linked in)")
    relro = ap.relro(inp.phdrs, elfcore.PAGE)
    entry = inp.sh(text_i, "sh_addr") + selfapply.ENTRY
    ed.blocks.append((inp.sh(text_i, "sh_offset"),
                      ap.blob(relr_new, relr_new + enc.nbytes, relro[0], relro[1], old_init, entry)))
    ed.live["d_val"][ed.dt == L.DT_INIT] = entry
    return entry, old_init, relro


def _plan(inp) -> tuple[list, dict]:
    img, arch, tag = inp.img, inp.arch, inp.tag
    relr_i, addrs = _relr_input(inp)
    relr_addr, relr_sz, relr_off = inp.sh(relr_i, "sh_addr"), inp.sh(relr_i, "sh_size"), inp.sh(relr_i, "sh_offset")
    tables = img.reloc_tables()
    rela_i = inp.sec.get(".rela.dyn")
    rela = tables.get(".rela.dyn", np.zeros(0, L.RELA64))
    if rela.size and (tag(L.DT_RELA) != inp.sh(rela_i, "sh_addr") or tag(L.DT_RELASZ) != rela.nbytes):
        raise ElflayoutError(f"{img.path}: DT_RELA/DT_RELASZ do not describe .rela.dyn")
    keep, tgt = _kept_for_ld_so(inp, addrs, tables, rela)
    kept = addrs[keep]
    text_i, rrela_i = _section(inp, TEXT_SECTION), _section(inp, RELA_SECTION)
    dyn = inp.dyn.array.copy()
    live = dyn[:inp.dyn.count]
    ed = _Edit([], inp.shdrs.copy(), dyn, live, live["d_tag"].copy())
    enc = elfcore.relr_encode(addrs[~keep], arch.word)
    relr_new = relr_addr  # where the table ends up
    if kept.size:  # 1. RELA grown by the kept relocations
        moved = _grow_rela(inp, ed, kept, tgt, rela, rela_i, relr_i, rrela_i, enc)
        if moved is not None:
            relr_new = moved
    if relr_new == relr_addr:
        # 2. The rest of RELR, re-encoded in place (a subset: never longer in practice; checked).
        if enc.nbytes > relr_sz:
            raise ElflayoutError(f"{img.path}: the re-encoded table ({enc.nbytes} bytes) outgrows .relr.dyn "
                                 f"({relr_sz})")
        ed.blocks.append((relr_off, enc.tobytes() + bytes(relr_sz - enc.nbytes)))
    ed.sh["sh_type"][relr_i], ed.sh["sh_size"][relr_i] = L.SHT_PROGBITS, enc.nbytes
    entry, old_init, relro = _routine(inp, ed, text_i, relr_new, enc)  # 3.
    # 4. Tags glibc ignores (relrhack's), and no GLIBC_ABI_DT_RELR need.
    dt = ed.dt
    for t in (L.DT_RELR, L.DT_RELRSZ, L.DT_RELRENT):
        live["d_tag"][dt == t] = t | DT_RELRHACK_BIT
    live["d_val"][dt == L.DT_RELRSZ] = enc.nbytes
    live["d_val"][dt == L.DT_RELR] = relr_new
    dyn[:inp.dyn.count] = live
    ed.blocks.append((inp.dyn.offset, dyn.tobytes()))
    vn = _drop_relr_need(inp)
    if vn is not None:
        ed.blocks.append(vn)
    ed.blocks.append((int(img.elf.header["e_shoff"]), ed.sh.tobytes()))
    stats = dict(form="self", placement="link-time", relr_relocations=int(addrs.size),
                 self_applied=int(addrs.size - kept.size), kept_for_ld_so=int(kept.size),
                 table_bytes=int(enc.nbytes), relr_bytes=int(relr_sz),
                 rela_bytes_before=int(rela.nbytes), rela_bytes_after=int(rela.nbytes + L.RELA64.itemsize * kept.size),
                 rela_addr=int(live["d_val"][dt == L.DT_RELA][0]) if np.any(dt == L.DT_RELA) else None,
                 tables=("rewritten in place, .rela.dyn to .elflayout.rela" if relr_new != relr_addr else
                         "RELA moved to .elflayout.rela" if kept.size else "unchanged"),
                 version_need="GLIBC_ABI_DT_RELR dropped" if vn is not None else "none",
                 applier=dict(entry=int(entry), bytes=selfapply.for_machine(img.machine).size, relro=[int(x) for x in relro],
                              old_init=int(old_init)))
    return ed.blocks, stats


def write(src, out, verify=None) -> dict:
    """``convert`` into a temporary file beside ``out``, ``verify(src, tmp)`` it, rename."""
    with atomic_output(out, mode=os.stat(src).st_mode & 0o777) as tmp:
        st = convert(src, tmp)
        if verify is not None:
            st["check"] = verify(src, tmp)
    return st


def check(ref, out, root=None, status=None) -> dict:
    """``--check`` of the link-time form against the linker's own DT_RELR output ``ref``:
    simulated loader at two bases and a real load on this machine (glibc >= 2.36 applies
    ``ref``'s DT_RELR), as ``pack-relocs --check`` does; with ``root``, the output must
    also load inside ``chroot root`` (where ``ref`` cannot: it needs GLIBC_ABI_DT_RELR)."""
    from elflayout import emulator

    em = emulator.for_library(ref)  # an arm64 library loads under qemu, on its root's glibc
    have = glibc_version() if em is None else glibc_version(em.root, emulator.TRIPLETS[em.machine])
    why_ref = dlopen_check(ref) if have and have >= (2, 36) else \
        f"glibc {'.'.join(map(str, have)) if have else '?'} ignores DT_RELR"
    res = simload.check(ref, out, real_load=why_ref is None, status=status)
    if why_ref is not None:
        res["real_load"] = f"skipped: the linker's DT_RELR output does not load here ({why_ref.replace(f'{ref}: ', '')})"
        why = dlopen_check(out) if root is None else None
        if why is not None:
            raise Finding(f"check failed: the output does not load: {why} (output not written)")
    if root is not None:
        why = dlopen_check(out, root=root)
        if why is not None:
            raise Finding(f"check failed: the output does not load in {root}: {why} (output not written)")
        res["root_dlopen"] = "ok"
    return res


def pack_args(driver: bool) -> list[str]:
    return ["-Wl," + ",".join(PACK_FLAG)] if driver else list(PACK_FLAG)


def with_output(cmd: list[str], out: str) -> list[str]:
    """``cmd`` writing ``out`` instead of its -o argument."""
    cmd = list(cmd)
    for i, a in enumerate(cmd[1:], 1):
        if a == "-o" and i + 1 < len(cmd):
            cmd[i + 1] = out
            return cmd
        if a.startswith("--output="):
            cmd[i] = "--output=" + out
            return cmd
        if a.startswith("-o") and len(a) > 2:
            cmd[i] = "-o" + out
            return cmd
    raise ElflayoutError(f"{cmd[0]}: the link command has no -o OUTPUT")


def relr_need_missing(path) -> bool:
    """A DT_RELR file that glibc >= 2.36 refuses: no GLIBC_ABI_DT_RELR version need although
    it needs libc.so.* and has version needs (mold 1.10 writes such files)."""
    with Loaded(path) as lo:
        if lo.tag(L.DT_RELR) is None:
            return False
        hashes = {x[1] for _, xs in verneed_names(lo) for x in xs}
        return glibc_requires_relr_need(lo.needed(), lo.tag(L.DT_VERNEED) is not None) and \
            GLIBC_ABI_DT_RELR_HASH not in hashes


def not_packed(path) -> int:
    """The RELATIVE relocations a link left in RELA although it was asked to pack them
    (GNU ld 2.40 ignores ``-z pack-relative-relocs`` on AArch64, with a warning); 0 when it
    packed them (DT_RELR) or had none."""
    with Loaded(path) as lo:
        if lo.tag(L.DT_RELR) is not None:
            return 0
        return int(lo.tag(L.DT_RELACOUNT) or 0) or sum(
            int(np.count_nonzero(lo.img.reloc_types(t) == lo.arch.relative)) for t in lo.img.reloc_tables().values())


def link_relr(cmd: list[str], driver: bool, output: str, run, say=None) -> int:
    """Link with ``-z pack-relative-relocs`` into a temporary file; refuse a result glibc
    would refuse (ElflayoutError), else rename it to ``output``. A linker that ignored the
    option gets the output packed post-link, as ``pack-relocs --format relr`` does."""
    import tempfile

    from elflayout.relocs.pack import AlreadyPacked, pack

    with tempfile.TemporaryDirectory(prefix="elflayout-relr-") as td:
        tmp = Path(td) / Path(output).name
        rc = run(with_output(cmd, str(tmp)) + pack_args(driver))
        if rc:
            return rc
        if relr_need_missing(tmp):
            raise ElflayoutError(f"{output}: the linker wrote DT_RELR without a GLIBC_ABI_DT_RELR version need, "
                                 "which glibc >= 2.36 refuses (mold 1.10 does): use --pack self, or "
                                 "pack-relocs on an unpacked link")
        left, st = not_packed(tmp), None
        if left:
            try:
                st = pack(tmp, output, verify=lambda a, b: simload.check(a, b), replace=True, form="relr")
            except AlreadyPacked:  # none RELR can take: the output is the link's
                pass
            except (ElflayoutError, Finding) as e:
                raise ElflayoutError(f"{output}: the linker ignored -z pack-relative-relocs and post-link packing "
                                     f"failed: {str(e).replace(str(tmp), 'the linked file')}") from None
        if st is not None:
            if say:
                say(f"the linker ignored -z pack-relative-relocs ({left:,} RELATIVE relocations left in RELA): "
                    f"packed post-link (pack-relocs --check --format relr): {st['packed']:,} relocations in "
                    f"{st['relr_bytes']:,} bytes of DT_RELR, equivalence proved")
            return 0
        with atomic_output(output, mode=os.stat(tmp).st_mode & 0o777) as out:
            shutil.copyfile(tmp, out)
    return 0


def link(cmd: list[str], driver: bool, output: str, run, *, check_output: bool = False, root=None,
         say=None, status=None):
    """Run the link command ``cmd`` (``run(argv) -> exit status``) with the injected object
    and ``-z pack-relative-relocs`` into a temporary file, convert it, write ``output``.
    Links again (at most twice) when the kept relocations need RELA room. Returns the linker's non-zero
    exit status, or the conversion's statistics."""
    import tempfile

    machine = target_machine(cmd)
    with tempfile.TemporaryDirectory(prefix="elflayout-self-") as td:
        ref = Path(td) / Path(output).name  # the reference loads under the output's name
        verify = (lambda a, b: check(a, b, root, status)) if check_output else None
        room, links = 0, 0
        while True:
            obj = inject_object(Path(td), room, machine)
            # First on the command line: lld then creates .elflayout.rela before .rodata, so it
            # lands right after .rela.plt, next to the other tables ld.so reads.
            c = with_output(cmd, str(ref))
            rc = run(c[:1] + [str(obj)] + c[1:] + pack_args(driver))
            links += 1
            if rc:
                return rc
            left = not_packed(ref)
            if left:
                raise ElflayoutError(f"{output}: no DT_RELR: the linker ignored -z pack-relative-relocs ({left:,} "
                                     "RELATIVE relocations left in RELA; lld < 15 does, GNU ld 2.40 on AArch64): "
                                     "--pack self needs a linker that packs (lld >= 15, mold), or pack-relocs "
                                     "--format self after the link")
            try:
                st = write(ref, output, verify)
            except ElflayoutError as e:  # name the user's output, not the temporary link
                raise ElflayoutError(str(e).replace(str(ref), str(output))) from None
            except NeedRoom as e:
                # The set of relocations does not depend on the layout, the table's encoding
                # barely (where a run crosses into a section that moved): a little slack.
                if links > 2:
                    raise ElflayoutError(f"{output}: RELA room {room} still short of {e.rela_bytes} bytes "
                                         "after relinking") from None
                room = max(room, e.rela_bytes) + 64 + e.rela_bytes // 64
                if say:
                    say(f"{room:,} bytes of RELA needed for relocations ld.so must apply: linking again")
                continue
            st["links"] = links
            return st
