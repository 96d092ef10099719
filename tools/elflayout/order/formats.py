"""Writers: one ``Layout`` → the file each linker understands (docs/formats/order.md).

- ``objects``: object files, one per line, for the link command line (GNU ld, gold, lld
  and mold all lay out input sections in command-line order; the only lever for mold
  and for objects built without -ffunction-sections).
- ``lld``: ``--symbol-ordering-file``: symbol names, one per line; lld moves each input
  section holding a listed symbol to the front of its output section, in file order.
- ``gold``: ``--section-ordering-file``: input section names, one per line (globs
  allowed). gold sorts *unlisted* sections first (order index 0), so each ordered output
  section ends with a catch-all glob (``.text*``) that gives the rest one shared index,
  i.e. their original order after the listed ones.
- ``ld-script``: GNU ld 2.40 script passed with ``-T``: each ``SECTIONS`` block adds an
  output section before the default one and ``INSERT`` keeps the default script.
  Named ``.text.elflayout`` etc.: an output section called ``.text`` inserted before
  ``.text`` is ambiguous to ld, and ``INSERT BEFORE .init`` would put code in the
  read-only segment and make it executable (both tried with ld 2.40). ``INSERT BEFORE``
  also goes before the assignments that precede the anchor: ``.rodata.elflayout`` brings
  its own page alignment (else it lands in the executable segment). ``.data.elflayout``
  goes right after the RELRO end, where lld's data script puts it: AFTER ``.got.plt`` in
  a lazily bound link; under ``-z now`` that output section does not exist and the
  RELRO end directly precedes ``.data`` (INSERT BEFORE ``.data`` would put the data in
  PT_GNU_RELRO), so there, and when the binding is not known, AFTER ``.data``.
"""

from __future__ import annotations

import re

from elflayout.order.algorithms import Layout
from elflayout.order.resolve import object_member, same_object
from elflayout.split.extents import SPLIT_PREFIX

FORMATS = ("objects", "lld", "gold", "ld-script")

# Output sections an input section name goes to (GNU ld's default script), first match wins.
DATA_GROUPS = (
    (".data.rel.ro", ".data.rel.ro"),
    (".rodata", ".rodata"),
    (".data", ".data"),
)
# ld script section-name patterns: a name with these characters would be parsed as syntax
_LD_UNSAFE = re.compile(r"[\s()*?\[\]{}\"';,=]")


# Code sections that are not one function's own: an object built without
# -ffunction-sections keeps all its code in .text (its cold/hot/startup parts in these)
GENERIC_TEXT = (".text", ".text.unlikely", ".text.hot", ".text.startup", ".text.exit")


def text_sections(layout: Layout, split: bool = False) -> list[str]:
    """Input section names of the layout's functions, in order. ``split``: the objects are
    linked after ``elflayout split``, which gives a function of a generic section
    (``.text``) its own, ``.text.NAME``."""
    out = []
    for r in layout.functions:
        for sec in r.sections:
            if r.how == "section":
                # code known by section and object only (crtbeginS.o's .text, run at load):
                # a section name alone moves every object's .text, so only when the
                # objects were split (their .text is gone; the crt files' stays)
                if split:
                    out.append(sec)
            else:
                out.append(SPLIT_PREFIX[sec] + r.name if split and sec in SPLIT_PREFIX and r.name else sec)
    return list(dict.fromkeys(out))


def text_entries(layout: Layout, split: bool = False, whole: Layout | None = None) -> list[tuple[str, str | None]]:
    """(input section name, object or None) in layout order: a section name that several
    objects use (plain ``.text``; a local function's -ffunction-sections name defined in
    several objects) carries the object it was profiled in, where known. ``whole``: the
    layout ``layout`` is part of (``head_tail``), whose names count."""
    names = {}
    for r in (whole or layout).functions:
        for sec in r.sections:
            names.setdefault(sec, set()).update(o for o in r.objects if o)
    out = []
    for r in layout.functions:
        for sec in r.sections:
            if split and sec in SPLIT_PREFIX and r.name and r.how != "section":
                out.append((SPLIT_PREFIX[sec] + r.name, None))
            elif (sec in GENERIC_TEXT or len(names[sec]) > 1) and len(set(r.objects)) == 1 and r.objects[0]:
                out.append((sec, r.objects[0]))
            else:
                out.append((sec, None))
    return list(dict.fromkeys(out))


