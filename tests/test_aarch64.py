"""AArch64 files on an x86-64 machine: relocation names, the emulator prefix, bad input,
and the qemu profile backend. Programs are cross-compiled with gcc-aarch64-linux-gnu and
run under qemu-user with the cross compiler's own arm64 root (/usr/aarch64-linux-gnu),
so nothing here downloads."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import need_tool, run_cli
from elflayout import arch, emulator
from elflayout.errors import ElflayoutError

CROSS_ROOT = Path("/usr/aarch64-linux-gnu")
ENV = {"ELFLAYOUT_ARM64_ROOT": str(CROSS_ROOT)}

LIB_SRC = r"""
extern __thread int tx;
__thread int ty = 3;
static const char *names[] = {"alpha", "beta", "gamma"};
int lib_used(int i) { return ty + names[i % 3][0]; }
int lib_tls(void) { return tx; }
int lib_unused(int i) { return i * 7 + names[i & 1][1]; }
"""
EXE_SRC = r"""
#include <stdio.h>
__thread int tx = 1;
int lib_used(int);
int main(int argc, char **argv) { printf("%d\n", lib_used(argc)); return 0; }
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """An arm64 library with TLS descriptors and RELATIVE relocations, and a program using it."""
    need_tool("aarch64-linux-gnu-gcc")
    d = tmp_path_factory.mktemp("a64")
    (d / "l.c").write_text(LIB_SRC)
    (d / "m.c").write_text(EXE_SRC)
    cc = "aarch64-linux-gnu-gcc"
    subprocess.run([cc, "-O1", "-fPIC", "-shared", "-o", "libl.so", "l.c"], cwd=d, check=True)
    subprocess.run([cc, "-O1", "-o", "prog", "m.c", "-L.", "-ll", "-Wl,-rpath," + str(d)], cwd=d, check=True)
    return d


def _patched(src: Path, dst: Path, **fields) -> Path:
    """A copy of ``src`` with ELF header bytes changed (offset -> bytes)."""
    b = bytearray(src.read_bytes())
    for off, val in fields.values():
        b[off:off + len(val)] = val
    dst.write_bytes(bytes(b))
    return dst


def test_reloc_names_from_the_machine_table():
    # pyelftools names 1028-1033 wrongly (TLSDESC as TLS_DTPREL32): the table's names win
    assert arch.reloc_name("EM_AARCH64", 64, 1031) == "R_AARCH64_TLSDESC"
    assert arch.reloc_name("EM_AARCH64", 64, 1028) == "R_AARCH64_TLS_DTPMOD64"
    assert arch.reloc_name("EM_AARCH64", 64, 1032) == "R_AARCH64_IRELATIVE"
    assert arch.reloc_name("EM_AARCH64", 64, 1033) == "type 1033"
    assert arch.reloc_name("EM_AARCH64", 64, 283) == "R_AARCH64_CALL26"  # a static type: pyelftools' name
    assert arch.reloc_name("EM_X86_64", 64, 8) == "R_X86_64_RELATIVE"
    assert arch.reloc_name("EM_386", 32, 7) == "R_386_JUMP_SLOT"


def test_inspect_names_tlsdesc(built):
    r = run_cli("inspect", "--json", built / "libl.so", check=0)
    doc = json.loads(r.stdout)
    names = {t["type"] for t in doc["relocations"]["by_type"]}
    assert "R_AARCH64_TLSDESC" in names and not any("DTPREL32" in n for n in names), names
    assert doc["relocations"]["relative"]["type"] == "R_AARCH64_RELATIVE"


