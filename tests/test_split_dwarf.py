"""split of objects compiled with -g (gcc 12, DWARF 5, and DWARF 4 with -gdwarf-4): the debug information of a
link of the split object, in the original order and reordered, maps every address of
every function to the same file:line, verifies, and gdb stops at a breakpoint by line
in the right function. Shapes split cannot rewrite stay refused with the reason."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import need_tool, run_cli
from split_debug_helpers import compile_g, split_one as _split

from elflayout.split import debugcheck
from elflayout.split.api import split_object
from elflayout.split.reader import read_object

DATA = Path(__file__).parent / "data" / "split_dwarf"
CALLS = DATA / "calls.c"          # static functions, inlining, lexical blocks, a jump table
VERIFIED = DATA / "verified.c"    # one llvm-dwarfdump-16 --verify finishes on (it loops on calls.c's)
SINGLE = DATA / "single.c"        # no main: all code in .text, the unit one low_pc/high_pc range
DRIVER = "int f3(int); int main(int c, char **v) { (void)v; return f3(c) > 1000; }\n"
REORDER = ["main", "f2", "f4", "f1", "f3"]
# DWARF 5 (gcc 12's -g) and DWARF 4 (.debug_ranges, .debug_loc, line table version 4)
VERSIONS = pytest.mark.parametrize("gv", [(), ("-gdwarf-4",)], ids=["dwarf5", "dwarf4"])


def _cc(tmp: Path, src: Path, *flags: str) -> Path:
    return compile_g(tmp, src, "gcc", *flags)


def _link(tmp: Path, o: Path, name: str, order: list[str] | None = None) -> Path:
    exe = tmp / name
    flags = []
    if order:
        need_tool("ld.lld")
        f = tmp / f"{name}.order"
        f.write_text("\n".join(order) + "\n")
        flags = ["-fuse-ld=lld", f"-Wl,--symbol-ordering-file={f}"]
    subprocess.run(["gcc", *flags, "-o", exe, o], check=True)
    return exe


def _starts(exe: Path) -> list[str]:
    out = subprocess.run(["nm", "-n", exe], capture_output=True, text=True, check=True).stdout
    return [ln.split()[2] for ln in out.splitlines() if ln.split()[1:2] in (["T"], ["t"])]


@VERSIONS
def test_gcc_dwarf5_object_is_split(tmp_path, gv):
    """Was: "nothing split" (.debug_info describes .text as one range; DWARF 4: refused)."""
    o = _cc(tmp_path, CALLS, *gv)
    obj = read_object(_split(tmp_path, o).read_bytes(), "x")
    names = {s.name for s in obj.sections}
    assert {".text.f1", ".text.f2", ".text.f3", ".text.f4"} <= names, names


@VERSIONS
def test_line_table_same_in_original_and_reordered_links(tmp_path, gv):
    need_tool("addr2line")
    o = _cc(tmp_path, CALLS, *gv)
    s = _split(tmp_path, o)
    orig = _link(tmp_path, o, "orig")
    for exe in (_link(tmp_path, s, "same"), _link(tmp_path, s, "moved", REORDER)):
        n, diffs = debugcheck.compare_lines(orig, exe)
        assert n > 300 and diffs == [], (exe.name, diffs)
        n, diffs = debugcheck.compare_locations(orig, exe)
        assert n >= 10 and diffs == [], (exe.name, diffs)
    moved = _starts(tmp_path / "moved")
    assert moved.index("f2") < moved.index("f1") and _starts(orig).index("f1") < _starts(orig).index("f2")


def test_line_comparison_sees_a_shifted_line(tmp_path):
    """The comparison itself: one line more at the top moves every row."""
    need_tool("addr2line")
    shifted = tmp_path / "shifted"
    shifted.mkdir()
    src = shifted / CALLS.name
    src.write_text("\n" + CALLS.read_text())
    a = _link(tmp_path, _cc(tmp_path, CALLS), "a")
    b = _link(shifted, _cc(shifted, src), "b")
    n, diffs = debugcheck.compare_lines(a, b)
    assert diffs and "line table" in diffs[0], diffs


@VERSIONS
def test_dwarf_verifies_after_split(tmp_path, gv):
    need_tool("llvm-dwarfdump-16")
    o = _cc(tmp_path, VERIFIED, *gv)
    s = _split(tmp_path, o)
    orig = _link(tmp_path, o, "orig")
    assert debugcheck.verify(orig) is None
    for exe in (_link(tmp_path, s, "same"), _link(tmp_path, s, "moved", ["main", "f2", "f1"])):
        assert debugcheck.verify(exe) is None, exe.name
        assert debugcheck.compare_lines(orig, exe)[1] == []


@VERSIONS
def test_aranges_one_entry_per_new_section(tmp_path, gv):
    o = _cc(tmp_path, CALLS, *gv)
    s = _split(tmp_path, o)
    out = subprocess.run(["readelf", "-r", s], capture_output=True, text=True, check=True).stdout
    block = out.split(".rela.debug_aranges")[1].split("Relocation section")[0]
    for f in ("f1", "f2", "f3", "f4"):
        assert f".text.{f} + 0" in block, block


def test_location_expression_undecoded_bytes_compared_by_count():
    """llvm-dwarfdump prints gcc's DWARF 4 DW_OP_GNU_convert as raw bytes, with the
    DW_OP_addr of a data object that another order moves: not a difference."""
    tail = "DW_OP_lit4, DW_OP_shl, <decoding error> f7 29 1b 03 {} 00 00 00 00 00 00 22 9f"
    a, b = (debugcheck.expression_key(tail.format(x)) for x in ("64 07", "e4 0c"))
    assert a == b and "<14 undecoded bytes>" in a, a
    assert debugcheck.expression_key(tail.format("64 07") + " 9f") != a


@VERSIONS
def test_gdb_breakpoint_by_line_in_reordered_link(tmp_path, gv):
    need_tool("gdb")
    s = _split(tmp_path, _cc(tmp_path, CALLS, *gv))
    exe = _link(tmp_path, s, "moved", REORDER)
    line = next(k for k, t in enumerate(CALLS.read_text().splitlines(), 1) if t.lstrip().startswith("switch"))
    r = subprocess.run(["gdb", "-nx", "-batch", "-ex", f"break {CALLS.name}:{line}", "-ex", "run", "-ex", "bt",
                        "--args", exe], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert re.search(rf"Breakpoint 1, f2 \(k=k@entry=\d+\) at \S*{CALLS.name}:{line}\n", r.stdout), r.stdout + r.stderr
    assert " in f4 (" in r.stdout and " in main (" in r.stdout, r.stdout


@VERSIONS
def test_check_compares_line_tables(tmp_path, gv):
    need_tool("ld.lld")
    o = _cc(tmp_path, VERIFIED, *gv)
    r = run_cli("split", o, "-o", tmp_path / "out", "--check", check=0)
    assert r.stdout.count("addresses' file:line, DWARF verified") == 3, r.stdout


def test_dwarf4_range_list_across_new_sections_rewritten(tmp_path):
    """DWARF 4: the unit's .debug_ranges list covered all of .text in one pair; it now
    has one pair per new section, both addresses relocated against it, and every end
    address names the new section of its start (not the next one)."""
    o = _cc(tmp_path, CALLS, "-gdwarf-4")
    s = _split(tmp_path, o)
    size = next(x.size for x in read_object(o.read_bytes(), "o").sections if x.name == ".debug_ranges")
    out = subprocess.run(["readelf", "-r", s], capture_output=True, text=True, check=True).stdout
    block = out.split(".rela.debug_ranges")[1].split("Relocation section")[0]
    rows = [ln.split() for ln in block.splitlines() if "R_X86_64_64" in ln]
    rows = [r[4] for r in rows if int(r[0], 16) >= size]     # the lists written again, past the original ones
    pairs = list(zip(rows[::2], rows[1::2]))
    assert pairs and all(a == b for a, b in pairs), pairs
    assert {".text.f1", ".text.f2", ".text.f3", ".text.f4"} <= {a for a, _ in pairs}, pairs


def test_dwarf4_location_ends_stay_in_their_section(tmp_path):
    """DWARF 4 location list entries end with an address: the end of a function is not
    the start of the next one's new section."""
    s = _split(tmp_path, _cc(tmp_path, CALLS, "-gdwarf-4"))
    obj = read_object(s.read_bytes(), "x")
    sec = next(x for x in obj.sections if x.name == ".debug_loc")
    rel = obj.relas[obj.rela_of[sec.index]]
    syms = (rel["r_info"] >> 32).tolist()
    by_off = dict(zip(rel["r_offset"].tolist(), syms))
    ends = [(o, by_off[o + 8]) for o in by_off if o + 8 in by_off and by_off[o] != by_off[o + 8]]
    assert len(by_off) > 40 and ends == [], ends


