"""Read-only data and unwind tables placed as lld places them, with GNU ld and gold.

GNU ld's default script (``-z separate-code``) puts ``.rodata``, ``.eh_frame_hdr``,
``.eh_frame`` and ``.gcc_except_table`` in a read-only segment *after* the code, where
read-around from a constant or unwind-table fault reads cold code; lld keeps them in
the read-only segment of the dynamic tables (which ld.so reads whole). The ld-script
inserts the default script's own statements for them before ``.init``. The touched
unwind tables (an object's ``.eh_frame``, a function's LSDA) open their sections.
"""

import subprocess

import pytest
from elftools.elf.constants import P_FLAGS
from elftools.elf.elffile import ELFFile

from conftest import need_tool

LIB_CC = r"""
#include <stdexcept>
#include <string>
extern const char *const names[] = {"alpha", "beta", "gamma"};
const int hot_table[64] = {3, 1, 4, 1, 5, 9, 2, 6};
const int cold_table[4096] = {2, 7, 1, 8};
int rd_size(int i) {
  if (i > 2) throw std::out_of_range("rd_size");
  return std::string(names[i]).size() + hot_table[i];
}
extern "C" int rd_run(int i) {
  try { return rd_size(i); } catch (const std::exception &) { return -1; }
}
extern "C" int rd_cold(int i) { return cold_table[i]; }
"""
MAIN_CC = 'extern "C" int rd_run(int);\n#include <cstdio>\nint main() { std::printf("%d %d\\n", rd_run(1), rd_run(7)); }\n'
EXPECTED = "5 -1\n"
READONLY = (".rodata", ".eh_frame_hdr", ".eh_frame", ".gcc_except_table")


def _build(wd):
    (wd / "lib.cc").write_text(LIB_CC)
    (wd / "main.cc").write_text(MAIN_CC)
    obj = wd / "lib.o"
    subprocess.run(["g++", "-O2", "-fPIC", "-ffunction-sections", "-fdata-sections", "-c", str(wd / "lib.cc"),
                    "-o", str(obj)], check=True)
    return obj


def _segments(lib):
    """{section: (offset, size)}, [(p_type, p_offset, p_filesz, p_flags)]"""
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        secs = {s.name: (s["sh_offset"], s["sh_size"]) for s in elf.iter_sections()}
        segs = [(s["p_type"], s["p_offset"], s["p_filesz"], s["p_flags"]) for s in elf.iter_segments()]
    return secs, segs


def _load_of(secs, segs, name):
    off, size = secs[name]
    return next(s for s in segs if s[0] == "PT_LOAD" and s[1] <= off and off + size <= s[1] + s[2])


