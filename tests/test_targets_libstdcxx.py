"""libstdc++.so.6 relinked from Debian's libstdc++_pic.a (targets.libstdcxx)."""

import json
import subprocess

import pytest

from conftest import need_tool, run_cli

pytestmark = [pytest.mark.download, pytest.mark.slow]  # relinks libstdc++ from Debian's PIC archive


def test_relink_runs_the_workload_through_itself():
    need_tool("ld.lld")
    from elflayout.targets import libstdcxx

    d = libstdcxx.prepare("lld")
    maps = subprocess.run(["sh", "-c", f"LD_BIND_NOW=1 {d['launcher']} >/dev/null && ldd {d['launcher']}"],
                          capture_output=True, text=True, check=True).stdout
    assert str(d["lib"]) in maps
    assert "libstdc++_pic.a(cp-demangle.o):(.text)\n" in d["map"].read_text()  # the plain .text the order tests need


@pytest.fixture(scope="module")
def newuser_profile(tmp_path_factory):
    """The nostdlib-pic set-up's lld relink profiled as a new user first does: no --map."""
    need_tool("ld.lld")
    from elflayout.profile.valgrind import tool_status
    from elflayout.targets import libstdcxx

    why = tool_status()
    if why:
        pytest.skip(why)
    d = libstdcxx.prepare("lld", setup="nostdlib-pic")
    prof = tmp_path_factory.mktemp("newuser") / "cxxwords.profile.json"
    run_cli("profile", "--target", d["lib"], "-o", prof, "--", d["launcher"], check=0)
    return {"profile": prof, "launcher": d["launcher"]}


@pytest.mark.valgrind
@pytest.mark.parametrize("linker", ["lld", "gold", "bfd"])
def test_nostdlib_pic_link_honours_a_profile_without_map(newuser_profile, tmp_path, linker):
    """libstdc++ linked as its own build does (-nostdlib, crt files, version script):
    every placed function in profile order with each linker (gold and GNU ld: 82%,
    the constructors and static constructors unnamed, before the link's own map was used)."""
    need_tool({"lld": "ld.lld", "gold": "ld.gold", "bfd": "ld.bfd"}[linker])
    from elflayout.targets import libstdcxx

    cmd = libstdcxx.link_command(linker, tmp_path, setup="nostdlib-pic")
    run_cli("link", "--profile", newuser_profile["profile"], "--linker", linker, "--", *cmd, check=0)
    lib, lmap = tmp_path / libstdcxx.SONAME, tmp_path / f"{libstdcxx.SONAME}.map"
    res = json.loads(run_cli("check-order", lib, "--profile", newuser_profile["profile"], "--map", lmap, "--json",
                             check=0).stdout)
    assert res["in_order_fraction"] == 1.0 and res["out_of_order"] == 0, res["reasons"]
    assert res["placed"] >= 0.95 * res["profiled"]
    out = subprocess.run([str(newuser_profile["launcher"])], env={"LD_LIBRARY_PATH": str(tmp_path)},
                         capture_output=True, text=True, check=True).stdout
    assert out == libstdcxx.NEWUSER_EXPECTED


@pytest.mark.valgrind
@pytest.mark.parametrize("linker", ["bfd", "gold"])
def test_code_tail_and_readonly_data(tmp_path, linker):
    """bench_cxx's own set-up with GNU ld and gold: ``link`` relinks with the touched
    code's last read-around window after the cold code (GNU ld: 1 page of it spilled
    into a second 32-page read; gold: 335 -> 325 pages measured) and, with GNU ld, moves
    the read-only data before the code; the model predicts fewer pages, every placed
    function stays in profile order and the workload runs."""
    import re

    need_tool("ld.lld")
    need_tool({"bfd": "ld.bfd", "gold": "ld.gold"}[linker])
    from elflayout.profile.valgrind import tool_status
    from elflayout.targets import libstdcxx

    why = tool_status()
    if why:
        pytest.skip(why)
    base = libstdcxx.prepare("lld")
    prof = tmp_path / "cxxstart.profile.json"
    run_cli("profile", "--target", base["lib"], "--map", base["map"], "--data", "-o", prof, "--", base["launcher"],
            check=0)
    d = tmp_path / linker
    d.mkdir()
    r = run_cli("link", "--profile", prof, "--", *libstdcxx.link_command(linker, d), check=0)
    m = re.search(r"code tail: (\d+) functions after the cold code .*predicted: ([\d,]+) -> ([\d,]+) pages", r.stderr)
    assert m, r.stderr
    assert int(m.group(1)) > 0 and int(m.group(3).replace(",", "")) < int(m.group(2).replace(",", ""))
    assert linker == "gold" or "read-only data: before the code" in r.stderr
    res = json.loads(run_cli("check-order", d / libstdcxx.SONAME, "--profile", prof, "--map",
                             d / f"{libstdcxx.SONAME}.map", "--json", check=0).stdout)
    assert res["in_order_fraction"] >= 0.99, res["reasons"]
    out = subprocess.run([str(base["launcher"])], env={"LD_LIBRARY_PATH": str(d)}, capture_output=True,
                         text=True, check=True).stdout
    assert out == libstdcxx.EXPECTED