def _link_single(tmp: Path, o: Path, name: str, order: list[str] | None = None) -> Path:
    """``o`` (from SINGLE) linked with a driver compiled without -g."""
    drv = tmp / "drv.c"
    drv.write_text(DRIVER)
    d = tmp / "drv.o"
    subprocess.run(["gcc", "-O2", "-c", drv, "-o", d], check=True)
    exe = tmp / name
    flags = []
    if order:
        need_tool("ld.lld")
        f = tmp / f"{name}.order"
        f.write_text("\n".join(order) + "\n")
        flags = ["-fuse-ld=lld", f"-Wl,--symbol-ordering-file={f}"]
    subprocess.run(["gcc", *flags, "-o", exe, o, d], check=True)
    return exe


@VERSIONS
def test_single_range_unit_gets_a_range_list(tmp_path, gv):
    """Was: .text kept whole (".debug_info describes it as one range"). The unit DIE now
    has DW_AT_ranges over the new sections, in the same bytes."""
    o = _cc(tmp_path, SINGLE, *gv)
    s = _split(tmp_path, o)
    names = {x.name for x in read_object(s.read_bytes(), "x").sections}
    assert {".text.h1", ".text.f1", ".text.h2", ".text.f2", ".text.f3"} <= names, names
    info = subprocess.run(["readelf", "--debug-dump=info", s], capture_output=True, text=True, check=True).stdout
    unit = info.split("DW_TAG_compile_unit")[1].split("Abbrev Number")[0]
    assert "DW_AT_ranges" in unit and "DW_AT_high_pc" not in unit, unit
    ranges = subprocess.run(["readelf", "-r", s], capture_output=True, text=True, check=True).stdout
    block = ranges.split(".rela.debug_ranges" if gv else ".rela.debug_rnglists")[1].split("Relocation section")[0]
    assert all(f".text.{f} + 0" in block for f in ("h1", "f1", "f2", "f3")), block


