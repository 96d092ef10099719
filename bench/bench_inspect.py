#!/usr/bin/env python3
"""How long ``elflayout inspect`` takes on a large library (target: < 3 s on libLLVM-16).

Runs the real command N times (file in the page cache after the first run, which is
discarded as a warm-up) and prints the median and range, then a per-part breakdown
measured in-process so a regression can be located.

    python3 bench/bench_inspect.py [LIB] [--runs 5] [--map LINK.map]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

DEFAULT = "/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1"


def timed(fn, n=5):
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib", nargs="?", default=DEFAULT)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--map")
    a = ap.parse_args()
    if not Path(a.lib).exists():
        print(f"bench_inspect: {a.lib} not found (install libllvm16 or pass a library)", file=sys.stderr)
        return 2
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for fmt in (["--json"], []):
        cmd = [sys.executable, "-m", "elflayout", "inspect", *fmt, a.lib] + (["--map", a.map] if a.map else [])
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)  # warm-up: page cache, .pyc
        ts = []
        for _ in range(a.runs):
            t = time.perf_counter()
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
            ts.append(time.perf_counter() - t)
        print(f"$ {' '.join(cmd)} > /dev/null")
        print(f"  median of {a.runs}: {statistics.median(ts):.3f} s  (min {min(ts):.3f}, max {max(ts):.3f})"
              f"  target < 3 s: {'ok' if statistics.median(ts) < 3 else 'SLOW'}")

    from elflayout.elfcore import ElfImage
    from elflayout.inspect import core
    from elflayout import symbols

    print("in-process breakdown (median of 5, s):")
    img = ElfImage(a.lib)
    parts = {
        "open + section headers": lambda: ElfImage(a.lib).close(),
        "sha256": lambda: ElfImage(a.lib).sha256,
        "relocations + optimal RELR": lambda: core.relocations(img),
        "symbol counts": lambda: core.symbol_counts(img),
        "function extents (symbols + FDEs)": lambda: symbols.functions(img),
        "sections + segments": lambda: (core.sections(img), core.segments(img)),
    }
    for k, fn in parts.items():
        print(f"  {k:<36} {timed(fn):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
