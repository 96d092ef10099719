"""One reader per ELF concept: the dynamic array (through PT_DYNAMIC, int tags), the
r_info fields, the header tables; and the pack-relocs report model."""

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from elflayout import layouts as L
from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.relocs import loadprobe, pack_input, pack_model, simload
from elflayout.relocs.analyze import analyze

LIBZ = Path("/usr/lib/x86_64-linux-gnu/libz.so.1")
pytestmark = pytest.mark.skipif(not LIBZ.exists(), reason="needs the system's libz.so.1")


def _pyelftools_dynamic(path) -> dict:
    """{tag number: first value} of the .dynamic section, read by pyelftools."""
    with ElfImage(path) as img:
        out = {}
        for t in img.elf.get_section_by_name(".dynamic").iter_tags():
            tag = t.entry.d_tag
            out.setdefault(L.ENUM_D_TAG_COMMON.get(tag, tag) if isinstance(tag, str) else tag, t.entry.d_val)
        return out


def _misplaced_dynamic_header(tmp_path) -> Path:
    """libz with its .dynamic section header moved onto .dynsym: headers and PT_DYNAMIC disagree."""
    p = tmp_path / "libz.so.1"
    shutil.copyfile(LIBZ, p)
    data = bytearray(p.read_bytes())
    _, _, sh = L.read_headers(data)
    dyn_i = int(np.flatnonzero(sh["sh_type"] == L.SHT_DYNAMIC)[0])
    sym_i = int(np.flatnonzero(sh["sh_type"] == L.SHT_DYNSYM)[0])
    sh["sh_offset"][dyn_i], sh["sh_addr"][dyn_i] = sh["sh_offset"][sym_i], sh["sh_addr"][sym_i]
    shoff = int(np.frombuffer(data, L.EHDR64, count=1)["e_shoff"][0])
    data[shoff:shoff + sh.nbytes] = sh.tobytes()
    p.write_bytes(data)
    return p


def test_section_headers_and_pt_dynamic_disagree_every_reader_sees_pt_dynamic(tmp_path):
    want = _pyelftools_dynamic(LIBZ)  # the intact file: both routes agree
    bad = _misplaced_dynamic_header(tmp_path)
    assert _pyelftools_dynamic(bad) != want  # the section header route now reads .dynsym
    tags = (L.DT_RELA, L.DT_RELASZ, L.DT_STRTAB, L.DT_SYMTAB, L.DT_JMPREL, L.DT_VERNEED, L.DT_GNU_HASH)
    with ElfImage(bad) as img:
        assert {t: img.dt(t) for t in tags} == {t: want[t] for t in tags}
        inp = pack_input.read_input(img)
        assert {t: inp.tag(t) for t in tags} == {t: want[t] for t in tags}
        got = analyze(img)
    with simload.Loaded(bad) as lo:
        assert {t: lo.tag(t) for t in tags} == {t: want[t] for t in tags}
    with ElfImage(LIBZ) as img:
        ref = analyze(img)
    for k in ("tables", "relr", "self_applied", "types", "relative", "pages"):
        assert got[k] == ref[k], k


def test_order_stages_read_the_dynamic_array_through_pt_dynamic(tmp_path):
    """The .dynstr order's DT_NEEDED closure and the read-ahead model's loader touches
    read PT_DYNAMIC, as ld.so does, whatever the .dynamic section header says."""
    from elflayout.order import dynstr, readahead

    bad = _misplaced_dynamic_header(tmp_path)
    with ElfImage(bad) as img, ElfImage(LIBZ) as ref:
        assert img.dt_string(img.dt(L.DT_SONAME)) == "libz.so.1"
        assert [img.dt_string(v) for v in img.dynamic.values(L.DT_NEEDED)] == ["libc.so.6"]
        got, want = readahead.loader_touches(img), readahead.loader_touches(ref)
        assert ref.dynamic.offset // 4096 in want[0].tolist()
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        with pytest.raises(ElflayoutError, match="outside DT_STRTAB"):
            img.dt_string(1 << 40)
    other = Path("/usr/lib/x86_64-linux-gnu/libm.so.6")
    assert dynstr.needed_closure(bad, other) == dynstr.needed_closure(LIBZ, other) != []


def test_dynamic_tags_are_named_ints_and_a_typo_fails():
    with ElfImage(LIBZ) as img:
        d = img.dynamic
        assert d.present and d.segments == 1 and d.terminated
        assert img.dt(L.DT_SONAME) == d[L.DT_SONAME] == d.get(L.DT_SONAME)
        assert img.dt("DT_SONAME") == d[L.DT_SONAME]  # pyelftools' name, looked up strictly
        with pytest.raises(KeyError):
            img.dt("DT_SONMAE")
        with pytest.raises(TypeError):
            d.get("DT_SONAME")
        with pytest.raises(KeyError):
            d[L.DT_RELR]  # absent
        with pytest.raises(AttributeError):
            L.DT_SONMAE  # noqa: B018
        assert d.get(L.DT_RELR) is None and L.DT_RELR not in d
        assert len(d.values(L.DT_NEEDED)) == 1


