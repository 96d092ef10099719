"""CPython built from source with LLVM 22 (targets.cpython_src): the link command read
from the Makefile, relinks writing elsewhere, the run environment, and (slow) the build
itself with a relink giving the same output."""

import os
import shutil

import pytest

from elflayout.errors import ElflayoutError
from elflayout.targets import cpython_src as cs


def test_link_command_is_the_makefiles(tmp_path):
    """The shared library's link command as CPython's Makefile spells it, variables expanded."""
    (tmp_path / "Makefile").write_text(
        "BLDSHARED= clang-22 -shared -fuse-ld=lld-22\nINSTSONAME= libpython3.11.so.1.0\n"
        "LIBRARY_OBJS= Python/a.o Objects/b.o\nMODLIBS=\nSHLIBS= -ldl\nLIBC=\nLIBM= -lm\n")
    assert cs.link_command(tmp_path) == ["clang-22", "-shared", "-fuse-ld=lld-22", "-Wl,-hlibpython3.11.so.1.0",
                                         "-o", "libpython3.11.so.1.0", "Python/a.o", "Objects/b.o", "-ldl", "-lm"]


def test_output_command_changes_only_the_output(tmp_path):
    cmd = ["clang-22", "-shared", "-o", "libpython3.11.so.1.0", "a.o", "-o2.o"]
    out = cs.output_command(cmd, tmp_path / "x.so")
    assert out == ["clang-22", "-shared", "-o", str(tmp_path / "x.so"), "a.o", "-o2.o"]
    assert cmd[3] == "libpython3.11.so.1.0"  # the build's own command is left alone


def test_run_env_drops_the_callers_python_settings():
    env = cs.run_env("/lib/x", {"PYTHONPATH": "/elsewhere", "PYTHONHOME": "/h", "HOME": "/root"})
    assert env["LD_LIBRARY_PATH"] == "/lib/x" and env["HOME"] == "/root"
    assert "PYTHONPATH" not in env and "PYTHONHOME" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_unknown_build_refused():
    with pytest.raises(ElflayoutError, match="unknown build"):
        cs.build("O3")


@pytest.mark.slow
@pytest.mark.download
@pytest.mark.root
def test_build_and_relink_same_output():
    """The from-source build (cached after the first run: about 10 min on 2 cores), relinked
    with RELR: the workload and the self-check print the same through both."""
    if not (shutil.which("clang-22") and shutil.which("ld.lld-22")) or os.geteuid() != 0:
        pytest.skip("clang-22, lld-22 and root (apt-get source) needed")
    b = cs.build("plain")
    want = cs.same_output(os.path.dirname(b["lib"]))
    assert "True True" in want
    r = cs.relink(["-Wl,-z,pack-relative-relocs"], tag="relr")
    assert cs.same_output(os.path.dirname(r["lib"])) == want
    assert os.path.exists(r["map"])


def test_timed_gives_the_environment_to_the_command_alone():
    """A run's environment (LD_LIBRARY_PATH at an instrumented libpython, PYTHONHOME) must not
    reach the interpreter that times it: that one would load the wrong library or none."""
    c = cs.timed(["sh", "-c", 'test "$PYTHONHOME" = /nonexistent'], env={"PYTHONHOME": "/nonexistent",
                                                                        "PATH": "/usr/bin:/bin"}, what="t")
    assert c["seconds"] >= 0 and c["peak_mib"] >= 0
    with pytest.raises(ElflayoutError, match="t: exit 1"):
        cs.timed(["sh", "-c", "exit 1"], env={"PATH": "/usr/bin:/bin"}, what="t")
