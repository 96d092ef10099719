"""order.tuck: the sections no segment loads move from the file's tail into the hole after
a PT_LOAD; what the loader maps stays byte-for-byte the same and the library still runs."""

import shutil
import subprocess

import pytest

from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.order.tuck import tuck
from relocs_testlib import build


def _loaded(path) -> list[tuple]:
    """Every segment but its file offset, and the bytes of every PT_LOAD after the ELF and
    program headers (the headers' file offsets are what changes)."""
    with ElfImage(path) as img:
        h = img.elf.header
        skip = h["e_phoff"] + h["e_phnum"] * h["e_phentsize"]
        segs = [(g.type, g.flags, g.vaddr, g.filesz, g.memsz, g.align) for g in img.segments]
        return segs + [bytes(img.mm[max(g.offset, skip):g.offset + g.filesz]) for g in img.loads]


@pytest.mark.parametrize("linker", ["bfd", "lld"])
def test_tuck_moves_tail_and_keeps_loads(tmp_path, linker):
    if linker == "lld" and not shutil.which("ld.lld"):
        pytest.skip("lld not installed")
    b = build(tmp_path, linker=linker)
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(b["driver"], moved / "main")
    p = tuck(b["lib"], moved / "libt.so")
    assert {".symtab", ".strtab", ".shstrtab"} <= set(p["moved_names"])
    with ElfImage(moved / "libt.so") as img:
        tail = max(g.offset + g.filesz for g in img.loads)
        assert img.size == tail  # nothing after the last segment for the read-ahead to read
        for s in img.sections:
            if s.name in p["moved_names"]:
                assert p["hole"] <= s.offset < p["hole"] + p["delta"]
        assert all(g.offset % g.align == g.vaddr % g.align for g in img.loads)
    assert _loaded(moved / "libt.so") == _loaded(b["lib"])
    syms = [subprocess.run(["readelf", "-sW", str(f)], capture_output=True, text=True, check=True).stdout
            for f in (b["lib"], moved / "libt.so")]
    assert syms[0].replace(str(b["lib"]), "") == syms[1].replace(str(moved / "libt.so"), "")
    assert subprocess.run([str(moved / "main")], capture_output=True, text=True, check=True).stdout == b["output"]
    strip = subprocess.run(["strip", "-o", str(tmp_path / "s.so"), str(moved / "libt.so")], capture_output=True)
    assert strip.returncode == 0, strip.stderr


def test_tuck_refuses_when_nothing_follows_the_last_segment(tmp_path):
    b = build(tmp_path)
    once = tmp_path / "once.so"
    tuck(b["lib"], once)
    with pytest.raises(ElflayoutError, match="nothing after the last segment"):
        tuck(once, tmp_path / "twice.so")
    assert not (tmp_path / "twice.so").exists()


def test_tuck_refuses_missing_hole(tmp_path):
    b = build(tmp_path)
    with ElfImage(b["lib"]) as img:
        n = len(img.loads)
    with pytest.raises(ElflayoutError, match="no hole after PT_LOAD"):
        tuck(b["lib"], tmp_path / "out.so", after=n - 1)


def test_link_move_symtab(tmp_path):
    """``elflayout link --move-symtab``: the linked library ends with its last segment, its
    symbols kept; without the option the tail stays."""
    from conftest import run_cli
    from relocs_testlib import compile_lib

    obj = compile_lib(tmp_path, n_tables=6, ifunc=False)
    outs = {}
    for name, opts in (("plain", []), ("moved", ["--move-symtab"])):
        out = tmp_path / name / "libt.so"
        out.parent.mkdir()
        r = run_cli("link", "--pack", "relr", *opts, "--linker", "bfd", "--", "gcc", "-fuse-ld=bfd", "-shared",
                    "-Wl,-soname,libt.so", "-o", out, obj, check=0)
        assert r.returncode == 0, r.stderr
        with ElfImage(out) as img:
            outs[name] = (img.size - max(g.offset + g.filesz for g in img.loads), img.section(".symtab").size)
    assert outs["plain"][0] > 0 and outs["moved"][0] == 0
    assert outs["moved"][1] == outs["plain"][1] > 0


