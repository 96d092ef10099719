"""Ordered data in real links: where GNU ld's INSERT script puts written data under
``-z relro -z now``, and generic ``.data`` sections (objects built without
-fdata-sections) in the lld data script."""

from __future__ import annotations

import subprocess
import sys

from elftools.elf.constants import P_FLAGS
from elftools.elf.elffile import ELFFile

from conftest import need_tool
from elflayout.order.algorithms import Layout
from elflayout.elfcore import ElfImage
from elflayout.order.formats import write_ld_script, write_lld_data_script
from elflayout.order.link import command_binds_now

# bump() writes hot_counter: read-only data would make it crash
LIB_C = """
int hot_counter = 5;
int cold_counter = 7;
const int hot_table[64] = {1, 2, 3};
const int cold_table[64] = {4, 5, 6};
int bump(int i) { hot_counter += hot_table[i & 63]; cold_counter += 2; return hot_counter + cold_counter; }
"""


def _cc(tmp_path, name, src, *flags):
    c = tmp_path / f"{name}.c"
    c.write_text(src)
    o = tmp_path / f"{name}.o"
    subprocess.run(["gcc", "-O1", "-fPIC", *flags, "-c", str(c), "-o", str(o)], check=True)
    return o


def _call_bump(lib) -> str:
    code = "import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); print(l.bump(0), l.bump(1))"
    r = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True)
    assert r.returncode == 0, f"calling bump() through {lib}: exit {r.returncode} {r.stderr[-300:]}"
    return r.stdout.strip()


def _link_with_script(tmp_path, linker, script_text, objs, *flags):
    """A shared library of ``objs`` linked by ``linker`` with the script ``-T``."""
    script = tmp_path / f"order-{linker}.ld"
    script.write_text(script_text)
    lib = tmp_path / f"lib{linker}.so"
    subprocess.run(["gcc", "-shared", f"-fuse-ld={linker}", *flags, "-o", str(lib), *map(str, objs),
                    f"-Wl,-T,{script}"], check=True)
    return lib


def _strings(lib, sec) -> str:
    return subprocess.run(["readelf", "-p", sec, str(lib)], capture_output=True, text=True).stdout


def _segments(lib):
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        secs = {s.name: (s["sh_addr"], s["sh_size"]) for s in elf.iter_sections()}
        segs = [(s["p_type"], s["p_vaddr"], s["p_memsz"], s["p_flags"]) for s in elf.iter_segments()]
    return secs, segs


def _inside(sec, seg) -> bool:
    (a, n), (_t, va, sz, _f) = sec, seg
    return va <= a and a + n <= va + sz


def test_ld_script_data_outside_relro_with_z_now(tmp_path):
    """GNU ld, -z relro -z now: the ordered writable data is outside PT_GNU_RELRO (the
    library's function writes it after load) and the ordered constants are not in an
    executable segment."""
    need_tool("ld.bfd")
    obj = _cc(tmp_path, "lib", LIB_C, "-fdata-sections")
    layout = Layout(data=[(".data.hot_counter", str(obj)), (".rodata.hot_table", str(obj))])
    assert "INSERT AFTER .data;" in write_ld_script(layout)[0]
    text, stats = write_ld_script(layout, bind_now=True)
    assert "INSERT AFTER .data;" in text and stats["data_anchor"] == "after .data"
    script = tmp_path / "order.ld"
    script.write_text(text)
    plain, ordered = tmp_path / "libplain.so", tmp_path / "libordered.so"
    for lib, extra in ((plain, []), (ordered, [f"-Wl,-T,{script}"])):
        subprocess.run(["gcc", "-shared", "-fuse-ld=bfd", "-Wl,-z,relro", "-Wl,-z,now", "-o", str(lib), str(obj),
                        *extra], check=True)
    assert _call_bump(ordered) == _call_bump(plain)
    secs, segs = _segments(ordered)
    relro = [s for s in segs if s[0] == "PT_GNU_RELRO"]
    assert relro, "no PT_GNU_RELRO: -z relro not honoured"
    assert not _inside(secs[".data.elflayout"], relro[0])
    rw = [s for s in segs if s[0] == "PT_LOAD" and s[3] & P_FLAGS.PF_W]
    assert any(_inside(secs[".data.elflayout"], s) for s in rw)
    ro = [s for s in segs if s[0] == "PT_LOAD" and _inside(secs[".rodata.elflayout"], s)]
    assert ro and not ro[0][3] & (P_FLAGS.PF_X | P_FLAGS.PF_W)
    with ElfImage(ordered) as img:
        assert img.binds_now


