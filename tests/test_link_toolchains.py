"""``elflayout link`` with the toolchains Debian installs side by side: versioned lld
(``ld.lld-N``, ``clang -fuse-ld=lld-N``, ``--ld-path=``), gold, GNU ld and mold called
directly or through a driver. The command's own choice of linker is kept: elflayout adds
no ``-fuse-ld`` of its own, and infers ``--linker`` from the command when not given.
"""

import json
import shutil
import subprocess

import pytest

from conftest import need_tool, run_cli
import order_testlib as testlib
from elflayout.toolchain import chosen_linker, command_linker, fuse_ld_linker

LLD_VERSIONS = (14, 16, 19, 22)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    need_tool("gcc")
    return testlib.build_profiled(tmp_path_factory.mktemp("synth"), n_objects=4, funcs_per_object=6, seed=5)


def _objs(d):
    return [str(o) for o in d["objects"]]


def _linked_by(lib) -> str:
    """The ``Linker:`` line lld writes into ``.comment`` (e.g. "Debian LLD 19.1.7")."""
    out = subprocess.run(["readelf", "-p", ".comment", str(lib)], capture_output=True, text=True).stdout
    return next((ln.split("Linker:", 1)[1].strip() for ln in out.splitlines() if "Linker:" in ln), "")


def _in_order(lib, profile) -> float:
    return json.loads(run_cli("check-order", lib, "--profile", profile, "--json", check=0).stdout)["in_order_fraction"]


@pytest.mark.parametrize("program,linker", [
    ("ld.lld-22", "lld"), ("/usr/bin/ld.lld-14", "lld"), ("lld-19", "lld"), ("ld.lld", "lld"), ("ld.gold", "gold"),
    ("ld.bfd", "bfd"), ("ld", "bfd"), ("mold", "mold"), ("ld.mold", "mold"), ("x86_64-linux-gnu-ld.bfd", "bfd"),
    ("gcc", None), ("gcc-12", None), ("clang-22", None), ("x86_64-linux-gnu-gcc-12", None), ("ldd", None)])
def test_command_linker_names(program, linker):
    assert command_linker(program) == linker


@pytest.mark.parametrize("cmd,want", [
    (["clang-22", "-fuse-ld=lld-22"], ("lld", "-fuse-ld=lld-22", True)),
    (["clang-22", "-fuse-ld=/usr/lib/llvm-19/bin/ld.lld"], ("lld", "-fuse-ld=/usr/lib/llvm-19/bin/ld.lld", True)),
    (["clang-22", "-fuse-ld=bfd", "--ld-path=/usr/bin/ld.lld-16"], ("lld", "--ld-path=/usr/bin/ld.lld-16", True)),
    (["gcc-12", "-fuse-ld=gold", "-fuse-ld=mold"], ("mold", "-fuse-ld=mold", True)),
    (["gcc-12", "-shared"], (None, None, True)),
    (["ld.lld-19", "-shared"], ("lld", None, False))])
def test_chosen_linker(cmd, want):
    assert chosen_linker(cmd) == want
    assert fuse_ld_linker("ld") == "bfd" and fuse_ld_linker("nosuch") is None


@pytest.mark.parametrize("version", LLD_VERSIONS)
@pytest.mark.parametrize("how", ["direct", "fuse-ld", "fuse-ld-path", "ld-path"])
def test_versioned_lld(synth, tmp_path, version, how):
    """Each lld version, called directly or chosen by clang-22's options: the command runs
    as given (no -fuse-ld added; a direct call gets no -Wl,) and --linker is inferred."""
    need_tool(f"ld.lld-{version}")
    lld = shutil.which(f"ld.lld-{version}")
    lib = tmp_path / "libsynth.so"
    if how == "direct":
        cmd = [f"ld.lld-{version}", "-shared", "-o", lib, *_objs(synth)]
    else:
        need_tool("clang-22")
        choose = {"fuse-ld": f"-fuse-ld=lld-{version}", "fuse-ld-path": f"-fuse-ld={lld}",
                  "ld-path": f"--ld-path={lld}"}[how]
        cmd = ["clang-22", "-shared", choose, "-o", lib, *_objs(synth)]
    r = run_cli("link", "--profile", synth["profile"], "--", *cmd, check=0)
    assert "applying lld ordering for lld" in r.stderr
    shown = next(ln for ln in r.stderr.splitlines() if "--symbol-ordering-file" in ln)
    assert "-fuse-ld=lld " not in shown + " " and ("-Wl," in shown) == (how != "direct")
    assert _linked_by(lib).startswith("Debian LLD " + str(version)), _linked_by(lib)
    assert _in_order(lib, synth["profile"]) == 1.0


@pytest.mark.parametrize("linker,cmd", [("gold", ["ld.gold"]), ("bfd", ["ld.bfd"]), ("mold", ["mold"]),
                                        ("gold", ["gcc-12", "-fuse-ld=gold"]), ("bfd", ["gcc-12"])])
def test_other_linkers_inferred(synth, tmp_path, linker, cmd):
    need_tool({"gold": "ld.gold", "bfd": "ld.bfd", "mold": "mold"}[linker])
    need_tool(cmd[0])
    lib = tmp_path / "libsynth.so"
    r = run_cli("link", "--profile", synth["profile"], "--", *cmd, "-shared", "-o", lib, *_objs(synth), check=0)
    assert f"ordering for {linker}" in r.stderr and "-fuse-ld" not in r.stderr.replace(" ".join(cmd), "")
    if linker != "mold":
        assert _in_order(lib, synth["profile"]) == 1.0


def test_driver_choosing_no_linker_is_refused_with_the_fix(synth, tmp_path):
    """A driver command without -fuse-ld runs ld: --linker lld is refused (exit 2, nothing
    linked or written), not turned into a -fuse-ld=lld the user did not ask for."""
    lib, keep = tmp_path / "l.so", tmp_path / "order.txt"
    r = run_cli("link", "--profile", synth["profile"], "--linker", "lld", "--keep-order-file", keep, "--",
                "gcc-12", "-shared", "-o", lib, *_objs(synth), check=2)
    assert "chooses no linker" in r.stderr and "add -fuse-ld=lld" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not lib.exists() and not keep.exists()


def test_driver_and_linker_disagree(synth, tmp_path):
    r = run_cli("link", "--profile", synth["profile"], "--linker", "gold", "--",
                "clang-22", "-fuse-ld=lld-22", "-shared", "-o", tmp_path / "l.so", *_objs(synth), check=2)
    assert "-fuse-ld=lld-22: the command links with lld but --linker says gold" in r.stderr


@pytest.mark.parametrize("args", [["--linker", "ld.foo", "--", "gcc", "-shared", "-o", "OUT", "x.o"],
                                  ["--linker", "foo", "--", "gcc", "-shared", "-o", "OUT", "x.o"],
                                  ["--", "gcc", "-fuse-ld=foo", "-shared", "-o", "OUT", "x.o"],
                                  ["--", "clang-22", "--ld-path=/opt/ld.nosuch", "-shared", "-o", "OUT", "x.o"]])
def test_unknown_linker_name(synth, tmp_path, args):
    keep, out = tmp_path / "order.txt", tmp_path / "l.so"
    args = [str(out) if a == "OUT" else a for a in args]
    r = run_cli("link", "--profile", synth["profile"], "--keep-order-file", keep, *args, check=2)
    assert len(r.stderr.strip().splitlines()) == 1 and "unknown linker" in r.stderr and "Traceback" not in r.stderr
    assert not keep.exists() and not out.exists()
