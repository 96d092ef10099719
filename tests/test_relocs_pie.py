"""pack-relocs on PIE executables: GNU ld (spare DT_NULL slots) and lld (none, DT_DEBUG),
checked by the simulated loader and a real start up to the entry point, run with --run,
debugged; bad executables refused."""

import json
import subprocess

import numpy as np
import pytest

from conftest import need_tool, run_cli
from elflayout import elfcore
from elflayout import layouts as L
from elflayout.relocs import simload
import relocs_testlib as testlib


def _pie(tmp_path, linker, n_tables=24, flags=("-pie", "-fPIE")):
    """The test library's code and its driver linked into one executable."""
    need_tool("gcc")
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    obj = testlib.compile_lib(src, n_tables)
    exe = tmp_path / f"exe-{linker}-{n_tables}-{'_'.join(f.strip('-') for f in flags)}"
    testlib._run(["gcc", *flags, f"-fuse-ld={linker}", str(src / "main.c"), str(obj), "-o", str(exe)])
    return exe


def _phdrs(path):
    with open(path, "rb") as f:
        _, ph, _ = L.read_headers(f.read())
    return ph


def _pack(exe, out, *args, check=0):
    r = run_cli("pack-relocs", exe, "-o", out, "--json", *args, check=check)
    return json.loads(r.stdout) if check == 0 else r