REORDER_SINGLE = ["f3", "h2", "h1", "f2", "f1"]


@VERSIONS
def test_single_range_unit_lines_locations_and_verify(tmp_path, gv):
    """Line table, location lists and llvm-dwarfdump --verify of the original-order and a
    reordered link, against the unsplit link (the header's function comes first, file 1)."""
    need_tool("addr2line")
    need_tool("llvm-dwarfdump-16")
    o = _cc(tmp_path, SINGLE, *gv)
    s = _split(tmp_path, o)
    orig = _link_single(tmp_path, o, "orig")
    assert debugcheck.verify(orig) is None
    for exe in (_link_single(tmp_path, s, "same"), _link_single(tmp_path, s, "moved", REORDER_SINGLE)):
        n, diffs = debugcheck.compare_lines(orig, exe)
        assert n > 200 and diffs == [], (exe.name, diffs)
        n, diffs = debugcheck.compare_locations(orig, exe)
        assert n >= 10 and diffs == [], (exe.name, diffs)
        assert debugcheck.verify(exe) is None, exe.name
    moved = _starts(tmp_path / "moved")
    assert moved.index("f3") < moved.index("h1") < moved.index("f2") < moved.index("f1"), moved


@pytest.mark.parametrize("gv,writer", [((), "_loclists"), (("-gdwarf-4",), "_loc4")], ids=["dwarf5", "dwarf4"])
def test_location_comparison_sees_lists_left_from_the_unit_base(tmp_path, monkeypatch, gv, writer):
    """The comparison itself: location lists kept as offsets from the unit's old base
    (now 0) describe no function's bytes any more, and are reported."""
    from elflayout.split import dwarf_write
    monkeypatch.setattr(dwarf_write, writer, lambda c, out: {})
    o = _cc(tmp_path, SINGLE, *gv)
    s = _split(tmp_path, o)
    n, diffs = debugcheck.compare_locations(_link_single(tmp_path, o, "orig"), _link_single(tmp_path, s, "moved"))
    assert n >= 10 and diffs and "only in the original" in diffs[0], diffs


