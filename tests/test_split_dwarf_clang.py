"""split of objects compiled by clang-22 with -g: DWARF 5 by default (every address an
entry of .debug_addr named by an index, lists named by index through their table's
offset array, lists of offsets from the unit's base) and -gdwarf-4. A link of the split
object, in the original order and reordered, maps every address to the same file:line,
has the same location lists, verifies, and gdb stops at a breakpoint by line.
-gsplit-dwarf skeletons: refused with the reason (their .dwo's range lists are offsets from
the unit's base); a damaged .debug_addr is bad input."""

from __future__ import annotations

import re
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
CALLS = DATA / "calls.c"          # static functions, inlining, lexical blocks, a jump table
SINGLE = DATA / "single.c"        # no main: all code in .text, the unit one low_pc/high_pc range
DRIVER = "int f3(int); int main(int c, char **v) { (void)v; return f3(c) > 1000; }\n"
REORDER = {CALLS: ["main", "f2", "f4", "f1", "f3"], SINGLE: ["f3", "h2", "h1", "f2", "f1"]}
CC = "clang-22"
DUMP = "llvm-dwarfdump-22"
VERSIONS = pytest.mark.parametrize("gv", [(), ("-gdwarf-4",)], ids=["dwarf5", "dwarf4"])
SOURCES = pytest.mark.parametrize("src", [CALLS, SINGLE], ids=["calls", "single"])


def _cc(tmp: Path, src: Path, *flags: str) -> Path:
    return compile_g(tmp, src, CC, *flags, cwd=tmp)


def _link(tmp: Path, objs: list[Path], name: str, order: list[str] | None = None) -> Path:
    return link_lld(tmp, objs, name, order, cc=CC)


def _objs(tmp: Path, src: Path, o: Path) -> list[Path]:
    """``o`` and, for SINGLE (no main), a driver compiled without -g."""
    if src != SINGLE:
        return [o]
    drv = tmp / "drv.c"
    drv.write_text(DRIVER)
    subprocess.run([CC, "-O2", "-c", drv, "-o", tmp / "drv.o"], check=True)
    return [o, tmp / "drv.o"]


def _starts(exe: Path) -> list[str]:
    out = subprocess.run(["nm", "-n", exe], capture_output=True, text=True, check=True).stdout
    return [ln.split()[2] for ln in out.splitlines() if ln.split()[1:2] in (["T"], ["t"])]


@VERSIONS
@SOURCES
def test_clang_object_is_split(tmp_path, gv, src):
    """Was (DWARF 5): ".debug_addr refers to it (not rewritten by split)", .text kept whole."""
    s = _split(tmp_path, _cc(tmp_path, src, *gv))
    names = {x.name for x in read_object(s.read_bytes(), "x").sections}
    assert {".text.f1", ".text.f2", ".text.f3"} <= names, names


@SOURCES
def test_unit_gets_a_range_list_and_low_pc_zero(tmp_path, src):
    """The unit DIE's DW_AT_low_pc (an index) now names a new .debug_addr entry holding
    0, its DW_AT_high_pc became DW_AT_ranges with one relocated entry per function."""
    need_tool(DUMP)
    s = _split(tmp_path, _cc(tmp_path, src))
    out = subprocess.run([DUMP, "-v", "--debug-info", s], capture_output=True, text=True, check=True).stdout
    unit = out.split("DW_TAG_compile_unit")[1].split("DW_TAG_")[0]
    assert re.search(r"DW_AT_low_pc \[DW_FORM_addrx\]\s+\(indexed \(\w+\) address = 0x0+\)", unit), unit
    assert "DW_AT_ranges [DW_FORM_sec_offset]" in unit and "DW_AT_high_pc" not in unit, unit
    rel = subprocess.run(["readelf", "-r", s], capture_output=True, text=True, check=True).stdout
    block = rel.split(".rela.debug_rnglists")[1].split("Relocation section")[0]
    assert all(f".text.{f} + 0" in block for f in ("f1", "f2", "f3")), block


