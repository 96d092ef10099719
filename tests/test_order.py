"""order / link / check-order on a small synthetic library linked with the real linkers.

The library (tests/order_testlib.py) has a known first-call order; its ground truth is
turned into a profile v1 as the profiler would record it. Each linker relinks the same
objects with the generated ordering and check-order must find the order honoured; the
default link must not pass.
"""

import copy
import json
import subprocess

import numpy as np
import pytest

from conftest import need_tool, run_cli
import order_testlib as testlib
from elflayout.errors import ElflayoutError
from elflayout.order.check import lis_length
from elflayout.order.resolve import Universe, clone_base, resolve, same_object, thunk_target


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    need_tool("gcc")
    wd = tmp_path_factory.mktemp("synth")
    d = testlib.build_profiled(wd, n_objects=6, funcs_per_object=8, seed=3)
    d["wd"] = wd
    return d


def _objs(d):
    return [str(o) for o in d["objects"]]


# -- name resolution -------------------------------------------------------------------

def test_clone_and_thunk_names():
    assert clone_base("foo.constprop.0.isra.0") == "foo"
    assert clone_base("foo.part.3") == "foo"
    assert clone_base("foo.cold") == "foo"
    assert clone_base("foo.bar") == "foo.bar"
    assert thunk_target("_ZThn8_N3Foo3barEv") == "_ZN3Foo3barEv"
    assert thunk_target("_ZTv0_n24_N3Foo3barEv") == "_ZN3Foo3barEv"
    assert thunk_target("_ZN3Foo3barEv") is None
    assert same_object("/x/libLLVMCore.a(Value.cpp.o)", "libLLVMCore.a(Value.cpp.o)")
    assert not same_object("libA.a(x.o)", "libB.a(x.o)")
    assert same_object("build/obj3.o", "obj3.o")


def test_resolve_against_universe():
    u = Universe(symbols={
        "helper": [(".text.helper", "a.o"), (".text.helper", "b.o")],
        "foo": [(".text.foo", "a.o")],
        "_ZN3Foo3barEv": [(".text._ZN3Foo3barEv", "b.o")],
    }, sections={".text.helper", ".text.foo", ".text._ZN3Foo3barEv"}, source="test")
    from elflayout.profile.model import Function

    entries = [Function("foo.part.0", 0), Function("helper", 1, object="b.o"), Function("_ZThn8_N3Foo3barEv", 2),
               Function("fde_e2f680", 3), Function("nothere", 4), Function("helper", 5)]
    res, rep = resolve(entries, u)
    hows = [r.how for r in res]
    assert hows[:5] == ["clone", "object", "thunk", "fde-only", "missing"]
    assert res[0].link_name == "foo" and res[2].link_name == "_ZN3Foo3barEv"
    assert res[1].objects == ["b.o"]
    assert rep["profiled"] == 6 and rep["matched"] == 4
    assert rep["by_how"]["fde-only"] == 1 and rep["by_how"]["missing"] == 1
    assert "nothere" in rep["examples"]["missing"]


def test_lis():
    assert lis_length([]) == 0
    assert lis_length([1, 2, 3]) == 3
    assert lis_length([3, 2, 1]) == 1
    assert lis_length([5, 1, 6, 2, 7, 3, 8]) == 4


# -- order + real linkers ----------------------------------------------------------------

LINKS = [("lld", "lld", "--symbol-ordering-file"), ("gold", "gold", "--section-ordering-file"),
         ("bfd", "ld-script", "-T")]


@pytest.mark.parametrize("linker,fmt,flag", LINKS)
def test_order_file_honoured_by_linker(synth, tmp_path, linker, fmt, flag):
    need_tool({"lld": "ld.lld", "gold": "ld.gold", "bfd": "ld.bfd"}[linker])
    out = tmp_path / f"order.{fmt}"
    run_cli("order", synth["profile"], "--format", fmt, "--lib", synth["lib"], "-o", out, check=0)
    text = out.read_text()
    assert "synth_entry" in text
    lib = tmp_path / "libo.so"
    opt = f"{flag},{out}" if flag == "-T" else f"{flag}={out}"
    subprocess.run(["gcc", "-shared", f"-fuse-ld={linker}", "-o", str(lib), *_objs(synth), f"-Wl,{opt}"], check=True)
    r = run_cli("check-order", lib, "--profile", synth["profile"], "--json", "--fail-under", "0.99", check=0)
    res = json.loads(r.stdout)
    assert res["in_order_fraction"] == 1.0
    assert res["pages"] <= res["pages_min"] + 1
    assert not res["same_build"] and res["missing"] == 0


def test_default_link_is_not_ordered(synth):
    r = run_cli("check-order", synth["lib"], "--profile", synth["profile"], "--json", "--fail-under", "0.9")
    assert r.returncode == 1, r.stderr
    res = json.loads(r.stdout)
    assert res["same_build"] and res["in_order_fraction"] < 0.9
    assert "profile order" in r.stderr


def test_objects_format_keeps_untouched_objects(synth, tmp_path):
    out = tmp_path / "objs.txt"
    run_cli("order", synth["profile"], "--format", "objects", "--objects-from", synth["map"], "-o", out, check=0)
    lines = out.read_text().split()
    assert sorted(lines) == sorted(o for o in _objs(synth))  # every object, once
    touched = [o["object"] for o in synth["prof"]["targets"][0]["objects"]]
    assert [l.rsplit("/", 1)[-1] for l in lines[:len(touched)]] == touched


