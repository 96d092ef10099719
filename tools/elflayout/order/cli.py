"""``elflayout order``: a profile → object order, lld/gold ordering file or GNU ld script."""

from __future__ import annotations

import json
import sys

from elflayout import fileio
from elflayout.order import formats, pipeline

SUMMARY = "turn a profile into an object order, lld/gold ordering file or GNU ld script"
EPILOG = """\
examples:
  # lld: functions in first-access order, the rest after in link order
  elflayout order llc.json --format lld -o llc.order
  ld.lld ... --symbol-ordering-file=llc.order

  # gold: input sections, with data sections (-fdata-sections) placed too
  elflayout order llc.json --format gold --objects-from libLLVM.map -o llc.sections
  g++ -fuse-ld=gold ... -Wl,--section-ordering-file=llc.sections

  # GNU ld 2.40: a script that keeps the default one (INSERT)
  elflayout order py.json --format ld-script -o order.ld && gcc ... -Wl,-T,order.ld

  # lld: also put the symbol names ld.so reads first in .dynstr (-u response file)
  elflayout order llc.json --format lld --algorithm hot-last --lib libLLVM-16.so.1 \\
      --dynstr-out llc.dynstr.rsp -o llc.order
  g++ -fuse-ld=lld ... -Wl,--symbol-ordering-file=llc.order -Wl,@llc.dynstr.rsp

  # a profile of several workloads (profile --workload/--stdout): code any of them
  # touches goes in the hot region, what all of them share first
  elflayout order set.json --format lld --combine shared -o set.order

  # object order (mold; objects without -ffunction-sections), untouched objects kept
  elflayout order py.json --format objects --objects-from libpython.map -o objs.txt
"""


def add_arguments(p) -> None:
    p.add_argument("profile", help="profile (elflayout-profile v1)")
    p.add_argument("--format", required=True, choices=formats.FORMATS, help="what to write")
    add_ordering_arguments(p)
    p.add_argument("--data-script", metavar="LD",
                   help="lld only: also write a linker script (-T, ends with INSERT) placing the ordered data "
                        "sections, symbol-less ones (jump tables) included, before .rodata/.data")
    p.add_argument("--no-hot-strings", action="store_true",
                   help="--data-script without the touched objects' merged strings (.rodata.str*) in a pool of their own")
    p.add_argument("--string-pool", action="store_true",
                   help="--data-script leads with an output section .rodata.hotstr of the hot string pools "
                        "(.rodata.hotstr*) that elflayout link --hot-strings (split.hotstrings) writes into objects")
    p.add_argument("--hot-constants", action="store_true",
                   help="--data-script: the touched objects' merged constants (.rodata.cst*) in the hot pool too")
    p.add_argument("--sparse-last", action="store_true",
                   help="--data-script: big sections touched on few of their pages at the end of the hot data, "
                        "each named with its file")
    p.add_argument("--dynstr-out", metavar="RSP",
                   help="lld only: also write a linker response file of -u options that puts the dynamic-symbol "
                        "names ld.so reads (LIB's symbol relocations, the program's imports) first in .dynstr")
    p.add_argument("--dynstr-exe", metavar="EXE", action="append", default=None,
                   help="program whose imports count as read names (repeatable; default: the profile's argv[0])")
    p.add_argument("-o", "--output", required=True, help="file to write")
    p.add_argument("--force", action="store_true", help="replace existing output files")
    p.add_argument("--report", action="store_true", help="print the resolution report (JSON) on stdout")


def add_ordering_arguments(p, auto: bool = False) -> None:
    """The options of ``pipeline.Request``, the same for ``order`` and ``link`` (``auto``:
    ``link``'s default algorithm, the one the readahead model predicts best)."""
    if auto:
        p.add_argument("--algorithm", default="auto",
                       help="layout algorithm: auto (default: whichever of first-access and hot-last the readahead "
                            "model predicts reads fewer pages of the profiled library; hot-last with lld only), "
                            "first-access, hot-last (lld: touched code at the end of .text, next to .init/.plt)")
    else:
        p.add_argument("--algorithm", default="first-access", help="layout algorithm: first-access (default), hot-last (lld: touched code at the end of .text, next to .init/.plt)")
    p.add_argument("--target", help="which target of the profile (path, file name or build-id)")
    p.add_argument("--lib", help="the library the profile must belong to (build-id checked)")
    p.add_argument("--objects-from", metavar="MAP",
                   help="link map of the link to order (or of a previous link of the same objects): symbol/section "
                        "names to match, objects in link order")
    p.add_argument("--no-data", action="store_true", help="order code only, not data sections")
    p.add_argument("--no-move-rodata", action="store_true",
                   help="GNU ld script: leave the read-only data (.rodata, .gcc_except_table, the unwind tables) "
                        "where the default script puts it, after the code; default: before the code, next to the "
                        "dynamic tables ld.so reads, as lld places it (inserted before .init)")
    p.add_argument("--allow-stale-profile", action="store_true",
                   help="use a profile of another build of --lib (names still match; offsets may not)")
    p.add_argument("--combine", choices=pipeline.COMBINE_RULES,
                   help="a profile of several workloads: re-combine their first-access ranks (shared: what every "
                        "workload touches first, then what fewer do; phased: shared within phases of workloads "
                        "grouped by footprint, the short ones' code first; earliest: what any workload touches early "
                        "comes first; mean: what most touch early; concat: the first workload's order, the others "
                        "appended); default: the profile's own order")


def request(args, fmt: str, **link) -> pipeline.Request:
    """The ``pipeline.Request`` of the options ``add_ordering_arguments`` added; ``link``:
    what a link command adds (``Request``'s last fields)."""
    return pipeline.Request(args.profile, fmt, algorithm=args.algorithm, target=args.target, lib=args.lib,
                            objects_from=args.objects_from, data=not args.no_data, combine=args.combine,
                            allow_stale_profile=args.allow_stale_profile, move_rodata=not args.no_move_rodata, **link)


def run(args) -> int:
    out = fileio.check_output(args.output, force=args.force, inputs=(args.profile,))
    pipeline.check_companions(args.format, args.data_script is not None, args.dynstr_out is not None)
    for extra in (args.dynstr_out, args.data_script):
        if extra is not None:
            fileio.check_output(extra, force=args.force, inputs=(args.profile, args.output))
    try:
        o = pipeline.order_files(request(args, args.format), out, data_script=args.data_script, dynstr_out=args.dynstr_out,
                                 hot_strings=not args.no_hot_strings, dynstr_exes=args.dynstr_exe,
                                 string_pool=args.string_pool, hot_constants=args.hot_constants,
                                 sparse_last=args.sparse_last)
    except pipeline.ThinOrdering as e:
        print(f"elflayout: error: {e}", file=sys.stderr)
        return 1
    for line in pipeline.summary_lines(o, out, args.data_script, args.dynstr_out):
        print(line, file=sys.stderr)
    if args.report:
        print(json.dumps(o.report, indent=1))
    return 0
