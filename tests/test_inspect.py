"""``elflayout inspect`` against readelf/nm/lld on built, synthetic and system libraries."""

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from conftest import need_tool, run_cli
from elflayout.fileio import load_json

LLVM = Path("/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1")
SYSTEM_LIBS = [Path("/lib/x86_64-linux-gnu/libc.so.6"), Path("/lib/x86_64-linux-gnu/libz.so.1")]

SRC = r"""
#include <stdio.h>
static const char *names[] = {"alpha", "beta", "gamma", "delta", "epsilon"};
static int (*const ops[])(const char *, ...) = {printf, printf};
struct item { const char *s; int n; const void *p; };
static struct item items[40];
const struct item table[] = {{"x", 1, names}, {"y", 2, ops}, {"z", 3, items}, {"w", 4, &table}};
int foo(int x) { return printf("%s %d\n", names[x % 5], x) + table[x & 3].n; }
int bar(int x) { int s = 0; for (int i = 0; i < x; i++) s += foo(i) + (items[i % 40].p != 0); return s; }
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{linker: (lib, map)} built from SRC with each linker."""
    need_tool("gcc")
    d = tmp_path_factory.mktemp("inspect")
    (d / "t.c").write_text(SRC)
    subprocess.run(["gcc", "-O1", "-c", "-fPIC", "-ffunction-sections", "-fdata-sections", "t.c", "-o", "t.o"], cwd=d,
                   check=True)
    out = {}
    for linker in ("bfd", "gold", "lld"):
        if shutil.which(f"ld.{linker}") is None:
            continue
        lib, mp = d / f"libt_{linker}.so", d / f"libt_{linker}.map"
        subprocess.run(["gcc", "-shared", f"-fuse-ld={linker}", f"-Wl,-Map={mp.name}", "-o", lib.name, "t.o"], cwd=d,
                       check=True)
        out[linker] = (lib, mp)
    return out


def inspect_json(*args) -> dict:
    r = run_cli("inspect", "--json", *args, check=0)
    doc = json.loads(r.stdout)
    assert doc["format"] == "elflayout-inspect" and doc["version"] == 1
    return doc


def readelf_sections(lib: Path) -> dict:
    out = subprocess.run(["readelf", "-SW", str(lib)], capture_output=True, text=True, check=True).stdout
    secs = {}
    for m in re.finditer(r"^\s*\[\s*(\d+)\]\s+(\S+)\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", out, re.M):
        if int(m.group(1)) > 0:
            secs[int(m.group(1))] = (m.group(2), int(m.group(4), 16), int(m.group(5), 16), int(m.group(6), 16))
    return secs


def readelf_segments(lib: Path) -> list:
    out = subprocess.run(["readelf", "-lW", str(lib)], capture_output=True, text=True, check=True).stdout
    return [(m.group(1), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4), 16), int(m.group(5), 16))
            for m in re.finditer(r"^\s+([A-Z_]+|LOOS\+\w+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+0x([0-9a-f]+)\s+"
                                 r"0x([0-9a-f]+)", out, re.M)]


def readelf_reloc_types(lib: Path) -> Counter:
    out = subprocess.run(["readelf", "-rW", str(lib)], capture_output=True, text=True, check=True).stdout
    return Counter(re.findall(r"^[0-9a-f]+\s+[0-9a-f]+\s+(R_\w+)", out, re.M))


def check_symbols(doc: dict, lib: Path) -> None:
    """Entry, defined and function counts per symbol table equal readelf -sW's."""
    out = subprocess.run(["readelf", "-sW", str(lib)], capture_output=True, text=True, check=True).stdout
    for part in re.split(r"\n(?=Symbol table ')", out):
        m = re.match(r"Symbol table '(\.\w+)' contains (\d+) entr", part.strip())
        if not m:
            continue
        rows = re.findall(r"^\s+\d+: [0-9a-f]+\s+(?:0x[0-9a-f]+|\d+)\s+(\w+)\s+\w+\s+\w+\s+(\w+)", part, re.M)[1:]
        got = doc["symbols"][m.group(1).lstrip(".")]
        assert got["count"] == int(m.group(2)) - 1
        assert got["defined"] == sum(ndx != "UND" for _, ndx in rows)
        assert got["functions"] == sum(t in ("FUNC", "IFUNC") and ndx != "UND" for t, ndx in rows)


