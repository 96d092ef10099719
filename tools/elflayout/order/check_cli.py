"""``elflayout check-order``: how well a linked library honours a profile."""

from __future__ import annotations

import json

from elflayout.errors import Finding
from elflayout.order.check import check, honoured, landed_lines, ordered_sections_of, summary_lines
from elflayout.order.profile_input import load_profile, pick_target, require_touches

SUMMARY = "how well a linked library honours a profile"
EPILOG = """\
examples:
  elflayout check-order build/libLLVM-16.so.1 --profile llc.json
  elflayout check-order libpython3.11.so.1.0 --profile py.json --json
  elflayout check-order libfoo.so --profile p.json --fail-under 0.9   # exit 1 if not ordered

  # why functions are out of order: input sections and objects from the link map,
  # the ordering file the link used, every function's place
  elflayout check-order libstdc++.so.6 --profile p.json --map libstdc++.so.6.map \
      --ordering order.gold --where

  # held-out: how the relink ordered from train.json does on a startup it never saw
  elflayout check-order ordered/libLLVM-16.so.1 --profile opt.json --trained-on train.json

  # cross-validation over the workloads of a merged profile recorded on LIB itself
  elflayout check-order libLLVM-16.so.1 --profile set.json --cross-validate

Functions out of profile order (not in the longest increasing subsequence) and
profiled functions not placed are grouped by cause (docs/ordering.md, "Why a function
is out of order"): a shared input section (plain .text), .text.unlikely/.hot/.startup
left to the linker's default rules, a COMDAT copy kept from another object, a section
the ordering does not name, an address shared with another function (ICF), not in the
output, an ambiguous local name.

A profile of another build is fine (names are matched, also when a compiler or LTO added
a suffix: foo → foo.llvm.<hash>, foo.lto_priv.0; several such names are reported as
ambiguous, not guessed); entries it names that the library no longer defines are
reported as stale and count as out of order. Exit 1 when more than 10% of its functions
are missing or renamed: ordered by that profile, the library leaves its hot code out
(an LTO build ordered by a profile of a build without LTO: profile the LTO build). --cross-validate trains on all
workloads but one, evaluates on that one, for each (virtual code layouts of LIB, pages
predicted by the readahead model; docs/ordering.md, "Held-out evaluation").
"""


def add_arguments(p) -> None:
    p.add_argument("lib", help="linked library to check")
    p.add_argument("--profile", required=True, help="profile (elflayout-profile v1)")
    p.add_argument("--target", help="which target of the profile (default: the one named like LIB)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--fail-under", type=float, metavar="FRACTION",
                   help="exit 1 when less than FRACTION of the placed functions are in profile order")
    p.add_argument("--trained-on", metavar="PROFILE",
                   help="held-out evaluation: the profile the order of LIB was built from; --profile is a "
                        "workload it did not see")
    p.add_argument("--cross-validate", action="store_true",
                   help="leave-one-out over the workloads of --profile (a merged profile recorded on LIB)")
    p.add_argument("--combine", default="shared", help="--cross-validate: how the training workloads are "
                   "combined (shared (default), phased, earliest, mean, concat; as order --combine)")
    p.add_argument("--read-ahead-kb", type=int, default=None,
                   help="held-out predictions: read_ahead_kb to model (default: the profile's, else 128)")
    p.add_argument("--map", metavar="LINK.map", help="link map of LIB: the input section and object of each "
                   "function in the reasons; held-out predictions: data pages of a relink follow their input sections")
    p.add_argument("--ordering", metavar="FILE", help="the ordering file LIB was linked with (gold section "
                   "ordering file or GNU ld script): functions whose section it does not name are told apart")
    p.add_argument("--where", action="store_true", help="also print every profiled function: offset, section, "
                   "object, in order or not and why")


def run(args) -> int:
    doc = load_profile(args.profile)
    t = pick_target(doc, args.profile, args.target or (args.lib if len(doc.targets) > 1 else None))
    require_touches(t, args.profile)
    if args.cross_validate or args.trained_on:
        return _heldout(args, doc, t)
    from elflayout.fileio import read_input

    ordered = None
    if args.ordering:
        ordered = ordered_sections_of(read_input(args.ordering, "an ordering file").decode("utf-8", "replace")) or None
    if args.map:
        read_input(args.map, "a link map")
    res = check(args.lib, t, lib_map=args.map, ordered_sections=ordered)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print("\n".join(summary_lines(res) + (landed_lines(res) if args.where else [])))
    if res.get("stale_hot"):
        raise Finding(f"{args.lib}: {res['stale_hot']}")
    if args.fail_under is not None and not honoured(res, args.fail_under):
        frac = res["in_order_fraction"]
        raise Finding(f"{args.lib}: only {0 if frac is None else 100 * frac:.1f}% of profiled functions in profile order "
                      f"(wanted ≥ {100 * args.fail_under:.0f}%)")
    return 0


def _heldout(args, doc, t) -> int:
    from elflayout.elfcore import ElfImage
    from elflayout.errors import ElflayoutError
    from elflayout.order import heldout
    from elflayout.profile.merge import RULES

    ra = args.read_ahead_kb if args.read_ahead_kb is not None else (doc.metadata.get("read_ahead_kb") or 128)
    with ElfImage(args.lib) as img:
        if args.cross_validate:
            if args.combine not in RULES:
                raise ElflayoutError(f"--combine {args.combine}: choose from {', '.join(RULES)}")
            rows = heldout.cross_validate(img, doc, args.combine, ra, args.target)
            if args.json:
                print(json.dumps({"read_ahead_kb": ra, "combine": args.combine, "workloads": rows}, indent=1))
            else:
                print("\n".join(heldout.table_lines(rows)))
            worse = [r["workload"] for r in rows if r["worse_than_unordered"]]
            if worse:
                raise Finding(f"{args.lib}: the order trained on the other workloads reads more than the unordered "
                              f"layout for {', '.join(worse)}")
            return 0
        train_doc = load_profile(args.trained_on)
        train = train_doc.target(t.path if len(train_doc.targets) > 1 else None)
        if t.build_id and t.build_id == img.build_id == train.build_id:
            # both recorded on LIB (unordered): the order's virtual layout of LIB
            res = heldout.evaluate(img, t, train, ra)
        else:
            res = heldout.evaluate_relink(img, t, train, ra, args.map)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print("\n".join(heldout.summary_lines(res, f"{args.profile} against the order trained on {args.trained_on}")))
    return 0
