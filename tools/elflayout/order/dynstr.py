"""Symbol-string order: the names ld.so reads from a library's ``.dynstr``, for lld ``-u``.

Goal: put the dynamic-symbol names that the loader reads at every start (those of the
library's own symbol relocations, and the library's definitions of what the program
imports) together at the front of ``.dynstr``, so that reading them costs as many
pages as they fill instead of the whole string table. On libLLVM-16 the 9,800 names
involved fill 155 pages of an 844-page ``.dynstr`` that symbol lookup otherwise reads
almost entirely (read-around of 32 pages around each scattered string).

Citation: glibc ``elf/dl-lookup.c`` (``_dl_lookup_symbol_x`` hashes the undefined name
from the referencing object's string table; ``check_match`` strcmp()s the candidate
definition's name) and ``elf/dl-runtime.c`` (lazy ``_dl_fixup`` does the same for a PLT
slot at its first call). lld: ``SymbolTableBaseSection::addSymbol`` appends each
dynamic symbol's name to ``.dynstr`` in symbol-table insertion order, and the driver
inserts ``-u``/``--undefined`` names before it parses any input file.

Definitions:
- *read name*: the name of a dynamic symbol referenced by a relocation of the library
  (``.rela.dyn`` then ``.rela.plt``; relocation processing or a lazy PLT call looks
  it up), or a name an executable imports that the library defines.
- *weak undefined*: ``-u`` would turn it into a strong reference, which ld.so then
  refuses to leave unresolved (``__gmon_start__``). lld's ``-y NAME``
  (``--trace-symbol``) inserts the name just as early without touching its binding (and
  prints a line per file that mentions it), so weak undefined names get ``-y``.

Steps:
1. Read the library's dynamic symbols; for each relocation table in the loader's
   order, take the symbol indices in table order, first occurrence of each.
2. Keep every name; mark the weak undefined ones.
3. Append the names each executable, and every library it loads (DT_NEEDED closure,
   found like ld.so: RUNPATH, the library's own directory, the system directories),
   refers to by a relocation (or, for an executable, imports) that the library
   defines: the lookup finds the library's definition and compares its name (C++
   template instantiations the library also defines interpose, e.g. libz3's).
4. Write one ``-u NAME`` (``-y NAME`` for weak undefined) line per name, a linker
   response file (``-Wl,@FILE``). ``-u`` on a name the link defines or references anyway
   changes nothing but where its string goes (with archives not linked whole, it could
   extract a member: the names come from a build that linked them, so no new member).
Only lld honours this: gold assigns string offsets in hash-table order, GNU ld and mold
keep their own order; for them ``dynstr_order`` rewrites the linked output's table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.layouts import DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME, r_sym

STB_WEAK = 2
SHN_UNDEF = 0
_SYM = np.dtype([("st_name", "<u4"), ("st_info", "u1"), ("st_other", "u1"), ("st_shndx", "<u2"),
                 ("st_value", "<u8"), ("st_size", "<u8")])


def _dynsym(img: ElfImage):
    """(symbol records, names) of the .dynsym, read with numpy (48k symbols on libLLVM)."""
    sym = img.elf.get_section_by_name(".dynsym")
    strs = img.elf.get_section_by_name(".dynstr")
    if sym is None or strs is None:
        raise ElflayoutError(f"{img.path}: no .dynsym/.dynstr: not a dynamically linked object")
    raw = sym.data()
    recs = np.frombuffer(raw[: len(raw) // _SYM.itemsize * _SYM.itemsize], dtype=_SYM)
    blob = strs.data()
    names = []
    for o in recs["st_name"].tolist():
        end = blob.find(b"\0", o)
        names.append(blob[o:end if end >= 0 else len(blob)].decode("utf-8", "replace"))
    return recs, names


def read_names(lib, executables=()) -> tuple[list[str], dict]:
    """Step 1–3: names ld.so reads from LIB's .dynstr, in the order it first reads them."""
    with ElfImage(lib) as img:
        recs, names = _dynsym(img)
        tables = img.reloc_tables()
    defined = recs["st_shndx"] != SHN_UNDEF
    weak_undef = ~defined & ((recs["st_info"] >> 4) == STB_WEAK)
    order, n_rel = [], 0
    for name in (".rela.dyn", ".rel.dyn", ".rela.plt", ".rel.plt"):
        r = tables.get(name)
        if r is None or not len(r):
            continue
        idx = r_sym(r["r_info"].astype(np.uint64)).astype(np.int64)
        idx = idx[(idx > 0) & (idx < len(recs))]
        n_rel += len(idx)
        _, first = np.unique(idx, return_index=True)
        order.extend(idx[np.sort(first)].tolist())
    out = [names[i] for i in dict.fromkeys(order) if names[i]]
    weak = sorted({names[i] for i in dict.fromkeys(order) if weak_undef[i] and names[i]})
    n_lib = len(out)
    own = {names[i] for i in np.flatnonzero(defined)}
    seen_objs = []
    for exe in executables:
        with ElfImage(exe) as eimg:
            erecs, enames = _dynsym(eimg)
        out.extend(enames[i] for i in np.flatnonzero(erecs["st_shndx"] == SHN_UNDEF).tolist() if enames[i] in own)
        for dep in needed_closure(exe, Path(lib)):
            with ElfImage(dep) as dimg:
                if dimg.elf.get_section_by_name(".dynsym") is None:
                    continue
                drecs, dnames = _dynsym(dimg)
                dtables = dimg.reloc_tables()
            seen_objs.append(str(dep))
            for r in dtables.values():
                idx = r_sym(r["r_info"].astype(np.uint64)).astype(np.int64)
                idx = np.unique(idx[(idx > 0) & (idx < len(drecs))])
                out.extend(dnames[i] for i in idx.tolist() if dnames[i] in own)
    out = list(dict.fromkeys(out))
    return out, {"names": len(out), "from_relocations": n_lib, "symbol_relocations": n_rel,
                 "from_executables": len(out) - n_lib, "weak_undefined": weak, "executables": [str(e) for e in executables],
                 "libraries_searched": seen_objs,
                 "bytes": sum(len(n.encode()) + 1 for n in out), "dynsym": len(recs)}


