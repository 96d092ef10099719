"""elflayout split on damaged and unusual inputs: bounded refusals with one line naming the
file, every linker's own verdict in ``--check`` (with the linker's first error line when
it cannot link the originals), non-UTF-8 symbol names, gold's section-name prefixes."""

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import ROOT, need_tool, run_cli

from elflayout import toolchain
from elflayout.layouts import SYM64
from elflayout.split.extents import name_conflict


def _limited():
    """Child limits: a refusal must come long before 1 GB of memory."""
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _split(*args, timeout=60):
    """``elflayout split ARGS`` in a subprocess with a memory limit and a timeout."""
    env = {"PYTHONPATH": str(ROOT / "tools"), "PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "elflayout", "split", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout, preexec_fn=_limited)


def _cc(tmp, name, src, *flags, lang="c"):
    c = tmp / f"{name}.{lang}"
    c.write_text(src)
    o = tmp / f"{name}.o"
    subprocess.run(["gcc", "-O2", "-c", *flags, "-o", o, c], check=True, capture_output=True)
    return o


def _one_line_refusal(r, name):
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("elflayout")]
    assert len(lines) == 1 and name in lines[0] and "Traceback" not in r.stderr, r.stderr
    return lines[0]


FUNCS_C = r"""
__attribute__((noinline)) int a1(int x) { return x + 1; }
__attribute__((noinline)) int exit_handler(int x) { return x * 3; }
__attribute__((noinline)) int hotplug(int x) { return x * 5; }
int b2(int x) { return a1(x) + exit_handler(x) + hotplug(x); }
"""


@pytest.fixture
def funcs_o(tmp_path):
    return _cc(tmp_path, "funcs", FUNCS_C, "-fPIC")


@pytest.mark.parametrize("size", [b"-60", b"-61", b"-100", b"+10", b"0x10", b"1 2"])
def test_archive_member_size_not_decimal_refused(tmp_path, funcs_o, size):
    a = tmp_path / "lib.a"
    subprocess.run(["ar", "rcS", a, funcs_o], check=True)
    raw = bytearray(a.read_bytes())
    raw[8 + 48:8 + 58] = size.ljust(10)
    a.write_bytes(raw)
    out = tmp_path / "out"
    msg = _one_line_refusal(_split(a, "-o", out, timeout=30), str(a))
    assert "at offset 8" in msg and "bad size" in msg, msg
    assert not out.exists()


def test_archive_member_name_not_a_file_name(tmp_path, funcs_o):
    a = tmp_path / "lib.a"
    subprocess.run(["ar", "rcS", a, funcs_o], check=True)
    raw = bytearray(a.read_bytes())
    raw[8:8 + 16] = b"../x.o/".ljust(16)
    a.write_bytes(raw)
    msg = _one_line_refusal(_split(a, "-o", tmp_path / "out"), str(a))
    assert "not a file name" in msg


def _symtab(path):
    with open(path, "rb") as f:
        elf = ELFFile(f)
        st = elf.get_section_by_name(".symtab")
        return st["sh_offset"], [s.name for s in st.iter_symbols()], elf.num_sections()


def test_symbol_section_index_past_the_table_refused(tmp_path, funcs_o):
    off, names, nsec = _symtab(funcs_o)
    raw = bytearray(funcs_o.read_bytes())
    k = names.index("a1")
    at = off + k * SYM64.itemsize + SYM64.fields["st_shndx"][1]
    raw[at:at + 2] = (nsec + 100).to_bytes(2, "little")
    funcs_o.write_bytes(raw)
    msg = _one_line_refusal(_split(funcs_o, "-o", tmp_path / "out"), str(funcs_o))
    assert "past the" in msg and "a1" in msg


def test_gold_prefix_grouping_glues_exit_and_hot_functions(tmp_path, funcs_o):
    need_tool("ld.gold")
    assert name_conflict(".text", "exit_handler") and name_conflict(".text", "hotplug")
    assert name_conflict(".text", "exiting_soon") and name_conflict(".text", "sorted_list")
    assert name_conflict(".text", "a1") is None and name_conflict(".text", "ex") is None
    r = _split(funcs_o, "-o", tmp_path / "out", "--check", "--linker", "gold", "--linker", "bfd", "--linker", "lld")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("original-order links identical") == 3


IFUNC_C = r"""
static int impl(int x) { return x + 1; }
static void *resolve(void) { return (void *)impl; }
int fi(int x) __attribute__((ifunc("resolve")));
__attribute__((noinline)) int other(int x) { return x * 2; }
int use(int x) { return fi(x) + other(x); }
"""


def test_check_static_link_with_irelative_plt(tmp_path):
    """Non-PIC code calling an ifunc: gold's static link has a .rela.plt of IRELATIVE
    relocations with no symbol table linked (sh_link 0)."""
    need_tool("ld.gold")
    o = _cc(tmp_path, "ifunc", IFUNC_C, "-fno-pic")
    r = _split(o, "-o", tmp_path / "out", "--check", "--linker", "gold")
    assert r.returncode == 0, r.stderr
    assert "check (gold, static link): original-order links identical" in r.stdout


