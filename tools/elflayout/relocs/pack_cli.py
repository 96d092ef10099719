"""``elflayout pack-relocs IN -o OUT [--format relr|self|auto] [--check] [--json]``: packed RELATIVE relocations."""

from __future__ import annotations

import json
import shutil
import sys

SUMMARY = ("pack the RELATIVE relocations of a linked shared library or PIE executable (DT_RELR, or self-applying "
           "for old glibc)")
EPILOG = """example:
  elflayout pack-relocs /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 -o packed/libLLVM-16.so.1 --check
      .rela.dyn 9,780,864 -> 477,720 bytes, RELR 144,392 bytes (387,631 relocations packed)
      check: relocated images equal at 2 load bases; real load equal (9,423,136 writable bytes)
  LD_LIBRARY_PATH=packed llc-16 --version      # run a program through the packed library
  elflayout pack-relocs ROOT/usr/lib/x86_64-linux-gnu/libLLVM-11.so.1 -o packed/libLLVM-11.so.1 \\
      --root ROOT --check                       # a Debian 11 root: glibc 2.31 -> the self-applying form

Forms: "relr" writes DT_RELR (glibc >= 2.36 applies it); "self" keeps the packed table where
glibc does not look and adds a 260-byte routine, run as DT_INIT before the library's
initializers, that applies it (any glibc); "auto" (default) picks relr when --min-glibc >= 2.36.
The routine goes in the code segment's last page when it has 260 free bytes, else (lld) in a
new R+X segment after the last one. Files that define ifunc symbols or have IRELATIVE
relocations are refused for the self form. AArch64 libraries get an AArch64 applier that
re-protects RELRO at the run-time page size (4, 16 or 64 KiB).

Only word-aligned R_X86_64_RELATIVE (R_AARCH64_RELATIVE) relocations into file-backed data are packed; every
other relocation keeps its order. No code or data address moves; only dynamic-linking tables
(.gnu.hash, .gnu.version*) slide by a few bytes to add the GLIBC_ABI_DT_RELR version need. Without spare DT_NULL
slots (lld) the dynamic array moves into the freed space (read-only PT_DYNAMIC, glibc >= 2.35).
The freed whole pages leave the file (read-around would read their zeros): the first
PT_LOAD is split around them, addresses unchanged; its new program header takes PT_PHDR's place
(lld, gold) or room made after the table (GNU ld: the tables and the note slide by one entry);
--keep-freed leaves them. On AArch64 the cut is a multiple of the segments' p_align (64 KiB in
Debian), so the output loads on 4, 16 and 64 KiB kernels; --check's real loads run under
qemu-aarch64 (--emulator, or the arm64 root of scripts/arm64-root.sh / --root).
PIE executables: PT_PHDR stays; when the program headers need room the interpreter path, notes
and tables after them slide to make it (GNU strip/objcopy keep the table there), else the table
moves into the freed space and a warning says GNU strip breaks that output; without spare slots (lld) the dynamic array, which ld.so writes (DT_DEBUG), moves to a
new writable PT_LOAD after the last segment. Their self form (x86-64) runs the routine as the only
DT_PREINIT_ARRAY entry (before any library's initializer, on every glibc). --check starts IN and OUT up to their entry point (ptrace,
ASLR off) and compares their writable memory; --run='ARGS' also runs both and compares their output.
Already packed input: "nothing to do", exit 0 (with --force, OUT becomes a copy of IN).
Exit status: 0 packed, 1 --check found a difference (OUT not written), 2 bad input. With --json,
a check that fails or refuses the input still prints the document (status check-failed or check-refused).
See docs/relocation-packing.md.
"""


