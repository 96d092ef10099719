"""``elflayout inspect``: print what an ELF file is made of (tables or JSON)."""

from __future__ import annotations

import json
import sys

from elflayout import fileio
from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout import initializers
from elflayout.inspect.core import inspect
from elflayout.inspect.text import _h, _n, render_text, table  # noqa: F401 - table: the tests' column check
from elflayout.profile import model as pmodel

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
    p.add_argument("--page-size", type=int, choices=(4, 16, 64), default=4, metavar="KIB",
                   help="page ranges in pages of 4 (default), 16 or 64 KiB, as arm64 kernels with such pages map "
                        "the file (a model: measurements here are in 4 KiB pages)")
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
    t = None
    if args.profile:
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
            ran = "yes" if e["ran"] else "no" if e["ran"] is False else "unseen"
            row += [ran, _n(e.get("code_pages")), _n(e.get("data_pages")),
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
    if args.initializers:
        return run_initializers(args)
    if args.profile:
        raise ElflayoutError("--profile goes with --initializers")
    if args.output:
        fileio.check_output(args.output, force=args.force, inputs=tuple(x for x in (args.lib, args.map) if x))
    doc = inspect(args.lib, args.map, argv=sys.argv, functions=args.functions, page_size=args.page_size * 1024)
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
