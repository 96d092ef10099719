#!/usr/bin/env python3
"""Fuzzing split with damaged objects and archives (seeded, reproducible); prints the counts.

Each variant is one damage of a small valid object or archive (split/fuzz.py: ELF header,
section header, symbol, relocation and string-table fields; non-UTF-8 symbol names;
flipped bytes; truncation; archive member sizes (negative, huge, not decimal), names,
headers, long-name table, symbol index, thin archives, damaged members) run through
``split`` and ``split --check`` (lld, gold or GNU ld), each run a child process limited to
30 s of CPU (300 s of wall time) and 1 GB. Targets: 0 exit 3, 0 tracebacks, 0 hangs, 0 out of memory, nothing
written for a refused input, one line naming the input for every refusal.
Variant i of seed s is reproducible alone: ``--seed s --start i --count 1 --keep DIR``.

Run:  python3 bench/bench_split_fuzz.py [--count 10000] [--seed 1] [--jobs 2] [--machine aarch64]
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from _common import fuzz_chunks, fuzz_parser, print_fuzz_tail  # noqa: E402
from elflayout.split import fuzz  # noqa: E402


def _chunk(job):
    seed, start, count, work, bases = job
    return fuzz.run(seed, count, Path(work), start=start, bases=bases)


def main() -> int:
    ap = fuzz_parser(__doc__)
    ap.add_argument("--keep", metavar="DIR", help="work directory to keep (failed variants stay in it)")
    ap.add_argument("--tally", metavar="FILE", help="rewrite FILE (JSON) with the counts so far after every chunk")
    ap.add_argument("--machine", choices=sorted(fuzz.TOOLS), default="x86-64",
                    help="build the valid inputs for this machine (aarch64: the cross gcc)")
    a = ap.parse_args()
    print(f"# bench_split_fuzz: {a.machine}, seed {a.seed}, variants {a.start}..{a.start + a.count - 1}, "
          f"limits {fuzz.TIMEOUT:g} s of CPU ({fuzz.WALL_FACTOR * fuzz.TIMEOUT:g} s of wall time) and "
          f"{fuzz.MEMORY >> 20} MB per run")
    t0 = time.time()
    step = 50
    total = fuzz.Tally()
    with tempfile.TemporaryDirectory(prefix="elflayout-split-fuzz-") as tmp:
        work = a.keep or tmp
        bases = fuzz.build_bases(Path(work), a.machine)
        jobs = [(a.seed, s, n, os.path.join(work, str(s)), bases) for s, n in fuzz_chunks(a.start, a.count, step)]
        with multiprocessing.Pool(a.jobs) as pool:
            for t in pool.imap_unordered(_chunk, jobs):
                total.add(t)
                print(f"  {total.variants:,} variants, {total.failed} failures ({time.time() - t0:.0f} s)",
                      file=sys.stderr, flush=True)
                if a.tally:
                    Path(a.tally).write_text(json.dumps(dict(vars(total), failed=total.failed), indent=1))
    T = total
    print(f"variants:                                   {T.variants:,} ({T.runs:,} runs)")
    print(f"split (exit 0):                             {T.split:,}")
    print(f"--check: differs or nothing checked (exit 1): {T.check_refused:,}")
    print(f"refused with one line naming it (exit 2):   {T.refused:,}")
    print(f"exit 3 (internal errors):                   {T.internal_errors:,}   (target 0)")
    print(f"tracebacks:                                 {T.tracebacks:,}   (target 0)")
    print(f"hangs (> {fuzz.TIMEOUT:g} s of CPU):                   {T.hangs:,}   (target 0)")
    print(f"out of memory (> {fuzz.MEMORY >> 20} MB):                  {T.out_of_memory:,}   (target 0)")
    print(f"crashes (signals):                          {T.crashes:,}   (target 0)")
    print(f"written although refused:                   {T.written_when_refused:,}   (target 0)")
    print(f"messages not one line naming the input:     {T.bad_messages:,}   (target 0)")
    print(f"inputs modified:                            {T.inputs_modified:,}   (target 0)")
    print(f"costliest run:                              {T.slowest_s:.1f} s of CPU")
    print_fuzz_tail(T, t0, a.jobs)
    return 1 if T.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