@VERSIONS
@SOURCES
def test_lines_locations_and_verify_in_reordered_link(tmp_path, gv, src):
    """Every address's file:line and every location list entry (clang names its lists
    by index: DW_FORM_loclistx) the same as the unsplit link's, in the original and in
    another order; llvm-dwarfdump --verify clean."""
    need_tool("addr2line")
    need_tool("llvm-dwarfdump-16")
    o = _cc(tmp_path, src, *gv)
    s = _split(tmp_path, o)
    orig = _link(tmp_path, _objs(tmp_path, src, o), "orig")
    assert debugcheck.verify(orig) is None
    for exe in (_link(tmp_path, _objs(tmp_path, src, s), "same"),
                _link(tmp_path, _objs(tmp_path, src, s), "moved", REORDER[src])):
        n, diffs = debugcheck.compare_lines(orig, exe)
        assert n > 200 and diffs == [], (exe.name, diffs)
        n, diffs = debugcheck.compare_locations(orig, exe)
        assert n >= 10 and diffs == [], (exe.name, n, diffs)
        assert debugcheck.verify(exe) is None, exe.name
    moved, first = _starts(tmp_path / "moved"), REORDER[src]
    assert moved.index(first[0]) < moved.index(first[1]) < moved.index(first[-1]), moved


def test_location_comparison_sees_a_list_left_from_the_unit_base(tmp_path, monkeypatch):
    """The comparison itself reads clang's indexed location lists: lists left as offsets
    from the unit's old base (now 0) are reported."""
    from elflayout.split import dwarf_write
    monkeypatch.setattr(dwarf_write, "_loclists", lambda c, out: {})
    o = _cc(tmp_path, SINGLE)
    s = _split(tmp_path, o)
    orig = _link(tmp_path, _objs(tmp_path, SINGLE, o), "orig")
    n, diffs = debugcheck.compare_locations(orig, _link(tmp_path, _objs(tmp_path, SINGLE, s), "moved"))
    assert n >= 10 and diffs and "only in the original" in diffs[0], diffs


