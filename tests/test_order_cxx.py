"""C++ libraries ordered by lld, gold and GNU ld: the cases that made gold and GNU ld
lose to lld on a C++ runtime relinked from its PIC archive, each reproduced by a small
C++ library profiled with the valgrind tool (its lld link, whose map prints demangled
names), then linked by ``elflayout link`` with each linker; and what ``check-order``
says about each.

- a class with a virtual base: its complete (C1) and base (C2) constructors are two
  functions in two sections, called at different times;
- a cold ``noreturn`` function GCC puts whole in ``.text.unlikely.NAME``;
- an object built without -ffunction-sections (plain ``.text``), functions called in
  reverse address order, and another such object never called;
- a ``static`` function of the same name in two objects, called at different times.
"""

import json
import subprocess

import pytest

from conftest import need_tool, run_cli

LINKER_TOOL = {"lld": "ld.lld", "gold": "ld.gold", "bfd": "ld.bfd"}

CORE = r"""
#include <stdexcept>
struct Base { virtual ~Base(); int b = 1; };
Base::~Base() {}
struct Mid : virtual Base { Mid(); ~Mid() override; int m; };
Mid::Mid() : m(2) { __asm__ volatile("jmp 1f\n.skip 3000, 0x90\n1:"); }   // C1 and C2: two bodies
Mid::~Mid() {}
struct Leaf : Mid { Leaf(); };
Leaf::Leaf() {}                                                         // calls Mid's C2
[[noreturn]] __attribute__((cold, noinline)) void cx_fail(const char *what) { throw std::runtime_error(what); }
int a_entry(int); int b_entry(int); int p1(int); int p2(int); int p3(int); int p4(int);
__attribute__((noinline)) int step(int x) { __asm__ volatile("jmp 1f\n.skip 3000, 0x90\n1:"); return x + 1; }
extern "C" int cx_run(int x) {
  Leaf *l = new Leaf;
  x += a_entry(x) + step(x);
  x += p4(x) + p3(x) + p2(x) + p1(x);
  Mid *m = new Mid;
  x += b_entry(x) + l->m + m->m;
  try { if (x != 12345) cx_fail("expected"); } catch (const std::exception &) { x += 1; }
  delete l; delete m;
  return x;
}
"""
PLAIN = "".join(f'__attribute__((noinline)) int p{k}(int x) {{ __asm__ volatile("jmp 1f\\n.skip 2000, 0x90\\n1:"); '
                f'return x * {k}; }}\n' for k in (1, 2, 3, 4))
UNTOUCHED = 'int untouched(int x) { __asm__ volatile("jmp 1f\\n.skip 9000, 0x90\\n1:"); return x - 1; }\n'
LOCAL = ('static __attribute__((noinline)) int helper(int x) {{ __asm__ volatile("jmp 1f\\n.skip 2000, 0x90\\n1:"); '
         'return x + {k}; }}\nint {n}_entry(int x) {{ return helper(x); }}\n')
MAIN = 'extern "C" int cx_run(int);\nint main(int argc, char **) { return cx_run(argc) > 0 ? 0 : 1; }\n'
FS = ["-ffunction-sections", "-fdata-sections"]


def _need_firsttouch():
    from elflayout.profile.valgrind import tool_status

    why = tool_status()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def cx(tmp_path_factory):
    """The objects, the lld baseline with its map, and its valgrind profile."""
    need_tool("g++")
    need_tool("ld.lld")
    _need_firsttouch()
    wd = tmp_path_factory.mktemp("cx")
    srcs = {"core.cc": (CORE, FS), "plain.cc": (PLAIN, []), "untouched.cc": (UNTOUCHED, []),
            "la.cc": (LOCAL.format(k=1, n="a"), FS), "lb.cc": (LOCAL.format(k=2, n="b"), FS)}
    objs = []
    for name, (src, flags) in srcs.items():
        (wd / name).write_text(src)
        o = wd / name.replace(".cc", ".o")
        subprocess.run(["g++", "-O2", "-fPIC", *flags, "-c", str(wd / name), "-o", str(o)], check=True)
        objs.append(str(o))
    (wd / "main.cc").write_text(MAIN)
    base = wd / "base"
    base.mkdir()
    lib = base / "libcx.so"
    subprocess.run(["g++", "-shared", "-fuse-ld=lld", "-o", str(lib), *objs, f"-Wl,-Map={base / 'libcx.map'}"],
                   check=True)
    exe = wd / "cxmain"
    subprocess.run(["g++", "-o", str(exe), str(wd / "main.cc"), str(lib), "-Wl,-rpath,$ORIGIN/base"], check=True)
    prof = wd / "cx.profile.json"
    run_cli("profile", "--target", lib, "--map", base / "libcx.map", "-o", prof, "--", exe, check=0)
    return {"wd": wd, "objects": objs, "profile": prof, "base": lib, "exe": exe}