@pytest.mark.parametrize("linker", ["bfd", "lld"])
def test_pack_pie_runs_and_checks(tmp_path, linker):
    exe = _pie(tmp_path, linker)
    want = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    out = tmp_path / "packed"
    st = _pack(exe, out, "--check", "--run=")
    assert st["packed"] == st["relative"] > 3000
    c = st["check"]
    assert c["equal"] and c["real_load"]["equal"] and c["real_load"]["compared_bytes"] > 0
    assert c["run"]["equal"] and c["run"]["status"] == 0
    got = subprocess.run([str(out)], capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout == want
    ph = _phdrs(out)
    # glibc finds an executable's load base through PT_PHDR: it stays, and describes the
    # table (the cut of the freed pages used to give its place away: the output crashed)
    x = np.flatnonzero(ph["p_type"] == L.PT_PHDR)
    assert x.size == 1 and st["cut"]["pages"] >= 2
    with elfcore.ElfImage(out) as img:
        h = img.elf.header
        assert ph[x[0]]["p_offset"] == h["e_phoff"] and ph[x[0]]["p_filesz"] == h["e_phnum"] * 56
        assert img.offset_to_vaddr(int(h["e_phoff"])) == ph[x[0]]["p_vaddr"]
    dyn = ph[ph["p_type"] == L.PT_DYNAMIC][0]
    assert dyn["p_flags"] & L.PF_W  # ld.so writes DT_DEBUG
    if linker == "lld":  # no spare DT_NULL slot: the array moved to a new RW PT_LOAD at the end
        assert "DT_DEBUG: dynamic array moved" in st["dynamic"]
        last = ph[ph["p_type"] == L.PT_LOAD][-1]
        assert last["p_vaddr"] == dyn["p_vaddr"] and last["p_flags"] == L.PF_R | L.PF_W
    else:
        assert st["dynamic"].startswith("spare DT_NULL slots")


def test_tiny_lld_pie_table_grows_in_place(tmp_path):
    """Few relocations: the tables after the program header table slide by the entries
    the new segment needs, and the table stays at e_phoff (test_relocs_strip.py has the
    case where it cannot and goes into the new segment)."""
    exe = _pie(tmp_path, "lld", n_tables=1)
    out = tmp_path / "packed"
    st = _pack(exe, out, "--check", "--run=")
    assert "program header table in place" in st["dynamic"] and st["check"]["real_load"]["equal"]
    assert st["strip_safe"] and ".interp" in st["moved_sections"]
    ph = _phdrs(out)
    x = ph[ph["p_type"] == L.PT_PHDR][0]
    assert x["p_offset"] == 64 and x["p_filesz"] == ph.nbytes
    assert subprocess.run([str(out)], capture_output=True).returncode == 0


def test_gdb_sees_libraries_of_packed_pie(tmp_path):
    """DT_DEBUG in the moved array: gdb finds the shared libraries through it."""
    need_tool("gdb")
    exe = _pie(tmp_path, "lld")
    out = tmp_path / "packed"
    _pack(exe, out)
    r = subprocess.run(["gdb", "-q", "-batch", "-ex", "break lib_report", "-ex", "run", "-ex", "info sharedlibrary",
                        str(out)], capture_output=True, text=True, timeout=120)
    assert "Breakpoint 1, " in r.stdout and "libc.so.6" in r.stdout, r.stdout + r.stderr


def test_check_finds_missing_phdr_and_bad_start(tmp_path):
    exe = _pie(tmp_path, "bfd")
    out = tmp_path / "packed"
    _pack(exe, out)
    assert simload.compare(exe, out)["equal"]
    # the output of the old cut: PT_PHDR gone
    bad = tmp_path / "nophdr"
    data = bytearray(out.read_bytes())
    ph = _phdrs(out)
    k = int(np.flatnonzero(ph["p_type"] == L.PT_PHDR)[0])
    with elfcore.ElfImage(out) as img:
        at = int(img.elf.header["e_phoff"]) + k * 56
    data[at:at + 4] = (L.PT_NULL).to_bytes(4, "little")
    bad.write_bytes(data)
    bad.chmod(0o755)
    res = simload.compare(exe, bad)
    assert not res["equal"] and any("PT_PHDR" in p for p in res["table_problems"])
    assert "error" in simload.real_start_compare(exe, bad)  # and it does not start
    # a wrong addend in the file: the real start sees it
    wrong = tmp_path / "wrong"
    data = bytearray(out.read_bytes())
    with elfcore.ElfImage(exe) as img:
        t = img.reloc_tables()[".rela.dyn"]
        r0 = t[img.reloc_types(t) == 8][0]
        off = int(img.vaddr_to_offset(np.array([r0["r_offset"]]))[0])
    with elfcore.ElfImage(out) as img:
        off = int(img.vaddr_to_offset(np.array([r0["r_offset"]]))[0])
    data[off] ^= 0x10
    wrong.write_bytes(data)
    wrong.chmod(0o755)
    real = simload.real_start_compare(exe, wrong)
    assert not real["equal"] and real["differing_bytes"] >= 1


def test_run_compares_output(tmp_path):
    exe = _pie(tmp_path, "lld")
    st = _pack(exe, tmp_path / "a", "--run=ignored args")
    assert st["check"]["run"]["equal"]
    # a program whose output changes from run to run cannot be judged: exit 2, nothing written
    (tmp_path / "t.c").write_text('#include <stdio.h>\n#include <time.h>\nstatic const char *s[] = {"a","b","c"};\n'
                                  'int main(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t);'
                                  'printf("%s %ld\\n", s[1], t.tv_nsec); return 0;}\n')
    clock = tmp_path / "clock"
    testlib._run(["gcc", "-pie", "-fPIE", "-fuse-ld=lld", str(tmp_path / "t.c"), "-o", str(clock)])
    r = _pack(clock, tmp_path / "b", "--run=", check=2)
    assert "cannot judge" in r.stderr and not (tmp_path / "b").exists()


@pytest.mark.parametrize("kind", ["exec", "static-pie"])
def test_bad_executables_refused(tmp_path, kind):
    flags = {"exec": ("-no-pie", "-fno-PIE"), "static-pie": ("-static-pie", "-fPIE")}[kind]
    try:
        exe = _pie(tmp_path, "bfd", flags=flags)
    except Exception as e:  # noqa: BLE001 - no static libc installed
        pytest.skip(f"cannot link {kind}: {e}")
    out = tmp_path / "out"
    r = _pack(exe, out, "--check", check=2)
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()
    assert ("ET_EXEC" if kind == "exec" else "static PIE") in r.stderr


def test_origin_run_path_above_the_program(tmp_path):
    """RUNPATH $ORIGIN/../lib: the real start and --run see the program's own libraries."""
    b = testlib.build(tmp_path / "lib", "lld")
    (tmp_path / "app" / "bin").mkdir(parents=True)
    (tmp_path / "app" / "lib").mkdir()
    (tmp_path / "app" / "lib" / "libt.so").write_bytes(b["lib"].read_bytes())
    exe = tmp_path / "app" / "bin" / "main"
    testlib._run(["gcc", "-pie", "-fPIE", "-fuse-ld=lld", str(tmp_path / "lib" / "main.c"), "-o", str(exe),
                  f"-L{b['dir']}", "-lt", "-Wl,-rpath,$ORIGIN/../lib"])
    st = _pack(exe, tmp_path / "packed", "--run=")
    assert st["check"]["real_load"]["equal"] and st["check"]["run"]["equal"]
    assert st["check"]["run"]["stdout_bytes"] == len(b["output"])


def test_set_user_id_executable(tmp_path):
    """A set-user-ID input starts with ASLR on whatever the personality: both files run
    as plain copies (the sweep's passwd, su, mount failed the check before)."""
    exe = _pie(tmp_path, "bfd")
    exe.chmod(0o4755)
    st = _pack(exe, tmp_path / "packed", "--check")
    assert st["check"]["real_load"]["equal"]
    assert exe.stat().st_mode & 0o7777 == 0o4755  # the input untouched
