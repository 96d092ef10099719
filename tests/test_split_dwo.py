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
    o = tmp / (src.stem + ".o")
    subprocess.run([cc, "-g", "-O2", "-gsplit-dwarf", *flags, "-c", src.name, "-o", o.name], check=True, cwd=tmp)
    return o


def _split(tmp: Path, o: Path) -> Path:
    out, rep = split_object(o.read_bytes(), o.name)
    assert rep.changed, rep
    p = tmp / ("split_" + o.name)
    p.write_bytes(out)
    return p


def _link(tmp: Path, objs: list[Path], name: str, order: list[str] | None = None) -> Path:
    need_tool("ld.lld")
    exe = tmp / name
    flags = ["-fuse-ld=lld"]
    if order:
        f = tmp / f"{name}.order"
        f.write_text("\n".join(order) + "\n")
        flags.append(f"-Wl,--symbol-ordering-file={f}")
    subprocess.run(["gcc", *flags, "-o", exe, *objs], check=True)
    return exe


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
def test_unit_base_lists_refused_with_the_list_named(tmp_path, cc, src):
    """A unit of one range (clang-22: always; gcc: all code in .text) whose .dwo range
    lists are offsets from the skeleton's DW_AT_low_pc: that range cannot become a range
    list, said without -v (was: "-gsplit-dwarf skeleton unit")."""
    o = _cc(tmp_path, src, cc)
    _, rep = split_object(o.read_bytes(), o.name)
    text = next(x for x in rep.sections if x.name == ".text")
    dwo = re.escape(src.stem + ".dwo")
    assert text.kept_whole and re.search(rf"range list at 0x\w+ of \S*{dwo} holds offsets from the unit's base",
                                         text.kept_whole), text
    r = run_cli("split", o, "-o", tmp_path / "out", check=1)
    assert f"{src.stem}.dwo holds offsets from the unit's base" in r.stderr, r.stderr
