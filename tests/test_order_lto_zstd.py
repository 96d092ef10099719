"""LTO builds of a real C library (Debian's libzstd, its own Makefile): a profile of the
build without LTO applied to the LTO build makes ``link`` exit 1 naming the hot
functions it leaves out (renamed ``foo.lto_priv.0`` / ``foo.llvm.<hash>``, inlined away);
a profile of the LTO build itself orders it fully, with GNU ld, gold and lld 22.

Pages read (measure --state selective, docs/ordering.md "LTO builds"): the profile of the
build without LTO keeps 12-35% of the gain, the LTO build's own profile all of it.
"""

import json
import subprocess

import pytest

from conftest import need_tool, run_cli
import zstd_testlib as zstd

pytestmark = [pytest.mark.slow, pytest.mark.download, pytest.mark.valgrind]

VARIANTS = {
    # name: (compiler, compile flags without LTO, with LTO, link driver and linker flags)
    "gcc-lto-bfd": ("gcc", ["-O2", "-ffunction-sections", "-fdata-sections"], ["-flto=auto"], ["-fuse-ld=bfd"]),
    "gcc-lto-gold": ("gcc", ["-O2", "-ffunction-sections", "-fdata-sections"], ["-flto=auto"], ["-fuse-ld=gold"]),
    "clang22-thinlto-lld22": ("clang-22", ["-O2", "-ffunction-sections", "-fdata-sections"], ["-flto=thin"],
                              ["-fuse-ld=lld-22"]),
}


def _profile(lib, exe, out):
    run_cli("profile", "--target", lib, "--map", f"{lib}.map", "-o", out, "--", exe, check=0)
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lto_build_ordered_by_a_profile_of_another_build(tmp_path, variant):
    cc, cflags, lto, ld = VARIANTS[variant]
    need_tool(cc)
    need_tool({"-fuse-ld=bfd": "ld.bfd", "-fuse-ld=gold": "ld.gold", "-fuse-ld=lld-22": "ld.lld-22"}[ld[0]])
    plain, with_lto = zstd.build(cc, cflags), zstd.build(cc, cflags + lto)
    # the build without LTO, profiled
    d0 = tmp_path / "plain"
    d0.mkdir()
    lib0 = d0 / "libzstd.so.1"
    subprocess.run(zstd.link_command([cc, *cflags, *ld], plain, lib0), check=True)
    prof0 = _profile(lib0, zstd.program(d0), tmp_path / "plain.json")
    # the LTO build ordered by it: not reported as honoured
    d1 = tmp_path / "lto-by-plain"
    d1.mkdir()
    lib1 = d1 / "libzstd.so.1"
    r = run_cli("link", "--profile", prof0, "--", *zstd.link_command([cc, *cflags, *lto, *ld], with_lto, lib1), check=1)
    last = r.stderr.strip().splitlines()[-1]
    assert "the library is an LTO build" in last and "Profile the library as built (the LTO build itself)" in last
    assert "renamed" in last and "_internal" in last, last
    # the LTO build profiled itself orders fully
    d2 = tmp_path / "lto"
    d2.mkdir()
    lib2 = d2 / "libzstd.so.1"
    subprocess.run(zstd.link_command([cc, *cflags, *lto, *ld], with_lto, lib2), check=True)
    prof2 = _profile(lib2, zstd.program(d2), tmp_path / "lto.json")
    d3 = tmp_path / "lto-by-lto"
    d3.mkdir()
    lib3 = d3 / "libzstd.so.1"
    r = run_cli("link", "--profile", prof2, "--", *zstd.link_command([cc, *cflags, *lto, *ld], with_lto, lib3), check=0)
    assert "100.0% in profile order" in r.stderr
    res = json.loads(run_cli("check-order", lib3, "--profile", prof2, "--json", check=0).stdout)
    assert res["stale_hot"] is None and res["in_order_fraction"] == 1.0
    out = subprocess.run([str(zstd.program(d3))], capture_output=True, text=True, check=True).stdout
    assert "1048576 ->" in out
    # the profile without LTO, names taken from the map of the LTO link: ThinLTO's renamed
    # names are stable, so lld places them (GCC's LTO inlined too much of the profile away)
    d4 = tmp_path / "lto-by-plain-with-map"
    d4.mkdir()
    lib4 = d4 / "libzstd.so.1"
    r = run_cli("link", "--profile", prof0, "--objects-from", f"{lib2}.map", "--",
                *zstd.link_command([cc, *cflags, *lto, *ld], with_lto, lib4), check=0 if cc == "clang-22" else 1)
    if cc == "clang-22":
        res = json.loads(run_cli("check-order", lib4, "--profile", prof0, "--json", check=0).stdout)
        assert res["renamed"] > 0 and res["renamed_lost"] == 0 and res["in_order_fraction"] >= 0.9


def test_thinlto_with_debug_info_through_the_tutorial(tmp_path):
    """clang-22 -g (DWARF 5) ThinLTO + lld-22, the LTO build profiled with its link map and
    relinked by ``link --move-symtab``: fully in order, the debug info moved into the hole
    the readahead model picks (behind the end of the code for first-access, the hot start
    of .text staying beside the headers; before the code for hot-last), and gdb still
    stops at a breakpoint by file:line in the ordered library."""
    from elflayout.elfcore import ElfImage
    from elflayout.layouts import PF_X
    from elflayout.split.debugcheck import gdb_stop
    from elflayout.targets import zstd_cmake

    for tool in ("clang-22", "ld.lld-22", "gdb"):
        need_tool(tool)
    driver = ["clang-22", "-O2", "-g", "-flto=thin", "-fuse-ld=lld-22"]
    objs = zstd.build("clang-22", ["-O2", "-g", "-flto=thin"])
    d0, d1 = tmp_path / "profiled", tmp_path / "ordered"
    d0.mkdir()
    d1.mkdir()
    lib0, lib1 = d0 / "libzstd.so.1", d1 / "libzstd.so.1"
    subprocess.run(zstd.link_command(driver, objs, lib0), check=True)
    prof = _profile(lib0, zstd.program(d0), tmp_path / "lto.json")
    cmd = [a for a in zstd.link_command(driver, objs, lib1) if not a.startswith("-Wl,-Map=")]
    r = run_cli("link", "--profile", prof, "--move-symtab", "--", *cmd, check=0)
    first = "algorithm: first-access" in r.stderr
    assert (", after the code" if first else ", before the code") in r.stderr, r.stderr
    res = json.loads(run_cli("check-order", lib1, "--profile", prof, "--json", check=0).stdout)
    assert res["in_order_fraction"] == 1.0 and res["stale_hot"] is None
    with ElfImage(lib1) as img:
        x = max(i for i, g in enumerate(img.loads) if g.flags & PF_X) if first else 0
        info = img.section(".debug_info").offset
        assert img.loads[x].offset + img.loads[x].filesz <= info < img.loads[x + 1].offset
        assert img.size == max(g.offset + g.filesz for g in img.loads)
    exe = zstd.program(d1)
    stop = gdb_stop([str(exe)], zstd_cmake.break_location(zstd.source()), None)
    assert stop and stop.startswith("Breakpoint 1, ZSTD_compress (") and "zstd_compress.c:" in stop, stop