def test_object_file_has_no_dynamic_array(tmp_path):
    (tmp_path / "e.s").write_text("\t.text\nf:\tret\n")
    subprocess.run(["as", "--64", "-o", str(tmp_path / "e.o"), str(tmp_path / "e.s")], check=True)
    with ElfImage(tmp_path / "e.o") as img:
        assert not img.dynamic.present and len(img.dynamic) == 0
        assert img.dt(L.DT_INIT) is None and not img.binds_now


def test_r_info_helpers_match_pyelftools():
    with ElfImage(LIBZ) as img:
        for name, t in img.reloc_tables().items():
            want = [(r["r_info_sym"], r["r_info_type"]) for r in img.elf.get_section_by_name(name).iter_relocations()]
            assert list(zip(L.r_sym(t["r_info"]).tolist(), L.r_type(t["r_info"]).tolist())) == want
            assert np.array_equal(L.r_info(L.r_sym(t["r_info"]), L.r_type(t["r_info"])), t["r_info"])
    assert L.r_sym(0x0000000500000007) == 5 and L.r_type(0x0000000500000007) == 7
    assert L.r_sym(0x517, 32) == 5 and L.r_type(0x517, 32) == 0x17 and L.r_info(5, 0x17, 32) == 0x517


def test_read_headers_refuses_tables_outside_the_file():
    data = LIBZ.read_bytes()
    eh, ph, sh = L.read_headers(data)
    assert ph.size == eh["e_phnum"][0] and sh.size == eh["e_shnum"][0]
    with pytest.raises(ValueError, match="outside the file"):
        L.read_headers(data[:int(eh["e_shoff"][0]) + 10])


def test_pack_report_model_round_trips_the_cli_output(tmp_path):
    for fmt in ("relr", "self"):
        out = tmp_path / f"libz.{fmt}.so"
        r = run_cli("pack-relocs", LIBZ, "-o", out, "--format", fmt, "--min-glibc", "2.36", "--json", check=0)
        doc = json.loads(r.stdout)
        rep = pack_model.parse(doc)
        assert rep.status == pack_model.PACKED and rep.packed.form == fmt
        assert json.dumps(rep.to_doc()) == json.dumps(doc)  # same keys, same order
        p = tmp_path / f"{fmt}.json"
        p.write_text(r.stdout)
        assert pack_model.load(p) == rep
    r = run_cli("pack-relocs", out, "-o", tmp_path / "again.so", "--json", check=0)
    rep = pack_model.parse(json.loads(r.stdout))
    assert rep.status == pack_model.NOTHING_TO_DO and rep.output is None and "nothing to do" in rep.message
    doc_f = pack_model.build_unchecked("elflayout x", LIBZ, pack_model.CHECK_FAILED, "check failed: differ", 1)
    assert list(doc_f)[3:] == ["input", "output", "status", "message", "exit_status"]
    assert pack_model.parse(doc_f).to_doc() == doc_f and pack_model.parse(doc_f).exit_status == 1
    with pytest.raises(ElflayoutError, match="unknown status"):
        pack_model.parse(dict(doc_f, status="fine"))
    bad = dict(doc, packed="many")
    with pytest.raises(ElflayoutError, match="packed is not an integer"):
        pack_model.parse(bad)
    with pytest.raises(ElflayoutError, match="lacks relr_bytes"):
        pack_model.parse({k: v for k, v in doc.items() if k != "relr_bytes"})


def test_load_probe_is_a_standalone_program(tmp_path):
    """The real-load child runs under a system root's own python3: standard library only."""
    src = Path(loadprobe.__file__)
    mods = {a.name.split(".")[0] for n in ast.walk(ast.parse(src.read_text()))
            if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(ast.parse(src.read_text())) if isinstance(n, ast.ImportFrom)}
    assert mods <= set(sys.stdlib_module_names)
    py = shutil.which("python3") or sys.executable
    r = subprocess.run([py, src, "dlopen", str(LIBZ)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([py, src, "dlopen", str(tmp_path / "absent.so")], capture_output=True, text=True)
    assert r.returncode == 1 and "absent.so" in r.stdout
    r = subprocess.run([py, src, "state", str(LIBZ), "[[0, 16]]", str(tmp_path / "st"), "0"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "base" in json.loads(r.stdout)
    assert (tmp_path / "st").read_bytes() == LIBZ.read_bytes()[:16]  # the ELF header, mapped at the base
    assert subprocess.run([py, src], capture_output=True).returncode == 2
