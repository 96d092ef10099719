"""Hot string pools (``elflayout.split.hotstrings``): the strings start-up reads move out
of their objects' mergeable pools into pools of their own, proved, and lld links them
apart from the cold strings."""

import subprocess

import numpy as np
import pytest

from conftest import need_tool
from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.split import hotstrings as hs
from elflayout.split.reader import read_object

# hot() and cold() use their own strings; table[] reaches strings through section + addend
# (an absolute address in data: clang's assembler names the section, not a .L symbol);
# exported_str is a global symbol in a string pool (assembled below).
C_SRC = r"""
#include <stdio.h>
#include <string.h>
extern const char exported_str[];
__attribute__((noinline)) void cold(void) { puts("cold one"); puts("cold two"); puts("shared"); }
const char *const table[] = {"table hot", "table cold"};
__attribute__((noinline)) void hot(void) { puts("hot one"); puts("shared"); printf("%s/%s\n", table[0], exported_str); }
int main(int argc, char **argv) {
    hot();
    if (argc > 5) cold();
    printf("%zu %s\n", strlen(table[1]), exported_str);
    return 0;
}
"""
ASM_GLOBAL = """
    .section .rodata.str1.1,"aMS",@progbits,1
    .globl exported_str
exported_str:
    .asciz "exported"
    .asciz "g only"
"""
SCRIPT = "SECTIONS { .rodata.hotstr : { *(.rodata.hotstr*) } } INSERT BEFORE .rodata;\n"


def _cc():
    for c in ("clang-16", "clang-19", "clang-22", "clang-14"):
        try:
            need_tool(c)
            return c
        except BaseException:  # pytest.skip
            continue
    pytest.skip("no clang")


@pytest.fixture(scope="module")
def objs(tmp_path_factory):
    need_tool("ld.lld")
    cc = _cc()
    d = tmp_path_factory.mktemp("hs")
    (d / "m.c").write_text(C_SRC)
    (d / "g.s").write_text(ASM_GLOBAL)
    for src, out in (("m.c", "m.o"), ("g.s", "g.o")):
        subprocess.run([cc, "-O2", "-fPIC", "-fdata-sections", "-ffunction-sections", "-c", str(d / src), "-o",
                        str(d / out)], check=True)
    return {"cc": cc, "dir": d, "m": (d / "m.o").read_bytes(), "g": (d / "g.o").read_bytes()}


def _link(objs, files, out, script=True):
    d = objs["dir"]
    (d / "hot.ld").write_text(SCRIPT)
    args = [objs["cc"], "-fuse-ld=lld", "-o", str(out), *map(str, files)] + ([f"-Wl,-T,{d / 'hot.ld'}"] if script else [])
    subprocess.run(args, check=True)
    return subprocess.run([str(out)], capture_output=True, check=True).stdout


def _section_strings(path, name):
    with ElfImage(path) as img:
        s = img.section(name)
        if s is None:
            return None
        with open(path, "rb") as f:
            f.seek(s.offset)
            return set(f.read(s.size).split(b"\0")) - {b""}


def test_string_pieces_split_as_the_linker_does():
    assert hs.string_pieces(b"ab\0\0c\0", 1) == [(0, 3), (3, 4), (4, 6)]
    assert hs.string_pieces(b"a\0\0\0b\0\0\0", 2) == [(0, 4), (4, 8)]
    assert hs.string_pieces(b"", 1) == []
    with pytest.raises(ValueError):
        hs.string_pieces(b"ab", 1)


