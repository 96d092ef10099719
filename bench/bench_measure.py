#!/usr/bin/env python3
"""Benchmarks and acceptance figures of the measurement harness (prints figures).

    python3 bench/bench_measure.py            # libLLVM-16 (llc-16 --version) + a small A/B
    python3 bench/bench_measure.py --quick    # fewer runs

Figures:
1. selective page counts of libLLVM-16 over N runs (must be identical), the mincore
   cross-check, wall medians selective vs hot, the (cold - hot) I/O-bound time;
2. A/A (same command under two names, 30 rounds): verdicts on wall time and pages;
3. A/B on a pair of libraries with the same size and code but a different layout of the
   data touched at startup: pages read and verdict;
4. harness overhead: hot wall time with and without page-cache tracing;
5. time to compute the statistics of a 2 x 3 x 30 results file.
Needs root (tracefs, eviction) and gcc, llc-16.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import _common  # noqa: E402
LLVM = "/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1"


def measure(out, *args):
    """One session in-process (``measure.session``), the options written as for the CLI."""
    from elflayout import results as model

    return model.parse(_common.measure(_common.plan_from_args([*args, "--census", "none"]), out), str(out))


def cmp(res, state, metric):
    return next(c for c in res.comparisons if c["state"] == state and c["metric"] == metric)


def med(res, v, s, m):
    """Median of metric ``m`` over every run of variant x state (disturbed ones included)."""
    return float(np.median([r.value(m) for r in res.runs_of(v, s)]))


def build_pair(base: Path):
    src = ("#define N (8 << 20)\nconst unsigned char big[N] = {1};\n"
           "int touch(void){int s=0;for(long i=0;i<32;i++)s+=((volatile const unsigned char*)big)[(i*STRIDE)%N];return s;}\n")
    for name, stride in (("scattered", 262144), ("packed", 1)):
        d = base / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "lib.c").write_text(src.replace("STRIDE", str(stride)))
        subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", d / "libdata.so", d / "lib.c"], check=True)
    (base / "main.c").write_text("int touch(void); int main(void){return touch()==12345;}\n")
    subprocess.run(["gcc", "-O1", "-o", base / "driver", base / "main.c", "-L", base / "packed", "-ldata"], check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    n_sel = 10
    n_aa = 12 if a.quick else 30
    tmp = Path(tempfile.mkdtemp(prefix="bench-measure-", dir=_common.cache_dir("bench-measure")))
    try:
        if shutil.which("llc-16") and os.path.exists(LLVM):
            print(f"1. libLLVM-16, llc-16 --version, selective + hot, {n_sel} rounds")
            d = measure(tmp / "llvm.json", "--name", "llc", "llc-16 --version", "--files", LLVM, "--runs", n_sel)
            allsel = [r for r in d.runs if r.state == "selective"]
            sel = [r for r in allsel if not r.disturbed]
            print(f"  disturbed by other processes (kept out of the statistics): {len(allsel) - len(sel)} of "
                  f"{len(allsel)} runs; repeated runs: {sum(r.attempts - 1 for r in d.runs)}")
            pages = [r.files[LLVM].pages_read for r in sel]
            res = [r.files[LLVM].resident_after for r in sel]
            print(f"  pages read per clean run: min {min(pages):,} max {max(pages):,} "
                  f"({'identical' if len(set(pages)) == 1 else 'NOT identical'} over {len(pages)} runs)")
            print(f"  mincore resident after run: min {min(res):,} max {max(res):,}; "
                  f"runs where it equals pages read: {sum(p == q for p, q in zip(pages, res))}/{len(res)}")
            print(f"  seeks: {sel[0].files[LLVM].seeks}, major faults: {sel[0].raw['major_faults']}")
            print(f"  wall median: selective {med(d, 'llc', 'selective', 'wall_s') * 1e3:.1f} ms, "
                  f"hot {med(d, 'llc', 'hot', 'wall_s') * 1e3:.1f} ms")
            io = [x for x in d.io_bound if x.get("variant") == "llc"][0]
            print(f"  I/O-bound (selective - hot): {io['value'] * 1e3:.1f} ms [{io['ci_low'] * 1e3:.1f}, "
                  f"{io['ci_high'] * 1e3:.1f}]")
            print(f"2. A/A: llc-16 --version twice, selective, {n_aa} rounds")
            d = measure(tmp / "aa.json", "--name", "A", "llc-16 --version", "--name", "A2", "llc-16 --version",
                        "--files", LLVM, "--state", "selective", "--runs", n_aa, "--seed", "1")
            for m in ("wall_s", "pages_read"):
                c = cmp(d, "selective", m)
                print(f"  {m}: ratio {c['ratio']:.4f} [{c['ci_low']:.4f}, {c['ci_high']:.4f}] "
                      f"p_welch {c['p_welch'] if c['p_welch'] is None else round(c['p_welch'], 3)} -> {c['verdict']}")
        else:
            print("1-2. skipped: llc-16 / libLLVM-16 not installed")
        print("3. A/B: same code and size, data touched at startup scattered vs packed, selective + hot, 10 rounds")
        build_pair(tmp / "pair")
        la, lb = tmp / "pair/scattered/libdata.so", tmp / "pair/packed/libdata.so"
        d = measure(tmp / "ab.json", "--name", "scattered", f"LD_LIBRARY_PATH={la.parent} {tmp / 'pair/driver'}",
                    "--name", "packed", f"LD_LIBRARY_PATH={lb.parent} {tmp / 'pair/driver'}", "--files", la, lb,
                    "--runs", "10")
        c = cmp(d, "selective", "pages_read")
        print(f"  pages read: scattered {c['mean_a']:,.0f}, packed {c['mean_b']:,.0f}, ratio {c['ratio']:.3f} "
              f"-> {c['verdict']}")
        c = cmp(d, "selective", "wall_s")
        print(f"  wall: ratio {c['ratio']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}] -> {c['verdict']}")
        print("4. overhead of tracing: hot runs of the scattered driver, 3 alternating sessions x 15 rounds each")
        cmd = f"LD_LIBRARY_PATH={la.parent} {tmp / 'pair/driver'}"
        w = {"traced": [], "untraced": []}
        for i in range(3):
            for kind, extra in (("traced", ()), ("untraced", ("--no-trace",))):
                t = measure(tmp / "t.json", "--name", "x", cmd, "--files", la, "--state", "hot", "--runs", "15", *extra)
                w[kind].append(med(t, "x", "hot", "wall_s"))
        w1, w0 = np.median(w["traced"]), np.median(w["untraced"])
        print(f"  median of session medians, hot wall: traced {w1 * 1e3:.2f} ms, untraced {w0 * 1e3:.2f} ms "
              f"(ratio {w1 / w0:.3f}; sessions: {[round(x * 1e3, 2) for x in w['traced']]} vs "
              f"{[round(x * 1e3, 2) for x in w['untraced']]})")
        print("5. statistics of 2 variants x 3 states x 30 runs (6 metrics)")
        from elflayout.measure import stats

        rng = np.random.default_rng(0)
        runs = [{"variant": v, "state": s, "seq": i, "round": i, "wall_s": rng.normal(0.2, 0.01), "user_s": 0.1,
                 "sys_s": rng.normal(0.05, 0.005), "major_faults": 500, "pages_read": 14227 - (v == "b") * 3000,
                 "bytes_read": 1} for i in range(30) for v in "ab" for s in ("cold", "selective", "hot")]
        t = time.monotonic()
        stats.analyse(runs, ["a", "b"], ["cold", "selective", "hot"])
        print(f"  stats.analyse: {time.monotonic() - t:.2f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
