#!/usr/bin/env python3
"""Benchmark of pack-relocs on libLLVM-16: packing time, and pages read at startup.

1. Speed: wall time of ``elflayout pack-relocs libLLVM-16.so.1 -o OUT --force`` (the
   whole CLI, median of N) and the in-process plan/write split. Target: <= 2 s.
2. Pages: ``llc-16 --version`` with the original library vs the packed one
   (LD_LIBRARY_PATH), measured by ``elflayout.measure.session`` in-process: selective
   eviction of the two libraries only, read_ahead_kb 128 (restored afterwards), pages
   added to the page cache per library counted with tracefs
   (filemap:mm_filemap_add_to_page_cache), split by section (``results.
   pages_by_section``). Variants are interleaved: every round runs each variant once,
   in a seeded shuffled order; disturbed runs are repeated, then left out.

Run:  python3 bench/bench_pack.py [--runs 3] [--pack-runs 5]   (root, tracefs)
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

from _common import cache_dir as bench_cache_dir  # noqa: E402
from elflayout.relocs.pack import pack  # noqa: E402
from elflayout.tracefs import tracefs_status  # noqa: E402

LIB = Path("/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1")
RA_KB = 128
WORKLOAD = ["llc-16", "--version"]


def cache_dir() -> Path:
    return bench_cache_dir("bench-pack")


def bench_speed(out: Path, runs: int) -> dict:
    cmd = [sys.executable, "-m", "elflayout", "pack-relocs", str(LIB), "-o", str(out), "--force"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    walls = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, capture_output=True)
        walls.append(time.perf_counter() - t)
    inproc = [pack(LIB, out, replace=True) for _ in range(runs)]
    return dict(cmd=" ".join(cmd), wall=walls, plan=[s["plan_s"] for s in inproc],
                write=[s["write_s"] for s in inproc], total=[s["pack_s"] for s in inproc], stats=inproc[0])


def bench_pages(packed: Path, runs: int, seed: int = 1) -> dict:
    """Original vs packed library, selectively cold, interleaved (``measure.session``)."""
    from elflayout.measure import session
    from elflayout import results as model

    why = tracefs_status()
    if why:
        return dict(skipped=why)
    variants = {"original": session.command(WORKLOAD, {}), "packed": session.command(WORKLOAD, {}, packed.parent)}
    doc = session.measure(session.MeasurePlan(variants=list(variants.items()), states=["selective"], runs=runs,
                                              files=[str(LIB), str(packed)], read_ahead_kb=RA_KB, census="none",
                                              seed=seed, retries=4))
    res = model.parse(doc, "bench_pack")
    lib_of = {"original": str(LIB), "packed": str(packed)}
    out = {}
    for v, path in lib_of.items():
        secs = res.files[path]["sections"]
        out[v] = [(r.files[path].pages_read, model.pages_by_section(secs, model.run_pages(r.files[path].reads)),
                   r.lost_events, r.interference) for r in res.runs if r.variant == v]
    order = [r.variant for r in sorted(res.runs, key=lambda r: r.seq)]
    ra = res.metadata["controls"]["read_ahead_kb"]
    return dict(read_ahead_kb_found=ra["before"], order=order, runs=out)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="traced runs per variant (default 3)")
    ap.add_argument("--pack-runs", type=int, default=5, help="timed packings (default 5)")
    a = ap.parse_args(argv)
    out = cache_dir() / LIB.name
    print(f"# bench_pack: {LIB} ({LIB.stat().st_size:,} bytes) -> {out}")
    sp = bench_speed(out, a.pack_runs)
    st = sp["stats"]
    print(f"\n## packing speed (median of {a.pack_runs}; target <= 2 s wall)")
    print(f"  command: {sp['cmd']}")
    print(f"  CLI wall      {med(sp['wall']):.3f} s   (min {min(sp['wall']):.3f}, max {max(sp['wall']):.3f})")
    print(f"  in-process    {med(sp['total']):.3f} s = plan {med(sp['plan']):.3f} + copy/patch/fsync {med(sp['write']):.3f}")
    print(f"  .rela.dyn {st['rela_dyn_bytes_before']:,} -> {st['rela_dyn_bytes_after']:,} bytes; "
          f"RELR {st['relr_bytes']:,} bytes; {st['packed']:,} relocations packed")

    pg = bench_pages(out, a.runs)
    print(f"\n## pages of libLLVM read by `{' '.join(WORKLOAD)}` (selective eviction, read_ahead_kb {RA_KB})")
    if "skipped" in pg:
        print(f"  skipped: {pg['skipped']}")
        return 0
    print(f"  order: {' '.join(pg['order'])}; read_ahead_kb restored to {pg['read_ahead_kb_found']}")
    summary = {}
    for v, all_runs in pg["runs"].items():
        runs = [r for r in all_runs if not r[3]]
        if len(runs) < len(all_runs):
            print(f"  {v}: {len(all_runs) - len(runs)} run(s) left out as disturbed: {all_runs[0][3] or ''}")
        if not runs:
            print(f"  {v}: every run disturbed: no figure")
            return 1
        totals = [r[0] for r in runs]
        rel = [r[1].get(".rela.dyn", 0) + r[1].get(".relr.dyn", 0) for r in runs]
        lost = sum(r[2] for r in runs)
        summary[v] = (med(totals), med(rel))
        top = sorted(runs[0][1].items(), key=lambda kv: -kv[1])[:6]
        print(f"  {v:<9} pages {' '.join(f'{t:,}' for t in totals)} (median {med(totals):,.0f}); "
              f".rela.dyn+.relr.dyn {' '.join(f'{x:,}' for x in rel)} (median {med(rel):,.0f}, "
              f"{med(rel) / med(totals):.1%}){'; LOST EVENTS ' + str(lost) if lost else ''}")
        print("            by section (run 1): " + ", ".join(f"{k} {c:,}" for k, c in top))
    o, p = summary["original"], summary["packed"]
    print(f"\n  packed/original pages: {p[0]:,.0f}/{o[0]:,.0f} = {p[0] / o[0]:.3f} "
          f"({o[0] - p[0]:,.0f} fewer, {(o[0] - p[0]) / o[0]:.1%}); relocation-table pages {o[1]:,.0f} -> {p[1]:,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
