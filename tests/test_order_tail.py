"""The touched code's last read-around window (``order.tail``): its functions listed after
the cold code with gold and GNU ld, so that read ends at the code segment's end (or runs
into the read-only data after it) instead of reading cold code."""

import subprocess

from conftest import need_tool

# spans: (first page, last page, name) of ordered functions as linked
SPANS = [(100 + i, 100 + i, f"f{i}") for i in range(33)]  # the touched code: pages 100..132


def test_tail_is_the_last_windows_functions():
    """A read at 132 holding the last page reads 31 pages past it: the functions on
    pages 131 (the margin) and 132 go after the cold code."""
    from elflayout.order.tail import choose

    t = choose(SPANS, [(0, 4), (100, 32), (132, 32)], 400)
    assert t.functions == ("f31", "f32") and "31 cold pages" in t.why and t.pages == 400


def test_no_tail_when_the_read_ends_near_the_code_or_starts_it():
    """No tail when the last read runs fewer than MIN_WASTE pages past the touched code,
    when it starts the touched code (moving all of it moves the waste), or when no read
    holds it; a function placed far away by name is not part of the touched code."""
    from elflayout.order.tail import MIN_WASTE, choose

    assert choose(SPANS, [(100, 32), (132, MIN_WASTE)], 1).functions == ()
    assert choose(SPANS[:20], [(100, 32)], 1).functions == ()
    assert choose(SPANS, [(100, 32)], 1).functions == ()
    far = SPANS + [(900, 900, "clone")]
    assert choose(far, [(100, 32), (132, 32), (900, 32)], 1).functions == ("f31", "f32")
    assert choose([], [], 1).functions == ()


def test_writers_list_the_tail_after_the_cold_code():
    """gold: after the closing glob; GNU ld: ``.text.elflayout.tail`` inserted after .text."""
    from elflayout.order.algorithms import Layout
    from elflayout.order.formats import write_gold, write_ld_script
    from elflayout.order.resolve import Resolved

    fs = [Resolved(n, n, [f".text.{n}"], ["x/a.o"], "exact") for n in ("hot", "late")]
    layout = Layout(functions=fs)
    text, st = write_gold(layout, tail=("late",))
    assert text.splitlines() == [".text.hot", ".text*", ".text.late"] and st["tail_sections"] == 1
    script, st = write_ld_script(layout, tail=("late",))
    head, tail = script.split(".text.elflayout.tail :")
    assert "(.text.hot)" in head and "(.text.late)" not in head
    assert "(.text.late)" in tail and "INSERT AFTER .text;" in tail and st["tail_sections"] == 1
    assert write_gold(layout)[0].splitlines() == [".text.hot", ".text.late", ".text*"]


def test_ld_script_tail_follows_the_cold_code(tmp_path):
    """A real GNU ld link of the script: the tail function after the cold one, before .fini."""
    need_tool("ld.bfd")
    from elftools.elf.elffile import ELFFile

    from elflayout.order.algorithms import Layout
    from elflayout.order.formats import write_ld_script
    from elflayout.order.resolve import Resolved

    (tmp_path / "a.c").write_text("int hot(int x){return x+1;}\nint cold(int x){return x*3;}\n"
                                  "int late(int x){return x-2;}\n")
    obj = tmp_path / "a.o"
    subprocess.run(["gcc", "-O2", "-fPIC", "-ffunction-sections", "-c", str(tmp_path / "a.c"), "-o", str(obj)],
                   check=True)
    fs = [Resolved(n, n, [f".text.{n}"], [str(obj)], "exact") for n in ("hot", "late")]
    script = tmp_path / "o.ld"
    script.write_text(write_ld_script(Layout(functions=fs), tail=("late",))[0])
    lib = tmp_path / "liba.so"
    subprocess.run(["gcc", "-shared", "-fuse-ld=bfd", "-o", str(lib), str(obj), f"-Wl,-T,{script}"], check=True)
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        sym = {s.name: s["st_value"] for s in elf.get_section_by_name(".symtab").iter_symbols()}
        fini = elf.get_section_by_name(".fini")["sh_addr"]
    assert sym["hot"] < sym["cold"] < sym["late"] < fini


def test_predict_follows_the_profiled_loader_order_in_golds_code_segment(tmp_path):
    """gold maps the symbol tables and relocation tables with the code. A library found
    before the one relocated first serves symbol lookups before its own relocation pass;
    the profile recorded that order, and a fault in executable pages reads ahead only, so
    the lookup's read at ``.gnu.hash`` holds the relocation tables. Prepending the
    model's own relocation pass instead started the reads 3 pages late on yaml-cpp
    (114 pages predicted, 109 measured; its code tail: 87 predicted, 116 measured)."""
    need_tool("ld.gold")
    from elflayout.elfcore import PAGE, ElfImage
    from elflayout.order.tail import predict
    from elflayout.profile import model

    n = 3000  # .gnu.hash over several pages, 72 KB of .rela.dyn after it
    src = tmp_path / "s.c"
    src.write_text("".join(f"int elflayout_exported_function_{i}(void) {{ return {i}; }}\n" for i in range(n))
                   + "int (*elflayout_ptrs[])(void) = {"
                   + "".join(f"elflayout_exported_function_{i}, " for i in range(n)) + "};\n")
    lib = tmp_path / "libs.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-fuse-ld=gold", "-o", str(lib), str(src)], check=True)
    with ElfImage(lib) as img:
        ident = img.identity()
        ghash, rela = (img.section(s).offset // PAGE for s in (".gnu.hash", ".rela.dyn"))
    assert ghash < rela
    pages = [{"page": ghash, "kind": "r", "first": -3, "t": 0.0, "phase": "loader", "section": ".gnu.hash"},
             {"page": rela, "kind": "r", "first": -2, "t": 0.0, "phase": "loader", "section": ".rela.dyn"}]
    doc = {"format": "elflayout-profile", "version": 1,
           "metadata": {"argv": ["driver"], "backend": "truth", "granularity": "function", "kernel": "",
                        "read_ahead_kb": None, "started": "", "duration_s": 0.0, "exit_status": 0, "notes": ""},
           "targets": [{**ident, "map": None, "functions": [], "sections": [], "objects": [], "pages": pages,
                        "reads": []}]}
    _pages, reads = predict(lib, model.parse(doc).targets[0])
    assert any(p == ghash and p <= rela < p + k for p, k in reads), (ghash, rela, reads)