def add_arguments(p):
    p.add_argument("input", metavar="IN",
                   help="linked ELF shared library or PIE executable (x86-64 or AArch64, RELA, no TEXTREL)")
    p.add_argument("-o", "--output", metavar="OUT", required=True, help="packed file to write")
    p.add_argument("--check", action="store_true",
                   help="prove equivalence before writing OUT: simulated loader at two load bases, then real loads "
                        "of IN and OUT (ASLR off) with equal writable bytes (executables: started up to their entry "
                        "point under ptrace)")
    p.add_argument("--run", metavar="ARGS",
                   help="for an executable (implies --check): also run IN and OUT with these arguments (shell "
                        "words; --run='--flag ...' when they start with a dash) and require the same exit status and "
                        "standard output")
    p.add_argument("--json", action="store_true", help="print an elflayout-pack-relocs JSON document")
    p.add_argument("--force", action="store_true", help="replace an existing OUT (and copy already-packed input)")
    p.add_argument("--format", choices=("relr", "self", "auto"), default="auto",
                   help="packed form: relr (DT_RELR, glibc >= 2.36), self (self-applying, any glibc), "
                        "auto (relr if --min-glibc >= 2.36, else self; default)")
    p.add_argument("--keep-freed", action="store_true",
                   help="leave the freed pages in the file (every file offset stays; read-around may read "
                        "their zeros); default: cut them out")
    p.add_argument("--min-glibc", metavar="X.Y", type=_version,
                   help="oldest glibc the output must load on (default: the glibc of this machine, or of --root; "
                        "an AArch64 library's: of --root or the arm64 root)")
    p.add_argument("--emulator", metavar="CMD",
                   help="run the check's real loads under CMD (e.g. 'qemu-aarch64 -L ROOT'); default for AArch64 "
                        "libraries: qemu-aarch64 with --root or the arm64 root of scripts/arm64-root.sh")
    p.add_argument("--root", metavar="DIR",
                   help="a system root holding the library's dependencies (e.g. a Debian 11 debootstrap): the "
                        "check's real loads run in 'chroot DIR' and the default --min-glibc is DIR's glibc")


def _version(v: str) -> tuple[int, int]:
    import argparse

    try:
        a, b = v.split(".")[:2]
        return int(a), int(b)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a glibc version X.Y: {v!r}") from None


def choose_form(fmt: str, min_glibc, root=None, lib=None) -> tuple[str, tuple[int, int]]:
    """The form to write for --format/--min-glibc/--root; ElflayoutError if relr cannot load there.
    An arm64 ``lib``'s glibc is that of its root (--root, else the arm64 root)."""
    from elflayout import emulator as emulation
    from elflayout.errors import ElflayoutError
    from elflayout.relocs.glibc import RELR_GLIBC, glibc_version

    hdr = emulation.header(lib) if lib is not None else None
    triplet = emulation.TRIPLETS.get(hdr[0] if hdr else "", "x86_64-linux-gnu")
    if min_glibc is None and hdr and hdr[0] in emulation.QEMU and emulation.host_machine() != hdr[0]:
        root = root or emulation.sysroot(hdr[0])
    if min_glibc is None:
        min_glibc = glibc_version(root, triplet)
        if min_glibc is None:
            raise ElflayoutError(f"cannot find the glibc version of {root or 'this machine'}: give --min-glibc X.Y")
    if fmt == "auto":
        fmt = "relr" if min_glibc >= RELR_GLIBC else "self"
    if fmt == "relr" and min_glibc < RELR_GLIBC:
        raise ElflayoutError(f"--format relr needs glibc >= 2.36 (DT_RELR) but --min-glibc is "
                             f"{min_glibc[0]}.{min_glibc[1]}: use --format self or auto")
    return fmt, min_glibc


def _verify(src, tmp, root=None, emulator=None, run=None):
    from rich.console import Console

    from elflayout.relocs import simload

    return simload.check(src, tmp, status=lambda msg: Console(stderr=True).status(msg), root=root, emulator=emulator,
                         run=run)


