"""``elflayout link``: run a real link command with a profile's ordering applied, then check it."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from elflayout.errors import ElflayoutError, Finding
from elflayout.order import algorithms, formats
from elflayout.order.check import check, object_order_fraction, summary_lines
from elflayout.order.profile_input import load_profile, pick_target, require_touches

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
  elflayout link --profile llc.json --linker lld --algorithm hot-last --data-script --dynstr \
      -- g++ -shared -fuse-ld=lld -o libLLVM-16.so.1 ...
  # direct linker invocation
  elflayout link --profile p.json --linker gold -- ld.gold -shared -o libx.so a.o b.o
  # objects built without -ffunction-sections: split them first (docs/splitting.md)
  elflayout link --split --profile py.json --linker lld -- gcc -shared -fuse-ld=lld -o libpy.so \
      -Wl,--whole-archive libpython3.11-pic.a -Wl,--no-whole-archive -lm

What is added: lld --symbol-ordering-file, gold --section-ordering-file, bfd -T script
with INSERT, mold: object order. The link's own output and exit status pass through
when it fails. The output is then checked (as check-order does): exit 1 when the
linker did not honour the ordering (e.g. objects built without -ffunction-sections).
"""

DEFAULT_FORMAT = {"lld": "lld", "gold": "gold", "bfd": "ld-script", "mold": "objects"}
DIRECT = {"ld": "bfd", "ld.bfd": "bfd", "ld.gold": "gold", "gold": "gold", "ld.lld": "lld", "lld": "lld",
          "ld.mold": "mold", "mold": "mold"}
# options whose value is the next argument (so it is not an object file)
_TAKES_VALUE = {"-o", "-T", "-Map", "-L", "-l", "-soname", "-h", "-z", "-e", "-rpath", "--version-script", "-x",
                "-MF", "-MT", "-include", "-isystem", "-I", "-D", "-U", "-Xlinker", "--sysroot", "-dynamic-linker"}
_OBJ_EXT = (".o", ".lo", ".obj")


def add_arguments(p) -> None:
    p.add_argument("--profile", required=True, help="profile (elflayout-profile v1)")
    p.add_argument("--linker", required=True, choices=sorted(DEFAULT_FORMAT), help="the linker the command runs")
    p.add_argument("--format", choices=("auto",) + formats.FORMATS, default="auto",
                   help="ordering to apply (auto: lld→lld, gold→gold, bfd→ld-script, mold→objects)")
    p.add_argument("--algorithm", default="first-access", help="layout algorithm")
    p.add_argument("--target", help="which target of the profile (path, file name or build-id)")
    p.add_argument("--objects-from", metavar="MAP", help="link map of a previous link of the same objects (names)")
    p.add_argument("--keep-order-file", metavar="PATH", help="write the ordering file here (default: a temporary file)")
    p.add_argument("--min-order", type=float, default=0.9,
                   help="fraction of profiled functions that must be in order for the ordering to count as honoured (0.9)")
    p.add_argument("--data-script", action="store_true",
                   help="lld: also place the data sections by an INSERT script (-T; jump tables have no symbol)")
    p.add_argument("--dynstr", action="store_true",
                   help="lld: also put the names ld.so reads first in .dynstr (-u/-y response file; needs the "
                        "profiled library, the profile's target path)")
    p.add_argument("--split", action="store_true",
                   help="first give the command's objects and .a archives one section per function and data "
                        "object (elflayout split, into a temporary directory) and link those")
    p.add_argument("--force", action="store_true", help="replace --keep-order-file")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- LINK COMMAND ...")


