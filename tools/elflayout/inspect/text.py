"""Text rendering of an ``inspect`` document (``elflayout inspect`` prints it)."""

from __future__ import annotations

from elflayout.elfcore import page_range


def _n(x) -> str:
    return "-" if x is None else f"{x:,}"


def _h(x) -> str:
    return "-" if x is None else f"{x:#x}"


def _pg(p) -> str:
    if not p:
        return "-"
    return f"{p[0]}-{p[1]} ({p[1] - p[0] + 1})"


def table(headers: list[str], rows: list[list], right: set[int] = frozenset(), indent: str = "  ",
          maxw: int = 48) -> str:
    """Plain aligned columns (fast for 100k+ rows, unlike a rich Table).

    A column is as wide as its widest cell up to ``maxw``; longer cells (C++ section
    names, deep object paths) stick out instead of widening every row. Put such columns
    last, where nothing follows them.
    """
    cells = [[str(c) for c in r] for r in rows]
    w = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            if len(c) > w[i]:
                w[i] = len(c)
    w = [min(x, max(maxw, len(h))) for x, h in zip(w, headers)]
    last = len(headers) - 1

    def line(r):
        out = [c if i == last else (c.rjust(w[i]) if i in right else c.ljust(w[i])) for i, c in enumerate(r)]
        return (indent + "  ".join(out)).rstrip()

    return "\n".join([line(headers)] + [line(r) for r in cells]) + "\n"


def _render_relocations(r: dict, f: dict) -> str:
    """The "Dynamic relocations" part of the text: tables, by type, RELR existing and optimal."""
    out = []
    mark = "" if f["x86_64"] else f"  [{f['machine']} type names]"
    out.append(f"\nDynamic relocations: {r['count']:,} ({r['bytes']:,} bytes){mark}\n")
    if r["tables"]:
        out.append(table(["table", "count", "bytes"], [[t["section"], _n(t["count"]), _n(t["bytes"])] for t in r["tables"]],
                         right={1, 2}))
        out.append(table(["type", "count", "bytes"], [[t["type"], _n(t["count"]), _n(t["bytes"])] for t in r["by_type"]],
                         right={1, 2}))
    if r["relr_existing"]:
        e = r["relr_existing"]
        out.append(f"  existing RELR table {e['section']}: {e['bytes']:,} bytes for {e['count']:,} relocations\n")
    rel = r["relative"]
    if rel and r["relr_existing"] and rel["count"] == 0:
        # already packed: the RELR table holds every relative relocation; say how close to optimal it is
        e = r["relr_existing"]
        extra = e["bytes"] - rel["relr_bytes"]
        out.append(f"  already packed: no {rel['type']} left in the RELA/REL tables; the existing RELR table is "
                   + ("optimal" if extra <= 0 else f"{extra:,} bytes larger than the optimal {rel['relr_bytes']:,}")
                   + f" ({rel['word_aligned']:,} word-aligned relative relocations)\n")
    elif rel:
        also = (f" plus the {r['relr_existing']['count']:,} already in {r['relr_existing']['section']}"
                if r["relr_existing"] else "")
        out.append(f"  optimal RELR for {rel['count']:,} {rel['type']}{also} ({rel['word_aligned']:,} word-aligned): "
                   f"{rel['relr_bytes']:,} bytes ({rel['relr_words']:,} words), saves {rel['saved_bytes']:,} bytes\n")
    return "".join(out)


_FOREIGN = {"EM_AARCH64": "  [AArch64: profile and pack-relocs run under qemu-user; split and link are "
                          "x86-64-specific]",
            None: "  [not x86-64: relocation packing and profiling are x86-64-specific]"}


def render_text(doc: dict, input_sections: bool = True) -> str:
    f = doc["file"]
    page = doc["metadata"].get("page_size") or 4096
    out = []
    out.append(f"{f['path']}\n")
    out.append(f"  ELF{f['class']} {f['endian']}-endian {f['type']} {f['machine']}"
               f"{'' if f['x86_64'] else _FOREIGN.get(f['machine'], _FOREIGN[None])}\n")
    modelled = "" if page == 4096 else ", as a kernel with such pages would map them"
    out.append(f"  build-id {f['build_id'] or '-'}   size {f['size']:,} bytes ({f['pages']:,} pages of {page // 1024} KiB"
               f"{modelled})\n")
    out.append(f"  sha256 {f['sha256']}\n")
    for n in doc["notes"]:
        out.append(f"  note: {n}\n")

    out.append("\nSegments\n")
    out.append(table(
        ["#", "type", "flg", "offset", "filesz", "vaddr", "memsz", "align", "pages"],
        [[s["index"], s["type"].removeprefix("PT_"), s["flags"], _h(s["offset"]), _n(s["filesz"]), _h(s["vaddr"]),
          _n(s["memsz"]), _h(s["align"]), _pg(s["pages"])] for s in doc["segments"]],
        right={0, 3, 4, 5, 6, 7}))

    out.append("\nSections\n")
    out.append(table(
        ["#", "name", "type", "flg", "offset", "size", "addr", "pages", "seg"],
        [[s["index"], s["name"], s["type"].removeprefix("SHT_"), s["flags"], _h(s["offset"]), _n(s["size"]),
          _h(s["addr"]), _pg(s["pages"]), "-" if s["segment"] is None else s["segment"]] for s in doc["sections"]],
        right={0, 4, 5, 6, 8}))

    out.append(_render_relocations(doc["relocations"], f))

    out.append("\nSymbols\n")
    rows = []
    for k, s in doc["symbols"].items():
        if s is None:
            rows.append([f".{k}", "absent", "", "", "", ""])
        else:
            rows.append([s["section"], _n(s["count"]), _n(s["defined"]), _n(s["undefined"]), _n(s["functions"]),
                         _n(s["objects"])])
    out.append(table(["table", "entries", "defined", "undefined", "functions", "objects"], rows, right={1, 2, 3, 4, 5}))

    fn = doc["functions"]
    out.append(f"\nFunction extents: {fn['count']:,} ({fn['bytes']:,} bytes): {fn['from_symtab']:,} from .symtab, "
               f"{fn['from_dynsym']:,} from .dynsym, {fn['from_eh_frame']:,} from .eh_frame FDEs only "
               f"({fn['fde_count']:,} FDEs)\n")

    if "list" in fn:
        out.append(table(["offset", "size", "source", "pages", "function"],
                         [[_h(f["offset"]), _n(f["size"]), f["source"], _pg(list(page_range(f["offset"], f["size"], page))),
                           f["name"]] for f in fn["list"]], right={0, 1}))

    m = doc["map"]
    if m:
        out.append(f"\nLink map {m['path']} ({m['flavour']}): {len(m['objects']):,} objects, "
                   f"{len(m['input_sections']):,} input sections in {m['output_sections']} output sections, "
                   f"{m['symbols']:,} symbols\n")
        out.append(table(
            ["sections", "bytes", "file offsets", "pages", "object"],
            [[_n(o["sections"]), _n(o["bytes"]),
              "-" if o["offset_start"] is None else f"{o['offset_start']:#x}-{o['offset_end']:#x}", _pg(o["pages"]),
              o["object"]] for o in m["objects"]], right={0, 1}))
        if input_sections:
            out.append("\nInput sections (map order)\n")
            out.append(table(
                ["offset", "size", "pages", "output", "object", "input section"],
                [[_h(s["offset"]), _n(s["size"]), _pg(s["pages"]), s["output"], s["object"], s["name"]]
                 for s in m["input_sections"]], right={0, 1}, maxw=64))
    return "".join(out)
