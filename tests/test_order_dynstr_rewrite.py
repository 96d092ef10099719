"""order.dynstr_order: the strings ld.so reads first in a gold-linked .dynstr after the
link, every reference naming the same bytes (gold's shared suffixes too), the program
running the same; damaged or unknown input refused with nothing written; ``link``'s
default step with gold."""

import json
import shutil
import struct
import subprocess

import pytest

from conftest import need_tool, run_cli

from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.layouts import DT_RPATH, DT_RUNPATH
from elflayout.order import dynstr, dynstr_order

N_FUNCS = 4000  # long names: about 90 pages of .dynstr, hash-ordered by gold
CALLED = (5, 480, 1911, 2377, 3999)
LONG = "a_rather_long_exported_function_name_" * 2 + "number_"


def _sources(tmp_path):
    src = tmp_path / "lib.c"
    src.write_text("#include <stdio.h>\nint say(void) { return puts(\"hello\"); }\n" + "".join(f"int {LONG}{i}(int x) {{ return x + {i}; }}\n" for i in range(N_FUNCS))
                   + "int name_tail(int x) { return x + 1; }\nint tail(int x) { return x + 2; }\n"
                   + "".join(f"int {LONG}{i}(int);\n" for i in CALLED)
                   + "int entry(int x) { return " + " + ".join(f"{LONG}{i}(x)" for i in CALLED) + " + tail(x); }\n"
                   + "int v1(void) { return 1; }\nint v2(void) { return 2; }\n"
                   + '__asm__(".symver v1, vers@V1");\n__asm__(".symver v2, vers@@V2");\n')
    (tmp_path / "lib.map").write_text("V1 { global: *; };\nV2 { global: vers; } V1;\n")
    main = tmp_path / "main.c"
    main.write_text("#include <stdio.h>\nint entry(int);\nint vers(void);\nint name_tail(int);\n"
                    "int main(void) { printf(\"%d %d %d\\n\", entry(3), vers(), name_tail(4)); return 0; }\n")
    obj = tmp_path / "lib.o"
    subprocess.run(["gcc", "-c", "-O1", "-fPIC", "-ffunction-sections", "-o", str(obj), str(src)], check=True)
    return obj, main


def _link_cmd(tmp_path, obj, lib) -> list[str]:
    return ["gcc", "-shared", "-fuse-ld=gold", "-Wl,-O2", "-Wl,--hash-style=gnu", f"-Wl,-rpath,/opt/x",
            f"-Wl,--version-script={tmp_path / 'lib.map'}", "-o", str(lib), str(obj)]


