"""elflayout split of AArch64 objects: each PC-relative form the assemblers resolve
(GNU as and clang resolve b, bl, b.cond, cbz, tbz, adr and literal ldr to a local
symbol of the same section; adrp and :lo12: never), mapping symbols and literal pools,
adrp/:lo12: pairs, bad input, and C libraries cross-compiled for arm64: split, checked
with lld, GNU ld and gold, and run under qemu linked in reversed function order."""

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import need_tool, run_cli
from elflayout.split.api import split_object
from elflayout.split.reader import read_object

AS = "aarch64-linux-gnu-as"
CC = "aarch64-linux-gnu-gcc"
CROSS_ROOT = Path("/usr/aarch64-linux-gnu")
R_CALL26, R_JUMP26 = 283, 282


def _asm(tmp: Path, src: str, *flags, name="t") -> Path:
    need_tool(AS)
    s, o = tmp / f"{name}.s", tmp / f"{name}.o"
    s.write_text(src)
    subprocess.run([AS, *flags, "-o", o, s], check=True)
    return o


def _two(body_a: str, body_b: str = "ret") -> str:
    """Static functions a and b in .text; a's body refers to b."""
    return f"""
    .text
    .type a,%function
a:  {body_a}
    ret
    .size a, .-a
    .type b,%function
b:  {body_b}
    .size b, .-b
"""


def _split(o: Path):
    raw = o.read_bytes()
    new, rep = split_object(raw, str(o))
    return read_object(new, "split"), rep


def _section(obj, name):
    return next(s for s in obj.sections if s.name == name)


def _relocs(obj, secname):
    rs = [s for s in obj.sections if s.name == ".rela" + secname]
    if not rs:
        return []
    r = obj.relas[rs[0].index]
    return [(int(o), int(i) & 0xFFFFFFFF, _sym(obj, int(i) >> 32), int(a))
            for o, i, a in zip(r["r_offset"], r["r_info"], r["r_addend"])]


def _sym(obj, i: int) -> str:
    """A symbol's name; a section symbol's section name."""
    return obj.sym_names[i] or obj.sections[int(obj.symbols["st_shndx"][i])].name


@pytest.mark.parametrize("insn,rtype,field_mask", [("bl b", R_CALL26, 0x03FFFFFF), ("b b", R_JUMP26, 0x03FFFFFF)])
def test_branch_and_call_become_relocations(tmp_path, insn, rtype, field_mask):
    obj, rep = _split(_asm(tmp_path, _two(insn)))
    assert {".text.a", ".text.b"} <= {s.name for s in obj.sections}
    assert _relocs(obj, ".text.a") == [(0, rtype, ".text.b", 0)]
    # the field is cleared as an assembler leaves it: a linker may OR the value in
    word = int.from_bytes(_section(obj, ".text.a").data[:4], "little")
    assert word & field_mask == 0
    assert rep.sections[0].new_relocations == 1


@pytest.mark.parametrize("insn,kind", [("b.eq b", "CONDBR19"), ("cbz x0, b", "CONDBR19"), ("cbnz w1, b", "CONDBR19"),
                                       ("tbz x0, #3, b", "TSTBR14"), ("tbnz w2, #1, b", "TSTBR14"),
                                       ("adr x1, b", "ADR_PREL_LO21"), ("ldr x3, b", "LD_PREL_LO19"),
                                       ("ldrsw x3, b", "LD_PREL_LO19")])
def test_references_without_veneer_keep_functions_together(tmp_path, insn, kind):
    # No linker adds a veneer for these: another order could put b out of their reach.
    obj, rep = _split(_asm(tmp_path, _two(insn)))
    sec = rep.sections[0]
    assert sec.sections == 1 and sec.units == 2, sec
    assert kind in sec.glued[0].reason and "veneer" in sec.glued[0].reason


