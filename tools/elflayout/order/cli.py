"""``elflayout order``: a profile → object order, lld/gold ordering file or GNU ld script."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from elflayout import fileio
from elflayout.errors import ElflayoutError
from elflayout.order import algorithms, formats
from elflayout.order.profile_input import check_identity, load_profile, pick_target, require_touches

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
    p.add_argument("--algorithm", default="first-access", help="layout algorithm: first-access (default), hot-last (lld: touched code at the end of .text, next to .init/.plt)")
    p.add_argument("--target", help="which target of the profile (path, file name or build-id)")
    p.add_argument("--lib", help="the library the profile must belong to (build-id checked)")
    p.add_argument("--objects-from", metavar="MAP",
                   help="link map of the link to order: symbol/section names to match, objects in link order")
    p.add_argument("--no-data", action="store_true", help="order code only, not data sections")
    p.add_argument("--data-script", metavar="LD",
                   help="lld only: also write a linker script (-T, ends with INSERT) placing the ordered data "
                        "sections, symbol-less ones (jump tables) included, before .rodata/.data")
    p.add_argument("--no-hot-strings", action="store_true",
                   help="--data-script without the touched objects' merged strings (.rodata.str*) in a pool of their own")
    p.add_argument("--dynstr-out", metavar="RSP",
                   help="lld only: also write a linker response file of -u options that puts the dynamic-symbol "
                        "names ld.so reads (LIB's symbol relocations, the program's imports) first in .dynstr")
    p.add_argument("--dynstr-exe", metavar="EXE", action="append", default=None,
                   help="program whose imports count as read names (repeatable; default: the profile's argv[0])")
    p.add_argument("-o", "--output", required=True, help="file to write")
    p.add_argument("--force", action="store_true", help="replace existing output files")
    p.add_argument("--allow-stale-profile", action="store_true",
                   help="use a profile of another build of --lib (names still match; offsets may not)")
    p.add_argument("--combine", choices=("shared", "phased", "earliest", "mean", "concat"),
                   help="a profile of several workloads: re-combine their first-access ranks (shared: what every "
                        "workload touches first, then what fewer do; phased: shared within phases of workloads "
                        "grouped by footprint, the short ones' code first; earliest: what any workload touches early "
                        "comes first; mean: what most touch early; concat: the first workload's order, the others "
                        "appended); default: the profile's own order")
    p.add_argument("--report", action="store_true", help="print the resolution report (JSON) on stdout")


def build(args) -> tuple[str, dict]:
    """Compute the layout and render it; returns (text, report). Shared with ``link``."""
    doc = load_profile(args.profile)
    if getattr(args, "combine", None):
        from elflayout.profile.merge import recombine

        doc = recombine(doc, args.combine)
    lib = getattr(args, "lib", None)
    want = args.target or (lib if lib and len(doc.targets) > 1 else None)
    t = pick_target(doc, args.profile, want)
    require_touches(t, args.profile)
    warnings = []
    bind_now = None
    if getattr(args, "lib", None):
        from elflayout.elfcore import ElfImage

        with ElfImage(args.lib) as img:
            w = check_identity(t, img.identity(), args.profile, getattr(args, "allow_stale_profile", False))
            bind_now = img.binds_now
        if w:
            warnings.append(w)
    elif args.format == "ld-script":
        bind_now = library_binds_now(t.path)
    universe, note = load_universe(args.objects_from, t.map, t.path)
    if note:
        warnings.append(note)
    alg = algorithms.get(args.algorithm)
    layout = alg.compute(t, universe, data=not args.no_data)
    check_layout(layout, args.format, args.profile)
    header = f"generated by elflayout order --format {args.format} --algorithm {args.algorithm}\nprofile: {Path(args.profile).name} target {t.name} build-id {t.build_id}"
    text, stats = formats.write(args.format, layout, universe.objects if universe and universe.objects else None, header,
                                bind_now=bind_now)
    report = {"format": args.format, "target": t.path, **layout.report, "output": stats, "warnings": warnings,
              "_layout": layout, "_header": header, "_universe": universe}
    return text, report


def library_binds_now(path) -> bool | None:
    """Whether the profiled library (a build of the same link) uses ``-z now``; None when
    it is not there to say."""
    from elflayout.elfcore import ElfImage

    if not path or not os.path.isfile(path):
        return None
    try:
        with ElfImage(path) as img:
            return img.binds_now
    except ElflayoutError:
        return None


def write_dynstr(args, rsp) -> dict:
    """The -u response file for ``--dynstr-out`` (``dynstr.py``): names from the library
    (``--lib``, else the profile's target), imports of ``--dynstr-exe`` or argv[0]."""
    from elflayout.order import dynstr

    doc = load_profile(args.profile)
    t = pick_target(doc, args.profile, args.target or (args.lib if args.lib and len(doc.targets) > 1 else None))
    lib = args.lib or t.path
    if not lib or not os.path.exists(lib):
        raise ElflayoutError(f"--dynstr-out: the library {lib} is not there: give it with --lib")
    exes = args.dynstr_exe if args.dynstr_exe is not None else dynstr.workload_executable(doc.metadata)
    for e in exes:
        if not os.path.exists(e):
            raise ElflayoutError(f"{e}: no such file (--dynstr-exe)")
    names, rep = dynstr.read_names(lib, exes)
    fileio.atomic_write_text(rsp, dynstr.write_lld_undefined(names, rep["weak_undefined"]))
    return rep


def check_layout(layout, fmt: str, profile) -> None:
    """An ordering with nothing in it is an error, not an empty file."""
    if fmt == "objects" and layout.objects:
        return
    if fmt != "objects" and (layout.functions or layout.data):
        return
    f = layout.report.get("functions", {})
    what = "objects" if fmt == "objects" else "functions or data sections"
    raise ElflayoutError(
        f"{profile}: nothing to order: no {what} matched ({f.get('profiled', 0)} functions profiled, "
        f"{f.get('matched', 0)} matched); a page-granularity (trace) profile names no functions: "
        "record one with --backend valgrind")


# An ordering naming fewer than this fraction of the profiled functions changes almost
# nothing: most profiled functions have no name the linker knows (a stripped library's
# functions are FDE extents, ``fde_<vaddr>``), so the file is refused, not written.
MIN_NAMED_FRACTION = 0.01


def names_almost_nothing(report: dict) -> str | None:
    """A sentence with a hint when the ordering names almost none of the profiled functions."""
    profiled = report.get("functions", {}).get("profiled", 0)
    st = report.get("output", {})
    named = st.get("symbols", 0) - st.get("data_symbols", 0) if "symbols" in st else \
        st.get("text_sections", st.get("objects", 0))
    if report.get("format") == "objects" or profiled < 100 or named >= MIN_NAMED_FRACTION * profiled:
        return None
    return (f"the ordering would name {named:,} of {profiled:,} profiled functions (< {MIN_NAMED_FRACTION:.0%}): "
            f"nothing written. The profiled functions have no names the linker knows: is the library stripped? "
            f"Profile a build with symbols (or with its separate debug file installed: "
            f"/usr/lib/debug/.build-id/...), or use --format objects with the link map")


def load_universe(objects_from, profiled_map, profiled_lib=None):
    """Names from the map of the link to order; section extents from the profiled build's map."""
    note = None
    u = None
    if objects_from:
        if not os.path.exists(objects_from):
            raise ElflayoutError(f"{objects_from}: no such file")
        # the profiled build's own map: read it with that build, or its input sections
        # get no file offsets and no data page can be mapped to them
        same = bool(profiled_map) and os.path.exists(profiled_map) and \
            os.path.realpath(profiled_map) == os.path.realpath(objects_from)
        u = _load_map(objects_from, required=True, image=profiled_lib if same else None)
    if profiled_map and os.path.exists(profiled_map):
        if u is None:
            u, note = _load_map(profiled_map, required=False, image=profiled_lib), None
        elif os.path.realpath(profiled_map) != os.path.realpath(objects_from):
            pu = _load_map(profiled_map, required=False, image=profiled_lib)
            if pu is not None:  # data pages are offsets in the profiled build
                u.extents, u.extent_names, u.extent_objects = pu.extents, pu.extent_names, pu.extent_objects
    elif profiled_map:
        note = f"profiled build's map {profiled_map} not found: data pages cannot be mapped to sections"
    return u, note


def _load_map(path, required: bool, image=None):
    from elflayout.order.resolve import universe_from_linkmap

    try:
        return universe_from_linkmap(path, image)
    except ImportError:
        if required:
            raise ElflayoutError(f"{path}: reading link maps needs elflayout.linkmap, which is not installed") from None
        return None


def run(args) -> int:
    out = fileio.check_output(args.output, force=args.force, inputs=(args.profile,))
    rsp = None
    if getattr(args, "dynstr_out", None):
        if args.format != "lld":
            raise ElflayoutError(f"--dynstr-out: only lld orders .dynstr by -u options (not {args.format})")
        rsp = fileio.check_output(args.dynstr_out, force=args.force, inputs=(args.profile, args.output))
    dscript = None
    if getattr(args, "data_script", None):
        if args.format != "lld":
            raise ElflayoutError(f"--data-script: an lld companion of --format lld (not {args.format}); "
                                 "gold and GNU ld order data with their own format")
        dscript = fileio.check_output(args.data_script, force=args.force, inputs=(args.profile, args.output))
    text, report = build(args)
    thin = names_almost_nothing(report)
    if thin:
        print(f"elflayout: error: {thin}", file=sys.stderr)
        return 1
    if dscript is not None:
        dtext, dstats = formats.write_lld_data_script(report.pop("_layout"), report.pop("_header"),
                                                      hot_strings=not args.no_hot_strings,
                                                      universe=report.pop("_universe"))
        if not dstats["data_sections"] and not dstats["string_objects"]:
            raise ElflayoutError(f"{args.profile}: --data-script: no data section to place (record the profile "
                                 "with --data and give the link map: --objects-from or the profile's map)")
        fileio.atomic_write_text(dscript, dtext)
        report["data_script"] = dstats
    report.pop("_layout", None)
    report.pop("_header", None)
    report.pop("_universe", None)
    if rsp is not None:
        report["dynstr"] = write_dynstr(args, rsp)
    fileio.atomic_write_text(out, text)
    f = report["functions"]
    msg = (f"order: {f['matched']}/{f['profiled']} profiled functions matched ({100 * f['matched_fraction']:.1f}%)")
    if "data" in report:
        msg += f", {report['data']['sections']} data sections"
    print(f"{msg} → {out} ({args.format})", file=sys.stderr)
    if "data_script" in report:
        print(f"order: {report['data_script']['data_sections']} data sections, strings of "
              f"{report['data_script']['string_objects']} objects → {args.data_script} "
              f"(-Wl,-T,{args.data_script})"
              + "".join(f"; {o} left as it is (every input section of it is ordered)"
                        for o in report["data_script"]["left_out"]), file=sys.stderr)
    if "dynstr" in report:
        d = report["dynstr"]
        print(f"order: {d['names']} dynamic-symbol names ({d['bytes']:,} bytes; {d['from_relocations']} from "
              f"relocations, {d['from_executables']} imported by {', '.join(Path(e).name for e in d['executables']) or 'no program'}) "
              f"→ {args.dynstr_out} (-Wl,@{args.dynstr_out})", file=sys.stderr)
    for w in report["warnings"]:
        print(f"elflayout: warning: {w}", file=sys.stderr)
    if args.report:
        print(json.dumps(report, indent=1))
    return 0
