"""A short seeded fuzz run (relocs/fuzz.py); the long one is bench/bench_fuzz.py."""

from pathlib import Path

import pytest

import relocs_testlib as testlib
from conftest import need_tool
from elflayout.relocs import fuzz


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    need_tool("gcc")
    w = tmp_path_factory.mktemp("fuzzlibs")
    out = [testlib.build(w, linker)["lib"] for linker in ("bfd", "lld")]
    z = Path("/usr/lib/x86_64-linux-gnu/libz.so.1")
    return out + ([z] if z.exists() else [])


def test_short_fuzz_run_has_no_internal_error_and_no_wrong_output(libs, tmp_path):
    t = fuzz.run(libs, seed=20261124, count=60, workdir=tmp_path)
    assert t.variants == 60
    assert t.internal_errors == 0 and t.inputs_modified == 0 and t.multi_line_messages == 0, t.failures
    assert t.accepted_differs == 0, t.failures
    # The run exercised both outcomes: damage refused, and damage that still packs and loads.
    assert t.refused > 0 and t.accepted_equal > 0
    assert len(t.by_kind) >= 6


def test_variants_are_reproducible(libs):
    data = libs[0].read_bytes()
    import numpy as np

    a = fuzz.damage(data, "dynamic", np.random.default_rng([5, 17]))
    b = fuzz.damage(data, "dynamic", np.random.default_rng([5, 17]))
    c = fuzz.damage(data, "dynamic", np.random.default_rng([5, 18]))
    assert a == b != data and a != c


@pytest.mark.parametrize("form", ["relr", "self"])
def test_short_fuzz_of_executables(tmp_path, form):
    """Damaged PIE executables (GNU ld, lld) in both forms: refused with one line or
    packed into an output that starts with the same writable bytes at its entry point
    (self form: the routine as the preinit entry, the lld one in a segment of its own)."""
    need_tool("gcc")
    src = tmp_path / "src"
    src.mkdir()
    obj = testlib.compile_lib(src, 24, ifunc=form == "relr")  # the self form refuses IRELATIVE
    exes = []
    for linker in ("bfd", "lld"):
        exe = tmp_path / f"exe-{linker}"
        testlib._run(["gcc", "-pie", "-fPIE", f"-fuse-ld={linker}", str(src / "main.c"), str(obj), "-o", str(exe)])
        exes.append(exe)
    t = fuzz.run(exes, seed=20261126, count=40, workdir=tmp_path / "w", form=form)
    assert t.internal_errors == 0 and t.inputs_modified == 0 and t.multi_line_messages == 0, t.failures
    assert t.accepted_differs == 0, t.failures
    assert t.refused > 0 and t.accepted_equal > 0


def test_symbol_index_past_dynsym_is_refused(tmp_path):
    """A relocation naming a symbol past .dynsym makes ld.so read whatever follows the
    table; a packed output that moved the table resolves other bytes (arm64 fuzz, seed 1
    variant 4955: accepted, 6 bytes different after a real load). Refused, one line."""
    import numpy as np

    from elflayout import layouts as L
    from elflayout.errors import ElflayoutError
    from elflayout.relocs import simload

    lib = testlib.build(tmp_path, "bfd", run=False)["lib"]
    data = bytearray(lib.read_bytes())
    with simload.Loaded(lib) as lo:
        nsym = next(s.size // L.SYM64.itemsize for s in lo.img.sections if s.type == "SHT_DYNSYM")
        rela = lo.img.vaddr_to_offset(lo.tag(L.DT_RELA))
        ents = np.frombuffer(bytes(data), L.RELA64, lo.tag(L.DT_RELASZ) // L.RELA64.itemsize, rela)
    k = int(np.flatnonzero(L.r_sym(ents["r_info"]) != 0)[0])
    info = (int(nsym) + 1000) << 32 | int(ents["r_info"][k]) & 0xFFFFFFFF
    data[rela + k * L.RELA64.itemsize + 8:rela + k * L.RELA64.itemsize + 16] = info.to_bytes(8, "little")
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(data))
    with pytest.raises(ElflayoutError, match="past the end of .dynsym") as e:
        simload.check(bad, bad, real_load=False)
    assert "\n" not in str(e.value)


def test_tls_segment_past_the_address_space_is_refused(tmp_path):
    """A PT_TLS program header whose end passes 2**63 (arm64 fuzz, seed 2 variant 1907,
    self form): one line, exit 2, not an OverflowError."""
    import numpy as np

    from elflayout import layouts as L
    from elflayout.errors import ElflayoutError
    from elflayout.relocs.pack import pack

    lib = testlib.build(tmp_path, "bfd", run=False, ifunc=False)["lib"]  # ifuncs: refused before
    data = bytearray(lib.read_bytes())
    phoff, phnum = int.from_bytes(data[32:40], "little"), int.from_bytes(data[56:58], "little")
    ph = np.frombuffer(bytes(data), L.PHDR64, phnum, phoff)
    k = int(np.flatnonzero(ph["p_type"] == L.PT_NOTE)[0])
    e = phoff + k * L.PHDR64.itemsize
    data[e:e + 4] = L.PT_TLS.to_bytes(4, "little")
    data[e + 32:e + 40] = (0).to_bytes(8, "little")  # p_filesz
    data[e + 40:e + 48] = (0x8900_0000_0000_0020).to_bytes(8, "little")  # p_memsz, as the fuzz's damage
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(data))
    with pytest.raises(ElflayoutError) as err:
        pack(bad, tmp_path / "out.so", form="self")
    assert "\n" not in str(err.value)


