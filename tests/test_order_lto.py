"""Profiles of one build applied to an LTO build of the same sources.

LTO renames local functions (GCC ``foo.lto_priv.0``, ThinLTO ``foo.llvm.<hash>``) and
inlines others away, so an ordering made from a profile of the build without LTO names
functions the LTO link does not have: ``link`` and ``check-order`` must count them and
fail naming them (profile the LTO build), never report the order as honoured.
"""

import json
import subprocess

import pytest

from conftest import need_tool, run_cli
import order_testlib as testlib
from elflayout.order.check import _by_clone_base, _candidates
from elflayout.order.resolve import Universe, resolve, suffix_matches


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    need_tool("gcc")
    return testlib.build_profiled(tmp_path_factory.mktemp("synth"), n_objects=6, funcs_per_object=8, seed=3)


class _E:
    def __init__(self, name, obj=None):
        self.name, self.object, self.first, self.section = name, obj, 0, None


def test_suffix_matching():
    assert suffix_matches("foo", ["foo.llvm.8821", "foo.cold", "foo.part.0"]) == ["foo.llvm.8821"]
    assert suffix_matches("foo", ["foo.lto_priv.0", "foo.constprop.0"]) == ["foo.lto_priv.0", "foo.constprop.0"]
    assert suffix_matches("foo.part.0", ["foo.part.0.lto_priv.1", "foo.lto_priv.0"]) == ["foo.part.0.lto_priv.1"]
    assert suffix_matches("foo.isra.0", ["foo.isra.0.llvm.5", "foo.isra.1"]) == ["foo.isra.0.llvm.5"]
    u = Universe(symbols={"bar.llvm.123": [(".text.bar.llvm.123", "a.o")], "dup.lto_priv.0": [(".text.x", "a.o")],
                          "dup.lto_priv.1": [(".text.y", "b.o")], "baz.cold": [(".text.unlikely.baz", "c.o")]})
    res, rep = resolve([_E("bar"), _E("dup"), _E("baz")], u)
    assert [(r.how, r.link_name) for r in res] == [("suffix", "bar.llvm.123"), ("ambiguous-suffix", None),
                                                   ("missing", None)]
    assert rep["examples"]["ambiguous-suffix"] == ["dup"] and rep["matched"] == 1
    funcs = {"bar.llvm.123": [(100, 10)], "dup.lto_priv.0": [(200, 10)], "dup.lto_priv.1": [(300, 10)]}
    base = _by_clone_base(funcs)
    assert _candidates("bar", funcs, base) == ([(100, 10)], "suffix")
    assert _candidates("dup", funcs, base) == ([(200, 10), (300, 10)], "suffix")


def _lto_objects(d, tmp_path, cc, flags):
    out = []
    for o in d["objects"]:
        n = tmp_path / f"lto-{o.name}"
        subprocess.run([cc, *flags, "-c", str(o.with_suffix(".c")), "-o", str(n)], check=True)
        out.append(str(n))
    return out


LTO = {
    # GCC LTO, a partition per function: every static function is renamed foo.lto_priv.N
    "gcc-bfd": ("gcc", [*testlib.CFLAGS, "-flto"], ["gcc", "-flto", "-flto-partition=max", "-O1", "-ffunction-sections",
                                   "-fuse-ld=bfd"]),
    "gcc-gold": ("gcc", [*testlib.CFLAGS, "-flto"], ["gcc", "-flto", "-flto-partition=max", "-O1", "-ffunction-sections",
                                    "-fuse-ld=gold"]),
    # ThinLTO with lld 22: the static helpers are inlined away
    "thin-lld22": ("clang-22", ["-O1", "-fPIC", "-ffunction-sections", "-fdata-sections", "-flto=thin"], ["clang-22", "-flto=thin", "-O1", "-fuse-ld=lld-22"]),
}


@pytest.mark.parametrize("variant", sorted(LTO))
def test_profile_of_the_build_without_lto_is_not_reported_as_honoured(synth, tmp_path, variant):
    cc, cflags, link = LTO[variant]
    need_tool(cc)
    need_tool({"gcc-bfd": "ld.bfd", "gcc-gold": "ld.gold", "thin-lld22": "ld.lld-22"}[variant])
    objs = _lto_objects(synth, tmp_path, cc, cflags)
    lib = tmp_path / "libsynth.so"
    r = run_cli("link", "--profile", synth["profile"], "--", *link, "-shared", "-o", lib, *objs, check=1)
    last = r.stderr.strip().splitlines()[-1]
    assert "Profile the library as built (the LTO build itself)" in last and "helper" in last, r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("check-order", lib, "--profile", synth["profile"], "--json", check=1)
    res = json.loads(r.stdout)
    assert res["stale_hot"] and res["renamed"] + res["missing"] >= 6
    if res["missing"]:  # inlined away: counted in the in-order figure
        assert res["in_order_fraction"] <= res["placed"] / (res["placed"] + res["missing"])
    assert "helper" in r.stderr