@pytest.mark.slow
def test_check_libmvec_with_gold(tmp_path):
    lib = Path("/usr/lib/x86_64-linux-gnu/libmvec.a")
    if not lib.exists():
        pytest.skip("libmvec.a is not installed (libc6-dev)")
    need_tool("ld.gold")
    r = _split(lib, "-o", tmp_path / "out", "--check", "--linker", "gold", timeout=600)
    assert r.returncode == 0, r.stderr


DTOR_CC = r"""
struct S { S(); ~S(); int v; };
S::S() : v(1) {}
S::~S() { v = 0; }
static S s;
int get() { return s.v; }
"""


def test_check_stands_in_for_dso_handle(tmp_path):
    """A static object with a destructor needs the hidden __dso_handle of crtbegin, which
    gold and GNU ld refuse undefined (-nostdlib): the check links a weak stand-in on both
    sides and says so, instead of failing on every C++ archive."""
    need_tool("ld.gold")
    need_tool("ld.lld")
    o = _cc(tmp_path, "dtor", DTOR_CC, "-fPIC", lang="cc")
    r = _split(o, "-o", tmp_path / "out", "--check", "--linker", "gold", "--linker", "bfd", "--linker", "lld",
               "--json")
    assert r.returncode == 0, r.stderr
    checks = {c["linker"]: c for c in json.loads(r.stdout)["check"]}
    assert all(c["identical"] for c in checks.values())
    assert checks["gold"]["stand_in"] == checks["bfd"]["stand_in"] == "__dso_handle"
    assert checks["lld"]["stand_in"] is None
    assert (tmp_path / "out" / "dtor.o").exists()


HIDDEN_INIT_S = r"""
    .text
    .globl f, g
    .type f,@function
f:  call _init
    ret
    .size f, .-f
    .type g,@function
g:  movl $1, %eax
    ret
    .size g, .-g
    .hidden _init
    .section .note.GNU-stack,"",@progbits
"""


def test_check_nothing_checked_is_exit_1_with_each_linkers_error_and_json(tmp_path):
    """A hidden undefined symbol (libc.a's _init, from crti.o): no linker can link the
    originals. Each linker's own first error line is reported (not collect2's summary),
    nothing is proved, nothing written, exit 1 (not "bad input"), and --json still prints
    the document."""
    need_tool("ld.gold")
    need_tool("ld.lld")
    s = tmp_path / "h.s"
    s.write_text(HIDDEN_INIT_S)
    o = tmp_path / "h.o"
    subprocess.run(["gcc", "-c", "-o", o, s], check=True)
    out = tmp_path / "out"
    r = _split(o, "-o", out, "--check", "--linker", "gold", "--linker", "lld", "--linker", "bfd", "--json")
    assert r.returncode == 1, r.stderr
    msg = [ln for ln in r.stderr.splitlines() if ln.startswith("elflayout")]
    assert len(msg) == 1 and msg[0].startswith("elflayout: nothing checked: ") and "collect2" not in msg[0]
    for linker, line in (("gold", "hidden symbol '_init' is not defined locally"),
                         ("lld", "ld.lld: error: undefined hidden symbol: _init"), ("bfd", "undefined reference")):
        assert f"could not check with {linker}: " in msg[0] and line in msg[0], linker
    doc = json.loads(r.stdout)
    assert doc["written"] is False and all(c["could_not_check"] for c in doc["check"])
    assert doc["summary"]["objects"] == 1
    assert not out.exists()


def _result(linker, identical=True, why=None, diff=None):
    from elflayout.split.check import CheckResult

    return CheckResult(linker, None if why else "shared", identical, 1, 1, 1, diff, could_not_check=why)


def test_verdict_each_linker_counts():
    """One linker that cannot link the originals hides neither the others' passes nor
    their differences."""
    from elflayout.split.check import verdict

    assert verdict([_result("lld"), _result("gold", False, "error: x")]) is None
    why = verdict([_result("lld", False, diff="section .text: first different byte at 0x10"),
                   _result("gold"), _result("bfd", False, "error: y")])
    assert why.startswith("check failed: differs with lld: section .text") and "identical with gold" in why \
        and "could not check with bfd: error: y" in why
    assert verdict([_result("gold", False, "error: x")]).startswith("nothing checked: could not check with gold")


NONPIC_C = r"""
int arrQQQQ[16];
__attribute__((noinline)) int getQQQQ(int i) { return arrQQQQ[i]; }
int sum(void) { int s = 0; for (int i = 0; i < 16; i++) s += getQQQQ(i); return s; }
"""


