"""``elflayout link --split``: objects built without -ffunction-sections are split in a
temporary directory and linked in profile order by lld, gold and GNU ld."""

import json
import subprocess

import pytest

from conftest import need_tool, run_cli
import order_testlib as testlib


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The synthetic library's objects rebuilt without function sections, and its profile."""
    need_tool("gcc")
    wd = tmp_path_factory.mktemp("plain")
    d = testlib.build_profiled(wd, n_objects=6, funcs_per_object=8, seed=3)
    objs = []
    for o in d["objects"]:  # obj0..5.o and entry.o
        n = wd / "plain" / o.name
        n.parent.mkdir(exist_ok=True)
        flags = [f for f in testlib.CFLAGS if f not in ("-ffunction-sections", "-fdata-sections")]
        subprocess.run(["gcc", *flags, "-c", str(o.with_suffix(".c")), "-o", str(n)], check=True)
        objs.append(str(n))
    return {"profile": d["profile"], "objects": objs, "driver": d["driver"]}


@pytest.mark.parametrize("linker", ["lld", "gold", "bfd"])
def test_link_split_honours_function_order(plain, tmp_path, linker):
    need_tool({"lld": "ld.lld", "gold": "ld.gold", "bfd": "ld.bfd"}[linker])
    lib = tmp_path / "libsynth.so"
    r = run_cli("link", "--split", "--profile", plain["profile"], "--linker", linker, "--",
                "gcc", "-shared", f"-fuse-ld={linker}", "-o", lib, *plain["objects"], check=0)
    assert "split 7 objects and archives" in r.stderr
    res = json.loads(run_cli("check-order", lib, "--profile", plain["profile"], "--json", check=0).stdout)
    assert res["in_order_fraction"] == 1.0


def test_link_without_split_is_not_honoured(plain, tmp_path):
    need_tool("ld.lld")
    r = run_cli("link", "--no-split", "--profile", plain["profile"], "--linker", "lld", "--",
                "gcc", "-shared", "-fuse-ld=lld", "-o", tmp_path / "l.so", *plain["objects"])
    assert r.returncode == 1 and "did not honour the ordering" in r.stderr


def test_link_split_refused_for_object_order(plain, tmp_path):
    r = run_cli("link", "--split", "--profile", plain["profile"], "--linker", "mold", "--",
                "gcc", "-shared", "-fuse-ld=mold", "-o", tmp_path / "l.so", *plain["objects"], check=2)
    assert "changes nothing" in r.stderr


def test_link_split_of_debug_objects_says_why_not(plain, tmp_path):
    """Objects whose debug information split cannot rewrite (DWARF 3) stay whole: link
    --split names the reason, and the failed
    order check does not tell the user to run the command just run."""
    need_tool("ld.lld")
    objs = []
    for o in plain["objects"]:
        g = tmp_path / ("g-" + o.rsplit("/", 1)[1])
        flags = [f for f in testlib.CFLAGS if f not in ("-ffunction-sections", "-fdata-sections")]
        src = o.replace("/plain/", "/").rsplit(".", 1)[0] + ".c"
        subprocess.run(["gcc", *flags, "-gdwarf-3", "-c", src, "-o", str(g)], check=True)
        objs.append(str(g))
    r = run_cli("link", "--split", "--profile", plain["profile"], "--linker", "lld", "--",
                "gcc", "-shared", "-fuse-ld=lld", "-o", tmp_path / "l.so", *objs)
    assert r.returncode == 1
    assert "split kept .text whole in 7 objects" in r.stderr and "DWARF version 3" in r.stderr, r.stderr
    assert "Split it: elflayout link --split" not in r.stderr
    assert "kept these sections whole" in r.stderr
