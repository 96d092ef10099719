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


# -- what differs only in address, not in meaning: no difference in any order -------------
# Each case is also linked from a *wrong* variant (another symbol or offset), which the
# comparison must still report: naming by meaning must not hide a real difference.
CASES = Path(__file__).parent / "data" / "split_equivalence"
ASFLAGS = {"end_at_got": ["-Wa,-mrelax-relocations=no"]}


def _asm(tmp_path, name, **subst):
    """The case's objects (NAME.s, and NAME_user.s when the reference is in another object)."""
    tag = "_".join(subst.values())
    out = []
    for src in sorted(CASES.glob(f"{name}*.s")):
        text = src.read_text()
        for k, v in subst.items():
            text = text.replace(k, v)
        s = tmp_path / tag / src.name
        s.parent.mkdir(exist_ok=True)
        s.write_text(text)
        out.append(s.with_suffix(".o"))
        subprocess.run(["gcc", *ASFLAGS.get(name, []), "-c", "-o", out[-1], s], check=True)
    return out


def _verdicts(tmp_path, originals, candidates):
    split = [_split(tmp_path, o, f"split_{o.parent.name}") for o in candidates]
    return equivalent(originals, split, "lld", check(originals, split, "lld").style)


@pytest.mark.parametrize("name, good, wrong, expect", [
    # a non-PIC link relaxes the GOT load to `cmp $f1, %rdi`: named f1, not compared raw
    ("got_cmp", {"TARGET": "f1"}, {"TARGET": "f2"}, "user, instruction 1"),
    # `lea t4-0xc0(%rip)` lands in gb in one order, elsewhere in another: operand t4-0xc0
    ("operand", {"OFFSET": "0xc0"}, {"OFFSET": "0xb0"}, "user, instruction 0"),
    # `.long f1 - .` after a lea-loaded table designates f1, not an entry of that table
    ("named_word", {"TARGET": "f1"}, {"TARGET": "f2"}, "data word rel+0x0"),
    # `lea dirs+24(%rip)` is the end of dirs, also where the GOT starts in another order
    ("end_at_got", {"SIZE": "24"}, {"SIZE": "16"}, "user, instruction 0"),
])
def test_same_meaning_other_address(tmp_path, name, good, wrong, expect):
    need_tool("gcc")
    need_tool("ld.lld")
    original = _asm(tmp_path, name, **good)
    res = _verdicts(tmp_path, original, original)
    assert all(r.identical for r in res), [r.first_difference for r in res]
    bad = _verdicts(tmp_path, original, _asm(tmp_path, name, **wrong))
    assert not bad[0].identical and any(expect in d for d in bad[0].differences), bad[0].differences


def test_tables_of_functions_sharing_a_name(tmp_path):
    """Jump tables of two static functions named ``pick``: not compared as functions
    (which is which cannot be told), their lea still marks where their tables start, so
    no entry is read against another function's table in one order only."""
    need_tool("gcc")
    need_tool("ld.lld")
    objs = []
    for v in (0, 1, 2):
        o = tmp_path / f"dup{v}.o"
        subprocess.run(["gcc", "-O2", "-fPIC", "-c", f"-DVARIANT={v}", "-o", o, CASES / "dup_tables.c"], check=True)
        objs.append(o)
    split = [_split(tmp_path, o) for o in objs]
    res = equivalent(objs, split, "lld", "shared")
    assert all(r.identical for r in res), [r.first_difference for r in res]
    assert all(r.not_compared == 0 for r in res), res
