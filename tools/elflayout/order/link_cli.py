"""``elflayout link``: run a real link command with a profile's ordering applied, then check it."""

from __future__ import annotations

import argparse
import sys

from elflayout.order import formats
from elflayout.order.cli import add_ordering_arguments
from elflayout.order.link import OrderNotHonoured
from elflayout.order.relink import LinkOptions, relink

SUMMARY = "run a real link command with a profile's ordering applied"
EPILOG = """\
examples:
  # the default path: the best recipe measured (docs/tutorial.md, "3. Order and relink")
  elflayout link --profile py.json --linker lld -- gcc -shared -fuse-ld=lld -o libpy.so *.o -lm
  # the same, step by step turned off
  elflayout link --profile py.json --linker lld --algorithm first-access --no-data --no-dynstr \
      --no-split --pack none --no-check-order -- gcc -shared -fuse-ld=lld -o libpy.so *.o -lm
  # compiler driver: the ordering file is added with -Wl,
  elflayout link --profile llc.json --linker lld -- g++ -shared -fuse-ld=lld -o libLLVM-16.so.1 ...
  # GNU ld 2.40: a generated INSERT script is added with -Wl,-T,
  elflayout link --profile py.json --linker bfd -- gcc -shared -o libpython3.11.so.1.0 *.o -lm
  # mold (no ordering option): the object arguments are reordered
  elflayout link --profile py.json --linker mold -- gcc -shared -fuse-ld=mold -o libpy.so *.o
  # lld with the two companions: data sections by -T script, .dynstr names by -u/-y
  elflayout link --profile llc.json --linker lld --algorithm hot-last --data-script --dynstr \\
      -- g++ -shared -fuse-ld=lld -o libLLVM-16.so.1 ...
  # the profile checked against the profiled library, its workloads re-combined (as order does)
  elflayout link --profile set.json --lib /usr/lib/libLLVM-16.so.1 --combine shared --linker lld \\
      -- g++ -shared -fuse-ld=lld -o build/libLLVM-16.so.1 ...
  # direct linker invocation (--linker inferred from the command: ld.gold → gold)
  elflayout link --profile p.json -- ld.gold -shared -o libx.so a.o b.o
  # versioned toolchains, run as given: ld.lld-19, clang-22 -fuse-ld=lld-22, --ld-path=
  elflayout link --profile p.json -- ld.lld-19 -shared -o libx.so a.o b.o
  elflayout link --profile p.json -- clang-22 -flto=thin -fuse-ld=lld-22 -shared -o libx.so a.o b.o
  # objects built without -ffunction-sections are split first (docs/splitting.md); forced:
  elflayout link --split --profile py.json --linker lld -- gcc -shared -fuse-ld=lld -o libpy.so \\
      -Wl,--whole-archive libpython3.11-pic.a -Wl,--no-whole-archive -lm
  # packed at link time, loading on glibc < 2.36 too (relrhack's way; docs/relocation-packing.md)
  elflayout link --pack self --check --linker lld -- gcc -shared -fuse-ld=lld -o libx.so *.o

Default steps (each printed at the end with why and what it predicts; each can be
turned off): split when an object holds several functions in one code section (--no-split);
the algorithm the readahead model predicts reads fewer pages of the profiled library,
first-access or hot-last (--algorithm NAME); with first-access and lld, cold code on the
folios whose touch would start an asynchronous read of cold code (--no-readahead-marks);
data order (--no-data; lld: a -T script, --no-data-script); lld: .dynstr order
(--no-dynstr); --pack auto (relr on glibc >= 2.36, else self; none with gold and mold;
--pack none); debug info and symbol tables moved off the file's tail into the hole where
the model predicts the fewest pages, when that beats leaving them (--no-move-symtab); GNU
ld: the read-only data before the code, next to the dynamic tables, as lld places it
(--no-move-rodata); gold and GNU ld: a second link with the touched functions the model's
last read of them covers listed after the cold code, kept when the model predicts fewer
pages (--no-code-tail); gold, GNU ld and mold: .dynstr rewritten after the link with the
strings ld.so reads first, when the model predicts fewer pages (--no-reorder-dynstr);
check-order of the output (--no-check-order).

What is added: lld --symbol-ordering-file, gold --section-ordering-file, bfd -T script
with INSERT, mold: object order; with lld the data script and .dynstr response file;
-z pack-relative-relocs. Nothing else: the command keeps its own linker (a
driver command choosing none runs ld, i.e. GNU ld; --linker naming another is refused
with the fix), and a direct linker call gets no driver flags. The link's own output and exit status pass through
when it fails. The output is then checked (as check-order does): exit 1 when the
linker did not honour the ordering (e.g. objects built without -ffunction-sections).
"""

