"""pack-relocs for glibc < 2.36: the self-applying form in a real Debian 11 root (glibc 2.31).

Debian 11's own big libraries (libLLVM-11, libpython3.9) are packed on the host with
``--root`` (the check's real loads run in the root) and their programs run inside the
root (chroot) through the packed copies: byte-identical output. The DT_RELR form is
refused for --min-glibc 2.31, and a DT_RELR file is shown not to work there.
"""

import json
import os
import stat
import subprocess

import pytest

from conftest import run_cli
from oldglibc_root import bullseye_root, python_launcher, run_in
from elflayout.relocs import pack
from elflayout.relocs.glibc import glibc_version

pytestmark = [pytest.mark.slow, pytest.mark.download, pytest.mark.root]

LIBDIR = "usr/lib/x86_64-linux-gnu"
IR = "define i32 @f(i32 %x) {\n  %y = mul i32 %x, 7\n  %z = add i32 %y, 3\n  ret i32 %z\n}\n"
PROG = ("import sys, json, decimal, re, hashlib; print(sys.version_info[:2], json.dumps({'q': str(decimal.Decimal(1) / 7),"
        " 'm': re.findall(r'\\w+', 'a bb ccc'), 'h': hashlib.sha256(b'x').hexdigest()}, sort_keys=True))")


@pytest.fixture(scope="module")
def root():
    return bullseye_root()


def test_root_has_an_old_glibc(root):
    assert glibc_version(root) == (2, 31)


@pytest.mark.parametrize("lib", ["libLLVM-11.so.1", "libpython3.9.so.1.0"])
def test_self_form_runs_identically_in_the_old_root(root, lib):
    out_dir = root / "opt/elflayout/packed-self"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / lib
    r = run_cli("pack-relocs", root / LIBDIR / lib, "-o", out, "--root", root, "--check", "--json", "--force", check=0)
    st = json.loads(r.stdout)
    assert st["form"] == "self" and st["min_glibc"] == "2.31" and st["packed"] > 10_000
    assert st["check"]["equal"] and st["check"]["real_load"]["equal"]
    assert st["cut"]["pages"] > 50  # glibc 2.31 maps the split PT_LOAD too
    if lib.startswith("libLLVM"):
        (root / "opt/elflayout/t.ll").write_text(IR)
        argv = ["llc-11", "-O2", "/opt/elflayout/t.ll", "-o", "-"]
    else:
        argv = [python_launcher(root), "-c", PROG]
    want = run_in(root, argv)
    got = run_in(root, argv, libdir="/opt/elflayout/packed-self")
    seen = run_in(root, ["/usr/bin/env", "LD_DEBUG=libs", *argv], libdir="/opt/elflayout/packed-self")
    assert want.returncode == 0 and got.returncode == 0, got.stderr[-500:]
    assert got.stdout == want.stdout and len(want.stdout) > 20
    assert f"calling init: /opt/elflayout/packed-self/{lib}".encode() in seen.stderr  # the packed copy ran


def test_relr_form_is_refused_for_an_old_glibc(root, tmp_path):
    lib = root / LIBDIR / "libLLVM-11.so.1"
    r = run_cli("pack-relocs", lib, "-o", tmp_path / "x.so", "--format", "relr", "--min-glibc", "2.31", check=2)
    assert "needs glibc >= 2.36" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("pack-relocs", lib, "-o", tmp_path / "y.so", "--format", "relr", "--root", root, check=2)
    assert "--min-glibc is 2.31" in r.stderr


def test_a_relr_file_does_not_work_in_the_old_root(root):
    """glibc 2.31 ignores DT_RELR (an unknown tag): the packed words keep their addends."""
    out_dir = root / "opt/elflayout/packed-relr"
    out_dir.mkdir(parents=True, exist_ok=True)
    pack.pack(root / LIBDIR / "libLLVM-11.so.1", out_dir / "libLLVM-11.so.1", replace=True, form="relr")
    (root / "opt/elflayout/t.ll").write_text(IR)
    argv = ["llc-11", "-O2", "/opt/elflayout/t.ll", "-o", "-"]
    want = run_in(root, argv)
    got = run_in(root, argv, libdir="/opt/elflayout/packed-relr")
    assert want.returncode == 0
    assert got.returncode != 0 or got.stdout != want.stdout


@pytest.fixture
def root_without_ctypes(root, tmp_path):
    """The root seen through an overlay that hides its python's ctypes (as in a root with
    python3-minimal only)."""
    up, work, mnt = tmp_path / "up", tmp_path / "work", tmp_path / "mnt"
    dyn = up / "usr/lib/python3.9/lib-dynload"
    for d in (dyn, work, mnt):
        d.mkdir(parents=True)
    hide = [up / "usr/lib/python3.9/ctypes"] + [dyn / p.name for p in (root / "usr/lib/python3.9/lib-dynload")
                                                .glob("_ctypes*")]
    for h in hide:
        os.mknod(h, 0o600 | stat.S_IFCHR, os.makedev(0, 0))  # an overlay whiteout
    r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={root},upperdir={up},workdir={work}",
                        str(mnt)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount an overlay: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_check_in_a_root_whose_python_lacks_ctypes_uses_the_c_probe(root_without_ctypes, tmp_path):
    """No python3 with ctypes in the root: the real loads run the C probe there; the
    checker's failure is never read as the input not loading."""
    lib = root_without_ctypes / LIBDIR / "libz.so.1"
    r = run_cli("pack-relocs", lib, "-o", tmp_path / "z.so", "--root", root_without_ctypes, "--check", "--json",
                check=0)
    st = json.loads(r.stdout)
    assert st["form"] == "self" and st["check"]["real_load"]["equal"], st
    assert st["check"]["real_load"]["compared_bytes"] > 0


def test_c_probe_agrees_with_the_python_probe(root, tmp_path, monkeypatch):
    from elflayout.relocs import realload

    lib = root / LIBDIR / "libz.so.1"
    ranges = [[0, 64], [100, 164]]  # the ELF header and program headers: not relocated
    got = {}
    for probe in ("python", "c"):
        monkeypatch.setenv(realload.ENV_PROBE, probe)
        h = realload.Host(root)
        assert (h.native_probe is not None) == (probe == "c")
        doc, data = realload.load_state(h, lib, lib.name, ranges, (lib.parent,), 60)
        assert doc["base"] % 4096 == 0 and doc["base"] > 0
        got[probe] = data.tobytes()
        assert realload.dlopen_check(root / "etc/hostname", root=root)  # not an ELF file: dlopen says why
    assert got["python"] == got["c"] == lib.read_bytes()[:64] + lib.read_bytes()[100:164]
