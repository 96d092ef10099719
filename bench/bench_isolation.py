#!/usr/bin/env python3
"""Isolated and rootless measurement next to the page-cache trace on the shared disk.

    python3 bench/bench_isolation.py [--runs 5]

For libLLVM-16 (``llc-16 --version``) and libpython 3.11 (examples/libpython, GNU ld,
``python3.11 -c pass``), selective state, pages read of the library per run:

1. the shared disk, page-cache tracepoint, read_ahead_kb 128 (``measure``);
2. the same files served from a private loop device (``measure --isolate``), its
   read_ahead_kb 128: equal to 1. when the kernel reads the same pages from any device
   with the same read-ahead;
3. a copy of the library owned by user nobody, traced as root at the disk's own
   read_ahead_kb (``--read-ahead-kb -1``: the run without root cannot set it);
4. the same copy measured by user nobody (``setpriv``): no tracefs, residency before and
   after each run (cachestat or mincore); its counts next to 3.

Needs root (tracefs, loop devices), llc-16, setpriv; libpython is linked once into the
cache (examples/libpython).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import _common

LLVM = "/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1"


def targets() -> list[tuple[str, list[str], list[str], str]]:
    """[(name, files to copy for the rootless run, argv, library)]: the copy's directory
    replaces the library's in argv (``{dir}``)."""
    from elflayout.targets import libpython

    py = libpython.prepare("bfd")
    return [
        ("libLLVM-16", [LLVM], ["env", "LD_LIBRARY_PATH={dir}", "llc-16", "--version"], LLVM),
        ("libpython3.11", [str(py["lib"]), str(py["launcher"])],
         ["env", "PYTHONHOME=/usr", "{dir}/" + os.path.basename(py["launcher"]), "-c", "pass"], str(py["lib"])),
    ]


def command(argv: list[str], d: str) -> str:
    return " ".join(a.replace("{dir}", d) for a in argv)


def pages(path: Path, lib: str) -> dict:
    doc = json.loads(path.read_text())
    clean = [r["files"][lib]["pages_read"] for r in doc["runs"] if r["state"] == "selective"
             and not r.get("interference")]
    md = doc["metadata"]
    return {"n": len(clean), "runs": sum(r["state"] == "selective" for r in doc["runs"]),
            "median": float(np.median(clean)) if clean else None, "min": min(clean, default=None),
            "max": max(clean, default=None), "ra": md["read_ahead_kb"], "source": md["source"],
            "device": (md.get("isolation") or {}).get("device") or md["controls"]["read_ahead_kb"]["device"]}


def run_target(name, copy, argv, lib, runs, work: Path, py_nobody) -> dict:
    d = Path(tempfile.mkdtemp(prefix="elflayout-bench-", dir="/var/tmp"))
    try:
        for f in copy:
            shutil.copy2(f, d / os.path.basename(f))
        for p in [d, *d.iterdir()]:
            shutil.chown(p, "nobody", "nogroup")
        own = str(d / os.path.basename(lib))
        base = ["--state", "selective", "--runs", runs, "--census", "none", "--seed", 1]
        orig_cmd = command(argv, os.path.dirname(lib))
        out = {}
        _common.cli("measure", "--name", name, orig_cmd, "--files", lib, *base, "--quiet",
                    "-o", work / f"{name}-shared.json", "--force")
        out["shared"] = pages(work / f"{name}-shared.json", lib)
        _common.cli("measure", "--name", name, orig_cmd, "--files", lib, *base, "--quiet", "--isolate",
                    "-o", work / f"{name}-isolated.json", "--force")
        out["isolated"] = pages(work / f"{name}-isolated.json", lib)
        copy_cmd = command(argv, str(d))
        _common.cli("measure", "--name", name, copy_cmd, "--files", own, *base, "--quiet", "--read-ahead-kb", -1,
                    "-o", work / f"{name}-trace.json", "--force")
        out["trace"] = pages(work / f"{name}-trace.json", own)
        if py_nobody:
            args = ["measure", "--name", name, copy_cmd, "--files", own, *map(str, base), "-o", str(d / "r.json")]
            print(f"  $ {' '.join(_common.AS_NOBODY)} {_common.show_cmd(args)}", flush=True)
            r = subprocess.run([*py_nobody, "-m", "elflayout", *args], capture_output=True, text=True, cwd="/")
            if r.returncode != 0:
                raise SystemExit(f"bench_isolation: rootless measure failed: {r.stderr.strip()[-400:]}")
            line = next((ln for ln in r.stderr.splitlines() if "measuring without root" in ln), None)
            print(f"    {line}")
            out["rootless"] = pages(d / "r.json", own)
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def cell(x: dict) -> str:
    if x["median"] is None:
        return f"no usable run (0/{x['runs']})"
    rng = "" if x["min"] == x["max"] else f" ({x['min']}..{x['max']})"
    return f"{x['median']:,.0f}{rng} [{x['n']}/{x['runs']}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    from elflayout.tracefs import tracefs_status

    why = tracefs_status()
    if why or shutil.which("llc-16") is None:
        print(f"skipped: {why or 'llc-16 is not installed'}")
        return 0
    py_nobody = _common.unprivileged_python()
    work = _common.cache_dir("bench-isolation")
    rows = {t[0]: run_target(*t, a.runs, work, py_nobody) for t in targets()}
    print("\n## pages of the library read at a selectively-cold start (median [usable/all runs]; range if not all "
          "equal)\n")
    print("| library | shared disk, trace, ra 128 | private loop (--isolate), trace, ra 128 | equal | trace, disk's ra "
          "| without root (user nobody) | method | difference |")
    print("|---|---|---|---|---|---|---|---|")
    for name, o in rows.items():
        sh, iso, tr, rl = o["shared"], o["isolated"], o["trace"], o.get("rootless")
        eq = "yes" if sh["median"] == iso["median"] and sh["min"] == iso["min"] and sh["max"] == iso["max"] else "no"
        if rl and rl["median"] and tr["median"]:
            diff = f"{100 * (rl['median'] - tr['median']) / tr['median']:+.2f}%"
        else:
            diff = "–"
        rootless = f"{cell(rl)} (ra {rl['ra']})" if rl else "not run: no Python for nobody"
        print(f"| {name} | {cell(sh)} ({sh['device']}) | {cell(iso)} ({iso['device']}) | {eq} | {cell(tr)} (ra "
              f"{tr['ra']}) | {rootless} | {rl['source'] if rl else '–'} | {diff} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