def linkable_objects(objects: list[str]) -> list[str]:
    """Objects a link command names itself: not archive members, not the driver's crt files."""
    out = []
    for o in objects:
        name = o.rsplit("/", 1)[-1]
        if o.endswith(")") or o.startswith("<") or re.match(r"^crt\w*\.o$", name) or o.startswith(("/usr/lib/gcc/", "/lib/")):
            continue
        out.append(o)
    return out


def write_objects(layout: Layout, all_objects: list[str] | None = None) -> tuple[str, dict]:
    """Touched objects in first-access order, then the rest in their original order."""
    if all_objects is not None:
        all_objects = linkable_objects(all_objects)
    if all_objects is None:
        lines = list(layout.objects)
        return _lines(lines), {"objects": len(lines), "touched": len(lines), "untouched": None}
    ordered, used = [], set()
    by_member: dict[str, list[int]] = {}
    for i, a in enumerate(all_objects):
        by_member.setdefault(object_member(a), []).append(i)
    for o in layout.objects:
        for i in by_member.get(object_member(o), ()):
            if i not in used and same_object(all_objects[i], o):
                ordered.append(all_objects[i])
                used.add(i)
                break
    touched = len(ordered)
    ordered += [a for i, a in enumerate(all_objects) if i not in used]
    return _lines(ordered), {"objects": len(ordered), "touched": touched, "untouched": len(ordered) - touched,
                             "profiled_not_in_link": len(layout.objects) - touched}


def write_lld(layout: Layout) -> tuple[str, dict]:
    names = [r.link_name for r in layout.functions if r.link_name]
    names = list(dict.fromkeys(names + list(layout.data_symbols)))
    return _lines(names), {"symbols": len(names), "data_symbols": len(layout.data_symbols)}


def head_tail(layout: Layout, tail=()) -> tuple[Layout, Layout]:
    """``layout`` split into the functions before the cold code and those named in
    ``tail`` (``order.tail``), listed after it."""
    import dataclasses

    names = set(tail)
    return (dataclasses.replace(layout, functions=[r for r in layout.functions if r.name not in names]),
            dataclasses.replace(layout, functions=[r for r in layout.functions if r.name in names]))


def write_gold(layout: Layout, split: bool = False, tail=()) -> tuple[str, dict]:
    """``tail``: functions listed after the closing glob, i.e. after the cold code."""
    head, last = head_tail(layout, tail)
    text = text_sections(head, split)
    after = [n for n in text_sections(last, split) if n not in set(text)]
    text += after
    data = list(dict.fromkeys(n for n, _ in layout.data))
    lines = text[:len(text) - len(after)] + ([".text*"] if text else []) + after
    for prefix, _out in DATA_GROUPS:
        grp = [n for n in data if _group(n) == prefix]
        if grp:
            lines += grp + [prefix + "*"]
    # the touched functions' LSDAs first (gold cannot order .eh_frame: it builds it itself)
    lsda = [n for n in data if n.startswith(".gcc_except_table.")]
    if lsda:
        lines += lsda + [".gcc_except_table*"]
    shared = _shared_objects(layout) if not split else []
    # gold's ordering file names sections, not files: a generic .text listed moves every
    # object's .text, in link order, to the first one's place
    return _lines(lines), {"text_sections": len(text), "tail_sections": len(after), "data_sections": len(data),
                           "unwind_sections": len(lsda),
                           "shared_section_objects": len(shared),
                           "shared_section_examples": shared[:5]}


def _shared_objects(layout: Layout) -> list[str]:
    """Objects whose profiled code is in a generic section (plain .text) that an ordering
    file cannot name by function."""
    return list(dict.fromkeys(o for r in layout.functions if r.how != "section" for sec in r.sections
                              if sec in GENERIC_TEXT for o in r.objects if o))


