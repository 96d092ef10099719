"""The touched code's last read-around window: its functions after the cold code.

Goal: in an executable mapping the kernel reads ``[fault, fault + ra)`` (VM_EXEC, see
``readahead``), so with the touched code packed at the front of ``.text`` the read that
covers its last pages reads cold code up to the window's end: up to ra - 1 pages, 16 on
average. GNU ld puts ``.init`` and ``.plt`` before ``.text``, at the start of the code
segment, so the first read of code is ld.so's call of ``.init``; the model replays the
profile on the linked output and says which read holds the touched code's end. gold
has no ``.init`` first but one executable segment from the dynamic tables on: its
reads of code start where the symbol lookups and the relocation pass leave off, in the
order the profiled loader made them (``predict``).

Definitions:
- *hot region*: the file pages of the ordered functions as linked: the longest run of
  them with no gap of more than a page.
- *last window*: the modelled read holding the hot region's last page.
- *tail*: the ordered functions with code on the last window's pages (or on the page
  before, ``MARGIN_PAGES``).

Steps:
1. Replay the profile on the output (``predict``: the loader's touches and the
   functions by name) through ``readahead.simulate`` at ``READ_AHEAD_KB``.
2. When the last window starts inside the hot region (after its first page) and reads
   at least ``MIN_WASTE`` pages past its end, the tail's input sections are listed after
   the cold code (``.text.elflayout.tail`` inserted after ``.text``; the gold writer
   can list them after its closing glob): there the read of the tail ends at the end
   of the code segment, not in cold code. Otherwise there is no tail.
3. The caller relinks and keeps whichever output the model predicts to read fewer pages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elflayout.elfcore import PAGE, ElfImage
from elflayout.layouts import SHF_EXECINSTR
from elflayout.order.defaults import READ_AHEAD_KB

# Fewer cold pages past the touched code than this: not worth a second link
MIN_WASTE = 4
# The functions ending on the page before the last window go too: relinked without the
# tail, the head's alignment padding changes and its last function may cross into it
MARGIN_PAGES = 1


@dataclass
class Tail:
    """``functions``: the names of the ordered functions to list after the cold code (empty: none);
    ``pages``: the model's prediction for the output; ``why``: what was found."""

    functions: tuple[str, ...]
    pages: int
    why: str


# Code the linker makes, which no function symbol names: ld.so calls .init before any
# other code of the library, and lazily bound calls go through .plt
LINKER_CODE = (".init", ".plt", ".plt.got", ".plt.sec", ".iplt")