def test_non_utf8_symbol_names_checked_and_printed(tmp_path):
    """Non-PIC code with symbols whose names are not UTF-8: the shared link fails with
    the name in its message (decoded as escapes), the static link is compared."""
    need_tool("ld.lld")
    o = _cc(tmp_path, "nonpic", NONPIC_C, "-fno-pic")
    o.write_bytes(o.read_bytes().replace(b"QQQQ", b"\xe1\xe1\xe1\xe1"))
    for linker in ("lld", "bfd"):
        r = _split(o, "-o", tmp_path / linker, "--check", "--linker", linker, "-v")
        assert r.returncode == 0, r.stderr
        assert f"check ({linker}, static link): original-order links identical" in r.stdout
    r = _split(o, "-o", tmp_path / "json", "--json")
    names = {s["name"] for i in json.loads(r.stdout)["inputs"] for ob in i["objects"] for s in ob["sections"]}
    assert ".text" in names


def test_first_error_line():
    bfd = ("/usr/bin/ld: a.o: in function `main':\n"
           "a.c:(.text+0xa): undefined reference to `f'\n"
           "collect2: error: ld returned 1 exit status\n")
    assert toolchain.first_error(bfd) == "a.c:(.text+0xa): undefined reference to `f'"
    gold = ("/usr/bin/ld.gold: warning: something\n"
            "/usr/bin/ld.gold: error: hidden symbol '__dso_handle' is not defined locally\n"
            "collect2: error: ld returned 1 exit status\n")
    assert "hidden symbol '__dso_handle'" in toolchain.first_error(gold)
    lld = "ld.lld: error: undefined symbol: g\n>>> referenced by a.c\n>>>               a.o:(main)\n"
    assert toolchain.first_error(lld) == "ld.lld: error: undefined symbol: g"
    assert toolchain.first_error("collect2: error: ld returned 1 exit status\n") == \
        "collect2: error: ld returned 1 exit status"
    assert toolchain.first_error("") == ""


def test_link_decodes_non_utf8_output(tmp_path):
    o = _cc(tmp_path, "nonpic", NONPIC_C, "-fno-pic")
    o.write_bytes(o.read_bytes().replace(b"QQQQ", b"\xe1\xe1\xe1\xe1"))
    r = toolchain.link("bfd", ["-shared", "-nostdlib", "-o", tmp_path / "x.so", o])
    assert not r.ok and "\\xe1" in r.error


def test_pack_relocs_json_when_the_check_fails(tmp_path, monkeypatch, capsys):
    """--json prints the document when the check refuses the output (exit 1 or 2)."""
    import argparse

    from elflayout.errors import ElflayoutError, Finding
    from elflayout.relocs import pack_cli

    lib = Path("/usr/lib/x86_64-linux-gnu/libz.so.1")
    if not lib.exists():
        pytest.skip("libz.so.1 is not installed")
    p = argparse.ArgumentParser()
    pack_cli.add_arguments(p)
    for exc, status in ((Finding("check failed: relocated images differ"), "check-failed"),
                        (ElflayoutError(f"{lib}: the input itself does not load (x)"), "check-refused")):
        def boom(src, tmp, *rest, exc=exc):
            raise exc

        monkeypatch.setattr(pack_cli, "_verify", boom)
        out = tmp_path / f"{status}.so"
        args = p.parse_args([str(lib), "-o", str(out), "--check", "--json", "--min-glibc", "2.36"])
        with pytest.raises(type(exc)):
            pack_cli.run(args)
        doc = json.loads(capsys.readouterr().out)
        assert doc["status"] == status and doc["output"] is None and str(exc) in doc["message"]
        assert not out.exists()


def test_split_help_documents_exit_statuses():
    r = run_cli("split", "--help", check=0)
    assert "no linker could link the originals" in r.stdout.replace("\n", " ").replace("  ", " ")


def _set_section_align(path, name, align):
    with open(path, "rb") as f:
        elf = ELFFile(f)
        shoff = elf.header.e_shoff
        k = next(i for i, s in enumerate(elf.iter_sections()) if s.name == name)
    from elflayout.layouts import SHDR64

    raw = bytearray(path.read_bytes())
    at = shoff + k * SHDR64.itemsize + SHDR64.fields["sh_addralign"][1]
    raw[at:at + 8] = align.to_bytes(8, "little")
    path.write_bytes(raw)


def test_huge_section_alignment_does_not_pad_the_file(tmp_path, funcs_o):
    """A (damaged) alignment of 2^40 once made the writer pad the output towards 1 TB."""
    _set_section_align(funcs_o, ".note.GNU-stack", 1 << 40)
    r = _split(funcs_o, "-o", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "funcs.o").stat().st_size < 2 * funcs_o.stat().st_size + 8192


def test_alignment_not_a_power_of_two_refused(tmp_path, funcs_o):
    _set_section_align(funcs_o, ".note.GNU-stack", 101155069755393)
    msg = _one_line_refusal(_split(funcs_o, "-o", tmp_path / "out"), str(funcs_o))
    assert "not a power of two" in msg


def test_toolchain_names_the_linker_of_a_command():
    assert [toolchain.command_linker(p) for p in ("/usr/bin/ld", "ld.gold", "ld.lld", "gcc")] == \
        ["bfd", "gold", "lld", None]
    assert [toolchain.fuse_ld_linker(v) for v in ("ld", "bfd", "gold", "/usr/bin/ld.lld", "mold")] == \
        ["bfd", "bfd", "gold", "lld", "mold"]
