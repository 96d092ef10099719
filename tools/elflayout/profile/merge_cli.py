"""``elflayout merge``: several profiles of the same build into one."""

from __future__ import annotations

import argparse

SUMMARY = "merge several profiles of the same build into one"
EPILOG = """examples:
  # two workloads of one libpython build; the first one's order wins, the second appends
  elflayout merge import.json pass.json -o merged.json

  # interleave by relative position instead: what any workload touches early comes first
  elflayout merge --rule earliest run1.json run2.json run3.json -o merged.json

  # code native runs touched that the valgrind profile lacks: trace a build ordered from
  # py.json as it is used, append the functions on its code pages that faulted outside
  # the profile's functions, relink (repeat until none fault)
  elflayout profile --backend trace --evict --target ordered/libpython3.11.so.1.0 -o faults.json -- ...
  elflayout merge py.json --faults faults.json -o py+faults.json

Profiles whose targets have the same path but a different build-id are refused
(--force merges them anyway and also replaces an existing output).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profiles", nargs="+", metavar="PROFILE", help="profiles (elflayout-profile v1) in priority order")
    p.add_argument("--rule", choices=("concat", "earliest", "mean", "rank"), default="concat",
                   help="concat: earlier profiles win, later ones append (default); "
                        "earliest (alias rank): earliest relative position in any profile wins; "
                        "mean: mean relative position (untouched = 1)")
    p.add_argument("--faults", metavar="TRACE",
                   help="with one PROFILE: a --backend trace profile of a build ordered from it; append the functions "
                        "on the code pages that faulted outside PROFILE's functions")
    p.add_argument("-o", "--output", required=True, help="merged profile to write")
    p.add_argument("--force", action="store_true", help="merge different builds; replace an existing output")


def run(args: argparse.Namespace) -> int:
    from elflayout import fileio
    from elflayout.profile import merge, model

    from elflayout.errors import ElflayoutError

    if args.faults and len(args.profiles) != 1:
        raise ElflayoutError(f"--faults: give one profile (got {len(args.profiles)})")
    out = fileio.check_output(args.output, force=args.force, inputs=args.profiles + ([args.faults] if args.faults else []))
    docs = [model.load(p) for p in args.profiles]
    if args.faults:
        from elflayout.profile import feedback

        doc, fb = feedback.add_faulted(docs[0], model.load(args.faults))
        print(f"{len(fb.cold_pages)} code pages faulted outside the profile's functions; {len(fb.added)} functions "
              f"on them appended" + (f"; {len(fb.unmatched)} names the profiled build lacks: "
                                     f"{', '.join(fb.unmatched[:5])}" if fb.unmatched else ""))
    else:
        doc = merge.merge(docs, list(args.profiles), force=args.force, rule=args.rule)
    model.save(doc, out)
    for t in model.parse(doc).targets:
        print(f"{t.path}: {len(t.functions)} functions, {len(t.objects)} objects, {len(t.pages)} pages")
    print(f"wrote {out}")
    return 0