def test_hot_strings_move_to_their_own_pool_and_link_identically(objs, tmp_path):
    """Only the asked-for strings move; the program prints the same; lld puts exactly
    them in .rodata.hotstr and leaves them out of the cold pool."""
    hot = {b"hot one\0", b"shared\0", b"table hot\0", b"no such string\0"}
    new, rep = hs.rewrite_object(objs["m"], "m.o", hot)
    assert rep.moved_pieces == 2 and rep.sections == 1       # "hot one", "shared"
    assert rep.pinned_pieces == 1                             # "table hot": section + addend
    o = read_object(new, "new")
    pool = [s for s in o.sections if s.name == hs.hot_name(1, 1)]
    assert len(pool) == 1 and set(pool[0].data.split(b"\0")) - {b""} == {b"hot one", b"shared"}
    (tmp_path / "new.o").write_bytes(new)
    (tmp_path / "g.o").write_bytes(objs["g"])
    before = _link(objs, [objs["dir"] / "m.o", tmp_path / "g.o"], tmp_path / "a.out")
    after = _link(objs, [tmp_path / "new.o", tmp_path / "g.o"], tmp_path / "b.out")
    assert before == after and b"hot one" in after and b"table cold" not in after
    assert _section_strings(tmp_path / "b.out", ".rodata.hotstr") == {b"hot one", b"shared"}
    assert not {b"hot one", b"shared"} & _section_strings(tmp_path / "b.out", ".rodata")
    # the old link has no such section: the script's output section is empty and dropped
    assert _section_strings(tmp_path / "a.out", ".rodata.hotstr") is None


def test_addends_into_a_repacked_pool_still_name_their_strings(objs, tmp_path):
    """table[] names its strings by section + addend: when strings before them move,
    the addends follow (and the strings they name stay in the cold pool)."""
    m = read_object(objs["m"], "m.o")
    new, rep = hs.rewrite_object(objs["m"], "m.o", {b"hot one\0", b"shared\0", b"cold one\0", b"cold two\0"})
    assert rep.moved_pieces == 4 and not rep.kept
    n = read_object(new, "new")
    sec = next(s.index for s in m.sections if s.name == ".rodata.str1.1")
    moved = [ri for ri, w in hs.section_refs(m, sec).items()
             if not np.array_equal(m.relas[ri]["r_addend"][w], n.relas[ri]["r_addend"][w])]
    assert moved, "no addend had to follow"
    (tmp_path / "new.o").write_bytes(new)
    (tmp_path / "g.o").write_bytes(objs["g"])
    out = _link(objs, [tmp_path / "new.o", tmp_path / "g.o"], tmp_path / "c.out")
    assert out == _link(objs, [objs["dir"] / "m.o", tmp_path / "g.o"], tmp_path / "d.out")
    assert b"table hot/exported" in out


def test_a_string_named_by_a_global_symbol_stays(objs):
    new, rep = hs.rewrite_object(objs["g"], "g.o", {b"exported\0", b"g only\0"})
    assert rep.moved_pieces == 1 and rep.pinned_pieces == 1
    o = read_object(new, "g")
    i = o.sym_names.index("exported_str")
    assert o.sections[int(o.symbols["st_shndx"][i])].name == ".rodata.str1.1"


def test_the_sections_still_holding_a_hot_string_are_reported(objs):
    """``hot_left``: the pool where a hot string had to stay (a global names it); none
    where every hot string moved; every pool of an object left as it is."""
    _new, rep = hs.rewrite_object(objs["g"], "g.o", {b"exported\0", b"g only\0"})
    assert rep.hot_left == {".rodata.str1.1"}
    _new, rep = hs.rewrite_object(objs["g"], "g.o", {b"g only\0"})
    assert rep.moved_pieces == 1 and rep.hot_left == set()
    _new, rep = hs.rewrite_object(b"\x7fELF not an object", "x.o", {b"g only\0"})
    assert rep.hot_left == {hs.ALL_POOLS}


def test_lld_data_script_leads_only_with_the_pools_named():
    """``pools``: the touched objects' string sections that still hold a read string;
    the other touched objects' strings stay in ``.rodata``."""
    from elflayout.order import formats
    from elflayout.order.algorithms import Layout

    lay = Layout(data=[(".rodata.x", "a.o")], objects=["a.o", "lib.a(b.o)"])
    text, st = formats.write_lld_data_script(lay, string_pool=True, pools={"lib.a(b.o)": [".rodata.str1.8"]})
    assert "lib.a:b.o(.rodata.str1.8)" in text and "a.o(.rodata.str" not in text and st["string_objects"] == 1
    every, st = formats.write_lld_data_script(lay, string_pool=True)
    assert "a.o(.rodata.str*)" in every and "lib.a:b.o(.rodata.str*)" in every and st["string_objects"] == 2


def test_nothing_to_move_returns_the_input(objs):
    new, rep = hs.rewrite_object(objs["m"], "m.o", {b"absent\0"})
    assert new is objs["m"] and rep.moved_pieces == 0


