"""elflayout.linkmap on real maps written by GNU ld, gold, lld and mold, checked against nm/readelf."""

import subprocess
from pathlib import Path

import pytest

from conftest import need_tool, run_cli
from elflayout import linkmap
from elflayout.elfcore import ElfImage
from elflayout.layouts import SHF_ALLOC
from elflayout.errors import ElflayoutError

SRC_A = r"""
#include <stdio.h>
int foo(int x) { return x * 3 + printf("%d\n", x); }
int bar(int x) { int s = 0; for (int i = 0; i < x; i++) s += foo(i); return s; }
const char *tab[] = {"a", "b", "c"};
"""
SRC_B = r"""
extern int bar(int);
int a_rather_long_function_name_to_force_wrapping(int y) { return bar(y) * 2; }
static int __attribute__((noinline)) quux(int y) { return y ^ 0x55; }
int qq(int y) { return quux(y) + 1; }
"""
FUNCS = {"foo": "a.o", "bar": "a.o", "a_rather_long_function_name_to_force_wrapping": "libb.a(b.o)",
         "quux": "libb.a(b.o)", "qq": "libb.a(b.o)"}


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    need_tool("gcc")
    d = tmp_path_factory.mktemp("linkmap")
    (d / "a.c").write_text(SRC_A)
    (d / "b.c").write_text(SRC_B)
    for n in "ab":
        subprocess.run(["gcc", "-O1", "-c", "-fPIC", "-ffunction-sections", "-fdata-sections", f"{n}.c", "-o", f"{n}.o"],
                       cwd=d, check=True)
    subprocess.run(["ar", "rcs", "libb.a", "b.o"], cwd=d, check=True)
    return d


def link(d: Path, linker: str) -> tuple[Path, Path]:
    need_tool(f"ld.{linker}")
    lib, mp = d / f"lib_{linker}.so", d / f"lib_{linker}.map"
    subprocess.run(["gcc", "-shared", f"-fuse-ld={linker}", f"-Wl,-Map={mp.name}", "-o", lib.name, "a.o",
                    "-Wl,--whole-archive", "libb.a", "-Wl,--no-whole-archive"], cwd=d, check=True)
    return lib, mp


def nm(lib: Path) -> dict:
    out = {}
    for ln in subprocess.run(["nm", "-S", "--defined-only", str(lib)], capture_output=True, text=True,
                             check=True).stdout.splitlines():
        f = ln.split()
        if len(f) == 4:
            out[f[3]] = (int(f[0], 16), int(f[1], 16))
    return out


@pytest.mark.parametrize("linker", ["bfd", "gold", "lld", "mold"])
def test_map_agrees_with_nm(objects, linker):
    lib, mp = link(objects, linker)
    syms = nm(lib)
    with ElfImage(lib) as img:
        lm = linkmap.parse(mp, img)
        secs = {s.name: s for s in img.sections}
    assert lm.flavour == linker
    by_name = {}
    for s in lm:
        by_name.setdefault(s.name, []).append(s)
    for fn, obj in FUNCS.items():
        (s,) = by_name[f".text.{fn}"]
        assert s.object == obj
        assert s.output == ".text"
        assert (s.vaddr, s.size) == syms[fn], fn  # one function per section: same start and size
        text = secs[".text"]
        assert s.offset == text.offset + s.vaddr - text.addr
    # data sections too
    (tab,) = by_name[".data.rel.local.tab"] if ".data.rel.local.tab" in by_name else by_name[".data.rel.ro.local.tab"]
    assert tab.vaddr == syms["tab"][0] and tab.object == "a.o"
    # objects in placement order, archive members named as lib(member)
    assert "a.o" in lm.objects and "libb.a(b.o)" in lm.objects
    # symbols the map lists are where nm says (mold 1.10 lists exported functions at their PLT stub)
    listed = dict((n, v) for n, v, _ in lm.symbols())
    checked = [n for n in listed if n in FUNCS and not (linker == "mold")]
    for n in checked:
        assert listed[n] == syms[n][0], n
    if linker != "mold":
        assert {"foo", "bar", "qq"} <= set(checked)
    # output sections agree with the section headers
    for o in lm.output_sections:
        s = secs.get(o["name"])
        if s is not None and s.flags & SHF_ALLOC and o["size"]:
            assert (o["vaddr"], o["size"]) == (s.addr, s.size), o["name"]
    # lookups by address and by file offset land in the right input section
    (foo,) = by_name[".text.foo"]
    i = lm.lookup_vaddr([foo.vaddr + 1])[0]
    assert lm.name[i] == ".text.foo"
    assert lm.name[lm.lookup_offsets([foo.offset])[0]] == ".text.foo"


