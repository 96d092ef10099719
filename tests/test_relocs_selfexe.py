"""pack-relocs --format self on PIE executables (the routine runs as the first
DT_PREINIT_ARRAY entry) and on files whose code segment has no room after it (lld: the
routine goes in a new R+X segment): packed, checked by the simulated loader and a real
start, run with --run; what cannot be ordered refused; Debian 11's bash run in its root."""

import json
import shutil
import subprocess

import numpy as np
import pytest

from conftest import need_tool, run_cli
from elflayout import elfcore
from elflayout import layouts as L
from elflayout.relocs import selfapply, simload
import relocs_testlib as testlib

COPY_MAIN = """#include <stdio.h>
long lib_report(void);
extern char *mutable_ptrs[];
extern char **environ;   /* -fPIE: a COPY relocation of libc's environ */
int main(void){ long s = lib_report(); printf("main: %ld %s %d\\n", s, mutable_ptrs[1], environ != 0); return 0; }
"""


def _pie(tmp_path, linker, ifunc=False, main=COPY_MAIN, extra=()):
    need_tool("gcc")
    src = tmp_path / f"src-{ifunc}"
    src.mkdir(exist_ok=True)
    obj = testlib.compile_lib(src, 24, ifunc=ifunc)
    (src / "m.c").write_text(main)
    exe = tmp_path / f"exe-{linker}-{ifunc}"
    testlib._run(["gcc", "-pie", "-fPIE", f"-fuse-ld={linker}", str(src / "m.c"), str(obj), "-o", str(exe), *extra])
    return exe


def _pack(src, out, *args, check=0):
    r = run_cli("pack-relocs", src, "-o", out, "--format", "self", "--json", *args, check=check)
    return json.loads(r.stdout) if check == 0 else r


def _phdrs(path):
    with open(path, "rb") as f:
        _, ph, _ = L.read_headers(f.read())
    return ph


def _set_dyn(path, tag, value):
    """A copy's dynamic tag ``tag`` set to ``value`` (in place)."""
    with elfcore.ElfImage(path) as img:
        d = img.dynamic
        k = int(np.flatnonzero(d.array["d_tag"] == tag)[0])
        at = d.offset + k * L.DYN64.itemsize + 8
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(int(value).to_bytes(8, "little"))


@pytest.mark.parametrize("linker", ["bfd", "lld"])
def test_self_form_pie_runs_and_checks(tmp_path, linker):
    exe = _pie(tmp_path, linker)
    rel = subprocess.run(["readelf", "-rW", str(exe)], capture_output=True, text=True).stdout
    assert "R_X86_64_COPY" in rel  # the copy relocation reads the library, never a packed word
    want = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    out = tmp_path / "packed"
    st = _pack(exe, out, "--run=")
    assert st["form"] == "self" and st["packed"] > 3000 and st["applier"]["bytes"] == selfapply.SIZE
    c = st["check"]
    assert c["equal"] and c["real_load"]["equal"] and c["real_load"]["compared_bytes"] > 100_000
    assert c["run"]["equal"] and c["run"]["status"] == 0
    got = subprocess.run([str(out)], capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout == want
    with simload.Loaded(out) as ld:
        ap = ld.applier()
        assert ap["via"] == "preinit" and ap["old_init"] == 0 and ld.tag(L.DT_RELR) is None
        assert ld.tag(L.DT_PREINIT_ARRAYSZ) == 8 and ld.tag(L.DT_INIT) == simload.Loaded(exe).tag(L.DT_INIT)
    ph = _phdrs(out)
    loads = ph[ph["p_type"] == L.PT_LOAD]
    if linker == "lld":  # the code ends on a page boundary: the routine has a segment of its own
        assert loads[-2]["p_flags"] == L.PF_R | L.PF_X and loads[-2]["p_vaddr"] == ap["entry"] - selfapply.ENTRY
    assert loads[-1]["p_flags"] == L.PF_R | L.PF_W  # the array, and the preinit entry ld.so relocates
    # Without the routine (DT_PREINIT_ARRAYSZ 0) the program is not the same: it is needed
    broken = tmp_path / "broken"
    shutil.copy(out, broken)
    _set_dyn(broken, L.DT_PREINIT_ARRAYSZ, 0)
    bad = subprocess.run([str(broken)], capture_output=True, text=True)
    assert bad.returncode != 0 or bad.stdout != want


def test_check_requires_the_preinit_entry_to_reach_the_routine(tmp_path):
    """ld.so relocates the DT_PREINIT_ARRAY entry (RELATIVE, kept first in RELA): one whose
    addend misses the routine means the table is never applied; the check fails."""
    exe = _pie(tmp_path, "lld")
    out = tmp_path / "packed"
    _pack(exe, out)
    bad = tmp_path / "bad"
    shutil.copy(out, bad)
    with elfcore.ElfImage(bad) as img:
        at = int(img.vaddr_to_offset(img.dynamic.get(L.DT_RELA))) + 16  # the first entry's r_addend
    with open(bad, "r+b") as f:
        f.seek(at)
        a = int.from_bytes(f.read(8), "little")
        f.seek(at)
        f.write((a + 16).to_bytes(8, "little"))
    res = simload.compare(exe, bad)
    assert not res["equal"] and "vaddr" in res["first_difference"]
    assert simload.compare(exe, out)["equal"]


def test_self_form_executable_refusals(tmp_path):
    """IRELATIVE (ifunc resolvers run while ld.so relocates, before the routine) and an
    existing DT_PREINIT_ARRAY: one line, exit 2, nothing written."""
    exe = _pie(tmp_path, "bfd", ifunc=True)
    r = _pack(exe, tmp_path / "o1", check=2)
    assert "IRELATIVE" in r.stderr and len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "o1").exists()
    pre = COPY_MAIN + 'static void early(int c, char **v, char **e) {}\n' \
        '__attribute__((section(".preinit_array"), used)) static void (*p_early)(int, char **, char **) = early;\n'
    (tmp_path / "p").mkdir()
    exe = _pie(tmp_path / "p", "lld", main=pre)
    r = _pack(exe, tmp_path / "o2", check=2)
    assert "DT_PREINIT_ARRAY" in r.stderr and len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "o2").exists()


