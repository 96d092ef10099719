"""Physical limit: the pages a startup would read from a library if exactly the bytes it
touches were packed densely, with no read-around waste (docs/benchmarks.md).

From a valgrind profile of the library (``elflayout profile``, ideally ``--data``):

    bytes of executed functions
  + 4096 x distinct file pages touched as data (read or written: ld.so's reads of
    .dynsym/.dynstr/.gnu.hash/.dynamic/.got..., .data.rel.ro written by relocation),
    leaving out relocation tables and executable sections (counted by bytes instead)
  + 4096 x executable pages run outside any known function (PLT stubs, .init)
  + 4096 for the ELF header page (ld.so read()s it) when not already counted
  + relocation table bytes after packing (``relocs.analyze.reloc_bytes_packed``)

divided by 4096, rounded up. A floor for a perfect layout, not a forecast, except that
data is counted in pages of the *profiled* layout: a layout that packs the touched data
more densely (``order --data-script``, the .dynstr name order) can read fewer pages than
the estimate in those sections.
"""

from __future__ import annotations

import math
import os

import numpy as np

from elflayout.elfcore import PAGE, ElfImage
from elflayout.layouts import SHF_EXECINSTR
from elflayout.relocs.analyze import reloc_bytes_packed

RELOC_SECTIONS = (".rela.dyn", ".rela.plt", ".relr.dyn", ".rel.dyn", ".rel.plt")


def _touched(img: ElfImage, lib, target) -> dict:
    """The profile's pages as arrays: page, access kind, section name, executable, in file."""
    secs = {s.index: s for s in img.sections}
    file_pages = math.ceil(os.path.getsize(lib) / PAGE)
    spans = [(seg.offset // PAGE, (seg.offset + seg.filesz - 1) // PAGE) for seg in img.loads if seg.filesz > 0]
    pg = np.array([p.page for p in target.pages], dtype=np.int64)
    kind = np.array([p.kind for p in target.pages], dtype="U1")
    sec = img.section_of_offsets(pg * PAGE) if len(pg) else np.zeros(0, np.int64)
    name = np.array([secs[i].name if i >= 0 else "" for i in sec], dtype=object)
    execi = np.array([bool(secs[i].flags & SHF_EXECINSTR) if i >= 0 else False for i in sec], dtype=bool)
    in_file = np.zeros(len(pg), dtype=bool)  # file-backed bytes of a PT_LOAD (not .bss)
    for a, b in spans:
        in_file |= (pg >= a) & (pg <= b)
    in_file &= pg < file_pages
    return {"page": pg, "kind": kind, "name": name, "exec": execi, "in_file": in_file}


def _function_pages(functions) -> set[int]:
    out: set[int] = set()
    for f in functions:
        a, b = f.offset // PAGE, (f.offset + max(f.size, 1) - 1) // PAGE
        out.update(range(a, b + 1))
    return out


def physical_limit(target, lib) -> dict:
    """Pages a perfect layout of LIB would read (see the module docstring). ``target``:
    one ``profile.model.Target`` of a profile of LIB. Returns the estimate and its parts."""
    with ElfImage(lib) as img:
        relocs = reloc_bytes_packed(img)
        t = _touched(img, lib, target)
    pg, kind, name = t["page"], t["kind"], t["name"]
    data = (kind != "x") & t["in_file"] & ~np.isin(name, RELOC_SECTIONS) & ~t["exec"]
    data_pages = set(pg[data].tolist())
    code_bytes = int(sum(f.size for f in target.functions))
    # Executed pages outside functions (PLT, .init): their functions are unknown, count pages.
    x_other = (set(pg[(kind == "x") & t["in_file"] & ~np.isin(name, (".text",))].tolist())
               - _function_pages(target.functions) - data_pages)
    header = 0 if 0 in data_pages else 1
    by_section: dict[str, int] = {}
    for n in {int(p): n for p, n in zip(pg[data], name[data])}.values():
        by_section[n or "(no section)"] = by_section.get(n or "(no section)", 0) + 1
    total_bytes = (code_bytes + PAGE * (len(data_pages) + len(x_other) + header)
                   + relocs["rela"] + relocs["relr"] + relocs["plt"])
    return {"pages": math.ceil(total_bytes / PAGE), "bytes": total_bytes, "code_bytes": code_bytes,
            "functions": len(target.functions), "data_pages": len(data_pages),
            "exec_pages_outside_functions": len(x_other), "header_pages": header,
            "reloc_bytes": relocs, "data_pages_by_section": dict(sorted(by_section.items(), key=lambda kv: -kv[1])),
            "has_data": bool((kind != "x").any())}
