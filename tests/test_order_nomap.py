"""gold and GNU ld ordering a C++ library from a profile recorded without ``--map``.

gold and GNU ld order input sections by name. A profile without the profiled build's
map knows function names only, and ``.text.NAME`` is wrong for the code a C++ library
starts with: a complete-object constructor (``C1``) is an alias in its base-object
constructor's section (``.text._ZN3RegC2Ev``), a static constructor is in
``.text.startup._GLOBAL__sub_I_FILE``. ``elflayout link`` then links once for the map.
A gold map lists global symbols only, demangled: the cold part of a function in
``.text.unlikely.NAME`` (no symbol listed) is not the function.
"""

import json
import subprocess

import pytest

from conftest import need_tool, run_cli

LINKER_TOOL = {"gold": "ld.gold", "bfd": "ld.bfd"}
PAD = '__asm__ volatile("jmp 1f\\n.skip 3000, 0x90\\n1:");'
# Reg has no virtual base: GCC emits C1 as an alias of C2; the static ``reg`` gives
# _GLOBAL__sub_I_reg.cc in .text.startup; Reg::Reg has a cold part (.text.unlikely.)
REG = f"""
#include <cstdio>
struct Reg {{ Reg(); int n; }};
__attribute__((cold, noinline)) void nm_boom(int x) {{ std::printf("boom %d\\n", x); }}
Reg::Reg() : n(1) {{
  {PAD}
  if (__builtin_expect(n == 12345, 0)) {{ nm_boom(n); nm_boom(n + 1); }}
}}
static Reg reg;
int nm_first(int x);
__attribute__((noinline)) int nm_later(int x) {{ {PAD} return x + 2; }}
extern "C" int nm_run(int x) {{ Reg *r = new Reg; x += nm_later(x) + nm_first(x) + r->n + reg.n; delete r; return x; }}
"""
FIRST = f"__attribute__((noinline)) int nm_first(int x) {{ {PAD} return x * 3; }}\n"
MAIN = 'extern "C" int nm_run(int);\nint main(int argc, char **) { return nm_run(argc) > 0 ? 0 : 1; }\n'
FS = ["-O2", "-fPIC", "-ffunction-sections"]


def _objects(wd):
    objs = []
    for name, src in (("reg.cc", REG), ("first.cc", FIRST)):
        (wd / name).write_text(src)
        o = wd / name.replace(".cc", ".o")
        subprocess.run(["g++", *FS, "-c", str(wd / name), "-o", str(o)], check=True)
        objs.append(str(o))
    return objs


def test_gold_map_cold_part_is_not_the_function(tmp_path):
    """A gold map lists ``Reg::Reg()`` demangled in .text._ZN3RegC2Ev and nothing in
    .text.unlikely._ZN3RegC2Ev: the mangled name resolves to the former (was the cold part)."""
    need_tool("g++")
    need_tool("ld.gold")
    from elflayout.order.resolve import _resolve_one, universe_from_linkmap

    objs = _objects(tmp_path)
    lmap = tmp_path / "libnm.map"
    subprocess.run(["g++", "-shared", "-fuse-ld=gold", "-o", str(tmp_path / "libnm.so"), *objs, f"-Wl,-Map={lmap}"],
                   check=True)
    u = universe_from_linkmap(lmap)
    for name in ("_ZN3RegC2Ev", "_ZN3RegC1Ev"):
        assert _resolve_one(name, None, u).sections == [".text._ZN3RegC2Ev"], name
    assert _resolve_one("_ZN3RegC2Ev.cold", None, u).sections == [".text.unlikely._ZN3RegC2Ev"]
    assert _resolve_one("_GLOBAL__sub_I_reg.cc", None, u).sections == [".text.startup._GLOBAL__sub_I_reg.cc"]


@pytest.fixture(scope="module")
def nm(tmp_path_factory):
    """The objects, their lld link and its valgrind profile recorded without --map."""
    from elflayout.profile.valgrind import tool_status

    need_tool("g++")
    need_tool("ld.lld")
    why = tool_status()
    if why:
        pytest.skip(why)
    wd = tmp_path_factory.mktemp("nm")
    objs = _objects(wd)
    base = wd / "base"
    base.mkdir()
    lib = base / "libnm.so"
    subprocess.run(["g++", "-shared", "-fuse-ld=lld", "-o", str(lib), *objs], check=True)
    (wd / "main.cc").write_text(MAIN)
    exe = wd / "nmmain"
    subprocess.run(["g++", "-o", str(exe), str(wd / "main.cc"), str(lib), "-Wl,-rpath,$ORIGIN/base"], check=True)
    prof = wd / "nm.profile.json"
    run_cli("profile", "--target", lib, "-o", prof, "--", exe, check=0)
    names = {f["name"] for f in json.loads(prof.read_text())["targets"][0]["functions"]}
    assert {"_ZN3RegC1Ev", "_GLOBAL__sub_I_reg.cc", "_Z8nm_firsti"} <= names or \
        {"_ZN3RegC2Ev", "_GLOBAL__sub_I_reg.cc", "_Z8nm_firsti"} <= names, names
    return {"objects": objs, "profile": prof}


@pytest.mark.valgrind
@pytest.mark.parametrize("linker", ["gold", "bfd"])
def test_link_without_profile_map_names_constructors_and_startup_code(nm, tmp_path, linker):
    """Every profiled function in profile order (was: the constructor and the static
    constructor unnamed, the link refused below 90%)."""
    need_tool(LINKER_TOOL[linker])
    lib, lmap, order = tmp_path / "libnm.so", tmp_path / "libnm.map", tmp_path / "order"
    r = run_cli("link", "--profile", nm["profile"], "--linker", linker, "--keep-order-file", order, "--",
                "g++", "-shared", f"-fuse-ld={linker}", "-o", lib, *nm["objects"], f"-Wl,-Map={lmap}", check=0)
    assert "the profile has no link map" in r.stderr
    text = order.read_text()
    assert "_ZN3RegC2Ev" in text and ".text.startup._GLOBAL__sub_I_reg.cc" in text
    assert ".text.unlikely._ZN3RegC2Ev" not in text  # the cold part is not profiled
    res = json.loads(run_cli("check-order", lib, "--profile", nm["profile"], "--map", lmap, "--json", check=0).stdout)
    assert res["in_order_fraction"] == 1.0 and res["out_of_order"] == 0, res["reasons"]


@pytest.mark.valgrind
def test_link_keeps_readonly_data_with_the_dynamic_tables(nm, tmp_path):
    """``link``'s default for GNU ld: .rodata and the unwind tables in the read-only
    segment of the dynamic tables, as lld places them (was: after the code); the
    library still runs."""
    from test_order_rodata import assert_readonly_with_tables

    need_tool("ld.bfd")
    lib = tmp_path / "libnm.so"
    r = run_cli("link", "--profile", nm["profile"], "--linker", "bfd", "--",
                "g++", "-shared", "-fuse-ld=bfd", "-o", lib, *nm["objects"], check=0)
    assert "read-only data: before the code" in r.stderr
    assert_readonly_with_tables(lib)
    (tmp_path / "main.cc").write_text(MAIN)
    exe = tmp_path / "nmmain"
    subprocess.run(["g++", "-o", str(exe), str(tmp_path / "main.cc"), str(lib), f"-Wl,-rpath,{tmp_path}"], check=True)
    subprocess.run([str(exe)], check=True)