def _link(cx, tmp_path, linker, *extra, check=0):
    need_tool(LINKER_TOOL[linker])
    lib, lmap = tmp_path / "libcx.so", tmp_path / "libcx.map"
    # these tests are of one step: without --split, the plain .text stays as built
    extra = extra if "--split" in extra else ("--no-split", *extra)
    r = run_cli("link", *extra, "--profile", cx["profile"], "--linker", linker, "--keep-order-file",
                tmp_path / "order", "--", "g++", "-shared", f"-fuse-ld={linker}", "-o", lib, *cx["objects"], f"-Wl,-Map={lmap}", check=check)
    return lib, lmap, r


def _check(cx, lib, *extra):
    return json.loads(run_cli("check-order", lib, "--profile", cx["profile"], "--json", *extra, check=0).stdout)


def _addr(lib, name):
    out = subprocess.run(["nm", str(lib)], capture_output=True, text=True, check=True).stdout
    return [int(ln.split()[0], 16) for ln in out.splitlines() if ln.split()[-1] == name]


def _runs(cx, lib):
    r = subprocess.run([str(cx["exe"])], env={"LD_LIBRARY_PATH": str(lib.parent), "LD_BIND_NOW": "1"})
    return r.returncode == 0


@pytest.mark.valgrind
@pytest.mark.parametrize("linker", ["lld", "gold", "bfd"])
def test_split_link_puts_every_function_in_profile_order(cx, tmp_path, linker):
    """C1 apart from C2, the cold function in .text.unlikely.NAME, plain .text split, the
    two static helpers: all where the profile wants them, with every linker."""
    lib, lmap, r = _link(cx, tmp_path, linker, "--split")
    res = _check(cx, lib, "--map", lmap)
    assert res["in_order_fraction"] == 1.0, res["reasons"]
    assert res["missing"] == 0 and res["out_of_order"] == 0
    assert _runs(cx, lib)


@pytest.mark.valgrind
@pytest.mark.parametrize("linker", ["gold", "bfd"])
def test_complete_constructor_and_cold_function_are_named(cx, tmp_path, linker):
    """gold/GNU ld order by section: C1 must name its own section (not C2's, which an
    lld map's demangled names suggest), and a whole-cold function its .text.unlikely one."""
    _link(cx, tmp_path, linker, "--min-order", "0")
    names = (tmp_path / "order").read_text()
    assert "_ZN3MidC1Ev" in names and "_ZN3MidC2Ev" in names
    assert ".text.unlikely._Z7cx_failPKc" in names


@pytest.mark.valgrind
@pytest.mark.parametrize("linker", ["lld", "gold", "bfd"])
def test_plain_text_is_the_reason_without_split(cx, tmp_path, linker):
    """Without --split the plain .text object is out of order and link says why (exit 1)."""
    lib, lmap, r = _link(cx, tmp_path, linker, check=1)
    assert "shared-section" in r.stderr and "did not honour" in r.stderr
    if linker == "gold":  # told before linking that gold cannot name one object's .text
        assert "plain .text of 1 object (" in r.stderr and "plain.o" in r.stderr
    res = _check(cx, lib, "--map", lmap, "--ordering", tmp_path / "order")
    assert set(res["reasons"]) <= {"shared-section", "ambiguous-name"}, res["reasons"]
    shared = res["reasons"]["shared-section"]
    assert shared["count"] == 3 and list(shared["objects"]) == ["plain.o"]
    out_of_order = [r for r in res["landed"] if r["in_order"] is False]
    assert {r["name"] for r in out_of_order} <= {"_Z2p1i", "_Z2p2i", "_Z2p3i", "_Z2p4i"}
    assert all(r["input_section"] == ".text" and r["object"].endswith("plain.o") for r in out_of_order)
    text = run_cli("check-order", lib, "--profile", cx["profile"], "--map", lmap, "--where", check=0).stdout
    assert "shared-section" in text and "plain.o" in text and "_Z2p4i" in text