def test_profile_of_the_same_build_is_not_stale(synth):
    res = json.loads(run_cli("check-order", synth["lib"], "--profile", synth["profile"], "--json", check=0).stdout)
    assert res["stale_hot"] is None and res["unplaced_counted"] == 0 and res["renamed"] == 0


def test_held_out_on_a_relink_places_the_training_profile_by_name(synth, tmp_path):
    """check-order RELINK --profile P(RELINK) --trained-on P(original build): the training
    profile's functions are found by name in the relink (its offsets are of the other
    build), and the prediction is simulate's for the same profile."""
    need_tool("ld.lld")
    lib = tmp_path / "libsynth.so"
    run_cli("link", "--profile", synth["profile"], "--", "gcc", "-shared", "-fuse-ld=lld", "-o", lib,
            *map(str, synth["objects"]), check=0)
    held = tmp_path / "held.json"
    held.write_text(json.dumps(testlib.truth_profile(lib, synth["truth"])))
    res = json.loads(run_cli("check-order", lib, "--profile", held, "--trained-on", synth["profile"], "--json",
                             "--read-ahead-kb", "16", check=0).stdout)
    sim = json.loads(run_cli("simulate", held, "--lib", lib, "--read-ahead-kb", "16", "--json", check=0).stdout)
    assert res["in_hot_fraction"] == 1.0 and res["cold_functions"] == 0
    assert res["predicted_pages"] == sim["pages"]


def _lib_with_renamed(tmp_path, order):
    """A library whose function ``b`` is named ``b.llvm.77`` (as ThinLTO renames a promoted
    local), the functions in ``order``; and a profile a, b, c of another build."""
    bodies = {"a": "int a(int x) { return x + 1; }", "c": "int c(int x) { return x + 3; }",
              "b": 'int b_(int x) __asm__("b.llvm.77"); int b_(int x) { return x + 2; }'}
    src = tmp_path / "r.c"
    src.write_text("\n".join(bodies[n] for n in order) + "\n")
    lib = tmp_path / "libr.so"
    subprocess.run(["gcc", "-O1", "-fPIC", "-shared", "-fno-reorder-functions", "-o", str(lib), str(src)], check=True)
    prof = {"format": "elflayout-profile", "version": 1,
            "metadata": {"argv": ["x"], "backend": "truth", "granularity": "function", "kernel": "",
                         "read_ahead_kb": None, "started": "", "duration_s": 0.0, "exit_status": 0, "notes": ""},
            "targets": [{"path": "/elsewhere/libr.so", "build_id": "00" * 20, "sha256": None, "size": 1, "map": None,
                         "functions": [{"name": n, "offset": 0, "size": 4, "first": i} for i, n in enumerate("abc")],
                         "sections": [], "objects": [], "pages": [], "reads": []}]}
    p = tmp_path / "p.json"
    p.write_text(json.dumps(prof))
    return lib, p


def test_renamed_function_placed_in_order_is_not_lost(tmp_path):
    """An ordering that named the LTO name (e.g. from the map of an earlier LTO link) placed
    the renamed function: in order, not counted against the profile."""
    lib, p = _lib_with_renamed(tmp_path, "abc")
    res = json.loads(run_cli("check-order", lib, "--profile", p, "--json", check=0).stdout)
    assert res["renamed"] == 1 and res["renamed_lost"] == 0 and res["stale_hot"] is None
    assert res["in_order_fraction"] == 1.0 and res["matched_by"]["suffix"] == 1
    lib, p = _lib_with_renamed(tmp_path, "acb")
    r = run_cli("check-order", lib, "--profile", p, "--json", check=1)
    res = json.loads(r.stdout)
    assert res["renamed_lost"] == 1 and "1 renamed, 0 missing: b" in res["stale_hot"]
    assert {x["name"]: x["reason"] for x in res["landed"]}["b"] == "renamed"
