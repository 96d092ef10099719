"""The real-compile training set for libLLVM orders (``targets.llvm_realir``): training
and held-out projects must be disjoint; each workload is ``llc-16 -O2`` of IR clang-16
made from a file of the project's Debian source."""

import subprocess

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