def test_relocated_conditional_branch_to_a_global_keeps_them_together(tmp_path):
    # b.ne to a global of the same section keeps its relocation, and still reaches only 1 MiB
    src = _two("b.ne b") .replace(".type b,%function", ".globl b\n    .type b,%function")
    obj, rep = _split(_asm(tmp_path, src))
    sec = rep.sections[0]
    assert sec.sections == 1 and "CONDBR19" in sec.glued[0].reason


LITERAL_POOL = """
    .text
    .type a,%function
a:  ldr x0, .Lpool
    ldr w1, .Lpool + 8
    bl b
    ret
.Lpool:
    .quad 0x1122334455667788
    .word 0x94000001            // a bl pattern: data, never decoded as one
    .word 0
    .size a, .-a
    .type b,%function
b:  ret
    .size b, .-b
"""


def test_literal_pool_stays_with_its_function(tmp_path):
    o = _asm(tmp_path, LITERAL_POOL)
    obj, rep = _split(o)
    a = _section(obj, ".text.a")
    orig = read_object(o.read_bytes(), "o")
    assert a.size == 32 and a.data[16:32] == _section(orig, ".text").data[16:32]   # the pool, untouched
    assert _relocs(obj, ".text.a") == [(8, R_CALL26, ".text.b", 0)]                # only the real bl
    assert any(n == "$d" for n in obj.sym_names)


def test_code_without_mapping_symbols_is_kept_whole(tmp_path):
    o = _asm(tmp_path, _two("bl b"))
    raw = bytearray(o.read_bytes())
    obj = read_object(bytes(raw), "o")
    st = _section(obj, ".symtab")
    strtab = obj.sections[st.link]
    for i, n in enumerate(obj.sym_names):
        if n.startswith("$"):       # rename $x/$d to plain locals
            off = st_off = None
            off = strtab.data.index(n.encode() + b"\0")
            st_off = next(s for s in obj.sections if s.index == st.link)
            raw[_file_offset(o, st.link) + off] = ord("L")
    new, rep = split_object(bytes(raw), "o")
    assert rep.sections[0].kept_whole and "mapping symbols" in rep.sections[0].kept_whole


def _file_offset(o: Path, index: int) -> int:
    from elftools.elf.elffile import ELFFile
    with open(o, "rb") as f:
        return ELFFile(f).get_section(index)["sh_offset"]


ANCHOR = """
    .text
    .globl f, g
    .type f,%function
f:  adrp x0, .LANCHOR0
    ldr w1, [x0, :lo12:.LANCHOR0]
    ldr x2, [x0, :lo12:.LANCHOR0+16]
    ret
    .size f, .-f
    .type g,%function
g:  adrp x3, .LANCHOR0+32
    ldr x3, [x3, :lo12:.LANCHOR0+32]
    ret
    .size g, .-g
    .data
    .align 3
.LANCHOR0:
    .type o1,%object
o1: .quad 1, 2
    .size o1, 8                 // its end is not o2's start: only the pair joins them
    .type o2,%object
o2: .quad 3, 4
    .size o2, 16
    .type o3,%object
o3: .quad 5
    .size o3, 8
"""


def test_adrp_and_its_low_part_stay_in_one_section(tmp_path):
    # GCC's section anchors: one adrp of .LANCHOR0 serves o1 and o2; g's own pair reaches o3
    obj, rep = _split(_asm(tmp_path, ANCHOR))
    data = next(s for s in rep.sections if s.name == ".data")
    assert data.units == 3 and data.sections == 2, data
    assert "adrp" in data.glued[0].reason and (data.glued[0].first, data.glued[0].last) == ("o1", "o2")
    assert {".data.o1", ".data.o3", ".text.f", ".text.g"} <= {s.name for s in obj.sections}


