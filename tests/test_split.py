"""elflayout split: tiny C and assembly objects compiled on the fly (gcc -O2 -fPIC, no
-ffunction-sections), split, linked in original order (must be identical) and in
reversed function/data order (the program must still print the same)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import need_tool, run_cli

from elflayout.split.api import split_object
from elflayout.split.reader import read_object

# Static functions calling each other (the assembler resolves these calls itself), a
# switch with a jump table, function pointers in data, a loop bound one past an array's
# end, a pointer with a negative offset from an array, a constructor in .init_array.
LIB_C = r"""
#include <stdio.h>
static int sq(int x) { return x * x; }
static int add3(int x) { return sq(x) + 3; }
__attribute__((noinline)) static int sw(int k) {
    switch (k) { case 0: return 11; case 1: return add3(k); case 2: return 7; case 3: return sq(k) + 1;
                 case 4: return 42; case 5: return 5; case 6: return 99; default: return -1; }
}
static int table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
static int other[4] = {100, 200, 300, 400};
static int counter = 5;
static int (*const ops[])(int) = {sq, add3, sw};
int *minus = &other[0] - 2;     /* points into the bytes before 'other' */
int hits[3];
static void __attribute__((constructor)) init(void) { counter += 1; }
__attribute__((noinline)) int sum_table(void) {
    int s = 0;
    for (const int *p = table; p < table + 8; p++) s += *p;
    return s;
}
__attribute__((noinline)) int sum_other(void) {
    int s = 0;
    for (const int *p = other; p < other + 4; p++) { if (*p == hits[0]) break; s += *p; }
    return s;
}
int lib_run(void) {
    int s = 0;
    for (int k = 0; k < 8; k++) s += sw(k);
    for (int i = 0; i < 3; i++) s += ops[i](i + 2);
    hits[1] = counter;
    table[0] += hits[0];
    other[1] += hits[2];
    return s * 1000 + sum_table() + sum_other() + minus[2] + hits[1];
}
"""
MAIN_C = r"""
#include <stdio.h>
int lib_run(void);
int main(void) { printf("%d\n", lib_run()); return 0; }
"""
# Hand-written assembly: f1 falls through into f2; f3 reaches f4 with an 8-bit jump.
ASM = r"""
    .text
    .globl f1, f2, f3, f4
    .type f1,@function
f1: movl $1, %eax
    .size f1, .-f1
    .type f2,@function
f2: addl $1, %eax
    ret
    .size f2, .-f2
    .type f3,@function
f3: jmp f4
    .size f3, .-f3
    .type f4,@function
f4: movl $4, %eax
    ret
    .size f4, .-f4
    .section .note.GNU-stack,"",@progbits
