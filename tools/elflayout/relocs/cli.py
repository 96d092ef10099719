"""``elflayout relocs LIB [--json]``: dynamic relocations by type and section, RELR size."""

from __future__ import annotations

import json
import sys

from elflayout.relocs.text import render

SUMMARY = "dynamic relocations by type and section, the RELATIVE ones' optimal RELR size, target pages"
EPILOG = """example:
  elflayout relocs /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1
      .rela.dyn  407,536 relocations, 9,780,864 bytes (2,389 pages)
      R_X86_64_RELATIVE 387,631 ... optimal RELR 144,392 bytes
  elflayout relocs libfoo.so --json > relocs.json    # format: docs/formats/relocs.md
"""


def add_arguments(p):
    p.add_argument("lib", metavar="LIB", help="ELF shared library (or executable) to analyse")
    p.add_argument("--json", action="store_true", help="print the elflayout-relocs JSON document")


def run(args) -> int:
    from elflayout.elfcore import ElfImage
    from elflayout.relocs.analyze import analyze

    with ElfImage(args.lib) as img:
        doc = analyze(img)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    else:
        print(render(doc))
    return 0