def test_segment_past_the_end_of_the_file_is_refused(tmp_path):
    """A program header whose p_offset + p_filesz wraps past 2**64 (arm64 fuzz, seed 3:
    a numpy overflow warning, the sum read as a small offset): one line, exit 2, before
    any plan adds offsets."""
    import warnings

    import numpy as np

    from elflayout import layouts as L
    from elflayout.errors import ElflayoutError
    from elflayout.relocs.pack import pack

    lib = testlib.build(tmp_path, "bfd", run=False)["lib"]
    data = bytearray(lib.read_bytes())
    phoff, phnum = int.from_bytes(data[32:40], "little"), int.from_bytes(data[56:58], "little")
    ph = np.frombuffer(bytes(data), L.PHDR64, phnum, phoff)
    e = phoff + int(np.flatnonzero(ph["p_type"] == L.PT_NOTE)[0]) * L.PHDR64.itemsize
    data[e + 8:e + 16] = (2**64 - 0x1000).to_bytes(8, "little")  # p_offset
    data[e + 32:e + 40] = (0x2000).to_bytes(8, "little")  # p_filesz: the sum wraps to 0x1000
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ElflayoutError, match="past the end of the file") as err:
            pack(bad, tmp_path / "out.so", form="relr")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out.so").exists()


def test_probe_builds_once_under_concurrent_first_use():
    """Fuzz workers (bench_fuzz --arm64 --jobs 2 on a fresh tree) build the arm64 load
    probe at the same moment; unlocked, two makes wrote the same file and one worker died
    with "cannot build". Four processes forced to rebuild must all get the probe."""
    import multiprocessing
    import os

    from elflayout.relocs import realload

    need_tool("aarch64-linux-gnu-gcc")
    exe = realload.c_probe()
    os.utime(exe, (0, 0))  # older than its source: every caller rebuilds
    with multiprocessing.get_context("fork").Pool(4) as pool:
        got = pool.map(_probe_path, range(4))
    assert got == [str(exe)] * 4
    assert exe.stat().st_mtime > 0


def _probe_path(_i):
    from elflayout.relocs import realload
    return str(realload.c_probe())


def test_read_only_segment_with_memsz_past_filesz_is_refused(tmp_path):
    """A read-only PT_LOAD whose p_memsz exceeds p_filesz by one byte (arm64 fuzz, seed 5
    variant 1038, self form): ld.so zero-fills the rest of its last page, where the packed
    layout had put bytes; the output differed after a real load. Refused, one line."""
    import numpy as np

    from elflayout import layouts as L
    from elflayout.errors import ElflayoutError
    from elflayout.relocs.pack import pack

    lib = testlib.build(tmp_path, "bfd", run=False, ifunc=False)["lib"]
    data = bytearray(lib.read_bytes())
    phoff, phnum = int.from_bytes(data[32:40], "little"), int.from_bytes(data[56:58], "little")
    ph = np.frombuffer(bytes(data), L.PHDR64, phnum, phoff)
    k = int(np.flatnonzero((ph["p_type"] == L.PT_LOAD) & ((ph["p_flags"] & L.PF_W) == 0))[-1])
    e = phoff + k * L.PHDR64.itemsize
    data[e + 40:e + 48] = (int(ph["p_memsz"][k]) + 1).to_bytes(8, "little")
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(data))
    for form in ("relr", "self"):
        with pytest.raises(ElflayoutError, match="zero the rest of its last page") as err:
            pack(bad, tmp_path / f"out-{form}.so", form=form)
        assert "\n" not in str(err.value)
        assert not (tmp_path / f"out-{form}.so").exists()