def parse_command(cmd: list[str], linker: str) -> dict:
    """What the link command is: driver or direct linker, its output, its object arguments."""
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ElflayoutError("link: no link command given (put it after --)")
    base = Path(cmd[0]).name
    direct = DIRECT.get(base)
    if direct is not None and direct != linker:
        raise ElflayoutError(f"{cmd[0]}: the command runs {direct} but --linker says {linker}")
    fuse = [a for a in cmd[1:] if a.startswith("-fuse-ld=")]
    if direct is None and fuse:
        used = fuse[-1].split("=", 1)[1]
        used = {"ld": "bfd"}.get(Path(used).name.replace("ld.", ""), Path(used).name.replace("ld.", ""))
        if used != linker:
            raise ElflayoutError(f"{fuse[-1]}: the command links with {used} but --linker says {linker}")
    out, objs = None, []
    i = 1
    while i < len(cmd):
        a = cmd[i]
        if a == "-o" and i + 1 < len(cmd):
            out = cmd[i + 1]
            i += 2
            continue
        if a.startswith("-o") and len(a) > 2 and direct is None:
            out = a[2:]
        elif a.startswith("--output="):
            out = a.split("=", 1)[1]
        elif a in _TAKES_VALUE:
            i += 2
            continue
        elif not a.startswith("-") and a.endswith(_OBJ_EXT):
            objs.append(i)
        i += 1
    if out is None:
        raise ElflayoutError(f"{cmd[0]}: the link command has no -o OUTPUT (needed to check the result)")
    return {"cmd": list(cmd), "driver": direct is None, "output": out, "object_positions": objs, "fuse": bool(fuse)}


def apply(parsed: dict, linker: str, fmt: str, text: str, order_file: Path) -> list[str]:
    """The link command with the ordering applied."""
    cmd = list(parsed["cmd"])
    wl = (lambda *a: ["-Wl," + ",".join(a)]) if parsed["driver"] else (lambda *a: list(a))
    if parsed["driver"] and not parsed["fuse"] and linker != "bfd":
        cmd.insert(1, f"-fuse-ld={linker}")
        parsed = dict(parsed, object_positions=[p + 1 for p in parsed["object_positions"]])
    if fmt == "objects":
        pos = parsed["object_positions"]
        wanted = [l for l in text.splitlines() if l]
        if sorted(wanted) != sorted(cmd[p] for p in pos):
            raise ElflayoutError("link: internal error: object order does not list the command's objects")
        for p, o in zip(pos, wanted):
            cmd[p] = o
        return cmd
    if fmt == "lld":
        if linker != "lld":
            raise ElflayoutError(f"--format lld: {linker} has no --symbol-ordering-file (use --format auto)")
        return cmd + wl(f"--symbol-ordering-file={order_file}", "--no-warn-symbol-ordering")
    if fmt == "gold":
        if linker != "gold":
            raise ElflayoutError(f"--format gold: {linker} has no --section-ordering-file (use --format auto)")
        return cmd + wl(f"--section-ordering-file={order_file}")
    if fmt == "ld-script":
        if linker not in ("bfd",):
            raise ElflayoutError(f"--format ld-script: an INSERT script is for GNU ld (bfd), not {linker}")
        return cmd + (["-Wl,-T," + str(order_file)] if parsed["driver"] else ["-T", str(order_file)])
    raise ElflayoutError(f"--format {fmt}: unknown")


def _split_command(parsed: dict, dest: Path) -> dict:
    """The command with its object and archive arguments replaced by split copies."""
    from elflayout.split.api import split_inputs

    cmd = list(parsed["cmd"])
    pos = [i for i, a in enumerate(cmd[1:], 1)
           if not a.startswith("-") and a.endswith(_OBJ_EXT + (".a",)) and os.path.isfile(a)]
    for k, i in enumerate(pos):
        # One directory per input: two inputs may share a file name.
        split_inputs([cmd[i]], dest / str(k))
        cmd[i] = str(dest / str(k) / Path(cmd[i]).name)
    print(f"elflayout: link: split {len(pos)} objects and archives into {dest}", file=sys.stderr)
    return dict(parsed, cmd=cmd)


