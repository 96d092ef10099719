"""Read-only data next to the dynamic tables, as lld places it, with GNU ld and gold.

GNU ld's default script (``-z separate-code``) puts ``.rodata``, ``.eh_frame_hdr``,
``.eh_frame`` and ``.gcc_except_table`` in a read-only segment *after* the code, and
gold puts them in the code's segment: read-around from a constant or unwind-table
fault then reads cold code. lld keeps them in the read-only segment of the dynamic
tables (which ld.so reads whole). The ld-script inserts the default script's own
statements for them before ``.init``; ``link`` gives gold ``--rosegment``.
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


def test_gold_gets_rosegment_unless_the_command_chooses(tmp_path):
    """gold: ``--rosegment`` added to the ordering option; a command that gives
    ``--rosegment`` or ``--no-rosegment`` itself keeps its choice; lld and mold: no step."""
    from elflayout.order import defaults
    from elflayout.order.link import apply

    cmd = ["g++", "-shared", "-fuse-ld=gold", "-o", "libx.so", "a.o"]
    step = defaults.rodata_step(True, "gold", "gold", cmd)
    assert step.value == "--rosegment"
    parsed = {"cmd": cmd, "driver": True}
    assert apply(parsed, "gold", "gold", "", tmp_path / "o", rosegment=True)[-1] == \
        f"-Wl,--section-ordering-file={tmp_path / 'o'},--rosegment"
    for given in ("-Wl,--no-rosegment", "-Wl,-z,now,--rosegment"):
        assert defaults.rodata_step(True, "gold", "gold", cmd + [given]).value is False
    assert defaults.rodata_step(False, "gold", "gold", cmd).value is False
    assert defaults.rodata_step(True, "bfd", "ld-script", cmd).value == "before the code"
    assert defaults.rodata_step(True, "lld", "lld", cmd) is None


def test_gold_link_keeps_readonly_data_with_the_tables(tmp_path):
    """gold, the command ``link`` runs: the read-only data leaves the code's segment for
    the dynamic tables' (gold's default: one executable segment from the file's start)."""
    need_tool("ld.gold")
    from elflayout.order import defaults
    from elflayout.order.link import apply

    obj = _build(tmp_path)
    plain, ordered = tmp_path / "libplain.so", tmp_path / "libordered.so"
    order = tmp_path / "order"
    order.write_text(".text._Z7rd_sizei\n.text*\n")
    for lib in (plain, ordered):
        cmd = ["g++", "-shared", "-fuse-ld=gold", "-o", str(lib), str(obj)]
        if lib == ordered:
            step = defaults.rodata_step(True, "gold", "gold", cmd)
            cmd = apply({"cmd": cmd, "driver": True}, "gold", "gold", "", order, rosegment=step.value == "--rosegment")
        subprocess.run(cmd, check=True)
    assert _run(tmp_path, plain) == _run(tmp_path, ordered) == EXPECTED
    assert_readonly_with_tables(ordered)
    with pytest.raises(AssertionError):
        assert_readonly_with_tables(plain)


def test_request_argv_names_no_move_rodata():
    """``link --no-move-rodata`` shows the ``order`` command writing the same script."""
    from elflayout.order.pipeline import Request

    assert "--no-move-rodata" in Request("p.json", "ld-script", move_rodata=False).argv("o.ld")
    assert "--no-move-rodata" not in Request("p.json", "ld-script").argv("o.ld")
