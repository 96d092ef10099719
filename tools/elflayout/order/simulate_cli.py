"""``elflayout simulate``: predict the pages a cold start reads for a library's layout."""

from __future__ import annotations

import json
import sys

from elflayout.order import simulation

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
    p.add_argument("--page-size", type=int, choices=(4, 16, 64), default=4, metavar="KIB",
                   help="the kernel's page size in KiB: 4 (default), 16 or 64 (arm64 kernels); the figures are then "
                        "modelled in pages of that size, not measured")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")


def run(args) -> int:
    doc = simulation.predict(args.profile, args.lib, target=args.target, read_ahead_kb=args.read_ahead_kb,
                             loader=args.loader, code_bytes=args.code_bytes, lib_map=args.map,
                             hugepage=args.madv_hugepage, page_size=args.page_size * 1024)
    sim = simulation.parse(doc)
    for w in sim.warnings:
        print(f"elflayout: warning: {w}", file=sys.stderr)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    md = sim.metadata
    unit = "" if args.page_size == 4 else f" of {args.page_size} KiB"
    print(f"{args.lib}: {sim.pages:,} pages{unit} ({sim.bytes / 2**20:.1f} MiB) predicted at read_ahead_kb "
          f"{md['read_ahead_kb']} in {sim.requests:,} reads; {sim.faults['major']:,} major faults")
    top = list(sim.by_section.items())[:8]
    print("  by section: " + ", ".join(f"{k} {v:,}" for k, v in top))
    print("  by cause:   " + ", ".join(f"{k} {v:,}" for k, v in sim.by_cause.items()))
    if not md["same_build"]:
        print(f"  another build: {md['functions']:,} functions placed by name, {md['functions_unplaced']:,} not found; "
              f"{md['pages']:,} data pages remapped, {md['pages_unplaced']:,} not", file=sys.stderr)
    return 0
