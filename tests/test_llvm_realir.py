"""The real-compile training set for libLLVM orders (``targets.llvm_realir``): training
and held-out projects must be disjoint; each workload is ``llc-16 -O2`` of IR clang-16
made from a file of the project's Debian source."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from elflayout.errors import ElflayoutError
from elflayout.targets import llvm_realir


def test_split_refuses_a_project_that_trains_and_is_held_out():
    with pytest.raises(ElflayoutError, match="'zlib' both trains and is held out"):
        llvm_realir.split(["zlib", "lua"], ["bzip2", "zlib"])


def test_split_refuses_unknown_and_empty_sets():
    with pytest.raises(ElflayoutError, match="unknown project 'nosuch'"):
        llvm_realir.split(["nosuch"], ["bzip2"])
    with pytest.raises(ElflayoutError, match="at least one training and one held-out"):
        llvm_realir.split(["zlib"], [])
    assert llvm_realir.split(("zlib", "lua"), ("bzip2",)) == (["zlib", "lua"], ["bzip2"])


def test_shipped_split_is_disjoint_and_covers_other_kinds_of_code():
    train, held = llvm_realir.split(llvm_realir.TRAINING, llvm_realir.HELD_OUT)
    assert held == ["bzip2", "pcre2", "mbedtls"]
    # vector and rotate code, floating point, a parser: what compiles of zlib and Lua
    # alone left cold in held-out compiles
    assert {"xxhash", "libdeflate", "opus", "stb", "libyaml"} <= set(train)
    # x86-64 inline assembly, which Mbed TLS's bignum.c has and no other project trained
    assert "secp256k1" in train
    # every workload of the split has its own name (profiles are cached and merged by name)
    names = [llvm_realir.workload_name(p, f) for p in train + held for f in llvm_realir.PROJECTS[p].files]
    assert len(names) == len(set(names)) >= 41


def test_learning_curve_takes_one_file_of_each_project_before_a_second(monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import bench_heldout_real

    files = {"a": ["a1", "a2", "a3"], "b": ["b1"], "c": ["c1", "c2"]}
    monkeypatch.setattr(llvm_realir, "workloads", lambda names, *a, **k: [(n, []) for p in names for n in files[p]])
    subs = bench_heldout_real.subsets(["a", "b", "c"])
    assert subs == {"first 2 in turn": ["a1", "b1"], "first 4 in turn": ["a1", "b1", "c1", "a2"],
                    "a+b": ["a1", "a2", "a3", "b1"], "all": ["a1", "b1", "c1", "a2", "c2", "a3"]}


def test_ir_refuses_a_file_the_project_does_not_list():
    with pytest.raises(ElflayoutError, match="zlib: no file 'gzlib.c'"):
        llvm_realir.ir("zlib", "gzlib.c")


def test_workload_names_say_project_file_and_levels():
    assert llvm_realir.workload_name("lua", "src/lvm.c") == "llc -O2 lua/lvm.c (clang -O2)"
    assert llvm_realir.workload_name("lua", "src/lvm.c", "0", "1") == "llc -O1 lua/lvm.c (clang -O0)"


@pytest.mark.download
@pytest.mark.slow
def test_workload_compiles_real_ir_from_the_debian_source():
    (name, argv), = [w for w in llvm_realir.workloads(["zlib"]) if "inftrees" in w[0]]
    assert name == "llc -O2 zlib/inftrees.c (clang -O2)"
    text = open(argv[2]).read()
    assert 'source_filename = "inftrees.c"' in text and "define " in text and "inflate_table" in text
    assert subprocess.run(argv, capture_output=True).returncode == 0
    # cached: the same file again, not recompiled
    assert llvm_realir.ir("zlib", "inftrees.c") == llvm_realir.ir("zlib", "inftrees.c")


@pytest.mark.download
@pytest.mark.slow
def test_every_training_file_compiles_to_ir():
    """Each project's flags and set-up make IR of every file it lists (no configure step)."""
    for name in llvm_realir.TRAINING:
        for file in llvm_realir.PROJECTS[name].files:
            text = llvm_realir.ir(name, file).read_text()
            assert "\ndefine " in text, (name, file)


# an inline-asm call in LLVM IR: its template and its constraint string
ASM_CALL = re.compile(r'\basm (?:sideeffect )?(?:alignstack )?(?:inteldialect )?(?:unwind )?"([^"]*)", "([^"]*)"')


def asm_with_memory_operands(ll: Path) -> list[tuple[str, str]]:
    """Inline-asm calls of ``ll`` that hold instructions and a memory operand (``*``: an
    indirect operand, e.g. ``=*m``): what the code generator's inline-asm operand
    selection and memory constraints run for. An empty ``asm("" : "+r"(x))`` barrier
    has neither."""
    return [(t, c) for t, c in ASM_CALL.findall(ll.read_text()) if t.strip() and "*" in c]


@pytest.mark.download
@pytest.mark.slow
def test_training_set_has_inline_assembly_with_memory_operands():
    """Mbed TLS's bignum.c (held out) multiplies in x86-64 inline assembly; a training
    compile must run the same code generation, and its IR must compile."""
    held = [llvm_realir.ir("mbedtls", "library/bignum.c")]
    assert asm_with_memory_operands(held[0])
    with_asm = [(name, argv) for name, argv in llvm_realir.workloads(llvm_realir.TRAINING)
                if asm_with_memory_operands(Path(argv[2]))]
    assert "llc -O2 secp256k1/secp256k1.c (clang -O2)" in dict(with_asm)
    for name, argv in with_asm:
        assert subprocess.run(argv, capture_output=True).returncode == 0, name
