"""pack-relocs on real libraries: libLLVM-16 (123 MB, 387,631 RELATIVE relocations), relinked libpython.

The table sizes packing gives Debian's libLLVM-16, a passing --check, and llc-16 / opt-16 producing
byte-identical output through the packed library (LD_LIBRARY_PATH).
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli

LIB = Path("/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1")
pytestmark = pytest.mark.slow

IR = """
target triple = "x86_64-pc-linux-gnu"
@table = internal constant [4 x ptr] [ptr @f0, ptr @f1, ptr @f0, ptr @f1]
define internal i64 @f0(i64 %x) { %r = add i64 %x, 3 ret i64 %r }
define internal i64 @f1(i64 %x) { %r = mul i64 %x, 5 ret i64 %r }
define i64 @sum(ptr %a, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %s = phi i64 [ 0, %entry ], [ %s1, %loop ]
  %p = getelementptr i64, ptr %a, i64 %i
  %v = load i64, ptr %p
  %k = and i64 %i, 3
  %fp = getelementptr [4 x ptr], ptr @table, i64 0, i64 %k
  %f = load ptr, ptr %fp
  %w = call i64 %f(i64 %v)
  %s1 = add i64 %s, %w
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, %n
  br i1 %c, label %loop, label %exit
exit:
  ret i64 %s1
}
"""


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    if not LIB.exists() or shutil.which("llc-16") is None:
        pytest.skip("libLLVM-16 / llc-16 not installed (apt-get install llvm-16)")
    d = tmp_path_factory.mktemp("llvm-packed")
    out = d / LIB.name
    r = run_cli("pack-relocs", LIB, "-o", out, "--check", "--json", check=0)
    return out, json.loads(r.stdout)


def test_libllvm_figures(packed):
    out, st = packed
    assert st["relative"] == st["packed"] == 387_631
    assert st["relr_bytes"] == 144_392
    assert st["rela_dyn_bytes_before"] == 9_780_864
    assert st["rela_dyn_bytes_after"] == 477_720
    assert st["check"]["equal"] and st["check"]["dlopen"] == "ok"
    assert st["check"]["relocations"]["output"]["relr"] == 387_631
    assert st["version_need"].startswith("added under libc.so.6")
    assert st["dynamic"] == "spare DT_NULL slots"  # gold-linked: no .dynamic move needed
    assert out.stat().st_size < LIB.stat().st_size + 4096


def _run(cmd, libdir=None, stdin=None):
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    if libdir:
        env["LD_LIBRARY_PATH"] = str(libdir)
        env["LD_DEBUG"] = "libs"  # prove the packed copy was the one loaded
    r = subprocess.run(cmd, capture_output=True, input=stdin, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r


@pytest.mark.parametrize("cmd", [
    ["llc-16", "--version"],
    ["llc-16", "-O2", "-o", "-", "{ll}"],
    ["opt-16", "-O2", "-S", "{ll}"],
    ["llc-16", "-O0", "-filetype=obj", "-o", "-", "{ll}"],
])
def test_llvm_tools_identical_through_packed_lib(packed, tmp_path, cmd):
    out, _ = packed
    ll = tmp_path / "t.ll"
    ll.write_text(IR)
    argv = [a.format(ll=ll) for a in cmd]
    want = _run(argv)
    got = _run(argv, libdir=out.parent)
    assert f"calling init: {out}".encode() in got.stderr  # the packed libLLVM really was used
    assert got.stdout == want.stdout and len(want.stdout) > 50


@pytest.mark.download
@pytest.mark.parametrize("linker", ["bfd", "lld"])
def test_libpython_relinked_packed_runs_identically(tmp_path, linker):
    """libpython3.11 relinked by the targets helper (GNU ld: spare slots; lld: moved .dynamic)."""
    libpython = pytest.importorskip("elflayout.targets.libpython")
    d = libpython.prepare(linker=linker)
    lib, launcher = Path(d["lib"]), Path(d["launcher"])
    pdir = tmp_path / "packed"
    pdir.mkdir()
    st = json.loads(run_cli("pack-relocs", lib, "-o", pdir / lib.name, "--check", "--json", check=0).stdout)
    assert st["check"]["equal"] and st["check"]["dlopen"] == "ok" and st["packed"] > 20_000
    shutil.copy(launcher, pdir / launcher.name)  # RUNPATH $ORIGIN: loads the packed copy
    prog = ("import json, decimal, re, _decimal, sys; print(sys.version_info[:2], decimal.Decimal is _decimal.Decimal, "
            "json.dumps({'q': str(decimal.Decimal(1) / 7), 'm': re.findall(r'\\w+', 'a bb ccc')}, sort_keys=True))")
    workloads = dict(d["workloads"], printing=[str(launcher), "-c", prog])
    for name, argv in workloads.items():
        env = dict(os.environ, **d["env"])
        want = subprocess.run(argv, capture_output=True, env=env, timeout=120)
        got = subprocess.run([str(pdir / launcher.name), *argv[1:]], capture_output=True, env=env, timeout=120)
        assert want.returncode == got.returncode == 0, got.stderr[-1000:]
        assert got.stdout == want.stdout, name
    assert b"True" in got.stdout and b"0.142857" in got.stdout  # the printing workload ran last