@VERSIONS
def test_gdb_breakpoint_by_line_in_reordered_link(tmp_path, gv):
    need_tool("gdb")
    s = _split(tmp_path, _cc(tmp_path, SINGLE, *gv))
    exe = _link(tmp_path, _objs(tmp_path, SINGLE, s), "moved", REORDER[SINGLE])
    line = next(k for k, t in enumerate(SINGLE.read_text().splitlines(), 1) if t.lstrip().startswith("switch"))
    r = subprocess.run(["gdb", "-nx", "-batch", "-ex", f"break {SINGLE.name}:{line}", "-ex", "run", "-ex", "bt",
                        "-ex", "up", "-ex", "print argc", "--args", exe, "x", "y"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert re.search(rf"Breakpoint 1, f2 \(k=3\) at \S*{SINGLE.name}:{line}\n", r.stdout), r.stdout + r.stderr
    assert re.search(r" in f3 \(argc=3\)", r.stdout) and "$1 = 3" in r.stdout, r.stdout


def test_check_clang_object(tmp_path):
    need_tool("ld.lld")
    o = _cc(tmp_path, CALLS)
    r = run_cli("split", o, "-o", tmp_path / "out", "--check", "--linker", "lld", check=0)
    assert ": split: " in r.stdout and r.stdout.count("addresses' file:line, DWARF verified") == 3, r.stdout


NORETURN = """#include <stdlib.h>
static int sq(int x) { return x * x; }
__attribute__((noinline)) int f1(int a, int b) {     /* (its inlined calls need a .debug_rnglists) */
  int s = 0;
  for (int i = 0; i < a; i++) { int t = sq(i) + b; if (t > 10) { s += t; } else { s -= i; } }
  return s;
}
__attribute__((noreturn, noinline)) void die(int x) { exit(x + 1); }
__attribute__((noinline)) int check(int x) { if (x > 3) return x * 2; die(x); }
__attribute__((noinline)) int next(int x) { return check(x) + 1; }
int main(int c, char **v) { (void)v; return next(c + 3) + f1(c, 3) > 100; }
"""


def test_return_address_at_the_next_function_keeps_them_together(tmp_path):
    """``check`` ends with a call that does not return: its DW_AT_call_return_pc is
    ``next``'s first byte, and would follow ``next`` to another place."""
    src = tmp_path / "nr.c"
    src.write_text(NORETURN)
    o = _cc(tmp_path, src)
    _, rep = split_object(o.read_bytes(), o.name)
    text = next(x for x in rep.sections if x.name == ".text")
    why = [g.reason for g in text.glued if (g.first, g.last) == ("check", "next")]
    assert why and "return address" in why[0], text
    assert text.sections >= 4, text     # (f1, die, check+next, main)


def test_split_dwarf_skeleton_refused_with_the_reason(tmp_path):
    o = _cc(tmp_path, CALLS, "-gsplit-dwarf")
    _, rep = split_object(o.read_bytes(), o.name)
    text = next(x for x in rep.sections if x.name == ".text")
    assert text.kept_whole and "calls.dwo holds offsets from the unit's base address" in text.kept_whole, text


def _patched(o: Path, name: str, at: int, value: bytes) -> bytes:
    obj = read_object(o.read_bytes(), o.name)
    sec = next(s for s in obj.sections if s.name == name)
    off = obj.raw.index(sec.data)
    raw = bytearray(obj.raw)
    raw[off + at:off + at + len(value)] = value
    return bytes(raw)


@pytest.mark.parametrize("name,at,value,why", [
    (".debug_addr", 0, (4).to_bytes(4, "little"), ".debug_addr: index"),         # a table of no entries
    (".debug_addr", 4, (4).to_bytes(2, "little"), "not 32-bit DWARF 5"),         # version 4
    (".debug_loclists", 8, bytes(4), "past the offsets of .debug_loclists"),     # no offset array
    (".debug_loclists", 8, bytes([0, 0, 1, 0]), "more than it holds"),          # 65536 offsets
    (".debug_abbrev", 4, bytes([0x7E]), "unknown DWARF form 0x7e"),              # the unit's first attribute
])
def test_damaged_indexes_are_bad_input(tmp_path, name, at, value, why):
    """One line naming the file and the problem, exit 2, nothing written."""
    o = _cc(tmp_path, CALLS)
    bad = tmp_path / "bad.o"
    bad.write_bytes(_patched(o, name, at, value))
    with pytest.raises(ElflayoutError, match=re.escape(why)):
        split_object(bad.read_bytes(), str(bad))
    r = run_cli("split", bad, "-o", tmp_path / "out", check=2)
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("[1/1] ")]     # (progress)
    assert len(lines) == 1 and str(bad) in lines[0] and why in lines[0], r.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@VERSIONS
def test_unit_without_range_list_section_gets_one(tmp_path, gv):
    """A small object with no .debug_rnglists (DWARF 4: .debug_ranges) at all: the writer
    adds one for the unit's list (was: kept whole)."""
    need_tool("addr2line")
    src = tmp_path / "one.c"
    src.write_text("int a(int x) { return x + 1; }\nint b(int x) { return a(x) * 2; }\n"
                   "int f3(int x) { return b(x) - 1; }\n")
    o = _cc(tmp_path, src, *gv)
    name = ".debug_ranges" if gv else ".debug_rnglists"
    assert name not in {x.name for x in read_object(o.read_bytes(), "o").sections}
    s = _split(tmp_path, o)
    orig = _link(tmp_path, _objs(tmp_path, SINGLE, o), "orig")
    exe = _link(tmp_path, _objs(tmp_path, SINGLE, s), "moved", ["f3", "b", "a"])
    n, diffs = debugcheck.compare_lines(orig, exe)
    assert n > 20 and diffs == [] and debugcheck.verify(exe) is None, diffs
    moved = _starts(exe)
    assert moved.index("f3") < moved.index("b") < moved.index("a"), moved


def test_unit_low_pc_index_too_short_for_a_new_entry_is_kept(tmp_path):
    """More than 127 .debug_addr entries: the unit's 1-byte DW_AT_low_pc index cannot name
    a new entry holding 0, so it keeps naming the first function's start (the base of no
    list entry any more); the links still agree and verify."""
    need_tool("addr2line")
    need_tool("llvm-dwarfdump-16")
    src = tmp_path / "many.c"
    src.write_text("int g(int);\n" + "".join(
        f"__attribute__((noinline)) int h{k}(int x) {{ int y = g(x + {k}); return g(y) + {k}; }}\n" for k in range(80))
        + "int top(int x) { return " + " + ".join(f"h{k}(x)" for k in range(80)) + "; }\n")
    o = _cc(tmp_path, src)
    s = _split(tmp_path, o)
    out = subprocess.run([DUMP, "-v", "--debug-info", s], capture_output=True, text=True, check=True).stdout
    unit = out.split("DW_TAG_compile_unit")[1].split("DW_TAG_")[0]
    assert re.search(r"DW_AT_low_pc \[DW_FORM_addrx\]\s+\(indexed \(0+\d\)", unit), unit
    assert "DW_AT_ranges [DW_FORM_sec_offset]" in unit, unit
    g = tmp_path / "g.c"
    g.write_text("int top(int);\nint g(int x) { return x / 3 + 1; }\n"
                 "int main(int c, char **v) { (void)v; return top(c) > 0; }\n")
    subprocess.run([CC, "-O2", "-c", g, "-o", tmp_path / "g.o"], check=True)
    orig = _link(tmp_path, [o, tmp_path / "g.o"], "orig")
    exe = _link(tmp_path, [s, tmp_path / "g.o"], "moved", [f"h{k}" for k in range(79, -1, -1)])
    n, diffs = debugcheck.compare_lines(orig, exe)
    assert n > 1000 and diffs == [], diffs
    n, diffs = debugcheck.compare_locations(orig, exe)
    assert n >= 80 and diffs == [], diffs
    assert debugcheck.verify(exe) is None
    moved = _starts(exe)
    assert moved.index("h79") < moved.index("h0"), moved


COLD = """#include <stdio.h>
__attribute__((cold, noinline)) void report(int x) { printf("bad %d\\n", x); }
__attribute__((noinline)) int work(int x) { int s = 0; for (int i = 0; i < x; i++) { s += i * x; if (s < 0) report(s); }
  return s; }
__attribute__((noinline)) int twice(int x) { return work(x) + work(x + 1); }
int main(int c, char **v) { (void)v; return twice(c * 10) > 5; }
"""


def test_unit_over_two_sections_lists_from_a_base_in_another_function(tmp_path):
    """A unit over .text and .text.unlikely. (a cold function): clang's location lists
    are offset pairs from DW_LLE_base_addressx of .text's start, also for the later
    functions. Those pairs are written again with their own relocated start (was: all of
    .text glued, "DWARF describes .text+0x.. from work as one range")."""
    need_tool("addr2line")
    need_tool("llvm-dwarfdump-16")
    src = tmp_path / "cold.c"
    src.write_text(COLD)
    o = _cc(tmp_path, src)
    _, rep = split_object(o.read_bytes(), o.name)
    text = next(x for x in rep.sections if x.name == ".text")
    assert text.sections == 3 and not text.glued, text
    s = _split(tmp_path, o)
    orig = _link(tmp_path, [o], "orig")
    exe = _link(tmp_path, [s], "moved", ["main", "twice", "work"])
    n, diffs = debugcheck.compare_lines(orig, exe)
    assert n > 50 and diffs == [], diffs
    n, diffs = debugcheck.compare_locations(orig, exe)
    assert n >= 6 and diffs == [], (n, diffs)
    assert debugcheck.verify(exe) is None
    moved = _starts(exe)
    assert moved.index("main") < moved.index("twice") < moved.index("work"), moved