def check_sections(doc: dict, lib: Path) -> None:
    want = readelf_sections(lib)
    got = {s["index"]: (s["name"], s["addr"], s["offset"], s["size"]) for s in doc["sections"]}
    assert got == want
    for s in doc["sections"]:
        if s["type"] != "SHT_NOBITS" and s["size"]:
            assert s["pages"] == [s["offset"] // 4096, (s["offset"] + s["size"] - 1) // 4096]


def check_segments(doc: dict, lib: Path) -> None:
    want = readelf_segments(lib)
    got = [(s["offset"], s["vaddr"], s["filesz"], s["memsz"]) for s in doc["segments"]]
    assert got == [w[1:] for w in want]
    assert [s["type"].removeprefix("PT_") for s in doc["segments"] if s["type"] == "PT_LOAD"] == \
        [w[0] for w in want if w[0] == "LOAD"]


@pytest.mark.parametrize("linker", ["bfd", "gold", "lld"])
def test_built_library_matches_readelf(built, linker):
    if linker not in built:
        pytest.skip(f"ld.{linker} not installed")
    lib, _ = built[linker]
    doc = inspect_json(lib)
    check_sections(doc, lib)
    check_segments(doc, lib)
    rel = doc["relocations"]
    assert {t["type"]: t["count"] for t in rel["by_type"]} == dict(readelf_reloc_types(lib))
    # every allocated section lies in the PT_LOAD the section-to-segment mapping says
    loads = {s["index"]: s for s in doc["segments"] if s["type"] == "PT_LOAD"}
    for s in doc["sections"]:
        if "A" in s["flags"] and s["type"] != "SHT_NOBITS" and s["size"]:
            seg = loads[s["segment"]]
            assert seg["offset"] <= s["offset"] and s["offset"] + s["size"] <= seg["offset"] + seg["filesz"]
    check_symbols(doc, lib)


def test_synthetic_library_matches_readelf(tmp_path):
    synthetic = pytest.importorskip("elflayout.targets.synthetic")
    b = synthetic.build(tmp_path / "synth", n_objects=20, funcs_per_object=8, linker="bfd")
    doc = inspect_json(b["lib"], "--map", b["map"])
    check_sections(doc, b["lib"])
    check_segments(doc, b["lib"])
    rel = doc["relocations"]["relative"]
    assert rel["count"] == readelf_reloc_types(b["lib"])["R_X86_64_RELATIVE"] > 1000
    objs = {o["object"] for o in doc["map"]["objects"]}
    assert {Path(o).name for o in objs} >= {Path(o).name for o in b["objects"]}


@pytest.mark.parametrize("lib", SYSTEM_LIBS, ids=lambda p: p.name)
def test_system_library_matches_readelf(lib):
    if not lib.exists():
        pytest.skip(f"{lib} not installed")
    doc = inspect_json(lib)
    check_sections(doc, lib)
    check_segments(doc, lib)
    assert {t["type"]: t["count"] for t in doc["relocations"]["by_type"]} == dict(readelf_reloc_types(lib))
    check_symbols(doc, lib)
    assert doc["file"]["build_id"] and doc["file"]["machine"] == "EM_X86_64"


def test_relr_size_equals_lld_packed_table(tmp_path):
    """Our optimal RELR size for lld's own packed table equals the table lld wrote."""
    need_tool("ld.lld")
    src = tmp_path / "p.c"
    # pointer tables with gaps so the encoding needs addresses and bitmaps
    body = "\n".join(f"static int v{i};" for i in range(300))
    ptrs = ", ".join(f"&v{i}" if i % 7 else "0" for i in range(300))
    src.write_text(f"{body}\nint *const tab[] = {{{ptrs}}};\nint *tab2[] = {{{ptrs}}};\nint f(int i){{return *tab[i];}}\n")
    plain, packed = tmp_path / "libplain.so", tmp_path / "libpacked.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-fuse-ld=lld", str(src), "-o", str(plain)], check=True)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-fuse-ld=lld", "-Wl,--pack-dyn-relocs=relr", str(src), "-o",
                    str(packed)], check=True)
    p = inspect_json(plain)["relocations"]
    q = inspect_json(packed)["relocations"]
    n = p["relative"]["count"]
    assert n > 400
    assert q["relr_existing"]["count"] == n  # lld moved every RELATIVE relocation into RELR
    assert q["relative"]["relr_bytes"] == q["relr_existing"]["bytes"]  # same size as lld's encoder
    assert abs(p["relative"]["relr_bytes"] - q["relr_existing"]["bytes"]) <= 16  # layouts differ slightly