def test_address_of_a_static_object_may_be_an_anchor(tmp_path):
    # add :lo12: of o1 may be GCC's anchor: o2 (16 bytes on) is reached by an immediate,
    # o3 (past 4095 bytes) cannot be
    src = ANCHOR.replace("ldr x2, [x0, :lo12:.LANCHOR0+16]", "add x2, x0, :lo12:.LANCHOR0\n    ldr x2, [x2, #16]")
    src = src.replace("adrp x3, .LANCHOR0+32", "adrp x3, o3").replace(":lo12:.LANCHOR0+32", ":lo12:o3")
    src = src.replace("o3: .quad 5", ".space 8192\no3: .quad 5").replace(".type o3", ".globl o3\n    .type o3")
    obj, rep = _split(_asm(tmp_path, src))
    data = next(s for s in rep.sections if s.name == ".data")
    assert data.units == 3 and data.sections == 2, data
    assert any("anchor" in g.reason for g in data.glued), data.glued


TWO_PAIRS = """
    .text
    .globl f
    .type f,%function
f:  adrp x0, o1
    ldr w1, [x0, :lo12:o1]
    cbz w1, 1f
    adrp x0, o3
{entry}
    ldr w2, [x0, :lo12:o3]
1:  ret
    .size f, .-f
    .data
    .type o1,%object
o1: .quad 1
    .size o1, 8
    .type o2,%object
o2: .quad 2
    .size o2, 8
    .type o3,%object
o3: .quad 3
    .size o3, 8
"""


@pytest.mark.parametrize("entry,sections", [("", 3), ("2:  cbnz w2, 2b", 1)])
def test_each_low_part_paired_with_the_adrp_before_it(tmp_path, entry, sections):
    # one register, two pairs: each :lo12: is fed by the adrp just before it, so o1, o2
    # and o3 part; a branch into the stretch between them (2:) makes that unprovable
    obj, rep = _split(_asm(tmp_path, TWO_PAIRS.format(entry=entry)))
    data = next(s for s in rep.sections if s.name == ".data")
    assert data.units == 3 and data.sections == sections, data


@pytest.mark.parametrize("flags,message", [(["-EB"], "big-endian AArch64"), (["-mabi=ilp32"], "ILP32 AArch64")])
def test_big_endian_and_ilp32_refused(tmp_path, flags, message):
    o = _asm(tmp_path, _two("bl b"), *flags)
    r = run_cli("split", o, "-o", tmp_path / "out", check=2)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("elflayout:")]
    assert len(errors) == 1 and message in errors[0] and str(o) in errors[0], r.stderr
    assert not (tmp_path / "out").exists()


# -- C libraries cross-compiled for arm64 -----------------------------------------

def _lld_dir() -> str:
    from elflayout.toolchain import newest_lld_dir
    return f"-B{newest_lld_dir()}/"


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """The synthetic ground-truth library's objects built for arm64 without
    -ffunction-sections, as an archive."""
    need_tool(CC)
    from elflayout.targets import synthetic as sy
    d = tmp_path_factory.mktemp("sysplit")
    plan = sy.make_plan(8, 6, 3)
    srcs = [d / name for name in sy.write_sources(plan, d)]
    flags = [f for f in sy.CFLAGS if f not in ("-ffunction-sections", "-fdata-sections")]
    subprocess.run([CC, "-c", *flags, *map(str, srcs)], cwd=d, check=True)
    lib = d / "libsynth.a"
    subprocess.run(["ar", "rcs", lib, *[d / (s.stem + ".o") for s in srcs]], check=True)
    return lib


def test_synthetic_library_split_checked_with_three_linkers(synth, tmp_path):
    r = run_cli("split", synth, "-o", tmp_path / "out", "--check", "--linker", "lld", "--linker", "bfd",
                "--linker", "gold", check=0)
    assert r.stdout.count("original-order links identical") == 3, r.stdout
    assert "kept whole in" not in r.stdout, r.stdout
    secs = subprocess.run(["readelf", "-SW", tmp_path / "out" / "libsynth.a"], capture_output=True, text=True).stdout
    assert secs.count("] .text.") >= 48, secs      # 8 objects of 6 functions