def test_ld_script_data_after_relro_end_when_lazy(tmp_path):
    """GNU ld, -z relro with lazy binding: the ordered writable data goes right after the
    RELRO end (after ``.got.plt``, before ``.data``, where lld's data script puts it), not
    at the tail of the file-backed segment, and the library still works."""
    need_tool("ld.bfd")
    obj = _cc(tmp_path, "lib", LIB_C + "extern int puts(const char *);\nint say(void) { return puts(\"x\"); }\n",
              "-fdata-sections")
    text, stats = write_ld_script(Layout(data=[(".data.hot_counter", str(obj))]), bind_now=False)
    assert "INSERT AFTER .got.plt;" in text and stats["data_anchor"] == "after .got.plt"
    script = tmp_path / "order.ld"
    script.write_text(text)
    plain, ordered = tmp_path / "libplain.so", tmp_path / "libordered.so"
    for lib, extra in ((plain, []), (ordered, [f"-Wl,-T,{script}"])):
        subprocess.run(["gcc", "-shared", "-fuse-ld=bfd", "-Wl,-z,relro", "-o", str(lib), str(obj), *extra], check=True)
    assert _call_bump(ordered) == _call_bump(plain)
    secs, segs = _segments(ordered)
    relro = [s for s in segs if s[0] == "PT_GNU_RELRO"]
    assert relro and not _inside(secs[".data.elflayout"], relro[0])
    assert secs[".got.plt"][0] < secs[".data.elflayout"][0] < secs[".data"][0]
    with ElfImage(ordered) as img:
        assert not img.binds_now
    # A -z now link has no .got.plt to insert after: ld says so rather than misplace it
    r = subprocess.run(["gcc", "-shared", "-fuse-ld=bfd", "-Wl,-z,relro", "-Wl,-z,now", "-o", str(tmp_path / "x.so"),
                        str(obj), f"-Wl,-T,{script}"], capture_output=True, text=True)
    assert r.returncode != 0 and ".got.plt" in r.stderr


def test_command_binds_now():
    assert command_binds_now(["gcc", "-shared", "-Wl,-z,relro,-z,now", "a.o"]) is True
    assert command_binds_now(["ld", "-z", "now", "-z", "lazy"]) is False
    assert command_binds_now(["gcc", "-Wl,-znow"]) is True
    assert command_binds_now(["gcc", "-shared", "-Wl,-z,relro", "a.o"]) is None


def _generic_objs(tmp_path):
    """Three objects without -fdata-sections: each one's data in a plain .data."""
    return {k: _cc(tmp_path, k, f"int {k}_var = {i + 1};\nint {k}_get(void) {{ return {k}_var++; }}\n")
            for i, k in enumerate(("hot1", "hot2", "cold"))}


def _sym_addrs(lib, names):
    with open(lib, "rb") as f:
        st = ELFFile(f).get_section_by_name(".symtab")
        return {n: st.get_symbol_by_name(n)[0]["st_value"] for n in names}


def test_lld_data_script_generic_data_named_by_object(tmp_path):
    """Touched objects' plain ``.data`` is named with its file: only those move, the rest
    stays in ``.data`` (``*(.data)`` moved all of it and lld refused the script, "unable
    to insert .data.elflayout before .data")."""
    need_tool("ld.lld")
    objs = _generic_objs(tmp_path)
    layout = Layout(data=[(".data", str(objs["hot2"])), (".data", str(objs["hot1"]))])
    text, stats = write_lld_data_script(layout, hot_strings=False)
    assert f"{objs['hot2']}(.data)" in text and "*(.data)" not in text and stats["data_named_with_file"] == 2
    lib = _link_with_script(tmp_path, "lld", text, objs.values(), "-Wl,-z,relro", "-Wl,-z,now")
    secs, _ = _segments(lib)
    a = _sym_addrs(lib, ["hot1_var", "hot2_var", "cold_var"])
    hot = secs[".data.elflayout"]
    assert a["hot2_var"] < a["hot1_var"] < hot[0] + hot[1] and a["hot2_var"] >= hot[0]
    assert _inside((a["cold_var"], 4), (None, *secs[".data"], 0))