@pytest.fixture
def gold_lib(tmp_path):
    need_tool("ld.gold")
    obj, main = _sources(tmp_path)
    lib = tmp_path / "libd.so"
    subprocess.run(_link_cmd(tmp_path, obj, lib), check=True)
    exe = tmp_path / "main"
    subprocess.run(["gcc", "-o", str(exe), str(main), str(lib), "-Wl,-rpath,$ORIGIN"], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {"lib": lib, "exe": exe, "output": out, "obj": obj, "dir": tmp_path}


def _offsets(path, names) -> dict[str, int]:
    with ElfImage(path) as img:
        recs, all_names = dynstr._dynsym(img)
    return {n: o for n, o in zip(all_names, recs["st_name"].tolist()) if n in names}


def test_gold_rewrite_puts_read_names_first_and_runs(gold_lib, tmp_path):
    lib, exe = gold_lib["lib"], gold_lib["exe"]
    names, _ = dynstr.read_names(lib, [exe])
    called = {f"{LONG}{i}" for i in CALLED}
    assert called <= set(names) and "name_tail" in names
    before = _offsets(lib, set(names) | {"tail", "name_tail"})
    # gold -O2 shares suffixes: "tail" names the end of another string
    with ElfImage(lib) as img:
        blob = bytes(img.mm[img.section(".dynstr").offset:][:img.section(".dynstr").size])
    assert blob[before["tail"] - 1] != 0
    assert max(before[n] for n in called) > len(blob) // 2  # hash order: spread over the table
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(exe, moved / "main")
    st = dynstr_order.reorder(lib, moved / "libd.so", names)
    dynstr_order.verify(lib, moved / "libd.so")
    assert st["first"] >= len(names) - 2 and st["moved"] > 0
    after = _offsets(moved / "libd.so", set(names) | {"tail", "name_tail"})
    assert max(after[n] for n in called) < st["first_bytes"] + 64
    with ElfImage(moved / "libd.so") as img:
        blob2 = bytes(img.mm[img.section(".dynstr").offset:][:img.section(".dynstr").size])
        assert img.dt_string(next(v for t, v in img.dynamic if t == 1)).startswith("lib")  # DT_NEEDED
        rpath = [img.dt_string(v) for t, v in img.dynamic if t in (DT_RUNPATH, DT_RPATH)]
    assert len(blob2) == len(blob) and rpath == ["/opt/x"]
    assert blob2[after["tail"]:after["tail"] + 5] == b"tail\0"
    r = subprocess.run([str(moved / "main")], capture_output=True, text=True, check=True)
    assert r.stdout == gold_lib["output"]
    # the model sees the names' pages come together
    with ElfImage(lib) as a, ElfImage(moved / "libd.so") as b:
        assert len(dynstr_order.read_pages(b, names)) < len(dynstr_order.read_pages(a, names))


def _refs(path):
    with ElfImage(path) as img:
        return dynstr_order.references(img)


def _patch(path, at: int, data: bytes):
    b = bytearray(path.read_bytes())
    b[at:at + len(data)] = data
    path.write_bytes(bytes(b))


def test_verify_catches_a_damaged_reference(gold_lib, tmp_path):
    lib = gold_lib["lib"]
    names, _ = dynstr.read_names(lib, [gold_lib["exe"]])
    good = tmp_path / "good.so"
    dynstr_order.reorder(lib, good, names)
    _sec, _blob, refs = _refs(good)
    # a symbol's name, then a version-need name (vna_name), each one string further on
    sym = refs.at[refs.symbols // 2]
    vna = [a for a, e, w in zip(refs.at, refs.early, refs.width) if e and w == 4][-1]
    for at in (sym, vna):
        bad = tmp_path / "bad.so"
        shutil.copy(good, bad)
        v = struct.unpack_from("<I", bad.read_bytes(), at)[0]
        _patch(bad, at, struct.pack("<I", v + 1))
        with pytest.raises(RuntimeError, match="names another string|pyelftools"):
            dynstr_order.verify(lib, bad)


def test_refuses_an_unknown_user_of_dynstr(gold_lib, tmp_path):
    lib = gold_lib["lib"]
    bad = tmp_path / "bad.so"
    shutil.copy(lib, bad)
    with ElfImage(lib) as img:
        ds = img.section(".dynstr").index
        note = img.section(".note.gnu.gold-version") or img.section(".comment")
        shoff, shentsize = img.elf.header["e_shoff"], img.elf.header["e_shentsize"]
    _patch(bad, shoff + note.index * shentsize + 40, struct.pack("<I", ds))  # sh_link
    with pytest.raises(ElflayoutError, match=f"section {note.name} .* linked to .dynstr"):
        dynstr_order.reorder(bad, tmp_path / "out.so", ["entry"])
    assert not (tmp_path / "out.so").exists()


def test_damaged_dynstr_is_refused_with_nothing_written(gold_lib, tmp_path):
    from elflayout.order.relink import reorder_dynstr

    lib = gold_lib["lib"]
    with ElfImage(lib) as img:
        s = img.section(".dynstr")
    sec, _blob, refs = _refs(lib)
    cases = {"not end with a NUL": (s.offset + s.size - 1, b"x"),
             "outside the table": (refs.at[3], struct.pack("<I", s.size + 9))}
    for why, (at, data) in cases.items():
        bad = tmp_path / "bad.so"
        shutil.copy(lib, bad)
        _patch(bad, at, data)
        with pytest.raises(ElflayoutError, match=f"{bad}: damaged .*" + why.split()[-1]):
            dynstr_order.reorder(bad, tmp_path / "out.so", ["entry"])
        assert not (tmp_path / "out.so").exists()
        before = bad.read_bytes()
        with pytest.raises(ElflayoutError):  # asked: the error reaches the CLI (exit 2)
            reorder_dynstr(str(bad), True, "gold", {})
        assert reorder_dynstr(str(bad), None, "gold", {}).value is False  # default: left as linked
        assert bad.read_bytes() == before and not list(tmp_path.glob(".bad.so.*"))


def _profile(lib, exe, path):
    """A function-granularity profile of ``lib``: ``entry`` and the functions it calls."""
    from elflayout.order.resolve import elf_symbols

    with ElfImage(lib) as img:
        ident = img.identity()
        arr, names = elf_symbols(img)
    where = {n: (int(arr["offset"][i]), int(arr["size"][i])) for i, n in enumerate(names)}
    run = ["entry"] + [f"{LONG}{i}" for i in CALLED] + ["tail", "name_tail", "v2"]
    funcs = [{"name": n, "offset": where[n][0], "size": where[n][1], "section": ".text", "object": "lib.o",
              "first": k, "phase": "startup", "t": k * 1e-6} for k, n in enumerate(run)]
    path.write_text(json.dumps({
        "format": "elflayout-profile", "version": 1,
        "metadata": {"argv": [str(exe)], "backend": "truth", "granularity": "function", "kernel": "",
                     "read_ahead_kb": None, "started": "", "duration_s": 0.0, "exit_status": 0, "notes": ""},
        "targets": [{**ident, "map": None, "functions": funcs, "sections": [],
                     "objects": [{"object": "lib.o", "first": 0}], "pages": [], "reads": []}]}))


def _step(stderr: str) -> str:
    return next(ln.split(".dynstr rewrite: ", 1)[1] for ln in stderr.splitlines() if ".dynstr rewrite: " in ln)


@pytest.mark.slow
def test_link_rewrites_golds_dynstr_by_default(gold_lib, tmp_path):
    d = gold_lib["dir"]
    prof = tmp_path / "p.json"
    _profile(gold_lib["lib"], gold_lib["exe"], prof)
    out = tmp_path / "o" / "libd.so"
    out.parent.mkdir()
    r = run_cli("link", "--profile", prof, "--linker", "gold", "--", *_link_cmd(d, gold_lib["obj"], out))
    assert r.returncode == 0, r.stderr
    step = _step(r.stderr)
    assert step.startswith("on (the readahead model predicts fewer pages)"), step
    assert "references mapped and proved; readahead model: " in step
    before, after = (int(x.replace(",", "")) for x in step.split("readahead model: ")[1].split(" pages")[0].split(" -> "))
    assert after < before
    shutil.copy(gold_lib["exe"], out.parent / "main")
    assert subprocess.run([str(out.parent / "main")], capture_output=True, text=True).stdout == gold_lib["output"]
    assert max(_offsets(out, {f"{LONG}{i}" for i in CALLED}).values()) < 8192
    r = run_cli("link", "--profile", prof, "--linker", "gold", "--no-reorder-dynstr", "--",
                *_link_cmd(d, gold_lib["obj"], out))
    assert r.returncode == 0, r.stderr
    assert _step(r.stderr) == "off (--no-reorder-dynstr)"
    assert max(_offsets(out, {f"{LONG}{i}" for i in CALLED}).values()) > 8192


@pytest.mark.parametrize("linker", ["bfd", "mold", "lld", "gold"])
def test_every_linkers_output_is_rewritten_and_runs(linker, tmp_path):
    need_tool({"bfd": "ld.bfd", "mold": "mold", "lld": "ld.lld", "gold": "ld.gold"}[linker])
    (tmp_path / "b.c").write_text("#include <stdio.h>\nint name_tail(int x) { return x + 2; }\n"
                                  "int tail(int x) { return puts(\"t\") + x; }\n")
    (tmp_path / "m.c").write_text("#include <stdio.h>\nint tail(int);\nint name_tail(int);\n"
                                  "int main(void) { printf(\"%d\\n\", tail(1) + name_tail(2)); return 0; }\n")
    lib, moved = tmp_path / "libb.so", tmp_path / "moved"
    subprocess.run(["gcc", "-shared", "-fPIC", f"-fuse-ld={linker}", "-Wl,-rpath,/opt/y", "-o", str(lib),
                    str(tmp_path / "b.c")], check=True)
    subprocess.run(["gcc", "-o", str(tmp_path / "m"), str(tmp_path / "m.c"), str(lib), "-Wl,-rpath,$ORIGIN"],
                   check=True)
    want = subprocess.run([str(tmp_path / "m")], capture_output=True, text=True, check=True).stdout
    moved.mkdir()
    shutil.copy(tmp_path / "m", moved / "m")
    names, _ = dynstr.read_names(lib, [tmp_path / "m"])
    st = dynstr_order.reorder(lib, moved / "libb.so", names[::-1])
    assert st["moved"] > 0
    assert subprocess.run([str(moved / "m")], capture_output=True, text=True, check=True).stdout == want
