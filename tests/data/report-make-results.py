"""Make a small *real* results-v1 file for the report tests (needs root and tracefs).

Until `elflayout measure` writes real results, this records genuine page-cache traces of
libLLVM-16 for two commands that load it (`llc-16 --version`, `opt-16 --version`) in
the selectively-cold state (the library evicted with posix_fadvise(DONTNEED)) and hot,
interleaved in a seeded order, with read_ahead_kb set to 128 and restored afterwards.

    python3 tests/data/report-make-results.py -o tests/data/report-results-llvm.json.gz --rounds 3

Summary rows and comparisons are computed honestly (median and its BCa bootstrap CI;
ratio of medians with a bootstrap CI) but are simpler than `elflayout compare`'s.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from elflayout import fileio  # noqa: E402
from elflayout.measure import cache  # noqa: E402
from elflayout.elfcore import PAGE, ElfImage  # noqa: E402
from elflayout.layouts import SHF_ALLOC  # noqa: E402
from elflayout.tracefs import TraceSession, file_key  # noqa: E402

LIB = "/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1"
RA = Path("/sys/block/vda/queue/read_ahead_kb")
SEEK_PAGES = 32


def one_run(ts: TraceSession, argv: list[str], key) -> dict:
    ts.clear()
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    res = ts.stop()
    adds = res.of(key, "add")
    faults = res.of(key, "fault")
    pages = adds["page"]
    npages = adds["npages"]
    if len(adds) > 1:
        gap = pages[1:] - (pages[:-1] + npages[:-1])
        seeks = int(np.count_nonzero(np.abs(gap) > SEEK_PAGES))
    else:
        seeks = 0
    n = int(npages.sum())
    return {
        "wall_s": wall, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
        "major_faults": ru.ru_majflt, "minor_faults": ru.ru_minflt,
        "exit_status": os.waitstatus_to_exitcode(status),
        "files": {LIB: {
            "pages_read": n, "bytes_read": n * PAGE, "seeks": seeks,
            "reads": [[round(float(t - t0), 6), int(pg), int(k)] for t, pg, k in zip(adds["t"], pages, npages)],
            "faults": [[round(float(t - t0), 6), int(pg)] for t, pg in zip(faults["t"], faults["page"])],
        }},
    }


def summarise(runs, variants, states):
    from scipy import stats

    summary, comps = [], []
    metrics = ["wall_s", "major_faults", "pages_read", "bytes_read", "seeks"]

    def values(v, s, m):
        return np.array([r[m] if m in r else r["files"][LIB][m] for r in runs
                         if r["variant"] == v and r["state"] == s], dtype=float)

    for v in variants:
        for s in states:
            for m in metrics:
                x = values(v, s, m)
                lo = hi = float(np.median(x))
                if len(x) >= 3 and np.ptp(x) > 0:
                    ci = stats.bootstrap((x,), np.median, method="BCa", n_resamples=2000,
                                         random_state=0).confidence_interval
                    lo, hi = float(ci.low), float(ci.high)
                summary.append({"variant": v, "state": s, "metric": m, "n": len(x), "mean": float(x.mean()),
                                "median": float(np.median(x)), "ci_low": lo, "ci_high": hi})
    a, b = variants
    rng = np.random.default_rng(0)
    for s in states:
        for m in metrics:
            xa, xb = values(a, s, m), values(b, s, m)
            if np.median(xa) == 0:
                continue
            ratio = float(np.median(xb) / np.median(xa))
            boots = [np.median(rng.choice(xb, len(xb))) / max(np.median(rng.choice(xa, len(xa))), 1e-12)
                     for _ in range(2000)]
            lo, hi = np.percentile(boots, [2.5, 97.5])
            pw = float(stats.ttest_ind(xa, xb, equal_var=False).pvalue) if np.ptp(np.r_[xa, xb]) > 0 else 1.0
            pm = float(stats.mannwhitneyu(xa, xb).pvalue) if np.ptp(np.r_[xa, xb]) > 0 else 1.0
            verdict = "no change"
            if hi < 0.98:
                verdict = "faster" if m == "wall_s" else "fewer"
            elif lo > 1.02:
                verdict = "slower" if m == "wall_s" else "more"
            comps.append({"a": a, "b": b, "state": s, "metric": m, "ratio": ratio, "ci_low": float(lo),
                          "ci_high": float(hi), "p_welch": pw, "p_mwu": pm, "verdict": verdict})
    return summary, comps


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    variants = {"llc": ["llc-16", "--version"], "opt": ["opt-16", "--version"]}
    states = ["selective", "hot"]
    key = file_key(LIB)
    img = ElfImage(LIB)
    ident = img.identity()
    ident["sections"] = [{"name": s.name, "offset": s.offset, "size": s.size}
                         for s in img.sections if s.occupies_file and (s.flags & SHF_ALLOC)]
    img.close()  # its mmap keeps the pages it hashed resident: eviction would silently fail
    old_ra = RA.read_text().strip()
    rng = random.Random(a.seed)
    runs = []
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        RA.write_text("128")
        with TraceSession([LIB], kinds=("add", "fault")) as ts:
            for rnd in range(a.rounds):
                cells = [(v, s) for v in variants for s in states]
                rng.shuffle(cells)
                for v, s in cells:
                    if s == "selective":
                        cache.evict(LIB, verify=False)
                        # Other users of the library on a shared machine keep pages resident.
                        left = subprocess.run(["fincore", "-nbo", "RES", LIB], capture_output=True, text=True)
                        if left.stdout.strip() not in ("", "0"):
                            print(f"warning: {left.stdout.strip()} bytes of {LIB} stayed resident", file=sys.stderr)
                    else:
                        subprocess.run(variants[v], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    r = one_run(ts, variants[v], key)
                    runs.append({"variant": v, "state": s, "round": rnd, **r})
    finally:
        RA.write_text(old_ra)
    summary, comps = summarise(runs, list(variants), states)
    meta = {
        "tool": "tests/data/report-make-results.py (stand-in for elflayout measure)",
        "started": started, "kernel": platform.release(), "seed": a.seed,
        "controls": {"read_ahead_kb": {"value": 128, "restored_to": int(old_ra), "device": "vda"}},
        "files": {LIB: ident},
        "notes": ["libLLVM-16 evicted with posix_fadvise(DONTNEED) before each selective run"],
    }
    doc = fileio.envelope("results", 1, meta,
                          variants=[{"name": k, "command": " ".join(v)} for k, v in variants.items()],
                          runs=runs, summary=summary, comparisons=comps)
    import gzip
    import json
    data = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
    if a.o.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    fileio.atomic_write_bytes(a.o, data)
    print(f"{a.o}: {len(runs)} runs, {len(data)} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