def _run(wd, lib):
    exe = wd / f"main-{lib.stem}"
    subprocess.run(["g++", "-o", str(exe), str(wd / "main.cc"), str(lib), f"-Wl,-rpath,{lib.parent}"], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


def assert_readonly_with_tables(lib):
    """Every read-only data section (the unwind tables at least) in the non-executable
    PT_LOAD that holds .dynsym."""
    secs, segs = _segments(lib)
    tables = _load_of(secs, segs, ".dynsym")
    assert not tables[3] & (P_FLAGS.PF_X | P_FLAGS.PF_W)
    assert {".eh_frame", ".eh_frame_hdr"} <= set(secs)
    for name in READONLY:
        if name in secs:
            assert _load_of(secs, segs, name) == tables, f"{lib}: {name} is not in the segment of .dynsym"
    eh = next(s for s in segs if s[0] == "PT_GNU_EH_FRAME")
    assert eh[1] == secs[".eh_frame_hdr"][0]


def test_ld_script_puts_readonly_data_before_the_code(tmp_path):
    """GNU ld: the read-only data in the segment of the dynamic tables, before the code;
    the ordered constants first; exceptions still caught through the moved tables (was:
    a read-only segment after the code)."""
    need_tool("ld.bfd")
    from elflayout.order.algorithms import Layout
    from elflayout.order.formats import write_ld_script

    obj = _build(tmp_path)
    layout = Layout(data=[(".rodata._ZL9hot_table", str(obj))])
    text, stats = write_ld_script(layout)
    assert stats["readonly_first"] and "INSERT BEFORE .init;" in text
    script = tmp_path / "order.ld"
    script.write_text(text)
    plain, ordered = tmp_path / "libplain.so", tmp_path / "libordered.so"
    for lib, extra in ((plain, []), (ordered, [f"-Wl,-T,{script}"])):
        subprocess.run(["g++", "-shared", "-fuse-ld=bfd", "-o", str(lib), str(obj), *extra], check=True)
    assert _run(tmp_path, plain) == _run(tmp_path, ordered) == EXPECTED
    assert_readonly_with_tables(ordered)
    secs, segs = _segments(ordered)
    code = next(s for s in segs if s[0] == "PT_LOAD" and s[3] & P_FLAGS.PF_X)
    assert secs[".gcc_except_table"][0] < code[1]
    assert secs[".rodata.elflayout"][0] < secs[".rodata"][0]
    with pytest.raises(AssertionError):  # the default layout: after the code
        assert_readonly_with_tables(plain)


def test_ld_script_keeps_the_default_place_when_asked(tmp_path):
    """``--no-move-rodata``: the ordered constants go before .rodata as before, on a page
    of their own; nothing else moves."""
    from elflayout.order.algorithms import Layout
    from elflayout.order.formats import write_ld_script

    text, stats = write_ld_script(Layout(data=[(".rodata.hot_table", "x/lib.o")]), readonly_first=False)
    assert not stats["readonly_first"] and "INSERT BEFORE .init;" not in text
    assert "INSERT BEFORE .rodata;" in text and "ALIGN(CONSTANT (MAXPAGESIZE))" in text


def test_rodata_step_is_gnu_ld_only():
    """The step exists for GNU ld only (lld places the data so itself; gold's --rosegment
    reads more), and is off with --no-move-rodata or another format."""
    from elflayout.order import defaults

    assert defaults.rodata_step(True, "bfd", "ld-script").value == "before the code"
    assert defaults.rodata_step(False, "bfd", "ld-script").value is False
    assert defaults.rodata_step(True, "bfd", "objects").value is False
    assert defaults.rodata_step(True, "gold", "gold") is None and defaults.rodata_step(True, "lld", "lld") is None


def test_ld_script_puts_touched_unwind_tables_first(tmp_path):
    """The touched objects' .eh_frame and the touched functions' LSDAs open their output
    sections (the unwinder reads those of the functions a throw passes through), in the
    moved block and, with --no-move-rodata, in one inserted where the default script
    has them; exceptions are still caught."""
    need_tool("ld.bfd")
    from elflayout.order.algorithms import Layout
    from elflayout.order.formats import write_ld_script

    obj = _build(tmp_path)
    layout = Layout(data=[(".gcc_except_table._Z7rd_sizei", str(obj)), (".eh_frame", str(obj))])
    for move in (True, False):
        text, stats = write_ld_script(layout, readonly_first=move)
        assert stats["unwind_patterns"] == 3
        assert "KEEP (*/lib.o(.eh_frame)) KEEP ([l]ib.o(.eh_frame)) KEEP (*(.eh_frame))" in text
        assert "{ *(.gcc_except_table._Z7rd_sizei) *(.gcc_except_table .gcc_except_table.*) }" in text
        assert ("INSERT BEFORE .init;" in text) == move and ("INSERT AFTER .rodata1;" in text) != move
        script = tmp_path / f"order-{move}.ld"
        script.write_text(text)
        lib = tmp_path / f"libunwind{int(move)}.so"
        subprocess.run(["g++", "-shared", "-fuse-ld=bfd", "-o", str(lib), str(obj), f"-Wl,-T,{script}"], check=True)
        assert _run(tmp_path, lib) == EXPECTED


def test_gold_file_lists_touched_lsdas_first():
    """gold: the touched LSDAs, then a glob giving the rest one shared index after them."""
    from elflayout.order.algorithms import Layout
    from elflayout.order.formats import write_gold

    text, stats = write_gold(Layout(data=[(".gcc_except_table._Z1fv", "a.o"), (".eh_frame", "a.o")]))
    assert text.splitlines() == [".gcc_except_table._Z1fv", ".gcc_except_table*"] and stats["unwind_sections"] == 1


def test_request_argv_names_no_move_rodata():
    """``link --no-move-rodata`` shows the ``order`` command writing the same script."""
    from elflayout.order.pipeline import Request

    assert "--no-move-rodata" in Request("p.json", "ld-script", move_rodata=False).argv("o.ld")
    assert "--no-move-rodata" not in Request("p.json", "ld-script").argv("o.ld")