def write_ld_script(layout: Layout, header: str = "", split: bool = False, hot_strings: bool = True,
                    bind_now: bool | None = None, readonly_first: bool = True, tail=()) -> tuple[str, dict]:
    """``hot_strings``: ``.rodata.elflayout`` begins with the touched objects' mergeable
    strings, in a pool of their own (GNU ld merges per output section), as the lld data
    script does. ``bind_now``: whether the link uses ``-z now`` (None: not known); it
    decides where the written data goes (``data_anchor``). ``readonly_first``: the
    read-only data goes before the code, as lld places it (``READONLY_FIRST``).
    ``tail``: functions placed after the cold code, in ``.text.elflayout.tail``."""
    head, last = head_tail(layout, tail)
    text = text_entries(head, split, layout)
    after = [e for e in text_entries(last, split, layout) if e not in set(text)]
    data = list(dict.fromkeys(n for n, _ in layout.data))
    skipped = [n for n in [t for t, _ in text + after] + data if _LD_UNSAFE.search(n)]
    bad = set(skipped)
    blocks = []
    if header:
        blocks.append("".join(f"/* {h} */\n" for h in header.splitlines()))
    by_file = 0
    for entries, name, where in ((text, ".text.elflayout", "BEFORE"), (after, ".text.elflayout.tail", "AFTER")):
        if not entries:
            continue
        # a section several objects use is named with its file (``archive:member``), so
        # only the profiled object's copy moves; GNU ld matches -T statements first
        pats = []
        for sec, obj in entries:
            if sec in bad:
                continue
            fpats = ld_file_patterns(obj) if obj else []
            by_file += bool(fpats)
            pats += [f"{fp}({sec})" for fp in fpats] or [f"*({sec})"]
        blocks.append(_ld_block(name, ".text", pats, raw=len(pats), where=where))
    dpats, dstats = data_patterns(layout, ld_file_patterns)
    str_pats = list(dict.fromkeys(f"{fp}(.rodata.str*)" for o in layout.objects if o and not o.startswith("<")
                                  for fp in ld_file_patterns(o))) if hot_strings and dpats.get(".rodata") else []
    dstats["string_patterns"] = len(str_pats)
    unwind = unwind_patterns(layout)
    dstats["unwind_patterns"] = sum(map(len, unwind.values()))
    if readonly_first:
        blocks.append(readonly_block(str_pats + dpats.get(".rodata", []), unwind))
    elif dstats["unwind_patterns"]:
        blocks.append(readonly_block([], unwind, UNWIND_AFTER))
    for prefix, out in DATA_GROUPS:
        grp = (str_pats if prefix == ".rodata" else []) + dpats.get(prefix, [])
        if grp and not (readonly_first and out == ".rodata"):
            # INSERT BEFORE goes ahead of the assignments that precede the anchor. Writable
            # ordered data after .data: DATA_SEGMENT_RELRO_END precedes .data, and before it
            # the data would be in PT_GNU_RELRO (read-only after relocation under -z now).
            # Constants before .rodata, but on a page of their own: ahead of the default
            # script's page alignment they would be in the executable segment
            # (-z separate-code); after .rodata they measured worse (libpython: +91 pages)
            # Lazily bound, .got.plt is the last RELRO-free section before .data: the ordered
            # data there is not the tail of the file-backed segment, whose last page ld.so
            # writes first (the .bss part) and whose read-around runs on into .symtab
            # (libpython: 25 pages more past the segment after .data)
            where, anchor = ("AFTER", DATA_ANCHOR[bind_now]) if out == ".data" else ("BEFORE", out)
            lead = "  . = ALIGN(CONSTANT (MAXPAGESIZE));\n" if out == ".rodata" else ""
            note = "" if out != ".data" else (f"/* {DATA_WHY[bind_now]} */\n")
            blocks.append(note + _ld_block(out + ".elflayout", anchor, grp, raw=len(grp), where=where, lead=lead))
    if dpats.get(".data"):
        dstats["data_anchor"] = f"after {DATA_ANCHOR[bind_now]}"
    return "\n".join(blocks), {"text_sections": len(text) + len(after), "tail_sections": len(after),
                                "data_sections": len(data), "skipped_unsafe_names": len(skipped),
                                "named_with_file": by_file, "readonly_first": readonly_first, **dstats}


