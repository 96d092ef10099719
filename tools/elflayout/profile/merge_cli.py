"""``elflayout merge``: several profiles of the same build into one."""

from __future__ import annotations

import argparse

SUMMARY = "merge several profiles of the same build into one"
EPILOG = """examples:
  # two workloads of one libpython build; the first one's order wins, the second appends
  elflayout merge import.json pass.json -o merged.json

  # interleave by relative position instead: what any workload touches early comes first
  elflayout merge --rule earliest run1.json run2.json run3.json -o merged.json

Profiles whose targets have the same path but a different build-id are refused
(--force merges them anyway and also replaces an existing output).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profiles", nargs="+", metavar="PROFILE", help="profiles (elflayout-profile v1) in priority order")
    p.add_argument("--rule", choices=("concat", "earliest", "mean", "rank"), default="concat",
                   help="concat: earlier profiles win, later ones append (default); "
                        "earliest (alias rank): earliest relative position in any profile wins; "
                        "mean: mean relative position (untouched = 1)")
    p.add_argument("-o", "--output", required=True, help="merged profile to write")
    p.add_argument("--force", action="store_true", help="merge different builds; replace an existing output")


def run(args: argparse.Namespace) -> int:
    from elflayout import fileio
    from elflayout.profile import merge, model

    out = fileio.check_output(args.output, force=args.force, inputs=args.profiles)
    docs = [model.load(p) for p in args.profiles]
    doc = merge.merge(docs, list(args.profiles), force=args.force, rule=args.rule)
    model.save(doc, out)
    for t in model.parse(doc).targets:
        print(f"{t.path}: {len(t.functions)} functions, {len(t.objects)} objects, {len(t.pages)} pages")
    print(f"wrote {out}")
    return 0