def test_tuck_extended_section_count(tmp_path):
    """e_shnum 0, the count in section header 0's sh_size (ELF's form past 0xff00 sections):
    every section header moves, not none."""
    import struct

    b = build(tmp_path)
    lib = tmp_path / "ext.so"
    data = bytearray(b["lib"].read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shnum, = struct.unpack_from("<H", data, 0x3C)
    struct.pack_into("<H", data, 0x3C, 0)
    struct.pack_into("<Q", data, shoff + 32, shnum)  # section 0's sh_size
    lib.write_bytes(bytes(data))
    tuck(lib, tmp_path / "out.so")
    names = [subprocess.run(["readelf", "-SW", str(f)], capture_output=True, text=True, check=True).stdout.count("] .")
             for f in (b["lib"], tmp_path / "out.so")]
    assert names[0] == names[1] > 20


def test_tuck_proves_its_output_and_writes_nothing_wrong(tmp_path, monkeypatch):
    """tuck compares what the output maps with the input's before keeping it: a layout
    slip (here: the moved tail written one byte off) is our bug, not an output."""
    import elflayout.order.tuck as t

    b = build(tmp_path, linker="bfd")
    real = t.plan

    def slipped(img, after=0):
        p = real(img, after)
        return p | {"delta": p["delta"] + 1}

    monkeypatch.setattr(t, "plan", slipped)
    with pytest.raises(RuntimeError, match="tuck changed"):
        t.tuck(b["lib"], tmp_path / "out.so")
    assert not (tmp_path / "out.so").exists()


@pytest.mark.parametrize("algorithm", ["first-access", "hot-last", None])
def test_move_symtab_hole_where_the_order_leaves_code_cold(tmp_path, algorithm):
    """first-access puts hot code at the start of .text, within the read-ahead of the headers
    the loader reads: the unloaded sections go after the executable segment (its cold end),
    not between the headers and the hot code. hot-last (and no order) keeps the hole before
    the executable PT_LOAD, before the cold start of .text."""
    from elflayout.layouts import PF_X
    from elflayout.order.relink import move_symtab

    if not shutil.which("ld.lld"):
        pytest.skip("lld not installed")
    b = build(tmp_path, linker="lld")
    step = move_symtab(str(b["lib"]), algorithm)
    assert step.value is True, step.why
    with ElfImage(b["lib"]) as img:
        loads = img.loads
        x = max(i for i, g in enumerate(loads) if g.flags & PF_X)
        sym = img.section(".symtab").offset
        assert img.size == max(g.offset + g.filesz for g in loads)
        if algorithm == "first-access":
            assert loads[x].offset + loads[x].filesz <= sym < loads[x + 1].offset
        else:
            f = next(i for i, g in enumerate(loads) if g.flags & PF_X)
            assert loads[f - 1].offset + loads[f - 1].filesz <= sym < loads[f].offset
    assert subprocess.run([str(b["driver"])], capture_output=True, text=True).stdout == b["output"]


def test_tuck_hole_before_the_code_of_a_packed_library(tmp_path):
    """pack-relocs cuts the first PT_LOAD in two (R, R, R E): the hole goes before the
    executable PT_LOAD (after ``.eh_frame``, before the cold start of ``.text``), not after
    the first PT_LOAD, where ``.dynamic`` and the relocations ld.so reads lie."""
    from elflayout.layouts import PF_X
    from elflayout.relocs.pack import pack

    if not shutil.which("ld.lld"):
        pytest.skip("lld not installed")
    b = build(tmp_path, linker="lld", n_tables=200)
    d = tmp_path / "packed"
    d.mkdir()
    pack(b["lib"], d / "libt.so", form="relr")
    with ElfImage(d / "libt.so") as img:
        loads = img.loads
    first_x = next(i for i, g in enumerate(loads) if g.flags & PF_X)
    assert first_x == 2
    shutil.copy(b["driver"], d / "main")
    p = tuck(d / "libt.so", d / "t.so")
    assert p["hole"] == loads[first_x].offset
    (d / "t.so").replace(d / "libt.so")
    assert subprocess.run([str(d / "main")], capture_output=True, text=True, check=True).stdout == b["output"]


def _with_debug_tail(tmp_path, n_objects: int):
    """The synthetic library (lld) with 1 MiB of unloaded ``.debug_junk`` after its last
    segment, and its ground-truth profile's target."""
    import json

    import order_testlib as testlib
    from elflayout.profile import model

    d = testlib.build(tmp_path, n_objects=n_objects, funcs_per_object=8, seed=3, linker="lld")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4096)
    subprocess.run(["objcopy", "--add-section", f".debug_junk={junk}", str(d["lib"])], check=True)
    prof = testlib.truth_profile(d["lib"], d["truth"])
    (tmp_path / "p.json").write_text(json.dumps(prof))
    return d, model.parse(prof).targets[0]


