"""Regression tests for pack-relocs correctness bugs found with damaged inputs.

Each test builds a real library (relocs_testlib, gcc + GNU ld), damages it the way the
bug needed, and checks the packer and its --check against real loads (glibc ld.so).
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import relocs_testlib as testlib
from conftest import ROOT, need_tool, run_cli
from elflayout import elfcore
from elflayout import layouts as L
from elflayout.errors import ElflayoutError
from elflayout.relocs import pack, simload
from elflayout.relocs.analyze import section_names_of_vaddrs

R_X86_64_RELATIVE = 8


@pytest.fixture(scope="module")
def bfd(tmp_path_factory):
    need_tool("gcc")
    return testlib.build(tmp_path_factory.mktemp("regress"), "bfd")


def _rela(path):
    with elfcore.ElfImage(path) as img:
        s = img.section(".rela.dyn")
        return s.offset, img.reloc_tables()[".rela.dyn"].copy()


def _write_rela(path, off, t):
    b = bytearray(open(path, "rb").read())
    b[off:off + t.nbytes] = t.tobytes()
    open(path, "wb").write(bytes(b))


def _unaligned_overlap(src, dst):
    """Entry i (earlier) moved to end 4 bytes into the word of entry j (later, adjacent)."""
    shutil.copy(src, dst)
    off, t = _rela(dst)
    rel = np.flatnonzero((t["r_info"] & 0xFFFFFFFF) == R_X86_64_RELATIVE)
    o = t["r_offset"][rel]
    with elfcore.ElfImage(dst) as img:  # string-pointer tables: never read during loading
        where = section_names_of_vaddrs(img, o)
    k = next(k for k in range(rel.size // 2, rel.size - 1)
             if o[k + 1] == o[k] + 8 and where[k] == where[k + 1] == ".data.rel.ro")
    i, j = int(rel[k]), int(rel[k + 1])
    t["r_offset"][i] = t["r_offset"][j] - 4
    _write_rela(dst, off, t)
    return int(t["r_offset"][j]), i, j, t


def test_unaligned_overlap_is_a_conflict_and_simulated_in_ldso_order(bfd, tmp_path):
    src = tmp_path / "libt.so"
    q, i, j, t = _unaligned_overlap(bfd["lib"], src)
    # ld.so order: i writes [q-4, q+4), then j writes [q, q+8).
    with simload.Loaded(src) as ld:
        base = simload.BASES[0]
        im = ld.image(base)
    a_i, a_j = int(t["r_addend"][i]) & (2**64 - 1), int(t["r_addend"][j]) & (2**64 - 1)
    assert im[q:q + 8].tobytes() == ((base + a_j) % 2**64).to_bytes(8, "little")
    assert im[q - 4:q].tobytes() == ((base + a_i) % 2**64).to_bytes(8, "little")[:4]
    out = tmp_path / "packed.so"
    r = run_cli("pack-relocs", src, "-o", out, "--check", "--json", check=0)
    st = json.loads(r.stdout)
    assert st["check"]["real_load"]["equal"], st["check"]
    packed = {int(x) for x in simload_relr(out)}
    assert q not in packed  # the overlapped word keeps its place in RELA
    assert simload.real_load_compare(src, out)["equal"]


def simload_relr(path):
    with simload.Loaded(path) as ld:
        return ld.relr()


def test_relacount_beyond_the_relative_run_is_refused(bfd, tmp_path):
    src = tmp_path / "libt.so"
    shutil.copy(bfd["lib"], src)
    off, t = _rela(src)
    types = t["r_info"] & 0xFFFFFFFF
    run = int(np.argmin(types == R_X86_64_RELATIVE))
    assert run < t.size  # the test library has non-RELATIVE entries after the run
    with elfcore.ElfImage(src) as img:
        dsec = img.section(".dynamic")
        dyn = np.frombuffer(img.mm, L.DYN64, dsec.size // L.DYN64.itemsize, dsec.offset).copy()
    k = np.flatnonzero(dyn["d_tag"] == L.DT_RELACOUNT)
    if not k.size:
        pytest.skip("linker wrote no DT_RELACOUNT")
    dyn["d_val"][k[0]] = run + 1
    b = bytearray(src.read_bytes())
    b[dsec.offset:dsec.offset + dyn.nbytes] = dyn.tobytes()
    src.write_bytes(bytes(b))
    before = src.read_bytes()
    out = tmp_path / "out.so"
    r = run_cli("pack-relocs", src, "-o", out, "--check", check=2)
    assert "DT_RELACOUNT" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists() and src.read_bytes() == before
    # The simulated loader applies that many entries as RELATIVE, as ld.so does.
    with simload.Loaded(src) as ld:
        ranges = ld.rela_ranges()
    assert ranges[0][1] == run + 1


def test_existing_output_is_never_replaced_without_force(bfd, tmp_path):
    out = tmp_path / "out.so"
    # Another run created the output after our check_output: the rename must refuse.
    out.write_bytes(b"the other run's result")
    with pytest.raises(ElflayoutError, match="output exists"):
        pack.pack(bfd["lib"], out, replace=False)
    assert out.read_bytes() == b"the other run's result"
    assert not list(tmp_path.glob(".out.so.*"))
    pack.pack(bfd["lib"], out, replace=True)
    assert out.read_bytes()[:4] == b"\x7fELF"


def test_two_concurrent_runs_one_wins(bfd, tmp_path):
    out = tmp_path / "out.so"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    procs = [subprocess.Popen([sys.executable, "-m", "elflayout", "pack-relocs", str(bfd["lib"]), "-o", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    res = [(p.wait(), p.stderr.read()) for p in procs]
    # Whichever finishes second finds the output (early check or no-replace rename): never two successes.
    assert sorted(rc for rc, _ in res) == [0, 2], res
    assert "output exists" in next(e for rc, e in res if rc == 2)


def test_enospc_names_the_output(bfd, tmp_path):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        out = mnt / "out.so"
        res = run_cli("pack-relocs", bfd["lib"], "-o", out, check=2)
        assert str(out) in res.stderr and "No space left" in res.stderr, res.stderr
        assert ".tmp" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert not list(mnt.iterdir())
    finally:
        subprocess.run(["umount", str(mnt)])