@pytest.mark.parametrize("damage", ["symbol", "addend", "pool", "code"])
def test_check_refuses_a_rewrite_that_names_other_strings(objs, damage):
    """The proof is independent of the writer: a symbol moved to another string, an
    addend off by one string, a string added to the pool or a changed byte of code fail."""
    hot = {b"hot one\0", b"shared\0", b"cold one\0"}
    new, _ = hs.rewrite_object(objs["m"], "m.o", hot)
    o = read_object(new, "new")
    buf = bytearray(new)
    pool = next(s for s in o.sections if s.name.startswith(hs.HOT_PREFIX))
    shdr_off = int(np.frombuffer(new, hs.EHDR64, 1)["e_shoff"][0])
    if damage == "symbol":
        st = next(s for s in o.sections if s.index == o.symtab_index)
        k = next(i for i in range(len(o.symbols)) if int(o.symbols["st_shndx"][i]) == pool.index)
        syms = o.symbols.copy()
        syms["st_value"][k] = (int(syms["st_value"][k]) + len(b"hot one\0")) % pool.size
        off = int(np.frombuffer(new, hs.SHDR64, len(o.sections), shdr_off)[st.index]["sh_offset"])
        buf[off:off + syms.nbytes] = syms.tobytes()
    elif damage == "addend":
        ri, w = next(iter(hs.section_refs(o, next(s.index for s in o.sections if s.name == ".rodata.str1.1")).items()))
        r = o.relas[ri].copy()
        r["r_addend"][w[0]] += 1
        off = int(np.frombuffer(new, hs.SHDR64, len(o.sections), shdr_off)[ri]["sh_offset"])
        buf[off:off + r.nbytes] = r.tobytes()
    elif damage == "pool":
        off = int(np.frombuffer(new, hs.SHDR64, len(o.sections), shdr_off)[pool.index]["sh_offset"])
        buf[off:off + 3] = b"HOT"
    else:
        text = next(s for s in o.sections if s.name == ".text.hot")
        off = int(np.frombuffer(new, hs.SHDR64, len(o.sections), shdr_off)[text.index]["sh_offset"])
        buf[off] ^= 0xFF
    with pytest.raises(ElflayoutError, match="not proved"):
        hs.check_object(objs["m"], bytes(buf), "m.o", hot)


def test_a_rewrite_not_proved_leaves_the_object_as_it_is(objs, monkeypatch):
    """A writer fault (here: one string's bytes changed) is caught by the proof: the
    object is returned unchanged, with the reason."""
    real = hs._write

    def broken(*a):
        return real(*a).replace(b"hot one\0", b"hot 0ne\0")

    monkeypatch.setattr(hs, "_write", broken)
    new, rep = hs.rewrite_object(objs["m"], "m.o", {b"hot one\0"})
    assert new is objs["m"] and rep.moved_pieces == 0 and "not proved" in rep.kept[hs.OBJECT]


def test_an_object_it_cannot_read_is_left(objs):
    new, rep = hs.rewrite_object(b"BC\xc0\xde" + b"\0" * 60, "b.o", {b"x\0"})
    assert new.startswith(b"BC") and "bitcode" in rep.kept[hs.OBJECT]


def test_static_hot_strings_are_those_the_sections_that_ran_reach(objs, tmp_path):
    (tmp_path / "m.o").write_bytes(objs["m"])
    got = hs.static_hot_strings({str(tmp_path / "m.o"): {".text.hot"}})
    assert {b"hot one\0", b"shared\0"} <= got and b"cold one\0" not in got


def test_rewrite_inputs_and_the_data_script(objs, tmp_path):
    """Archives are rewritten member by member into a directory of their own; the data
    script's file patterns are retargeted to them; an input with nothing hot is left."""
    a = tmp_path / "libm.a"
    (tmp_path / "m.o").write_bytes(objs["m"])
    (tmp_path / "g.o").write_bytes(objs["g"])
    subprocess.run(["ar", "qcs", str(a), str(tmp_path / "m.o")], check=True)
    moved, tot = hs.rewrite_inputs([a, tmp_path / "g.o"], tmp_path / "out", {b"hot one\0"},
                                   only={f"{a}(m.o)"})
    assert list(moved) == [str(a)] and tot["objects_changed"] == 1 and tot["objects"] == 1
    script = hs.retarget_script(f"    {a}:m.o(.rodata.str*)\n    {a}x:m.o(.data)\n", moved)
    assert script == f"    {moved[str(a)]}:m.o(.rodata.str*)\n    {a}x:m.o(.data)\n"
    out = _link(objs, [moved[str(a)], tmp_path / "g.o"], tmp_path / "e.out")
    assert _section_strings(tmp_path / "e.out", ".rodata.hotstr") == {b"hot one"}