def test_data_generic_without_object_stays_and_is_counted():
    layout = Layout(data=[(".data", None), (".data.x", None)])
    text, stats = write_lld_data_script(layout, hot_strings=False)
    assert "(.data)" not in text and "*(.data.x)" in text and stats["data_generic_without_object"] == 1
    text, stats = write_ld_script(layout)
    assert "(.data)" not in text and stats["data_generic_without_object"] == 1


def test_ld_script_generic_data_named_by_object(tmp_path):
    """GNU ld: the same generic ``.data`` by file; the library still works under -z now."""
    need_tool("ld.bfd")
    objs = _generic_objs(tmp_path)
    text, _ = write_ld_script(Layout(data=[(".data", str(objs["hot1"]))]))
    assert "*/hot1.o(.data)" in text
    lib = _link_with_script(tmp_path, "bfd", text, objs.values(), "-Wl,-z,relro", "-Wl,-z,now")
    secs, _ = _segments(lib)
    a = _sym_addrs(lib, ["hot1_var", "cold_var"])
    assert _inside((a["hot1_var"], 4), (None, *secs[".data.elflayout"], 0))
    assert _inside((a["cold_var"], 4), (None, *secs[".data"], 0))


def test_lld_data_script_leaves_out_a_fully_ordered_data(tmp_path):
    """Every non-empty input section of ``.data`` ordered: moving them all would leave lld
    no ``.data`` to insert before (the refusal is checked first); with the profiled link's
    map the block is left out and named, and the rest of the script still links."""
    need_tool("ld.lld")
    from elflayout.order.resolve import universe_from_linkmap

    objs = _generic_objs(tmp_path)
    base, lmap = tmp_path / "libbase.so", tmp_path / "base.map"
    # -nostartfiles: crtbeginS.o's .data.rel.local (__dso_handle) would stay in .data
    link = ["gcc", "-shared", "-nostartfiles", "-fuse-ld=lld", "-Wl,-z,relro", "-Wl,-z,now", *map(str, objs.values())]
    subprocess.run([*link, "-o", str(base), f"-Wl,-Map={lmap}"], check=True)
    u = universe_from_linkmap(lmap, str(base))
    layout = Layout(data=[(".data", str(o)) for o in objs.values()])
    script = tmp_path / "data.ld"
    script.write_text(write_lld_data_script(layout, hot_strings=False)[0])
    r = subprocess.run([*link, "-o", str(tmp_path / "libx.so"), f"-Wl,-T,{script}"], capture_output=True, text=True)
    assert r.returncode != 0 and "unable to insert .data.elflayout before .data" in r.stderr
    text, stats = write_lld_data_script(layout, hot_strings=False, universe=u)
    assert stats["left_out"] == [".data"] and ".data.elflayout" not in text
    partial = Layout(data=[(".data", str(objs["hot1"]))])
    text2, stats2 = write_lld_data_script(partial, hot_strings=False, universe=u)
    assert stats2["left_out"] == [] and ".data.elflayout" in text2
    script.write_text(text2)
    subprocess.run([*link, "-o", str(tmp_path / "liby.so"), f"-Wl,-T,{script}"], check=True)


def test_ld_script_hot_strings_get_their_own_pool(tmp_path):
    """GNU ld: the touched object's merged strings go to .rodata.elflayout (a pool of
    their own), the untouched object's stay in .rodata; both still read right."""
    need_tool("ld.bfd")
    objs = {k: _cc(tmp_path, k, f'const char *{k}(void) {{ return "{k} string here"; }}\n')
            for k in ("hot", "cold")}
    layout = Layout(objects=[str(objs["hot"])], data=[(".rodata.x", None)])
    text, stats = write_ld_script(layout)
    assert stats["string_patterns"] == 2 and "*/hot.o(.rodata.str*)" in text
    lib = _link_with_script(tmp_path, "bfd", text, [objs["cold"], objs["hot"]])
    hot = _strings(lib, ".rodata.elflayout")
    assert "hot string here" in hot and "cold string here" not in hot
    assert "cold string here" in _strings(lib, ".rodata")
    code = ("import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); l.hot.restype = l.cold.restype = ctypes.c_char_p; "
            "print(l.hot().decode(), l.cold().decode(), sep='|')")
    out = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "hot string here|cold string here"


