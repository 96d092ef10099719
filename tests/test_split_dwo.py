"""split of objects compiled with -gsplit-dwarf: the skeleton in the object, the rest of
the debug information in a .dwo that split reads and leaves as it is. gcc 12's .dwo
names every address through the skeleton's .debug_addr (split, the ranges it describes
kept in one new section each); clang-22's range lists are offsets from the unit's base,
so its one-range unit is refused with the list named. A reordered link verifies, maps
every address to the same file:line and gdb, reading the .dwo, stops by line and prints
arguments and locals. A missing .dwo, or one of another build, is bad input."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import need_tool, run_cli
from split_debug_helpers import compile_g, link_lld, split_one as _split

from elflayout.errors import ElflayoutError
from elflayout.split import debugcheck
from elflayout.split.api import split_object
from elflayout.split.reader import read_object

DATA = Path(__file__).parent / "data" / "split_dwarf"
CALLS = DATA / "calls.c"
SINGLE = DATA / "single.c"        # no main: all code in .text, the unit one low_pc/high_pc range
DRIVER = "int f3(int); int main(int c, char **v) { (void)v; return f3(c) > 1000; }\n"
REORDER = {CALLS: ["main", "f2", "f4", "f1", "f3"], SINGLE: ["f3", "h2", "h1", "f2", "f1"]}
SOURCES = pytest.mark.parametrize("src", [CALLS, SINGLE], ids=["calls", "single"])


def _cc(tmp: Path, src: Path, cc: str = "gcc", *flags: str) -> Path:
    need_tool(cc)
    shutil.copy(src, tmp / src.name)
    for h in DATA.glob("*.h"):
        shutil.copy(h, tmp / h.name)
    return compile_g(tmp, Path(src.name), cc, "-gsplit-dwarf", *flags, cwd=tmp)


def _link(tmp: Path, objs: list[Path], name: str, order: list[str] | None = None) -> Path:
    return link_lld(tmp, objs, name, order)


def _objs(tmp: Path, src: Path, o: Path) -> list[Path]:
    if src != SINGLE:
        return [o]
    drv = tmp / "drv.c"
    drv.write_text(DRIVER)
    subprocess.run(["gcc", "-O2", "-c", drv, "-o", tmp / "drv.o"], check=True)
    return [o, tmp / "drv.o"]


def _starts(exe: Path) -> list[str]:
    out = subprocess.run(["nm", "-n", exe], capture_output=True, text=True, check=True).stdout
    return [ln.split()[2] for ln in out.splitlines() if ln.split()[1:2] in (["T"], ["t"])]


@pytest.mark.parametrize("src", [CALLS], ids=["calls"])
def test_gcc_split_dwarf_object_is_split(tmp_path, src):
    """Was: .text kept whole, "a -gsplit-dwarf skeleton unit: its range and location lists ... are in calls.dwo"."""
    o = _cc(tmp_path, src)
    dwo = (tmp_path / (src.stem + ".dwo")).read_bytes()
    s = _split(tmp_path, o)
    names = {x.name for x in read_object(s.read_bytes(), "x").sections}
    assert {".text.f1", ".text.f2", ".text.f3"} <= names, names
    assert (tmp_path / (src.stem + ".dwo")).read_bytes() == dwo     # (the .dwo is never written)


@pytest.mark.parametrize("src", [CALLS], ids=["calls"])
def test_gcc_split_dwarf_reordered_link_lines_verify(tmp_path, src):
    need_tool("addr2line")
    need_tool("llvm-dwarfdump-16")
    o = _cc(tmp_path, src)
    s = _split(tmp_path, o)
    orig = _link(tmp_path, _objs(tmp_path, src, o), "orig")
    exe = _link(tmp_path, _objs(tmp_path, src, s), "moved", REORDER[src])
    n, diffs = debugcheck.compare_lines(orig, exe)
    assert n > 200 and diffs == [], diffs
    assert debugcheck.verify(orig) is None and debugcheck.verify(exe) is None
    moved, first = _starts(exe), REORDER[src]
    assert moved.index(first[0]) < moved.index(first[1]) < moved.index(first[-1]), moved


def _gdb(exe: Path, line: int, *cmds: str) -> str:
    args = ["gdb", "-nx", "-batch", "-ex", f"break {CALLS.name}:{line}", "-ex", "run"]
    for c in cmds:
        args += ["-ex", c]
    r = subprocess.run([*args, "--args", exe, "xaxa"], capture_output=True, text=True, timeout=120, cwd=exe.parent)
    return r.stdout + r.stderr


def test_gdb_reads_the_dwo_in_a_reordered_link(tmp_path):
    """gdb stops by file:line in the moved f1 and prints its arguments and locals, whose
    locations are lists in the .dwo (by index: addresses of the skeleton's .debug_addr)."""
    need_tool("gdb")
    s = _split(tmp_path, _cc(tmp_path, CALLS))
    exe = _link(tmp_path, [s], "moved", REORDER[CALLS])
    assert _starts(exe).index("f2") < _starts(exe).index("f1")
    line = next(k for k, t in enumerate(CALLS.read_text().splitlines(), 1) if t.lstrip().startswith("for ("))
    out = _gdb(exe, line, "info args", "info locals", "bt")
    assert re.search(rf"Breakpoint 1(\.1)?, f1 \(a=(a@entry=)?2, b=(b@entry=)?3\) at \S*{CALLS.name}:{line}\n",
                     out), out
    assert re.search(r"\na = 2\nb = 3\ni = 0\ns = 0\n", out) and re.search(r" in main \(argc=2,", out), out


def _function_size(o: Path, name: str) -> int:
    out = subprocess.run(["nm", "-S", o], capture_output=True, text=True, check=True).stdout
    return next(int(ln.split()[1], 16) for ln in out.splitlines() if ln.split()[-1] == name)


def _patch_info(dwo: Path, old: bytes, new: bytes) -> None:
    """``old`` (found once in .debug_info.dwo) replaced by ``new``."""
    from elftools.elf.elffile import ELFFile
    raw = bytearray(dwo.read_bytes())
    with open(dwo, "rb") as fh:
        sec = ELFFile(fh).get_section_by_name(".debug_info.dwo")
        start, data = sec["sh_offset"], sec.data()
    assert data.count(old) == 1, old
    at = start + data.index(old)
    raw[at:at + len(old)] = new
    dwo.write_bytes(bytes(raw))


def test_range_of_the_dwo_across_functions_glues_them(tmp_path):
    """f2's DW_AT_high_pc in the .dwo reaching into the next function: the two stay in
    one section (the .dwo is not rewritten), the .dwo named as the reason."""
    o = _cc(tmp_path, CALLS)
    size = _function_size(o, "f2")
    _patch_info(tmp_path / "calls.dwo", size.to_bytes(8, "little"), (size + 0x20).to_bytes(8, "little"))
    _, rep = split_object(o.read_bytes(), o.name)
    text = next(x for x in rep.sections if x.name == ".text")
    why = [g.reason for g in text.glued if g.first == "f2"]
    assert why and "calls.dwo describes .text+" in why[0], text


def test_missing_dwo_is_bad_input(tmp_path):
    """One line naming the .dwo, exit 2, nothing written."""
    o = _cc(tmp_path, CALLS)
    (tmp_path / "calls.dwo").unlink()
    r = run_cli("split", o, "-o", tmp_path / "out", check=2)
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("[1/1] ")]
    assert len(lines) == 1 and str(tmp_path / "calls.dwo") in lines[0] and "cannot be read" in lines[0], r.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_dwo_of_another_build_is_bad_input(tmp_path):
    """The .dwo beside the object is of another compilation (its DWO id differs)."""
    _cc(tmp_path, CALLS, "gcc", "-O1")
    other = (tmp_path / "calls.dwo").read_bytes()
    o = _cc(tmp_path, CALLS)
    (tmp_path / "calls.dwo").write_bytes(other)
    with pytest.raises(ElflayoutError, match="calls.dwo holds no split unit of DWO id 0x"):
        split_object(o.read_bytes(), str(o))