def test_synthetic_library_other_orders_compared_by_meaning(synth, tmp_path):
    r = run_cli("split", synth, "-o", tmp_path / "out", "--check", "--linker", "lld", "--linker", "bfd",
                "--linker", "gold", check=0)
    # GNU ld has no ordering file and gold misplaces emitted AArch64 relocations when it
    # reorders: lld links the other orders once for all three.
    for order in ("reversed", "shuffled"):
        line = next(x for x in r.stdout.splitlines() if f"check (lld, {order} order): same meaning:" in x)
        assert int(line.split("same meaning: ")[1].split()[0]) >= 48, line
    assert "not compared: their comparison" not in r.stdout, r.stdout


# -- the other-order comparison sees a changed PC-relative field ---------------------

def _emitted(path: Path, rtype: int):
    """(place, file offset, word) of the emitted ``rtype`` relocations in .text."""
    import io
    from elftools.elf.elffile import ELFFile
    raw = path.read_bytes()
    elf = ELFFile(io.BytesIO(raw))
    text, rela = elf.get_section_by_name(".text"), elf.get_section_by_name(".rela.text")
    for r in rela.iter_relocations():
        if r["r_info_type"] == rtype:
            off = text["sh_offset"] + r["r_offset"] - text["sh_addr"]
            yield r["r_offset"], off, int.from_bytes(raw[off:off + 4], "little")


def _swap_call(path: Path) -> None:
    """Make the first call reach another call's target instead."""
    calls = [(p, off, w, p + (((w & 0x3FFFFFF) ^ 0x2000000) - 0x2000000) * 4) for p, off, w in _emitted(path, R_CALL26)]
    p, off, w, first = calls[0]
    t = next(t for *_, t in calls if t != first)
    raw = bytearray(path.read_bytes())
    raw[off:off + 4] = ((w & 0xFC000000) | (((t - p) >> 2) & 0x3FFFFFF)).to_bytes(4, "little")
    path.write_bytes(raw)


def _next_page(path: Path) -> None:
    """Make the first adrp of a symbol's page load the page after it."""
    _, off, w = next(_emitted(path, 275))     # R_AARCH64_ADR_PREL_PG_HI21
    imm = ((((w >> 5) & 0x7FFFF) << 2) | ((w >> 29) & 3)) + 1
    w = (w & ~0x60FFFFE0) | ((imm & 3) << 29) | (((imm >> 2) & 0x7FFFF) << 5)
    raw = bytearray(path.read_bytes())
    raw[off:off + 4] = w.to_bytes(4, "little")
    path.write_bytes(raw)


@pytest.mark.parametrize("damage, expect", [(_swap_call, "bl "), (_next_page, "loads page")])
def test_changed_pc_relative_field_in_other_order_is_not_equivalent(synth, tmp_path, monkeypatch, damage, expect):
    from elflayout.split import equivalence
    run_cli("split", synth, "-o", tmp_path / "out", check=0)
    split = [tmp_path / "out" / "libsynth.a"]
    assert all(r.identical for r in equivalence.equivalent([synth], split, "lld", "shared"))
    link = equivalence._link

    def damaged(paths, linker, flags, style, out, *rest):
        r = link(paths, linker, flags, style, out, *rest)
        if r.ok and out.name == "reversed.out":
            damage(out)
        return r

    monkeypatch.setattr(equivalence, "_link", damaged)
    rev, shuf = equivalence.equivalent([synth], split, "lld", "shared")
    assert shuf.identical, shuf.first_difference
    assert not rev.identical and rev.first_difference.startswith("function "), rev.first_difference
    assert expect in rev.first_difference, rev.first_difference


