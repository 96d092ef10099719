"""``elflayout check-order``: how well a linked library honours a profile."""

from __future__ import annotations

import json

from elflayout.errors import Finding
from elflayout.order.check import check, honoured, summary_lines
from elflayout.order.profile_input import load_profile, pick_target, require_touches

SUMMARY = "how well a linked library honours a profile"
EPILOG = """\
examples:
  elflayout check-order build/libLLVM-16.so.1 --profile llc.json
  elflayout check-order libpython3.11.so.1.0 --profile py.json --json
  elflayout check-order libfoo.so --profile p.json --fail-under 0.9   # exit 1 if not ordered

A profile of another build is fine (names are matched); entries it names that the
library no longer defines are reported as stale.
"""


def add_arguments(p) -> None:
    p.add_argument("lib", help="linked library to check")
    p.add_argument("--profile", required=True, help="profile (elflayout-profile v1)")
    p.add_argument("--target", help="which target of the profile (default: the one named like LIB)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--fail-under", type=float, metavar="FRACTION",
                   help="exit 1 when less than FRACTION of the placed functions are in profile order")


def run(args) -> int:
    doc = load_profile(args.profile)
    t = pick_target(doc, args.profile, args.target or (args.lib if len(doc.targets) > 1 else None))
    require_touches(t, args.profile)
    res = check(args.lib, t)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print("\n".join(summary_lines(res)))
    if args.fail_under is not None and not honoured(res, args.fail_under):
        frac = res["in_order_fraction"]
        raise Finding(f"{args.lib}: only {0 if frac is None else 100 * frac:.1f}% of profiled functions in profile order "
                      f"(wanted ≥ {100 * args.fail_under:.0f}%)")
    return 0