def test_emulator_detected_from_the_elf_machine(built, tmp_path, monkeypatch):
    need_tool("qemu-aarch64")
    monkeypatch.setenv("ELFLAYOUT_ARM64_ROOT", str(CROSS_ROOT))
    em = emulator.for_program(built / "prog")
    assert em.argv == ("qemu-aarch64", "-L", str(CROSS_ROOT)) and em.describe()["time_comparable"] is False
    assert emulator.for_program(shutil.which("true")) is None
    # a 32-bit x86 program runs natively (measure), though elflayout profiles and packs x86-64 only
    i386 = _patched(Path(shutil.which("true")), tmp_path / "i386", cls=(4, b"\x01"), m=(18, b"\x03\x00"))
    assert emulator.for_program(i386) is None
    assert emulator.for_program(built / "prog", "qemu-aarch64 -L /x").root == "/x"
    from elflayout.measure.runner import Variant

    argv, _, shell = Variant("a", str(built / "prog") + " 1").argv(dict(os.environ))
    assert argv == ["qemu-aarch64", "-L", str(CROSS_ROOT), str(built / "prog"), "1"] and not shell


@pytest.mark.parametrize("what,fields,message", [
    ("big-endian", {"data": (5, b"\x02"), "m": (18, b"\x00\xb7")}, "big-endian EM_AARCH64"),
    ("ilp32", {"cls": (4, b"\x01")}, "ILP32 AArch64"),
    ("riscv64", {"m": (18, b"\xf3\x00")}, "EM_RISCV ELF64 is not supported"),
    ("i386", {"cls": (4, b"\x01"), "m": (18, b"\x03\x00")}, "EM_386 ELF32 is not supported"),
    ("arm", {"cls": (4, b"\x01"), "m": (18, b"\x28\x00")}, "EM_ARM ELF32 is not supported"),
])
def test_other_machines_refused(built, tmp_path, what, fields, message):
    bad = _patched(built / "libl.so", tmp_path / f"lib-{what}.so", **fields)
    r = run_cli("profile", "--target", bad, "-o", tmp_path / "p.json", "--", "true", check=2, env=ENV)
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "p.json").exists()


def test_missing_emulator_or_root_says_what_to_install(built, tmp_path):
    r = run_cli("profile", "--target", built / "libl.so", "-o", tmp_path / "p.json", "--", built / "prog",
                check=2, env={"ELFLAYOUT_ARM64_ROOT": str(tmp_path / "none")})
    assert "scripts/arm64-root.sh" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("profile", "--target", built / "libl.so", "-o", tmp_path / "p.json", "--", built / "prog",
                check=2, env={**ENV, "PATH": str(tmp_path)})
    assert "apt-get install qemu-user" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_default_backend_of_an_aarch64_target_is_qemu(built, monkeypatch):
    need_tool("qemu-aarch64")
    from elflayout.profile import record

    monkeypatch.setenv("ELFLAYOUT_ARM64_ROOT", str(CROSS_ROOT))
    setup = record.prepare(record.Setup(targets=[str(built / "libl.so")], backend=None))
    assert setup.backend == "qemu" and setup.emulator.argv[0] == "qemu-aarch64"


def test_valgrind_refuses_another_machine(built, tmp_path):
    # valgrind would watch the emulator and return an empty profile
    r = run_cli("profile", "--backend", "valgrind", "--target", built / "libl.so", "-o", tmp_path / "p.json",
                "--", built / "prog", check=2, env=ENV)
    assert "EM_AARCH64" in r.stderr and "--backend qemu" in r.stderr
    assert not (tmp_path / "p.json").exists()


def test_qemu_backend_profile(built, tmp_path):
    need_tool("qemu-aarch64")
    from elflayout.profile import qemu

    why = qemu.status()
    if why:
        pytest.skip(why)
    out = tmp_path / "p.json"
    r = run_cli("profile", "--backend", "qemu", "--data", "--target", built / "libl.so", "-o", out, "--", built / "prog", check=0, env=ENV)
    assert "pages x/r/w/t 1/" in r.stdout, r.stdout
    doc = json.loads(out.read_text())
    md = doc["metadata"]
    assert md["backend"] == "qemu" and md["emulator"]["machine"] == "EM_AARCH64"
    assert md["emulator"]["time_comparable"] is False
    t = doc["targets"][0]
    names = {f["name"] for f in t["functions"]}
    assert "lib_used" in names and "lib_unused" not in names, names
    assert t["phases"]["main_is"] == "main()" and t["phases"]["main_start"] is not None
    assert {p["kind"] for p in t["pages"]} >= {"x", "r", "w"}
    # a program of another machine than the targets' is refused before it runs
    r = run_cli("profile", "--target", built / "libl.so", "-o", tmp_path / "q.json", "--", "true", check=2, env=ENV)
    assert "an EM_X86_64 program, the targets are EM_AARCH64" in r.stderr



