"""relocs verb, RELR encoding against lld and GNU ld, simulated loader, pack-relocs bad input.

Libraries are built on the fly by relocs_testlib (gcc + the named linker).
"""

import hashlib
import json
import shutil
import struct

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from conftest import need_tool, run_cli
from elflayout import elfcore
from elflayout import layouts as L
from elflayout.relocs import realload, simload
import relocs_testlib as testlib
from elflayout.relocs.analyze import section_names_of_vaddrs


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    need_tool("gcc")
    w = tmp_path_factory.mktemp("relocs")
    return {
        "bfd": testlib.build(w, "bfd"),
        "lld": testlib.build(w, "lld"),
        "lld-relr": testlib.build(w, "lld", extra=("-Wl,--pack-dyn-relocs=relr",), run=False),
        "bfd-relr": testlib.build(w, "bfd", extra=("-Wl,-z,pack-relative-relocs",), run=False),
    }


def sha(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest()


def lld_reference_encode(offsets, wordsize=8):
    """lld's RelrSection::updateAllocSize, transcribed one relocation at a time."""
    nbits, out, i = wordsize * 8 - 1, [], 0
    offs = sorted(set(int(x) for x in offsets))
    while i < len(offs):
        out.append(offs[i])
        base = offs[i] + wordsize
        i += 1
        while True:
            bitmap = 0
            while i < len(offs):
                d = offs[i] - base
                if d >= nbits * wordsize or d % wordsize:
                    break
                bitmap |= 1 << (d // wordsize)
                i += 1
            if not bitmap:
                break
            out.append((bitmap << 1) | 1)
            base += nbits * wordsize
    return out


# --- RELR encoding ----------------------------------------------------------------
@pytest.mark.parametrize("which", ["lld-relr", "bfd-relr"])
def test_relr_encode_is_byte_identical_to_linker(libs, which):
    """Decode the linker's .relr.dyn with pyelftools; our encoder must rebuild it exactly."""
    with open(libs[which]["lib"], "rb") as f:
        sec = ELFFile(f).get_section_by_name(".relr.dyn")
        data = sec.data()
        offs = np.array([r["r_offset"] for r in sec.iter_relocations()], np.uint64)
    assert offs.size > 3000 and len(data) > 2000  # runs, bitmaps and gaps, not a toy
    assert elfcore.relr_encode(offs).tobytes() == data


def test_relr_encode_of_unpacked_link_offsets_equals_lld_table(libs):
    """RELATIVE offsets of the non-packed lld link, moved section by section to where the
    --pack-dyn-relocs=relr link put those sections, encode to lld's .relr.dyn exactly."""
    with elfcore.ElfImage(libs["lld"]["lib"]) as a, elfcore.ElfImage(libs["lld-relr"]["lib"]) as b:
        t = a.reloc_tables()[".rela.dyn"]
        offs = t["r_offset"][a.reloc_types(t) == 8]
        where = section_names_of_vaddrs(a, offs)
        moved = offs.astype(np.int64)
        for name in set(where.tolist()):
            moved[where == name] += b.section(name).addr - a.section(name).addr
        relr = b.section(".relr.dyn")
        lld_table = b.mm[relr.offset:relr.offset + relr.size]
    assert len(set(where.tolist())) >= 3  # several sections (and segments): not a constant shift
    assert elfcore.relr_encode(moved.astype(np.uint64)).tobytes() == lld_table


def test_relr_encode_matches_reference_on_real_and_random_offsets(libs):
    with elfcore.ElfImage(libs["lld"]["lib"]) as img:
        t = img.reloc_tables()[".rela.dyn"]
        offs = t["r_offset"][img.reloc_types(t) == 8].copy()
    assert elfcore.relr_encode(offs).tolist() == lld_reference_encode(offs)
    rng = np.random.default_rng(7)
    for _ in range(200):
        n, spread = int(rng.integers(1, 300)), int(rng.choice([70, 600, 3000, 50000]))
        o = rng.choice(max(spread, n), n, replace=False).astype(np.uint64) * 8 + np.uint64(0x10000)
        words = elfcore.relr_encode(o)
        assert words.tolist() == lld_reference_encode(o)
        assert np.array_equal(elfcore.relr_decode(words), np.unique(o))


def test_relr_encode_empty_and_misaligned():
    assert elfcore.relr_encode(np.zeros(0, np.uint64)).size == 0
    with pytest.raises(ValueError):
        elfcore.relr_encode(np.array([8, 12], np.uint64))


# --- relocs verb -----------------------------------------------------------------------
def test_relocs_verb_counts_match_readelf(libs):
    lib = libs["bfd"]["lib"]
    doc = json.loads(run_cli("relocs", lib, "--json", check=0).stdout)
    assert doc["format"] == "elflayout-relocs" and doc["version"] == 1
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        want = {}
        for name in (".rela.dyn", ".rela.plt"):
            for r in elf.get_section_by_name(name).iter_relocations():
                key = (name, r["r_info_type"])
                want[key] = want.get(key, 0) + 1
    got = {(r["table"], r["type_number"]): r["count"] for r in doc["types"]}
    assert got == want
    rel = doc["relative"]
    assert rel["count"] == want[(".rela.dyn", 8)] == rel["packable"]
    assert rel["relr_bytes"] == elfcore.relr_size(
        [r["r_offset"] for r in ELFFile(open(lib, "rb")).get_section_by_name(".rela.dyn").iter_relocations()
         if r["r_info_type"] == 8])
    text = run_cli("relocs", lib, check=0).stdout
    assert "R_X86_64_RELATIVE" in text and "optimal RELR" in text and ".data.rel.ro" in text


def test_relocs_verb_on_packed_library_reads_relr(libs):
    doc = json.loads(run_cli("relocs", libs["lld-relr"]["lib"], "--json", check=0).stdout)
    assert doc["relr"]["present"] and doc["relr"]["count"] > 3000
    assert doc["relative"]["count"] == 0


def test_relocs_verb_bad_input(tmp_path):
    p = tmp_path / "x.so"
    p.write_bytes(b"not an elf at all")
    r = run_cli("relocs", p, check=2)
    assert "not an ELF file" in r.stderr and "Traceback" not in r.stderr


# --- simulated loader: it must be able to fail -------------------------------------------
@pytest.fixture(scope="module")
def packed(libs, tmp_path_factory):
    out = tmp_path_factory.mktemp("packed") / "libt.so"
    run_cli("pack-relocs", libs["bfd"]["lib"], "-o", out, check=0)
    return out


def test_check_finds_a_wrong_addend(libs, packed, tmp_path):
    ok = simload.compare(libs["bfd"]["lib"], packed)
    assert ok["equal"] and ok["compared_bytes"] > 10000
    bad = tmp_path / "libt.so"
    shutil.copy(packed, bad)
    with elfcore.ElfImage(packed) as img:
        relr = simload.Loaded(packed).relr()
        victim = int(relr[len(relr) // 2])
        off = img.vaddr_to_offset(victim)
    b = bytearray(bad.read_bytes())
    b[off:off + 8] = struct.pack("<Q", struct.unpack_from("<Q", b, off)[0] + 8)
    bad.write_bytes(bytes(b))
    res = simload.compare(libs["bfd"]["lib"], bad)
    assert not res["equal"] and res["first_difference"]["vaddr"] == hex(victim)


def test_check_finds_a_dropped_relr_entry(libs, packed, tmp_path):
    bad = tmp_path / "libt.so"
    b = bytearray(packed.read_bytes())
    with elfcore.ElfImage(packed) as img:
        off = img.vaddr_to_offset(img.dt(L.DT_RELR))
        words = np.frombuffer(img.mm, np.uint64, img.dt(L.DT_RELRSZ) // 8, off)
        k = int(np.nonzero(words & 1)[0][0])  # first bitmap word: clear its lowest set bit
        w = int(words[k])
        w2 = w & ~((w & ~1) & -(w & ~1))
    b[off + 8 * k:off + 8 * k + 8] = struct.pack("<Q", w2)
    bad.write_bytes(bytes(b))
    assert not simload.compare(libs["bfd"]["lib"], bad)["equal"]
    assert realload.dlopen_check(packed) is None


# --- pack-relocs bad input: one line, exit 2 (or 0 for "nothing to do"), input untouched ---------
def _copy(src, dst):
    shutil.copy(src, dst)
    return dst


def _patch_dynamic(path, old_tag, new_tag, new_val=0):
    with elfcore.ElfImage(path) as img:
        sec = img.section(".dynamic")
        dyn = np.frombuffer(img.mm, L.DYN64, sec.size // 16, sec.offset).copy()
        off = sec.offset
    k = int(np.nonzero(dyn["d_tag"] == old_tag)[0][0])
    b = bytearray(open(path, "rb").read())
    b[off + 16 * k:off + 16 * k + 16] = struct.pack("<qQ", new_tag, new_val)
    open(path, "wb").write(bytes(b))


def _bad(tmp_path, lib, what):
    p = tmp_path / f"in-{what}.so"
    shutil.copy(lib, p)
    if what == "textrel":
        _patch_dynamic(p, L.DT_NULL, L.DT_TEXTREL)
    elif what in ("aarch64", "i386"):
        b = bytearray(p.read_bytes())
        b[18:20] = struct.pack("<H", 183 if what == "aarch64" else 3)  # e_machine = EM_AARCH64 / EM_386
        p.write_bytes(bytes(b))
    elif what == "truncated":
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    elif what == "no-rela-dyn":
        b = bytearray(p.read_bytes())
        i = b.rfind(b".rela.dyn\0")
        b[i:i + 9] = b".rela.xyz"
        p.write_bytes(bytes(b))
    elif what == "inconsistent":
        _patch_dynamic(p, L.DT_RELASZ, L.DT_RELASZ, 24)
    elif what == "exec":
        b = bytearray(p.read_bytes())
        b[16:18] = struct.pack("<H", 2)  # ET_EXEC
        p.write_bytes(bytes(b))
    return p


@pytest.mark.parametrize("what,needle", [
    # an x86-64 library claiming to be AArch64: its relocation types make no sense there
    ("textrel", "text relocations"), ("aarch64", "DT_RELACOUNT"), ("i386", "EM_386 ELF64 is not supported"), ("truncated", "truncated"),
    ("no-rela-dyn", "no .rela.dyn"), ("inconsistent", "inconsistent"), ("exec", "not position-independent"),
])
def test_pack_bad_input(libs, tmp_path, what, needle):
    p = _bad(tmp_path, libs["bfd"]["lib"], what)
    before = sha(p)
    out = tmp_path / "out.so"
    r = run_cli("pack-relocs", p, "-o", out, check=2)
    assert needle in r.stderr and r.stderr.startswith("elflayout: error:"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert sha(p) == before and not out.exists()
    assert not list(tmp_path.glob(".out.so.*"))  # no temporary left behind


def test_pack_already_packed_is_nothing_to_do(libs, tmp_path):
    src = libs["lld-relr"]["lib"]
    before = sha(src)
    out = tmp_path / "out.so"
    r = run_cli("pack-relocs", src, "-o", out, check=0)
    assert "nothing to do" in r.stderr and not out.exists()
    r = run_cli("pack-relocs", src, "-o", out, "--force", check=0)
    assert "nothing to do" in r.stderr and sha(out) == before == sha(src)


def test_pack_refuses_existing_output_and_in_place(libs, tmp_path):
    out = tmp_path / "out.so"
    out.write_bytes(b"precious")
    r = run_cli("pack-relocs", libs["bfd"]["lib"], "-o", out, check=2)
    assert "exists" in r.stderr and out.read_bytes() == b"precious"
    src = _copy(libs["bfd"]["lib"], tmp_path / "self.so")
    r = run_cli("pack-relocs", src, "-o", src, "--force", check=2)
    assert "overwrite the input" in r.stderr


def test_check_failure_is_a_finding_naming_the_address(libs, packed, tmp_path):
    from elflayout.errors import Finding
    from elflayout.relocs import pack_cli

    bad = tmp_path / "libt.so"
    b = bytearray(packed.read_bytes())
    with elfcore.ElfImage(packed) as img:
        victim = int(simload.Loaded(packed).relr()[0])
        off = img.vaddr_to_offset(victim)
    b[off] ^= 0x40
    bad.write_bytes(bytes(b))
    with pytest.raises(Finding, match=f"differ at {hex(victim)} "):
        pack_cli._verify(libs["bfd"]["lib"], bad)
    assert pack_cli._verify(libs["bfd"]["lib"], packed)["dlopen"] == "ok"


# --- other machines: analysed, not packed ------------------------------------------------
X86_32 = """\t.text\n\t.globl f\n\t.type f,@function\nf:\n\tmovl 4(%esp), %eax\n\tret\n\t.size f, .-f
\t.section .data.rel.local,"aw"\n\t.globl ptrs\nptrs:\n\t.long f\n\t.long ptrs\n\t.long f\n"""
AARCH64 = """\t.text\n\t.globl f\n\t.type f,%function\nf:\n\tadd w0, w0, #1\n\tret\n\t.size f, .-f
\t.data\n\t.p2align 3\n\t.globl ptrs\nptrs:\n\t.xword f\n\t.xword ptrs\n"""


@pytest.mark.parametrize("machine", ["i386", "aarch64"])
def test_other_machines_analysed_and_pack_refused(tmp_path, machine):
    import subprocess

    if machine == "i386":
        (tmp_path / "x.s").write_text(X86_32)
        steps = [["as", "--32", "x.s", "-o", "x.o"], ["ld.bfd", "-m", "elf_i386", "-shared", "-Bsymbolic", "-o", "l.so", "x.o"]]
        want = ("R_386_RELATIVE", 3, 8)
    else:
        (tmp_path / "x.s").write_text(AARCH64)
        mc = shutil.which("llvm-mc-16") or shutil.which("llvm-mc") or "llvm-mc-16"
        steps = [[mc, "-triple=aarch64-linux-gnu", "-filetype=obj", "x.s", "-o", "x.o"],
                 ["ld.lld", "-shared", "-Bsymbolic", "-o", "l.so", "x.o"]]
        want = ("R_AARCH64_RELATIVE", 2, 16)
    for s in steps:
        need_tool(s[0])
        subprocess.run(s, cwd=tmp_path, check=True)
    doc = json.loads(run_cli("relocs", tmp_path / "l.so", "--json", check=0).stdout)
    rows = {r["type"]: r["count"] for r in doc["types"]}
    assert rows[want[0]] == want[1] and doc["relative"]["relr_bytes"] == want[2]
    r = run_cli("pack-relocs", "--format", "relr", "--min-glibc", "2.36", tmp_path / "l.so", "-o", tmp_path / "o.so",
                check=2)
    # AArch64 is packed (tests/test_aarch64.py), but two relocations free too little room here
    why = "not enough space freed" if machine == "aarch64" else "not implemented"
    assert why in r.stderr and not (tmp_path / "o.so").exists()


def test_damaged_inputs_never_crash(libs, tmp_path):
    """Seeded random damage: pack-relocs packs (and --check proves it), says nothing to do, or exits 2
    with one line; it never crashes, never runs out of memory on absurd segment sizes."""
    import contextlib
    import io
    import random
    from collections import Counter

    from elflayout.cli import main

    data = libs["bfd"]["lib"].read_bytes()
    rnd = random.Random(11)
    src, out = tmp_path / "damaged.so", tmp_path / "out.so"
    outcomes = Counter()
    for _ in range(120):
        d = bytearray(data)
        for _ in range(rnd.choice([1, 4, 16, 64])):
            k = rnd.randrange(len(d)) if rnd.random() < 0.5 else rnd.randrange(4096)  # headers, tables
            d[k] = rnd.randrange(256)
        src.write_bytes(bytes(d))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(["pack-relocs", str(src), "-o", str(out), "--force", "--check"])
        msg = err.getvalue()
        assert rc in (0, 2), msg
        assert "Traceback" not in msg and "internal error" not in msg, msg
        if rc == 2:
            assert len(msg.strip().splitlines()) == 1 and str(src) in msg, msg
        outcomes[rc] += 1
    assert outcomes[0] and outcomes[2]


@pytest.mark.parametrize("which", ["bfd", "lld-relr"])
def test_relocs_verb_on_damaged_inputs_never_crashes(libs, tmp_path, which):
    import contextlib
    import io
    import random

    from elflayout.cli import main

    data = libs[which]["lib"].read_bytes()
    rnd = random.Random(5)
    src = tmp_path / "d.so"
    for _ in range(100):
        d = bytearray(data)
        for _ in range(rnd.choice([1, 4, 16, 64])):
            k = rnd.randrange(len(d)) if rnd.random() < 0.5 else rnd.randrange(4096)
            d[k] = rnd.randrange(256)
        src.write_bytes(bytes(d))
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(["relocs", str(src), "--json"])
        assert rc in (0, 2) and "internal error" not in err.getvalue(), err.getvalue()
        if rc == 0:
            assert json.loads(out.getvalue())["format"] == "elflayout-relocs"
        else:
            assert len(err.getvalue().strip().splitlines()) == 1