def test_lld_data_script_leads_with_the_string_pool():
    from elflayout.order import formats
    from elflayout.order.algorithms import Layout

    lay = Layout(data=[(".rodata.x", "a.o")], objects=["a.o"])
    text, _ = formats.write_lld_data_script(lay, string_pool=True)
    assert text.index(".rodata.hotstr :") < text.index(".rodata.elflayout :")
    assert "*(.rodata.hotstr*)" in text
    assert ".rodata.hotstr" not in formats.write_lld_data_script(lay)[0]


def test_strings_file_round_trip(tmp_path):
    s = {b"plain\0", b"tab\tand\\back\0", b"\xff\x01\0", b"# not a comment\0"}
    p = tmp_path / "hot.txt"
    p.write_text(hs.format_strings(s))
    assert hs.read_strings_file(p) == s


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """A two-object library whose profile ran hot_fn (not cold_fn), with its link map."""
    import json

    import order_testlib as testlib

    need_tool("ld.lld")
    need_tool("gcc")
    d = tmp_path_factory.mktemp("prof")
    (d / "s0.c").write_text('#include <stdio.h>\n'
                            'int hot_fn(int x) { puts("hot string a"); return x + 1; }\n'
                            'int cold_fn(int x) { puts("cold string b"); return x + 2; }\n')
    (d / "entry.c").write_text("int hot_fn(int);\nint synth_entry(int x) { return hot_fn(x); }\n")
    objs = []
    for n in ("entry", "s0"):
        subprocess.run(["gcc", *testlib.CFLAGS, "-c", str(d / f"{n}.c"), "-o", str(d / f"{n}.o")], check=True)
        objs.append(str(d / f"{n}.o"))
    lib, mp = d / "libs.so", d / "libs.map"
    subprocess.run(["gcc", "-shared", "-fuse-ld=lld", "-o", str(lib), *objs, f"-Wl,-Map,{mp}"], check=True)
    (d / "truth.json").write_text(json.dumps({"functions": ["synth_entry", "hot_fn"],
                                              "owner": {"synth_entry": "entry.o", "hot_fn": "s0.o"}}))
    prof = testlib.truth_profile(lib, d / "truth.json")
    prof["targets"][0]["map"] = str(mp)
    (d / "p.json").write_text(json.dumps(prof))
    return {"profile": d / "p.json", "objects": objs}


def test_link_hot_strings_places_the_profiled_strings_first(profiled, tmp_path):
    """``elflayout link --hot-strings``: the strings the profiled function reaches end up
    in .rodata.hotstr, the others not; the inputs are left as they are."""
    from conftest import run_cli

    out = tmp_path / "libs.so"
    r = run_cli("link", "--profile", profiled["profile"], "--linker", "lld", "--hot-strings", "--no-check-order",
                "--", "gcc", "-shared", "-fuse-ld=lld", "-o", out, *profiled["objects"])
    assert r.returncode == 0, r.stderr
    assert "hot strings: on" in r.stderr, r.stderr
    assert _section_strings(out, ".rodata.hotstr") == {b"hot string a"}
    assert b"cold string b" in _section_strings(out, ".rodata")
    for o in profiled["objects"]:
        assert hs.HOT_PREFIX.encode() not in open(o, "rb").read()


@pytest.mark.parametrize("how", [["--linker", "bfd"], ["--linker", "lld", "--no-data-script"]])
def test_link_hot_strings_needs_the_lld_data_script(profiled, tmp_path, how):
    from conftest import run_cli

    r = run_cli("link", "--profile", profiled["profile"], *how, "--hot-strings", "--",
                "gcc", "-shared", f"-fuse-ld={how[1]}", "-o", tmp_path / "l.so", *profiled["objects"], check=2)
    assert "--hot-strings: its pools are placed by lld's data script" in r.stderr
    assert not (tmp_path / "l.so").exists()


