#!/usr/bin/env python3
"""Benchmark of AArch64 under qemu-user: Debian's arm64 libLLVM-16 and ``llc-16 --version``.

1. Profile: the qemu backend's profile of the arm64 ``llc-16 --version`` against the
   valgrind backend's of the x86-64 build of the same Debian release: functions and
   code pages first executed, and time. Target: function counts within a few %.
2. Pack: Debian's gold-linked arm64 libLLVM-16 packed post-link (``pack-relocs --check
   --format relr``: relocated images at two bases, a real load under qemu). Target:
   RELR <= 144,720 bytes.
3. Pages: ``llc-16 --version`` under qemu with the original library vs the packed one
   (LD_LIBRARY_PATH), selective eviction of the two libraries, read_ahead_kb 128.
   Target: >= 2,200 fewer pages. (Needs root and tracefs; skipped otherwise.)

The arm64 root is scripts/arm64-root.sh's (downloaded once into the cache).
Run:  python3 bench/bench_aarch64.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from _common import cache_dir, cli, measure, plan_from_args  # noqa: E402
from elflayout.tracefs import tracefs_status  # noqa: E402

X86_LIB = Path("/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1")


def _profile(out: Path, target: Path, argv: list) -> dict:
    cli("profile", "--target", target, "-o", out, "--force", "--", *argv)
    doc = json.loads(out.read_text())
    t = doc["targets"][0]
    return {"functions": len(t["functions"]), "x_pages": sum(1 for p in t["pages"] if p["kind"] == "x"),
            "workload_s": doc["metadata"]["duration_s"], "backend": doc["metadata"]["backend"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="measurement rounds (default 5)")
    args = ap.parse_args()
    r = subprocess.run([str(ROOT / "scripts" / "arm64-root.sh")], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench_aarch64: scripts/arm64-root.sh failed: {r.stderr.strip()[-300:]}")
    root = Path(r.stdout.strip().splitlines()[-1])
    lib, llc = root / "usr/lib/aarch64-linux-gnu/libLLVM-16.so.1", root / "usr/lib/llvm-16/bin/llc"
    work = cache_dir("bench-aarch64")

    print("1. profile of llc-16 --version")
    a = _profile(work / "arm64.json", lib, [llc, "--version"])
    x = _profile(work / "x86.json", X86_LIB, ["llc-16", "--version"])
    for name, p in (("arm64 (qemu)", a), ("x86-64 (valgrind)", x)):
        print(f"  {name:18} {p['functions']:,} functions, {p['x_pages']:,} code pages, workload {p['workload_s']:.1f} s")
    print(f"  functions: arm64/x86 {a['functions'] / x['functions'] - 1:+.1%}")

    print("2. pack-relocs --check --format relr (post-link, gold-linked input)")
    packed = work / "packed" / "libLLVM-16.so.1"
    packed.parent.mkdir(exist_ok=True)
    doc = json.loads(cli("pack-relocs", "--check", "--json", "--format", "relr", "--min-glibc", "2.36", lib,
                         "-o", packed, "--force").stdout)
    print(f"  RELR {doc['relr_bytes']:,} bytes; {doc['cut']['pages']:,} pages cut; "
          f"real load under qemu equal: {doc['check']['real_load']['equal']}")

    why = tracefs_status()
    if why:
        print(f"3. pages read: skipped ({why})")
        return 0
    print("3. pages read at a selectively cold start under qemu (read_ahead_kb 128)")
    plan = plan_from_args(["--name", "debian", f"{llc} --version", "--name", "packed",
                           f"LD_LIBRARY_PATH={packed.parent} {llc} --version", "--state", "selective",
                           "--runs", args.runs, "--files", lib, packed])
    res = measure(plan, work / "measure.json")
    pages: dict = {}
    for run in res["runs"]:
        if not run.get("interference"):
            pages.setdefault(run["variant"], []).append(run["pages_read"])
    for v, ps in pages.items():
        print(f"  {v:7} {min(ps):,}-{max(ps):,} pages ({len(ps)} runs)")
    print(f"  fewer pages: {min(pages['debian']) - max(pages['packed']):,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