@pytest.mark.slow
def test_libllvm_relative_count_and_relr_size():
    if not LLVM.exists():
        pytest.skip(f"{LLVM} not installed (package libllvm16)")
    doc = inspect_json(LLVM)
    rel = doc["relocations"]["relative"]
    assert rel["type"] == "R_X86_64_RELATIVE"
    assert rel["count"] == 387_631
    assert rel["relr_bytes"] == 144_392
    assert rel["count"] == readelf_reloc_types(LLVM)["R_X86_64_RELATIVE"]
    assert doc["file"]["build_id"].startswith("649be1a7")
    assert doc["symbols"]["symtab"] is None
    fn = doc["functions"]
    assert fn["from_eh_frame"] > 50_000 and fn["fde_count"] > 100_000
    check_sections(doc, LLVM)


def test_map_lists_objects_and_input_sections(built):
    lib, mp = built["bfd"]
    doc = inspect_json(lib, "--map", mp)
    m = doc["map"]
    assert m["flavour"] == "bfd"
    ins = {s["name"]: s for s in m["input_sections"] if s["object"] == "t.o"}
    nm = dict((ln.split()[2], int(ln.split()[0], 16)) for ln in subprocess.run(
        ["nm", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout.splitlines())
    text = next(s for s in doc["sections"] if s["name"] == ".text")
    foo = ins[".text.foo"]
    assert foo["vaddr"] == nm["foo"] and foo["offset"] == text["offset"] + nm["foo"] - text["addr"]
    (t,) = [o for o in m["objects"] if o["object"] == "t.o"]
    assert t["offset_start"] <= foo["offset"] < t["offset_end"]
    r = run_cli("inspect", lib, "--map", mp, check=0)
    assert "t.o" in r.stdout and ".text.foo" in r.stdout and "Link map" in r.stdout


def test_map_of_another_library_is_refused(built):
    lib, _ = built["lld"]
    _, other = built["gold"]
    r = run_cli("inspect", lib, "--map", other, check=2)
    assert "does not match" in r.stderr and r.stderr.count("\n") == 1


def test_text_output_is_aligned(built):
    lib, _ = built["bfd"]
    out = run_cli("inspect", lib, check=0).stdout
    lines = out.splitlines()
    i = lines.index("Sections")
    hdr = lines[i + 1]
    rows = []
    for ln in lines[i + 2:]:
        if not ln.strip():
            break
        rows.append(ln)
    assert len(rows) == len(readelf_sections(lib))
    # right-aligned "size" column: every row's size ends where the header's does
    end = hdr.index("size") + len("size")
    for ln in rows:
        assert ln[end - 1] != " " and ln[end] == " ", ln


def _bad(args, what):
    r = run_cli("inspect", *args)
    assert r.returncode == 2, r
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("elflayout: error: ")
    assert str(args[-1]) in r.stderr and what in r.stderr, r.stderr


def test_bad_inputs(tmp_path, built):
    lib, mp = built["bfd"]
    notelf = tmp_path / "notelf.so"
    notelf.write_text("this is not an ELF file\n")
    _bad([notelf], "not an ELF file")
    data = lib.read_bytes()
    for n in (10, 64, 1000, len(data) // 2, len(data) - 100):
        trunc = tmp_path / f"trunc{n}.so"
        trunc.write_bytes(data[:n])
        _bad([trunc], "trunc" if n > 10 else "not an ELF")
    _bad([tmp_path], "directory")
    _bad([tmp_path / "missing.so"], "no such file")
    badmap = tmp_path / "bad.map"
    badmap.write_text(mp.read_text().replace(".text.foo      0x", ".text.foo      0xQQ", 1))
    _bad([lib, "--map", badmap], "malformed link map")
    _bad([lib, "--map", tmp_path / "missing.map"], "no such file")
    _bad([lib, "--map", tmp_path], "directory")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # would block forever if opened
    _bad([fifo], "not a regular file")
    _bad([lib, "--map", fifo], "not a regular file")


def test_output_file_and_force(tmp_path, built):
    lib, _ = built["lld"]
    out = tmp_path / "i.json"
    run_cli("inspect", lib, "-o", out, check=0)
    doc = load_json(out, "inspect", (1,))
    assert doc["file"]["size"] == lib.stat().st_size
    before = out.read_bytes()
    r = run_cli("inspect", lib, "-o", out, check=2)
    assert "exists" in r.stderr and out.read_bytes() == before
    run_cli("inspect", lib, "-o", out, "--force", check=0)
    r = run_cli("inspect", lib, "-o", lib, "--force", check=2)  # never over the input
    assert "input" in r.stderr
    gz = tmp_path / "i.json.gz"
    run_cli("inspect", lib, "-o", gz, check=0)
    assert gz.read_bytes()[:2] == b"\x1f\x8b" and load_json(gz, "inspect", (1,))["file"] == doc["file"]


def test_long_names_do_not_widen_every_row():
    from elflayout.inspect.cli import table

    rows = [["0x10", "a.o", ".text.short"], ["0x20", "x" * 300 + ".o", ".text." + "y" * 500], ["0x30", "b.o", ".text.z"]]
    lines = table(["offset", "object", "input section"], rows, right={0}).splitlines()
    assert len(lines[1]) < 120 and len(lines[3]) < 120  # short rows stay short
    assert lines[1].index(".text.short") == lines[3].index(".text.z")  # columns still line up
    assert lines[2].endswith("y" * 500)


def _asm_lib(tmp_path, name, assemble, link):
    for t in (assemble[0], link[0]):
        need_tool(t)
    subprocess.run(assemble, cwd=tmp_path, check=True)
    subprocess.run(link, cwd=tmp_path, check=True)
    return tmp_path / name


X86_32 = """\t.text\n\t.globl f\n\t.type f,@function\nf:\n\t.cfi_startproc\n\tmovl 4(%esp), %eax\n\taddl $1, %eax\n\tret
\t.cfi_endproc\n\t.size f, .-f\n\t.section .data.rel.local,"aw"\n\t.globl ptrs\nptrs:\n\t.long f\n\t.long ptrs\n\t.long f\n"""
AARCH64 = """\t.text\n\t.globl f\n\t.type f,%function\nf:\n\t.cfi_startproc\n\tadd w0, w0, #1\n\tret\n\t.cfi_endproc
\t.size f, .-f\n\t.data\n\t.p2align 3\n\t.globl ptrs\nptrs:\n\t.xword f\n\t.xword ptrs\n"""


def test_32bit_elf_is_inspected(tmp_path):
    (tmp_path / "x.s").write_text(X86_32)
    lib = _asm_lib(tmp_path, "lib32.so", ["as", "--32", "x.s", "-o", "x.o"],
                   ["ld.bfd", "-m", "elf_i386", "-shared", "-Bsymbolic", "--eh-frame-hdr", "-o", "lib32.so", "x.o"])
    doc = inspect_json(lib)
    assert doc["file"]["class"] == 32 and doc["file"]["machine"] == "EM_386" and not doc["file"]["x86_64"]
    assert any("x86-64-specific" in n for n in doc["notes"])
    rel = doc["relocations"]["relative"]
    assert rel["type"] == "R_386_RELATIVE" and rel["count"] == 3 and rel["relr_bytes"] == 8  # address + one bitmap
    check_sections(doc, lib)
    assert doc["functions"]["from_symtab"] == 1 and doc["functions"]["fde_count"] == 1
    assert "x86-64-specific" in run_cli("inspect", lib, check=0).stdout


def test_aarch64_elf_is_inspected(tmp_path):
    (tmp_path / "a.s").write_text(AARCH64)
    mc = shutil.which("llvm-mc-16") or shutil.which("llvm-mc") or "llvm-mc-16"  # llvm-16 ships llvm-mc-16
    lib = _asm_lib(tmp_path, "liba64.so", [mc, "-triple=aarch64-linux-gnu", "-filetype=obj", "a.s", "-o", "a.o"],
                   ["ld.lld", "-shared", "-Bsymbolic", "-o", "liba64.so", "a.o"])
    doc = inspect_json(lib)
    assert doc["file"]["machine"] == "EM_AARCH64" and not doc["file"]["x86_64"]
    assert doc["relocations"]["relative"]["count"] == 2
    check_sections(doc, lib)


def test_damaged_files_never_crash(tmp_path, built):
    """Seeded random byte damage: inspect either succeeds or exits 2 with one line naming the file."""
    import contextlib
    import io
    import random

    from elflayout.cli import main

    lib, _ = built["bfd"]
    data = lib.read_bytes()
    rnd = random.Random(7)
    target = tmp_path / "damaged.so"
    outcomes = Counter()
    for _ in range(150):
        d = bytearray(data)
        for _ in range(rnd.choice([1, 4, 16, 64])):
            k = rnd.randrange(len(d)) if rnd.random() < 0.5 else rnd.randrange(2048)  # headers are hit often
            d[k] = rnd.randrange(256)
        target.write_bytes(bytes(d))
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(["inspect", "--json", str(target)])
        outcomes[rc] += 1
        assert rc in (0, 2), err.getvalue()
        if rc == 2:
            assert err.getvalue().startswith(f"elflayout: error: {target}:") and err.getvalue().count("\n") == 1
    assert outcomes[2] > 10 and outcomes[0] > 10  # both kinds were exercised


def test_functions_listing_of_stripped_library(tmp_path, built):
    lib, _ = built["bfd"]
    stripped = tmp_path / "libstripped.so"
    shutil.copy(lib, stripped)
    subprocess.run(["strip", str(stripped)], check=True)
    fn = inspect_json(stripped, "--functions")["functions"]
    assert fn["from_symtab"] == 0 and len(fn["list"]) == fn["count"]
    exported = {ln.split()[3]: int(ln.split()[0], 16) for ln in subprocess.run(
        ["nm", "-D", "-S", "--defined-only", str(stripped)], capture_output=True, text=True, check=True).stdout.splitlines()
        if len(ln.split()) == 4 and ln.split()[2] in "Tt"}
    listed = {f["name"]: f["vaddr"] for f in fn["list"] if f["source"] == "dynsym"}
    assert listed == exported
    fdes = re.findall(r" FDE cie=\w+ pc=([0-9a-f]+)\.\.", subprocess.run(
        ["readelf", "--debug-dump=frames", str(stripped)], capture_output=True, text=True, check=True).stdout)
    starts = {f["vaddr"] for f in fn["list"]}
    assert {int(a, 16) for a in fdes} <= starts  # every FDE start is a listed function start
    offs = [f["offset"] for f in fn["list"]]
    assert offs == sorted(offs)


def test_already_packed_library_is_worded_for_what_it_is(tmp_path):
    """A library linked with DT_RELR has no RELATIVE left in .rela.dyn: inspect says it
    is already packed (and how its table compares to optimal), not "optimal RELR for 0"."""
    need_tool("gcc")
    src = tmp_path / "p.c"
    src.write_text("static int x[64];\nint *ptrs[64] = {" + ", ".join(f"&x[{i}]" for i in range(64)) + "};\n")
    lib = tmp_path / "libp.so"
    r = subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-z,pack-relative-relocs", "-o", lib, src],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"linker without -z pack-relative-relocs: {r.stderr.strip()[-120:]}")
    out = run_cli("inspect", lib, check=0).stdout
    assert "already packed" in out and "optimal RELR for 0" not in out, out
    # an unpacked library still gets the estimate
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", tmp_path / "libu.so", src], check=True)
    out = run_cli("inspect", tmp_path / "libu.so", check=0).stdout
    assert re.search(r"optimal RELR for \d+ R_X86_64_RELATIVE \(", out) and "already packed" not in out, out


# three constructors, each writing the 3 pages of its own array
_CTORS = "".join(f"static char big{i}[3 * 4096] = {{{i + 1}}};\n"
                 f"__attribute__((constructor)) static void init_{i}(void) {{ for (int k = 0; k < 3 * 4096; k += 4096)"
                 f" big{i}[k] = {i + 1}; }}\n" for i in range(3))


@pytest.mark.valgrind
def test_initializers_in_run_order_with_pages_from_a_profile(tmp_path):
    """Three constructors touching their own data: listed in the order ld.so runs them
    (count as readelf shows: DT_INIT + INIT_ARRAYSZ / 8), named, and with a valgrind
    profile each is charged with the pages it first touches."""
    need_tool("gcc")
    src = tmp_path / "i.c"
    src.write_text(_CTORS + "int api(void) { return big0[0] + big1[0] + big2[0]; }\n")
    lib = tmp_path / "libi.so"
    subprocess.run(["gcc", "-O0", "-g", "-shared", "-fPIC", "-o", lib, src], check=True)
    (tmp_path / "m.c").write_text("int api(void); int main(void) { return api() != 6; }\n")
    drv = tmp_path / "drv"
    subprocess.run(["gcc", "-o", drv, tmp_path / "m.c", "-L", tmp_path, "-li", f"-Wl,-rpath,{tmp_path}"], check=True)
    dyn = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    n_array = int(re.search(r"\(INIT_ARRAYSZ\)\s+(\d+)", dyn).group(1)) // 8
    expect = n_array + ("(INIT)" in dyn)
    res = json.loads(run_cli("inspect", "--initializers", "--json", lib, check=0).stdout)
    assert res["count"] == expect == len(res["initializers"])
    names = [e["function"] for e in res["initializers"]]
    assert [n for n in names if n.startswith("init_")] == sorted(n for n in names if n.startswith("init_"))
    from elflayout.profile.valgrind import tool_status

    if tool_status():
        pytest.skip(tool_status())
    prof = tmp_path / "p.json"
    run_cli("profile", "--target", lib, "--data", "-o", prof, "--", drv, check=0)
    res = json.loads(run_cli("inspect", "--initializers", "--json", lib, "--profile", prof, check=0).stdout)
    ctors = [e for e in res["initializers"] if (e["function"] or "").startswith("init_")]
    assert len(ctors) == 3 and all(e["ran"] for e in ctors)
    # its own array (3 pages, not page-aligned: a page it shares with relocated data is
    # first written by the loader, before any initializer)
    assert all(e["data_pages"] >= 2 for e in ctors), ctors
    assert res["pages_charged"] == res["init_phase_pages"]  # every init-phase page has its initializer
    # their code page is charged to whichever initializer ran first on it
    assert sum(e["code_pages"] for e in res["initializers"]) >= 1
    text = run_cli("inspect", "--initializers", lib, "--profile", prof, check=0).stdout
    assert "init_1" in text and "pages first touched by them" in text
    # and the profile report has the section
    html = tmp_path / "r.html"
    run_cli("report", prof, "-o", html, check=0)
    assert "Static initializers: " in html.read_text() and "init_0" in html.read_text()


@pytest.mark.valgrind
def test_initializers_of_a_stripped_executable_without_unwind_tables(tmp_path):
    """A PIE executable as its own target (Chromium's case): its constructors have neither
    a symbol nor an FDE, so no function extent starts at them; the profiler marks their
    entry offsets, and each is charged with the data pages it first writes."""
    need_tool("gcc")
    from elflayout.profile.valgrind import tool_status

    if tool_status():
        pytest.skip(tool_status())
    src = tmp_path / "e.c"
    src.write_text(_CTORS + "int main(void) { return big0[0] + big1[0] != 3; }\n")
    exe = tmp_path / "exe"
    subprocess.run(["gcc", "-O0", "-fPIE", "-pie", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-s",
                    "-o", exe, src], check=True)
    prof = tmp_path / "p.json"
    run_cli("profile", "--target", exe, "--data", "-o", prof, "--", exe, check=0)
    res = json.loads(run_cli("inspect", "--initializers", "--json", exe, "--profile", prof, check=0).stdout)
    arr = [e for e in res["initializers"] if e["via"] == "DT_INIT_ARRAY"]
    assert len(arr) >= 3 and all(e["ran"] for e in res["initializers"]), res["initializers"]
    # the three constructors each write their own array first (>= 2 of its 3 pages)
    assert sum(e["data_pages"] >= 2 for e in arr) >= 3, arr
    assert res["pages_charged"] == res["init_phase_pages"]