"""


def _cc(tmp, name, src, *flags):
    c = tmp / f"{name}.c"
    c.write_text(src)
    o = tmp / f"{name}.o"
    subprocess.run(["gcc", "-O2", "-fPIC", "-c", *flags, "-o", o, c], check=True)
    return o


def _exe(tmp, name, objs, *flags):
    out = tmp / name
    subprocess.run(["gcc", "-o", out, *map(str, objs), *flags], check=True, capture_output=True)
    return subprocess.run([out], capture_output=True, text=True, check=True).stdout


def _symbols(obj):
    r = subprocess.run(["nm", "--defined-only", obj], capture_output=True, text=True, check=True)
    return [ln.split()[-1] for ln in r.stdout.splitlines() if ln.split()[1] in "tTdDbBrR"]


@pytest.fixture
def lib(tmp_path):
    need_tool("gcc")
    return _cc(tmp_path, "lib", LIB_C), _cc(tmp_path, "main", MAIN_C)


def test_split_sections_and_reversed_order_runs(tmp_path, lib):
    libo, maino = lib
    out = tmp_path / "out"
    r = run_cli("split", libo, "-o", out, "--json", check=0)
    assert '"format": "elflayout-split"' in r.stdout
    split = out / "lib.o"
    names = subprocess.run(["readelf", "-SW", split], capture_output=True, text=True).stdout
    for sec in (".text.sq", ".text.add3", ".text.lib_run", ".text.sum_table", ".data.table"):
        assert sec in names, names
    want = _exe(tmp_path, "orig", [libo, maino])
    # Reversed function and data order: every moved reference must still hold.
    for linker in ("lld", "gold", "bfd"):
        if linker == "lld":
            order = tmp_path / "rev.order"
            order.write_text("\n".join(reversed(_symbols(split))) + "\n")
            flags = ["-fuse-ld=lld", f"-Wl,--symbol-ordering-file={order}"]
        elif linker == "gold":
            order = tmp_path / "rev.sections"
            secs = [ln.split()[1] for ln in names.splitlines() if "] ." in ln and "rela" not in ln]
            order.write_text("\n".join(reversed([s for s in secs if s.startswith((".text.", ".rodata.", ".data."))])))
            flags = ["-fuse-ld=gold", f"-Wl,--section-ordering-file={order}"]
        else:
            flags = ["-fuse-ld=bfd"]
        assert _exe(tmp_path, f"split-{linker}", [split, maino], *flags) == want, linker


def test_check_identical_with_every_linker(tmp_path, lib):
    libo, _ = lib
    r = run_cli("split", libo, "-o", tmp_path / "o", "--check", "--linker", "lld", "--linker", "gold",
                "--linker", "bfd", check=0)
    assert r.stdout.count("original-order links identical") == 3, r.stdout


def test_negative_offset_keeps_neighbours(lib):
    libo, _ = lib
    _, rep = split_object(libo.read_bytes(), "lib.o")
    reasons = [g.reason for s in rep.sections for g in s.glued]
    assert any("before other: maybe a negative offset" in x for x in reasons), reasons


def test_asm_fall_through_and_short_jump_glued(tmp_path):
    need_tool("gcc")
    s = tmp_path / "f.s"
    s.write_text(ASM)
    o = tmp_path / "f.o"
    subprocess.run(["gcc", "-c", "-o", o, s], check=True)
    _, rep = split_object(o.read_bytes(), "f.o")
    text = [x for x in rep.sections if x.name == ".text"][0]
    reasons = " | ".join(g.reason for g in text.glued)
    assert "f1 falls through into f2" in reasons
    assert "f3 reaches f4 with an 8-bit displacement" in reasons
    assert text.sections == 2      # {f1,f2} and {f3,f4}


def test_debug_info_keeps_sections_whole(tmp_path):
    """Debug information split does not rewrite (DWARF 3) keeps the sections whole."""
    need_tool("gcc")
    o = _cc(tmp_path, "dbg", LIB_C, "-gdwarf-3")
    _, rep = split_object(o.read_bytes(), "dbg.o")
    text = [x for x in rep.sections if x.name == ".text"][0]
    assert text.kept_whole and "DWARF" in text.kept_whole and text.sections == 1


def test_debug_info_refusal_is_printed_and_fails(tmp_path):
    """An object whose debug information split cannot rewrite is not split: the reason
    is printed without -v, the run exits 1 and writes nothing (copies of the inputs are
    no split)."""
    need_tool("gcc")
    o = _cc(tmp_path, "dbg", LIB_C, "-gdwarf-3")
    out = tmp_path / "out"
    r = run_cli("split", o, "-o", out, check=1)
    assert ".text kept whole in " in r.stdout and "DWARF version 3" in r.stdout, r.stdout
    assert "nothing split" in r.stderr and "nothing written" in r.stderr, r.stderr
    assert not out.exists()


def test_kept_whole_printed_without_verbose_when_others_split(tmp_path, lib):
    """One object split, one kept whole by its debug info: exit 0, the refusal named."""
    libo, _ = lib
    dbg = _cc(tmp_path, "dbg", LIB_C, "-gdwarf-3")
    a = tmp_path / "mixed.a"
    subprocess.run(["ar", "rcs", a, libo, dbg], check=True)
    r = run_cli("split", a, "-o", tmp_path / "o", check=0)
    assert "2 objects, " in r.stdout
    assert ".text kept whole in " in r.stdout and "dbg.o): DWARF debug information: DWARF version 3" in r.stdout, \
        r.stdout


def test_already_split_object_unchanged(tmp_path):
    need_tool("gcc")
    o = _cc(tmp_path, "fs", LIB_C, "-ffunction-sections", "-fdata-sections")
    raw = o.read_bytes()
    out, rep = split_object(raw, "fs.o")
    assert out == raw and not rep.changed


def test_archive_members_kept_in_order(tmp_path, lib):
    libo, maino = lib
    a = tmp_path / "liba.a"
    subprocess.run(["ar", "rcs", a, libo, maino], check=True)
    run_cli("split", a, "-o", tmp_path / "o", "--check", check=0)
    r = subprocess.run(["ar", "t", tmp_path / "o" / "liba.a"], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["lib.o", "main.o"]
    read_object(subprocess.run(["ar", "p", tmp_path / "o" / "liba.a", "lib.o"], capture_output=True).stdout, "x")


@pytest.mark.parametrize("kind", ["shared", "foreign", "truncated", "badmember", "missing"])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, lib, kind):
    libo, _ = lib
    raw = libo.read_bytes()
    bad = tmp_path / f"bad-{kind}"
    if kind == "shared":
        subprocess.run(["gcc", "-shared", "-o", bad, libo], check=True)
    elif kind == "foreign":
        b = bytearray(raw)
        b[18:20] = (243).to_bytes(2, "little")      # EM_RISCV
        bad.write_bytes(bytes(b))
    elif kind == "truncated":
        bad.write_bytes(raw[: len(raw) // 2])
    elif kind == "badmember":
        good = tmp_path / "good.a"
        subprocess.run(["ar", "rcs", good, libo], check=True)
        data = good.read_bytes()
        bad.write_bytes(data + b"junk.o/         0           0     0     644     99999     `\n" + b"x" * 10)
    out = tmp_path / "out"
    r = run_cli("split", libo, bad, "-o", out)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("elflayout: error: ") and str(bad) in lines[-1], r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists() or not any(out.iterdir())


def test_output_exists_refused(tmp_path, lib):
    libo, _ = lib
    out = tmp_path / "o"
    run_cli("split", libo, "-o", out, check=0)
    r = run_cli("split", libo, "-o", out, check=2)
    assert "exists" in r.stderr
    run_cli("split", libo, "-o", out, "--force", check=0)


def test_help_has_example():
    r = run_cli("split", "--help", check=0)
    assert "example:" in r.stdout and "--check" in r.stdout
    assert shutil.which("gcc")


@pytest.mark.parametrize("kind", ["gcc-flto", "clang-flto", "clang-thinlto", "archive-of-gcc-flto"])
def test_lto_objects_refused(tmp_path, kind):
    """LTO objects hold no machine code (gcc -flto: only .gnu.lto_* sections, clang: LLVM
    bitcode): one line naming the file, exit 2, nothing written (was: a silent copy)."""
    cc = "gcc" if "gcc" in kind else "clang-22"
    need_tool(cc)
    o = _cc_with(cc, tmp_path, "lto", LIB_C, "-flto=thin" if kind == "clang-thinlto" else "-flto")
    if kind.startswith("archive"):
        a = tmp_path / "liblto.a"
        subprocess.run(["gcc-ar", "rcs", a, o], check=True)
        o = a
    out = tmp_path / "out"
    r = run_cli("split", o, "-o", out, check=2)
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("elflayout")]
    assert len(err) == 1 and "lto.o" in err[0] and "generated at link time" in err[0], r.stderr
    assert ("GCC LTO bytecode" if "gcc" in kind else "LLVM bitcode") in err[0]
    assert not out.exists()


def _cc_with(cc, tmp, name, src, *flags):
    c = tmp / f"{name}.c"
    c.write_text(src)
    o = tmp / f"{name}.o"
    subprocess.run([cc, "-O2", "-fPIC", "-c", *flags, "-o", o, c], check=True)
    return o
