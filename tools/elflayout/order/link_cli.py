"""``elflayout link``: run a real link command with a profile's ordering applied, then check it."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from elflayout import fileio
from elflayout.errors import ElflayoutError
from elflayout.order import formats, pipeline
from elflayout.order.cli import add_ordering_arguments, request
from elflayout.toolchain import linker_name
from elflayout.order.link import (DEFAULT_FORMAT, apply, check_output, check_request, command_binds_now, companion_args,
                                  parse_command, split_command)

SUMMARY = "run a real link command with a profile's ordering applied"
EPILOG = """\
examples:
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
  # objects built without -ffunction-sections: split them first (docs/splitting.md)
  elflayout link --split --profile py.json --linker lld -- gcc -shared -fuse-ld=lld -o libpy.so \\
      -Wl,--whole-archive libpython3.11-pic.a -Wl,--no-whole-archive -lm
  # packed at link time, loading on glibc < 2.36 too (relrhack's way; docs/relocation-packing.md)
  elflayout link --pack self --check --linker lld -- gcc -shared -fuse-ld=lld -o libx.so *.o

What is added: lld --symbol-ordering-file, gold --section-ordering-file, bfd -T script
with INSERT, mold: object order. Nothing else: the command keeps its own linker (a
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
    add_ordering_arguments(p)
    p.add_argument("--keep-order-file", metavar="PATH", help="write the ordering file here (default: a temporary file)")
    p.add_argument("--min-order", type=float, default=0.9,
                   help="fraction of profiled functions that must be in order for the ordering to count as honoured (0.9)")
    p.add_argument("--data-script", action="store_true",
                   help="lld: also place the data sections by an INSERT script (-T; jump tables have no symbol)")
    p.add_argument("--dynstr", action="store_true",
                   help="lld: also put the names ld.so reads first in .dynstr (-u/-y response file; needs the "
                        "profiled library: --lib, else the profile's target path)")
    p.add_argument("--split", action="store_true",
                   help="first give the command's objects and .a archives one section per function and data "
                        "object (elflayout split, into a temporary directory) and link those")
    p.add_argument("--pack", choices=("relr", "self"),
                   help="also pack RELATIVE relocations at link time: relr (-z pack-relative-relocs, glibc >= 2.36) "
                        "or self (relr + an injected self-applying routine and hidden tags, relrhack's way: any "
                        "glibc; for libraries pack-relocs cannot make self-applying post-link)")
    p.add_argument("--check", action="store_true",
                   help="with --pack self: prove the output equivalent to the linker's DT_RELR output (simulated "
                        "loader at two bases, real loads) before writing it")
    p.add_argument("--root", metavar="DIR", help="with --pack self --check: the output must also load in 'chroot DIR'")
    p.add_argument("--force", action="store_true", help="replace --keep-order-file")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- LINK COMMAND ...")


def run(args) -> int:
    parsed = parse_command(args.command, None if args.linker is None else linker_name(args.linker))
    linker = args.linker = parsed["linker"]
    fmt = DEFAULT_FORMAT[linker] if args.format == "auto" else args.format
    if args.pack and linker == "gold":
        raise ElflayoutError("--pack: gold has no -z pack-relative-relocs (use lld, bfd or mold)")
    if (args.check or args.root) and args.pack != "self":
        raise ElflayoutError(f"{'--check' if args.check else '--root'}: only with --pack self")
    if args.root and not args.check:
        raise ElflayoutError("--root: only with --check (it is where the check loads the output)")
    if args.profile is None:
        if not args.pack:
            raise ElflayoutError("link: give --profile (ordering) and/or --pack FORM")
        extra = [o for o, on in (("--split", args.split), ("--data-script", args.data_script),
                                 ("--dynstr", args.dynstr), ("--keep-order-file", args.keep_order_file),
                                 ("--lib", args.lib), ("--no-data", args.no_data), ("--combine", args.combine),
                                 ("--allow-stale-profile", args.allow_stale_profile)) if on]
        if extra:
            raise ElflayoutError(f"{extra[0]}: an ordering option, which needs --profile")
        return _link(parsed, parsed["cmd"], args)
    check_request(parsed, linker, fmt, args.split, args.data_script, args.dynstr)
    if args.keep_order_file:
        fileio.check_output(args.keep_order_file, force=args.force, inputs=(args.profile,))
    cmd_objs = [parsed["cmd"][p] for p in parsed["object_positions"]]
    o = pipeline.order(request(args, fmt, default_target=Path(parsed["output"]).name, objects=tuple(cmd_objs),
                               bind_now=command_binds_now(parsed["cmd"]), split=args.split,
                               header=f"generated by elflayout link --linker {linker} from {Path(args.profile).name}"))
    for w in o.warnings:
        print(f"elflayout: warning: {w}", file=sys.stderr)
    f, stats = o.layout.report["functions"], o.stats
    _say(f"{f['matched']}/{f['profiled']} profiled functions matched; applying {fmt} ordering for {linker}")
    if stats.get("shared_section_objects"):
        n = stats["shared_section_objects"]
        _say(f"profiled code in the plain .text of {n} object{'s' if n != 1 else ''} "
             f"({', '.join(stats['shared_section_examples'][:3])}): gold names sections, not files, so '.text' moves "
             f"every object's plain .text; --split gives each function its own section")
    with tempfile.TemporaryDirectory(prefix="elflayout-link-") as td:
        order_file = Path(args.keep_order_file) if args.keep_order_file else Path(td) / f"order.{fmt}"
        fileio.atomic_write_text(order_file, o.text)
        if args.split:
            parsed = split_command(parsed, Path(td) / "split", _say)
        cmd = apply(parsed, linker, fmt, o.text, order_file)
        cmd += companion_args(parsed, o, Path(td), args.data_script, args.dynstr, _say)
        shown = cmd if len(cmd) <= 24 else [*cmd[:12], f"... ({len(cmd) - 16} more arguments) ...", *cmd[-4:]]
        _say(shlex.join(shown))
        rc = _link(parsed, cmd, args)
        if rc:
            return rc
    from elflayout.order.check import ordered_sections_of
    from elflayout.order.link import OrderNotHonoured, map_of

    sections = ordered_sections_of(o.text) if fmt in ("gold", "ld-script") else None
    try:
        lines = check_output(parsed["output"], o.target, fmt, cmd_objs, linker, args.min_order, map_of(cmd), sections or None)
    except OrderNotHonoured as e:
        _say_check(e.lines, args.split)
        raise
    _say_check(lines, args.split)
    return 0


def _say_check(lines: list[str], split: bool = False) -> None:
    from elflayout.order.check import SPLIT_DONE, SPLIT_HINT

    for line in lines:
        # the remedy for shared sections is the command just run: say what split did instead
        print("elflayout: check: " + (line.replace(SPLIT_HINT, SPLIT_DONE) if split else line), file=sys.stderr)


def _run(cmd: list[str]) -> int:
    try:
        r = subprocess.run(cmd)
    except FileNotFoundError:
        raise ElflayoutError(f"{cmd[0]}: command not found") from None
    if r.returncode != 0:
        print(f"elflayout: link command failed (exit {r.returncode})", file=sys.stderr)
    return r.returncode


def _link(parsed: dict, cmd: list[str], args) -> int:
    """Run the link, packed as --pack asks (relocs/linkself.py)."""
    from elflayout.relocs import linkself

    if args.pack == "relr":
        return linkself.link_relr(cmd, parsed["driver"], parsed["output"], _run, say=_say)
    if args.pack != "self":
        return _run(cmd)
    from rich.console import Console

    st = linkself.link(cmd, parsed["driver"], parsed["output"], _run, check_output=args.check, root=args.root,
                       say=_say, status=lambda msg: Console(stderr=True).status(msg))
    if isinstance(st, int):
        return st
    _say(f"self-applying form ({st['links']} link{'s' if st['links'] > 1 else ''}): {st['self_applied']:,} of "
         f"{st['relr_relocations']:,} DT_RELR relocations applied by the routine at {st['applier']['entry']:#x} "
         f"(DT_INIT), {st['kept_for_ld_so']:,} back to RELA for ld.so; DT_RELR* tags hidden, "
         f"{st['version_need']}")
    if "check" in st:
        c, real = st["check"], st["check"].get("real_load")
        _say(f"check: relocated images equal at {len(c['bases'])} load bases; real load "
             + ("equal" if isinstance(real, dict) else str(real))
             + ("; loads in " + str(args.root) if c.get("root_dlopen") else ""))
    return 0


def _say(msg: str) -> None:
    print("elflayout: link: " + msg, file=sys.stderr)
