"""``elflayout simulate``: predict the pages a cold start reads for a library's layout."""

from __future__ import annotations

import json
import sys

from elflayout.elfcore import PAGE, ElfImage
from elflayout.errors import ElflayoutError
from elflayout.order.profile_input import load_profile, pick_target, require_touches
from elflayout.order.readahead import profile_touches, simulate

SUMMARY = "predict pages read at cold start for a layout (readahead model)"
EPILOG = """\
examples:
  # the profiled build itself (touches mapped by page)
  elflayout simulate llc.json --lib /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 --read-ahead-kb 128
  # a relink: functions placed by name; compare layouts without measuring
  elflayout simulate llc.json --lib build/default/libLLVM-16.so.1 --read-ahead-kb 128
  elflayout simulate llc.json --lib build/ordered/libLLVM-16.so.1 --read-ahead-kb 128 --json

The model (docs/ordering.md): ld.so's read() of the header and its relocation pass,
fault-around, read-around windows (VM_EXEC: [p, p+ra) within the mapping; otherwise
centred on the fault), async readahead on PG_readahead pages, mmap_miss.
"""


def add_arguments(p) -> None:
    p.add_argument("profile", help="profile (elflayout-profile v1)")
    p.add_argument("--lib", required=True, help="the library whose layout to simulate")
    p.add_argument("--target", help="which target of the profile (default: the one named like LIB)")
    p.add_argument("--read-ahead-kb", type=int, default=None,
                   help="read_ahead_kb to model (default: the profile's, else 128)")
    p.add_argument("--loader", choices=("auto", "yes", "no"), default="auto",
                   help="model ld.so's relocation pass (auto: unless the profile already touches the relocation tables)")
    p.add_argument("--code-bytes", type=int, default=1,
                   help="bytes of a function its first execution touches from its entry (default 1: the entry page)")
    p.add_argument("--map", metavar="LINK.map",
                   help="link map of LIB: data pages of a relink follow their input sections (needs the profile's own map)")
    p.add_argument("--madv-hugepage", action="store_true",
                   help="what if the library's mappings were madvise(MADV_HUGEPAGE)d: 2 MiB folio windows")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")


def run(args) -> int:
    doc = load_profile(args.profile)
    t = pick_target(doc, args.profile, args.target or (args.lib if len(doc.targets) > 1 else None))
    require_touches(t, args.profile)
    ra = args.read_ahead_kb
    if ra is None:
        ra = doc.metadata.get("read_ahead_kb") or 128
    if ra < 0:
        raise ElflayoutError(f"--read-ahead-kb: must be ≥ 0, got {ra}")
    with ElfImage(args.lib) as img:
        if args.map and not __import__("os").path.exists(args.map):
            raise ElflayoutError(f"{args.map}: no such file")
        pages, kinds, notes = profile_touches(t, img, args.code_bytes, args.map)
        if pages.size == 0:
            raise ElflayoutError(f"{args.profile}: no profiled touch could be placed in {args.lib} "
                                 f"({notes['functions_unplaced']} functions, {notes['pages_unplaced']} pages unplaced)")
        loader = args.loader == "yes"
        if args.loader == "auto":
            rel = [s for s in img.sections if s.name in (".rela.dyn", ".rel.dyn", ".relr.dyn") and s.size]
            touched = any(((pages >= s.offset // PAGE) & (pages <= (s.offset + s.size - 1) // PAGE)).any() for s in rel)
            loader = not touched
        res = simulate(img, pages, kinds, ra, loader, hugepage=args.madv_hugepage)
        ident = img.identity()
    out = {"format": "elflayout-simulation", "version": 1,
           "metadata": {"profile": str(args.profile), "read_ahead_kb": ra, "loader_model": loader,
                        "madv_hugepage": args.madv_hugepage,
                        "code_bytes": args.code_bytes, **notes},
           "lib": ident, **res}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{args.lib}: {res['pages']:,} pages ({res['bytes'] / 2**20:.1f} MiB) predicted at read_ahead_kb {ra} "
          f"in {res['requests']:,} reads; {res['faults']['major']:,} major faults")
    top = list(res["by_section"].items())[:8]
    print("  by section: " + ", ".join(f"{k} {v:,}" for k, v in top))
    print("  by cause:   " + ", ".join(f"{k} {v:,}" for k, v in res["by_cause"].items()))
    if not notes["same_build"]:
        print(f"  another build: {notes['functions']:,} functions placed by name, {notes['functions_unplaced']:,} not found; "
              f"{notes['pages']:,} data pages remapped, {notes['pages_unplaced']:,} not", file=sys.stderr)
    return 0
