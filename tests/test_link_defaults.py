"""``elflayout link`` with no other flag applies the default steps (``order.defaults``):
split, the algorithm the readahead model predicts best, data and .dynstr order, packing
and the order check; each can be turned off and the summary says so."""

import pytest

from conftest import need_tool, run_cli
from test_split_link import plain  # noqa: F401  (the fixture: objects without function sections)

from elflayout.order import defaults


def _steps(stderr: str) -> dict[str, str]:
    """The summary lines ``name: value (why)...`` by step name."""
    out = {}
    for line in stderr.splitlines():
        body = line.removeprefix("elflayout: link: ")
        for name in ("split", "algorithm", "data order", ".dynstr order", "pack", "profile", "check"):
            if body.startswith(name + ": ") and line.startswith("elflayout: link: "):
                out[name] = body[len(name) + 2:]
    return out


def test_pack_auto_follows_glibc_and_linker():
    assert defaults.pack_form(None, "lld", glibc=(2, 36)).value == "pack-relocs"
    assert defaults.pack_form("auto", "gold", glibc=(2, 40)).value == "pack-relocs"
    assert defaults.pack_form(None, "lld", glibc=(2, 35)).value == "self"
    assert defaults.pack_form(None, "gold", glibc=(2, 31)).value is None
    assert defaults.pack_form("none", "lld", glibc=(2, 40)).value is None
    assert defaults.pack_form("relr", "lld", glibc=(2, 31)).value == "relr"


def test_split_auto_only_without_function_sections(plain, tmp_path):  # noqa: F811
    import order_testlib as testlib

    assert defaults.split_step(None, plain["objects"], "lld").value is True
    assert "functions)" in defaults.split_step(None, plain["objects"], "lld").why
    d = testlib.build_profiled(tmp_path, n_objects=2, funcs_per_object=4, seed=5)
    assert defaults.split_step(None, [str(o) for o in d["objects"]], "lld").value is False
    assert defaults.split_step(None, plain["objects"], "objects").value is False
    assert defaults.split_step(False, plain["objects"], "lld").value is False


def test_default_link_applies_every_step(plain, tmp_path):  # noqa: F811
    need_tool("ld.lld")
    lib = tmp_path / "l.so"
    r = run_cli("link", "--profile", plain["profile"], "--linker", "lld", "--",
                "gcc", "-shared", "-fuse-ld=lld", "-o", lib, *plain["objects"])
    assert r.returncode == 0, r.stderr
    s = _steps(r.stderr)
    assert s["split"].startswith("on (no function sections: ")
    assert s["algorithm"].split()[0] in ("first-access", "hot-last") and "readahead model" in s["algorithm"]
    assert "predicted: first-access " in s["algorithm"] and " pages, hot-last " in s["algorithm"]
    assert s["data order"].startswith("on (lld data-section script")
    assert s[".dynstr order"].startswith("on ")
    assert "pack" in s and s["check"].startswith("on ")
    # the synthetic profile is one run with stdout inherited: the summary says how to record one as measured
    assert s["profile"].startswith("other conditions (not stdout to /dev/null nor several runs merged")
    assert "--symbol-ordering-file=" in r.stderr and "dynstr.rsp" in r.stderr
    assert "100.0% in profile order" in r.stderr


def test_each_default_step_can_be_turned_off(plain, tmp_path):  # noqa: F811
    need_tool("ld.lld")
    lib = tmp_path / "l.so"
    r = run_cli("link", "--profile", plain["profile"], "--linker", "lld", "--algorithm", "first-access",
                "--no-data", "--no-dynstr", "--no-split", "--pack", "none", "--no-check-order", "--",
                "gcc", "-shared", "-fuse-ld=lld", "-o", lib, *plain["objects"])
    # not split, so not in order: without the check that is not an error
    assert r.returncode == 0, r.stderr
    s = _steps(r.stderr)
    assert s["split"] == "off (--no-split)"
    assert s["algorithm"].startswith("first-access (asked)")
    assert s["data order"] == "off (--no-data)"
    assert s[".dynstr order"] == "off (--no-dynstr)"
    assert s["pack"] == "off (--pack none)"
    assert s["check"] == "off (--no-check-order)"
    assert "dynstr.rsp" not in r.stderr and "data.ld" not in r.stderr and "split" not in r.stderr.split("split:")[0]
    assert lib.exists()


