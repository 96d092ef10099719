"""Pack the RELATIVE relocations of an already-linked shared library into DT_RELR.

Goal: the same library, loaded by stock glibc >= 2.36, with a relocation table the
loader streams in a fraction of the pages. Nothing the program sees moves.

Definitions
  packable   a RELA relocation of type R_*_RELATIVE whose target is word-aligned, lies in
             the file-backed part of a PT_LOAD (so its addend can be stored in the file)
             and whose 8 bytes no other relocation writes, not even partly (an unaligned
             neighbour overlapping it must keep its place in ld.so's order);
  kept       every other relocation of .rela.dyn, in its original order;
  run        the dynamic-linking tables from the first table that must grow (.dynstr,
             .gnu.version_r) up to .rela.dyn; only these slide, by a few bytes.

Algorithm (one copy of the file, patched in place, written atomically; each step is a
function: steps 1-3 in pack_input.py, 4-7 in pack_plan.py, the patches written by
pack_write.py, step 8 in pack_cut.py)
  1. Validate (``validate``): ET_DYN, supported machine, no TEXTREL, .rela.dyn agrees
     with DT_RELA*, DT_RELACOUNT no larger than the leading run of RELATIVE entries
     (glibc applies that many entries as RELATIVE whatever their type). The dynamic
     array is read through PT_DYNAMIC (elflayout.dynamic), as ld.so reads it.
  2. Select and encode (``_select``): the packable relocations, their addends (stored
     in the target words by ``write_plan``: RELR means ``*where += base``) and their
     RELR encoding (elfcore.relr_encode: lld's greedy encoding).
  3. Version need (``_version_need``): add ``GLIBC_ABI_DT_RELR`` under libc.so.6 where
     glibc >= 2.36 requires it (``glibc_requires_relr_need``: version needs and a
     DT_NEEDED libc.so.*) by appending the name to .dynstr and a Vernaux to
     .gnu.version_r. A .gnu.version naming an index beyond the versions the library
     defines or needs is refused (``_check_versions``).
  4. Layout (``_layout``): slide the run forward into the space freed at the start of
     .rela.dyn (tables are found only through DT_* tags and section headers), then
     write the kept relocations and the RELR table into the old .rela.dyn space; zero
     the rest.
  5. Dynamic array (``_dynamic``): moved table addresses, DT_RELASZ shrunk,
     DT_RELACOUNT set to the leading RELATIVE count of the kept table, DT_RELR/
     DT_RELRSZ/DT_RELRENT in spare DT_NULL slots (GNU ld and gold leave some). Without
     spare slots (lld) the array is rebuilt, larger, in the freed space and PT_DYNAMIC
     points at it read-only (glibc >= 2.35 supports a read-only PT_DYNAMIC, BZ #28340);
     the old array stays where it was, unused.
  6. Symbols (``_symbols``): section symbols and _DYNAMIC of moved tables follow them.
  7. Headers (``_headers``): PT_DYNAMIC if the array moved; section headers for the
     shrunk .rela.dyn and the moved tables, and a new .relr.dyn (SHT_RELR) appended at
     the end so no section index changes.
  8. Cut (``cut_freed_pages``, on the written copy): the whole freed pages
     leave the file, the PT_LOAD holding them split in two; addresses do not change.

Bad input raises ``ElflayoutError`` (exit 2, one line) from the checks of steps 1-4;
anything else escaping from here is a bug, not a verdict on the input.
"""

from __future__ import annotations

import os
import time

from elflayout import elfcore
from elflayout.fileio import atomic_output
from elflayout.relocs.pack_cut import MIN_CUT_PAGES, READAHEAD_UNIT, cut_freed_pages
from elflayout.relocs.pack_input import FORMS, AlreadyPacked, validate
from elflayout.relocs.pack_plan import Plan, plan_pack
from elflayout.relocs.pack_write import write_plan

__all__ = ["FORMS", "MIN_CUT_PAGES", "READAHEAD_UNIT", "AlreadyPacked", "Plan", "cut_freed_pages", "pack", "plan_pack", "validate",
           "write_plan"]


def pack(src, out, verify=None, *, replace: bool = False, form: str = "relr", cut: bool = True,
         cut_unit: int = 0) -> dict:
    """Pack ``src`` into ``out`` atomically; returns the plan's statistics plus timings.

    ``verify(src, tmp)`` (optional) runs on the finished temporary file before it is
    renamed to ``out``; if it raises, ``out`` is left as it was. Without ``replace`` an
    existing ``out`` is never overwritten, even one created meanwhile by another run.
    Raises AlreadyPacked when there is nothing to do (the caller decides what that means).
    ``cut_unit``: cut the freed pages only in whole multiples of it (``cut_freed_pages``).
    """
    t0 = time.perf_counter()
    with elfcore.ElfImage(src) as img:
        plan = plan_pack(img, form, cut)
    t1 = time.perf_counter()
    st = dict(plan.stats)
    with atomic_output(out, mode=os.stat(src).st_mode & 0o777, replace=replace) as tmp:
        write_plan(plan, src, tmp, sync=plan.free_range is None)
        if plan.free_range is not None:
            st["cut"] = cut_freed_pages(tmp, *plan.free_range, unit=cut_unit)
        t2 = time.perf_counter()
        if verify is not None:
            st["check"] = verify(src, tmp)
    st.update(plan_s=round(t1 - t0, 3), write_s=round(t2 - t1, 3), pack_s=round(t2 - t0, 3),
              total_s=round(time.perf_counter() - t0, 3))
    return st
