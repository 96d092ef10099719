"""Read-only data placed by the bytes a run read (``profile --strings`` records them as
``rodata_read``), not by the pages it touched: a page holds many small tables, and one
read made all of them hot."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import need_tool, run_cli
from elflayout.errors import ElflayoutError
from elflayout.order.algorithms import first_access
from elflayout.order.resolve import Universe
from elflayout.profile import merge, model
from elflayout.profile.model import Page, Target

P = 4096


def _universe():
    """Three small tables on one page and a big one on pages of its own."""
    u = Universe(sections={".rodata.a", ".rodata.b", ".rodata.c", ".rodata.big"}, objects=["x.o", "y.o"])
    u.extents = np.array([(10 * P, 512), (10 * P + 512, 512), (10 * P + 1024, 512), (11 * P, 2 * P)],
                         dtype=[("offset", "<i8"), ("size", "<i8")])
    u.extent_names = [".rodata.a", ".rodata.b", ".rodata.c", ".rodata.big"]
    u.extent_objects = ["x.o", "x.o", "y.o", "y.o"]
    return u


def _target(runs=None):
    t = Target(path="lib.so", pages=[Page(p, i + 1, "r", ".rodata", "main") for i, p in enumerate((10, 11))])
    if runs is not None:
        t.extra[model.RODATA_READ] = runs
    return t


def test_only_the_tables_a_load_read_are_hot():
    """Page rule: every table on a touched page is hot. With the bytes read: only those
    holding one (b, and big through its first page), in first-touch order."""
    u = _universe()
    pages_only = first_access.compute(_target(), u)
    assert [n for n, _ in pages_only.data] == [".rodata.a", ".rodata.b", ".rodata.c", ".rodata.big"]
    exact = first_access.compute(_target([[10 * P + 600, 8], [11 * P + 4, 4]]), u)
    assert [n for n, _ in exact.data] == [".rodata.b", ".rodata.big"]


def test_a_run_that_ends_where_a_table_starts_does_not_touch_it():
    exact = first_access.compute(_target([[10 * P + 500, 12]]), _universe())
    assert [n for n, _ in exact.data] == [".rodata.a"]


def test_no_byte_read_leaves_every_table_cold():
    assert first_access.compute(_target([]), _universe()).data == []


def test_byte_runs_are_merged_sorted_and_disjoint():
    assert model.byte_runs([[10, 5], [0, 3], [12, 10], [30, 1], [3, 2], [40, 0]]) == [[0, 5], [10, 12], [30, 1]]
    assert model.byte_runs(np.zeros((0, 2), np.int64)) == []


def _doc(runs):
    t = _target(runs).to_dict()
    return model.new_profile({"tool": "test"}, [t])


@pytest.mark.parametrize("runs", [[[5, 0]], [[10, 4], [12, 4]], [[1, 2, 3]], [["0", 1]], "x"])
def test_a_damaged_record_is_refused(runs):
    with pytest.raises(ElflayoutError, match="rodata_read"):
        model.parse(_doc(runs), "p.json")


def test_a_damaged_record_on_the_command_line(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps(_doc([[10, 4], [12, 4]])))
    r = run_cli("order", p, "--format", "lld", "-o", tmp_path / "o.txt")
    assert r.returncode == 2 and not (tmp_path / "o.txt").exists()
    assert r.stderr.count("\n") == 1 and "rodata_read" in r.stderr and str(p) in r.stderr, r.stderr


def test_a_merge_keeps_what_any_workload_read():
    a, b = model.parse(_doc([[0, 4], [100, 4]])), model.parse(_doc([[2, 6], [200, 1]]))
    got = merge.merge([a, b], ["a", "b"], rule="shared")
    assert got["targets"][0][model.RODATA_READ] == [[0, 8], [100, 4], [200, 1]]


# pad.c linked first: the tables on a page of their own (the loader reads the first
# pages; -z separate-code keeps code and written data off it)
PAD_C = "const char pad[5 * 4096] = {1};\n"
LIB_C = """
const int t_near[256] = {4, 5, 6};
const int t_read[256] = {1, 2, 3};
int get(int i) { return t_read[i & 255]; }
"""
MAIN_C = "int get(int);\nint main(void) { return get(5) != 0; }\n"


@pytest.mark.valgrind
def test_profile_strings_records_the_bytes_and_order_uses_them(tmp_path):
    """A real run: ``t_read`` and ``t_near`` share a page; the run reads one word of
    ``t_read``. The profile's ``rodata_read`` holds that word, and the order puts
    ``t_read``'s section in the hot data, not ``t_near``'s."""
    from elflayout.order import pipeline
    from elflayout.profile.valgrind import tool_status

    if tool_status():
        pytest.skip(tool_status())
    need_tool("ld.lld")
    (tmp_path / "pad.c").write_text(PAD_C)
    (tmp_path / "s.c").write_text(LIB_C)
    (tmp_path / "m.c").write_text(MAIN_C)
    lib, mp = tmp_path / "libs.so", tmp_path / "libs.map"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-fdata-sections", "-fuse-ld=lld", "-Wl,-z,separate-code", "-o", lib,
                    "pad.c", "s.c",
                    f"-Wl,-Map,{mp}"], cwd=tmp_path, check=True)
    subprocess.run(["gcc", "-o", "m", "m.c", "-L.", "-ls", "-Wl,-rpath,$ORIGIN"], cwd=tmp_path, check=True)
    run_cli("profile", "--target", lib, "--map", mp, "--data", "--strings", "-o", tmp_path / "p.json", "--",
            tmp_path / "m", check=0)
    t = json.loads((tmp_path / "p.json").read_text())["targets"][0]
    from elftools.elf.elffile import ELFFile

    with open(lib, "rb") as f:
        ef = ELFFile(f)
        syms = {s.name: s for s in ef.get_section_by_name(".symtab").iter_symbols()}
        ro = ef.get_section_by_name(".rodata")
        delta = ro["sh_addr"] - ro["sh_offset"]
    word = syms["t_read"]["st_value"] - delta + 5 * 4
    near = syms["t_near"]["st_value"] - delta
    runs = np.asarray(t[model.RODATA_READ]).reshape(-1, 2)
    assert ((runs[:, 0] <= word) & (word + 4 <= runs[:, 0] + runs[:, 1])).any(), runs
    assert not ((runs[:, 0] < near + 1024) & (runs[:, 0] + runs[:, 1] > near)).any(), runs
    assert t["stats"]["rodata_bytes_read"] == int(runs[:, 1].sum())
    assert near // P == word // P   # one page: the page rule would make both hot
    o = pipeline.order(pipeline.Request(Path(tmp_path / "p.json"), "lld", lib=lib, objects_from=mp))
    names = [n for n, _ in o.layout.data]
    assert ".rodata.t_read" in names and ".rodata.t_near" not in names, names


@pytest.mark.parametrize("given, runs, want", [(None, [[0, 4]], True), (None, None, False), (False, [[0, 4]], False),
                                               (True, None, True)])
def test_hot_constants_default_follows_the_recorded_bytes(given, runs, want):
    """``link --hot-constants`` is on by default when the profile recorded the read-only
    bytes read (the hot data is then placed as exactly, and the touched objects'
    constants are what is left read in the cold .rodata)."""
    from types import SimpleNamespace

    from elflayout.order.relink import LinkOptions, _hot_constants

    assert _hot_constants(LinkOptions(hot_constants=given), SimpleNamespace(target=_target(runs))) is want


@pytest.mark.parametrize("given, strings, script, want", [
    (None, ["s"], True, True), (None, None, True, False), (None, ["s"], False, False), (False, ["s"], True, False),
    (True, None, True, True)])
def test_hot_strings_default_follows_the_recorded_strings(given, strings, script, want):
    """``link --hot-strings`` is on by default when the profile recorded the strings its
    run read and lld's data script places the pools; asked for without it, refused."""
    from types import SimpleNamespace

    from elflayout.order.relink import LinkOptions, _hot_strings_on

    t = _target()
    if strings is not None:
        t.extra["strings"] = strings
    assert _hot_strings_on(LinkOptions(hot_strings=given), SimpleNamespace(target=t), script) is want
    with pytest.raises(ElflayoutError, match="data script"):
        _hot_strings_on(LinkOptions(hot_strings=True), SimpleNamespace(target=t), False)
