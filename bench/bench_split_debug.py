#!/usr/bin/env python3
"""A library built with debug information through the tutorial's commands: Debian's
libzstd source, its own Makefile (``make -C lib libzstd``) with ``CFLAGS="-g -O2"`` (gcc
12, DWARF 5, no function sections), linked as its Makefile links (``-shared -pthread``)
with lld and a map. Measured selective at read_ahead_kb 128 in one session:

* unordered: that link;
* ordered: the objects split (``elflayout split``), the split objects linked the same way
  and profiled (``profile --map --data --clean-env --env LC_ALL=C --stdout null --repeat
  3``), then the original link command through ``elflayout link --profile P --linker lld``
  (which splits the objects again and orders them).

The ordered library keeps its debug information: gdb stops at a breakpoint by line
(``zstd_compress.c``, in ``ZSTD_compress``) with the workload on it.

Workload: a program compressing and decompressing 1 MiB (``tests/zstd_testlib.DRIVER_C``).
The source comes from Debian's source archive (``tests/debsrc_testlib``); the objects are
cached in ``~/.cache/elflayout/zstd``.

Usage: python3 bench/bench_split_debug.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import bench_pipeline as bp  # noqa: E402
import bench_split  # noqa: E402
from bench_default_heldout import profile  # noqa: E402

SONAME = "libzstd.so.1"
CFLAGS = ["-g", "-O2"]
DRIVER = ["gcc", "-fuse-ld=lld"]
UNORDERED, ORDERED = "unordered (-g -O2, its Makefile's link, lld)", "split + elflayout link (-g -O2, lld)"
GOAL = 0.40


def cli(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tools")}
    return subprocess.run([sys.executable, "-m", "elflayout", *map(str, args)], capture_output=True, text=True,
                          env=env)


def split(objs: list[str], out: Path) -> list[str]:
    """``elflayout split`` of the objects; the split objects (every object, changed or not)."""
    r = cli("split", *objs, "-o", out, "--force")
    if r.returncode not in (0, 1):
        raise SystemExit(f"bench_split_debug: elflayout split failed (exit {r.returncode}): {r.stderr[-500:]}")
    done = [ln for ln in r.stdout.splitlines() if " -> " in ln]
    n = sum(": split: " in ln for ln in done)
    print(f"  $ elflayout split <{len(objs)} objects> -o {out} --force\n  {n} of {len(objs)} objects split; "
          f"the others unchanged:", flush=True)
    for ln in done:
        if ": split: " not in ln:
            print("    " + ln.split("/")[-1], flush=True)
    return [str(out / Path(o).name) for o in objs]


def link(objs: list[str], out: Path) -> list[str]:
    import zstd_testlib

    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = zstd_testlib.link_command(DRIVER, objs, out)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"bench_split_debug: link of {out} failed: {r.stderr[-500:]}")
    return cmd


def gdb_stops(lib: Path, driver: Path) -> str:
    """gdb's stop line at a breakpoint by line in ZSTD_compress, with ``lib`` loaded."""
    import zstd_testlib

    src = zstd_testlib.source() / "lib" / "compress" / "zstd_compress.c"
    text = src.read_text().splitlines()
    start = next(k for k, t in enumerate(text) if t.startswith("size_t ZSTD_compress(void* dst"))
    line = next(k for k in range(start, len(text)) if "ZSTD_initCCtx(&ctxBody" in text[k]) + 1
    r = subprocess.run(["gdb", "-nx", "-batch", "-ex", "set breakpoint pending on", "-ex",
                        f"break zstd_compress.c:{line}", "-ex", "run", "--args", driver],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "LD_LIBRARY_PATH": str(lib.parent)})
    m = re.search(r"^Breakpoint 1, (\w+) \(.*\) at (\S+):(\d+)$", r.stdout, re.M)
    if not m or m[1] != "ZSTD_compress" or not m[2].endswith("zstd_compress.c") or int(m[3]) != line:
        raise SystemExit(f"bench_split_debug: gdb did not stop at zstd_compress.c:{line} in ZSTD_compress "
                         f"on {lib}:\n{r.stdout[-1500:]}{r.stderr[-500:]}")
    print(f"  $ gdb -batch -ex 'break zstd_compress.c:{line}' -ex run --args {driver}  (LD_LIBRARY_PATH="
          f"{lib.parent})\n    stopped: {m[0]}", flush=True)
    return m[0]


def main(argv=None) -> int:
    import zstd_testlib

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args(argv)
    w = bp.work_dir() / "split-debug"
    w.mkdir(parents=True, exist_ok=True)
    print(f"## libzstd (Debian source, its own Makefile, CFLAGS=\"{' '.join(CFLAGS)}\", gcc), unordered against "
          f"split + elflayout link, selective, read_ahead_kb {bp.RA_KB}\n", flush=True)
    objs = zstd_testlib.build("gcc", CFLAGS)
    plain = w / "libs" / "unordered-lld" / SONAME
    cmd = link(objs, plain)
    print(f"  its link: {shlex.join(cmd[:8])} <{len(objs)} objects>", flush=True)
    driver = zstd_testlib.program(plain.parent)
    sobjs = split(objs, w / "split-objects")
    base = w / "libs" / "split-lld" / SONAME
    link(sobjs, base)
    sprof = profile(w / "zstd-g-split.profile.json", base, driver, Path(f"{base}.map"))
    ordered = w / "libs" / "ordered-lld" / SONAME
    ordered.parent.mkdir(parents=True, exist_ok=True)
    bp.default_link(zstd_testlib.link_command(DRIVER, objs, ordered), sprof)
    for lib in (plain, ordered):
        r = subprocess.run([driver], env={**os.environ, "LD_LIBRARY_PATH": str(lib.parent)}, capture_output=True,
                           text=True)
        if r.returncode or not r.stdout.startswith("1."):
            raise SystemExit(f"bench_split_debug: {lib}: the workload fails (exit {r.returncode})")
    gdb_stops(ordered, driver)
    variants = {n: (lib, bp.variant_cmd(lib.parent, [str(driver)], {})) for n, lib in ((UNORDERED, plain),
                                                                                      (ORDERED, ordered))}
    summ, _lim, _rows = bench_split.measured_table(
        w / "zstd-g.results.json", variants, a.runs, sprof, base, UNORDERED,
        f"libzstd -g -O2 (its Makefile): unordered vs split + elflayout link — selective, read_ahead_kb {bp.RA_KB}")
    u, o = summ.get(UNORDERED, {}).get("pages"), summ.get(ORDERED, {}).get("pages")
    if u and o:
        print(f"Goal: at least {GOAL:.0%} fewer pages read than the unordered build of the same flags, debug "
              f"information kept: {u:,.0f} -> {o:,.0f} pages ({(o / u - 1) * 100:+.1f}%)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