def add_arguments(p) -> None:
    p.add_argument("--profile", help="profile (elflayout-profile v1); optional with --pack")
    p.add_argument("--linker", help="the linker the command runs: bfd, gold, lld or mold (a program name such as "
                   "ld.lld-22 names one too); default: as the command chooses it (ld.lld-22 ...; -fuse-ld=, "
                   "--ld-path=; a driver choosing none runs ld)")
    p.add_argument("--format", choices=("auto",) + formats.FORMATS, default="auto",
                   help="ordering to apply (auto: lld→lld, gold→gold, bfd→ld-script, mold→objects)")
    add_ordering_arguments(p, auto=True)
    p.add_argument("--keep-order-file", metavar="PATH", help="write the ordering file here (default: a temporary file)")
    p.add_argument("--min-order", type=float, default=0.9,
                   help="fraction of profiled functions that must be in order for the ordering to count as honoured (0.9)")
    p.add_argument("--data-script", action=argparse.BooleanOptionalAction, default=None,
                   help="lld: place the data sections by an INSERT script (-T; jump tables have no symbol); "
                        "default: on with lld unless --no-data (gold and GNU ld order data in their own file)")
    p.add_argument("--dynstr", action=argparse.BooleanOptionalAction, default=None,
                   help="lld: put the names ld.so reads first in .dynstr (-u/-y response file; needs the "
                        "profiled library: --lib, else the profile's target path); default: on with lld when "
                        "that library is there")
    p.add_argument("--split", action=argparse.BooleanOptionalAction, default=None,
                   help="first give the command's objects and .a archives one section per function and data "
                        "object (elflayout split, into a temporary directory) and link those; default: when an "
                        "object holds several functions in one code section (built without -ffunction-sections)")
    p.add_argument("--pack", choices=("auto", "relr", "self", "none"), default=None,
                   help="pack RELATIVE relocations at link time: relr (-z pack-relative-relocs, glibc >= 2.36), "
                        "self (relr + an injected self-applying routine and hidden tags, relrhack's way: any "
                        "glibc) or none; default with --profile: auto (relr when this machine's glibc is 2.36 or "
                        "newer, else self; none with gold and mold)")
    p.add_argument("--move-symtab", action=argparse.BooleanOptionalAction, default=None,
                   help="after the link, move the sections no segment loads (.symtab, .strtab, .comment, .debug_*) "
                        "from after the last segment into a file-offset hole between segments, where the "
                        "readahead model predicts the fewest pages read for the profile (without a profile: "
                        "after the executable PT_LOAD for first-access, else before it); read-ahead of the last "
                        "segment's pages then stops at end of file (mapped bytes unchanged); default with "
                        "--profile: when the model predicts fewer pages than leaving them")
    p.add_argument("--no-readahead-marks", action="store_true",
                   help="first-access with lld: do not keep cold the folios of hot code whose touch the readahead "
                        "model predicts would start an asynchronous read of cold code (by default cold code "
                        "sections fill them when the model predicts fewer pages)")
    p.add_argument("--no-code-tail", action="store_true",
                   help="gold and GNU ld: do not relink with the touched functions that the model's last read of the "
                        "touched code covers listed after the cold code (default: when that read runs 4 or more "
                        "pages into cold code, and only if the model predicts fewer pages)")
    p.add_argument("--order-dynsym", action="store_true",
                   help="after the link, put the dynamic symbols ld.so looks up at start-up (the output's symbol "
                        "relocations, the profiled program's imports) first in .dynsym, .gnu.version and the "
                        ".gnu.hash chains; every lookup is proved to find the same symbol (needs .gnu.hash only: "
                        "--hash-style=gnu)")
    p.add_argument("--reorder-dynstr", action=argparse.BooleanOptionalAction, default=None,
                   help="after the link, rewrite .dynstr with the strings ld.so reads at start-up first (the "
                        "output's symbol relocations, the profiled program's imports, the dynamic and version "
                        "strings); every reference is mapped and proved to name the same string; default with "
                        "--profile: with gold, GNU ld and mold when the readahead model predicts fewer pages "
                        "(lld orders .dynstr at the link: --dynstr)")
    p.add_argument("--hot-strings", action=argparse.BooleanOptionalAction, default=None,
                   help="lld with the data script: first move the string literals that relocations of the profiled "
                        "code and data reach out of their objects' mergeable pools into pools of their own "
                        "(the command's objects and archives rewritten into a temporary directory, each proved), "
                        "placed first in .rodata: lld reads a merged string pool whole once a few of its strings are; "
                        "with a profile that recorded the strings read (profile --strings), those move, from every "
                        "object; default: on with such a profile when lld's data script is used")
    p.add_argument("--hot-constants", action=argparse.BooleanOptionalAction, default=None,
                   help="lld with the data script: the merged constants (.rodata.cst*) of the objects whose code "
                        "ran go with the hot data (lld pools every object's constants, so the few start-up reads "
                        "sit in the cold .rodata); default: on when the profile recorded the read-only bytes read "
                        "(profile --strings), which place the rest of the hot data as exactly")
    p.add_argument("--check", action="store_true",
                   help="with --pack self: prove the output equivalent to the linker's DT_RELR output (simulated "
                        "loader at two bases, real loads) before writing it")
    p.add_argument("--root", metavar="DIR", help="with --pack self --check: the output must also load in 'chroot DIR'")
    p.add_argument("--no-check-order", action="store_true",
                   help="do not check the output's function order against the profile (check-order)")
    p.add_argument("--force", action="store_true", help="replace --keep-order-file")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- LINK COMMAND ...")


