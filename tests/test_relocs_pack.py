"""pack-relocs on libraries linked by GNU ld, gold and lld: checked, loaded, run, stripped, debugged.

Two kinds of library: relocs_testlib (every dynamic relocation kind) and the
targets helper's synthetic library (many objects, constructors, pointer tables); each
driver must print exactly what it printed with the unpacked library.
"""

import json
import shutil
import subprocess

import numpy as np
import pytest
from elftools.elf.constants import P_FLAGS

from conftest import need_tool, run_cli
from elflayout import elfcore
from elflayout import layouts as L
from elflayout.relocs import realload, simload
import relocs_testlib as testlib

LINKERS = ["bfd", "gold", "lld"]


def _pack_and_run(lib, driver, want_output, outdir, check_args=("--check",)):
    outdir.mkdir()
    out = outdir / lib.name
    r = run_cli("pack-relocs", lib, "-o", out, "--json", *check_args, check=0)
    st = json.loads(r.stdout)
    assert st["format"] == "elflayout-pack-relocs" and st["status"] == "packed"
    shutil.copy(driver, outdir / driver.name)  # RUNPATH $ORIGIN: the driver loads the packed copy
    got = subprocess.run([str(outdir / driver.name)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert got.stdout == want_output
    return out, st


def _readelf(*args):
    r = subprocess.run(["readelf", "-W", *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0 and "Warning" not in r.stderr and "Error" not in r.stderr, r.stderr
    return r.stdout


@pytest.mark.parametrize("linker", LINKERS)
def test_pack_testlib(tmp_path, linker):
    need_tool("gcc")
    b = testlib.build(tmp_path, linker)
    out, st = _pack_and_run(b["lib"], b["driver"], b["output"], tmp_path / "packed")
    c = st["check"]
    assert c["equal"] and c["dlopen"] == "ok" and c["compared_bytes"] > 0
    assert st["packed"] == st["relative"] > 3000 and st["kept_relative"] == 0
    # Sizes: RELA shrinks by exactly the packed entries, RELR is the optimal encoding.
    assert st["rela_dyn_bytes_after"] == st["rela_dyn_bytes_before"] - 24 * st["packed"]
    with elfcore.ElfImage(b["lib"]) as img:
        t = img.reloc_tables()[".rela.dyn"]
        assert st["relr_bytes"] == elfcore.relr_size(t["r_offset"][img.reloc_types(t) == 8])
    # Tools: readelf shows the RELR table, the version need, consistent headers.
    d = _readelf("-d", out)
    assert "(RELR)" in d and "(RELRSZ)" in d and "(RELRENT)" in d
    assert "GLIBC_ABI_DT_RELR" in _readelf("-V", out)
    s = _readelf("-S", out)
    assert ".relr.dyn" in s and " RELR " in s
    relocs = _readelf("-r", out)
    assert "Relocation section '.relr.dyn'" in relocs or ".relr.dyn" in relocs
    if linker == "lld":
        assert st["dynamic"].startswith("no spare DT_NULL slot")
        assert " R   0x8" in [line for line in _readelf("-l", out).splitlines() if "DYNAMIC" in line][0]
    else:
        assert st["dynamic"] == "spare DT_NULL slots"
    # The freed whole pages leave the file: the split PT_LOAD takes PT_PHDR's place (lld,
    # gold) or the room pack left after the program headers (GNU ld: the tables and the
    # build-id note slid by one entry).
    size_in, size_out = b["lib"].stat().st_size, out.stat().st_size
    assert st["cut"]["pages"] >= 2 and size_out <= size_in - st["cut"]["bytes"] + 4096
    assert st["cut"]["program_header"] == ("added" if linker == "bfd" else "in PT_PHDR's place")
    with elfcore.ElfImage(out) as img:
        ld = img.loads
        split = [(p, q) for p, q in zip(ld, ld[1:]) if p.flags == q.flags and not p.flags & P_FLAGS.PF_W
                 and q.vaddr - q.offset == p.vaddr - p.offset + st["cut"]["bytes"]]
        assert len(split) == 1 and not any(p.type == "PT_PHDR" for p in img.segments)
        note = [p for p in img.segments if p.type == "PT_NOTE"]
        assert note and img.buf[note[0].offset:note[0].offset + 4].tobytes() == (4).to_bytes(4, "little")
    # strip keeps it loadable and equivalent.
    need_tool("strip")
    sdir = tmp_path / "stripped"
    sdir.mkdir()
    subprocess.run(["strip", "-o", str(sdir / "libt.so"), str(out)], check=True)
    shutil.copy(b["driver"], sdir / "main")
    assert subprocess.run([str(sdir / "main")], capture_output=True, text=True).stdout == b["output"]
    assert simload.compare(b["lib"], sdir / "libt.so")["equal"]


@pytest.mark.parametrize("linker", ["bfd", "lld"])
def test_keep_freed_keeps_file_offsets(tmp_path, linker):
    need_tool("gcc")
    b = testlib.build(tmp_path, linker)
    out, st = _pack_and_run(b["lib"], b["driver"], b["output"], tmp_path / "packed",
                            check_args=("--check", "--keep-freed"))
    assert "cut" not in st and st["check"]["equal"]
    with elfcore.ElfImage(b["lib"]) as a, elfcore.ElfImage(out) as o:
        assert [(p.offset, p.vaddr) for p in a.loads] == [(p.offset, p.vaddr) for p in o.loads]
        assert any(p.type == "PT_PHDR" for p in o.segments) == any(p.type == "PT_PHDR" for p in a.segments)


def test_gdb_breaks_in_packed_library(tmp_path):
    need_tool("gdb")
    b = testlib.build(tmp_path, "lld")
    out, _ = _pack_and_run(b["lib"], b["driver"], b["output"], tmp_path / "packed", check_args=())
    r = subprocess.run(["gdb", "-q", "-batch", "-ex", "break lib_report", "-ex", "run", "-ex", "bt",
                        str(tmp_path / "packed" / "main")], capture_output=True, text=True, timeout=120)
    assert "Breakpoint 1, " in r.stdout and str(out) in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("linker", LINKERS)
def test_pack_synthetic(tmp_path, linker):
    synthetic = pytest.importorskip("elflayout.targets.synthetic")
    b = synthetic.build(tmp_path / "syn", n_objects=12, funcs_per_object=6, seed=3, linker=linker)
    out, st = _pack_and_run(b["lib"], b["driver"], b["output"], tmp_path / "packed")
    assert st["check"]["equal"] and st["packed"] > 100


def test_pack_is_deterministic_and_leaves_input(tmp_path):
    b = testlib.build(tmp_path, "gold")
    before = b["lib"].read_bytes()
    run_cli("pack-relocs", b["lib"], "-o", tmp_path / "a.so", check=0)
    run_cli("pack-relocs", b["lib"], "-o", tmp_path / "b.so", check=0)
    assert (tmp_path / "a.so").read_bytes() == (tmp_path / "b.so").read_bytes()
    assert b["lib"].read_bytes() == before
    # Packing the packed output again: nothing to do.
    r = run_cli("pack-relocs", tmp_path / "a.so", "-o", tmp_path / "c.so", check=0)
    assert "nothing to do" in r.stderr


VLIB = """double cos(double);
static const char *tab[] = {"one","two","three","four","five","six","seven","eight"};
const char *get(int i){ return tab[i & 7]; }
double c(double x){ return cos(x); }
"""
VMAIN = """#include <stdio.h>
const char *get(int); double c(double);
int main(){ printf("%s %s %.3f\\n", get(2), get(7), c(0.5)); return 0; }
"""


@pytest.mark.parametrize("linker", ["bfd", "gold"])
def test_version_need_added_when_libc_has_no_entry(tmp_path, linker):
    """libc.so.6 is DT_NEEDED but no libc symbol is versioned: a Verneed entry is created."""
    need_tool("gcc")
    (tmp_path / "v.c").write_text(VLIB)
    (tmp_path / "m.c").write_text(VMAIN)
    d = tmp_path / "orig"
    d.mkdir()
    subprocess.run(["gcc", "-O1", "-fPIC", "-shared", "-nostartfiles", f"-fuse-ld={linker}", str(tmp_path / "v.c"),
                    "-o", str(d / "libv.so"), "-Wl,--no-as-needed", "-lm", "-lc"], check=True)
    subprocess.run(["gcc", str(tmp_path / "m.c"), "-o", str(d / "m"), f"-L{d}", "-lv", "-Wl,-rpath,$ORIGIN"], check=True)
    want = subprocess.run([str(d / "m")], capture_output=True, text=True, check=True).stdout
    assert "libc.so.6" not in _readelf("-V", d / "libv.so")
    out, st = _pack_and_run(d / "libv.so", d / "m", want, tmp_path / "packed")
    v = _readelf("-V", out)
    assert "File: libc.so.6  Cnt: 1" in v and "GLIBC_ABI_DT_RELR" in v and st["check"]["dlopen"] == "ok"


def test_check_flags_relr_without_version_need(tmp_path):
    """lld 14's --pack-dyn-relocs=relr output lacks GLIBC_ABI_DT_RELR: the table check says so."""
    b = testlib.build(tmp_path, "lld", extra=("-Wl,--pack-dyn-relocs=relr",), run=False)
    res = simload.compare(b["lib"], b["lib"])
    assert not res["equal"] and "GLIBC_ABI_DT_RELR" in res["table_problems"][0]
    assert "GLIBC_ABI_DT_RELR" in realload.dlopen_check(b["lib"])


def _phdrs_moved_to_the_end(lib, dst):
    """A copy of ``lib`` whose program header table sits at the end of the file, mapped by
    a PT_LOAD of its own, as BOLT leaves a library (PT_PHDR points there)."""
    data = bytearray(lib.read_bytes())
    eh = np.frombuffer(bytes(data[:L.EHDR64.itemsize]), L.EHDR64)[0].copy()
    ph = np.frombuffer(bytes(data), L.PHDR64, count=int(eh["e_phnum"]), offset=int(eh["e_phoff"])).copy()
    off = (len(data) + 4095) // 4096 * 4096
    top = int((ph["p_vaddr"] + ph["p_memsz"]).max())
    vaddr = (top + 4095) // 4096 * 4096
    new = np.zeros(1, L.PHDR64)
    n = ph.size + 1
    size = n * L.PHDR64.itemsize + L.PHDR64.itemsize  # one entry of zeros after it
    new["p_type"], new["p_flags"], new["p_offset"] = L.PT_LOAD, L.PF_R, off
    new["p_vaddr"] = new["p_paddr"] = vaddr
    new["p_filesz"] = new["p_memsz"] = size
    new["p_align"] = 4096
    x = ph["p_type"] == L.PT_PHDR
    ph["p_offset"][x], ph["p_vaddr"][x], ph["p_paddr"][x] = off, vaddr, vaddr
    ph["p_filesz"][x] = ph["p_memsz"][x] = n * L.PHDR64.itemsize
    last = int(np.flatnonzero(ph["p_type"] == L.PT_LOAD)[-1])  # PT_LOADs stay in address order
    ph = np.insert(ph, last + 1, new)
    eh["e_phoff"], eh["e_phnum"] = off, n
    data += bytes(off - len(data)) + ph.tobytes() + bytes(L.PHDR64.itemsize)
    data[:L.EHDR64.itemsize] = eh.tobytes()
    dst.write_bytes(bytes(data))
    return off


def test_program_headers_after_the_freed_pages(tmp_path):
    """The cut moves a program header table that lies after the freed pages along with
    the bytes (e_phoff follows): an output written without --check must load."""
    need_tool("gcc")
    b = testlib.build(tmp_path, "lld")
    src_dir = tmp_path / "moved"
    src_dir.mkdir()
    src = src_dir / b["lib"].name
    off = _phdrs_moved_to_the_end(b["lib"], src)
    shutil.copy(b["driver"], src_dir / b["driver"].name)
    got = subprocess.run([str(src_dir / b["driver"].name)], capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout == b["output"], got.stderr  # the moved table loads
    out, st = _pack_and_run(src, b["driver"], b["output"], tmp_path / "packed", check_args=())
    assert st["cut"]["pages"] >= 2
    with elfcore.ElfImage(out) as img:
        assert img.elf.header["e_phoff"] == off - st["cut"]["bytes"]
    assert simload.compare(src, out)["equal"]


@pytest.mark.parametrize("linker", ["bfd", "lld"])
def test_link_default_pack_cuts_whole_readahead_windows_only(tmp_path, linker):
    """``elflayout link``'s post-link packing (``relink.post_pack``) cuts the freed pages only
    in whole 128 KiB readahead windows: a few freed pages stay in the file, every later file
    offset stays where the linker put it, and the step says why. pack-relocs itself still
    cuts them."""
    need_tool("gcc")
    from elflayout.order import relink
    from elflayout.order.defaults import Step

    b = testlib.build(tmp_path, linker)
    lib = tmp_path / "linked" / b["lib"].name
    lib.parent.mkdir()
    shutil.copy(b["lib"], lib)
    step = Step("pack", "pack-relocs", "test")
    relink.post_pack(step, str(lib))
    assert step.value == "pack-relocs" and "equivalence proved" in step.predicted
    assert "freed pages kept in the file (fewer than 128 KiB of whole freed pages" in step.predicted
    with elfcore.ElfImage(b["lib"]) as a, elfcore.ElfImage(lib) as o:
        assert len(o.loads) == len(a.loads)
        assert [(p.offset, p.vaddr) for p in o.loads] == [(p.offset, p.vaddr) for p in a.loads]
    assert "(RELR)" in _readelf("-d", lib)
    assert simload.compare(b["lib"], lib)["equal"]
    shutil.copy(b["driver"], lib.parent / b["driver"].name)
    got = subprocess.run([str(lib.parent / b["driver"].name)], capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout == b["output"]
    # The same library packed by pack-relocs loses its whole freed pages, as before.
    out = tmp_path / "cut" / b["lib"].name
    out.parent.mkdir()
    st = json.loads(run_cli("pack-relocs", b["lib"], "-o", out, "--json", check=0).stdout)
    assert st["cut"]["pages"] >= 2


def test_cut_unit_applies_only_when_code_follows():
    from elflayout.relocs.pack_cut import _code_follows

    ph = np.zeros(3, L.PHDR64)
    ph["p_type"] = L.PT_LOAD
    ph["p_flags"] = [L.PF_R, L.PF_R, L.PF_R | L.PF_X]
    ph["p_offset"] = [0, 0x8f000, 0x10a000]
    ph["p_filesz"] = [0x8f000, 0x7b000, 0x112000]
    assert not _code_follows(ph, 0x8f000, 128 * 1024)  # lld: read-only data after the hole
    assert _code_follows(ph, 0xf0000, 128 * 1024)
    ph["p_flags"][1] |= L.PF_X  # gold: .rela.plt and the code in one R E segment
    assert _code_follows(ph, 0x8f000, 128 * 1024)
