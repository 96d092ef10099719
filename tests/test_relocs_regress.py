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
from elflayout.relocs import pack, realload, simload
from elflayout.relocs.glibc import GLIBC_ABI_DT_RELR_HASH
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
    rel = np.flatnonzero(L.r_type(t["r_info"]) == R_X86_64_RELATIVE)
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
    types = L.r_type(t["r_info"])
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


@pytest.mark.root
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


NO_LIBC = r"""
#include <math.h>
static const char *names[] = {"a", "bb", "ccc", "dddd", "eeeee", "ffffff", "ggggggg", "hhhhhhhh"};
static double (*fns[])(double) = {cos, sin, tan, cos};
double nolibc_sum(double x) { double s = 0; for (int i = 0; i < 4; i++) s += fns[i](x) + names[i][0]; return s; }
"""


def test_library_without_libc_needed_packs_and_loads_without_the_version_need(tmp_path):
    """libabsl_*-like: DT_NEEDED libm.so.6 only (versioned), no libc.so.6. glibc requires
    GLIBC_ABI_DT_RELR only with a DT_NEEDED libc.so.*: the output loads without it, and
    --check must accept it (a real load proves it)."""
    need_tool("gcc")
    (tmp_path / "n.c").write_text(NO_LIBC)
    lib = tmp_path / "libnolibc.so"
    subprocess.run(["gcc", "-O1", "-fPIC", "-shared", "-nostdlib", str(tmp_path / "n.c"), "-o", str(lib), "-lm"],
                   check=True)
    with simload.Loaded(lib) as ld:
        needed = ld.needed()
    assert b"libm.so.6" in needed and not any(n.startswith(b"libc.so.") for n in needed)
    out = tmp_path / "out" / lib.name
    out.parent.mkdir()
    st = json.loads(run_cli("pack-relocs", lib, "-o", out, "--check", "--json", check=0).stdout)
    assert st["version_need"].startswith("not needed") and st["check"]["real_load"]["equal"]
    assert realload.dlopen_check(out) is None


def test_relr_without_the_need_is_refused_by_glibc_when_libc_is_needed(bfd, tmp_path):
    """The other half of the rule, shown with a real load: remove the need from a packed
    library that needs libc.so.6 and glibc refuses it; the checker says so too."""
    out = tmp_path / "p.so"
    pack.pack(bfd["lib"], out)
    b = bytearray(out.read_bytes())
    with elfcore.ElfImage(out) as img:
        vr = img.section(".gnu.version_r")
    # Turn the need into a weak need of another name: no missing-version error, no need.
    other = b"GLIBC_ABI_DT_RELX"
    i = b.find(b"GLIBC_ABI_DT_RELR\0")
    b[i:i + len(other)] = other
    off, n = vr.offset, 0
    while True:  # Verneed chain, then each Vernaux chain (glibc elf.h layouts)
        _, cnt, _, aux, nxt = L.VERNEED.unpack_from(b, off)
        a = off + aux
        for _ in range(cnt):
            h, fl, ot, name, anext = L.VERNAUX.unpack_from(b, a)
            if h == GLIBC_ABI_DT_RELR_HASH:
                L.VERNAUX.pack_into(b, a, L.elf_hash(other), fl | 2, ot, name, anext)  # 2: VER_FLG_WEAK
                n += 1
            a += anext
        if not nxt:
            break
        off += nxt
    assert n == 1
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(b))
    assert "DT_RELR without GLIBC_ABI_DT_RELR dependency" in (realload.dlopen_check(bad) or "")
    assert simload.compare(bfd["lib"], bad)["table_problems"]  # the checker refuses it too


