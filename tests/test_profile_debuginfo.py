"""Profiles of targets built with debug info: gcc -g, clang-22 -g (DWARF 5, whose forms
valgrind 3.19's reader does not know: it gave up, exit 1, and the profile was empty),
clang-22 -gdwarf-4 and -gsplit-dwarf, gcc -gsplit-dwarf, clang 14, 16 and 19 -g. Every one must name the same functions as a
profile of the same library without its debug info. A library of two compile units is
enough to make valgrind 3.19 give up on clang's DWARF 5."""

import json
import subprocess

import pytest

from conftest import need_tool, run_cli

pytestmark = pytest.mark.valgrind

LIB_C = r"""
__attribute__((noinline)) int step_a(int x) { return x * 3 + 1; }
__attribute__((noinline)) int step_b(int x) { return x ^ 0x55; }
__attribute__((noinline)) static int step_c(int x) { return x > 7 ? step_a(x) : step_b(x); }
__attribute__((noinline)) int never_called(int x) { return x * x * x; }
int helper_other_unit(int);
int asm_unit(int);
int lib_entry(int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += step_c(i) + helper_other_unit(i) + asm_unit(i);
    return s;
}
"""
# An assembly source: with -g the assembler writes .debug_aranges for it alone (clang
# writes none for C), so the C units must be found by their top DIEs.
ASM_S = r"""
    .text
    .globl asm_unit
    .type asm_unit, @function
asm_unit:
    lea 1(%rdi), %eax
    ret
    .size asm_unit, .-asm_unit
"""
# A second compile unit: valgrind 3.19 misreads the second CU's clang DWARF 5 header.
LIB2_C = r"""
__attribute__((noinline)) int helper_other_unit(int x) { return x * 7 + 2; }
"""
MAIN_C = r"""
#include <stdio.h>
int lib_entry(int);
int main(int argc, char **argv) { printf("%d\n", lib_entry(argc * 10)); return 0; }
"""
CALLED = {"lib_entry", "step_a", "step_b", "step_c", "helper_other_unit", "asm_unit"}
BUILDS = {"clang-dwarf5": ("clang-22", ["-g"]), "clang-dwarf4": ("clang-22", ["-gdwarf-4"]),
          "clang-split-dwarf": ("clang-22", ["-g", "-gsplit-dwarf"]), "gcc": ("gcc", ["-g"]),
          "gcc-split-dwarf": ("gcc", ["-g", "-gsplit-dwarf"]),
          # Debian's other clang versions: DWARF 5 by default from clang 14 on, each a little different
          "clang-14": ("clang-14", ["-g"]), "clang-16": ("clang-16", ["-g"]), "clang-19": ("clang-19", ["-g"])}


@pytest.fixture(scope="module")
def tool(firsttouch_tool):
    return firsttouch_tool


def _build(d, cc, flags):
    need_tool(cc)
    for name, src in (("lib.c", LIB_C), ("lib2.c", LIB2_C), ("asm_unit.S", ASM_S), ("main.c", MAIN_C)):
        (d / name).write_text(src)
    lib, exe = d / "libdbg.so", d / "main"
    # separate compile steps: -gsplit-dwarf writes its .dwo files next to the objects
    for c in ("lib.c", "lib2.c", "asm_unit.S"):
        subprocess.run([cc, "-O2", "-fPIC", *flags, "-c", c, "-o", c[:-2] + ".o"], cwd=d, check=True)
    subprocess.run([cc, "-shared", "-o", lib, "lib.o", "lib2.o", "asm_unit.o"], cwd=d, check=True)
    subprocess.run([cc, "-O2", *flags, "main.c", "-o", exe, "-L.", "-ldbg", f"-Wl,-rpath,{d}"], cwd=d, check=True)
    return lib, exe


def _names(doc) -> set:
    return {f["name"] for f in doc["targets"][0]["functions"] if f.get("name")}


def _objects(doc) -> dict:
    return {f["name"]: f["object"] for f in doc["targets"][0]["functions"] if f.get("name")}


@pytest.mark.parametrize("build", list(BUILDS))
def test_debug_info_profiles_every_function(tool, tmp_path, build):
    cc, flags = BUILDS[build]
    lib, exe = _build(tmp_path, cc, flags)
    sections = subprocess.run(["readelf", "-SW", lib], capture_output=True, text=True, check=True).stdout
    assert ".debug_info" in sections
    out = tmp_path / "p.json"
    run_cli("profile", "--target", lib, "-o", out, "--", exe, check=0)
    doc = json.loads(out.read_text())
    got = _names(doc)
    assert CALLED <= got and "never_called" not in got, got
    # objects from the compile units (a split-DWARF skeleton names its .dwo file)
    objs = _objects(doc)
    assert objs["lib_entry"].startswith("lib.") and objs["step_a"] == objs["lib_entry"], objs
    assert objs["helper_other_unit"].startswith("lib2.") and objs["asm_unit"].startswith("asm_unit."), objs
    # the same library without debug info gives the same profile
    stripped = tmp_path / "stripped" / lib.name
    stripped.parent.mkdir()
    subprocess.run(["objcopy", "--strip-debug", lib, stripped], check=True)
    exe2 = tmp_path / "stripped" / "main"
    subprocess.run([cc, "-O2", str(tmp_path / "main.c"), "-o", exe2, f"-L{stripped.parent}", "-ldbg",
                    f"-Wl,-rpath,{stripped.parent}"], check=True)
    out2 = tmp_path / "p2.json"
    run_cli("profile", "--target", stripped, "-o", out2, "--", exe2, check=0)
    assert _names(json.loads(out2.read_text())) == got


def test_valgrind_giving_up_names_the_file(tool, tmp_path):
    """valgrind's own DWARF reader (--ft-read-dwarf=yes) gives up on clang's DWARF 5 and
    exits 1: the profile names the library and the cause, not the workload, and writes
    nothing."""
    lib, exe = _build(tmp_path, *BUILDS["clang-dwarf5"])
    out = tmp_path / "p.json"
    r = run_cli("profile", "--target", lib, "-o", out, "--", exe, check=2,
                env={"VALGRIND_OPTS": "--ft-read-dwarf=yes"})
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("elflayout")]
    assert len(err) == 1 and err[0].startswith(f"elflayout: error: {lib}: valgrind could not read"), r.stderr
    assert "Possibly corrupted debuginfo file" in err[0] and "workload was not at fault" in err[0]
    assert "exited with status" not in r.stderr
    assert not out.exists()
