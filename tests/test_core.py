"""The shared skeleton: CLI dispatch, atomic outputs, envelopes, ELF core, tracefs."""

import os
import subprocess

import numpy as np
import pytest

from conftest import need_root_tracefs, run_cli
from test_relocs import lld_reference_encode as _relr_reference
from elflayout import fileio
from elflayout.elfcore import ElfImage, relr_decode, relr_encode, relr_size
from elflayout.errors import ElflayoutError


def test_top_level_help_lists_every_verb():
    from elflayout.cli import VERBS

    r = run_cli("--help", check=0)
    for verb in VERBS:
        assert verb in r.stdout


def test_unknown_verb_is_one_line_exit_2():
    r = run_cli("frobnicate")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "unknown verb" in r.stderr


def test_envelope_round_trip_and_version_check(tmp_path):
    p = tmp_path / "x.json"
    fileio.dump_json(fileio.envelope("thing", 1, {"a": 1}, items=[1, 2]), p)
    assert fileio.load_json(p, "thing")["items"] == [1, 2]
    with pytest.raises(ElflayoutError, match="version 1 is not supported"):
        fileio.load_json(p, "thing", versions=(2,))
    with pytest.raises(ElflayoutError, match="expected an elflayout-other file"):
        fileio.load_json(p, "other")
    gz = tmp_path / "x.json.gz"
    fileio.dump_json(fileio.envelope("thing", 1, {}), gz)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert fileio.load_json(gz, "thing")["format"] == "elflayout-thing"
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ElflayoutError, match="not valid JSON"):
        fileio.load_json(tmp_path / "bad.json", "thing")


def test_atomic_output_keeps_old_file_on_failure(tmp_path):
    p = tmp_path / "out.bin"
    p.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with fileio.atomic_output(p) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("interrupted")
    assert p.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["out.bin"]


def test_check_output_refuses_existing_and_input(tmp_path):
    p = tmp_path / "o"
    p.write_text("mine")
    with pytest.raises(ElflayoutError, match="use --force"):
        fileio.check_output(p)
    assert fileio.check_output(p, force=True) == p
    with pytest.raises(ElflayoutError, match="overwrite the input"):
        fileio.check_output(p, force=True, inputs=(p,))
    with pytest.raises(ElflayoutError, match="does not exist"):
        fileio.check_output(tmp_path / "no" / "o")


@pytest.mark.parametrize("seed", range(5))
def test_relr_encode_matches_reference(seed):
    rng = np.random.default_rng(seed)
    # Dense runs, gaps exactly at the 63-word boundary, and sparse singles.
    parts = [np.arange(0x1000, 0x1000 + 8 * 200, 8), 0x1000 + 8 * 200 + 8 * 63 * np.arange(1, 4),
             rng.choice(np.arange(0x10000, 0x90000, 8), 500, replace=False)]
    offs = np.concatenate(parts).astype(np.uint64)
    got = relr_encode(offs)
    assert got.tolist() == _relr_reference(offs)
    assert np.array_equal(relr_decode(got), np.unique(offs))
    assert relr_size(offs) == 8 * len(got)


def test_relr_rejects_misaligned():
    with pytest.raises(ValueError):
        relr_encode(np.array([0x1001], dtype=np.uint64))


def test_elfimage_sections_match_readelf():
    lib = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    img = ElfImage(lib)
    out = subprocess.run(["readelf", "-SW", lib], capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        line = line.replace("[ ", "[")
        parts = line.split()
        if len(parts) > 6 and parts[0].startswith("[") and parts[0] != "[Nr]":
            rows[parts[1]] = (int(parts[4], 16), int(parts[5], 16))
    for s in img.sections[1:]:
        assert rows[s.name] == (s.offset, s.size), s.name
    assert img.build_id and len(img.build_id) == 40
    text = img.section(".text")
    assert img.vaddr_to_offset(text.addr) == text.offset
    assert img.offset_to_vaddr(text.offset) == text.addr
    assert img.sections[img.section_of_offsets([text.offset])[0]].name == ".text"


def test_elfimage_bad_inputs(tmp_path):
    with pytest.raises(ElflayoutError, match="no such file"):
        ElfImage(tmp_path / "missing")
    with pytest.raises(ElflayoutError, match="is a directory"):
        ElfImage(tmp_path)
    (tmp_path / "t.txt").write_text("hello world, not elf")
    with pytest.raises(ElflayoutError, match="not an ELF file"):
        ElfImage(tmp_path / "t.txt")
    data = open("/usr/lib/x86_64-linux-gnu/libc.so.6", "rb").read()
    (tmp_path / "trunc.so").write_bytes(data[: len(data) // 3])
    with pytest.raises(ElflayoutError, match="truncated"):
        ElfImage(tmp_path / "trunc.so")


@pytest.mark.root
def test_trace_session_counts_pages_read(tmp_path):
    """Reading a freshly evicted file inserts exactly its pages into the page cache."""
    need_root_tracefs()
    from elflayout.tracefs import TRACEFS, TraceSession, file_key

    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(64 * 4096))
    fd = os.open(f, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    with TraceSession([f]) as ts:
        os.pread(fd, 4096, 10 * 4096)  # one page, plus whatever read-ahead the kernel adds
        name = ts.dir.name
    os.close(fd)
    adds = ts.result.of(file_key(f), "add")
    pages = set()
    for p, n in zip(adds["page"], adds["npages"]):
        pages.update(range(int(p), int(p) + int(n)))
    assert 10 in pages and pages <= set(range(64))
    assert not (TRACEFS / "instances" / name).exists()  # the instance is removed


@pytest.mark.root
def test_trace_session_of_many_files_splits_filters_and_follows_a_pid(tmp_path):
    """More files than one event filter holds: several instances, every file's pages
    counted, and ``follow`` limits all of them to a process tree."""
    need_root_tracefs()
    from elflayout.tracefs import TRACEFS, TraceSession, file_key

    files = []
    for i in range(300):
        f = tmp_path / f"f{i:03d}"
        f.write_bytes(os.urandom(4096 * (1 + i % 3)))
        files.append(f)
    os.sync()
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    with TraceSession(files, kinds=("add",)) as ts:
        names = [d.name for d in ts.dirs]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the followed child reads the even files once told to
            os.read(r, 1)
            for f in files[::2]:
                with open(f, "rb") as fh:
                    fh.read()
            os._exit(0)
        ts.follow(pid)
        os.write(w, b"g")
        os.waitpid(pid, 0)
        for f in files[1::2]:  # this process is not followed: not recorded
            with open(f, "rb") as fh:
                fh.read()
    assert len(names) > 1
    for i, f in enumerate(files):
        got = int(ts.result.of(file_key(f), "add")["npages"].sum())
        assert got == (1 + i % 3 if i % 2 == 0 else 0), (f, got)
    assert ts.result.lost == 0
    assert not any((TRACEFS / "instances" / n).exists() for n in names)