def run(args) -> int:
    from rich.console import Console

    try:
        res = relink(args.command, options(args), _say, status=lambda msg: Console(stderr=True).status(msg))
    except OrderNotHonoured as e:
        _say_check(e.lines, getattr(e, "split", False))
        raise
    if res.status:
        return res.status
    _say_check(res.check, any(s.name == "split" and s.value for s in res.steps))
    for s in res.steps:
        _say(s.line())
    return 0


def options(args) -> LinkOptions:
    """The ``LinkOptions`` of the parsed arguments."""
    return LinkOptions(profile=args.profile, linker=args.linker, format=args.format, algorithm=args.algorithm,
                       target=args.target, lib=args.lib, objects_from=args.objects_from, data=not args.no_data,
                       combine=args.combine, allow_stale_profile=args.allow_stale_profile,
                       keep_order_file=args.keep_order_file, force=args.force, min_order=args.min_order,
                       data_script=args.data_script, dynstr=args.dynstr, split=args.split, pack=args.pack,
                       check=args.check, root=args.root, check_order=not args.no_check_order,
                       move_symtab=args.move_symtab, order_dynsym=args.order_dynsym, hot_strings=args.hot_strings,
                       hot_constants=args.hot_constants,
                       reorder_dynstr=args.reorder_dynstr,
                       readahead_marks=not args.no_readahead_marks, move_rodata=not args.no_move_rodata,
                       code_tail=not args.no_code_tail)


def _say_check(lines: list[str], split: bool = False) -> None:
    from elflayout.order.check import SPLIT_DONE, SPLIT_HINT

    for line in lines:
        # the remedy for shared sections is the command just run: say what split did instead
        print("elflayout: check: " + (line.replace(SPLIT_HINT, SPLIT_DONE) if split else line), file=sys.stderr)


def _say(msg: str) -> None:
    print("elflayout: link: " + msg, file=sys.stderr)