@pytest.mark.parametrize("opt", ["--data-script", "--dynstr"])
def test_lld_companions_refused_for_gnu_ld(plain, tmp_path, opt):  # noqa: F811
    r = run_cli("link", opt, "--profile", plain["profile"], "--linker", "bfd", "--",
                "gcc", "-shared", "-o", tmp_path / "l.so", *plain["objects"], check=2)
    assert "an lld companion" in r.stderr


def test_algorithm_auto_takes_the_fewer_predicted_pages(monkeypatch):
    u = type("U", (), {"text_order": [("f", ".text.f", "a.o")]})()
    pred = {"first-access": 120, "hot-last": 110}
    seen = []
    monkeypatch.setattr(defaults, "predict_algorithms", lambda t, ra, *_, **kw: seen.append(ra) or dict(pred))
    s = defaults.algorithm_step("auto", "lld", None, u)
    assert s.value == "hot-last" and "first-access 120 pages, hot-last 110 pages" in s.predicted
    # the window of a typical machine, not the profile's (the profiling machine's device setting)
    assert seen == [128]
    pred["hot-last"] = 120  # a tie keeps first-access
    assert defaults.algorithm_step("auto", "lld", None, u).value == "first-access"
    pred["hot-last"] = 1
    assert defaults.algorithm_step("auto", "gold", None, u).value == "first-access"  # .init/.plt first
    assert defaults.algorithm_step("auto", "lld", None, None).value == "first-access"  # no cold list
    assert defaults.algorithm_step("first-access", "lld", None, u).value == "first-access"


def test_hot_last_without_a_link_map_says_to_profile_with_one(monkeypatch):
    """A profile recorded without --map cannot place code outside sized function symbols
    (libzstd's CMake build read 173 pages against 110 with a map): the step says so."""
    u = type("U", (), {"text_order": [("f", ".text.f", "a.o")]})()
    monkeypatch.setattr(defaults, "predict_algorithms", lambda t, ra, *_, **kw: {"first-access": 120, "hot-last": 110})
    bare, mapped = (type("T", (), {"objects": objs})() for objs in ([], ["a.o"]))
    assert "profile --map" in defaults.algorithm_step("auto", "lld", bare, u).why
    assert "profile --map" not in defaults.algorithm_step("auto", "lld", mapped, u).why


def test_hot_last_layout_ends_its_section_past_bytes_outside_functions():
    """The hot-last what-if puts the touched code at the end of its section, as lld links
    it, even where the section holds bytes no function symbol covers (assembly tables,
    padding: OpenSSL's perlasm code); packing those bytes away left the touched code
    pages short of ``.init``/``.plt`` and the model saw no gain from hot-last."""
    import numpy as np

    from elflayout.order import heldout
    from elflayout.profile.model import Target

    sec = type("S", (), {"offset": 0x1000, "size": 0x9000, "occupies_file": True, "flags": 0x4, "name": ".text"})
    img = type("I", (), {"sections": [sec], "path": "lib.so"})()
    start = np.array([0x1000, 0x2000, 0x3000], dtype=np.int64)  # 0x4000..0xa000: a table, no symbol
    base = heldout.Layout(start, np.full(3, 0x100, dtype=np.int64), ["c0", "c1", "hot"], start.copy())
    train = Target.__new__(Target)
    train.functions = [type("F", (), {"offset": 0x3000})()]
    lay = heldout.ordered_layout(img, base, train, hot_last=True)
    assert lay.new[2] + 0x100 == 0xa000  # ends .text
    assert list(lay.new[:2]) == [0x1000, 0x1100]  # cold code packed from the start
    assert heldout.ordered_layout(img, base, train).new[2] == 0x1000  # first-access: at the start


