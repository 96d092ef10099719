#!/usr/bin/env python3
"""Relink libLLVM-16.so.1 from LLVM 16's static archives, in default order and (with
--ordered) in the order of a profile of ``llc-16 --version``; check that llc-16 and
opt-16 -O2 give byte-identical output with every relinked library.

    examples/libllvm/relink.py                      # default order, lld and gold
    examples/libllvm/relink.py --ordered            # + profile → order → relink
    examples/libllvm/relink.py --linker lld --ordered --work build/libllvm

The ordered step runs the elflayout pipeline itself (``profile`` on the default-order
lld build with its link map, ``order --format lld`` / ``--format gold``), so it needs
those verbs; everything downloaded or built stays in the cache directory.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from elflayout.errors import ElflayoutError  # noqa: E402
from elflayout.targets import libllvm  # noqa: E402


def elflayout(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "elflayout", *map(str, args)]
    print("  $ elflayout " + " ".join(map(str, args)), flush=True)
    r = subprocess.run(cmd, env=env)
    if r.returncode not in (0, 1):
        raise SystemExit(f"elflayout {args[0]} failed with exit {r.returncode}")


def show(tag, d, seconds):
    print(f"{tag}: {d['lib']}  ({d['lib'].stat().st_size / 1e6:.1f} MB, {seconds:.1f} s incl. checks)")
    print(f"  map {d['map']}")
    print(f"  verified byte-identical: {', '.join(d['verified']) or '(cached)'}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--linker", action="append", choices=("lld", "gold"), help="default: lld and gold")
    p.add_argument("--ordered", action="store_true", help="also relink in the order of an llc-16 --version profile")
    p.add_argument("--work", default=str(ROOT / "build" / "libllvm"), help="profile and order files (default build/libllvm)")
    a = p.parse_args()
    linkers = a.linker or ["lld", "gold"]
    try:
        base = {}
        for ln in linkers:
            t = time.perf_counter()
            base[ln] = libllvm.relink(ln)
            show(f"{ln} default order", base[ln], time.perf_counter() - t)
        if not a.ordered:
            return 0
        work = Path(a.work)
        work.mkdir(parents=True, exist_ok=True)
        ref = base.get("lld") or base[linkers[0]]
        prof = work / "llc-version.profile.json"
        if not prof.exists():
            elflayout("profile", "--target", ref["lib"], "--map", ref["map"], "--env",
                      f"LD_LIBRARY_PATH={ref['outdir']}", "-o", prof, "--", "/usr/bin/llc-16", "--version")
        for ln in linkers:
            fmt = {"lld": "lld", "gold": "gold"}[ln]
            order = work / f"llc-version.{fmt}.order"
            elflayout("order", prof, "--format", fmt, "--objects-from", base[ln]["map"], "--force", "-o", order)
            flag = "--symbol-ordering-file" if ln == "lld" else "--section-ordering-file"
            t = time.perf_counter()
            d = libllvm.relink(ln, [f"-Wl,{flag}={order}"])
            show(f"{ln} profile order", d, time.perf_counter() - t)
            elflayout("check-order", d["lib"], "--profile", prof)
    except ElflayoutError as e:
        print(f"elflayout: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