def test_static_calls_reversed_order_run_under_qemu(tmp_path):
    """test_split's library (static calls the assembler resolved, a switch, pointers in
    data, a constructor) for arm64: split, linked in reversed function and data order
    with each linker, run under qemu: the same output."""
    need_tool(CC)
    need_tool("qemu-aarch64")
    from test_split import LIB_C, MAIN_C
    for name, src in (("lib", LIB_C), ("main", MAIN_C)):
        (tmp_path / f"{name}.c").write_text(src)
        subprocess.run([CC, "-O2", "-fPIC", "-c", "-o", tmp_path / f"{name}.o", tmp_path / f"{name}.c"], check=True)
    r = run_cli("split", tmp_path / "lib.o", "-o", tmp_path / "out", "--check", "--linker", "lld", "--linker", "bfd",
                "--linker", "gold", check=0)
    assert r.stdout.count("original-order links identical") == 3, r.stdout
    split = tmp_path / "out" / "lib.o"
    obj = read_object(split.read_bytes(), "s")
    texts = [s.name for s in obj.sections if s.name.startswith((".text.", ".data.", ".rodata."))]
    assert {".text.sq", ".text.add3", ".text.sw", ".text.lib_run"} <= set(texts), texts
    new = sum(1 for s in obj.sections if s.name.startswith(".rela.text.")
              for rr in obj.relas[s.index] if int(rr["r_info"]) & 0xFFFFFFFF in (R_CALL26, R_JUMP26)
              and _sym(obj, int(rr["r_info"]) >> 32).startswith(".text."))
    assert new >= 2, new            # sq and add3 are called by section, not by name
    want = _run(tmp_path, "orig", [tmp_path / "lib.o"], [])
    order = tmp_path / "rev.sections"
    order.write_text("\n".join(reversed(texts)) + "\n")
    syms = [n for s, n in _defined(split)]
    sym_order = tmp_path / "rev.order"
    sym_order.write_text("\n".join(reversed(syms)) + "\n")
    for flags in (["-fuse-ld=lld", _lld_dir(), f"-Wl,--symbol-ordering-file={sym_order}"],
                  ["-fuse-ld=gold", f"-Wl,--section-ordering-file={order}"], ["-fuse-ld=bfd"]):
        assert _run(tmp_path, flags[0][9:], [split], flags) == want, flags


def _defined(o: Path):
    r = subprocess.run(["aarch64-linux-gnu-nm", "--defined-only", o], capture_output=True, text=True, check=True)
    return [(ln.split()[1], ln.split()[-1]) for ln in r.stdout.splitlines() if ln.split()[1] in "tTdDbBrR"]


def _run(tmp: Path, name: str, objs, flags) -> str:
    exe = tmp / f"prog-{name}"
    subprocess.run([CC, "-o", exe, *map(str, objs), tmp / "main.o", *flags], check=True)
    r = subprocess.run(["qemu-aarch64", "-L", str(CROSS_ROOT), str(exe)], capture_output=True, text=True, check=True)
    return r.stdout


def test_damaged_arm64_objects_never_exit_3(tmp_path):
    """Byte flips of an arm64 object through split: bad input or a split, never our bug."""
    from elflayout.errors import ElflayoutError
    rng = np.random.default_rng(30)
    raws = [_asm(tmp_path, src, name=f"t{i}").read_bytes() for i, src in enumerate((LITERAL_POOL, ANCHOR))]
    split = 0
    for k in range(400):
        b = bytearray(raws[k % 2])
        for k in rng.integers(0, len(b), 4):
            b[int(k)] = int(rng.integers(0, 256))
        try:
            split_object(bytes(b), "damaged.o")
            split += 1
        except ElflayoutError:
            pass
    assert split > 50, split        # many flips leave an object split reads


# -- Debian's arm64 libpython3.11-pic.a -------------------------------------------

ARM64_PIC = "usr/lib/python3.11/config-3.11-aarch64-linux-gnu/libpython3.11-pic.a"
LAUNCHER_C = "extern int Py_BytesMain(int, char **);\nint main(int c, char **v) { return Py_BytesMain(c, v); }\n"
WORK = ("import json, decimal, re, struct, asyncio, _decimal, _json; print(json.dumps({'a': [1, 2.5]}), "
        "decimal.Decimal(1) / 7, re.sub(r'(\\w)(\\d)', r'\\2\\1', 'a1 b2'), struct.pack('<iq', 1, -2).hex(), "
        "decimal.Decimal is _decimal.Decimal, sum(i * i for i in range(10000)))")


