#!/usr/bin/env python3
"""Overhead of the two profiler backends, against their targets.

valgrind backend: the floor is valgrind's own JIT, so firsttouch is compared with
``valgrind --tool=none`` on the same command (targets: code-only <= 1.3x, --data <= 3x).
trace backend: compared with the native command (target <= 1.3x), warm page cache.
Runs are interleaved (A B C D, A B C D, ...) so machine-load drift hits all variants alike;
medians of N are printed with the exact commands.

    python3 bench/bench_profile.py [-n 7] [--lib PATH] [-- CMD ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from elflayout.profile import trace, valgrind  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, env=None) -> tuple[float, float]:
    """(wall s, child CPU s): CPU time is steadier than wall time on a busy machine."""
    c0, t0 = _cpu(), time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    return time.perf_counter() - t0, _cpu() - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=7, help="runs per variant (default 7)")
    ap.add_argument("--lib", default="/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = [c for c in a.cmd if c != "--"] or ["llc-16", "--version"]
    exe = subprocess.run(["which", cmd[0]], capture_output=True, text=True).stdout.strip() or cmd[0]
    cmd = [os.path.realpath(exe), *cmd[1:]]
    why = valgrind.tool_status()
    if why:
        print(f"bench_profile: {why}", file=sys.stderr)
        return 2
    env = dict(os.environ, VALGRIND_LIB=str(valgrind.tool_dir().resolve()))
    td = tempfile.mkdtemp(prefix="bench-profile-")
    log = os.path.join(td, "ft.log")
    mark = valgrind.main_offset(cmd[0])  # as `elflayout profile` runs it: main() marked
    marks = [mark] if mark is not None else []
    variants = {
        "native": (cmd, None),
        "valgrind --tool=none": (["valgrind", "-q", "--tool=none", *cmd], None),
        "firsttouch (code)": (valgrind.valgrind_command([a.lib], log, False, marks) + cmd, env),
        "firsttouch --data": (valgrind.valgrind_command([a.lib], log, True, marks) + cmd, env),
    }
    times = {k: [] for k in variants}
    cpu = {k: [] for k in variants}
    trace_ok = trace.status() is None
    if trace_ok:
        times["trace backend"] = []
        cpu["trace backend"] = []
    for _ in range(a.n):
        for k, (c, e) in variants.items():
            w, u = timed(c, e)
            times[k].append(w)
            cpu[k].append(u)
        if trace_ok:
            c0 = _cpu()
            r = trace.run([a.lib], cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times["trace backend"].append(r.duration_s)
            cpu["trace backend"].append(_cpu() - c0)
    med = {k: statistics.median(v) for k, v in times.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"workload: {' '.join(cmd)}   target: {a.lib}   runs per variant: {a.n} (interleaved)")
    for k, (c, e) in variants.items():
        pre = f"VALGRIND_LIB={env['VALGRIND_LIB']} " if e else ""
        print(f"  {k:<22} median {med[k]:8.3f} s wall, {mcpu[k]:7.3f} s CPU  (wall min {min(times[k]):.3f}, "
              f"max {max(times[k]):.3f})   $ {pre}{' '.join(c)}")
    if trace_ok:
        print(f"  {'trace backend':<22} median {med['trace backend']:8.3f} s wall, {mcpu['trace backend']:7.3f} s CPU  "
              f"(wall min {min(times['trace backend']):.3f}, "
              f"max {max(times['trace backend']):.3f})   (TraceSession add+fault+map around the native command)")
    none, cnone = med["valgrind --tool=none"], mcpu["valgrind --tool=none"]
    print(f"ratio firsttouch code-only / tool=none: {med['firsttouch (code)'] / none:.2f}x wall, "
          f"{mcpu['firsttouch (code)'] / cnone:.2f}x CPU   (target <= 1.3x)")
    print(f"ratio firsttouch --data   / tool=none: {med['firsttouch --data'] / none:.2f}x wall, "
          f"{mcpu['firsttouch --data'] / cnone:.2f}x CPU   (target <= 3x)")
    if trace_ok:
        print(f"ratio trace backend / native:          {med['trace backend'] / med['native']:.2f}x wall   "
              f"(target <= 1.3x; CPU ratio {mcpu['trace backend'] / mcpu['native']:.2f}x)")
    else:
        print(f"trace backend not measured: {trace.status()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
