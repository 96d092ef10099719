#!/usr/bin/env python3
"""The default path on a library the defaults were not tuned on: Debian's libzstd source,
built by its own CMake (``build/cmake``, Release, lld through
``CMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld``), measured selective at read_ahead_kb 128 in
one session:

* unordered: the build's own ``libzstd.so``;
* the default path: the build's link command (``ninja -t commands``) through
  ``elflayout link --profile P --linker lld -- CMD`` (in-process ``order.relink.relink``),
  P the profile a user records of the build's library (``profile --data --clean-env --env
  LC_ALL=C --stdout null --repeat 3``); and the same with the best recipe's profile (the
  split objects' build, recorded with its link map), as the libpython and libcrypto benches
  give it; and with the profile of the build's own link given ``-Wl,-Map`` (``profile --map``);
* ``elflayout launch``: the build's link run through the launcher with an empty cache (it
  adds the link map, profiles the same way with ``--map`` and relinks through ``link``);
* the best recipe: the objects split (``elflayout split``), linked in their own order with
  a map and profiled the same way, ordered (``order --format lld --algorithm hot-last
  --data-script --dynstr-out``), relinked with lld and packed (``pack-relocs --check``;
  left as linked when packing frees too little room for the table).

Workload: a program compressing and decompressing 1 MiB (``tests/zstd_testlib.DRIVER_C``).
The source comes from Debian's source archive (``apt-get source --download-only libzstd``,
``tests/debsrc_testlib``); the build is cached in ``~/.cache/elflayout/zstd-cmake``.

Usage: python3 bench/bench_default_heldout.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
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
from elflayout.errors import ElflayoutError  # noqa: E402
from bench_split import MEASURED_CONDITIONS, PROFILE_RUNS  # noqa: E402

SONAME = "libzstd.so.1"
CMAKE_OPTIONS = ["-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld",
                 "-DZSTD_BUILD_PROGRAMS=OFF", "-DZSTD_BUILD_STATIC=OFF", "-DZSTD_BUILD_TESTS=OFF"]
UNORDERED, DEFAULT, BEST = ("unordered (the build's own link, lld)", "default path (elflayout link, no flag)",
                            "best recipe: split+hot-last+data+dynstr (+packed) lld")
MAPPED = "default path, profile of the split build with its map"
LINK_MAP = "default path, profile of the build's link with -Wl,-Map (profile --map)"
LAUNCH = "elflayout launch (the build's link: it adds -Wl,-Map and profiles with it)"


def cmake_build() -> tuple[Path, Path, list[str]]:
    """(build directory, its libzstd.so, its link command), built once."""
    from elflayout.targets import zstd_cmake

    build, lib, cmd = zstd_cmake.build(CMAKE_OPTIONS)
    print(f"  {zstd_cmake.configure_line(CMAKE_OPTIONS, build)} (cached)\n  its link: {shlex.join(cmd)}", flush=True)
    return build, lib, cmd


def absolute(cmd: list[str], build: Path, out: Path) -> list[str]:
    """The link command runnable anywhere: relative objects made absolute, output ``out``."""
    from elflayout.targets import zstd_cmake

    return zstd_cmake.link_command(cmd, build, out)


def profile(out: Path, lib: Path, driver: Path | list[str], lmap: Path | None = None) -> Path:
    """The cached profile of ``driver`` (a program, or a command as a list) on ``lib``."""
    argv = driver if isinstance(driver, list) else [driver]
    return bp.cached_profile(out, lib, ["profile", "--target", lib, *(["--map", lmap] if lmap else []), "--data",
                                        "--env", f"LD_LIBRARY_PATH={lib.parent}", *MEASURED_CONDITIONS,
                                        "--repeat", PROFILE_RUNS, "-o", out, "--force", "--", *argv])


def link(cmd: list[str], what: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"bench_default_heldout: {what} failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")


def best_recipe(w: Path, build: Path, cmd: list[str], driver: Path) -> tuple[Path, Path, Path]:
    """The split objects' profile, their library (linked in their own order) and the best
    recipe's packed library."""
    from elflayout.split.api import split_inputs

    base = w / "libs" / "split-lld" / SONAME
    base.parent.mkdir(parents=True, exist_ok=True)
    objs = [x for x in absolute(cmd, build, base) if x.endswith(".o")]
    if len({Path(o).name for o in objs}) != len(objs):
        raise SystemExit("bench_default_heldout: two objects of the link share a name")
    sdir = w / "split-objects"
    split_inputs(objs, sdir, force=True)
    sobjs = {o: str(sdir / Path(o).name) for o in objs}
    print(f"  $ elflayout split <{len(objs)} objects> -o {sdir} --force (in-process)", flush=True)
    scmd = [sobjs.get(x, x) for x in absolute(cmd, build, base)] + [f"-Wl,-Map={base}.map"]
    link(scmd, "the split link")
    sprof = profile(w / "zstd-split.profile.json", base, driver, Path(f"{base}.map"))
    full = {k: w / f"zstd-split-full.{k}" for k in ("lld", "ld", "rsp")}
    bp.write_order(full["lld"], sprof, "lld", data_script=full["ld"], dynstr_out=full["rsp"], lib=base,
                   objects_from=Path(f"{base}.map"), algorithm="hot-last")
    out = w / "libs" / "split-full-lld" / SONAME
    out.parent.mkdir(parents=True, exist_ok=True)
    fcmd = [sobjs.get(x, x) for x in absolute(cmd, build, out)]
    fcmd += [f"-Wl,--symbol-ordering-file={full['lld']}", "-Wl,--no-warn-symbol-ordering", f"-Wl,-T,{full['ld']}",
             f"-Wl,@{full['rsp']}"]
    print(f"  $ {shlex.join(fcmd[-4:])} (the build's link on the split objects)", flush=True)
    link(fcmd, "the best recipe's link")
    try:
        return sprof, base, bp.pack(out, w / "libs" / "split-full-packed-lld")
    except ElflayoutError as e:  # a library with few relocations: nothing freed to hold the table
        print(f"  not packed: {e}", flush=True)
        return sprof, base, out