def test_ld_script_keeps_default_script(synth, tmp_path):
    out = tmp_path / "o.ld"
    run_cli("order", synth["profile"], "--format", "ld-script", "-o", out, check=0)
    text = out.read_text()
    assert "INSERT BEFORE .text;" in text and ".text.elflayout" in text
    lib = tmp_path / "libo.so"
    subprocess.run(["gcc", "-shared", "-o", str(lib), *_objs(synth), f"-Wl,-T,{out}"], check=True)
    # the default script still applies: the usual sections and an executable text segment
    r = subprocess.run(["readelf", "-lW", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "GNU_RELRO" in r and "R E" in r
    drv = subprocess.run([str(synth["driver"])], capture_output=True, text=True,
                         env={"LD_LIBRARY_PATH": str(tmp_path)})
    ref = subprocess.run([str(synth["driver"])], capture_output=True, text=True)
    assert drv.returncode == 0 and drv.stdout == ref.stdout


@pytest.mark.parametrize("linker", ["lld", "gold", "bfd", "mold"])
def test_link_verb(synth, tmp_path, linker):
    need_tool({"lld": "ld.lld", "gold": "ld.gold", "bfd": "ld.bfd", "mold": "mold"}[linker])
    lib = tmp_path / "libsynth.so"
    r = run_cli("link", "--profile", synth["profile"], "--linker", linker, "--",
                "gcc", "-shared", f"-fuse-ld={linker}", "-o", lib, *_objs(synth), check=0)
    assert "in profile order" in r.stderr
    if linker == "mold":
        assert "100.0% of touched objects placed in profile order" in r.stderr
    else:
        res = json.loads(run_cli("check-order", lib, "--profile", synth["profile"], "--json", check=0).stdout)
        assert res["in_order_fraction"] == 1.0


def test_link_verb_direct_linker(synth, tmp_path):
    need_tool("ld.lld")
    lib = tmp_path / "libd.so"
    run_cli("link", "--profile", synth["profile"], "--linker", "lld", "--",
            "ld.lld", "-shared", "-o", lib, *_objs(synth), check=0)
    assert lib.exists()


# -- bad input ----------------------------------------------------------------------------

def test_profile_of_another_library_is_refused(synth, tmp_path):
    other = tmp_path / "other.so"
    subprocess.run(["gcc", "-shared", "-o", str(other), str(synth["objects"][1])], check=True)
    r = run_cli("order", synth["profile"], "--format", "lld", "--lib", other, "-o", tmp_path / "x", check=2)
    assert "profile is of build" in r.stderr and "--allow-stale-profile" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x").exists()
    # --force only replaces outputs; a stale profile needs its own option
    run_cli("order", synth["profile"], "--format", "lld", "--lib", other, "-o", tmp_path / "x", "--force", check=2)
    run_cli("order", synth["profile"], "--format", "lld", "--lib", other, "-o", tmp_path / "x",
            "--allow-stale-profile", check=0)


def test_empty_profile(synth, tmp_path):
    doc = json.loads(synth["profile"].read_text())
    for k in ("functions", "sections", "objects", "pages"):
        doc["targets"][0][k] = []
    p = tmp_path / "empty.json"
    p.write_text(json.dumps(doc))
    r = run_cli("order", p, "--format", "lld", "-o", tmp_path / "x", check=2)
    assert "is empty" in r.stderr
    r = run_cli("check-order", synth["lib"], "--profile", p, check=2)
    assert "is empty" in r.stderr


def test_output_exists_needs_force(synth, tmp_path):
    out = tmp_path / "o.txt"
    out.write_text("mine\n")
    r = run_cli("order", synth["profile"], "--format", "lld", "-o", out, check=2)
    assert "--force" in r.stderr and out.read_text() == "mine\n"


def test_failing_link_command_passes_output_and_status(synth, tmp_path):
    r = run_cli("link", "--profile", synth["profile"], "--linker", "bfd", "--",
                "gcc", "-shared", "-o", tmp_path / "l.so", *_objs(synth), "-lnosuchlibrary_xyz")
    assert r.returncode == 1  # gcc's own exit status
    assert "nosuchlibrary_xyz" in r.stderr and "link command failed (exit 1)" in r.stderr
    r = run_cli("link", "--profile", synth["profile"], "--linker", "bfd", "--", "sh", "-c", "exit 7", "-o", "x")
    assert r.returncode == 7


def test_linker_ignoring_the_order_is_reported(synth, tmp_path):
    """Objects without -ffunction-sections, not split (--no-split): lld cannot move
    functions; link must say so (exit 1)."""
    need_tool("ld.lld")
    objs = []
    for o in synth["objects"]:
        c = o.with_suffix(".c")
        n = tmp_path / o.name
        subprocess.run(["gcc", "-O1", "-fPIC", "-fno-inline", "-c", str(c), "-o", str(n)], check=True)
        objs.append(str(n))
    r = run_cli("link", "--no-split", "--profile", synth["profile"], "--linker", "lld", "--",
                "gcc", "-shared", "-fuse-ld=lld", "-o", tmp_path / "l.so", *objs)
    assert r.returncode == 1, r.stderr
    assert "did not honour the ordering" in r.stderr


def test_linker_mismatch(synth, tmp_path):
    r = run_cli("link", "--profile", synth["profile"], "--linker", "gold", "--",
                "gcc", "-fuse-ld=lld", "-shared", "-o", tmp_path / "l.so", *_objs(synth), check=2)
    assert "--linker says gold" in r.stderr


def test_gold_places_jump_tables_with_their_functions(synth, tmp_path):
    """With the link map, .rodata.<function> (jump tables) follow the first-access order."""
    need_tool("ld.gold")
    from elflayout import linkmap

    out = tmp_path / "o.gold"
    r = run_cli("order", synth["profile"], "--format", "gold", "--objects-from", synth["map"], "-o", out,
                "--report", check=0)
    rep = json.loads(r.stdout)
    assert rep["data"]["associated"] > 0 and rep["functions"]["matched_fraction"] == 1.0
    lines = out.read_text().splitlines()
    ro = [l for l in lines if l.startswith(".rodata.")]
    assert ro and lines[-1] == ".rodata*" and ".text*" in lines
    lib, mp = tmp_path / "libg.so", tmp_path / "g.map"
    subprocess.run(["gcc", "-shared", "-fuse-ld=gold", "-o", str(lib), *_objs(synth),
                    f"-Wl,--section-ordering-file={out}", f"-Wl,-Map,{mp}"], check=True)
    lm = linkmap.parse(mp)
    addr = {n: int(v) for n, v in zip(lm.name, lm.vaddr) if n in ro}
    placed = [addr[n] for n in ro if n in addr]
    assert len(placed) == len(ro) and placed == sorted(placed)
    # and they come before every other .rodata input section of the objects
    others = [int(v) for n, v, o in zip(lm.name, lm.vaddr, lm.output) if o == ".rodata" and n not in ro and n.startswith(".rodata.")]
    assert not others or max(placed) < min(others)


def test_objects_from_the_profiled_map_keeps_data_pages(synth, tmp_path):
    """--objects-from the profiled build's own map must still map data pages to input
    sections (it used to be read without the library: no offsets, data placement lost)."""
    from elflayout.elfcore import ElfImage
    from elflayout.order.resolve import elf_symbols

    doc = json.loads(synth["profile"].read_text())
    t = doc["targets"][0]
    with ElfImage(synth["lib"]) as img:
        arr, names = elf_symbols(img)
    tbl = sorted({int(arr["offset"][i]) // 4096 for i, n in enumerate(names) if n.startswith("tbl_")})
    assert tbl
    t["map"] = str(synth["map"])
    t["pages"] = [{"page": pg, "kind": "r", "first": 1000 + i, "phase": "main", "t": 0.0} for i, pg in enumerate(tbl)]
    p = tmp_path / "data.json"
    p.write_text(json.dumps(doc))
    counts = []
    for extra in ([], ["--objects-from", synth["map"]]):
        for fmt in ("gold", "lld"):
            r = run_cli("order", p, "--format", fmt, "--lib", synth["lib"], *extra, "-o", tmp_path / f"{fmt}{len(extra)}",
                        "--report", check=0)
            counts.append((json.loads(r.stdout)["data"], len((tmp_path / f"{fmt}{len(extra)}").read_text().splitlines())))
    (g0, gl0), (l0, ll0), (g1, gl1), (l1, ll1) = counts
    assert g0["from_pages"] > 0 and g1["from_pages"] >= g0["from_pages"]
    assert g1["sections"] >= g0["sections"] and gl1 >= gl0
    assert l1["symbols_for_lld"] >= l0["symbols_for_lld"] > 0 and ll1 >= ll0


def test_report_counts_resolution(synth, tmp_path):
    r = run_cli("order", synth["profile"], "--format", "lld", "--objects-from", synth["map"], "-o", tmp_path / "x",
                "--report", check=0)
    rep = json.loads(r.stdout)
    by = rep["functions"]["by_how"]
    # the per-object static helper is matched through the profile's object field
    assert by.get("object", 0) >= 1 and by.get("missing", 0) == 0


def test_trace_profile_has_nothing_to_order(synth, tmp_path):
    doc = json.loads(synth["profile"].read_text())
    t = doc["targets"][0]
    t["pages"] = [{"page": f["offset"] // 4096, "kind": "t", "first": i, "t": 0.0} for i, f in enumerate(t["functions"])]
    t["functions"], t["objects"] = [], []
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(doc))
    r = run_cli("order", p, "--format", "lld", "-o", tmp_path / "x", check=1)
    assert "nothing to order" in r.stderr and not (tmp_path / "x").exists()
    assert "names no functions" in r.stderr and "--backend valgrind" in r.stderr


def test_profile_without_functions_is_refused_even_with_data(synth, tmp_path):
    """A page-granularity profile whose pages a map turns into data sections: no
    ordering of 0/0 functions is written (exit 1, how to record functions)."""
    doc = json.loads(synth["profile"].read_text())
    t = doc["targets"][0]
    doc["metadata"].update(backend="trace", granularity="page")
    t["functions"], t["objects"] = [], []
    t["sections"] = [{"name": ".rodata.tbl_0", "object": "obj0.o", "first": 0}]
    t["pages"] = [{"page": 0, "kind": "t", "first": 0, "t": 0.0}]
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(doc))
    for verb in (["order", p, "--format", "lld", "--objects-from", synth["map"], "-o", tmp_path / "x"],
                 ["link", "--profile", p, "--objects-from", synth["map"], "--", "gcc", "-shared", "-o",
                  tmp_path / "l.so", *_objs(synth)]):
        r = run_cli(*verb, check=1)
        assert "names no functions (page granularity, trace backend" in r.stderr, r.stderr
        assert not (tmp_path / "x").exists() and not (tmp_path / "l.so").exists()


def test_hot_last_puts_touched_code_at_the_end_of_text(synth, tmp_path):
    need_tool("ld.lld")
    out = tmp_path / "h.lld"
    r = run_cli("order", synth["profile"], "--algorithm", "hot-last", "--format", "lld", "--objects-from", synth["map"],
                "-o", out, "--report", check=0)
    rep = json.loads(r.stdout)
    assert rep["algorithm"] == "hot-last" and rep["hot_last"]["cold_sections_listed_first"] > 0
    lib = tmp_path / "libh.so"
    subprocess.run(["gcc", "-shared", "-fuse-ld=lld", "-o", str(lib), *_objs(synth),
                    f"-Wl,--symbol-ordering-file={out}"], check=True)
    res = json.loads(run_cli("check-order", lib, "--profile", synth["profile"], "--json", check=0).stdout)
    assert res["in_order_fraction"] == 1.0 and res["contiguity"] > 0.95
    # the touched (called) functions are the last o*_f* functions of .text
    called = json.loads(synth["truth"].read_text())["called"]
    nm = subprocess.run(["nm", "-n", str(lib)], capture_output=True, text=True, check=True).stdout.split("\n")
    text_syms = [l.split()[2] for l in nm if len(l.split()) == 3 and l.split()[1] in "tT" and l.split()[2].startswith("o")]
    assert set(text_syms[-len(called):]) == set(called)


def test_unknown_algorithm(synth, tmp_path):
    r = run_cli("order", synth["profile"], "--algorithm", "nope", "--format", "lld", "-o", tmp_path / "x", check=2)
    assert "unknown algorithm" in r.stderr


# -- lld companions: data script and .dynstr name order --------------------------------

def _lld_map_rows(mp):
    from elflayout import linkmap

    lm = linkmap.parse(mp)
    return list(zip(lm.name, (int(v) for v in lm.vaddr), lm.output))


def test_lld_data_script_places_symbolless_data(synth, tmp_path):
    """--data-script: the jump tables (.rodata.<function>, no symbol lld could be given)
    land in first-access order before the rest of the read-only data; the library runs."""
    need_tool("ld.lld")
    order, script = tmp_path / "o.lld", tmp_path / "d.ld"
    r = run_cli("order", synth["profile"], "--format", "lld", "--objects-from", synth["map"], "-o", order,
                "--data-script", script, "--report", check=0)
    rep = json.loads(r.stdout)
    assert rep["data_script"]["data_sections"] > 0 and "INSERT BEFORE .rodata;" in script.read_text()
    want = [l.split("(")[1].rstrip(")") for l in script.read_text().splitlines() if l.strip().startswith("*(.rodata.")]
    assert want
    lib, mp = tmp_path / "libsynth.so", tmp_path / "l.map"
    subprocess.run(["gcc", "-shared", "-fuse-ld=lld", "-o", str(lib), *_objs(synth), f"-Wl,--symbol-ordering-file={order}",
                    f"-Wl,-T,{script}", f"-Wl,-Map,{mp}"], check=True)
    rows = _lld_map_rows(mp)
    addr = {n: v for n, v, _o in rows if n in want}
    placed = [addr[n] for n in want if n in addr]
    assert len(placed) == len(want) and placed == sorted(placed)
    others = [v for n, v, o in rows if n.startswith(".rodata") and n not in addr and o == ".rodata"]
    assert not others or max(placed) < min(others)
    # same output as the default build, through the reordered library
    env = {"LD_LIBRARY_PATH": str(tmp_path)}
    got = subprocess.run([str(synth["driver"])], env=env, capture_output=True, text=True, check=True).stdout
    ref = subprocess.run([str(synth["driver"])], capture_output=True, text=True, check=True).stdout
    assert got == ref


def test_data_script_needs_lld_format(synth, tmp_path):
    r = run_cli("order", synth["profile"], "--format", "gold", "-o", tmp_path / "x", "--data-script", tmp_path / "d",
                check=2)
    assert "--data-script" in r.stderr and not (tmp_path / "x").exists()


def test_dynstr_names_go_first_with_lld(synth, tmp_path):
    """--dynstr-out: the names of the library's symbol relocations and of the program's
    imports become the first strings of .dynstr (lld -u/-y), the weak undefined ones
    with -y (a -u would make them strong), and the library still loads and runs."""
    need_tool("ld.lld")
    from elflayout.elfcore import ElfImage
    from elflayout.order.dynstr import _dynsym

    rsp = tmp_path / "n.rsp"
    r = run_cli("order", synth["profile"], "--format", "lld", "--lib", synth["lib"], "-o", tmp_path / "o",
                "--dynstr-out", rsp, "--dynstr-exe", synth["driver"], "--report", check=0)
    rep = json.loads(r.stdout)["dynstr"]
    lines = rsp.read_text().splitlines()
    names = [l.split(" ", 1)[1] for l in lines]
    # the driver's import and the library's own GOT/PLT references are there
    assert "synth_entry" in names and rep["from_executables"] >= 1 and rep["from_relocations"] >= 3
    assert any(n.startswith("tbl_") for n in names)
    assert all((l.startswith("-y ") == (l[3:] in rep["weak_undefined"])) for l in lines)
    assert "__gmon_start__" in rep["weak_undefined"]

    def offsets(lib):
        with ElfImage(lib) as img:
            recs, nm = _dynsym(img)
        return {n: int(o) for n, o in zip(nm, recs["st_name"]) if n}

    base, ordered = tmp_path / "b" / "libsynth.so", tmp_path / "libsynth.so"
    base.parent.mkdir()
    for out, extra in ((base, []), (ordered, [f"-Wl,@{rsp}"])):
        subprocess.run(["gcc", "-shared", "-fuse-ld=lld", "-o", str(out), *_objs(synth), *extra], check=True)
    ob, oo = offsets(base), offsets(ordered)
    listed = [n for n in names if n in oo]
    rest = [n for n in oo if n not in set(names)]
    assert listed and rest
    assert max(oo[n] for n in listed) < min(oo[n] for n in rest)           # listed names first
    assert not max(ob[n] for n in listed) < min(ob[n] for n in rest)       # not so by default
    env = {"LD_LIBRARY_PATH": str(tmp_path)}
    got = subprocess.run([str(synth["driver"])], env=env, capture_output=True, text=True, check=True).stdout
    assert got == subprocess.run([str(synth["driver"])], capture_output=True, text=True, check=True).stdout
    import sys
    chk = subprocess.run([sys.executable, "-c", "import ctypes, os, sys; ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)",
                          str(ordered)], capture_output=True, text=True)
    assert chk.returncode == 0, chk.stderr


def test_dynstr_needs_lld_format(synth, tmp_path):
    r = run_cli("order", synth["profile"], "--format", "gold", "--lib", synth["lib"], "-o", tmp_path / "x",
                "--dynstr-out", tmp_path / "n.rsp", check=2)
    assert "only lld" in r.stderr and not (tmp_path / "n.rsp").exists()


def test_link_verb_lld_companions(synth, tmp_path):
    """link --data-script --dynstr: the two lld companions are added to the command;
    jump tables land in .rodata.elflayout, the library's GOT/PLT names lead .dynstr."""
    need_tool("ld.lld")
    lib, mp = tmp_path / "libsynth.so", tmp_path / "l.map"
    r = run_cli("link", "--profile", synth["profile"], "--linker", "lld", "--objects-from", synth["map"],
                "--data-script", "--dynstr", "--", "gcc", "-shared", "-fuse-ld=lld", "-o", lib, *_objs(synth),
                f"-Wl,-Map,{mp}", check=0)
    assert "-Wl,-T," in r.stderr and "-Wl,@" in r.stderr and "names first" in r.stderr
    rows = _lld_map_rows(mp)
    assert any(o == ".rodata.elflayout" and n.startswith(".rodata.o") for n, _v, o in rows)
    env = {"LD_LIBRARY_PATH": str(tmp_path)}
    got = subprocess.run([str(synth["driver"])], env=env, capture_output=True, text=True, check=True).stdout
    assert got == subprocess.run([str(synth["driver"])], capture_output=True, text=True, check=True).stdout


def test_link_verb_companions_need_lld(synth, tmp_path):
    r = run_cli("link", "--profile", synth["profile"], "--linker", "gold", "--dynstr", "--", "gcc", "-shared",
                "-fuse-ld=gold", "-o", tmp_path / "x.so", *_objs(synth), check=2)
    assert "--dynstr" in r.stderr and not (tmp_path / "x.so").exists()


def test_lld_data_script_hot_strings_get_their_own_pool(tmp_path):
    """The touched objects' merged strings (.rodata.str1.1) go to .rodata.elflayout and
    the untouched object's strings stay in .rodata's pool (lld merges per output section);
    a string both objects use is in each pool and each object reads its own copy."""
    need_tool("ld.lld")
    from elflayout.order.algorithms import Layout
    from elflayout.order.formats import write_lld_data_script

    src = {"hot": 'const char *hot(void) { return "hot string used at start"; }\n'
                  'const char *both_h(void) { return "shared string"; }\n',
           "cold": 'const char *cold(void) { return "cold string never used"; }\n'
                   'const char *both_c(void) { return "shared string"; }\n'}
    objs = {}
    for k, text in src.items():
        c = tmp_path / f"{k}.c"
        c.write_text(text)
        objs[k] = tmp_path / f"{k}.o"
        subprocess.run(["gcc", "-O1", "-fPIC", "-c", str(c), "-o", str(objs[k])], check=True)
    text, stats = write_lld_data_script(Layout(objects=[str(objs["hot"])]))
    assert stats["string_objects"] == 1 and f"{objs['hot']}(.rodata.str*)" in text
    script = tmp_path / "d.ld"
    script.write_text(text)
    lib = tmp_path / "libs.so"
    subprocess.run(["gcc", "-shared", "-fuse-ld=lld", "-o", str(lib), str(objs["cold"]), str(objs["hot"]),
                    f"-Wl,-T,{script}"], check=True)

    def strings(sec):
        r = subprocess.run(["readelf", "-p", sec, str(lib)], capture_output=True, text=True)
        return r.stdout

    hot_sec, rodata = strings(".rodata.elflayout"), strings(".rodata")
    assert "hot string used at start" in hot_sec and "cold string never used" not in hot_sec
    assert "cold string never used" in rodata and "shared string" in hot_sec and "shared string" in rodata
    code = ("import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); "
            "[setattr(getattr(l, f), 'restype', ctypes.c_char_p) for f in ('hot', 'cold', 'both_h', 'both_c')]; "
            "print(l.hot().decode(), l.cold().decode(), l.both_h().decode(), l.both_c().decode(), sep='|')")
    import sys
    out = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "hot string used at start|cold string never used|shared string|shared string"


def test_order_naming_almost_nothing_is_refused(synth, tmp_path):
    """A stripped library's profile names its functions by FDE extent (``fde_<vaddr>``),
    which no linker knows: an ordering naming almost none of them is refused (exit 1,
    with a hint), never written."""
    doc = json.loads(synth["profile"].read_text())
    fns = doc["targets"][0]["functions"]
    keep = fns[:1]
    last = max(f["first"] for f in fns)
    fake = [{**fns[i % len(fns)], "name": f"fde_{0x100000 + i:x}", "first": last + 1 + i} for i in range(200)]
    for f in fake:
        f.pop("object", None)
    doc["targets"][0]["functions"] = keep + fake
    p = tmp_path / "stripped.json"
    p.write_text(json.dumps(doc))
    out = tmp_path / "o.lld"
    r = run_cli("order", p, "--format", "lld", "--no-data", "-o", out)
    assert r.returncode == 1, r.stderr
    assert "stripped" in r.stderr and "nothing written" in r.stderr and not out.exists()
    # the real profile is ordered as before
    run_cli("order", synth["profile"], "--format", "lld", "-o", out, check=0)


# -- several workloads: combining and held-out evaluation --------------------------------

def _two_workloads(synth, tmp_path):
    """Two workloads of the synthetic library made from its truth: the first two thirds
    of the call order, and the last two thirds (they share the middle third)."""
    import copy

    from elflayout.profile import merge, model

    fs = synth["prof"]["targets"][0]["functions"]
    n = len(fs)
    parts = {"a": fs[: 2 * n // 3], "b": fs[n // 3:]}
    docs = []
    for name, entries in parts.items():
        d = copy.deepcopy(synth["prof"])
        d["targets"][0]["functions"] = [dict(f, first=i) for i, f in enumerate(entries)]
        d["targets"][0]["objects"] = []
        d["metadata"]["argv"] = [name]
        docs.append(model.parse(d))
    m = merge.merge(docs, list(parts), rule="concat")
    p = tmp_path / "set.json"
    p.write_text(json.dumps(m))
    return p, parts


def test_order_combine_rules(synth, tmp_path):
    p, parts = _two_workloads(synth, tmp_path)
    a, b = [f["name"] for f in parts["a"]], [f["name"] for f in parts["b"]]
    got = {}
    for rule in ("concat", "earliest", "mean", "shared", "phased"):
        out = tmp_path / f"{rule}.order"
        run_cli("order", p, "--format", "lld", "--combine", rule, "-o", out, check=0)
        got[rule] = [ln for ln in out.read_text().splitlines() if ln and not ln.startswith("#")]
    want_all = set(a) | set(b)
    for rule, names in got.items():  # code any workload touches is in the hot region
        assert want_all <= set(names) | {"helper"}, rule
    # concat: a's order, then what only b touches
    only_b = [x for x in b if x not in a]
    assert [x for x in got["concat"] if x in only_b] == list(dict.fromkeys(only_b))
    assert got["concat"].index(a[0]) < got["concat"].index(only_b[0])
    # earliest: b's first function (rank 0 in b) comes before a's second (rank > 0 in a)
    assert got["earliest"].index(b[0]) < got["earliest"].index(a[1])
    # mean (untouched = 1): b's first function, also touched half-way through a (mean
    # rank ~0.25), comes before a's first, which b never touches (mean rank 0.5)
    assert b[0] in a and a[0] not in b
    assert got["mean"].index(b[0]) < got["mean"].index(a[0])
    assert got["concat"].index(a[0]) < got["concat"].index(b[0])
    # shared: everything both workloads touch comes before what only one touches
    shared = [x for x in a if x in b and x != "helper"]
    lonely = [x for x in a + b if (x in a) != (x in b) and x != "helper"]
    assert max(got["shared"].index(x) for x in shared) < min(got["shared"].index(x) for x in lonely)


def test_cross_validation_table(synth, tmp_path):
    from elflayout.elfcore import ElfImage
    from elflayout.order import heldout
    from elflayout.profile import merge, model

    p, parts = _two_workloads(synth, tmp_path)
    prof = model.load(p)
    with ElfImage(synth["lib"]) as img:
        rows = heldout.cross_validate(img, prof, "earliest", read_ahead_kb=16)
        base = heldout.functions_of(img)
        # the virtual layout packs the hot set at the start of .text, in training order
        train = prof.targets[0]
        lay = heldout.ordered_layout(img, base, train)
        idx = list(dict.fromkeys(base.index(np.array([f.offset for f in train.functions])).tolist()))
        assert -1 not in idx and lay.hot.sum() == len(idx)
        assert np.all(np.diff(lay.new[idx]) > 0)  # training order
        text = [s for s in img.sections if s.name == ".text"][0]
        in_text = (base.start >= text.offset) & (base.start < text.offset + text.size)
        assert lay.new[idx].max() < lay.new[in_text & ~lay.hot].min()  # before every cold function
        # trained on itself, no page of the hot region is foreign; trained on b, a's pages
        # that hold only b's functions are
        views = [merge.workload_view(prof, k) for k in range(2)]
        va, vb = (v.targets[0] for v in views)
        mine = heldout.evaluate(img, va, va, 16, base)
        assert mine["foreign_pages"] == mine["foreign_near_pages"] == 0 and mine["hot_region_pages"] > 0
        other = heldout.evaluate(img, va, vb, 16, base)
        lay_b = heldout.ordered_layout(img, base, vb)
        hot_b = np.flatnonzero(lay_b.hot)
        own = set(base.index(np.array([f.offset for f in va.functions])).tolist())
        span = lambda i: set(range(int(lay_b.new[i]) // 4096, (int(lay_b.new[i] + max(base.size[i], 1)) - 1) // 4096 + 1))  # noqa: E731
        only_b = set().union(*(span(i) for i in hot_b)) - set().union(*(span(i) for i in hot_b if i in own))
        assert other["foreign_pages"] == len(only_b)
        assert 0 <= other["foreign_near_pages"] <= other["foreign_pages"]
    assert [r["workload"] for r in rows] == ["a", "b"]
    key = lambda f: (f["name"], f["offset"])  # noqa: E731
    ka, kb = {key(f) for f in parts["a"]}, {key(f) for f in parts["b"]}
    ra, rb = rows
    assert ra["functions"] == len(ka) and ra["in_hot_region"] == len(ka & kb) and ra["cold_functions"] == len(ka - kb)
    assert rb["functions"] == len(kb) and rb["in_hot_region"] == len(ka & kb)
    for r in rows:
        assert r["worse_than_unordered"] == (r["predicted_pages"] > r["unordered_pages"])
        assert r["self_pages"] > 0 and r["unordered_pages"] > 0 and r["order_only_pages"] > 0
        assert r["in_hot_fraction"] == pytest.approx(r["in_hot_region"] / r["functions"])
    r = run_cli("check-order", synth["lib"], "--profile", p, "--cross-validate", "--read-ahead-kb", "16",
                check=None)
    assert r.returncode in (0, 1) and "held-out workload" in r.stdout and "Traceback" not in r.stderr
    r = run_cli("check-order", synth["lib"], "--profile", p, "--cross-validate", "--json", check=None)
    assert [w["workload"] for w in json.loads(r.stdout)["workloads"]] == ["a", "b"]
    # a profile of one workload cannot be cross-validated
    r = run_cli("check-order", synth["lib"], "--profile", synth["profile"], "--cross-validate", check=2)
    assert "several workloads" in r.stderr


def test_cross_validation_never_trains_on_the_held_out_command(synth, tmp_path):
    """A workload that runs the held-out one's exact command is left out of its training
    set; ``held_out`` evaluates only the named workloads, the others only train."""
    from elflayout.elfcore import ElfImage
    from elflayout.order import heldout
    from elflayout.profile import merge, model

    p, parts = _two_workloads(synth, tmp_path)
    two = model.load(p)
    views = [merge.workload_view(two, k) for k in range(2)]
    again = model.parse(copy.deepcopy(views[0].to_doc()))  # a second run of a's command
    m = model.parse(merge.merge([*views, again], ["a", "b", "a again"], rule="concat"))
    wl = m.workloads
    assert wl[0]["argv"] == wl[2]["argv"] == ["a"]
    assert heldout.training_set(wl, 0) == [1] and heldout.training_set(wl, 2) == [1]
    assert heldout.training_set(wl, 1) == [0, 2]
    with ElfImage(synth["lib"]) as img:
        rows = heldout.cross_validate(img, m, "earliest", read_ahead_kb=16, held_out=["a", "b"])
        assert [r["workload"] for r in rows] == ["a", "b"]
        assert rows[0]["trained_on"] == ["b"] and rows[0]["duplicates_left_out"] == 1
        assert rows[1]["trained_on"] == ["a", "a again"] and rows[1]["duplicates_left_out"] == 0
        # trained on b alone, a's figures are those of the two-workload table
        ref = heldout.cross_validate(img, two, "earliest", read_ahead_kb=16)[0]
        assert {k: rows[0][k] for k in ref if k != "duplicates_left_out"} == {
            k: v for k, v in ref.items() if k != "duplicates_left_out"}
        with pytest.raises(ElflayoutError, match="no workload named 'c'"):
            heldout.cross_validate(img, m, held_out=["c"])


def test_heldout_training_modules_are_not_the_held_out_module(tmp_path):
    """The benchmark's training compiles (``TRAINING_LL``, ``TRAINING_SMALL_LL``, the
    corpus ``training_corpus``) are modules llc-16 compiles, and none defines a function
    of the held-out example module: the held-out compile is never trained on."""
    import re

    from elflayout.targets import libllvm

    need_tool("llc-16")
    defined = lambda text: set(re.findall(r"^define [^@]*@(\w+)", text, re.M))  # noqa: E731
    example = defined(libllvm.EXAMPLE_LL)
    assert example
    corpus = {n: p.read_text() for n, p in libllvm.training_corpus().items()}
    assert len(corpus) >= 8 and libllvm.EXAMPLE_LL not in corpus.values()
    for name, text in (("training", libllvm.TRAINING_LL), ("training-small", libllvm.TRAINING_SMALL_LL),
                       *corpus.items()):
        assert defined(text) and not defined(text) & example, name
        src = tmp_path / f"{name}.ll"
        src.write_text(text)
        asm = subprocess.run(["llc-16", "-O2", str(src), "-o", "-"], check=True, capture_output=True, text=True).stdout
        exported = re.findall(r"^define (?!internal)[^@]*@(\w+)", text, re.M)
        assert exported and all(re.search(rf"^{f}:", asm, re.M) for f in exported), name


def test_held_out_against_a_training_profile(synth, tmp_path):
    from elflayout.profile import merge, model

    p, parts = _two_workloads(synth, tmp_path)
    prof = model.load(p)
    for k, name in enumerate(("a", "b")):
        (tmp_path / f"{name}.json").write_text(json.dumps(merge.workload_view(prof, k).to_doc()))
    r = run_cli("check-order", synth["lib"], "--profile", tmp_path / "b.json", "--trained-on", tmp_path / "a.json",
                "--json", check=0)
    res = json.loads(r.stdout)
    kb = {(f["name"], f["offset"]) for f in parts["b"]}
    ka = {(f["name"], f["offset"]) for f in parts["a"]}
    assert res["functions"] == len(kb) and res["in_hot_region"] == len(ka & kb)
    assert res["cold_functions"] == len(kb - ka) and res["predicted_pages"] > 0
    r = run_cli("check-order", synth["lib"], "--profile", tmp_path / "b.json", "--trained-on", tmp_path / "a.json",
                check=0)
    assert "in the ordered region" in r.stdout and "pages predicted" in r.stdout


def test_callgrind_call_graph_for_lld(tmp_path):
    """A peer's input: callgrind's call counts → lld's --call-graph-ordering-file, which
    lld accepts and uses (C3 puts a caller next to its heaviest callee)."""
    need_tool("valgrind")
    need_tool("ld.lld")
    from elflayout.order import callgraph

    (tmp_path / "l.c").write_text("int h(int x){return x*3;}\nint pad(int x){return x+7;}\n"
                                  "int g(int x){int s=0; for(int i=0;i<5;i++) s+=h(x+i); return s;}\n"
                                  "int f(int x){return g(x)+h(x);}\n")
    (tmp_path / "m.c").write_text("int f(int);int main(){return f(1)==0;}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", "-ffunction-sections", "-c", "-o", tmp_path / "l.o",
                    tmp_path / "l.c"], check=True)
    subprocess.run(["gcc", "-shared", "-o", tmp_path / "libl.so", tmp_path / "l.o"], check=True)
    subprocess.run(["gcc", "-o", tmp_path / "m", tmp_path / "m.c", f"-L{tmp_path}", "-ll",
                    f"-Wl,-rpath,{tmp_path}"], check=True)
    out = tmp_path / "cg.out"
    subprocess.run([*callgraph.callgrind_command(out), tmp_path / "m"], check=True)
    rep = callgraph.from_callgrind(out, tmp_path / "libl.so", tmp_path / "cg.txt")
    lines = (tmp_path / "cg.txt").read_text().splitlines()
    assert lines[0] == "g h 5" and set(lines) == {"g h 5", "f g 1", "f h 1"} and rep["edges"] >= 3
    r = subprocess.run(["gcc", "-shared", "-fuse-ld=lld", "-o", tmp_path / "libc3.so", tmp_path / "l.o",
                        f"-Wl,--call-graph-ordering-file={tmp_path / 'cg.txt'}"], capture_output=True, text=True)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    nm = subprocess.run(["nm", tmp_path / "libc3.so"], capture_output=True, text=True, check=True).stdout
    addr = {ln.split()[2]: int(ln.split()[0], 16) for ln in nm.splitlines() if ln.split()[-1] in ("f", "g", "h", "pad")}
    # the link order puts pad between h and g; lld places the call graph's sections first
    assert addr["pad"] > max(addr["f"], addr["g"], addr["h"])
    with pytest.raises(ElflayoutError, match="not a callgrind profile"):
        (tmp_path / "bad").write_text("hello\n")
        callgraph.edges(tmp_path / "bad", "libl.so")


# -- one pipeline: order and link share it ------------------------------------------------

def _link_order_file(prof, synth, tmp_path, linker, *extra):
    """The ordering file ``link`` applies (--keep-order-file)."""
    need_tool({"lld": "ld.lld", "gold": "ld.gold", "bfd": "ld.bfd"}[linker])
    keep = tmp_path / f"link-{linker}.order"
    run_cli("link", "--profile", prof, "--linker", linker, *extra, "--keep-order-file", keep, "--force", "--",
            "gcc", "-shared", f"-fuse-ld={linker}", "-o", tmp_path / f"l-{linker}.so", *_objs(synth))
    return keep


def test_link_refuses_a_profile_of_another_build(synth, tmp_path):
    """link --lib: the identity check of order (same message, same --allow-stale-profile)."""
    other = tmp_path / "other.so"
    subprocess.run(["gcc", "-shared", "-o", str(other), str(synth["objects"][1])], check=True)
    need_tool("ld.lld")
    lib = tmp_path / "l.so"
    cmd = ["--", "gcc", "-shared", "-fuse-ld=lld", "-o", lib, *_objs(synth)]
    r = run_cli("link", "--profile", synth["profile"], "--linker", "lld", "--lib", other, *cmd, check=2)
    assert "profile is of build" in r.stderr and "--allow-stale-profile" in r.stderr and not lib.exists()
    r = run_cli("link", "--profile", synth["profile"], "--linker", "lld", "--lib", other, "--allow-stale-profile",
                *cmd, check=0)
    assert "warning: " in r.stderr and "profile is of build" in r.stderr and lib.exists()
    run_cli("link", "--profile", synth["profile"], "--linker", "lld", "--lib", synth["lib"], *cmd, "-Wl,-z,now",
            check=0)


@pytest.mark.parametrize("extra", [("--combine", "shared"), ("--combine", "phased"), ("--no-data",),
                                   ("--algorithm", "hot-last")])
def test_link_writes_what_order_writes(synth, tmp_path, extra):
    """The ordering link applies is order's, option for option (one pipeline)."""
    prof = synth["profile"]
    if extra[0] == "--combine":
        prof, _parts = _two_workloads(synth, tmp_path)
    for linker, fmt in (("lld", "lld"), ("gold", "gold")):
        out = tmp_path / f"order.{fmt}"
        run_cli("order", prof, "--format", fmt, "--objects-from", synth["map"], *extra, "-o", out, "--force",
                check=0)
        # link picks its algorithm by the readahead model unless told: tell it order's
        algo = () if "--algorithm" in extra else ("--algorithm", "first-access")
        keep = _link_order_file(prof, synth, tmp_path, linker, "--objects-from", synth["map"], *algo, *extra)
        assert keep.read_text() == out.read_text(), (linker, extra)
    if extra == ("--no-data",):  # gold's file names data sections unless told not to
        assert ".rodata" not in out.read_text()


def test_pipeline_result_is_typed_and_its_command_writes_the_same(synth, tmp_path):
    """pipeline.order returns the layout, header, text and report (no private keys);
    Request.argv (shown by the demo and benchmarks) is the CLI call writing the same files."""
    from elflayout.order import pipeline

    req = pipeline.Request(synth["profile"], "ld-script", lib=synth["lib"], objects_from=synth["map"],
                           algorithm="hot-last")
    o = pipeline.order(req)
    assert o.layout.functions and o.header.startswith("generated by elflayout order --format ld-script")
    assert o.text.startswith("/* generated by elflayout order") and o.target.path == str(synth["lib"])
    assert not [k for k in o.report if k.startswith("_")] and o.report["output"] == o.stats
    assert o.bind_now is False  # the library is lazily bound: its ld script puts data after .got.plt
    mine, cli_out = tmp_path / "mine.ld", tmp_path / "cli.ld"
    pipeline.order_files(req, mine)
    run_cli(*req.argv(cli_out), check=0)
    assert mine.read_text() == cli_out.read_text() == o.text
    req = pipeline.Request(synth["profile"], "lld", data=False, combine="concat", allow_stale_profile=True)
    assert req.argv("x")[-6:] == ["concat", "--no-data", "--allow-stale-profile", "-o", "x", "--force"]


def test_order_companions_write_nothing_when_one_fails(synth, tmp_path):
    """Everything is computed before anything is written: a --dynstr-out that cannot be
    made leaves no data script and no ordering behind."""
    doc = json.loads(synth["profile"].read_text())
    doc["targets"][0]["path"] = str(tmp_path / "gone.so")
    p = tmp_path / "p.json"
    p.write_text(json.dumps(doc))
    outs = [tmp_path / n for n in ("o.lld", "d.ld", "n.rsp")]
    r = run_cli("order", p, "--format", "lld", "--objects-from", synth["map"], "--data-script", outs[1],
                "--dynstr-out", outs[2], "-o", outs[0], check=2)
    assert "is not there" in r.stderr and not any(o.exists() for o in outs)
