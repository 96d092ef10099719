#!/usr/bin/env python3
"""Benchmark of pack-relocs on libLLVM-16: packing time, and pages read at startup.

1. Speed: wall time of ``elflayout pack-relocs libLLVM-16.so.1 -o OUT --force`` (the
   whole CLI, median of N) and the in-process plan/write split. Target: <= 2 s.
2. Pages: ``llc-16 --version`` with the original library vs the packed one
   (LD_LIBRARY_PATH), selective eviction of the library only (fsync +
   posix_fadvise DONTNEED), read_ahead_kb 128 (restored afterwards), pages added to
   the page cache for the library counted with tracefs
   (filemap:mm_filemap_add_to_page_cache), split by the section holding each page
   (elfcore.section_of_offsets). Variants are interleaved: every round runs each variant once, in a seeded shuffled order.

Run:  python3 bench/bench_pack.py [--runs 3] [--pack-runs 5]   (root, tracefs)
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import numpy as np  # noqa: E402

from elflayout import elfcore  # noqa: E402
from elflayout.relocs.pack import pack  # noqa: E402
from elflayout.tracefs import TraceSession, file_key, tracefs_status  # noqa: E402

LIB = Path("/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1")
RA = Path("/sys/block/vda/queue/read_ahead_kb")
RA_KB = 128
WORKLOAD = ["llc-16", "--version"]
EVICT_TRIES = 30  # seconds to wait for other users of the library to unmap it


def cache_dir() -> Path:
    d = Path(os.environ.get("ELFLAYOUT_CACHE", Path.home() / ".cache" / "elflayout")) / "bench-pack"
    d.mkdir(parents=True, exist_ok=True)
    return d


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_pages(path: Path) -> int:
    """Pages of ``path`` in the page cache (mincore), to verify an eviction."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            return -1
        n = (size + elfcore.PAGE - 1) // elfcore.PAGE
        vec = (ctypes.c_ubyte * n)()
        rc = libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec)
        libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(size))
        return -1 if rc else int((np.frombuffer(vec, np.uint8) & 1).sum())
    finally:
        os.close(fd)


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


def pages_by_section(path: Path, pages: np.ndarray) -> dict:
    with elfcore.ElfImage(path) as img:
        idx = img.section_of_offsets(pages * elfcore.PAGE)
        names = {s.index: s.name for s in img.sections}
    out = {}
    for i, c in zip(*np.unique(idx, return_counts=True)):
        out[names.get(int(i), "(no section)")] = int(c)
    return out


def one_run(lib: Path, libdir: Path | None) -> tuple[int, dict, int, int]:
    # Another process mapping the file (a concurrent profile run) keeps pages resident:
    # wait for it to go away, and flag the run if it does not.
    for _ in range(EVICT_TRIES):
        evict(lib)
        left = resident_pages(lib)
        if left == 0:
            break
        time.sleep(1)
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    if libdir is not None:
        env["LD_LIBRARY_PATH"] = str(libdir)
    with TraceSession([lib], kinds=("add",)) as ts:
        subprocess.run(WORKLOAD, check=True, env=env, stdout=subprocess.DEVNULL)
    ev = ts.result.of(file_key(lib), "add")
    pages = np.unique(np.concatenate([np.arange(p, p + n) for p, n in zip(ev["page"], ev["npages"])])
                      if ev.size else np.zeros(0, np.int64))
    return int(pages.size), pages_by_section(lib, pages), ts.result.lost, left


def bench_pages(packed: Path, runs: int, seed: int = 1) -> dict:
    why = tracefs_status()
    if why:
        return dict(skipped=why)
    old_ra = RA.read_text().strip()
    variants = {"original": (LIB, None), "packed": (packed, packed.parent)}
    rng = random.Random(seed)  # interleaved: each round runs both variants, in a shuffled order
    order = [v for _ in range(runs) for v in rng.sample(list(variants), len(variants))]
    res = {v: [] for v in variants}
    try:
        RA.write_text(str(RA_KB))
        for v in order:
            lib, libdir = variants[v]
            res[v].append(one_run(lib, libdir))
    finally:
        RA.write_text(old_ra)
    return dict(read_ahead_kb_found=old_ra, order=order, runs=res)


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
        runs = [r for r in all_runs if r[3] == 0] or all_runs
        if len(runs) < len(all_runs):
            print(f"  {v}: {len(all_runs) - len(runs)} run(s) left out: library still resident after eviction "
                  f"(mapped by another process)")
        totals = [r[0] for r in runs]
        rel = [r[1].get(".rela.dyn", 0) + r[1].get(".relr.dyn", 0) for r in runs]
        lost = sum(r[2] for r in runs)
        left = [r[3] for r in all_runs]
        summary[v] = (med(totals), med(rel))
        top = sorted(runs[0][1].items(), key=lambda kv: -kv[1])[:6]
        print(f"  {v:<9} pages {' '.join(f'{t:,}' for t in totals)} (median {med(totals):,.0f}); "
              f".rela.dyn+.relr.dyn {' '.join(f'{x:,}' for x in rel)} (median {med(rel):,.0f}, "
              f"{med(rel) / med(totals):.1%}){'; LOST EVENTS ' + str(lost) if lost else ''}")
        print(f"            resident after eviction (mincore): {' '.join(map(str, left))} pages")
        print("            by section (run 1): " + ", ".join(f"{k} {c:,}" for k, c in top))
    o, p = summary["original"], summary["packed"]
    print(f"\n  packed/original pages: {p[0]:,.0f}/{o[0]:,.0f} = {p[0] / o[0]:.3f} "
          f"({o[0] - p[0]:,.0f} fewer, {(o[0] - p[0]) / o[0]:.1%}); relocation-table pages {o[1]:,.0f} -> {p[1]:,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
