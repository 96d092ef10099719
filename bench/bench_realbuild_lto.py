#!/usr/bin/env python3
"""A real C library built by its own build system with debug info and ThinLTO, ordered
through the tutorial's commands: Debian's libzstd source (``apt-get source --download-only
libzstd``), its CMake (``build/cmake``) at its default ``RelWithDebInfo`` (``-O2 -g``:
clang-22 DWARF 5), ``CMAKE_C_FLAGS=-flto=thin``, linked by lld-22
(``CMAKE_SHARED_LINKER_FLAGS=-flto=thin -fuse-ld=lld-22``). Pages of ``libzstd.so.1`` read
at a selectively-cold start, read_ahead_kb 128, one measurement session:

* unordered: the build's own library;
* the LTO build's own profile (docs/tutorial.md "LTO"): the build's link with
  ``-Wl,-Map``, ``profile --map`` of it (``--data``, measure's conditions, 3 runs), then
  ``elflayout link --profile P -- CMD`` with the build's link command, with
  ``--no-move-symtab`` and with ``--move-symtab`` (the unloaded ``.debug_*``, ``.symtab``
  moved into the hole where the readahead model predicts the fewest pages, which ``link``
  also does by default when that beats leaving them: at the end of the code for
  first-access, which ``link`` then picks: the hot code at the start of ``.text``, within
  the read-ahead of the headers);
* ``--move-symtab --algorithm hot-last``: the order the model rejects there, measured;
* a profile of a different build: the same CMake build without LTO (clang-22 ``-g``,
  lld-22), profiled the same way, applied to the LTO link: ``link`` must exit 1 naming the
  functions it leaves out, or keep at least 90% of the gain; and with ``--objects-from``
  the LTO link's map (ThinLTO's renamed names taken from it).

Debug info: gdb stops at a breakpoint by file:line (``zstd_compress.c``, in
``ZSTD_compress``) on the ordered library. Workload: a program compressing and
decompressing 1 MiB (``tests/zstd_testlib.DRIVER_C``). Builds are cached in
``~/.cache/elflayout/zstd-cmake``, relinks and profiles in the bench's work directory.

With ``--compiler gcc``: the same CMake build by gcc 12 (DWARF 5) with
``CMAKE_C_FLAGS=-flto`` and ``CMAKE_SHARED_LINKER_FLAGS=-flto`` (GNU ld; ``--linker gold``:
``-flto -fuse-ld=gold``). GCC's LTO link writes all of a partition's code into one ``.text``
unless the link itself is given ``-ffunction-sections`` (its code generation takes the
link's options), so the profiled and the ordered links append it; the unordered library
is the build's own, and the profiled link (with ``-ffunction-sections``, not ordered).

Usage: python3 bench/bench_realbuild_lto.py [--runs N] [--compiler gcc [--linker bfd|gold]]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import bench_pipeline as bp  # noqa: E402
import bench_split  # noqa: E402
from bench_split import MEASURED_CONDITIONS, PROFILE_RUNS  # noqa: E402
from elflayout.targets import zstd_cmake  # noqa: E402

SONAME = zstd_cmake.SONAME
CLANG = ["-DCMAKE_C_COMPILER=clang-22", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", *zstd_cmake.LIBRARY_ONLY]
THIN = [*CLANG, "-DCMAKE_C_FLAGS=-flto=thin", "-DCMAKE_SHARED_LINKER_FLAGS=-flto=thin -fuse-ld=lld-22"]
PLAIN = [*CLANG, "-DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld-22"]
GCC = ["-DCMAKE_C_COMPILER=gcc", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", *zstd_cmake.LIBRARY_ONLY, "-DCMAKE_C_FLAGS=-flto"]
GCC_LINKERS = {"bfd": "-flto", "gold": "-flto -fuse-ld=gold"}
# GCC's LTO code generation takes the link's options: per-function sections to order.
GCC_SECTIONS = ["-ffunction-sections"]

UNORDERED = "unordered (the build's own link)"
LINK = "elflayout link --profile lto.json --no-move-symtab"
TUCK = "elflayout link --profile lto.json --move-symtab"
TUCK_FA = "elflayout link --profile lto.json --move-symtab --algorithm first-access"
TUCK_HL = "elflayout link --profile lto.json --move-symtab --algorithm hot-last"
UNORDERED_FS = "unordered, the build's link with -ffunction-sections (the profiled one)"
STALE = "profile of the build without LTO: link --move-symtab"
STALE_MAP = "profile of the build without LTO: link --objects-from <LTO map> --move-symtab"


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT / "tools"))


def _code_sha() -> str:
    """One digest of elflayout's sources (tools/elflayout/**/*.py)."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted((ROOT / "tools" / "elflayout").rglob("*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()