# GNU ld's default script puts the read-only data (-z separate-code: in a segment of its
# own) after the code; lld puts it before, next to the dynamic tables ld.so reads whole,
# so read-around from a constant or unwind-table fault reads those tables or more
# read-only data, not the cold end of .text (libstdc++, GNU ld: 12 pages of cold code
# from the first .rodata fault). These statements are the default script's own (GNU ld
# 2.40), inserted before .init, i.e. ahead of the page alignment that starts the code
# segment: the default statements of the same names then receive no input. In lld's
# order: the LSDAs before the unwind tables, which end next to the code (libstdc++:
# 9 pages fewer than GNU ld's order, readahead model on the profiled relinks).
READONLY_FIRST = (
    (".rodata", "", "*(.rodata .rodata.* .gnu.linkonce.r.*)"),
    (".rodata1", "", "*(.rodata1)"),
    (".gcc_except_table", "ONLY_IF_RO", "*(.gcc_except_table .gcc_except_table.*)"),
    (".eh_frame_hdr", "", "*(.eh_frame_hdr) *(.eh_frame_entry .eh_frame_entry.*)"),
    (".eh_frame", "ONLY_IF_RO", "KEEP (*(.eh_frame)) *(.eh_frame.*)"),
)
READONLY_ANCHOR = ".init"
# Without the move, the unwind tables' statements go where the default script has them
UNWIND_AFTER = ".rodata1"
UNWIND = (".eh_frame", ".gcc_except_table")


def unwind_patterns(layout: Layout) -> dict[str, list[str]]:
    """Input-section descriptions of the touched unwind tables, in layout order: each
    function's LSDA (``.gcc_except_table.NAME``, -ffunction-sections) by name, named with
    its file when several objects use the name; an object's ``.eh_frame`` (one per
    object, its FDEs in function order) by its file. The unwinder reads the FDEs and
    LSDAs of the functions a throw passes through, scattered in object order otherwise."""
    owners: dict[str, set] = {}
    for n, o in layout.data:
        owners.setdefault(n, set()).add(o)
    out: dict[str, list[str]] = {u: [] for u in UNWIND}
    for n, o in dict.fromkeys(layout.data):
        fps = ld_file_patterns(o) if o and not o.startswith("<") else []
        if n == ".eh_frame":
            out[n] += [f"KEEP ({fp}(.eh_frame))" for fp in fps]
        elif n.startswith(".gcc_except_table.") and not _LD_UNSAFE.search(n):
            out[".gcc_except_table"] += [f"{fp}({n})" for fp in fps] if len(owners[n]) > 1 else [f"*({n})"]
    return {u: list(dict.fromkeys(p)) for u, p in out.items()}


def readonly_block(hot: list[str], unwind: dict[str, list[str]], after: str | None = None) -> str:
    """The read-only data before the code (``READONLY_FIRST``), the ordered constants
    ``hot`` (complete input-section descriptions) first, in ``.rodata.elflayout``, and
    the touched unwind tables (``unwind_patterns``) first in theirs. ``after``: only
    the unwind tables' statements, inserted after that output section (their default place)."""
    lines = ["SECTIONS", "{"]
    if hot:
        lines += ["  .rodata.elflayout :", "  {", *(f"    {p}" for p in hot), "  }"]
    for name, kind, body in READONLY_FIRST:
        if after and name not in (".eh_frame_hdr", *UNWIND):
            continue
        first = " ".join(unwind.get(name, ()))
        lines.append(f"  {name} : {(kind + ' ') if kind else ''}{{ {first + ' ' if first else ''}{body} }}")
    where = f"INSERT AFTER {after};" if after else f"INSERT BEFORE {READONLY_ANCHOR};"
    return "\n".join(lines + ["}", where, ""])


# Where ``.data.elflayout`` is inserted (INSERT AFTER), by the link's binding: the first
# output section after GNU ld's DATA_SEGMENT_RELRO_END, else ``.data`` itself
DATA_ANCHOR = {False: ".got.plt", True: ".data", None: ".data"}
DATA_WHY = {False: "lazy binding: after .got.plt (a -z now link has no .got.plt: regenerate for it)",
            True: "-z now: after .data (before it is PT_GNU_RELRO)",
            None: "binding not known: after .data (before it, -z now would make it PT_GNU_RELRO)"}


# Data sections a compiler emits without -fdata-sections: every object has its own, so a
# section name alone would move all of them (untouched ones too)
GENERIC_DATA = (".data", ".rodata", ".data.rel", ".data.rel.local", ".data.rel.ro", ".data.rel.ro.local")


