"""libstdc++.so.6 relinked from Debian's libstdc++_pic.a (targets.libstdcxx)."""

import subprocess

import pytest

from conftest import need_tool

pytestmark = [pytest.mark.download, pytest.mark.slow]  # relinks libstdc++ from Debian's PIC archive


def test_relink_runs_the_workload_through_itself():
    need_tool("ld.lld")
    from elflayout.targets import libstdcxx

    d = libstdcxx.prepare("lld")
    maps = subprocess.run(["sh", "-c", f"LD_BIND_NOW=1 {d['launcher']} >/dev/null && ldd {d['launcher']}"],
                          capture_output=True, text=True, check=True).stdout
    assert str(d["lib"]) in maps
    assert "libstdc++_pic.a(cp-demangle.o):(.text)\n" in d["map"].read_text()  # the plain .text the order tests need