def test_aarch64_strings_reached_by_section_plus_addend_stay(tmp_path):
    """AArch64 assemblers name every string by section + addend (ADRP/ADD pairs): nothing
    can move without a symbol for the new pool, so the object is linked as it is."""
    need_tool("aarch64-linux-gnu-gcc")
    (tmp_path / "a.c").write_text('#include <stdio.h>\nvoid hot(void) { puts("hot one"); }\n'
                                  'void cold(void) { puts("cold one"); }\n')
    subprocess.run(["aarch64-linux-gnu-gcc", "-O2", "-fPIC", "-c", str(tmp_path / "a.c"), "-o", str(tmp_path / "a.o")],
                   check=True)
    raw = (tmp_path / "a.o").read_bytes()
    new, rep = hs.rewrite_object(raw, "a.o", {b"hot one\0"})
    assert new is raw and rep.moved_pieces == 0 and rep.pinned_pieces == 1


CXX_GROUP = r"""
#include <cstdio>
// an inline function: its code is in a COMDAT group whose signature is a global symbol
inline const char *pick(int i) { static const char *const t[] = {"grp hot", "grp cold"}; return t[i]; }
const char *const table2[] = {"addend hot", "addend cold"};
int main(int argc, char **) { std::puts(pick(argc > 5)); std::puts(table2[argc > 5]); return 0; }
"""


@pytest.fixture(scope="module")
def noaddrsig(objs):
    """m.c and a C++ file with a COMDAT group, without clang's address-significance
    table (as Debian's libLLVM archives ship: their tables are invalidated, sh_link 0)."""
    d = objs["dir"]
    (d / "grp.cc").write_text(CXX_GROUP)
    cxx = objs["cc"].replace("clang", "clang++")
    need_tool(cxx)
    for cc, src, out in ((objs["cc"], "m.c", "m2.o"), (cxx, "grp.cc", "grp.o")):
        subprocess.run([cc, "-O2", "-fPIC", "-fdata-sections", "-ffunction-sections", "-fno-addrsig", "-c",
                        str(d / src), "-o", str(d / out)], check=True)
    return {"m": (d / "m2.o").read_bytes(), "grp": (d / "grp.o").read_bytes(), "cxx": cxx}


def test_strings_reached_by_section_plus_addend_move_with_a_section_symbol(objs, noaddrsig, tmp_path):
    """table[] names "table hot" by section + addend: it moves, its relocation names a
    new local section symbol of the pool, and lld links the same program."""
    hot = {b"hot one\0", b"table hot\0"}
    new, rep = hs.rewrite_object(noaddrsig["m"], "m.o", hot, by_addend=True)
    assert rep.moved_pieces == 2 and rep.addend_pieces == 1 and rep.pinned_pieces == 0
    a, b = read_object(noaddrsig["m"], "a"), read_object(new, "b")
    pool = next(s for s in b.sections if s.name == hs.hot_name(1, 1))
    first = a.sections[a.symtab_index].info
    assert len(b.symbols) == len(a.symbols) + 1 and int(b.symbols["st_shndx"][first]) == pool.index
    assert b.sections[b.symtab_index].info == first + 1
    (tmp_path / "new.o").write_bytes(new)
    (tmp_path / "old.o").write_bytes(noaddrsig["m"])
    (tmp_path / "g.o").write_bytes(objs["g"])
    before = _link(objs, [tmp_path / "old.o", tmp_path / "g.o"], tmp_path / "a.out")
    after = _link(objs, [tmp_path / "new.o", tmp_path / "g.o"], tmp_path / "b.out")
    assert before == after and b"table hot/exported" in after
    assert _section_strings(tmp_path / "b.out", ".rodata.hotstr") == {b"hot one", b"table hot"}
    # by default, the string reached by section + addend stays
    _, rep = hs.rewrite_object(noaddrsig["m"], "m.o", hot)
    assert rep.moved_pieces == 1 and rep.pinned_pieces == 1


