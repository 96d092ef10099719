#!/usr/bin/env python3
"""A library built with debug information through the tutorial's commands. ``--library
zstd`` (the default): Debian's libzstd source, its own Makefile (``make -C lib libzstd``) with ``CFLAGS="-g -O2"`` (gcc
12, DWARF 5, no function sections), linked as its Makefile links (``-shared -pthread``)
with lld and a map. Measured selective at read_ahead_kb 128 in one session:

* unordered: that link;
* ordered: the objects split (``elflayout split``), the split objects linked the same way
  and profiled (``profile --map --data --clean-env --env LC_ALL=C --stdout null --repeat
  3``), then the original link command through ``elflayout link --profile P --linker lld``
  (which splits the objects again, orders them, with first-access keeps cold the folios
  whose touch would start an asynchronous read of cold code, ``order.marks``, and moves
  the unloaded ``.debug_*`` and ``.symtab`` off the file's tail into the hole where the
  readahead model predicts the fewest pages, ``order.tuck``);
* the same link with ``--no-readahead-marks``, and with ``--no-readahead-marks
  --no-move-symtab`` (the debug sections left after the last segment, where the
  read-around of the last pages reads them).

Every ordered library keeps its debug information: gdb stops at a breakpoint by line
(``zstd_compress.c``, in ``ZSTD_compress``) with the workload on it.

Workload: a program compressing and decompressing 1 MiB (``tests/zstd_testlib.DRIVER_C``).
The source comes from Debian's source archive (``tests/debsrc_testlib``); the objects are
cached in ``~/.cache/elflayout/zstd``.

``--split-dwarf`` (libzstd only): ``CFLAGS="-g -O2 -gsplit-dwarf"``, the debug information
in ``.dwo`` files beside the objects (split writes a new one beside each split object
whose ``.dwo`` lists had to be written again).

``--library sqlite3``: Debian's sqlite3 source, its own autoconf build (``./configure &&
make libsqlite3.la``, configure's default CFLAGS ``-g -O2``): one object, the amalgamation
``sqlite3.c`` (a single compile unit), linked as libtool links it; the workload is SQLite's
shell linked against the library, running a small script on an in-memory database; gdb
stops by line in ``sqlite3_prepare_v2`` (``elflayout.targets.sqlite``, cached in
``~/.cache/elflayout/sqlite``).

``--compiler clang-22``: the same builds with clang-22 (``CC=clang-22``: DWARF 5 with
indexed forms, ``.debug_addr``); linked the same way.

Usage: python3 bench/bench_split_debug.py [--runs N] [--library zstd|sqlite3] [--compiler gcc|clang-22]
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

CFLAGS = ["-g", "-O2"]
DRIVER = ["gcc", "-fuse-ld=lld"]
GOAL = 0.40
# the ordered rows: name, directory; and each one's further ``elflayout link`` options
ORDERED = (("split + elflayout link (-g -O2, lld)", "ordered-lld"),
           ("split + elflayout link --no-readahead-marks", "ordered-nomarks-lld"),
           ("split + elflayout link --no-readahead-marks --no-move-symtab", "ordered-kept-lld"))
LINK_OPTS = ({}, {"readahead_marks": False}, {"readahead_marks": False, "move_symtab": False})


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


class Zstd:
    """libzstd: its Makefile's objects and link; the driver program compressing 1 MiB."""
    name, soname, build_text = "libzstd", "libzstd.so.1", "its own Makefile"
    link_text = "its Makefile's link"
    gdb_file, gdb_function = "zstd_compress.c", "ZSTD_compress"

    def __init__(self, cc: str = "gcc"):
        import zstd_testlib

        self.lib, self.cc, self.extra = zstd_testlib, cc, []

    def build(self) -> list[str]:
        return self.lib.build(self.cc, CFLAGS + self.extra)

    def link_command(self, objs: list[str], out: Path) -> list[str]:
        return self.lib.link_command(DRIVER, objs, out)

    def program(self, libdir: Path) -> list[str]:
        return [str(self.lib.program(libdir))]

    def works(self, stdout: str) -> bool:
        return stdout.startswith("1.")

    def gdb_line(self) -> int:
        text = (self.lib.source() / "lib" / "compress" / "zstd_compress.c").read_text().splitlines()
        start = next(k for k, t in enumerate(text) if t.startswith("size_t ZSTD_compress(void* dst"))
        return next(k for k in range(start, len(text)) if "ZSTD_initCCtx(&ctxBody" in text[k]) + 1


class Sqlite:
    """libsqlite3: configure + make libsqlite3.la (the amalgamation, one object), libtool's
    link; the sqlite3 shell running a small script on an in-memory database."""
    name, soname, build_text = "libsqlite3", "libsqlite3.so.0", "./configure && make libsqlite3.la"
    link_text = "libtool's link"
    gdb_file, gdb_function = "sqlite3.c", "sqlite3_prepare_v2"

    def __init__(self, cc: str = "gcc"):
        from elflayout.targets import sqlite

        self.lib, self.extra = sqlite, []
        self.built = sqlite.build(cc)

    def build(self) -> list[str]:
        return self.built["objects"]

    def link_command(self, objs: list[str], out: Path) -> list[str]:
        return self.lib.link_command(DRIVER, self.built, objs, out)

    def program(self, libdir: Path) -> list[str]:
        return self.lib.workload(self.lib.program(self.built, libdir))

    def works(self, stdout: str) -> bool:
        return stdout == self.lib.EXPECTED

    def gdb_line(self) -> int:
        text = (Path(self.built["include"]) / "sqlite3.c").read_text().splitlines()
        # the definition, not sqlite3.h's prototype earlier in the amalgamation
        start = max(k for k, t in enumerate(text) if t.startswith("SQLITE_API int sqlite3_prepare_v2("))
        return next(k for k in range(start, len(text)) if "rc = sqlite3LockAndPrepare(" in text[k]) + 1