def linked(w: Path, name: str, build: Path, cmd: list[str], extra: list[str],
           elflayout: list[str] | None = None) -> dict:
    """The build's link into ``w/libs/NAME/libzstd.so.1`` (``extra`` appended), run as is or
    through ``elflayout link ELFLAYOUT -- CMD``; cached by command. Returns the library,
    the exit status and the verb's last lines."""
    out = w / "libs" / name / SONAME
    out.parent.mkdir(parents=True, exist_ok=True)
    full = zstd_cmake.link_command(cmd, build, out) + extra
    argv = [str(x) for x in ([sys.executable, "-m", "elflayout", "link", *elflayout, "--", *full]
                             if elflayout is not None else full)]
    # the profile's content, and elflayout's own code: a link by older code is no result of this one
    key = [argv, [bp.file_sha(Path(x)) for x in elflayout or () if Path(x).is_file()]]
    if elflayout is not None:
        key.append(_code_sha())
    stamp = out.with_name(".stamp.json")
    shown = (f"elflayout link {shlex.join(map(str, elflayout))} -- " if elflayout is not None else "") + \
        f"{shlex.join(full[:3])} ... -o {out} <{sum(a.endswith('.o') for a in full)} objects>" + \
        (f" {shlex.join(extra)}" if extra else "")
    if stamp.exists() and out.exists() and json.loads(stamp.read_text())["key"] == key:
        res = json.loads(stamp.read_text())
        print(f"  $ {shown}   (cached: exit {res['rc']})", flush=True)
        return res | {"lib": out}
    t = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, env=_env())
    print(f"  $ {shown}   ({time.monotonic() - t:.0f} s, exit {r.returncode})", flush=True)
    if r.returncode not in (0, 1) or not out.exists():
        raise SystemExit(f"bench_realbuild_lto: {name}: the link failed (exit {r.returncode}): {r.stderr[-800:]}")
    tail = [ln for ln in r.stderr.splitlines() if "reference to" not in ln][-14:]
    res = {"key": key, "rc": r.returncode, "tail": tail}
    stamp.write_text(json.dumps(res))
    return res | {"lib": out}


def profiled(w: Path, name: str, build: Path, cmd: list[str], extra: tuple = ()) -> tuple[Path, Path]:
    """The tutorial's profile: the build's link with ``-Wl,-Map``, ``profile --map`` of it."""
    lib = linked(w, f"profiled-{name}", build, cmd,
                 [*extra, f"-Wl,-Map={w / 'libs' / f'profiled-{name}' / SONAME}.map"])["lib"]
    driver = program(lib.parent)
    prof = bp.cached_profile(w / f"{name}.profile.json", lib, [
        "profile", "--target", lib, "--map", f"{lib}.map", "--data", "--env", f"LD_LIBRARY_PATH={lib.parent}",
        *MEASURED_CONDITIONS, "--repeat", PROFILE_RUNS, "-o", w / f"{name}.profile.json", "--force", "--", driver])
    return prof, lib


def program(libdir: Path) -> Path:
    import zstd_testlib

    exe = libdir / "driver"
    return exe if exe.exists() else zstd_testlib.program(libdir)