def test_symbols_inserted_before_a_comdat_signature_shift_it(objs, noaddrsig, tmp_path):
    """A C++ object: the inserted local symbol shifts the globals, the COMDAT group's
    signature follows, lld links the same program."""
    hot = {b"grp hot\0", b"addend hot\0"}
    new, rep = hs.rewrite_object(noaddrsig["grp"], "grp.o", hot, by_addend=True)
    assert rep.moved_pieces == 2 and rep.addend_pieces == 2 and not rep.kept
    a, b = read_object(noaddrsig["grp"], "a"), read_object(new, "b")
    ga = [s for s in a.sections if s.sh_type == hs.SHT["SHT_GROUP"]]
    gb = [s for s in b.sections if s.sh_type == hs.SHT["SHT_GROUP"]]
    assert ga and [a.sym_names[g.info] for g in ga] == [b.sym_names[g.info] for g in gb]
    assert [g.info + 1 for g in ga] == [g.info for g in gb]
    outs = []
    for k, body in enumerate((noaddrsig["grp"], new)):
        (tmp_path / f"{k}.o").write_bytes(body)
        exe = tmp_path / f"{k}.out"
        (tmp_path / "hot.ld").write_text(SCRIPT)
        subprocess.run([noaddrsig["cxx"], "-fuse-ld=lld", "-o", str(exe), str(tmp_path / f"{k}.o"),
                        f"-Wl,-T,{tmp_path / 'hot.ld'}"], check=True)
        outs.append(subprocess.run([str(exe)], capture_output=True, check=True).stdout)
    assert outs[0] == outs[1] == b"grp hot\naddend hot\n"
    assert _section_strings(tmp_path / "1.out", ".rodata.hotstr") == {b"grp hot", b"addend hot"}


def test_an_address_significance_table_keeps_strings_reached_by_addend(objs):
    """clang's .llvm_addrsig lists symbols by index: no symbol is inserted under it."""
    assert hs._indexes_symbols(read_object(objs["m"], "m")) == ".llvm_addrsig"
    _, rep = hs.rewrite_object(objs["m"], "m.o", {b"table hot\0"}, by_addend=True)
    assert rep.moved_pieces == 0 and rep.pinned_pieces == 1


@pytest.mark.parametrize("damage", ["signature", "redirect", "symbol"])
def test_check_refuses_a_wrong_symbol_insertion(noaddrsig, damage):
    """A group signature left unshifted, a redirected relocation one string off, an
    inserted symbol that is not a pool's section symbol: not proved."""
    hot = {b"grp hot\0", b"addend hot\0"}
    new, _ = hs.rewrite_object(noaddrsig["grp"], "grp.o", hot, by_addend=True)
    b = read_object(new, "b")
    buf = bytearray(new)
    shoff = int(np.frombuffer(new, hs.EHDR64, 1)["e_shoff"][0])
    shdrs = np.frombuffer(new, hs.SHDR64, len(b.sections), shoff).copy()
    first = int(shdrs[b.symtab_index]["sh_info"]) - 1
    if damage == "signature":
        g = next(s.index for s in b.sections if s.sh_type == hs.SHT["SHT_GROUP"])
        shdrs[g]["sh_info"] -= 1
        buf[shoff:shoff + shdrs.nbytes] = shdrs.tobytes()
    elif damage == "redirect":
        ri, r = next((ri, r.copy()) for ri, r in b.relas.items() if ((r["r_info"] >> 32) == first).any())
        j = int(np.flatnonzero((r["r_info"] >> 32) == first)[0])
        r["r_addend"][j] += len(b"grp hot\0") if r["r_addend"][j] == 0 else -len(b"grp hot\0")
        off = int(shdrs[ri]["sh_offset"])
        buf[off:off + r.nbytes] = r.tobytes()
    else:
        syms = b.symbols.copy()
        syms["st_shndx"][first] = 1
        off = int(shdrs[b.symtab_index]["sh_offset"])
        buf[off:off + syms.nbytes] = syms.tobytes()
    with pytest.raises(ElflayoutError, match="not proved"):
        hs.check_object(noaddrsig["grp"], bytes(buf), "grp.o", hot)


def test_static_hot_strings_by_addend(noaddrsig, tmp_path):
    """Strings a table of data that ran reaches by section + addend join the static set
    when asked for."""
    (tmp_path / "m.o").write_bytes(noaddrsig["m"])
    secs = {str(tmp_path / "m.o"): {".data.rel.ro.table", ".text.hot"}}
    assert b"table cold\0" not in hs.static_hot_strings(secs)
    assert {b"table hot\0", b"table cold\0"} <= hs.static_hot_strings(secs, by_addend=True)