def data_patterns(layout: Layout, file_patterns, groups=DATA_GROUPS) -> tuple[dict[str, list[str]], dict]:
    """Input-section descriptions of the layout's data, by output group, in layout order.
    A generic section (``.data``) or one several objects name is given with its object's
    file pattern (``file_patterns(obj)`` → list), so only the touched objects' copies
    move; without one it is left in place and counted: ``*(.data)`` would move every
    object's ``.data`` and could leave the default ``.data`` empty (lld then has no
    section to INSERT before)."""
    owners: dict[str, set] = {}
    for n, o in layout.data:
        owners.setdefault(n, set()).add(o)
    out: dict[str, list[str]] = {}
    generic = unnamed = unsafe = 0
    for n, o in dict.fromkeys(layout.data):
        grp = _group(n)
        if grp is None or grp not in {g for g, _ in groups}:
            continue
        if _LD_UNSAFE.search(n):
            unsafe += 1
            continue
        if n in GENERIC_DATA or len(owners[n]) > 1:
            # "<internal>": the linker's own input, no file to name
            fps = file_patterns(o) if o and not o.startswith("<") else []
            if not fps:
                unnamed += 1
                continue
            generic += 1
            pats = [f"{fp}({n})" for fp in fps]
        else:
            pats = [f"*({n})"]
        out.setdefault(grp, []).extend(p for p in pats if p not in out.get(grp, ()))
    return out, {"data_named_with_file": generic, "data_generic_without_object": unnamed,
                 "data_skipped_unsafe_names": unsafe}


def ld_file_patterns(obj: str) -> list[str]:
    """GNU ld file patterns for a link-map object name: ``x/libfoo.a(m.o)`` →
    ``*libfoo.a:m.o``; ``dir/m.o`` → ``*/m.o`` and ``[m].o`` (the path as the command
    line gave it may be relative; a pattern without a wildcard would make ld load that
    file). Empty when a name would be parsed as script syntax."""
    if obj.endswith(")") and "(" in obj:
        a, m = obj[:-1].split("(", 1)
        a, m = a.rsplit("/", 1)[-1], m.rsplit("/", 1)[-1]
        if not a or not m or _LD_UNSAFE.search(a + m):
            return []
        return [f"*{a}:{m}"]
    base = obj.rsplit("/", 1)[-1]
    if not base or _LD_UNSAFE.search(base):
        return []
    return [f"*/{base}", f"[{base[0]}]{base[1:]}"]


# Output sections the lld data script orders: .data.rel.ro is left out (relocation
# processing writes all of it whatever the order).
LLD_DATA_GROUPS = ((".rodata", ".rodata"), (".data", ".data"))


def lld_file_pattern(obj: str) -> str | None:
    """An lld script file pattern for a link-map object name: ``lib.a(m.o)`` → ``lib.a:m.o``
    (lld names archive members ``archive:member``); None when it cannot be written."""
    if obj.endswith(")") and "(" in obj:
        a, m = obj[:-1].split("(", 1)
        pat = f"{a}:{m}"
    else:
        pat = obj
    return None if _LD_UNSAFE.search(pat) or not pat else pat