def test_version_index_beyond_the_known_versions_is_refused(bfd, tmp_path):
    """ld.so reads l_versions[index] past its end for such a symbol, and the version need
    the packer adds changes what it reads: the input's behaviour is undefined, refuse it."""
    src = tmp_path / "libt.so"
    shutil.copy(bfd["lib"], src)
    with elfcore.ElfImage(src) as img:
        vs = img.section(".gnu.version")
    b = bytearray(src.read_bytes())
    k = vs.offset + 2 * (vs.size // 2 - 1)
    b[k:k + 2] = (112).to_bytes(2, "little")
    src.write_bytes(bytes(b))
    r = run_cli("pack-relocs", src, "-o", tmp_path / "out.so", check=2)
    assert "version index 112" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_writable_first_segment_compares_tables_field_by_field(bfd, tmp_path):
    """A first PT_LOAD flagged writable holds the ELF header and the dynamic-linking tables
    the packer rewrites: the real-load comparison leaves them to compare_tables, as the
    simulated one does, instead of calling the output different."""
    src = tmp_path / "libt.so"
    shutil.copy(bfd["lib"], src)
    with elfcore.ElfImage(src) as img:
        phoff = img.elf.header["e_phoff"]
        k = next(s.index for s in img.segments if s.type == "PT_LOAD")
    b = bytearray(src.read_bytes())
    at = phoff + k * L.PHDR64.itemsize + L.field_offset(L.PHDR64, "p_flags")
    b[at] |= L.PF_W
    src.write_bytes(bytes(b))
    out = tmp_path / "out.so"
    st = json.loads(run_cli("pack-relocs", src, "-o", out, "--check", "--json", check=0).stdout)
    assert st["check"]["real_load"]["equal"]


def _patched_copy(src, dst, vaddr, new: bytes):
    shutil.copy(src, dst)
    with elfcore.ElfImage(dst) as img:
        off = int(img.vaddr_to_offset(vaddr))
    b = bytearray(open(dst, "rb").read())
    b[off:off + len(new)] = new
    open(dst, "wb").write(bytes(b))


def test_real_load_compare_counts_what_the_loader_writes_and_what_the_file_holds(bfd, tmp_path):
    """The real-load comparison leaves out bytes that only code stores (a constructor's
    heap pointer may differ in every load), never a relocated word or a file byte."""
    src = bfd["lib"]
    out = tmp_path / "packed.so"
    pack.pack(src, out)
    with simload.Loaded(out) as ld:
        relr = ld.relr()
        assert ld.loader_writes(relr.astype(np.int64)).all() and ld.loader_writes(relr.astype(np.int64) + 7).all()
        word = int(relr[relr.size // 2])
        stored = int(ld.at(word, 8, np.uint64)[0])
    with simload.Loaded(src) as ld:
        t = ld.rela_ranges()[0][0]
        assert ld.loader_writes(t["r_offset"].astype(np.int64)).all()
        data = ld.img.section(".data")
        plain = next(v for v in range(data.addr, data.addr + data.size, 8)
                     if not ld.loader_writes(np.arange(v, v + 8, dtype=np.int64)).any())
        assert not ld.loader_writes(np.array([plain], np.int64))[0]
    # A relocated word whose addend moved: found.
    bad = tmp_path / "bad-addend" / "packed.so"
    bad.parent.mkdir()
    _patched_copy(out, bad, word, (stored + 16).to_bytes(8, "little"))
    r = simload.real_load_compare(src, bad)
    assert not r["equal"] and r["differing_bytes"] >= 1
    # A byte no relocation writes, changed in the file: found.
    bad = tmp_path / "bad-data" / "packed.so"
    bad.parent.mkdir()
    with simload.Loaded(out) as ld:
        old = int(ld.file_bytes(np.array([plain], np.int64))[0])
    _patched_copy(out, bad, plain, bytes([old ^ 0x5A]))
    r = simload.real_load_compare(src, bad)
    assert not r["equal"] and r["differing_bytes"] == 1
    assert simload.real_load_compare(src, out)["equal"]


def test_damaged_section_address_makes_no_room_for_the_cut(bfd, tmp_path):
    """GNU ld: room for the cut's program header is made by sliding the tables after the
    header table; a section whose address does not match its offset (a damaged header)
    must not slide: no room is made, the freed pages stay, and the output checks equal."""
    src = tmp_path / "libt.so"
    shutil.copy(bfd["lib"], src)
    with elfcore.ElfImage(src) as img:
        shoff = int(img.elf.header["e_shoff"])
        idx = next(i for i, s in enumerate(img.elf.iter_sections()) if s.name == ".gnu.hash")
    at = shoff + idx * L.SHDR64.itemsize + L.field_offset(L.SHDR64, "sh_addr")
    b = bytearray(src.read_bytes())
    b[at + 6] ^= 0x05  # a high byte of sh_addr
    src.write_bytes(bytes(b))
    r = run_cli("pack-relocs", src, "-o", tmp_path / "out.so", "--check", "--json", check=0)
    st = json.loads(r.stdout)
    assert st["check"]["equal"] and st["cut"]["pages"] == 0 and "no room" in st["cut"]["why"]
    assert not any(".gnu.hash" in k for k in st["moved_sections"])