def mapped_profile(w: Path, build: Path, cmd: list[str], driver: Path) -> Path:
    """The profile of the build's own link with ``-Wl,-Map`` added, recorded with ``--map``:
    the map attributes code outside sized function symbols to its input section."""
    lib = w / "libs" / "unordered-mapped-lld" / SONAME
    lib.parent.mkdir(parents=True, exist_ok=True)
    link(absolute(cmd, build, lib) + [f"-Wl,-Map={lib}.map"], "the build's link with a map")
    return profile(w / "zstd-mapped.profile.json", lib, driver, Path(f"{lib}.map"))


def launched(w: Path, build: Path, cmd: list[str], driver: Path) -> Path:
    """The build's link through ``elflayout launch`` with an empty cache: it links, records
    the map and the profile (the same conditions as the other profiles), relinks ordered."""
    import shutil

    lib = w / "libs" / "launch-lld" / SONAME
    lib.parent.mkdir(parents=True, exist_ok=True)
    cache = w / "launch-cache"
    shutil.rmtree(cache, ignore_errors=True)
    opts = shlex.join(["--data", *MEASURED_CONDITIONS, "--repeat", str(PROFILE_RUNS)])
    launcher = [sys.executable, "-m", "elflayout", "launch", "--cache-dir", str(cache), "--target", "libzstd.so",
                "--profile-cmd", str(driver), "--profile-options", opts, "--strict", "--"]
    print(f"  $ elflayout launch --cache-dir {cache} --target libzstd.so --profile-cmd {driver} "
          f"--profile-options {shlex.quote(opts)} --strict -- <the build's link>", flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tools")}
    r = subprocess.run([*launcher, *absolute(cmd, build, lib)], capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(f"bench_default_heldout: elflayout launch failed (exit {r.returncode}): {r.stderr[-500:]}")
    return lib


def default_path(w: Path, build: Path, cmd: list[str], prof: Path, name: str = "default-path-lld") -> Path:
    out = w / "libs" / name / SONAME
    out.parent.mkdir(parents=True, exist_ok=True)
    bp.default_link(absolute(cmd, build, out), prof)
    return out


def main(argv=None) -> int:
    import zstd_testlib

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args(argv)
    w = bp.work_dir() / "default-heldout"
    w.mkdir(parents=True, exist_ok=True)
    print(f"## libzstd (Debian source, its own CMake build), default path against the best recipe, selective, "
          f"read_ahead_kb {bp.RA_KB}\n", flush=True)
    build, built, cmd = cmake_build()
    plain = w / "libs" / "unordered-lld" / SONAME
    plain.parent.mkdir(parents=True, exist_ok=True)
    plain.write_bytes(built.read_bytes())
    driver = zstd_testlib.program(plain.parent)
    prof = profile(w / "zstd.profile.json", plain, driver)
    sprof, sbase, best = best_recipe(w, build, cmd, driver)
    dflt = default_path(w, build, cmd, prof)
    dmap = default_path(w, build, cmd, sprof, "default-path-mapped-lld")
    dlm = default_path(w, build, cmd, mapped_profile(w, build, cmd, driver), "default-path-unsplit-map-lld")
    lch = launched(w, build, cmd, driver)
    for lib in (plain, best, dflt, dmap, dlm, lch):
        r = subprocess.run([driver], env={**os.environ, "LD_LIBRARY_PATH": str(lib.parent)}, capture_output=True,
                           text=True)
        if r.returncode or not r.stdout.startswith("1."):
            raise SystemExit(f"bench_default_heldout: {lib}: the workload fails (exit {r.returncode})")
    variants = {n: (lib, bp.variant_cmd(lib.parent, [str(driver)], {}))
                for n, lib in ((UNORDERED, plain), (BEST, best), (DEFAULT, dflt), (MAPPED, dmap), (LINK_MAP, dlm), (LAUNCH, lch))}
    summ, _lim, _rows = bench_split.measured_table(
        w / "zstd-default.results.json", variants, a.runs, sprof, sbase, UNORDERED,
        f"libzstd (CMake build): the default path against the best recipe — selective, read_ahead_kb {bp.RA_KB}")
    b = summ.get(BEST, {}).get("pages")
    for n in (DEFAULT, LINK_MAP, MAPPED, LAUNCH):
        d = summ.get(n, {}).get("pages")
        if b and d:
            print(f"Goal: the default path within 5% of the best recipe on a library not tuned for: {n}: {d:,.0f} "
                  f"pages, best recipe {b:,.0f} ({(d / b - 1) * 100:+.1f}%)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