def run(args) -> int:
    from elflayout import __version__
    from elflayout.errors import ElflayoutError, Finding
    from elflayout.fileio import atomic_output, check_output
    from elflayout.relocs import pack_model
    from elflayout.relocs.pack import AlreadyPacked, pack

    tool = f"elflayout {__version__}"
    check_output(args.output, force=args.force, inputs=(args.input,))
    form, min_glibc = choose_form(args.format, args.min_glibc, args.root, args.input)
    checking = []
    emulator = None
    if (args.check or args.run is not None) and args.emulator:
        from elflayout import emulator as emulation

        emulator = emulation.parse(args.emulator)

    def verify(a, b):
        checking.append(True)
        return _verify(a, b, args.root, emulator, args.run)

    try:
        st = pack(args.input, args.output, verify=verify if args.check or args.run is not None else None,
                  replace=args.force, form=form, cut=not args.keep_freed)
    except (Finding, ElflayoutError) as e:
        # The check's verdict is a result too: --json prints it before the exit status.
        if args.json and checking:
            status = pack_model.CHECK_FAILED if isinstance(e, Finding) else pack_model.CHECK_REFUSED
            print(json.dumps(pack_model.build_unchecked(tool, args.input, status, str(e), e.exit_status), indent=1))
        raise
    except AlreadyPacked as e:
        msg = f"{e}: nothing to do"
        if args.force:
            with atomic_output(args.output, replace=args.force) as tmp:
                shutil.copy2(args.input, tmp)
            msg += f"; copied unchanged to {args.output} (--force)"
        if args.json:
            doc = pack_model.build_nothing(tool, args.input, args.output if args.force else None, msg)
            print(json.dumps(doc, indent=1))
        else:
            print(f"elflayout: {msg}", file=sys.stderr)
        return 0
    doc = pack_model.build_packed(tool, args.input, args.output, st, f"{min_glibc[0]}.{min_glibc[1]}")
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    _print_text(args.input, args.output, pack_model.parse(doc).packed)
    return 0


def _print_text(src, out, p) -> None:
    """The human summary of a ``pack_model.Packed``."""
    print(f"{src} -> {out}")
    print(f"  .rela.dyn {p.rela_dyn_bytes_before:,} -> {p.rela_dyn_bytes_after:,} bytes, "
          f"RELR {p.relr_bytes:,} bytes ({p.packed:,} of {p.relative:,} RELATIVE relocations packed; "
          f"{p.kept:,} kept, DT_RELACOUNT {p.relacount})")
    print(f"  form: {p.form} (loads on {'glibc >= 2.36' if p.form == 'relr' else 'any glibc'}; --min-glibc "
          f"{p.min_glibc})" + (f", applier {p.applier.bytes} bytes at {p.applier.entry:#x} "
                               f"({'DT_PREINIT_ARRAY' if 'DT_PREINIT_ARRAY' in p.dynamic else 'DT_INIT'})"
                               if p.applier else ""))
    print(f"  dynamic array: {p.dynamic}; GLIBC_ABI_DT_RELR: {p.version_need}")
    if p.moved_sections:
        print("  tables moved: " + ", ".join(f"{k} {v:+,} bytes" for k, v in p.moved_sections.items()))
    print(f"  {p.freed_bytes:,} bytes freed (zeroed); packed in {p.pack_s:.2f} s")
    if p.cut:
        print(f"  {p.cut.pages:,} whole freed pages cut from the file (program header {p.cut.program_header})"
              if p.cut.pages else f"  freed pages kept in the file: {p.cut.why}")
    if not p.strip_safe:
        print("  warning: the program header table moved (no room could be made after it in place): "
              "GNU strip/objcopy rewrite this output into one that does not start; use llvm-strip")
    if p.check is not None:
        c = p.check
        real = c["real_load"]
        print(f"  check: relocated images equal at {len(c['bases'])} load bases ({c['compared_bytes']:,} bytes "
              f"compared, {c['excluded_bytes']:,} of dynamic-linking tables checked field by field); "
              f"real {'start' if 'started' in str(c.get('dlopen')) else 'load'} "
              f"{'equal' if isinstance(real, dict) else real}"
              + (f" ({real['compared_bytes']:,} writable bytes)" if isinstance(real, dict) else ""))
        if c.get("run"):
            print(f"  --run {c['run']['args']}: same exit status ({c['run']['status']}) and output "
                  f"({c['run']['stdout_bytes']:,} bytes)")