def report_gdb(libs: dict, driver: Path) -> None:
    from elflayout.split.debugcheck import gdb_stop

    at = zstd_cmake.break_location()
    for name, lib in libs.items():
        stop = gdb_stop([str(driver)], at, dict(os.environ, LD_LIBRARY_PATH=str(lib.parent)))
        print(f"  $ LD_LIBRARY_PATH={lib.parent} gdb -batch -ex 'break {at}' -ex run --args {driver}\n"
              f"    {name}: {stop or 'did NOT stop at the breakpoint'}", flush=True)


def run_workload(driver: Path, libs: dict) -> None:
    """The workload through every library: it must compress and decompress as before."""
    for lib in libs.values():
        r = subprocess.run([driver], env={**os.environ, "LD_LIBRARY_PATH": str(lib.parent)}, capture_output=True,
                           text=True)
        if r.returncode or not r.stdout.startswith("1."):
            raise SystemExit(f"bench_realbuild_lto: {lib}: the workload fails (exit {r.returncode})")


def gcc_main(runs: int, linker: str) -> int:
    """gcc 12 ``-g -flto`` linked by GNU ld or gold: unordered against the LTO build's own
    profile, default, ``--move-symtab`` and ``--algorithm first-access``."""
    w = bp.work_dir() / f"realbuild-lto-gcc-{linker}"
    w.mkdir(parents=True, exist_ok=True)
    opts = [*GCC, f"-DCMAKE_SHARED_LINKER_FLAGS={GCC_LINKERS[linker]}"]
    print(f"## libzstd (Debian source, its own CMake, RelWithDebInfo) with gcc 12 -g -flto + {linker}, "
          f"selective, read_ahead_kb {bp.RA_KB}\n", flush=True)
    gb, glib, gcmd = zstd_cmake.build(opts)
    print(f"  {zstd_cmake.configure_line(opts, gb)} (cached)\n  its link: {shlex.join(gcmd[:18])} ...", flush=True)
    plain = w / "libs" / "unordered" / SONAME
    plain.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(glib, plain)
    driver = program(plain.parent)
    prof, plib = profiled(w, "lto", gb, gcmd, GCC_SECTIONS)
    base = ["--linker", linker, "--profile", prof]
    runs_ = {LINK: linked(w, "link", gb, gcmd, GCC_SECTIONS, [*base, "--no-move-symtab"]),
             TUCK: linked(w, "link-move-symtab", gb, gcmd, GCC_SECTIONS, [*base, "--move-symtab"]),
             TUCK_FA: linked(w, "link-move-symtab-first", gb, gcmd, GCC_SECTIONS,
                             [*base, "--move-symtab", "--algorithm", "first-access"])}
    for n, r in runs_.items():
        print(f"\n  {n}: exit {r['rc']}\n" + "\n".join(f"    {ln}" for ln in r["tail"] if "link: " in ln or r["rc"]),
              flush=True)
    libs = {UNORDERED: plain, UNORDERED_FS: plib, **{n: r["lib"] for n, r in runs_.items()}}
    run_workload(driver, libs)
    print()
    report_gdb({UNORDERED: plain, TUCK: libs[TUCK], TUCK_FA: libs[TUCK_FA]}, driver)
    variants = {n: (lib, bp.variant_cmd(lib.parent, [str(driver)], {})) for n, lib in libs.items()}
    summ, _lim, _rows = bench_split.measured_table(
        w / "zstd-lto.results.json", variants, runs, prof, plib, UNORDERED,
        f"libzstd, CMake RelWithDebInfo, gcc 12 -g -flto + {linker} — selective, read_ahead_kb {bp.RA_KB}")
    first = (summ.get(UNORDERED) or {}).get("pages")
    if not first:
        return 1
    for n in (LINK, TUCK, TUCK_FA):
        if summ.get(n):
            print(f"Goal: >= 40% fewer pages than unordered: {n}: {summ[n]['pages']:,.0f} against {first:,.0f} "
                  f"({(summ[n]['pages'] - first) / first * 100:+.1f}%)", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--compiler", choices=("clang", "gcc"), default="clang",
                    help="clang-22 ThinLTO + lld-22 (default), or gcc 12 -flto")
    ap.add_argument("--linker", choices=tuple(GCC_LINKERS), default="bfd", help="with --compiler gcc: GNU ld or gold")
    a = ap.parse_args(argv)
    if a.compiler == "gcc":
        return gcc_main(a.runs, a.linker)
    w = bp.work_dir() / "realbuild-lto"
    w.mkdir(parents=True, exist_ok=True)
    print(f"## libzstd (Debian source, its own CMake, RelWithDebInfo) with clang-22 -g ThinLTO + lld-22, "
          f"selective, read_ahead_kb {bp.RA_KB}\n", flush=True)
    tb, tlib, tcmd = zstd_cmake.build(THIN)
    print(f"  {zstd_cmake.configure_line(THIN, tb)} (cached)\n  its link: {shlex.join(tcmd[:24])} ...", flush=True)
    pb, _plib, pcmd = zstd_cmake.build(PLAIN)
    print(f"  {zstd_cmake.configure_line(PLAIN, pb)} (cached; the different build)", flush=True)
    plain = w / "libs" / "unordered" / SONAME
    plain.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tlib, plain)
    driver = program(plain.parent)
    prof, plib = profiled(w, "lto", tb, tcmd)
    stale, _ = profiled(w, "no-lto", pb, pcmd)
    runs = {LINK: linked(w, "link", tb, tcmd, [], ["--profile", prof, "--no-move-symtab"]),
            TUCK: linked(w, "link-move-symtab", tb, tcmd, [], ["--profile", prof, "--move-symtab"]),
            TUCK_HL: linked(w, "link-move-symtab-hot-last", tb, tcmd, [], ["--profile", prof, "--move-symtab",
                                                                          "--algorithm", "hot-last"]),
            STALE: linked(w, "stale", tb, tcmd, [], ["--profile", stale, "--move-symtab"]),
            STALE_MAP: linked(w, "stale-map", tb, tcmd, [], ["--profile", stale, "--objects-from", f"{plib}.map",
                                                              "--move-symtab"])}
    for n, r in runs.items():
        print(f"\n  {n}: exit {r['rc']}\n" + "\n".join(f"    {ln}" for ln in r["tail"] if "link: " in ln or r["rc"]),
              flush=True)
    libs = {UNORDERED: plain, **{n: r["lib"] for n, r in runs.items()}}
    run_workload(driver, libs)
    print()
    report_gdb({UNORDERED: plain, TUCK: libs[TUCK], TUCK_HL: libs[TUCK_HL]}, driver)
    variants = {n: (lib, bp.variant_cmd(lib.parent, [str(driver)], {})) for n, lib in libs.items()}
    summ, _lim, _rows = bench_split.measured_table(
        w / "zstd-lto.results.json", variants, a.runs, prof, plib, UNORDERED,
        f"libzstd, CMake RelWithDebInfo, clang-22 -g ThinLTO + lld-22 — selective, read_ahead_kb {bp.RA_KB}")
    base = (summ.get(UNORDERED) or {}).get("pages")
    if not base:
        return 1
    gain = {n: base - s["pages"] for n, s in summ.items() if s}
    for n in (LINK, TUCK, TUCK_HL):
        if n in gain:
            print(f"Goal: >= 40% fewer pages than unordered: {n}: {summ[n]['pages']:,.0f} against {base:,.0f} "
                  f"({-gain[n] / base * 100:+.1f}%)", flush=True)
    for n in (STALE, STALE_MAP):
        if n in gain and gain.get(TUCK):  # against the same flags' order from the LTO build's own profile
            keeps = gain[n] / gain[TUCK] * 100
            ok = runs[n]["rc"] == 1 or keeps >= 90
            print(f"Goal: a different build's profile keeps >= 90% of the gain or link exits 1: {n}: exit "
                  f"{runs[n]['rc']}, {summ[n]['pages']:,.0f} pages, {keeps:.0f}% of the gain — "
                  f"{'met' if ok else 'NOT met'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
