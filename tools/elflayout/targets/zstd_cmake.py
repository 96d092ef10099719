"""A real C library built by its own build system: Debian's libzstd source
(``apt-get source --download-only libzstd``, ``targets.debsrc``), configured by its CMake
(``build/cmake``, Ninja) with the options given, built once per set of options into
``~/.cache/elflayout/zstd-cmake``. The shared library's link command is the build's own
(``ninja -t commands``), so a relink is the build's link with another output.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from elflayout.targets import cache_dir, debsrc, locked, param_key, run

PACKAGE = "libzstd"
SONAME = "libzstd.so.1"
# What every build leaves out: the command-line programs, the static library, the tests.
LIBRARY_ONLY = ["-DZSTD_BUILD_PROGRAMS=OFF", "-DZSTD_BUILD_STATIC=OFF", "-DZSTD_BUILD_TESTS=OFF"]
# A line a compress-and-decompress workload runs: the call inside ZSTD_compress (its
# non-heap branch, the default), for a debugger's breakpoint by file:line.
BREAK_AT = ("lib/compress/zstd_compress.c", "size_t ZSTD_compress(", "result = ZSTD_compressCCtx(&ctxBody")


def source() -> Path:
    """The unpacked upstream tree (downloaded once; the tests' Makefile builds share it)."""
    return debsrc.unpacked(PACKAGE, "zstd-*", "lib/Makefile", cache="zstd")


def build(options: list[str]) -> tuple[Path, Path, list[str]]:
    """(build directory, its ``libzstd.so.X.Y.Z``, the build's link command for it, run from
    the build directory), configured with the CMake ``options`` and built once."""
    src = source()
    out = cache_dir("zstd-cmake", param_key(src.name, *options))
    with locked(out.parent / f".{out.name}.lock"):
        if not (out / "build.ninja").exists():
            run(["cmake", "-G", "Ninja", "-S", src / "build" / "cmake", "-B", out, *options], what="cmake libzstd")
        run(["ninja", "-C", out], what="ninja libzstd")
    lib = sorted((out / "lib").glob("libzstd.so.*.*"))[0]
    last = subprocess.run(["ninja", "-C", out, "-t", "commands", str(lib.relative_to(out))], capture_output=True,
                          text=True, check=True).stdout.splitlines()[-1]
    return out, lib, shlex.split(last.removeprefix(": && ").removesuffix(" && :"))


def configure_line(options: list[str], build_dir: Path) -> str:
    """The commands ``build`` ran, as a user types them."""
    return f"cmake -G Ninja -S {source() / 'build' / 'cmake'} -B {build_dir} {shlex.join(options)} && ninja"


def link_command(cmd: list[str], build_dir: Path, out: Path) -> list[str]:
    """The build's link command runnable anywhere: its relative inputs made absolute, its
    output ``out``."""
    cmd = list(cmd)
    cmd[cmd.index("-o") + 1] = str(out)
    return [str(build_dir / w) if not w.startswith("-") and (build_dir / w).is_file() else w for w in cmd]


def break_location(src: Path | None = None) -> str:
    """``zstd_compress.c:LINE`` of ``BREAK_AT`` in the source tree ``src`` (default: ``source()``)."""
    path, fn, stmt = BREAK_AT
    lines = ((src or source()) / path).read_text().splitlines()
    start = next(i for i, t in enumerate(lines) if t.startswith(fn))
    return f"{Path(path).name}:{next(i for i, t in enumerate(lines[start:], start + 1) if stmt in t)}"