def test_profiled_objects_are_matched_by_name_in_a_link_elsewhere():
    """link --split links copies in a temporary directory: the profiled build's objects
    (data sections named with their file) must name those copies, or the data script
    matches nothing of them."""
    from elflayout.order.resolve import same_objects

    profiled = ["/cache/split/a.o", "/cache/split/b.o", "/usr/lib/crti.o", None, "/x/dup.o", "/y/dup.o"]
    link = ["/tmp/l/0/a.o", "/tmp/l/1/b.o", "/usr/lib/crti.o", "/tmp/l/2/dup.o", "/tmp/l/3/dup.o"]
    assert same_objects(profiled, link) == ["/tmp/l/0/a.o", "/tmp/l/1/b.o", "/usr/lib/crti.o", None,
                                            "/x/dup.o", "/y/dup.o"]


def test_default_link_moves_debug_info_when_the_model_predicts_fewer_pages(tmp_path):
    """A link whose output carries debug sections after its last segment: the default path
    moves them into the hole the readahead model picks (the step says so, with the
    prediction), ``--no-move-symtab`` leaves them; the library runs either way."""
    import subprocess

    import order_testlib as testlib
    from elflayout.elfcore import ElfImage

    need_tool("ld.lld")
    d = testlib.build_profiled(tmp_path / "b", n_objects=6, funcs_per_object=8, seed=3, linker="lld")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4096)
    (tmp_path / "junk.c").write_text("int junk_unused;\n")
    jo = tmp_path / "junk.o"
    subprocess.run(["gcc", "-c", "-fPIC", str(tmp_path / "junk.c"), "-o", str(jo)], check=True)
    subprocess.run(["objcopy", "--add-section", f".debug_junk={junk}", str(jo)], check=True)
    tails = {}
    for name, opts in (("auto", []), ("off", ["--no-move-symtab"])):
        lib = tmp_path / name / "libsynth.so"
        lib.parent.mkdir()
        r = run_cli("link", "--profile", d["profile"], *opts, "--linker", "lld", "--", "gcc", "-shared",
                    "-fuse-ld=lld", "-o", lib, *map(str, d["objects"]), jo)
        assert r.returncode == 0, r.stderr
        step = next(ln for ln in r.stderr.splitlines() if ln.startswith("elflayout: link: move symtab: "))
        with ElfImage(lib) as img:
            tails[name] = img.size - max(g.offset + g.filesz for g in img.loads)
            assert img.section(".debug_junk").size == 1 << 20
        env = {"LD_LIBRARY_PATH": str(lib.parent)}
        assert subprocess.run([str(d["driver"])], env=env, capture_output=True).returncode == 0
        if name == "auto":
            assert step.startswith("elflayout: link: move symtab: on (the readahead model predicts fewer pages; ")
            assert "; readahead model at read_ahead_kb 128: at the tail " in step
        else:
            assert step == "elflayout: link: move symtab: off (--no-move-symtab)"
    assert tails["auto"] == 0 and tails["off"] >= 1 << 20