@pytest.mark.parametrize("cc,src", [("clang-22", CALLS), ("gcc", SINGLE)], ids=["clang-calls", "gcc-single"])
def test_unit_base_lists_refused_without_a_place_for_a_new_dwo(tmp_path, cc, src):
    """A unit of one range (clang-22: always; gcc: all code in .text) whose .dwo range
    lists are offsets from the skeleton's DW_AT_low_pc: with nowhere to write a new .dwo
    that range cannot become a range list, the list named (was: "-gsplit-dwarf skeleton unit")."""
    o = _cc(tmp_path, src, cc)
    _, rep = split_object(o.read_bytes(), o.name)
    text = next(x for x in rep.sections if x.name == ".text")
    dwo = re.escape(src.stem + ".dwo")
    assert text.kept_whole and re.search(rf"range list at 0x\w+ of \S*{dwo} holds offsets from the unit's base",
                                         text.kept_whole) and "no place given for a new .dwo" in text.kept_whole, text


def _dwo_name(o: Path) -> str:
    out = subprocess.run(["llvm-dwarfdump-22", "--debug-info", o], capture_output=True, text=True, check=True).stdout
    return re.search(r'DW_AT_dwo_name\s+\("([^"]+)"\)', out)[1]


UNIT_BASE = pytest.mark.parametrize("cc,src,flags", [("clang-22", CALLS, ()), ("clang-22", SINGLE, ()), ("gcc", SINGLE, ())],
                                    ids=["clang-calls", "clang-single", "gcc-single"])


