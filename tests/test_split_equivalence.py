"""``split --check`` in other orders (split/equivalence.py): the split objects linked
reversed and shuffled must mean what the originals mean, and ``--run CMD`` must print
the same. Wrong splits are made by switching rules off, so each test shows the check
catching a wrong object that the original-order comparison passes."""

import subprocess
from pathlib import Path

import pytest

from conftest import need_tool, run_cli

from elflayout.errors import Finding
from elflayout.split import api, plan
from elflayout.split.check import check
from elflayout.split.equivalence import equivalent, other_orders, run

IDIOMS = Path(__file__).parent / "data" / "split_idioms"
LIB_C = r"""
static int sq(int x) { return x * x; }
static int add3(int x) { return sq(x) + 3; }
static int tab[4] = {1, 2, 3, 4};
int *ptr = &tab[2];
int idiom(int k) { return add3(k) + tab[k & 3] + *ptr; }
"""
RUN = 'gcc $ELFLAYOUT_LDFLAGS -o t $ELFLAYOUT_OBJECTS {main} && ./t'


@pytest.fixture
def objs(tmp_path):
    need_tool("gcc")
    need_tool("ld.lld")
    c = tmp_path / "lib.c"
    c.write_text(LIB_C)
    lib = tmp_path / "lib.o"
    subprocess.run(["gcc", "-O2", "-fPIC", "-fno-inline", "-c", "-o", lib, c], check=True)
    asm = tmp_path / "jt_rodata.o"
    subprocess.run(["gcc", "-c", "-o", asm, IDIOMS / "jt_rodata.s"], check=True)
    main = tmp_path / "main.o"
    subprocess.run(["gcc", "-O2", "-c", "-o", main, IDIOMS / "main.c"], check=True)
    return lib, asm, main


def _split(tmp_path, o, name="split"):
    out, _ = api.split_object(o.read_bytes(), o.name)
    p = tmp_path / name / o.name
    p.parent.mkdir(exist_ok=True)
    p.write_bytes(out)
    return p


def test_correct_split_same_meaning_in_other_orders(tmp_path, objs):
    lib, asm, main = objs
    for o in (lib, asm):
        res = equivalent([o], [_split(tmp_path, o)], "lld", "shared")
        assert [r.order for r in res] == ["reversed", "shuffled"]
        assert all(r.identical and r.functions_compared >= 3 for r in res), res
    assert equivalent([lib], [_split(tmp_path, lib)], "lld", "shared")[0].data_words_compared >= 1


def test_missed_assembler_reference_found_in_other_order(tmp_path, objs, monkeypatch):
    """A split that leaves ``call sq`` as the assembler resolved it: identical in the
    original order, a call to the wrong function once reordered."""
    lib, _, _ = objs
    real = plan.disasm.analyse

    def blind(*a, **k):
        code = real(*a, **k)
        code.internal = []
        return code
    monkeypatch.setattr(plan.disasm, "analyse", blind)
    monkeypatch.setattr(plan, "_reach_rules", lambda *a: None)
    wrong = _split(tmp_path, lib)
    assert check([lib], [wrong], "lld").identical
    res = equivalent([lib], [wrong], "lld", "shared")
    assert not res[0].identical         # reversed (the shuffle may keep sq where it was)
    assert any("add3, instruction 0: call lib.c:sq+0x0 in the original link" in d for d in res[0].differences), res[0]


def test_label_difference_found_by_run_only(tmp_path, objs, monkeypatch):
    """The split of jt_rodata.s without the rules against assembler-resolved differences:
    the comparison of meaning cannot see it (the table is plain bytes), --run can."""
    _, asm, main = objs
    monkeypatch.setattr(plan, "_reach_rules", lambda *a: None)
    wrong = _split(tmp_path, asm)
    assert check([asm], [wrong], "lld").identical
    assert all(r.identical for r in equivalent([asm], [wrong], "lld", "shared"))
    res = run([asm], [wrong], RUN.format(main=main), "lld")
    assert not res[0].identical, res
    monkeypatch.undo()
    assert all(r.identical for r in run([asm], [_split(tmp_path, asm, "good")], RUN.format(main=main), "lld"))


def test_failed_run_writes_nothing(tmp_path, objs, monkeypatch):
    _, asm, main = objs
    monkeypatch.setattr(plan, "_reach_rules", lambda *a: None)
    results = []

    def verify(originals, staged):
        r = check(originals, staged, "lld")
        other_orders(originals, staged, "lld", r.style, RUN.format(main=main), results)
    with pytest.raises(Finding, match="--run reversed order"):
        api.split_inputs([asm], tmp_path / "out", verify=verify)
    assert not (tmp_path / "out" / asm.name).exists()


def test_cli_check_run(tmp_path, objs):
    _, asm, main = objs
    r = run_cli("split", asm, "-o", tmp_path / "o", "--check", "--run", RUN.format(main=main), check=0)
    assert "check (lld, reversed order): same meaning" in r.stdout
    assert "check (lld, shuffled order): same output of --run" in r.stdout
    r = run_cli("split", asm, "-o", tmp_path / "o2", "--run", "true")
    assert r.returncode == 2 and "--run needs --check" in r.stderr