def write_lld_data_script(layout: Layout, header: str = "", hot_strings: bool = True, universe=None,
                          string_pool: bool = False, hot_constants: bool = False,
                          sparse_last: bool = False, pools: dict[str, list[str]] | None = None) -> tuple[str, dict]:
    """lld companion to ``--symbol-ordering-file``: data input sections (jump tables,
    ``.Lswitch.table``, ``.rodata..L*`` constants: sections without a symbol lld could be
    told about) in layout order, in ``.rodata.elflayout``/``.data.elflayout`` output
    sections inserted before ``.rodata``/``.data`` (``-T FILE``; lld ≥ 11 keeps its
    default layout for everything else when a script ends with INSERT).

    ``hot_strings``: first in ``.rodata.elflayout``, the mergeable strings
    (``.rodata.str*``) of every touched object. lld merges strings per output section
    and spreads each pool over 32 hash shards, so a pool is read whole once a few of its
    strings are: this splits the touched objects' strings into a pool of their own and
    leaves the rest of the pool unread (docs/ordering.md). ``pools`` ({object: string
    sections}, ``split.hotstrings``' ``hot_left``): only those, when the hot pools hold
    the strings the run read and these are the sections where some could not move: the
    touched objects' other strings were not read, and placed hot they are read for nothing.

    ``hot_constants``: next, the touched objects' merged constants (``.rodata.cst*``),
    for the same reason: lld pools every object's constants, so those the code run reads
    would otherwise sit in the cold ``.rodata``, whose read-around they start.

    ``sparse_last``: last, the big sections touched on few of their pages
    (``Layout.data_sparse``, each named with its file). Left in place, each starts a
    read-around in the cold data (both ways, a window of read_ahead_kb around each
    touch); at the tail of the hot block, its untouched pages take the read-around past
    the hot data's end, which reads cold data otherwise, and past its last touched page
    only the same window is read (libpython: ``index2`` of unicodectype.o, 32 pages).

    ``universe`` (the profiled link's map): a group whose ordered sections are all the
    non-empty input sections of its default output section is left out and named in
    ``left_out``: lld drops the emptied ``.data`` and refuses to insert before it, and
    every page of a section read whole is read whatever its order.

    ``string_pool``: first of all, an output section ``.rodata.hotstr`` of the hot string
    pools ``elflayout.split.hotstrings`` wrote (``*(.rodata.hotstr*)``): lld merges
    them into one small pool of the strings start-up reads (empty, and dropped by lld,
    when no object has one)."""
    blocks = ["".join(f"/* {h} */\n" for h in header.splitlines())] if header else []
    if string_pool:
        from elflayout.split.hotstrings import HOT_PREFIX

        blocks.append(_ld_block(HOT_PREFIX, ".rodata", [f"*({HOT_PREFIX}*)"], raw=1))
    dpats, dstats = data_patterns(layout, lambda o: [p] if (p := lld_file_pattern(o)) else [], LLD_DATA_GROUPS)
    placed = n_str = n_const = 0
    str_pats = []
    if hot_strings:
        prof = [o for o in layout.objects if o and not o.startswith("<")]
        objs = prof
        if universe is not None and universe.objects:  # the profiled objects as this link names them
            from elflayout.order.resolve import same_objects

            objs = same_objects(prof, universe.objects)
        pats = [lld_file_pattern(o) for o in objs]
        by_file: dict[str, list[str]] = {}
        for o0, o, p in zip(prof, objs, pats):
            secs = [".rodata.str*"] if pools is None else pools.get(o) or pools.get(o0) or []
            if p and secs:
                by_file.setdefault(p, []).extend(s for s in secs if s not in by_file.get(p, ()))
        str_pats = [f"{p}({sec})" for p, secs in by_file.items() for sec in secs]
        n_str = len(by_file)
        if hot_constants:
            cst = [f"{p}(.rodata.cst*)" for p in dict.fromkeys(p for p in pats if p)]
            str_pats += cst
            n_const = len(cst)
    sparse = _sparse_patterns(layout) if sparse_last else {}
    left_out = []
    for prefix, out in LLD_DATA_GROUPS:
        grp = dpats.get(prefix, [])
        extra = str_pats if prefix == ".rodata" else []
        tail = sparse.get(prefix, [])
        if not (grp or extra or tail):
            continue
        if universe is not None and universe.extent_names and not _left_in(universe, prefix, layout, lld_file_pattern,
                                                                           extra + tail):
            left_out.append(out)
            continue
        placed += len(grp)
        pats = extra + grp + tail
        blocks.append(_ld_block(out + ".elflayout", out, pats, raw=len(pats)))
    parked = _dragged_by_name(layout, universe)
    for prefix, out in LLD_DATA_GROUPS:
        grp = [f"{fp}({n})" for n, o in parked if _group(n) == prefix and (fp := lld_file_pattern(o))]
        if grp:
            blocks.append(_ld_block(out + ".elflayout.cold", out, grp, raw=len(grp), where="AFTER"))
    return "\n".join(blocks), {"data_sections": placed, "string_objects": n_str,
                                "constant_objects": n_const,
                                "sparse_sections": sum(map(len, sparse.values())),
                                "skipped_unsafe_names": dstats["data_skipped_unsafe_names"], **dstats,
                                "left_out": left_out, "parked_same_name": len(parked)}