LIBRARIES = {"zstd": Zstd, "sqlite3": Sqlite}
COMPILERS = ("gcc", "clang-22")


def link(target, objs: list[str], out: Path) -> list[str]:
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = target.link_command(objs, out)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"bench_split_debug: link of {out} failed: {r.stderr[-500:]}")
    return cmd


def gdb_stops(target, lib: Path, argv: list[str], stop: int | None = None) -> str:
    """gdb's stop line at a breakpoint by line in the target's function, with ``lib``
    loaded; at ``stop`` when given (the line the unordered build stops at: clang's line
    table may have no statement on the line asked, gdb then stops at the next one)."""
    line, f, fn = target.gdb_line(), target.gdb_file, target.gdb_function
    r = subprocess.run(["gdb", "-nx", "-batch", "-ex", "set breakpoint pending on", "-ex",
                        f"break {f}:{line}", "-ex", "run", "--args", *argv],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "LD_LIBRARY_PATH": str(lib.parent)})
    m = re.search(r"^Breakpoint 1, (\w+) \(.*\) at (\S+):(\d+)$", r.stdout, re.M)
    want = line if stop is None else stop     # (0: any line from ``line`` on)
    if not m or m[1] != fn or not m[2].endswith(f) or not (int(m[3]) == want if want else int(m[3]) >= line):
        raise SystemExit(f"bench_split_debug: gdb did not stop at {f}:{line} in {fn} "
                         f"on {lib}:\n{r.stdout[-1500:]}{r.stderr[-500:]}")
    print(f"  $ gdb -batch -ex 'break {f}:{line}' -ex run --args {shlex.join(argv)}  (LD_LIBRARY_PATH="
          f"{lib.parent})\n    stopped: {m[0]}", flush=True)
    return m[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--library", choices=sorted(LIBRARIES), default="zstd")
    ap.add_argument("--compiler", choices=COMPILERS, default="gcc")
    ap.add_argument("--split-dwarf", action="store_true", help="compile with -gsplit-dwarf too (libzstd only)")
    a = ap.parse_args(argv)
    if a.split_dwarf and a.library != "zstd":
        ap.error("--split-dwarf: libzstd only (sqlite3's build takes no flags here)")
    t = LIBRARIES[a.library](a.compiler)
    if a.split_dwarf:
        t.extra = ["-gsplit-dwarf"]
    w = bp.work_dir() / ("split-debug" + ("" if a.library == "zstd" else f"-{a.library}")
                         + ("" if a.compiler == "gcc" else f"-{a.compiler}") + ("-split-dwarf" if a.split_dwarf else ""))
    w.mkdir(parents=True, exist_ok=True)
    unordered = f"unordered (-g -O2, {t.link_text}, lld)"
    print(f"## {t.name} (Debian source, {t.build_text}, CFLAGS=\"{' '.join(CFLAGS + t.extra)}\", "
          f"{a.compiler}), unordered "
          f"against "
          f"split + elflayout link, selective, read_ahead_kb {bp.RA_KB}\n", flush=True)
    objs = t.build()
    plain = w / "libs" / "unordered-lld" / t.soname
    cmd = link(t, objs, plain)
    print(f"  its link: {shlex.join(cmd[:8])} <{len(objs)} objects>", flush=True)
    run = t.program(plain.parent)
    sobjs = split(objs, w / "split-objects")
    base = w / "libs" / "split-lld" / t.soname
    link(t, sobjs, base)
    sprof = profile(w / f"{a.library}-g-split.profile.json", base, run, Path(f"{base}.map"))
    libs = {unordered: plain}
    for (name, sub), opts in zip(ORDERED, LINK_OPTS):
        lib = libs[name] = w / "libs" / sub / t.soname
        lib.parent.mkdir(parents=True, exist_ok=True)
        bp.default_link(t.link_command(objs, lib), sprof, **opts)
    for lib in libs.values():
        r = subprocess.run(run, env={**os.environ, "LD_LIBRARY_PATH": str(lib.parent)}, capture_output=True,
                           text=True)
        if r.returncode or not t.works(r.stdout):
            raise SystemExit(f"bench_split_debug: {lib}: the workload fails (exit {r.returncode})")
    first = gdb_stops(t, plain, run, 0) if a.compiler != "gcc" else None
    for name, _sub in ORDERED:
        gdb_stops(t, libs[name], run, None if first is None else int(first.rsplit(":", 1)[1]))
    variants = {n: (lib, bp.variant_cmd(lib.parent, run, {})) for n, lib in libs.items()}
    summ, _lim, _rows = bench_split.measured_table(
        w / f"{a.library}-g.results.json", variants, a.runs, sprof, base, unordered,
        f"{t.name} -g -O2 ({t.build_text}, {a.compiler}): unordered vs split + elflayout link — selective, "
        f"read_ahead_kb "
        f"{bp.RA_KB}")
    u = summ.get(unordered, {}).get("pages")
    for name, _sub in ORDERED:
        o = summ.get(name, {}).get("pages")
        if u and o:
            print(f"Goal: at least {GOAL:.0%} fewer pages read than the unordered build of the same flags, debug "
                  f"information kept: {u:,.0f} -> {o:,.0f} pages ({(o / u - 1) * 100:+.1f}%), {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
