"""``elflayout pack-relocs IN -o OUT [--check] [--json]``: RELATIVE relocations -> DT_RELR."""

from __future__ import annotations

import json
import shutil
import sys

SUMMARY = "pack the RELATIVE relocations of a linked x86-64 shared library into DT_RELR (glibc >= 2.36)"
EPILOG = """example:
  elflayout pack-relocs /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 -o packed/libLLVM-16.so.1 --check
      .rela.dyn 9,780,864 -> 477,720 bytes, RELR 144,392 bytes (387,631 relocations packed)
      check: relocated images equal at 2 load bases; real load equal (9,423,136 writable bytes)
  LD_LIBRARY_PATH=packed llc-16 --version      # run a program through the packed library

Only word-aligned R_X86_64_RELATIVE relocations into file-backed data are packed; every
other relocation keeps its order. No code or data address moves; only dynamic-linking tables
(.gnu.hash, .gnu.version*) slide by a few bytes to add the GLIBC_ABI_DT_RELR version need. Without spare DT_NULL
slots (lld) the dynamic array moves into the freed space (read-only PT_DYNAMIC, glibc >= 2.35).
Already packed input: "nothing to do", exit 0 (with --force, OUT becomes a copy of IN).
Exit status: 0 packed, 1 --check found a difference (OUT not written), 2 bad input.
See docs/relocation-packing.md.
"""


def add_arguments(p):
    p.add_argument("input", metavar="IN", help="linked ELF shared library (x86-64, RELA, no TEXTREL)")
    p.add_argument("-o", "--output", metavar="OUT", required=True, help="packed library to write")
    p.add_argument("--check", action="store_true",
                   help="prove equivalence before writing OUT: simulated loader at two load bases, then real loads "
                        "of IN and OUT (ASLR off) with equal writable bytes")
    p.add_argument("--json", action="store_true", help="print an elflayout-pack-relocs JSON document")
    p.add_argument("--force", action="store_true", help="replace an existing OUT (and copy already-packed input)")


def _verify(src, tmp):
    from elflayout.errors import ElflayoutError, Finding
    from elflayout.relocs import simload

    from rich.console import Console

    with Console(stderr=True).status("check: relocating input and output at two load bases"):
        res = simload.compare(src, tmp)
    if not res["equal"]:
        d = res["first_difference"]
        if res["table_problems"]:
            raise Finding(f"check failed: {res['table_problems'][0]} (output not written)")
        where = f"at {d.get('vaddr')} ({d.get('section')}), load base {d['base']}" if "vaddr" in d else d.get("reason")
        raise Finding(f"check failed: relocated images differ {where}; {d.get('bytes_differing', '?')} bytes differ "
                      "(output not written)")
    if simload.is_executable(tmp):
        res["dlopen"] = res["real_load"] = "skipped (a PIE executable cannot be dlopen'ed: run it)"
        return res
    with Console(stderr=True).status("check: real loads of the input and the packed library"):
        real = simload.real_load_compare(src, tmp)
    if "error" in real:
        if simload.dlopen_check(src) is not None:
            raise ElflayoutError(f"{src}: the input itself does not load ({simload.dlopen_check(src)}); "
                                 "nothing to prove against")
        raise Finding(f"check failed: dlopen of the packed library failed: {real['error']} (output not written)")
    res["dlopen"], res["real_load"] = "ok", real
    if not real["equal"]:
        raise Finding(f"check failed: after a real load, {real.get('differing_bytes', '?')} writable bytes differ "
                      f"from the input's ({real.get('reason', 'same load address, ASLR off')}; output not written)")
    return res


def run(args) -> int:
    from elflayout import __version__
    from elflayout.fileio import atomic_output, check_output, envelope
    from elflayout.relocs.pack import AlreadyPacked, pack

    check_output(args.output, force=args.force, inputs=(args.input,))
    try:
        st = pack(args.input, args.output, verify=_verify if args.check else None, replace=args.force)
    except AlreadyPacked as e:
        msg = f"{e}: nothing to do"
        if args.force:
            with atomic_output(args.output, replace=args.force) as tmp:
                shutil.copy2(args.input, tmp)
            msg += f"; copied unchanged to {args.output} (--force)"
        if args.json:
            print(json.dumps(envelope("pack-relocs", 1, dict(tool=f"elflayout {__version__}"),
                                      input=str(args.input), output=None if not args.force else str(args.output),
                                      status="nothing-to-do", message=msg), indent=1))
        else:
            print(f"elflayout: {msg}", file=sys.stderr)
        return 0
    if args.json:
        doc = envelope("pack-relocs", 1, dict(tool=f"elflayout {__version__}"),
                       input=str(args.input), output=str(args.output), status="packed", **st)
        print(json.dumps(doc, indent=1))
        return 0
    print(f"{args.input} -> {args.output}")
    print(f"  .rela.dyn {st['rela_dyn_bytes_before']:,} -> {st['rela_dyn_bytes_after']:,} bytes, "
          f"RELR {st['relr_bytes']:,} bytes ({st['packed']:,} of {st['relative']:,} RELATIVE relocations packed; "
          f"{st['kept']:,} kept, DT_RELACOUNT {st['relacount']})")
    print(f"  dynamic array: {st['dynamic']}; GLIBC_ABI_DT_RELR: {st['version_need']}")
    if st["moved_sections"]:
        print("  tables moved: " + ", ".join(f"{k} {v:+,} bytes" for k, v in st["moved_sections"].items()))
    print(f"  {st['freed_bytes']:,} bytes freed (zeroed); packed in {st['pack_s']:.2f} s")
    if "check" in st:
        c = st["check"]
        print(f"  check: relocated images equal at {len(c['bases'])} load bases ({c['compared_bytes']:,} bytes "
              f"compared, {c['excluded_bytes']:,} of dynamic-linking tables checked field by field); "
              f"real load {'equal' if isinstance(c['real_load'], dict) else c['real_load']}"
              + (f" ({c['real_load']['compared_bytes']:,} writable bytes)" if isinstance(c['real_load'], dict) else ""))
    return 0