def _same_name_universe():
    """codeobject.o defines the function code_hash (-ffunction-sections), unicodedata.o a
    table of the same name (.rodata.code_hash): as in libpython's split objects."""
    from elflayout.order.resolve import Universe

    return Universe(
        symbols={"code_hash": [(".text.code_hash", "codeobject.o"), (".rodata.code_hash", "unicodedata.o")],
                 "hot_table": [(".rodata.hot_table", "codeobject.o")]},
        sections={".text.code_hash", ".rodata.code_hash", ".rodata.hot_table"},
        objects=["codeobject.o", "unicodedata.o"],
        object_section_symbols={(".text.code_hash", "codeobject.o"): ["code_hash"],
                                (".rodata.code_hash", "unicodedata.o"): ["code_hash"],
                                (".rodata.hot_table", "codeobject.o"): ["hot_table"]},
        section_symbols={".rodata.code_hash": ["code_hash"], ".rodata.hot_table": ["hot_table"]})


def test_associated_data_only_from_the_functions_own_object():
    """``.rodata.<function>`` goes with the function only when it is the function's own
    object's: another object's table of that name stays (it stretched libpython's hot
    .rodata by 157 pages)."""
    from elflayout.order.algorithms import first_access
    from elflayout.profile.model import Function, Section, Target

    t = Target(path="lib.so", functions=[Function("code_hash", 0, section=".text.code_hash", object="codeobject.o")],
               sections=[Section(".rodata.hot_table", 1, object="codeobject.o")])
    layout = first_access.compute(t, _same_name_universe())
    assert (".rodata.code_hash", None) not in layout.data and not any(n == ".rodata.code_hash" for n, _ in layout.data)
    assert layout.report["data"]["same_name_in_other_object"] == 1
    u = _same_name_universe()
    u.object_section_symbols[(".rodata.code_hash", "codeobject.o")] = ["code_hash"]
    u.symbols["code_hash"].append((".rodata.code_hash", "codeobject.o"))
    layout = first_access.compute(t, u)
    assert (".rodata.code_hash", "codeobject.o") in layout.data


def test_lld_data_script_parks_untouched_sections_lld_would_order_by_name(tmp_path):
    """lld orders every section defining a listed name: a table named like a hot function
    of another object is parked after .rodata by the data script, named with its file;
    with a real lld link it lands after the default .rodata."""
    need_tool("ld.lld")
    a = _cc(tmp_path, "codeobject", "static const int hot_table[4] = {1, 2, 3, 4};\n"
            "int code_hash(int i) { return hot_table[i & 3] * 31; }\n", "-ffunction-sections", "-fdata-sections")
    b = _cc(tmp_path, "unicodedata", "static const int code_hash[4096] = {7};\n"
            "int lookup(int i) { return code_hash[i & 4095]; }\n", "-ffunction-sections", "-fdata-sections")
    c = _cc(tmp_path, "other", "const int other_table[4096] = {9};\n", "-fdata-sections")
    from elflayout.order.resolve import Resolved

    u = _same_name_universe()
    u.object_section_symbols = {(k, str(a) if o == "codeobject.o" else str(b)): v
                                for (k, o), v in u.object_section_symbols.items()}
    layout = Layout(functions=[Resolved("code_hash", "code_hash", [".text.code_hash"], [str(a)], "exact")],
                    data=[(".rodata.hot_table", str(a))], data_symbols=["hot_table"])
    text, stats = write_lld_data_script(layout, hot_strings=False, universe=u)
    assert stats["parked_same_name"] == 1 and f"{b}(.rodata.code_hash)" in text and "INSERT AFTER .rodata;" in text
    order = tmp_path / "order.txt"
    order.write_text("code_hash\nhot_table\n")
    lib = _link_with_script(tmp_path, "lld", text, [c, b, a], f"-Wl,--symbol-ordering-file={order}")
    secs, _ = _segments(lib)
    with open(lib, "rb") as f:
        st = ELFFile(f).get_section_by_name(".symtab")
        table = next(s["st_value"] for s in st.iter_symbols() if s.name == "code_hash" and s["st_info"]["type"] == "STT_OBJECT")
    ro = secs[".rodata"]
    assert table >= ro[0] + ro[1], "the other object's code_hash table was not parked after .rodata"