PTRS_SRC = "\n".join(["static int v[64];"] + [f"int *const p{i}[] = {{" + ", ".join(f"&v[{j % 64}]" for j in range(200))
                                              + "};" for i in range(120)]
                     + ["int sum(int k) { return *p0[k % 200] + *p119[(k + 1) % 200]; }"])


def test_pack_relocs_relr_aarch64(built, tmp_path, monkeypatch):
    """RELATIVE relocations of an arm64 library packed into DT_RELR, checked with real
    loads under qemu; the cut keeps every PT_LOAD's offset ≡ vaddr mod its 64 KiB p_align."""
    need_tool("qemu-aarch64")
    from elflayout import layouts as L

    lib = _p64(tmp_path)
    out = tmp_path / "out" / "libp.so"
    out.parent.mkdir()
    r = run_cli("pack-relocs", "--check", "--json", "--format", "relr", "--min-glibc", "2.36", lib, "-o", out,
                check=0, env=ENV)
    check = json.loads(r.stdout)["check"]
    assert check["real_load"]["equal"] and check["real_load"]["compared_bytes"] > 0, check
    _, ph0, _ = L.read_headers(lib.read_bytes())
    _, ph, _ = L.read_headers(out.read_bytes())
    loads = ph[ph["p_type"] == L.PT_LOAD]
    assert all(int(p["p_vaddr"] - p["p_offset"]) % int(p["p_align"]) == 0 for p in loads)
    assert set(loads["p_align"].tolist()) == {65536} and len(loads) == int((ph0["p_type"] == L.PT_LOAD).sum()) + 1
    assert os.path.getsize(out) <= os.path.getsize(lib) - 65536
    ins = json.loads(run_cli("inspect", "--json", out, check=0).stdout)
    assert ins["relocations"]["relative"]["count"] == 0


def _p64(tmp_path) -> Path:
    """An arm64 library linked for 64 KiB pages, with RELATIVE relocations to pack."""
    need_tool("aarch64-linux-gnu-gcc")
    (tmp_path / "p.c").write_text(PTRS_SRC)
    lib = tmp_path / "libp.so"
    subprocess.run(["aarch64-linux-gnu-gcc", "-O1", "-fPIC", "-shared", "-Wl,-z,max-page-size=65536", "-o", lib,
                    "p.c"], cwd=tmp_path, check=True)
    return lib