@pytest.mark.parametrize("n_objects", [6, 20])
def test_move_symtab_goes_where_the_model_predicts_fewest_pages(tmp_path, n_objects):
    """With a profile, the unloaded sections go to the place the readahead model predicts
    the fewest pages for (the rule's hole before the code of an unordered library is
    read around from the headers when its read-only segment is small: 20 objects, 93
    pages there against 81 after the code); asked, they move to the best hole, and by
    default only when that beats leaving them at the tail (which wins with 20 objects)."""
    from elflayout.layouts import PF_X
    from elflayout.order import tuck
    from elflayout.order.placement import profile_touches
    from elflayout.order.relink import move_symtab

    if not shutil.which("ld.lld"):
        pytest.skip("lld not installed")
    d, target = _with_debug_tail(tmp_path, n_objects)
    with ElfImage(d["lib"]) as img:
        pages, kinds, _ = profile_touches(target, img, 1, None)
        rule = tuck.cold_hole(img, "hot-last")
        pred = tuck.predict_places(d["lib"], {"": (pages, kinds)}, 128, True)[""]
        best = min((a for a in pred if a != tuck.TAIL), key=lambda a: (pred[a], a))
        place = tuck.where(img, best)
    if n_objects == 20:
        assert pred[best] < pred[rule] and pred[tuck.TAIL] < pred[best]
    else:
        assert pred[best] < pred[tuck.TAIL]
    auto = move_symtab(str(d["lib"]), "hot-last", None, target)
    assert auto.value is (n_objects != 20), auto.line()
    assert "readahead model at read_ahead_kb 128: at the tail " in auto.line()
    if not auto.value:
        assert "predicts no fewer pages moved" in auto.why
    step = auto if auto.value else move_symtab(str(d["lib"]), "hot-last", True, target)
    assert step.value is True and f"{place}, the fewest predicted" in step.why
    with ElfImage(d["lib"]) as img:
        loads, junk = img.loads, img.section(".debug_junk").offset
        assert img.size == max(g.offset + g.filesz for g in loads)
        assert loads[best].offset + loads[best].filesz <= junk < loads[best + 1].offset
        assert bool(loads[best].flags & PF_X) == (n_objects == 20)  # after the code, or before it
    assert subprocess.run([str(d["driver"])], capture_output=True, text=True).returncode == 0


def test_algorithm_is_predicted_with_the_unloaded_sections_at_their_best_place(tmp_path):
    """The algorithm step compares first-access and hot-last each with the debug sections
    where they read fewest (the default moves them after the link), not as linked."""
    from elflayout.order import defaults

    if not shutil.which("ld.lld"):
        pytest.skip("lld not installed")
    _d, target = _with_debug_tail(tmp_path, 6)
    linked = defaults.predict_algorithms(target, 128, move_symtab=False)
    moved = defaults.predict_algorithms(target, 128, move_symtab=None)
    assert set(linked) == set(moved) == set(defaults.CANDIDATES)
    assert all(moved[a] < linked[a] for a in defaults.CANDIDATES), (linked, moved)
    assert defaults.predict_algorithms(target, 128, move_symtab=True) == moved


def test_where_names_a_place_after_the_last_segment():
    """A place after the last PT_LOAD (not the file's tail) is named, not an IndexError."""
    from elflayout.elfcore import ElfImage
    from elflayout.order import tuck

    with ElfImage("/bin/true") as img:
        last = len(img.loads) - 1
        assert tuck.where(img, last) == f"after PT_LOAD {last}, the last"
        assert tuck.where(img, tuck.TAIL) == "at the tail"
