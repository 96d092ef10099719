"""elflayout.symbols against binutils (nm, readelf) on libraries built here and on the system."""

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import need_tool
from elflayout import symbols
from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError

LLVM = Path("/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1")

SRC_A = r"""
#include <stdio.h>
static int __attribute__((noinline)) helper(int x) { return x * 3 + 1; }
int foo(int x) { return helper(x) + printf("%d\n", x); }
int bar(int x) { int s = 0; for (int i = 0; i < x; i++) s += foo(i); return s; }
__attribute__((cold, noinline)) int coldfn(int x) { return puts("cold") + x; }
__attribute__((visibility("hidden"))) int hidden_fn(int x) { return bar(x) - 1; }
"""
SRC_B = r"""
extern int bar(int);
int baz(int y) { return bar(y) * 2; }
static int __attribute__((noinline)) quux(int y) { return y ^ 0x55; }
int qq(int y) { return quux(y) + 1; }
"""


def build_lib(tmp: Path, linker="bfd", extra=()) -> Path:
    need_tool("gcc")
    (tmp / "a.c").write_text(SRC_A)
    (tmp / "b.c").write_text(SRC_B)
    lib = tmp / f"libt_{linker}.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-ffunction-sections", f"-fuse-ld={linker}", *extra,
                    "-o", str(lib), str(tmp / "a.c"), str(tmp / "b.c")], check=True)
    return lib


def nm_functions(lib: Path, dynamic=False) -> dict:
    """name -> (addr, size) of defined functions with a size, from nm."""
    args = ["nm", "-S", "--defined-only"] + (["-D"] if dynamic else []) + [str(lib)]
    out = {}
    for ln in subprocess.run(args, capture_output=True, text=True, check=True).stdout.splitlines():
        f = ln.split()
        if len(f) == 4 and f[2] in "TtWi":
            out[f[3].split("@")[0]] = (int(f[0], 16), int(f[1], 16))
    return out


def readelf_fdes(lib: Path) -> list[tuple[int, int]]:
    out = subprocess.run(["readelf", "--debug-dump=frames", str(lib)], capture_output=True, text=True, check=True).stdout
    return sorted((int(a, 16), int(b, 16) - int(a, 16)) for a, b in re.findall(r" FDE cie=\w+ pc=([0-9a-f]+)\.\.([0-9a-f]+)", out))


@pytest.mark.parametrize("linker", ["bfd", "gold", "lld"])
def test_symtab_functions_match_nm(tmp_path, linker):
    need_tool(f"ld.{linker}")
    lib = build_lib(tmp_path, linker)
    want = nm_functions(lib)
    with ElfImage(lib) as img:
        ft = symbols.functions(img, sources=("symtab",))
        got = {n: (int(v), int(s)) for n, v, s in zip(ft.names, ft.vaddr, ft.size)}
        assert set(ft.source.tolist()) == {symbols.SRC_SYMTAB}
        # every name nm reports is there with its address and size
        for name in ("foo", "bar", "baz", "qq", "quux", "hidden_fn", "coldfn"):
            assert got[name] == want[name], name
        assert got == {n: want[n] for n in got}
        # file offsets: same section-relative position as readelf's section headers
        text = img.section(".text")
        i = ft.names.index("foo")
        assert ft.offset[i] == text.offset + (want["foo"][0] - text.addr)


def test_dynsym_only_when_stripped(tmp_path):
    lib = build_lib(tmp_path)
    stripped = tmp_path / "libstripped.so"
    shutil.copy(lib, stripped)
    subprocess.run(["strip", str(stripped)], check=True)
    dyn = nm_functions(stripped, dynamic=True)
    with ElfImage(stripped) as img:
        assert img.section(".symtab") is None
        ft = symbols.functions(img)
        named = {n: (int(v), int(s)) for n, v, s, k in zip(ft.names, ft.vaddr, ft.size, ft.named) if k}
        assert named == dyn  # hidden_fn, quux are not exported: they must come from FDEs
        assert "quux" not in named and "hidden_fn" not in named
        fdes = readelf_fdes(stripped)
        # every FDE that no exported symbol covers became a fde_<hex> function
        for start, size in fdes:
            i = ft.by_name().get(f"fde_{start:x}")
            if any(v <= start < v + s for v, s in named.values()):
                assert i is None
            else:
                assert i is not None and ft.size[i] == size and ft.vaddr[i] == start


@pytest.mark.parametrize("linker", ["bfd", "lld"])
def test_fde_extents_match_readelf(tmp_path, linker):
    need_tool(f"ld.{linker}")
    lib = build_lib(tmp_path, linker)
    subprocess.run(["strip", str(lib)], check=True)
    with ElfImage(lib) as img:
        begin, rng = symbols.fde_extents(img)
        assert list(zip(begin.tolist(), rng.tolist())) == readelf_fdes(lib)
        # the pyelftools fallback agrees with the vectorised reader
        b2, r2 = symbols._fde_extents_pyelftools(img)
        assert np.array_equal(begin, b2) and np.array_equal(rng, r2)


def test_fde_extents_system_library():
    lib = Path("/lib/x86_64-linux-gnu/libz.so.1")
    if not lib.exists():
        pytest.skip("libz.so.1 not installed")
    with ElfImage(lib) as img:
        begin, rng = symbols.fde_extents(img)
    assert begin.size > 50
    assert list(zip(begin.tolist(), rng.tolist())) == readelf_fdes(lib)