def test_self_form_library_without_room_gets_a_routine_segment(tmp_path):
    """lld ends the code on a page boundary: the routine goes in a new R+X PT_LOAD and
    DT_INIT points at it (the output was refused as "no room post-link")."""
    need_tool("gcc")
    b = testlib.build(tmp_path, "lld", ifunc=False)
    out_dir = tmp_path / "packed"
    out_dir.mkdir()
    st = _pack(b["lib"], out_dir / "libt.so", "--check")
    assert st["check"]["equal"] and st["check"]["real_load"]["equal"] and st["packed"] > 3000
    with simload.Loaded(out_dir / "libt.so") as ld:
        ap = ld.applier()
        assert ap["via"] == "init" and ld.tag(L.DT_INIT) == ap["entry"]
    ph = _phdrs(out_dir / "libt.so")
    x = ph[(ph["p_type"] == L.PT_LOAD) & (ph["p_vaddr"] == ap["entry"] - selfapply.ENTRY)]
    assert x.size == 1 and x[0]["p_flags"] == L.PF_R | L.PF_X
    shutil.copy(b["driver"], out_dir / "main")
    got = subprocess.run([str(out_dir / "main")], capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout == b["output"]


def test_llvm_strip_of_a_self_packed_executable(tmp_path):
    """llvm-strip keeps the segments as they are (BFD's strip rewrites an executable whose
    program header table moved, in either form: docs/relocation-packing.md)."""
    need_tool("llvm-strip-16")
    exe = _pie(tmp_path, "lld")
    want = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    out = tmp_path / "packed"
    _pack(exe, out)
    stripped = tmp_path / "stripped"
    subprocess.run(["llvm-strip-16", "-o", str(stripped), str(out)], check=True)
    got = subprocess.run([str(stripped)], capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout == want
    assert simload.compare(exe, stripped)["equal"]


@pytest.mark.slow
@pytest.mark.download
@pytest.mark.root
def test_debian11_bash_self_form_runs_in_its_root(tmp_path):
    """Debian 11's bash (glibc 2.31: no DT_RELR) packed on the host, run in the root:
    the same output; with its routine disabled it is not."""
    from oldglibc_root import bullseye_root, run_in

    root = bullseye_root()
    d = root / "opt/elflayout/selfexe"
    d.mkdir(parents=True, exist_ok=True)
    out = d / "bash"
    st = _pack(root / "usr/bin/bash", out, "--root", root, "--check", "--force")
    assert st["min_glibc"] == "2.31" and st["packed"] > 500 and st["check"]["equal"]
    script = "for i in 1 2 3; do echo $i; done; declare -p BASH_VERSINFO; type cd; x=(a b); echo ${x[@]}"
    want = run_in(root, ["/usr/bin/bash", "-c", script])
    got = run_in(root, ["/opt/elflayout/selfexe/bash", "-c", script])
    assert want.returncode == 0 and got.returncode == 0 and got.stdout == want.stdout and len(want.stdout) > 50
    broken = d / "bash-no-routine"
    shutil.copy(out, broken)
    _set_dyn(broken, L.DT_PREINIT_ARRAYSZ, 0)
    bad = run_in(root, ["/opt/elflayout/selfexe/bash-no-routine", "-c", script])
    assert bad.returncode != 0 or bad.stdout != want.stdout


def test_self_form_library_without_dt_init_or_slot(tmp_path):
    """No DT_INIT (no crti.o) and no spare DT_NULL slot (lld): the dynamic array moves to a
    new writable PT_LOAD with DT_INIT added (glibc < 2.35 writes the array)."""
    need_tool("gcc")
    src = tmp_path / "src"
    src.mkdir()
    obj = testlib.compile_lib(src, 24, ifunc=False)
    out_dir = tmp_path / "packed"
    out_dir.mkdir()
    lib, main = tmp_path / "libt.so", out_dir / "main"
    testlib._run(["gcc", "-shared", "-nostartfiles", "-fuse-ld=lld", str(obj), "-o", str(lib)])
    testlib._run(["gcc", "-fuse-ld=lld", str(src / "main.c"), "-o", str(main), f"-L{tmp_path}", "-lt",
                  "-Wl,-rpath,$ORIGIN"])
    with simload.Loaded(lib) as ld:
        assert ld.tag(L.DT_INIT) is None
    st = _pack(lib, out_dir / "libt.so", "--check")
    assert st["check"]["equal"] and st["check"]["real_load"]["equal"]
    assert "no DT_INIT and no spare DT_NULL slot" in st["dynamic"]
    with simload.Loaded(out_dir / "libt.so") as ld:
        assert ld.tag(L.DT_INIT) == ld.applier()["entry"]
    got = subprocess.run([str(main)], capture_output=True, text=True)
    assert got.returncode == 0 and "main: " in got.stdout
