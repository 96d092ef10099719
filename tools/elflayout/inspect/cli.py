"""``elflayout inspect``: print what an ELF file is made of (tables or JSON)."""

from __future__ import annotations

import json
import sys

from elflayout.errors import ElflayoutError

SUMMARY = "segments, sections, relocations, symbols (and link map) of an ELF file"
EPILOG = """\
examples:
  # tables: segments and sections with their 4 KiB page ranges, dynamic relocations
  # by type, optimal RELR size, symbol counts, function extents from .eh_frame
  elflayout inspect /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1

  # the same as an elflayout-inspect v1 JSON document (docs/formats/inspect.md)
  elflayout inspect --json /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 > llvm.json
  elflayout inspect libx.so -o libx.inspect.json

  # every function extent, including those only .eh_frame knows (stripped libraries)
  elflayout inspect --functions /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 | less

  # with the link map (GNU ld, gold, lld or mold -Map=FILE): objects and input
  # sections with the file range they occupy in the output
  elflayout inspect build/libx.so --map build/libx.map
  # static initializers run at load, in run order; with a valgrind profile of the
  # start-up, the code/data pages each first touches and its (valgrind) time
  elflayout inspect --initializers /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 --profile llc.json
"""


def add_arguments(p) -> None:
    p.add_argument("lib", metavar="LIB", help="ELF shared library or executable")
    p.add_argument("--map", metavar="LINK.map", help="link map of LIB (GNU ld, gold, lld or mold -Map output)")
    p.add_argument("--json", action="store_true", help="print the elflayout-inspect v1 JSON document instead of tables")
    p.add_argument("-o", "--output", metavar="OUT.json", help="write the JSON document to this file (atomically)")
    p.add_argument("--force", action="store_true", help="let -o replace an existing file")
    p.add_argument("--functions", action="store_true",
                   help="also list every function extent (name or fde_<hex>, source, offset, size)")
    p.add_argument("--initializers", action="store_true",
                   help="list the static initializers LIB runs at load (DT_INIT, .init_array, .ctors) in run order, "
                        "with --profile the pages and time each costs")
    p.add_argument("--profile", metavar="P.json",
                   help="with --initializers: a valgrind profile of a start-up (elflayout profile [--data])")
    p.add_argument("--debug-file", action="append", default=[], metavar="FILE",
                   help="separate debug file of a stripped LIB, for function names (default: "
                        "/usr/lib/debug/.build-id/... when installed)")
    p.add_argument("--no-input-sections", action="store_true",
                   help="with --map, list objects only (not every input section) in the tables")


def run_initializers(args) -> int:
    from elflayout.elfcore import ElfImage
    from elflayout.inspect import initializers

    t = None
    if args.profile:
        from elflayout.profile import model as pmodel

        prof = pmodel.load(args.profile)
        t = prof.target(args.lib if len(prof.targets) > 1 else None)
        if prof.metadata.get("backend") != "valgrind":
            raise ElflayoutError(f"{args.profile}: --initializers needs a valgrind profile (the trace backend "
                                 "records page faults, not which function ran)")
    with ElfImage(args.lib) as img:
        if t is not None and t.build_id and img.build_id and t.build_id != img.build_id:
            raise ElflayoutError(f"{args.profile}: profiled another build of {args.lib} (build-id {t.build_id})")
        res = initializers.describe(img, args.debug_file, t)
    if args.json:
        sys.stdout.write(json.dumps(res, indent=1) + "\n")
        return 0
    out = [f"{args.lib}: {res['count']} static initializer(s), in run order (names: {res['function_names_from']})\n"]
    rows = []
    for i, e in enumerate(res["initializers"]):
        row = [str(i), f"{e['via']}[{e['index']}]", _h(e["vaddr"]), _n(e["code_page"])]
        if t is not None:
            row += ["yes" if e["ran"] else "no", _n(e.get("code_pages")), _n(e.get("data_pages")),
                    "-" if e.get("t_s") is None else f"{e['t_s'] * 1e3:.1f}"]
        rows.append(row + [e["function"] or "?", e["object"] or ""])
    head = ["#", "via", "vaddr", "page"] + (["ran", "code pg", "data pg", "t ms*"] if t is not None else []) + \
        ["function", "object"]
    out.append(table(head, rows, right={0, 3, 5, 6, 7}))
    if t is not None:
        out.append(f"  {res['ran']} ran; {res['pages_charged']:,} pages first touched by them "
                   f"({res['init_phase_pages']:,} pages in the whole init phase). *{res['time_note']}\n")
    sys.stdout.write("".join(out))
    return 0


def run(args) -> int:
    from elflayout import fileio

    if args.initializers:
        return run_initializers(args)
    if args.profile:
        raise ElflayoutError("--profile goes with --initializers")
    from elflayout.inspect.core import inspect

    if args.output:
        fileio.check_output(args.output, force=args.force, inputs=tuple(x for x in (args.lib, args.map) if x))
    doc = inspect(args.lib, args.map, argv=sys.argv, functions=args.functions)
    if args.output or args.json:
        text = _json_text(doc)
    if args.output:
        data = text.encode()
        if str(args.output).endswith(".gz"):  # as fileio.dump_json does
            import gzip

            data = gzip.compress(data, mtime=0)
        fileio.atomic_write_bytes(args.output, data)
        print(f"wrote {args.output}", file=sys.stderr)
    if args.json:
        sys.stdout.write(text)
    elif not args.output:
        sys.stdout.write(render_text(doc, input_sections=not args.no_input_sections))
    return 0


def _json_text(doc: dict) -> str:
    """Indented JSON, or one line when large: json only uses its C encoder without indent
    (a relinked libLLVM's map, 242k input sections: ~12 s indented, ~4 s compact)."""
    m = doc.get("map") or {}
    big = len(m.get("input_sections", ())) + len(doc["functions"].get("list", ())) > 20_000
    return json.dumps(doc, indent=None if big else 1) + "\n"


# -- text rendering ------------------------------------------------------------------------

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


def render_text(doc: dict, input_sections: bool = True) -> str:
    from elflayout.elfcore import page_range

    f = doc["file"]
    out = []
    out.append(f"{f['path']}\n")
    out.append(f"  ELF{f['class']} {f['endian']}-endian {f['type']} {f['machine']}"
               f"{'' if f['x86_64'] else '  [not x86-64: relocation packing and profiling are x86-64-specific]'}\n")
    out.append(f"  build-id {f['build_id'] or '-'}   size {f['size']:,} bytes ({f['pages']:,} pages of 4 KiB)\n")
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
                         [[_h(f["offset"]), _n(f["size"]), f["source"], _pg(list(page_range(f["offset"], f["size"]))),
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