def test_linker_made_pool_is_not_ordered_by_name():
    """lld >= 15 names its pool of merged strings after the first input section
    (``<internal>:(.rodata.str1.1)``): a touched page of the pool must not become
    ``*(.rodata.str1.1)``, which moves every object's strings into the hot pool (read
    whole: the arm64 libLLVM relink read 137 pages more). The touched objects' strings
    are placed by the hot-strings patterns instead."""
    import numpy as np

    from elflayout.order.algorithms import first_access
    from elflayout.order.resolve import Universe
    from elflayout.profile.model import Page, Target

    P = 4096
    u = Universe(sections={".rodata.str1.1", ".rodata.tab"}, objects=["lib.a(a.o)"])
    u.extents = np.array([(10 * P, 3 * P), (13 * P, P)], dtype=[("offset", "<i8"), ("size", "<i8")])
    u.extent_names = [".rodata.str1.1", ".rodata.tab"]
    u.extent_objects = ["<internal>", "lib.a(a.o)"]
    t = Target(path="lib.so", pages=[Page(p, i + 1, "r", ".rodata", "main") for i, p in enumerate((10, 11, 12, 13))])
    layout = first_access.compute(t, u)
    assert layout.data == [(".rodata.tab", "lib.a(a.o)")]
    assert layout.report["data"]["linker_made_left_in_place"] == 1
    text, _ = write_lld_data_script(layout, hot_strings=False)
    assert "*(.rodata.tab)" in text and "(.rodata.str1.1)" not in text


def _sparse_universe():
    """Two 20-page tables named alike in two objects: a.o's touched on an inner page, c.o's
    only on the page it shares with a small neighbour (d.o's ``.rodata.n``, read)."""
    import numpy as np

    from elflayout.order.resolve import Universe

    P = 4096
    u = Universe(sections={".rodata.index2", ".rodata.n"}, objects=["a.o", "c.o", "d.o"])
    u.extents = np.array([(10 * P + 64, 20 * P), (40 * P, 64), (40 * P + 64, 20 * P)],
                         dtype=[("offset", "<i8"), ("size", "<i8")])
    u.extent_names = [".rodata.index2", ".rodata.n", ".rodata.index2"]
    u.extent_objects = ["a.o", "d.o", "c.o"]
    return u


def test_sparse_tables_touched_inside_are_listed_for_the_tail_of_the_hot_data():
    """A big table touched on few of its pages stays out of the hot data, but one touched
    on a page of its own is listed in ``Layout.data_sparse`` (the data script can put it
    at the tail of the hot block); one touched only on a page it shares with a touched
    neighbour is not (the read may be the neighbour's). The data script names it with
    its file: ``*(.rodata.index2)`` would move the other object's table too."""
    from elflayout.order.algorithms import first_access
    from elflayout.profile.model import Page, Target

    t = Target(path="lib.so", pages=[Page(p, i + 1, "r", ".rodata", "main") for i, p in enumerate((15, 40))])
    layout = first_access.compute(t, _sparse_universe())
    assert layout.data == [(".rodata.n", "d.o")]
    assert layout.data_sparse == [(".rodata.index2", "a.o")]
    assert layout.report["data"]["sparse_left_in_place"] == 2
    text, stats = write_lld_data_script(layout, hot_strings=False, sparse_last=True)
    assert stats["sparse_sections"] == 1
    assert text.index("*(.rodata.n)") < text.index("a.o(.rodata.index2)")
    assert "c.o(" not in text and "*(.rodata.index2)" not in text
    plain, st0 = write_lld_data_script(layout, hot_strings=False)
    assert "index2" not in plain and st0["sparse_sections"] == 0