@pytest.mark.valgrind
def test_ld_script_moves_only_the_profiled_objects_plain_text(cx, tmp_path):
    """GNU ld: ``*(.text)`` would pull every object's plain .text into the ordered region;
    the script names the profiled object's (``*/plain.o(.text)``)."""
    lib, _lmap, _r = _link(cx, tmp_path, "bfd", "--min-order", "0")
    touched = max(_addr(lib, n)[0] for n in ("_Z2p1i", "_Z4stepi", "_Z7b_entryi", "_ZN3MidC1Ev"))
    assert _addr(lib, "_Z9untouchedi")[0] > touched
    assert "plain.o(.text)" in (tmp_path / "order").read_text()


@pytest.mark.valgrind
def test_ld_script_places_each_static_copy_at_its_own_rank(cx, tmp_path):
    """GNU ld: two objects' ``static helper`` share the section name .text._ZL6helperi;
    the script names each with its file, so lb.o's copy lands after Mid's C1, as profiled."""
    lib, lmap, _r = _link(cx, tmp_path, "bfd", "--min-order", "0")
    from elflayout.order.resolve import universe_from_linkmap

    u = universe_from_linkmap(lmap, lib)
    where = {(n, (o or "").rsplit("/", 1)[-1]): int(off) for n, o, off in
             zip(u.extent_names, u.extent_objects, u.extents["offset"].tolist())}
    assert where[(".text._ZL6helperi", "la.o")] < where[(".text._ZN3MidC1Ev", "core.o")] < \
        where[(".text._ZL6helperi", "lb.o")]


@pytest.mark.valgrind
def test_check_order_reasons_on_a_default_gnu_ld_link(cx, tmp_path):
    """An unordered GNU ld link: the cold function sits with .text.unlikely at the start of
    .text, the plain-.text functions in their object's order; check-order groups them."""
    need_tool("ld.bfd")
    lib, lmap = tmp_path / "libcx.so", tmp_path / "libcx.map"
    subprocess.run(["g++", "-shared", "-o", str(lib), *cx["objects"], f"-Wl,-Map={lmap}"], check=True)
    res = _check(cx, lib, "--map", lmap)
    assert res["reasons"]["shared-section"]["objects"] == {"plain.o": 3}
    rows = {r["name"]: r for r in res["landed"]}
    assert rows["_Z7cx_failPKc"]["reason"] == "prefixed-section" and not rows["_Z7cx_failPKc"]["in_order"]
    assert rows["_Z7cx_failPKc"]["input_section"] == ".text.unlikely._Z7cx_failPKc"
    assert rows["_Z7cx_failPKc"]["output_section"] == ".text"
    text = run_cli("check-order", lib, "--profile", cx["profile"], "--map", lmap, check=0).stdout
    assert "why:" in text and "prefixed-section" in text and "plain.o 3" in text


def test_lis_members_mark_one_longest_increasing_subsequence():
    import random

    from elflayout.order.check import lis_members

    rng = random.Random(5)
    for n in (0, 1, 2, 7, 50):
        seq = [rng.randrange(40) for _ in range(n)]
        keep = lis_members(seq)
        picked = [x for x, k in zip(seq, keep) if k]
        assert all(a < b for a, b in zip(picked, picked[1:]))
        # no longer strictly increasing subsequence exists (quadratic DP as reference)
        best = [1] * n
        for i in range(n):
            for j in range(i):
                if seq[j] < seq[i]:
                    best[i] = max(best[i], best[j] + 1)
        assert len(picked) == max(best, default=0)


def test_ld_file_patterns_are_always_wildcards():
    from elflayout.order.formats import ld_file_patterns

    assert ld_file_patterns("/x/libstdc++_pic.a(cp-demangle.o)") == ["*libstdc++_pic.a:cp-demangle.o"]
    assert ld_file_patterns("/tmp/b/plain.o") == ["*/plain.o", "[p]lain.o"]
    assert ld_file_patterns("/tmp/has space.o") == []