def linker_code_pages(target, img: ElfImage) -> np.ndarray:
    """The output's pages of the linker-made code the profile ran (``LINKER_CODE``, at the
    same relative position in the section), ``.init`` first."""
    out = []
    for name in LINKER_CODE:
        sec = img.section(name)
        if sec is None or not sec.size:
            continue
        rel = [p for p in target.pages if p.kind == "x" and p.section == name]
        src = {s.name: s for s in target_sections(target)}.get(name)
        for p in rel:
            frac = 0.0 if src is None or not src.size else min(1.0, max(0.0, (p.page * PAGE - src.offset) / src.size))
            out.append((sec.offset + int(frac * (sec.size - 1))) // PAGE)
    return np.array(list(dict.fromkeys(out)), dtype=np.int64)


def target_sections(target) -> list:
    """The profiled build's section headers ([] when that file is gone or rebuilt)."""
    import os

    if not target.path or not os.path.exists(target.path):
        return []
    with ElfImage(target.path) as src:
        return list(src.sections) if src.build_id == target.build_id else []


def predict(output, target, lib_map=None, loader_reads=None) -> tuple[int, list[tuple[int, int]]]:
    """Pages the model predicts for ``output`` and its reads [(first page, pages)].
    ``loader_reads(img)``: more pages ld.so reads before the code runs (read faults), in
    order, added before the first code touch (``.dynstr`` names: ``dynstr_order``).

    The touches: the profile's, placed by name (``placement.profile_touches``: the
    relocation pass over this very file where the profiled loader began it, data pages by
    input section with ``lib_map``, the output's link map) without data touches that land
    in code (artefacts of pages shared by two sections), and the linker-made code it ran
    (``linker_code_pages``) just before the first function; ld.so's own pass
    (``readahead.loader_touches``) only when the profile has none. Where the loader
    began the pass matters in gold's single executable segment: a library found before
    the one relocated first serves symbol lookups before its own pass, and the lookups'
    read-around (a fault in executable pages reads ahead only) decides where the reads
    of code start."""
    from elflayout.order.placement import profile_touches
    from elflayout.order.readahead import simulate
    from elflayout.order.simulation import touches_relocations

    with ElfImage(output) as img:
        pages, kinds, _notes = profile_touches(target, img, lib_map=lib_map)
        code = np.zeros(len(pages), dtype=bool)
        for sec in img.sections:
            if sec.occupies_file and sec.flags & SHF_EXECINSTR and sec.size:
                code |= (pages >= sec.offset // PAGE) & (pages <= (sec.offset + sec.size - 1) // PAGE)
        keep = ~code | (kinds == b"x")
        pages, kinds = pages[keep], kinds[keep]
        extra = linker_code_pages(target, img)
        at = int(np.argmax(kinds == b"x")) if (kinds == b"x").any() else len(pages)
        if loader_reads is not None:
            more = np.asarray(loader_reads(img), dtype=np.int64)
            pages = np.concatenate([pages[:at], more, pages[at:]])
            kinds = np.concatenate([kinds[:at], np.full(len(more), b"r", dtype="S1"), kinds[at:]])
            at += len(more)
        pages = np.concatenate([pages[:at], extra, pages[at:]])
        kinds = np.concatenate([kinds[:at], np.full(len(extra), b"x", dtype="S1"), kinds[at:]])
        res = simulate(img, pages, kinds, READ_AHEAD_KB, loader=not touches_relocations(img, pages))
    return res["pages"], [(int(p), int(n)) for p, n in res["reads"]]


def find(output, target, layout, lib_map=None) -> Tail:
    """The tail of ``output`` linked in ``layout``'s order (see Steps 1-2); ``lib_map``:
    its link map."""
    from elflayout.order.check import lib_functions

    pages, reads = predict(output, target, lib_map)
    with ElfImage(output) as img:
        funcs = lib_functions(img)
    spans = []  # (first page, last page, name) of each ordered function, in order
    for r in layout.functions:
        c = funcs.get(r.link_name or "") or funcs.get(r.name or "")
        if r.sections and c and len(c) == 1:
            off, size = c[0]
            spans.append((off // PAGE, (off + max(size, 1) - 1) // PAGE, r.name))
    return choose(spans, reads, pages)


def choose(spans: list[tuple[int, int, str]], reads: list[tuple[int, int]], pages: int) -> Tail:
    """Step 2 on ``spans`` [(first page, last page, name)] of the ordered functions as
    linked and the model's ``reads`` [(first page, pages)], in read order."""
    if not spans:
        return Tail((), pages, "no ordered function found in the output")
    # the hot region: the longest run of ordered functions, a page apart at most (a
    # function placed elsewhere, e.g. crtbeginS.o's or a clone found by name, is not in it)
    runs: list[list] = []
    for a, b, name in sorted(spans):
        if runs and a <= runs[-1][1] + 1:
            runs[-1][1] = max(runs[-1][1], b)
            runs[-1][2].append((a, b, name))
        else:
            runs.append([a, b, [(a, b, name)]])
    first, end, members = max(runs, key=lambda r: len(r[2]))
    win = next(((p, n) for p, n in reads if p <= end < p + n), None)
    if win is None:
        return Tail((), pages, f"no modelled read holds the touched code's last page {end}")
    start, n = win
    waste = start + n - 1 - end
    if start <= first or waste < MIN_WASTE:
        return Tail((), pages, f"the read of the touched code's last page {end} reads {max(0, waste)} pages past it")
    tail = [name for _a, b, name in members if b >= start - MARGIN_PAGES]
    return Tail(tuple(dict.fromkeys(tail)), pages,
                f"the read at page {start} holding the touched code's end reads {waste} cold pages past it")