SYSTEM_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")


def needed_closure(exe, lib: Path) -> list[Path]:
    """The libraries ``exe`` loads (DT_NEEDED, breadth first), LIB itself left out: found
    in LIB's directory (it stands in for its soname), RUNPATH/RPATH, the system dirs."""
    with ElfImage(lib) as img:
        soname = next((img.dt_string(v) for t, v in img.dynamic if t == DT_SONAME), Path(lib).name)
    queue, found, seen = [Path(exe)], [], set()
    while queue:
        obj = queue.pop(0)
        with ElfImage(obj) as img:
            tags = [(t, img.dt_string(v)) for t, v in img.dynamic if t in (DT_NEEDED, DT_RUNPATH, DT_RPATH)]
        dirs = [d.replace("$ORIGIN", str(obj.parent)) for t, s in tags if t in (DT_RUNPATH, DT_RPATH)
                for d in s.split(":") if d]
        for t, needed in tags:
            if t != DT_NEEDED or needed in seen:
                continue
            seen.add(needed)
            if needed == soname:  # LIB itself: not listed, but what it loads is
                queue.append(Path(lib))
                continue
            p = next((Path(d) / needed for d in (*dirs, *SYSTEM_DIRS) if (Path(d) / needed).is_file()), None)
            if p is not None:
                found.append(p)
                queue.append(p)
    return found


def write_lld_undefined(names, weak=()) -> str:
    """Step 4: a linker response file, one ``-u NAME`` (``-y NAME`` for the ``weak``
    undefined ones) per line; names a response file cannot quote are left out, and empty
    ones (an arm64 program's .dynsym has unnamed section symbols): ``-u`` would take the
    next line's name as its own and that line's ``-u`` would be read as a file."""
    weak = set(weak)
    ok = [n for n in names if n and not (any(c.isspace() for c in n) or '"' in n or "'" in n or "\\" in n)]
    return "".join(f"{'-y' if n in weak else '-u'} {n}\n" for n in ok)


def workload_executable(profile_target_metadata: dict) -> list[Path]:
    """The profiled program (argv[0]) when it is a dynamically linked ELF file."""
    argv = (profile_target_metadata or {}).get("argv") or []
    if not argv:
        return []
    p = Path(str(argv[0]))
    if not p.is_absolute():
        import shutil

        w = shutil.which(str(argv[0]))
        p = Path(w) if w else p
    try:
        with open(p, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return []
    except OSError:
        return []
    return [p]


def names_not_read(lib, read) -> list[str]:
    """The names of LIB's dynamic symbols not in READ (``read_names``), in table order.
    Given to ``dynstr_order.reorder`` as the names to put first, they leave the names
    ld.so reads at the end of ``.dynstr``, where lld puts ``.rela.dyn`` next: ld.so
    reads that table whole, so the readahead running on past the last name read reads
    pages it needs anyway instead of unread names (libLLVM-16: ``.dynstr`` 226 -> 188
    pages read)."""
    read = set(read)
    with ElfImage(lib) as img:
        _, names = _dynsym(img)
    return list(dict.fromkeys(n for n in names if n and n not in read))