def test_lookup_vectorised(tmp_path):
    lib = build_lib(tmp_path)
    with ElfImage(lib) as img:
        ft = symbols.functions(img)
    i = ft.names.index("bar")
    probes = np.array([ft.offset[i], ft.offset[i] + ft.size[i] - 1, ft.offset[i] + ft.size[i], 0, 10**9])
    got = ft.lookup(probes)
    assert got[0] == i and got[1] == i
    assert got[2] != i  # one past the end belongs to the next function or nothing
    assert got[3] == -1 and got[4] == -1
    # sorted by offset, non-overlapping
    assert np.all(np.diff(ft.offset) > 0)
    assert np.all(ft.offset[:-1] + ft.size[:-1] <= ft.offset[1:])
    rec = ft.records()
    assert rec.size == len(ft) and ft.names[rec["name"][i]] == "bar"


def test_unknown_source_rejected(tmp_path):
    lib = build_lib(tmp_path)
    with ElfImage(lib) as img, pytest.raises(ValueError):
        symbols.functions(img, sources=("symtab", "dwarf"))


def test_corrupt_eh_frame_hdr_is_an_error(tmp_path):
    lib = build_lib(tmp_path)
    with ElfImage(lib) as img:
        hdr = img.section(".eh_frame_hdr")
    data = bytearray(lib.read_bytes())
    # point the first table entry's FDE somewhere that is not that FDE
    data[hdr.offset + 16:hdr.offset + 20] = (0x7FFFFFF0).to_bytes(4, "little")
    bad = tmp_path / "libbad.so"
    bad.write_bytes(bytes(data))
    with ElfImage(bad) as img, pytest.raises(ElflayoutError, match="libbad.so"):
        symbols.fde_extents(img)


@pytest.mark.slow
def test_libllvm_fdes_vs_readelf():
    if not LLVM.exists():
        pytest.skip(f"{LLVM} not installed (package libllvm16)")
    with ElfImage(LLVM) as img:
        assert img.section(".symtab") is None
        ft = symbols.functions(img)
        begin, rng = symbols.fde_extents(img)
    fdes = readelf_fdes(LLVM)
    assert ft.fde_count == len(fdes) > 100_000
    assert np.array_equal(begin, np.array([a for a, _ in fdes])) and np.array_equal(rng, np.array([s for _, s in fdes]))
    c = ft.counts()
    assert c["symtab"] == 0 and c["dynsym"] > 30_000 and c["eh_frame"] > 50_000


def test_fde_extents_without_eh_frame_hdr(tmp_path):
    """No .eh_frame_hdr (--no-eh-frame-hdr): the pyelftools walk of .eh_frame is used."""
    lib = build_lib(tmp_path, "bfd", extra=("-Wl,--no-eh-frame-hdr",))
    with ElfImage(lib) as img:
        assert img.section(".eh_frame_hdr") is None and symbols._eh_frame_hdr_table(img) is None
        begin, rng = symbols.fde_extents(img)
    assert list(zip(begin.tolist(), rng.tolist())) == readelf_fdes(lib) and begin.size >= 6


def test_stripped_library_takes_names_from_its_debug_file(tmp_path, monkeypatch):
    """objcopy --only-keep-debug + strip, as Debian's -dbgsym packages are made: the
    stripped library names its functions fde_*, with its debug file (given, or found
    under DIR/.build-id/) the real names at the same extents."""
    need_tool("gcc")
    need_tool("objcopy")
    src = tmp_path / "f.c"
    src.write_text("".join(f"int hidden_{i}(int x) {{ return x * {i + 3} + {i}; }}\n" for i in range(40))
                   + "int api(int x) { return hidden_3(x) + hidden_7(x); }\n")
    lib = tmp_path / "libf.so"
    subprocess.run(["gcc", "-O1", "-g", "-shared", "-fPIC", "-fvisibility=hidden", "-Wl,--build-id", "-o", lib, src],
                   check=True)
    with ElfImage(lib) as img:
        full = symbols.functions(img)
    dbg = tmp_path / "libf.debug"
    subprocess.run(["objcopy", "--only-keep-debug", lib, dbg], check=True)
    subprocess.run(["objcopy", "--strip-all", lib], check=True)
    monkeypatch.setattr(symbols, "DEBUG_DIRS", [str(tmp_path / "nodebug")])
    with ElfImage(lib) as img:
        bare = symbols.functions(img)
        given = symbols.functions(img, debug_files=[dbg])
        bid = img.build_id
    assert sum(n.startswith("hidden_") for n in bare.names) == 0 and "debug_file" not in bare.symbol_counts
    assert sum(n.startswith("hidden_") for n in given.names) == 40 and given.symbol_counts["debug_file"] == str(dbg)
    assert dict(zip(given.names, given.offset.tolist())) == {n: o for n, o in zip(full.names, full.offset.tolist())
                                                             if n in given.names}
    # found by build-id, as gdb does
    d = tmp_path / "debug" / ".build-id" / bid[:2]
    d.mkdir(parents=True)
    (d / f"{bid[2:]}.debug").write_bytes(dbg.read_bytes())
    monkeypatch.setattr(symbols, "DEBUG_DIRS", [str(tmp_path / "debug")])
    with ElfImage(lib) as img:
        found = symbols.functions(img)
    assert found.names == given.names
