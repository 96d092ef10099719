"""GNU strip/objcopy on packed outputs: BFD writes the program header table right
after the ELF header whatever e_phoff says, and shifts every section it overlaps. A
packed file whose table grew keeps it at e_phoff with room made after it (the tables,
notes and interpreter path slid), so Debian's dh_strip sequence leaves it working."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import need_tool, run_cli
import relocs_testlib as testlib
from test_relocs_selfexe import _pie

FORMS = ["relr", "self"]


def _strips(path, tmp_path):
    """``strip``, ``strip --strip-debug`` and dh_strip's objcopy sequence of ``path``."""
    need_tool("objcopy")
    outs = [tmp_path / "s-all", tmp_path / "s-debug", tmp_path / "s-dh"]
    subprocess.run(["strip", "-o", str(outs[0]), str(path)], check=True, capture_output=True)
    subprocess.run(["strip", "--strip-debug", "-o", str(outs[1]), str(path)], check=True, capture_output=True)
    dbg = tmp_path / "s.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(path), str(dbg)], check=True, capture_output=True)
    subprocess.run(["objcopy", "--strip-debug", "--strip-unneeded", "--remove-section=.comment", str(path),
                    str(outs[2])], check=True, capture_output=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={dbg}", str(outs[2])], check=True, capture_output=True)
    return outs


def _pack(src, out, form):
    r = run_cli("pack-relocs", src, "-o", out, "--format", form, "--json", "--check", check=0)
    return json.loads(r.stdout)


def _ehdr_phoff(path) -> int:
    return int.from_bytes(path.read_bytes()[32:40], "little")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("linker", ["bfd", "lld"])
def test_gnu_strip_keeps_packed_pie_working(tmp_path, linker, form):
    exe = _pie(tmp_path, linker)
    want = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    out = tmp_path / "packed"
    st = _pack(exe, out, form)
    assert st["strip_safe"] and _ehdr_phoff(out) == 64  # the table grew in place
    for s in _strips(out, tmp_path):
        got = subprocess.run([str(s)], capture_output=True, text=True)
        assert got.returncode == 0 and got.stdout == want, (s.name, got.stderr)


@pytest.mark.parametrize("form", FORMS)
def test_gnu_strip_keeps_packed_library_working(tmp_path, form):
    b = testlib.build(tmp_path, "lld", ifunc=False)
    packed = tmp_path / "packed.so"
    st = _pack(b["lib"], packed, form)
    assert st["strip_safe"] and _ehdr_phoff(packed) == 64
    for s in _strips(packed, tmp_path):
        shutil.copy(s, b["dir"] / "libt.so")
        got = subprocess.run([str(b["driver"])], capture_output=True, text=True)
        assert got.returncode == 0 and got.stdout == b["output"], (s.name, got.stderr)


def test_table_that_must_move_is_flagged(tmp_path):
    """Debian's clang-22 driver (lld): the self form frees 19 bytes too few to slide the
    tables by two entries, so the table moves; the report and the summary say so."""
    clang = Path("/usr/lib/llvm-22/bin/clang")
    if not clang.exists():
        pytest.skip("clang-22 is not installed")
    r = run_cli("pack-relocs", clang, "-o", tmp_path / "packed", "--format", "self", check=0)
    assert "warning: the program header table moved" in r.stdout and "llvm-strip" in r.stdout
    st = _pack(clang, tmp_path / "packed2", "self")
    assert not st["strip_safe"] and _ehdr_phoff(tmp_path / "packed2") != 64
    assert "into its segment" in st["dynamic"]  # too little freed for the table: after the array
    assert subprocess.run([str(tmp_path / "packed2"), "--version"], capture_output=True).returncode == 0
    assert _pack(clang, tmp_path / "packed3", "relr")["strip_safe"]