@UNIT_BASE
def test_unit_base_lists_written_again_in_a_new_dwo(tmp_path, cc, src, flags):
    """The .dwo's offset pairs from the unit's base (and from a base address now in another
    section) become startx_length entries naming new .debug_addr entries, in a new .dwo
    beside the output that the skeleton names; the input .dwo is left as it is. The reordered link maps every
    address to the same inlined frames and file:line:column, has the same location lists
    (read through the .dwo), and verifies."""
    need_tool("llvm-dwarfdump-22")
    need_tool("llvm-symbolizer-22")
    o = _cc(tmp_path, src, cc, *flags)
    old = tmp_path / (src.stem + ".dwo")
    before = old.read_bytes()
    run_cli("split", o, "-o", tmp_path / "out", check=0)
    s = tmp_path / "out" / o.name
    new = tmp_path / "out" / (src.stem + ".dwo")
    assert _dwo_name(s) == str(new) and old.read_bytes() == before
    names = {x.name for x in read_object(s.read_bytes(), "x").sections}
    assert {".text.f1", ".text.f2", ".text.f3"} <= names, names
    orig = _link(tmp_path, _objs(tmp_path, src, o), "orig")
    exe = _link(tmp_path, _objs(tmp_path, src, s), "moved", REORDER[src])
    n, diffs = debugcheck.compare_lines(orig, exe)
    assert n > 200 and diffs == [], diffs
    n, diffs = debugcheck.compare_locations(orig, exe)
    assert n >= 5 and diffs == [], (n, diffs)
    assert debugcheck.verify(orig) is None and debugcheck.verify(exe) is None
    moved, first = _starts(exe), REORDER[src]
    assert moved.index(first[0]) < moved.index(first[1]) < moved.index(first[-1]), moved


def test_gdb_reads_the_new_dwo_of_a_clang_object(tmp_path):
    need_tool("gdb")
    o = _cc(tmp_path, CALLS, "clang-22")
    run_cli("split", o, "-o", tmp_path / "out", check=0)
    exe = _link(tmp_path, [tmp_path / "out" / o.name], "moved", REORDER[CALLS])
    line = next(k for k, t in enumerate(CALLS.read_text().splitlines(), 1) if t.lstrip().startswith("for ("))
    out = _gdb(exe, line, "info args", "bt")
    assert re.search(rf"Breakpoint 1(\.1)?, f1 \(a=(a@entry=)?2, b=(b@entry=)?3\) at \S*{CALLS.name}:{line}\n",
                     out), out
    assert re.search(r"\na = 2\nb = 3\n", out) and re.search(r" in main \(argc=2,", out), out


def test_check_of_a_clang_object_with_a_new_dwo(tmp_path):
    """--check compares inlined frames (llvm-symbolizer) and location lists (llvm-dwarfdump --dwo)."""
    need_tool("ld.lld")
    o = _cc(tmp_path, CALLS, "clang-22")
    r = run_cli("split", o, "-o", tmp_path / "out", "--check", "--linker", "lld", check=0)
    assert ": split: " in r.stdout and r.stdout.count("addresses' file:line, DWARF verified") == 3, r.stdout
    assert (tmp_path / "out" / "calls.dwo").exists()


def test_dwo_sections_inside_the_object_refused_with_the_reason(tmp_path):
    """-gsplit-dwarf=single: the links name the object itself for its .dwo sections."""
    o = _cc(tmp_path, CALLS, "clang-22", "-gsplit-dwarf=single")
    _, rep = split_object(o.read_bytes(), o.name, tmp_path / "calls.dwo")
    text = next(x for x in rep.sections if x.name == ".text")
    assert text.kept_whole and "-gsplit-dwarf=single" in text.kept_whole, text


