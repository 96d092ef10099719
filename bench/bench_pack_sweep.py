#!/usr/bin/env python3
"""pack-relocs --check over every shared library in /usr/lib/x86_64-linux-gnu; prints the counts.

Each regular file there named *.so* is packed (default form for this machine) with the
full check (simulated loader at two bases, tables field by field, real loads compared);
the outcome is counted: packed and checked, nothing to do, refused (with its one-line
reason, grouped), check failed (exit 1), internal error. Target: every library with RELA
RELATIVE relocations packed and checked or refused with a reason; 0 false check failures
(each "check failed" is listed for inspection).

Run:  python3 bench/bench_pack_sweep.py [--dir /usr/lib/x86_64-linux-gnu] [--limit N]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from elflayout.errors import ElflayoutError, Finding  # noqa: E402
from elflayout.relocs import simload  # noqa: E402
from elflayout.relocs.pack import AlreadyPacked, pack  # noqa: E402


def reason_class(msg: str) -> str:
    """The reason without the path and numbers, to group refusals."""
    msg = msg.split(": ", 1)[1] if msg.startswith("/") else msg
    return re.sub(r"0x[0-9a-f]+|\d[\d,]*", "N", msg)[:110]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/usr/lib/x86_64-linux-gnu")
    ap.add_argument("--limit", type=int, default=0, help="first N libraries only (0: all)")
    ap.add_argument("--format", choices=("relr", "self"), default="relr", help="packed form (default relr)")
    a = ap.parse_args()
    libs = sorted(p for p in Path(a.dir).iterdir() if p.is_file() and not p.is_symlink() and ".so" in p.name
                  and p.read_bytes()[:4] == b"\x7fELF")
    if a.limit:
        libs = libs[:a.limit]
    print(f"# bench_pack_sweep: {len(libs)} shared libraries in {a.dir} (regular files named *.so*), "
          f"form {a.format}")
    t0 = time.time()
    count = collections.Counter()
    reasons = collections.Counter()
    examples = {}
    failed = []
    packed_relative = 0
    with tempfile.TemporaryDirectory(prefix="elflayout-sweep-") as d:
        for i, lib in enumerate(libs):
            out = Path(d) / lib.name
            try:
                st = pack(lib, out, verify=simload.check, replace=True, form=a.format)
                count["packed and checked"] += 1
                packed_relative += st["packed"]
            except AlreadyPacked as e:
                count["nothing to do"] += 1
                reasons["nothing to do: " + reason_class(str(e))] += 1
            except Finding as e:
                count["check failed (exit 1)"] += 1
                failed.append((lib.name, str(e)))
            except ElflayoutError as e:
                count["refused (exit 2)"] += 1
                r = reason_class(str(e))
                reasons[r] += 1
                examples.setdefault(r, lib.name)
            except Exception as e:  # noqa: BLE001 - counted: a bug of ours
                count["internal error"] += 1
                failed.append((lib.name, f"internal error {type(e).__name__}: {e}"))
            out.unlink(missing_ok=True)
            if (i + 1) % 50 == 0:
                print(f"  {i + 1}/{len(libs)} ({time.time() - t0:.0f} s) {dict(count)}", file=sys.stderr, flush=True)
    print("outcomes:")
    for k in ("packed and checked", "nothing to do", "refused (exit 2)", "check failed (exit 1)", "internal error"):
        print(f"  {k:<24} {count[k]:>5}")
    print(f"  RELATIVE relocations packed in total: {packed_relative:,}")
    print("reasons (refused / nothing to do), most frequent first:")
    for r, n in reasons.most_common():
        print(f"  {n:>5}  {r}" + (f"   (e.g. {examples[r]})" if r in examples else ""))
    for name, msg in failed:
        print(f"  FAILED {name}: {msg}")
    print(f"time: {time.time() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
