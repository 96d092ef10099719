"""A real small C library for the LTO tests: Debian's libzstd source, built with its own
Makefile (``make -C lib libzstd``) by gcc or clang, with or without LTO.

The source comes from Debian's source archive (``debsrc_testlib``): nothing is changed in
the system's apt set-up, nothing is committed.
Objects are cached per compiler and flags in ``~/.cache/elflayout/zstd``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import debsrc_testlib
from elflayout.targets import cache_dir, locked, param_key, run

PACKAGE = "libzstd"
DRIVER_C = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
int main(void) {
    size_t n = 1 << 20; char *src = malloc(n); unsigned s = 1;
    for (size_t i = 0; i < n; i++) { s = s * 1103515245 + 12345; src[i] = "abcdefgh  \n"[(s >> 16) % 11]; }
    size_t cap = ZSTD_compressBound(n); char *dst = malloc(cap), *back = malloc(n);
    size_t c = ZSTD_compress(dst, cap, src, n, 3);
    if (ZSTD_isError(c)) return 1;
    size_t d = ZSTD_decompress(back, n, dst, c);
    if (ZSTD_isError(d) || d != n || memcmp(src, back, n)) return 2;
    printf("%s %zu -> %zu\n", ZSTD_versionString(), n, c);
    return 0;
}
"""


def source() -> Path:
    """The unpacked upstream source tree (downloaded once)."""
    return debsrc_testlib.source(PACKAGE, "zstd-*", "lib/Makefile", cache="zstd")


def build(cc: str, cflags: list[str]) -> list[str]:
    """libzstd's objects compiled by its own Makefile with ``cc`` and ``cflags`` (the
    shared library's -fPIC -fvisibility=hidden added, as its Makefile does)."""
    src = source()
    flags = [*cflags, "-fPIC", "-fvisibility=hidden"]
    out = cache_dir("zstd", "build-" + param_key(src.name, cc, flags))
    stamp = out / "objects.json"
    with locked(out / ".lock"):
        if stamp.exists():
            return json.loads(stamp.read_text())
        tree = out / "tree"
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(src, tree)
        run(["make", "-C", tree / "lib", f"-j{os.cpu_count() or 1}", "libzstd", f"CC={cc}", f"CFLAGS={' '.join(flags)}",
             f"BUILD_DIR={out / 'obj'}"], what=f"make libzstd CC={cc}")
        objs = sorted(str(p) for p in (out / "obj" / "dynamic").glob("*.o"))
        stamp.write_text(json.dumps(objs))
        return objs


def link_command(driver: list[str], objects: list[str], out: Path) -> list[str]:
    """The shared library's link as its Makefile does it (``driver``: the compiler and its
    flags, LTO and -fuse-ld included), with a map beside it."""
    return [*driver, "-shared", "-pthread", "-Wl,-soname=libzstd.so.1", f"-Wl,-Map={out}.map", "-o", str(out),
            *objects]


def program(libdir: Path) -> Path:
    """The workload: compress and decompress 1 MiB, linked against libdir/libzstd.so.1."""
    c = libdir / "driver.c"
    c.write_text(DRIVER_C)
    exe = libdir / "driver"
    run(["gcc", "-O2", f"-I{source() / 'lib'}", "-o", exe, c, f"-L{libdir}", "-l:libzstd.so.1",
         "-Wl,-rpath,$ORIGIN"], what="link the zstd driver")
    return exe
