#!/usr/bin/env python3
"""Fuzzing pack-relocs with damaged real libraries (seeded, reproducible); prints the counts.

Each variant is one damage of a real Debian library (relocs/fuzz.py: flipped bytes in
headers, section headers, dynamic array, .rela.dyn or version tables; a dynamic value
replaced or dropped; entries swapped; truncation) run through ``inspect``, ``relocs``
and ``pack-relocs`` with its check; every accepted output is compared with its input
after real loads (dlopen, ASLR off, writable bytes). Targets: 0 internal errors, 0
modified inputs, 0 accepted outputs that differ from their input after a real load.
Variant i of seed s is reproducible alone: ``--seed s --start i --count 1``.

With ``--pie`` the targets are PIE executables (GNU ld and lld) instead, started up
to their entry point; ``--form self`` packs in the self-applying form. With ``--arm64``
they are Debian's arm64 libraries of scripts/arm64-root.sh's root, loaded under qemu.

Run:  python3 bench/bench_fuzz.py [--count 10000] [--seed 1] [--jobs 2] [--pie | --arm64] [--form relr|self]
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from _common import fuzz_chunks, fuzz_parser, print_fuzz_tail  # noqa: E402
from elflayout.relocs import fuzz  # noqa: E402

LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
# Small and mid-sized libraries of Debian 12 with RELATIVE relocations, from 3 linkers'
# habits (GNU ld for most; libabsl needs no libc.so.6), so a variant costs ~0.2 s.
LIBS = ["libz.so.1", "libexpat.so.1", "libffi.so.8", "libabsl_city.so.20220623", "libsqlite3.so.0",
        "libstdc++.so.6", "libzstd.so.1", "liblzma.so.5", "libpcre2-8.so.0", "libxml2.so.2"]


# Debian 12's arm64 libraries of the fuzz figure in docs/aarch64.md (GNU ld, with and
# without libc++ symbol versions), under qemu-aarch64 with the arm64 root.
ARM64_LIBS = ["libffi.so.8", "libzstd.so.1", "libxml2.so.2", "libstdc++.so.6"]


# PIEs of Debian 12 without IRELATIVE relocations (the self form refuses those): GNU
# ld's bash and make, lld's clang-22 driver.
PIES = ["/usr/bin/bash", "/usr/bin/make", "/usr/lib/llvm-22/bin/clang"]


def _chunk(job):
    libs, seed, start, count, work, form = job
    return fuzz.run([Path(x) for x in libs], seed, count, Path(work), start=start, form=form)


def _arm64_libs() -> list[str]:
    r = subprocess.run([str(ROOT / "scripts" / "arm64-root.sh")], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench_fuzz: scripts/arm64-root.sh failed: {r.stderr.strip()[-300:]}")
    libdir = Path(r.stdout.strip().splitlines()[-1]) / "usr/lib/aarch64-linux-gnu"
    return [str(libdir / n) for n in ARM64_LIBS if (libdir / n).exists()]


def main() -> int:
    ap = fuzz_parser(__doc__)
    kind = ap.add_mutually_exclusive_group()
    kind.add_argument("--pie", action="store_true", help="fuzz PIE executables instead of libraries")
    kind.add_argument("--arm64", action="store_true", help="fuzz Debian's arm64 libraries (loaded under qemu)")
    ap.add_argument("--form", choices=("relr", "self"), default="relr", help="packed form (default relr)")
    a = ap.parse_args()
    if a.arm64:
        libs = _arm64_libs()
    else:
        libs = [x for x in PIES if Path(x).exists()] if a.pie else [str(LIBDIR / n) for n in LIBS
                                                                      if (LIBDIR / n).exists()]
    print(f"# bench_fuzz: seed {a.seed}, form {a.form}, variants {a.start}..{a.start + a.count - 1}, "
          f"{len(libs)} {'executables' if a.pie else 'libraries'}: "
          + ", ".join(Path(x).name for x in libs))
    t0 = time.time()
    step = 100
    total = fuzz.Tally()
    with tempfile.TemporaryDirectory(prefix="elflayout-fuzz-") as work, multiprocessing.Pool(a.jobs) as pool:
        jobs = [(libs, a.seed, s, n, os.path.join(work, str(s)), a.form)
                for s, n in fuzz_chunks(a.start, a.count, step)]
        for t in pool.imap_unordered(_chunk, jobs):
            total.add(t)
            print(f"  {total.variants:,} variants, {total.internal_errors} internal errors, "
                  f"{total.accepted_differs} accepted-but-different ({time.time() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    T = total
    print(f"variants:                              {T.variants:,}")
    print(f"refused with one line (exit 2):        {T.refused:,}")
    print(f"check found a difference (exit 1):     {T.check_failed:,}")
    print(f"nothing to do (exit 0):                {T.nothing_to_do:,}")
    print(f"packed and accepted by the check:      {T.accepted:,}")
    print(f"  equal after real loads:              {T.accepted_equal:,}")
    print(f"  input itself does not load (--check refuses it, exit 2): {T.accepted_input_does_not_load:,}")
    print(f"  DIFFERENT after real loads:          {T.accepted_differs:,}   (target 0)")
    print(f"internal errors (exit 3/tracebacks):   {T.internal_errors:,}   (target 0)")
    print(f"inputs modified:                       {T.inputs_modified:,}   (target 0)")
    print(f"multi-line error messages:             {T.multi_line_messages:,}   (target 0)")
    print_fuzz_tail(T, t0, a.jobs)
    bad = T.internal_errors + T.inputs_modified + T.accepted_differs + T.multi_line_messages
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