def _sparse_patterns(layout: Layout) -> dict[str, list[str]]:
    """lld input-section descriptions of ``layout.data_sparse`` by output group, each
    with its file: a local table's name is often another object's too (``index2`` of
    unicodectype.o and unicodedata.o), and ``*(NAME)`` would move both."""
    out: dict[str, list[str]] = {}
    for n, o in layout.data_sparse:
        grp = _group(n)
        fp = lld_file_pattern(o) if o and not o.startswith("<") else None
        if grp in {g for g, _ in LLD_DATA_GROUPS} and fp and not _LD_UNSAFE.search(n):
            pat = f"{fp}({n})"
            out.setdefault(grp, [])
            if pat not in out[grp]:
                out[grp].append(pat)
    return out


def _dragged_by_name(layout: Layout, universe) -> list[tuple[str, str]]:
    """Untouched data sections lld's symbol ordering would move to the front of their
    output section: lld orders *every* section defining a listed name, so a local table
    named like a hot function of another object (unicodedata.o's ``code_hash``,
    codeobject.o's function ``code_hash``) would join the hot data. The data script parks
    them after the output section, each named with its file."""
    oss = getattr(universe, "object_section_symbols", None) if universe is not None else None
    if not oss:
        return []
    listed = {r.link_name for r in layout.functions if r.link_name} | set(layout.data_symbols)
    placed = set(layout.data)
    groups = {g for g, _ in LLD_DATA_GROUPS}
    return [(n, o) for (n, o), syms in oss.items()
            if o and not o.startswith("<") and _group(n) in groups and (n, o) not in placed and (n, None) not in placed
            and not listed.isdisjoint(syms)]


def _left_in(universe, prefix: str, layout: Layout, file_pattern, extra_patterns) -> int:
    """Non-empty input sections of ``prefix``'s output section in ``universe`` that the
    ordering leaves there (``data_patterns``' rule: generic names move by object); any
    when ``extra_patterns`` (the strings' pool) also moves some."""
    if extra_patterns:
        return 1
    names = {n for n, _ in layout.data}
    owners: dict[str, set] = {}
    for n, o in layout.data:
        owners.setdefault(n, set()).add(o)
    moved = {(n, file_pattern(o)) for n, o in layout.data if o and not o.startswith("<")}
    left = 0
    for j, (n, o) in enumerate(zip(universe.extent_names, universe.extent_objects)):
        if _group(n) != prefix or int(universe.extents["size"][j]) <= 0:
            continue
        by_file = n in GENERIC_DATA or len(owners.get(n, ())) > 1
        if n not in names or (by_file and (n, file_pattern(o) if o else None) not in moved):
            left += 1
    return left


def _ld_block(name: str, anchor: str, patterns: list[str], raw: int = 0, where: str = "BEFORE", lead: str = "") -> str:
    """An output section ``name`` inserted ``where`` (BEFORE/AFTER) ``anchor``, after the
    script statements ``lead``; the first ``raw`` patterns are complete input-section
    descriptions, the rest section names of any file."""
    body = "".join(f"    {p}\n" if i < raw else f"    *({p})\n" for i, p in enumerate(patterns))
    return f"SECTIONS\n{{\n{lead}  {name} :\n  {{\n{body}  }}\n}}\nINSERT {where} {anchor};\n"


def _group(name: str) -> str | None:
    for prefix, _ in DATA_GROUPS:
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    return None


def _lines(items) -> str:
    return "".join(f"{x}\n" for x in items)


def write(fmt: str, layout: Layout, all_objects: list[str] | None = None, header: str = "",
          split: bool = False, bind_now: bool | None = None, move_rodata: bool = True, tail=()) -> tuple[str, dict]:
    """``split``: the link's objects are the output of ``elflayout split`` (a function of
    a generic section is named by its own section, ``.text.NAME``). ``bind_now``: the
    link uses ``-z now`` (None: not known; ld-script only). ``move_rodata``: the
    ld-script puts the read-only data before the code (``READONLY_FIRST``). ``tail``:
    functions listed after the cold code (gold, ld-script; ``order.tail``)."""
    if fmt == "objects":
        return write_objects(layout, all_objects)
    if fmt == "lld":
        return write_lld(layout)
    if fmt == "gold":
        return write_gold(layout, split, tail)
    if fmt == "ld-script":
        return write_ld_script(layout, header, split, bind_now=bind_now, readonly_first=move_rodata, tail=tail)
    raise ValueError(f"unknown format {fmt!r}")