def test_readahead_model_page_sizes(tmp_path):
    """read_ahead_kb in pages of the kernel's size, fault-around of 64 KiB, arm64's 64 KiB
    exec folios: one code fault far into the library, read_ahead_kb 128."""
    import numpy as np

    from elflayout.elfcore import ElfImage
    from elflayout.order.readahead import simulate

    lib = _p64(tmp_path)
    with ElfImage(lib) as img:
        x = next(s for s in img.loads if s.flags & 1)
        k = (x.offset + x.filesz - 1) // 4096  # the code segment's last 4 KiB page
        got = {ps: simulate(img, np.array([k]), np.array([b"x"]), 128, loader=False, page_size=ps)
               for ps in (4096, 16384, 65536)}
        for ps, r in got.items():
            assert r["pages"] <= -(-img.size // ps) and r["by_cause"]["read"] >= 1
        # 64 KiB pages: read() of page 0 reads ra_pages = 2 pages; the fault reads its page (the VMA ends there)
        assert got[65536]["reads"][0] == [0, 2]
        # 4 KiB: the exec read starts at the 64 KiB folio boundary (arm64 exec_folio_order)
        first_exec = next(p for p, n in got[4096]["reads"][1:])
        assert first_exec % 16 == 0 or first_exec == x.offset // 4096


def test_page_size_needs_congruent_segments(built, tmp_path):
    from elflayout.elfcore import ElfImage
    from elflayout.order.readahead import simulate

    lib = tmp_path / "l4k.so"
    subprocess.run(["aarch64-linux-gnu-gcc", "-O1", "-fPIC", "-shared", "-Wl,-z,max-page-size=4096",
                    "-Wl,-z,common-page-size=4096", "-o", lib, built / "l.c"], check=True)
    import numpy as np

    with ElfImage(lib) as img:
        if all((s.vaddr - s.offset) % 65536 == 0 for s in img.loads):
            pytest.skip("the linker aligned the segments to 64 KiB anyway")
        with pytest.raises(ElflayoutError, match="does not load with 64 KiB pages"):
            simulate(img, np.array([0]), np.array([b"r"]), 128, loader=True, page_size=65536)


def test_inspect_page_size(tmp_path):
    lib = _p64(tmp_path)
    doc = json.loads(run_cli("inspect", "--json", "--page-size", "64", lib, check=0).stdout)
    assert doc["metadata"]["page_size"] == 65536 and doc["file"]["pages"] == -(-os.path.getsize(lib) // 65536)
    assert all(s["pages"] is None or s["pages"][1] <= doc["file"]["pages"] for s in doc["sections"])
    assert "pages of 64 KiB" in run_cli("inspect", "--page-size", "64", lib, check=0).stdout


SELF_LIB_SRC = r"""
static int v[64];
static const char *names[] = {"alpha", "beta", "gamma", "delta"};
static int *const tab[] = {&v[1], &v[2], &v[3], &v[5], &v[8], &v[13], &v[21], &v[34]};
static int *const big[] = {""" + ", ".join(f"&v[{j % 64}]" for j in range(600)) + r"""};
static int seen;
__attribute__((constructor)) static void init(void) { for (int i = 0; i < 8; i++) *tab[i] = i + 1; seen = names[2][0]; }
int get(int i) { return *tab[i & 7] + seen + names[i & 3][1] + *big[(i * 37) % 600]; }
"""
SELF_MAIN_SRC = r"""
#include <stdio.h>
int get(int);
int main(void) { int s = 0; for (int i = 0; i < 64; i++) s += get(i) * 3; printf("%d\n", s); return 0; }
"""


def test_aarch64_applier_is_the_assembled_source(tmp_path):
    need_tool("aarch64-linux-gnu-as")
    from elflayout.relocs import selfapply

    (tmp_path / "a.s").write_text(selfapply.SOURCE_A64)
    subprocess.run(["aarch64-linux-gnu-as", tmp_path / "a.s", "-o", tmp_path / "a.o"], check=True)
    subprocess.run(["aarch64-linux-gnu-objcopy", "-O", "binary", "-j", ".text", tmp_path / "a.o", tmp_path / "a.bin"],
                   check=True)
    assert (tmp_path / "a.bin").read_bytes() == selfapply.CODE_A64
    r = subprocess.run(["aarch64-linux-gnu-readelf", "-r", tmp_path / "a.o"], capture_output=True, text=True)
    assert "There are no relocations" in r.stdout  # position-independent: placed as is


def test_self_form_aarch64_runs_identically(tmp_path):
    """The AArch64 applier (DT_INIT, RELRO re-protected at the run-time page size) under
    qemu: --check's real load equal, the program's output unchanged, a constructor
    reading relocated pointers included."""
    need_tool("aarch64-linux-gnu-gcc")
    need_tool("qemu-aarch64")
    from elflayout.relocs import simload

    (tmp_path / "s.c").write_text(SELF_LIB_SRC)
    (tmp_path / "m.c").write_text(SELF_MAIN_SRC)
    cc = "aarch64-linux-gnu-gcc"
    subprocess.run([cc, "-O1", "-fPIC", "-shared", "-o", "libs.so", "s.c"], cwd=tmp_path, check=True)
    subprocess.run([cc, "-O1", "-o", "main", "m.c", "-L.", "-ls"], cwd=tmp_path, check=True)
    (tmp_path / "out").mkdir()
    r = run_cli("pack-relocs", "--format", "self", "--min-glibc", "2.31", "--check", "--json", tmp_path / "libs.so",
                "-o", tmp_path / "out" / "libs.so", check=0, env=ENV)
    st = json.loads(r.stdout)
    assert st["form"] == "self" and st["packed"] > 600 and st["check"]["real_load"]["equal"]
    with simload.Loaded(tmp_path / "out" / "libs.so") as ld:
        ap = ld.applier()
        assert ap["machine"] == "EM_AARCH64" and ld.tag(simload.L.DT_RELR) is None
        assert ap["relro_len"] > 0  # the routine really re-protects RELRO
    run = ["qemu-aarch64", "-L", str(CROSS_ROOT), "-E"]
    want = subprocess.run(run + [f"LD_LIBRARY_PATH={tmp_path}", tmp_path / "main"], capture_output=True, text=True)
    got = subprocess.run(run + [f"LD_LIBRARY_PATH={tmp_path / 'out'}", tmp_path / "main"], capture_output=True,
                         text=True)
    assert got.returncode == 0 and got.stdout == want.stdout and want.stdout.strip()
    # the routine found qemu's 4 KiB pages (qemu answers a zero-length mprotect with ENOMEM,
    # the kernel with 0: only EINVAL means misaligned) and unprotected what glibc protected
    tr = subprocess.run(run[:1] + ["-strace"] + run[1:] + [f"LD_LIBRARY_PATH={tmp_path / 'out'}", tmp_path / "main"],
                        capture_output=True, text=True).stderr
    base = int(re.search(r"libs\.so\",O_RDONLY\|O_CLOEXEC\) = (\d+)\n.*?mmap\((?:NULL|0x[0-9a-f]+),\d+,[^)]*,\1,0\) = (0x[0-9a-f]+)",
                         tr, re.S).group(2), 16)
    rw = re.findall(r"mprotect\((0x[0-9a-f]+),(\d+),PROT_READ\|PROT_WRITE\) = 0", tr)
    assert (hex((base + ap["relro_page"]) & ~0xFFF), ) in {(hex(int(a, 16)),) for a, _ in rw}, (hex(base), rw)
    # an applier of another machine is caught by the check's table comparison
    from elflayout.relocs import selfapply

    bad = tmp_path / "bad.so"
    data = bytearray((tmp_path / "out" / "libs.so").read_bytes())
    with simload.Loaded(tmp_path / "out" / "libs.so") as ld:
        off = int(ld.img.vaddr_to_offset(ap["entry"] - selfapply.ENTRY))
    data[off + selfapply.ENTRY:off + selfapply.SIZE] = selfapply.CODE[selfapply.ENTRY:]
    bad.write_bytes(bytes(data))
    res = simload.compare(tmp_path / "libs.so", bad)
    assert not res["equal"] and any("EM_X86_64 code in an EM_AARCH64 library" in p for p in res["table_problems"])


def test_pack_relocs_check_under_a_given_emulator(tmp_path):
    need_tool("qemu-aarch64")
    lib = _p64(tmp_path)
    out = tmp_path / "o.so"
    r = run_cli("pack-relocs", "--check", "--json", "--format", "relr", "--min-glibc", "2.36",
                "--emulator", f"qemu-aarch64 -L {CROSS_ROOT}", lib, "-o", out, check=0,
                env={"ELFLAYOUT_ARM64_ROOT": str(tmp_path / "none")})  # the default root would be refused
    assert json.loads(r.stdout)["check"]["real_load"]["equal"]
    r = run_cli("pack-relocs", "--check", "--emulator", "qemu-nosuch -L /", lib, "-o", tmp_path / "p.so", check=2)
    assert "qemu-nosuch not found" in r.stderr and not (tmp_path / "p.so").exists()


def test_pack_relocs_min_glibc_of_the_arm64_root(tmp_path):
    # the default --min-glibc of an arm64 library is its root's glibc, not this machine's
    lib = _p64(tmp_path)
    r = run_cli("pack-relocs", lib, "-o", tmp_path / "o.so", check=2,
                env={"ELFLAYOUT_ARM64_ROOT": str(tmp_path / "empty-root")})
    assert "cannot find the glibc version of" in r.stderr and "empty-root" in r.stderr
    r = run_cli("pack-relocs", "--json", lib, "-o", tmp_path / "o.so", check=0, env=ENV)  # cross root: glibc 2.36
    assert json.loads(r.stdout)["form"] == "relr"


@pytest.mark.parametrize("pie", ["-pie", "-no-pie"])
def test_main_of_a_stripped_aarch64_executable(built, tmp_path, pie):
    """main() from _start (adrp+ldr of main's GOT slot in a PIE, adrp+add otherwise), so
    the profile of a stripped program still has its main phase."""
    from elflayout.profile import qemu
    from elflayout.profile.valgrind import main_offset

    exe, stripped = tmp_path / "prog", tmp_path / "prog.stripped"
    subprocess.run(["aarch64-linux-gnu-gcc", "-O1", pie, "-o", exe, built / "m.c", "-L", built, "-ll",
                    f"-Wl,-rpath,{built}"], check=True)
    subprocess.run(["aarch64-linux-gnu-strip", "-o", stripped, exe], check=True)
    assert main_offset(str(stripped)) is None and main_offset(str(exe)) is not None
    assert qemu.aarch64_main(str(stripped)) == main_offset(str(exe))
    assert qemu.aarch64_main(shutil.which("true")) is None
    if shutil.which("qemu-aarch64") and not qemu.status():
        out = tmp_path / "p.json"
        run_cli("profile", "--backend", "qemu", "--target", built / "libl.so", "-o", out, "--", stripped, check=0,
                env=ENV)
        assert json.loads(out.read_text())["targets"][0]["phases"]["main_is"] == "main()"


def bullseye_arm64_root() -> Path:
    """Debian 11's arm64 root (glibc 2.31, llvm-11, python3.9; scripts/bullseye-arm64-root.sh,
    cached); skips with the reason when it cannot be made."""
    if os.geteuid() != 0:
        pytest.skip("debootstrap needs root privileges")
    r = subprocess.run([str(Path(__file__).resolve().parents[1] / "scripts" / "bullseye-arm64-root.sh")],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode:
        pytest.skip(f"scripts/bullseye-arm64-root.sh failed: {r.stderr.strip()[-300:]}")
    return Path(r.stdout.strip().splitlines()[-1])


@pytest.mark.download
@pytest.mark.slow
@pytest.mark.root
def test_self_form_on_debian11_arm64_llvm(tmp_path):
    """Debian 11's arm64 libLLVM-11 on its own glibc 2.31 (no DT_RELR): the default form
    there is self; --check's real loads run the root's python3 under qemu; llc-11's
    output is unchanged."""
    need_tool("qemu-aarch64")
    root = bullseye_arm64_root()
    lib = (root / "usr/lib/aarch64-linux-gnu/libLLVM-11.so.1").resolve()
    out = tmp_path / "libLLVM-11.so.1"
    r = run_cli("pack-relocs", "--root", root, "--check", "--json", lib, "-o", out, check=0)
    st = json.loads(r.stdout)
    assert st["form"] == "self" and st["min_glibc"] == "2.31" and st["check"]["real_load"]["equal"]
    run = ["qemu-aarch64", "-L", str(root)]
    llc = [str(root / "usr/bin/llc-11"), "--version"]
    want = subprocess.run(run + llc, capture_output=True, text=True)
    got = subprocess.run(run + ["-E", f"LD_LIBRARY_PATH={tmp_path}"] + llc, capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout == want.stdout and "LLVM version 11" in want.stdout


# ---- link / order with the cross toolchain ------------------------------------------

CROSS_CC = "aarch64-linux-gnu-gcc"


def _lld_bin() -> str:
    """The directory of the newest ld.lld (lld >= 15 packs RELR): the cross gcc finds
    ld.lld only through -B (it looks for aarch64-linux-gnu-ld.lld on PATH)."""
    dirs = sorted(Path("/usr/lib").glob("llvm-*/bin/ld.lld"), key=lambda p: int(p.parts[3].split("-")[1]))
    if not dirs or int(dirs[-1].parts[3].split("-")[1]) < 15:
        pytest.skip("no lld >= 15 (apt-get install lld-19)")
    return str(dirs[-1].parent) + "/"


def _fuse(linker: str) -> list[str]:
    return ["-fuse-ld=lld", "-B" + _lld_bin()] if linker == "lld" else [f"-fuse-ld={linker}"]


@pytest.fixture(scope="module")
def synth_a64(tmp_path_factory):
    """The synthetic ground-truth library cross-compiled for arm64, its driver, and a qemu
    profile of the driver (constructors and main)."""
    need_tool(CROSS_CC)
    need_tool("qemu-aarch64")
    from elflayout.profile import qemu
    from elflayout.targets import synthetic as sy

    why = qemu.status()
    if why:
        pytest.skip(why)
    d = tmp_path_factory.mktemp("sy64")
    plan = sy.make_plan(8, 6, 3)
    srcs = [d / name for name in sy.write_sources(plan, d)]
    subprocess.run([CROSS_CC, "-c", *sy.CFLAGS, *map(str, srcs)], cwd=d, check=True)
    subprocess.run([CROSS_CC, "-c", "-O1", "-fPIE", "driver.c"], cwd=d, check=True)
    objs = [str(d / (s.stem + ".o")) for s in srcs]
    lib = d / sy.LIBNAME
    subprocess.run([CROSS_CC, "-shared", f"-Wl,-soname,{sy.LIBNAME}", "-o", lib, *objs], check=True)
    subprocess.run([CROSS_CC, "-o", d / "driver", d / "driver.o", f"-L{d}", "-lsynth", "-Wl,-rpath,$ORIGIN"],
                   check=True)
    prof = d / "p.json"
    run_cli("profile", "--backend", "qemu", "--target", lib, "-o", prof, "--", d / "driver", check=0, env=ENV)
    want = _run_a64(d / "driver", d)
    assert want.returncode == 0 and want.stdout.strip()
    return dict(dir=d, objs=objs, lib=lib, profile=prof, output=want.stdout)


def _run_a64(driver: Path, libdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["qemu-aarch64", "-L", str(CROSS_ROOT), "-E", f"LD_LIBRARY_PATH={libdir}", str(driver)],
                          capture_output=True, text=True)


def _linked(synth, tmp_path, linker, *opts, driver=None, check=0):
    """``elflayout link`` of the arm64 synthetic library; the result and its directory."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    cmd = driver or [CROSS_CC, "-shared", *_fuse(linker)]
    r = run_cli("link", "--profile", synth["profile"], *opts, "--", *cmd, f"-Wl,-soname,libsynth.so",
                f"-Wl,-Map={out / 'libsynth.so.map'}", "-o", out / "libsynth.so", *synth["objs"], check=check, env=ENV)
    return r, out


def _machine(path) -> str:
    return emulator.header(path)[0]


@pytest.mark.parametrize("linker", ["lld", "bfd", "gold"])
def test_link_orders_an_aarch64_library(synth_a64, tmp_path, linker):
    """The cross driver with each linker: the ordering is applied, the arm64 output
    checked (check-order), and the library runs under qemu with the same output."""
    r, out = _linked(synth_a64, tmp_path, linker)
    m = re.search(r"order: +([\d.]+)% in profile order", r.stderr)
    assert m and float(m.group(1)) >= 90, r.stderr
    assert _machine(out / "libsynth.so") == "EM_AARCH64"
    assert _run_a64(synth_a64["dir"] / "driver", out).stdout == synth_a64["output"]


def test_link_clang_target_aarch64(synth_a64, tmp_path):
    need_tool("clang-22")
    r, out = _linked(synth_a64, tmp_path, "lld", driver=["clang-22", "--target=aarch64-linux-gnu", "-shared",
                                                         "-fuse-ld=lld"])
    assert "applying lld ordering for lld" in r.stderr and _machine(out / "libsynth.so") == "EM_AARCH64"
    assert _run_a64(synth_a64["dir"] / "driver", out).stdout == synth_a64["output"]


def test_link_pack_self_injects_the_aarch64_applier(synth_a64, tmp_path):
    """--pack self on an arm64 link: the injected object is arm64's (an x86-64 one made
    lld fail with 'incompatible'), the routine is the AArch64 applier, --check's real load
    runs under qemu, and the library runs identically."""
    from elflayout.relocs import simload

    r, out = _linked(synth_a64, tmp_path, "lld", "--pack", "self", "--check")
    assert "self-applying form" in r.stderr and "real load equal" in r.stderr, r.stderr
    with simload.Loaded(out / "libsynth.so") as ld:
        assert ld.applier()["machine"] == "EM_AARCH64" and ld.tag(simload.L.DT_RELR) is None
    assert _run_a64(synth_a64["dir"] / "driver", out).stdout == synth_a64["output"]


def test_link_pack_relr_gnu_ld_aarch64_packs_post_link(synth_a64, tmp_path):
    """GNU ld 2.40 ignores -z pack-relative-relocs on aarch64 (a warning, exit 0): the
    output is packed post-link instead of written unpacked."""
    from elflayout import layouts as L
    from elflayout.relocs import simload

    r, out = _linked(synth_a64, tmp_path, "bfd", "--pack", "relr")
    assert "packed post-link" in r.stderr, r.stderr
    with simload.Loaded(out / "libsynth.so") as ld:
        assert ld.tag(L.DT_RELR) is not None and ld.tag(L.DT_RELRSZ)
    assert _run_a64(synth_a64["dir"] / "driver", out).stdout == synth_a64["output"]


def test_link_pack_self_gnu_ld_aarch64_refused(synth_a64, tmp_path):
    r, out = _linked(synth_a64, tmp_path, "bfd", "--pack", "self", check=2)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("elflayout: error: ") and "ignored -z pack-relative-relocs" in last
    assert not (out / "libsynth.so").exists()


@pytest.mark.parametrize("cmd,machine", [
    (["aarch64-linux-gnu-g++", "-shared", "-o", "x.so"], "EM_AARCH64"),
    (["clang-22", "--target=aarch64-linux-gnu", "-shared"], "EM_AARCH64"),
    (["clang", "-target", "aarch64-linux-gnu"], "EM_AARCH64"),
    (["ld.lld", "-m", "aarch64linux", "-shared"], "EM_AARCH64"),
    (["ld.bfd", "-maarch64linux"], "EM_AARCH64"),
    (["x86_64-linux-gnu-gcc-12", "-shared"], "EM_X86_64"),
    (["gcc", "-shared", "-mcpu=native"], emulator.host_machine()),
])
def test_target_machine_of_a_link_command(cmd, machine):
    from elflayout.toolchain import target_machine

    assert target_machine(cmd) == machine


def test_target_machine_from_the_objects(built, tmp_path):
    from elflayout.toolchain import target_machine

    subprocess.run([CROSS_CC, "-c", "-fPIC", "-o", tmp_path / "l.o", built / "l.c"], check=True)
    assert target_machine(["ld.lld", "-shared", "-o", "x.so", str(tmp_path / "l.o")]) == "EM_AARCH64"


def test_link_cross_gcc_lld_through_a_b_directory(synth_a64, tmp_path):
    """gcc 12 has no --ld-path: a -B directory whose ld is ld.lld makes the cross driver
    link with lld; link sees lld there (not the default GNU ld) and applies lld's ordering."""
    bdir = tmp_path / "bin"
    bdir.mkdir()
    (bdir / "ld").symlink_to(Path(_lld_bin()) / "ld.lld")
    r, out = _linked(synth_a64, tmp_path, "lld", "--linker", "lld", driver=[CROSS_CC, "-shared", f"-B{bdir}/"])
    assert "applying lld ordering for lld" in r.stderr, r.stderr
    assert "LLD" in subprocess.run(["readelf", "-p", ".comment", out / "libsynth.so"], capture_output=True,
                                   text=True).stdout
    assert _run_a64(synth_a64["dir"] / "driver", out).stdout == synth_a64["output"]


def test_dynstr_response_file_leaves_out_empty_names():
    # an arm64 program's .dynsym has unnamed section symbols: "-u " then swallowed the
    # next line and lld opened the name after it as a file
    from elflayout.order.dynstr import write_lld_undefined

    assert write_lld_undefined(["a", "", "b"], weak=["b"]) == "-u a\n-y b\n"