def test_strings_in_takes_each_string_a_run_touches():
    """Byte runs (offset, length) to the NUL-delimited strings holding them; data that
    does not read as text is no string."""
    data = b"\0abc\0defg\0\x01\x02\x03\0xyz\0tail"
    assert hs.strings_in(data, [(2, 1)]) == {b"abc\0"}
    assert hs.strings_in(data, [(3, 4)]) == {b"abc\0", b"defg\0"}
    assert hs.strings_in(data, [(11, 2)]) == set()                  # binary
    assert hs.strings_in(data, [(20, 2)]) == set()                  # not terminated
    assert hs.strings_in(data, [(0, 1)]) == set()                   # the empty string


def test_link_hot_strings_uses_the_strings_the_run_read(profiled, tmp_path):
    """A profile with the strings its run read (``profile --strings``): those move, not
    the ones the profiled code reaches."""
    import json

    from conftest import run_cli

    doc = json.loads(profiled["profile"].read_text())
    doc["targets"][0]["strings"] = ["cold string b"]
    (tmp_path / "p.json").write_text(json.dumps(doc))
    out = tmp_path / "libs.so"
    r = run_cli("link", "--profile", tmp_path / "p.json", "--linker", "lld", "--hot-strings", "--no-check-order",
                "--", "gcc", "-shared", "-fuse-ld=lld", "-o", out, *profiled["objects"])
    assert r.returncode == 0, r.stderr
    assert "read by the profiled run" in r.stderr, r.stderr
    assert _section_strings(out, ".rodata.hotstr") == {b"cold string b"}


@pytest.mark.valgrind
def test_profile_strings_records_the_strings_a_run_reads(tmp_path):
    """``profile --strings``: the library strings the program reads (printed, compared),
    not those it only points at or never reaches."""
    import json

    from conftest import run_cli
    from elflayout.profile.valgrind import tool_status

    if tool_status():
        pytest.skip(tool_status())
    (tmp_path / "s.c").write_text(
        '#include <string.h>\n#include <stdio.h>\n'
        'const char *const names[] = {"alpha read", "beta stored only", "gamma compared"};\n'
        'const char *never(void) { return "delta never"; }\n'
        'int run(const char *w) { puts(names[0]); return strcmp(w, names[2]) == 0 ? 3 : (int)(long)names[1] % 2; }\n')
    (tmp_path / "m.c").write_text('int run(const char *);\nint main(void) { return run("gamma compared") != 3; }\n')
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", "libs.so", "s.c"], cwd=tmp_path, check=True)
    subprocess.run(["gcc", "-o", "m", "m.c", "-L.", "-ls", "-Wl,-rpath,$ORIGIN"], cwd=tmp_path, check=True)
    run_cli("profile", "--target", tmp_path / "libs.so", "--strings", "-o", tmp_path / "p.json", "--",
            tmp_path / "m", check=0)
    t = json.loads((tmp_path / "p.json").read_text())["targets"][0]
    got = set(t["strings"])
    assert {"alpha read", "gamma compared"} <= got and t["stats"]["strings"] == len(got)
    assert not {"delta never"} & got
    r = run_cli("profile", "--backend", "trace", "--target", tmp_path / "libs.so", "--strings", "-o",
                tmp_path / "q.json", "--", tmp_path / "m", check=2)
    assert "--strings needs --backend valgrind" in r.stderr


def test_merge_keeps_the_strings_any_run_read():
    from elflayout.profile import merge, model

    def prof(strings):
        t = {"path": "/x/libs.so", "build_id": "ab", "size": 1, "sha256": "00", "map": None, "functions": [],
             "sections": [], "objects": [], "pages": [{"page": 0, "kind": "r", "first": 0, "section": None,
                                                       "phase": None, "t": 0.0}], "reads": [], "strings": strings}
        return model.parse(model.new_profile(model.base_metadata(["x"], "valgrind", "block"), [t]))

    doc = merge.merge([prof(["a", "b"]), prof(["c"])], ["one", "two"])
    t = model.parse(doc).targets[0]
    assert t.extra["strings"] == ["a", "b", "c"] and hs.recorded_strings(t) == {b"a\0", b"b\0", b"c\0"}