def _reversed_names(archive: Path, kind: str) -> list[str]:
    if kind == "symbols":
        out = [ln.split()[2] for ln in subprocess.run(["aarch64-linux-gnu-nm", "--defined-only", archive],
                                                      capture_output=True, text=True).stdout.splitlines()
               if len(ln.split()) == 3 and ln.split()[1] in "tTdDbBrR"]
    else:
        out = [ln.split()[1] for ln in subprocess.run(["readelf", "-SW", archive], capture_output=True,
                                                      text=True).stdout.splitlines()
               if "] ." in ln and ".rela" not in ln and ln.split()[1].startswith((".text.", ".data.", ".rodata."))]
    return list(dict.fromkeys(reversed(out)))


def _python_under_qemu(d: Path, archive: Path, runtime: Path, flags) -> str:
    libs = [f"-L{runtime}/lib/aarch64-linux-gnu", "-l:libexpat.so.1", "-l:libz.so.1", "-lm"]
    d.mkdir()
    lib = d / "libpython3.11.so.1.0"
    subprocess.run([CC, "-shared", "-o", lib, "-Wl,-soname,libpython3.11.so.1.0", *flags, "-Wl,--whole-archive",
                    archive, "-Wl,--no-whole-archive", *libs], check=True)
    (d / "launcher.c").write_text(LAUNCHER_C)
    subprocess.run([CC, "-o", d / "python", d / "launcher.c", lib, f"-Wl,-rpath-link,{runtime}/lib/aarch64-linux-gnu"],
                   check=True)
    r = subprocess.run(["qemu-aarch64", "-L", str(CROSS_ROOT), "-E",
                        f"LD_LIBRARY_PATH={d}:{runtime}/lib/aarch64-linux-gnu", "-E", f"PYTHONHOME={runtime}/usr",
                        str(d / "python"), "-c", WORK], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.slow
@pytest.mark.download
def test_arm64_libpython_split_checked_and_reversed_runs_under_qemu(tmp_path):
    """Debian's arm64 libpython3.11-pic.a: --check identical with lld, GNU ld and gold;
    linked in reversed function and data order (lld, gold), Python runs the same."""
    need_tool(CC)
    need_tool("qemu-aarch64")
    from elflayout.targets import fetch_debs
    pic = fetch_debs(["libpython3.11-dev"], "libpython3.11-arm64", arch="arm64") / ARM64_PIC
    runtime = fetch_debs(["libpython3.11-stdlib", "libpython3.11-minimal", "libexpat1", "zlib1g"],
                         "libpython3.11-arm64-runtime", arch="arm64")
    r = run_cli("split", pic, "-o", tmp_path / "out", "--check", "--linker", "lld", "--linker", "bfd",
                "--linker", "gold", check=0)
    assert r.stdout.count("original-order links identical") == 3, r.stdout
    split = tmp_path / "out" / pic.name
    want = _python_under_qemu(tmp_path / "orig", pic, runtime, [])
    assert "True" in want
    sym, sec = tmp_path / "rev.order", tmp_path / "rev.sections"
    sym.write_text("\n".join(_reversed_names(split, "symbols")) + "\n")
    sec.write_text("\n".join(_reversed_names(split, "sections")) + "\n")
    assert _python_under_qemu(tmp_path / "lld", split, runtime, ["-fuse-ld=lld", _lld_dir(),
                              f"-Wl,--symbol-ordering-file={sym}", "-Wl,--no-warn-symbol-ordering"]) == want
    assert _python_under_qemu(tmp_path / "gold", split, runtime, ["-fuse-ld=gold",
                              f"-Wl,--section-ordering-file={sec}"]) == want