def test_flavour_detection_without_elf(objects):
    for linker in ("bfd", "gold", "lld"):
        _, mp = link(objects, linker)
        lm = linkmap.parse(mp)
        assert lm.flavour == linker and len(lm) > 10
        assert (lm.offset == -1).all()  # no image: offsets unknown


def test_gnu_ld_internal_sections(objects):
    _, mp = link(objects, "bfd")
    lm = linkmap.parse(mp)
    objs = {s.name: s.object for s in lm}
    assert objs[".dynsym"] == linkmap.INTERNAL and objs[".rela.plt"] == linkmap.INTERNAL


@pytest.mark.parametrize("linker", ["bfd", "gold", "lld"])
def test_malformed_map_names_file_and_line(objects, tmp_path, linker):
    _, mp = link(objects, linker)
    lines = mp.read_text().splitlines()
    # corrupt the address of the .text.foo input section (the line with its address)
    k = next(i for i, ln in enumerate(lines) if ".text.foo" in ln)
    if linker == "lld":
        lines[k] = lines[k].replace(lines[k].split()[0], "zz" + lines[k].split()[0], 1)
    else:
        tok = lines[k].split()
        if len(tok) == 1:
            k += 1
            tok = lines[k].split()
        addr = next(t for t in tok if t.startswith("0x"))
        lines[k] = lines[k].replace(addr, "0xZZ" + addr[2:], 1)
    bad = tmp_path / "bad.map"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ElflayoutError, match=rf"bad\.map:{k + 1}: malformed link map"):
        linkmap.parse(bad)


def test_not_a_map(tmp_path):
    p = tmp_path / "x.map"
    p.write_text("hello\nworld\n")
    with pytest.raises(ElflayoutError, match=r"x\.map:1: not a link map"):
        linkmap.parse(p)
    b = tmp_path / "bin.map"
    b.write_bytes(b"\x7fELF\0\0\0")
    with pytest.raises(ElflayoutError, match="binary"):
        linkmap.parse(b)
    with pytest.raises(ElflayoutError, match="no such file"):
        linkmap.parse(tmp_path / "missing.map")
    with pytest.raises(ElflayoutError, match="directory"):
        linkmap.parse(tmp_path)


def test_synthetic_library_maps_all_linkers(tmp_path):
    """The synthetic ground-truth library: every function's section is where nm puts it."""
    synthetic = pytest.importorskip("elflayout.targets.synthetic")
    for linker in ("bfd", "gold", "lld"):
        need_tool(f"ld.{linker}")
        b = synthetic.build(tmp_path / linker, n_objects=6, funcs_per_object=4, linker=linker)
        syms = nm(b["lib"])
        lm = linkmap.parse(b["map"])
        where = {s.name: s for s in lm if s.name.startswith(".text.sy_")}
        fns = [n for n in syms if n.startswith("sy_o") and f".text.{n}" in where]
        assert len(fns) >= 24, linker
        for n in fns:
            assert where[f".text.{n}"].vaddr == syms[n][0], (linker, n)
            assert where[f".text.{n}"].object.endswith(".o")


def test_cli_reports_malformed_map(objects, tmp_path):
    lib, _ = link(objects, "lld")
    bad = tmp_path / "trunc.map"
    bad.write_text("             VMA              LMA     Size Align Out     In      Symbol\n"
                   "             270              270       18     4 .note.gnu.build-id\n"
                   "             27q              270       18\n")
    r = run_cli("inspect", lib, "--map", bad, check=2)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("elflayout: error: ")
    assert "trunc.map:3" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("linker", ["bfd", "gold", "lld"])
def test_cxx_symbols_are_listed_demangled(tmp_path, linker):
    need_tool("g++")
    need_tool(f"ld.{linker}")
    (tmp_path / "c.cc").write_text("namespace ns { int f(int a, char b) { return a + b; }\n"
                                   "struct A { int v; A &operator=(const A &o) { v = o.v + 1; return *this; } };\n"
                                   "A &assign(A &x, const A &y) { return x = y; } }\n")
    lib, mp = tmp_path / "libc.so", tmp_path / "c.map"
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-ffunction-sections", "-fno-inline", f"-fuse-ld={linker}",
                    f"-Wl,-Map={mp}", "-o", str(lib), str(tmp_path / "c.cc")], check=True)
    lm = linkmap.parse(mp)
    syms = nm(lib)
    listed = {n: (v, k) for n, v, k in lm.symbols()}
    assert listed["ns::f(int, char)"][0] == syms["_ZN2ns1fEic"][0]
    assert lm.name[listed["ns::f(int, char)"][1]] == ".text._ZN2ns1fEic"
    assert not any(" = " in n for n in listed)