def test_code_sections_the_map_names_move_with_the_functions():
    """crtbeginS.o's .text (frame_dummy: no sized symbol) runs at load; with the link map
    the ordering places it at its first access, so the what-if moves it with the
    functions, and its touch (not the padding after it) goes where it went. Left at the
    start of .text, with the debug info moved before the code, the hot-last what-if read
    a 32-page window there (gcc -g libzstd through split: 122 pages predicted, 91
    measured; now 90)."""
    import numpy as np

    from elflayout.order import heldout

    sec = type("S", (), {"offset": 0x1000, "size": 0x9000, "occupies_file": True, "flags": 0x4, "name": ".text"})
    img = type("I", (), {"sections": [sec], "path": "lib.so"})()
    start = np.array([0x1100, 0x2000, 0x3000], dtype=np.int64)
    base = heldout.Layout(start, np.full(3, 0x100, dtype=np.int64), ["c0", "c1", "hot"], start.copy())
    ext = np.zeros(2, dtype=[("offset", "<i8"), ("size", "<i8")])
    ext["offset"], ext["size"] = [0x1000, 0x1100], [0xb9, 0x2f00]
    u = type("U", (), {"extents": ext, "extent_names": [".text", ".text"],
                       "extent_objects": ["crtbeginS.o", "a.o"]})()
    ran = [(5, 0x1000, 0x10c0, sec, False)]  # the crt code and the padding after it
    code = heldout.code_sections(ran, u, base)
    assert code == [(5, 0x1000, 0xb9, "<.text of crtbeginS.o>")]  # a.o's .text holds functions
    full = heldout.with_code(base, code)
    train = type("T", (), {"functions": [type("F", (), {"offset": 0x3000, "first": 10})()], "pages": []})()
    lay = heldout.ordered_layout(img, full, train, hot_last=True, code=code)
    crt, hot = lay.new[0], lay.new[3]
    assert crt + 0xb9 <= hot and hot + 0x100 == 0xa000  # in first-access order, ending .text
    pages, kinds = heldout.touches(train, lay, ran, code)
    assert pages.tolist() == [crt // 4096, (crt + 0xb8) // 4096, hot // 4096] and set(kinds.tolist()) == {b"x"}
    assert heldout.ordered_layout(img, full, train, code=code).new[0] == 0x1000  # first-access: first


def test_algorithm_is_predicted_on_the_layout_move_symtab_makes(plain, tmp_path):  # noqa: F811
    """--move-symtab (and by default the move step) puts the unloaded sections into the hole
    where they read fewest, which changes what the read-around reaches: the algorithm is
    predicted on that layout (clang-22
    ThinLTO libzstd -g: without it the step chose hot-last, 97 pages measured, where
    first-access read 84; predicted now 96 and 83)."""
    need_tool("ld.lld")
    lib = tmp_path / "l.so"
    r = run_cli("link", "--profile", plain["profile"], "--linker", "lld", "--move-symtab", "--",
                "gcc", "-shared", "-fuse-ld=lld", "-o", lib, *plain["objects"])
    assert r.returncode == 0, r.stderr
    s = _steps(r.stderr)["algorithm"]
    assert "code layout, the unloaded sections where they read fewest" in s and "predicted: first-access " in s, s
    r = run_cli("link", "--profile", plain["profile"], "--linker", "lld", "--no-move-symtab", "--",
                "gcc", "-shared", "-fuse-ld=lld", "-o", lib, *plain["objects"])
    assert "code layout only" in _steps(r.stderr)["algorithm"]


def test_the_body_of_a_long_function_moves_with_it():
    """A long function's body runs after its entry, on pages no profiled function enters:
    the what-if touches them where the layout moves the function (libsqlite3 through
    split, hot-last: 183 pages predicted, 186 measured; now 185)."""
    import numpy as np

    from elflayout.order import heldout

    sec = type("S", (), {"offset": 0x1000, "size": 0x9000, "occupies_file": True, "flags": 0x4, "name": ".text"})
    img = type("I", (), {"sections": [sec], "path": "lib.so"})()
    start = np.array([0x1000, 0x5000], dtype=np.int64)
    base = heldout.Layout(start, np.array([0x100, 0x2800], dtype=np.int64), ["cold", "long"], start.copy())
    fn = type("F", (), {"offset": 0x5000, "size": 0x2800, "first": 0})()
    body = type("P", (), {"page": 7, "kind": "x", "first": 1})()  # 0x7000: 0x2000 into "long"
    train = type("T", (), {"functions": [fn], "pages": [body]})()
    lay = heldout.ordered_layout(img, base, train)  # first-access: "long" first, at 0x1000
    assert heldout.touches(train, lay)[0].tolist() == [1]
    assert heldout.touches(train, lay, bodies=True)[0].tolist() == [1, 3]
