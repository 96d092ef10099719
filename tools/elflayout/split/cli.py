"""``elflayout split OBJ|ARCHIVE... -o DIR [--check] [--json]``: one section per function and data object."""

from __future__ import annotations

import json
import sys
import tempfile

SUMMARY = "give each function and data object its own section in objects built without -ffunction-sections"
EPILOG = """example:
  elflayout split /usr/lib/python3.11/config-3.11-x86_64-linux-gnu/libpython3.11-pic.a -o split/ --check
      libpython3.11-pic.a: 179 objects, 178 split: 16,157 functions and data objects -> 13,192 sections
      (5,758 references the assembler had resolved are now relocations; 2,960 neighbours kept together)
      check (lld): original-order links identical: 19 sections, 7,704,666 bytes, 16,126 symbols
  gcc -shared -o libpython3.11.so.1.0 -Wl,--whole-archive split/libpython3.11-pic.a -Wl,--no-whole-archive ...
      # then `elflayout order --format lld|gold|ld-script` orders functions, not objects

Sections are named as -ffunction-sections -fdata-sections would (.text.<function>,
.rodata.<object>, .data.rel.ro.local.<object> ...). Anything that cannot be proved safe
to separate stays together: sections kept whole are listed with the reason (-v also lists
each object and the neighbours kept together, --json everything). Objects already split are
copied unchanged. --check links originals and outputs in their original order (lld by
default; --linker repeats) and compares every allocated byte and every symbol address;
then links the outputs reversed and in a seeded shuffle and compares every function's
instructions and relocated data words by name; --run CMD also runs a test program
linked both ways ($ELFLAYOUT_OBJECTS, $ELFLAYOUT_LDFLAGS) and compares its output.
Each linker gives its own verdict: identical, differs, or "could not check" with the
linker's first error line when it cannot link the original objects.
Exit status: 0 split (identical with every linker that could link the originals), 1 --check
found a difference, no linker could link the originals, or nothing could be split because
every section had to stay whole (e.g. objects built with -g) (nothing written), 2 bad input
(nothing written). --json prints its document in every case that has a result.
See docs/splitting.md.
"""


def add_arguments(p):
    p.add_argument("inputs", metavar="OBJ|ARCHIVE", nargs="+", help="x86-64 or AArch64 (little-endian LP64) relocatable objects or .a archives")
    p.add_argument("-o", "--output", metavar="DIR", required=True,
                   help="directory for the split files (same names as the inputs)")
    p.add_argument("--check", action="store_true",
                   help="before writing, prove an original-order link of the outputs equals that of the inputs, "
                        "and compare links of the outputs in other orders (reversed, shuffled) with it")
    p.add_argument("--run", metavar="CMD",
                   help="with --check: shell command linking and running a test program, run with the original "
                        "objects and with the split ones in other orders; outputs must match ($ELFLAYOUT_OBJECTS, "
                        "$ELFLAYOUT_LDFLAGS)")
    p.add_argument("--linker", action="append", choices=("lld", "gold", "bfd"),
                   help="linker(s) for --check (default lld; repeat for several)")
    p.add_argument("--json", action="store_true", help="print an elflayout-split JSON document")
    p.add_argument("-v", "--verbose", action="store_true", help="list every section kept whole or glued, and why")
    p.add_argument("--force", action="store_true", help="replace existing files in DIR")


def run(args) -> int:
    from elflayout.errors import ElflayoutError, Finding
    from elflayout.split import api
    from elflayout.split.check import check, inputs_machine, stand_in_objects, verdict
    from elflayout import emulator
    from elflayout.split.equivalence import other_orders

    if args.run and not args.check:
        raise ElflayoutError("--run needs --check")
    checks, orders = [], []

    def verify(originals, staged):
        for linker in args.linker or ["lld"]:
            checks.append(check(originals, staged, linker))
        why = verdict(checks)
        if why:
            raise Finding(why)
        machine = inputs_machine(originals)
        if machine != "EM_X86_64" and args.run:
            raise ElflayoutError(f"--run: the command is run for x86-64 objects only, not {machine}")
        with tempfile.TemporaryDirectory(prefix="elflayout-split-stand-in-") as td:
            for c in checks:
                if c.could_not_check is None:
                    extra = stand_in_objects(c, td, None if machine == emulator.host_machine() else machine)
                    other_orders([*extra, *originals], [*extra, *staged], c.linker, c.style, args.run, orders)

    def progress(msg):
        if not args.json:
            print(msg, file=sys.stderr)

    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")   # symbol names need not be UTF-8
    planned = api.plan_inputs(args.inputs, args.output, force=args.force, progress=progress)
    reports = [rep for rep, _ in planned]
    empty = api.nothing_split(reports)
    if empty:
        # copies of the inputs are no split: say why each section stayed whole, write nothing
        if args.json:
            _print_json(reports, None, [], written=False)
        else:
            _print_text(args, reports, [], [])
        raise Finding(empty)
    try:
        api.write_outputs(planned, args.output, progress=progress, verify=verify if args.check else None)
    except Finding:
        if args.json:
            _print_json(reports, checks if args.check else None, orders, written=False)
        raise
    if args.json:
        _print_json(reports, checks if args.check else None, orders, written=True)
        return 0
    _print_text(args, reports, checks, orders)
    return 0