def run(args) -> int:
    linker = args.linker
    fmt = DEFAULT_FORMAT[linker] if args.format == "auto" else args.format
    parsed = parse_command(args.command, linker)
    if fmt == "objects" and any(a.startswith("@") for a in parsed["cmd"][1:]):
        raise ElflayoutError(f"{parsed['cmd'][0]}: objects inside a response file (@FILE) cannot be reordered; "
                             "expand it on the command line")
    if fmt == "objects" and len(parsed["object_positions"]) < 2:
        raise ElflayoutError(f"{parsed['cmd'][0]}: fewer than two object files on the command line: nothing to reorder")
    if args.split and fmt == "objects":
        raise ElflayoutError("--split: an object order moves whole objects, so splitting them changes nothing")
    extras = [n for n, on in (("--data-script", args.data_script), ("--dynstr", args.dynstr)) if on]
    if extras and (linker != "lld" or fmt != "lld"):
        raise ElflayoutError(f"{extras[0]}: an lld companion (--linker lld, --format lld), not {linker}/{fmt}")
    if args.keep_order_file:
        from elflayout import fileio

        fileio.check_output(args.keep_order_file, force=args.force, inputs=(args.profile,))
    doc = load_profile(args.profile)
    t = pick_target(doc, args.profile, args.target or (Path(parsed["output"]).name if len(doc.targets) > 1 else None))
    require_touches(t, args.profile)
    from elflayout.order.cli import load_universe

    universe, note = load_universe(args.objects_from, t.map, t.path)
    layout = algorithms.get(args.algorithm).compute(t, universe)
    from elflayout.order.cli import check_layout

    check_layout(layout, fmt, args.profile)
    cmd_objs = [parsed["cmd"][p] for p in parsed["object_positions"]]
    text, stats = formats.write(fmt, layout, cmd_objs if fmt == "objects" else None,
                                header=f"generated by elflayout link --linker {linker} from {Path(args.profile).name}")
    f = layout.report["functions"]
    print(f"elflayout: link: {f['matched']}/{f['profiled']} profiled functions matched; applying {fmt} ordering "
          f"for {linker}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="elflayout-link-") as td:
        order_file = Path(args.keep_order_file) if args.keep_order_file else Path(td) / f"order.{fmt}"
        from elflayout.fileio import atomic_write_text

        atomic_write_text(order_file, text)
        if args.split:
            parsed = _split_command(parsed, Path(td) / "split")
        cmd = apply(parsed, linker, fmt, text, order_file)
        wl = (lambda a: "-Wl," + a) if parsed["driver"] else (lambda a: a)
        if args.data_script:
            dtext, dstats = formats.write_lld_data_script(layout)
            if dstats["data_sections"]:
                dfile = Path(td) / "data.ld"
                atomic_write_text(dfile, dtext)
                cmd += [wl("-T"), wl(str(dfile))] if not parsed["driver"] else [f"-Wl,-T,{dfile}"]
            print(f"elflayout: link: data script: {dstats['data_sections']} data sections", file=sys.stderr)
        if args.dynstr:
            from elflayout.order import dynstr

            lib = t.path
            if not lib or not os.path.exists(lib):
                raise ElflayoutError(f"--dynstr: the profiled library {lib} is not there (its relocations name the symbols)")
            names, rep = dynstr.read_names(lib, dynstr.workload_executable(doc.metadata))
            rfile = Path(td) / "dynstr.rsp"
            atomic_write_text(rfile, dynstr.write_lld_undefined(names, rep["weak_undefined"]))
            cmd.append(wl("@" + str(rfile)))
            print(f"elflayout: link: .dynstr: {rep['names']} names first", file=sys.stderr)
        shown = cmd if len(cmd) <= 24 else [*cmd[:12], f"... ({len(cmd) - 16} more arguments) ...", *cmd[-4:]]
        print("elflayout: link: " + shlex.join(shown), file=sys.stderr)
        try:
            r = subprocess.run(cmd)
        except FileNotFoundError:
            raise ElflayoutError(f"{cmd[0]}: command not found") from None
        if r.returncode != 0:
            print(f"elflayout: link command failed (exit {r.returncode})", file=sys.stderr)
            return r.returncode
    out = parsed["output"]
    if not os.path.exists(out):
        raise ElflayoutError(f"{out}: the link command succeeded but wrote no output")
    res = check(out, t)
    for line in summary_lines(res):
        print("elflayout: check: " + line, file=sys.stderr)
    if fmt == "objects":
        frac = object_order_fraction(out, t, cmd_objs)
        print(f"elflayout: check: objects: {'n/a' if frac is None else f'{100 * frac:.1f}%'} of touched objects placed in profile order",
              file=sys.stderr)
    else:
        frac = res["in_order_fraction"]
    if frac is None:
        raise Finding(f"{out}: no profiled function found in the output: cannot tell whether the ordering was honoured")
    if frac < args.min_order:
        raise Finding(f"{out}: {linker} did not honour the ordering: only {100 * frac:.1f}% in profile order "
                      f"(< {100 * args.min_order:.0f}%; objects without -ffunction-sections, or the option ignored?)")
    return 0