@VERSIONS
def test_gdb_breakpoint_by_line_in_reordered_single_range_link(tmp_path, gv):
    need_tool("gdb")
    s = _split(tmp_path, _cc(tmp_path, SINGLE, *gv))
    exe = _link_single(tmp_path, s, "moved", REORDER_SINGLE)
    moved = _starts(exe)
    assert moved.index("f3") < moved.index("f2") < moved.index("f1"), moved
    line = next(k for k, t in enumerate(SINGLE.read_text().splitlines(), 1) if t.lstrip().startswith("switch"))
    r = subprocess.run(["gdb", "-nx", "-batch", "-ex", f"break {SINGLE.name}:{line}", "-ex", "run", "-ex", "bt",
                        "-ex", "up", "-ex", "print argc", "--args", exe, "x", "y"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert re.search(rf"Breakpoint 1, f2 \(k=k@entry=3\) at \S*{SINGLE.name}:{line}\n", r.stdout), r.stdout + r.stderr
    assert " in f3 (argc=3)" in r.stdout and "$1 = 3" in r.stdout, r.stdout


@VERSIONS
def test_check_single_range_unit(tmp_path, gv):
    need_tool("ld.lld")
    o = _cc(tmp_path, SINGLE, *gv)
    r = run_cli("split", o, "-o", tmp_path / "out", "--check", check=0)
    assert ": split: " in r.stdout and r.stdout.count("addresses' file:line, DWARF verified") == 3, r.stdout


ONE = "int a(int x) { return x + 1; }\nint b(int x) { return a(x) * 2; }\nint f3(int x) { return b(x) - 1; }\n"


@VERSIONS
def test_unit_without_range_list_section_gets_one(tmp_path, gv):
    """Was: kept whole ("cannot become a range list: no .debug_rnglists", DWARF 4: no
    .debug_ranges). The writer adds the section, its symbol and relocations; the links'
    line tables agree and verify in another order."""
    need_tool("addr2line")
    need_tool("llvm-dwarfdump-16")
    src = tmp_path / "one.c"
    src.write_text(ONE)
    o = _cc(tmp_path, src, *gv)
    name = ".debug_ranges" if gv else ".debug_rnglists"
    assert name not in {x.name for x in read_object(o.read_bytes(), "o").sections}
    s = _split(tmp_path, o)
    assert name in {x.name for x in read_object(s.read_bytes(), "s").sections}
    orig = _link_single(tmp_path, o, "orig")
    for exe in (_link_single(tmp_path, s, "same"), _link_single(tmp_path, s, "moved", ["f3", "b", "a"])):
        n, diffs = debugcheck.compare_lines(orig, exe)
        assert n > 20 and diffs == [], (exe.name, diffs)
        assert debugcheck.verify(exe) is None, exe.name
    moved = _starts(tmp_path / "moved")
    assert moved.index("f3") < moved.index("b") < moved.index("a"), moved


def test_tools_present_for_check():
    assert shutil.which("addr2line"), "binutils' addr2line is needed by split --check on -g objects"


@pytest.mark.slow
@pytest.mark.download
def test_libzstd_built_with_g_splits_and_checks(tmp_path):
    """Debian's libzstd compiled -g -O2 by its own Makefile: 32 of its 33 objects split
    (was 6: only units spanning .text and .text.unlikely; then 31, until an object with no
    range-list section got one; huf_decompress_amd64.o is assembly), and --check's line
    tables and location lists agree in all three orders."""
    need_tool("ld.lld")
    need_tool("addr2line")
    import zstd_testlib
    objs = zstd_testlib.build("gcc", ["-g", "-O2"])
    r = run_cli("split", *objs, "-o", tmp_path / "out", "--check", "--linker", "lld", check=0)
    split = [ln for ln in r.stdout.splitlines() if "zstd_compress.o -> " in ln or "zstd_v07.o -> " in ln]
    assert len(split) == 2 and all(": split: " in ln for ln in split), r.stdout
    assert sum(": split: " in ln for ln in r.stdout.splitlines() if " -> " in ln) == 32, r.stdout
    counts = re.findall(r"([\d,]+) addresses' file:line", r.stdout)
    assert len(counts) == 3 and int(counts[0].replace(",", "")) > 100_000, r.stdout
    assert r.stdout.count(", DWARF ") == 3 and "DWARF fails" not in r.stdout, r.stdout


@pytest.mark.parametrize("name,gv,src", [(n, (), src) for n in (".debug_line", ".debug_rnglists", ".debug_loclists",
                                                                ".debug_aranges", ".debug_abbrev") for src in (CALLS, SINGLE)]
                         + [(n, ("-gdwarf-4",), src) for n in (".debug_line", ".debug_ranges", ".debug_loc",
                                                                ".debug_aranges", ".debug_abbrev") for src in (CALLS, SINGLE)])
def test_damaged_debug_section_keeps_code_whole(tmp_path, name, src, gv):
    """A debug section overwritten with 0xff bytes: the code stays whole with the reason, no crash."""
    o = _cc(tmp_path, src, *gv)
    obj = read_object(o.read_bytes(), o.name)
    sec = next(s for s in obj.sections if s.name == name)
    off = obj.raw.index(sec.data)
    raw = bytearray(obj.raw)
    raw[off:off + sec.size] = b"\xff" * sec.size
    _, rep = split_object(bytes(raw), o.name)
    text = [x for x in rep.sections if x.name == ".text"][0]
    assert text.kept_whole and "DWARF debug information" in text.kept_whole and text.sections == 1, text