def _some(names: list[str], shown: int = 3) -> str:
    """``a.o``, ``a.o, b.o`` … or ``3 objects (a.o, b.o, c.o …)``."""
    if len(names) == 1:
        return names[0]
    more = " …" if len(names) > shown else ""
    return f"{len(names)} objects ({', '.join(names[:shown])}{more})"


def _print_json(reports, checks, orders, *, written: bool) -> None:
    from dataclasses import asdict

    from elflayout import __version__
    from elflayout.fileio import envelope
    from elflayout.split import api

    doc = envelope("split", 1, dict(tool=f"elflayout {__version__}"), summary=api.summary(reports),
                   inputs=api.to_json(reports), check=None if checks is None else [asdict(c) for c in checks],
                   other_orders=None if checks is None else [asdict(o) for o in orders], written=written)
    print(json.dumps(doc, indent=1))


def _print_text(args, reports, checks, orders) -> None:
    from elflayout.split import api

    tot = api.summary(reports)
    for r in reports:
        objs = r.objects
        secs = [s for o in objs for s in o.sections]
        kind = f"{len(objs)} objects, {sum(o.changed for o in objs)} split" if r.archive else \
            ("split" if objs[0].changed else f"unchanged ({objs[0].reason})")
        print(f"{r.path} -> {r.output}: {kind}: {sum(s.units for s in secs):,} functions and data objects -> "
              f"{sum(s.sections for s in secs):,} sections")
        if args.verbose:
            for o in objs:
                for s in o.sections:
                    if s.kept_whole:
                        print(f"  {o.name} {s.name}: kept whole: {s.kept_whole}")
                    for g in s.glued:
                        print(f"  {o.name} {s.name}: {g.first}..{g.last} together: {g.reason}")
        else:
            for name, why, names in api.kept_whole([r]):
                print(f"  {name} kept whole in {_some(names)}: {why}")
    print(f"  {tot['new_relocations']:,} references the assembler had resolved are now relocations; "
          f"{tot['glued']:,} neighbours kept together, {tot['sections_kept_whole']} sections kept whole"
          + ("" if args.verbose else " (-v lists each one and why)"))
    for c in checks:
        if c.could_not_check:
            print(f"  could not check with {c.linker}: {c.could_not_check}")
            continue
        how = f"{c.style} link" + (f", {c.stand_in} of the start files stood in" if c.stand_in else "")
        print(f"  check ({c.linker}, {how}): original-order links identical: {c.sections_compared} "
              f"sections, {c.bytes_compared:,} bytes, {c.symbols_compared:,} symbols"
              + (f", {c.line_addresses_compared:,} addresses' file:line" if c.line_addresses_compared else "")
              + (f", DWARF {c.debug_verify}" if c.debug_verify else "")
              + "".join(f"\n    explained difference: {e}" for e in c.explained))
    for o in orders:
        print(f"  check ({o.linker}, {o.order} order): " + (
            "same output of --run" if o.kind == "run" else
            f"same meaning: {o.functions_compared:,} functions ({o.instructions_compared:,} instructions), "
            f"{o.data_words_compared:,} relocated data words ({o.not_compared:,} table entries not compared)"
            + (f", {o.line_addresses_compared:,} addresses' file:line" if getattr(o, "line_addresses_compared", 0)
               else "") + (f", DWARF {o.debug_verify}" if getattr(o, "debug_verify", None) else "")))
