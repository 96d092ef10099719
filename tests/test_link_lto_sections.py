"""GCC LTO generates the code at link time: its functions get sections of their own only
when the link command says -ffunction-sections. ``link`` adds it to a gcc driver command
linking GCC LTO bytecode (with a step line saying why), and refuses a direct linker call
with the fix, rather than link one .text no order can move."""

import json
import subprocess

import pytest

from conftest import need_tool, run_cli
import order_testlib as testlib

NO_SECTIONS = [f for f in testlib.CFLAGS if f not in ("-ffunction-sections", "-fdata-sections")]


@pytest.fixture(scope="module")
def lto(tmp_path_factory):
    """GCC LTO objects (compiled without -ffunction-sections) and a profile of their own
    LTO link (linked with it, so every function has a place to be found)."""
    need_tool("gcc")
    wd = tmp_path_factory.mktemp("lto")
    d = testlib.build(wd, n_objects=4, funcs_per_object=6, seed=5)
    objs = []
    for o in d["objects"]:
        n = wd / f"lto-{o.name}"
        subprocess.run(["gcc", *NO_SECTIONS, "-flto", "-c", str(o.with_suffix(".c")), "-o", str(n)], check=True)
        objs.append(str(n))
    lib = wd / "libprofiled.so"
    subprocess.run(["gcc", "-flto", "-O1", "-ffunction-sections", "-shared", "-o", str(lib), *objs], check=True)
    prof = wd / "p.json"
    prof.write_text(json.dumps(testlib.truth_profile(lib, d["truth"])))
    return {"objs": objs, "profile": prof}


def test_gcc_lto_link_gets_function_sections(lto, tmp_path):
    """Was: linked as given, every function in one .text: the order check failed (exit 1)."""
    lib = tmp_path / "libsynth.so"
    r = run_cli("link", "--profile", lto["profile"], "--", "gcc", "-flto", "-O1", "-shared", "-o", lib,
                *lto["objs"], check=0)
    out = r.stdout + r.stderr
    assert "LTO sections: -ffunction-sections (added: 5 inputs hold GCC LTO bytecode" in out, out
    res = json.loads(run_cli("check-order", lib, "--profile", lto["profile"], "--json", check=0).stdout)
    assert res["in_order_fraction"] == 1.0, res


def test_command_with_the_flag_is_left_alone(lto, tmp_path):
    lib = tmp_path / "libsynth.so"
    r = run_cli("link", "--profile", lto["profile"], "--", "gcc", "-flto", "-O1", "-ffunction-sections", "-shared",
                "-o", lib, *lto["objs"], check=0)
    assert "LTO sections" not in r.stdout + r.stderr


def test_direct_linker_call_on_gcc_lto_bytecode_refused(lto, tmp_path):
    need_tool("ld.bfd")
    lib = tmp_path / "libsynth.so"
    r = run_cli("link", "--profile", lto["profile"], "--", "ld.bfd", "-shared", "-o", lib, *lto["objs"], check=2)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "GCC LTO bytecode" in lines[0] and "-flto -ffunction-sections" in lines[0], r.stderr
    assert not lib.exists()
