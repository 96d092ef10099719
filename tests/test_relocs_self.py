"""The self-applying packed form (relocs/selfapply.py) on this machine's glibc."""

import json
import shutil
import subprocess

import pytest

import relocs_testlib as testlib
from conftest import need_tool, run_cli
from elflayout.relocs import selfapply, simload


def test_code_is_the_assembled_source(tmp_path):
    need_tool("as")
    need_tool("objcopy")
    (tmp_path / "a.s").write_text(selfapply.SOURCE)
    subprocess.run(["as", "--64", str(tmp_path / "a.s"), "-o", str(tmp_path / "a.o")], check=True)
    subprocess.run(["objcopy", "-O", "binary", "-j", ".text", str(tmp_path / "a.o"), str(tmp_path / "a.bin")],
                   check=True)
    assert (tmp_path / "a.bin").read_bytes() == selfapply.CODE
    r = subprocess.run(["readelf", "-r", str(tmp_path / "a.o")], capture_output=True, text=True)
    assert "There are no relocations" in r.stdout  # position-independent: placed as is


@pytest.mark.parametrize("linker", ["bfd", "gold"])
def test_self_form_runs_identically(tmp_path, linker):
    need_tool("gcc")
    b = testlib.build(tmp_path, linker, ifunc=False)  # an ifunc definer is refused (test_relocs_linkself)
    out_dir = tmp_path / "packed"
    out_dir.mkdir()
    r = run_cli("pack-relocs", b["lib"], "-o", out_dir / "libt.so", "--format", "self", "--check", "--json", check=0)
    st = json.loads(r.stdout)
    assert st["form"] == "self" and st["applier"]["bytes"] == selfapply.SIZE
    assert st["check"]["equal"] and st["check"]["real_load"]["equal"]
    # Exported data (COPY-relocatable) and TLS images stay with ld.so; the rest is packed.
    assert 0 < st["kept_relative"] < 10 and st["packed"] > 3000
    with simload.Loaded(out_dir / "libt.so") as ld:
        assert ld.relr().size == 0 and ld.applier() is not None  # no DT_RELR: old glibc loads it
        assert ld.tag(simload.L.DT_RELR) is None
    doc = json.loads(run_cli("relocs", out_dir / "libt.so", "--json", check=0).stdout)
    assert doc["self_applied"]["present"] and doc["self_applied"]["form"] == "post-link"
    assert doc["self_applied"]["count"] == st["packed"] and not doc["relr"]["present"]
    shutil.copy(b["driver"], out_dir / "main")
    got = subprocess.run([str(out_dir / "main")], capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout == b["output"]