def test_sparse_table_last_in_a_real_lld_link(tmp_path):
    """lld with ``sparse_last``: the listed object's table ends ``.rodata.elflayout``, the
    other object's table of the same name stays in ``.rodata``, and both still read right."""
    need_tool("ld.lld")
    src = ("static const unsigned index2[8192] = {[0 ... 8191] = %s};\n"
           "unsigned %s(unsigned i) { return index2[i & 8191]; }\n")
    a = _cc(tmp_path, "a", src % ("0x11111111", "look_a"), "-fdata-sections", "-ffunction-sections")
    b = _cc(tmp_path, "b", src % ("0x22222222", "look_b"), "-fdata-sections", "-ffunction-sections")
    h = _cc(tmp_path, "h", "const int hot_table[8] = {7};\n", "-fdata-sections")
    layout = Layout(data=[(".rodata.hot_table", str(h))], data_sparse=[(".rodata.index2", str(a))])
    text, _ = write_lld_data_script(layout, hot_strings=False, sparse_last=True)
    lib = _link_with_script(tmp_path, "lld", text, [b, a, h])
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        hot = elf.get_section_by_name(".rodata.elflayout").data()
        cold = elf.get_section_by_name(".rodata").data()
    assert hot.startswith(b"\x07\0\0\0") and hot.endswith(b"\x11\x11\x11\x11" * 8192)
    assert b"\x22\x22\x22\x22" * 16 not in hot
    assert b"\x22\x22\x22\x22" * 8192 in cold
    code = "import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); print(hex(l.look_a(5)), hex(l.look_b(9000)))"
    r = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["0x11111111", "0x22222222"]


def test_hot_constants_get_their_own_pool_in_a_real_lld_link(tmp_path):
    """lld pools every object's merged constants (``.rodata.cst8``) in ``.rodata``: with
    ``hot_constants`` the touched object's constants go to ``.rodata.elflayout`` and the
    untouched object's stay; without it, both stay in ``.rodata`` (the old script)."""
    import struct

    need_tool("ld.lld")
    hot = _cc(tmp_path, "hot", "double hot(double x) { return x * 3.25 + 1.0e-3; }\n")
    cold = _cc(tmp_path, "cold", "double cold(double x) { return x * 5.75 + 7.0e-3; }\n")
    pi, e = struct.pack("<d", 3.25), struct.pack("<d", 5.75)
    for on in (True, False):
        text, stats = write_lld_data_script(Layout(objects=[str(hot)]), hot_constants=on)
        assert stats["constant_objects"] == int(on) and (f"{hot}(.rodata.cst*)" in text) == on
        lib = _link_with_script(tmp_path, "lld", text, [cold, hot])
        with open(lib, "rb") as f:
            elf = ELFFile(f)
            sec = elf.get_section_by_name(".rodata.elflayout")
            hot_data = sec.data() if sec else b""
            cold_data = elf.get_section_by_name(".rodata").data()
        assert (pi in hot_data) == on and e not in hot_data and e in cold_data
        code = ("import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); l.hot.restype = l.cold.restype = ctypes.c_double;"
                "l.hot.argtypes = l.cold.argtypes = [ctypes.c_double]; print(l.hot(2.0), l.cold(2.0))")
        r = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True, check=True)
        assert r.stdout.split() == [repr(2.0 * 3.25 + 1.0e-3), repr(2.0 * 5.75 + 7.0e-3)]




def test_data_script_levers_on_the_command_line(tmp_path):
    """``order --hot-constants --sparse-last`` writes the data script ``order_files`` writes
    with those levers, and ``Request.argv`` (the command the benchmarks show) names them."""
    import order_testlib

    from conftest import run_cli
    from elflayout.order import pipeline

    d = order_testlib.build_profiled(tmp_path)
    req = pipeline.Request(d["profile"], "lld", lib=d["lib"], objects_from=d["map"])
    levers = {"hot_constants": True, "sparse_last": True}
    argv = req.argv(tmp_path / "cli.lld", tmp_path / "cli.ld", None, levers)
    assert "--hot-constants" in argv and "--sparse-last" in argv
    assert "--hot-constants" not in req.argv(tmp_path / "x", tmp_path / "y", None, {"hot_constants": False})
    pipeline.order_files(req, tmp_path / "mine.lld", data_script=tmp_path / "mine.ld", **levers)
    run_cli(*argv, check=0)
    mine, cli = (tmp_path / "mine.ld").read_text(), (tmp_path / "cli.ld").read_text()
    assert mine == cli and "(.rodata.cst*)" in cli
