"""The physical-limit estimate (``order.limit``) and relocation bytes after packing
(``relocs.analyze.reloc_bytes_packed``) on small libraries with known answers."""

import math
import shutil
import subprocess

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from conftest import need_tool
from elflayout.elfcore import ElfImage, relr_size
from elflayout.order.limit import physical_limit
from elflayout.profile.model import Function, Page, Target
from elflayout.relocs.analyze import reloc_bytes_packed

SRC = r"""
const char ro_table[20000] = {1};
static int data[6000] = {1};
int *data_addr(void) { return data; }
int *ptrs[1000] = {%s};
extern int ext_var;
int *ext_ptr = &ext_var;
%s
"""


def _section(elf, name):
    s = elf.get_section_by_name(name)
    return s["sh_offset"], s["sh_size"]


def test_physical_limit_known_answer(tmp_path):
    need_tool("gcc")
    src = tmp_path / "t.c"
    src.write_text(SRC % (", ".join(f"&data[{i}]" for i in range(1000)),
                          "\n".join(f"int f{i}(int x) {{ return x * {i} + {i % 7}; }}" for i in range(300))))
    lib = tmp_path / "libt.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", "-fuse-ld=bfd", "-o", lib, src], check=True)
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        text_off, _ = _section(elf, ".text")
        data_off, data_size = _section(elf, ".data")
        ro_off, ro_size = _section(elf, ".rodata")
        rela_off, rela_size = _section(elf, ".rela.dyn")
        rela = elf.get_section_by_name(".rela.dyn")
        types = np.array([r["r_info_type"] for r in rela.iter_relocations()])
        offs = np.array([r["r_offset"] for r in rela.iter_relocations()], dtype=np.uint64)
        plt = elf.get_section_by_name(".rela.plt")
        plt_size = plt["sh_size"] if plt is not None else 0
        size = lib.stat().st_size
    data_page = -(-data_off // 4096)  # a page whose first byte lies in .data
    ro_page = -(-ro_off // 4096)
    rela_page = -(-rela_off // 4096)
    assert data_page * 4096 < data_off + data_size and ro_page * 4096 < ro_off + ro_size
    assert rela_page * 4096 < rela_off + rela_size, "test library: .rela.dyn should span a page start"
    bss_page = size // 4096 + 10  # beyond the file: anonymous memory, not read from disk
    fn_page = text_off // 4096

    target = Target(path=str(lib),
                    functions=[Function("f0", 0, offset=text_off, size=100),
                               Function("f1", 1, offset=text_off + 200, size=5000)],
                    pages=[Page(data_page, i, kind) for i, (data_page, kind) in enumerate(
                        [(data_page, "r"), (data_page, "w"), (ro_page, "r"), (rela_page, "r"), (fn_page, "x"),
                         (bss_page, "w")])])
    lim = physical_limit(target, lib)
    rel = (types == 8) & (offs % 8 == 0)
    assert rel.sum() >= 1000
    reloc = (len(types) - rel.sum()) * 24 + relr_size(np.sort(offs[rel])) + plt_size
    # 1000 consecutive pointers: one address word + ceil(999 / 63) bitmap words at most.
    assert relr_size(np.sort(offs[rel])) <= 8 * (1 + 16 + 2 * (rel.sum() - 1000 + 1))
    expected_bytes = 5100 + 4096 * 2 + 4096 + reloc  # code + (.data, .rodata) + ELF header page + relocations
    assert lim["data_pages"] == 2
    assert lim["header_pages"] == 1
    assert lim["code_bytes"] == 5100
    assert lim["bytes"] == expected_bytes
    assert lim["pages"] == math.ceil(expected_bytes / 4096)


def test_physical_limit_header_page_counted_once(tmp_path):
    need_tool("gcc")
    src = tmp_path / "u.c"
    src.write_text("int g(int x) { return x + 1; }\n")
    lib = tmp_path / "libu.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", lib, src], check=True)

    base = physical_limit(Target(path=str(lib)), lib)
    touched = physical_limit(Target(path=str(lib), pages=[Page(0, 0, "r")]), lib)
    assert base["header_pages"] == 1 and touched["header_pages"] == 0
    assert base["pages"] == touched["pages"]


def _build(tmp_path, name, linker, *extra):
    need_tool("gcc")
    if linker == "lld" and shutil.which("ld.lld") is None:
        pytest.skip("ld.lld is not installed (run: make bootstrap)")
    src = tmp_path / f"{name}.c"
    src.write_text(SRC % (", ".join(f"&data[{i}]" for i in range(1000)),
                          "int puts(const char *); int call(void) { return puts(\"x\"); }"))
    lib = tmp_path / f"lib{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", f"-fuse-ld={linker}", *extra, "-o", lib, src], check=True)
    return lib


def _sizes(lib):
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        return {n: (elf.get_section_by_name(n)["sh_size"] if elf.get_section_by_name(n) else 0)
                for n in (".rela.dyn", ".rela.plt", ".relr.dyn")}


def test_reloc_bytes_packed_of_an_unpacked_library(tmp_path):
    lib = _build(tmp_path, "a", "bfd")
    with open(lib, "rb") as f:
        rela = list(ELFFile(f).get_section_by_name(".rela.dyn").iter_relocations())
    relative = np.sort(np.array([r["r_offset"] for r in rela if r["r_info_type"] == 8], np.uint64))
    with ElfImage(lib) as img:
        got = reloc_bytes_packed(img)
    sizes = _sizes(lib)
    assert sizes[".rela.plt"] > 0 and len(relative) >= 1000
    assert got == {"rela": sizes[".rela.dyn"] - 24 * len(relative), "relr": relr_size(relative),
                   "plt": sizes[".rela.plt"]}


def test_reloc_bytes_packed_takes_a_relr_table_as_it_is(tmp_path):
    """A library already packed by the linker: its .relr.dyn counts once, as it is."""
    lib = _build(tmp_path, "b", "lld", "-Wl,--pack-dyn-relocs=relr")
    sizes = _sizes(lib)
    assert sizes[".relr.dyn"] > 0
    with ElfImage(lib) as img:
        got = reloc_bytes_packed(img)
    assert got == {"rela": sizes[".rela.dyn"], "relr": sizes[".relr.dyn"], "plt": sizes[".rela.plt"]}