@pytest.mark.slow
@pytest.mark.download
@pytest.mark.parametrize("cc", ["gcc", "clang-22"])
def test_libzstd_built_with_gsplit_dwarf_splits_and_checks(tmp_path, cc):
    """Debian's libzstd compiled -g -O2 -gsplit-dwarf by its own Makefile: 32 of its 33
    objects split, as without -gsplit-dwarf (huf_decompress_amd64.o is assembly); was 6
    with gcc (units over several code sections) and 0 with clang-22. --check's inlined
    frames, file:line:column and location lists, read through the .dwo files, agree in
    all three orders."""
    need_tool("ld.lld")
    need_tool("llvm-symbolizer-22")
    import zstd_testlib
    objs = zstd_testlib.build(cc, ["-g", "-O2", "-gsplit-dwarf"])
    r = run_cli("split", *objs, "-o", tmp_path / "out", "--check", "--linker", "lld", check=0)
    assert sum(": split: " in ln for ln in r.stdout.splitlines() if " -> " in ln) == 32, r.stdout
    assert "kept whole in" not in r.stdout, r.stdout
    counts = re.findall(r"([\d,]+) addresses' file:line", r.stdout)
    assert len(counts) == 3 and int(counts[0].replace(",", "")) > 100_000, r.stdout
    assert r.stdout.count(", DWARF verified") == 3, r.stdout
    assert len(list((tmp_path / "out").glob("*.dwo"))) >= 20


def test_archive_member_gets_its_own_new_dwo(tmp_path):
    """A member of an archive: its new .dwo is DIR/<archive>.<member>.dwo, named by its skeleton."""
    need_tool("llvm-dwarfdump-22")
    o = _cc(tmp_path, CALLS, "clang-22")
    lib = tmp_path / "libc1.a"
    subprocess.run(["ar", "rcs", lib, o], check=True)
    run_cli("split", lib, "-o", tmp_path / "out", check=0)
    new = tmp_path / "out" / "libc1.a.calls.dwo"
    assert new.exists(), sorted((tmp_path / "out").iterdir())
    subprocess.run(["ar", "x", tmp_path / "out" / "libc1.a", "calls.o"], check=True, cwd=tmp_path / "out")
    assert _dwo_name(tmp_path / "out" / "calls.o") == str(new)


BASED = """#include <stdio.h>
static int helper(int x) { int y = x * 3; for (int i = 0; i < x; i++) y += i ^ y; return y; }
int foo(int a) { int s = 0; for (int i = 0; i < a; i++) s += helper(i); return s; }
int bar(int b) { int t = b; if (b > 3) t = foo(b - 1) + helper(b); return t * 2; }
int main(int argc, char **argv) { int r = bar(argc + 5); printf("%d\\n", r); return 0; }
"""


def test_dwo_location_lists_from_a_base_in_another_function(tmp_path):
    """clang-22's .dwo location lists of bar and main are offset pairs after a
    DW_LLE_base_addressx naming foo's start: written again with their own start
    (was: foo..bar and foo..main kept together, "the location list at 0x.. of a.dwo")."""
    need_tool("llvm-dwarfdump-22")
    src = tmp_path / "based.c"
    src.write_text(BASED)
    o = tmp_path / "based.o"
    subprocess.run(["clang-22", "-g", "-O2", "-gsplit-dwarf", "-c", "based.c"], check=True, cwd=tmp_path)
    out, rep = split_object(o.read_bytes(), str(o), tmp_path / "out.dwo")
    text = next(x for x in rep.sections if x.name == ".text")
    assert text.sections == 3 and not text.glued and rep.dwo == str(tmp_path / "out.dwo"), text
    s = tmp_path / "split.o"
    s.write_bytes(out)
    (tmp_path / "out.dwo").write_bytes(rep.dwo_data)
    orig = _link(tmp_path, [o], "orig")
    exe = _link(tmp_path, [s], "moved", ["main", "bar", "foo"])
    n, diffs = debugcheck.compare_locations(orig, exe)
    assert n >= 10 and diffs == [], (n, diffs)
    n, diffs = debugcheck.compare_lines(orig, exe)
    assert n > 200 and diffs == [], diffs


def test_link_split_keeps_new_dwo_files_beside_the_output(tmp_path):
    """``link --split`` splits into a temporary directory: the new .dwo files the linked
    output names go beside the output (OUTPUT.dwo/<input>/), not with the split objects."""
    need_tool("llvm-dwarfdump-22")
    from elflayout.order.link import split_command
    o = _cc(tmp_path, CALLS, "clang-22")
    out = tmp_path / "libc1.so"
    parsed = split_command({"cmd": ["clang-22", "-shared", "-o", str(out), str(o)], "output": str(out)},
                           tmp_path / "tmp-split")
    new = Path(f"{out}.dwo") / "0" / "calls.dwo"
    assert new.exists() and _dwo_name(Path(parsed["cmd"][-1])) == str(new.absolute())
