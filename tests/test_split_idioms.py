"""elflayout split on a corpus of hand-written assembly idioms (tests/data/split_idioms:
each .s defines ``int idiom(int)``, its header says what main.c prints). Every idiom is
assembled with gcc, split, linked with lld in reversed and in shuffled symbol order and
run: the output must be the original's, and every pair the split kept together must say
why. Label differences the assembler resolves without a relocation (``.long h1 -
table``) are the case a relocation-driven split cannot see."""

import random
import re
import subprocess
from pathlib import Path

import pytest

from conftest import need_tool

from elflayout.split.api import split_object

IDIOMS = Path(__file__).parent / "data" / "split_idioms"
CASES = sorted(p.stem for p in IDIOMS.glob("*.s"))
# Rule that must appear among the reasons, for idioms whose danger only it sees.
NEEDS_RULE = {"jt_text": "unreferenced entry", "jt_rodata": "unreferenced entry", "jt_data": "assembler constant",
              "imm_diff": "assembler constant", "cfi_shared": "unwind range", "jt_cfi": "assembler constant"}


def _build(tmp, name):
    need_tool("gcc")
    need_tool("ld.lld")
    o = tmp / f"{name}.o"
    subprocess.run(["gcc", "-c", "-o", o, IDIOMS / f"{name}.s"], check=True)
    main = tmp / "main.o"
    subprocess.run(["gcc", "-O2", "-c", "-o", main, IDIOMS / "main.c"], check=True)
    return o, main


def _run(tmp, tag, objs, *flags):
    exe = tmp / tag
    subprocess.run(["gcc", "-fuse-ld=lld", "-o", exe, *map(str, objs), *flags], check=True, capture_output=True)
    r = subprocess.run([exe], capture_output=True, text=True, timeout=10)
    return r.returncode, r.stdout


def _symbols(obj):
    r = subprocess.run(["nm", "--defined-only", obj], capture_output=True, text=True, check=True)
    return [ln.split()[-1] for ln in r.stdout.splitlines() if ln.split()[1] in "tTdDbBrR"]


@pytest.mark.parametrize("name", CASES)
def test_idiom_split_runs_in_other_orders(tmp_path, name):
    o, main = _build(tmp_path, name)
    expected = re.search(r"Expected: ([-\d ]+)\.", (IDIOMS / f"{name}.s").read_text()).group(1)
    assert _run(tmp_path, "orig", [o, main]) == (0, expected + "\n")
    out, rep = split_object(o.read_bytes(), o.name)
    split = tmp_path / "split.o"
    split.write_bytes(out)
    syms = _symbols(split)
    shuffled = syms[:]
    random.Random(1).shuffle(shuffled)
    for tag, order in (("reversed", syms[::-1]), ("shuffled", shuffled)):
        f = tmp_path / f"{tag}.order"
        f.write_text("\n".join(order) + "\n")
        got = _run(tmp_path, tag, [split, main], f"-Wl,--symbol-ordering-file={f}", "-Wl,--no-warn-symbol-ordering")
        assert got == (0, expected + "\n"), f"{name} linked in {tag} order: {got}"
    for s in rep.sections:
        assert s.sections == s.units or s.kept_whole or s.glued, s     # kept together: with a reason
        assert all(g.reason and g.rule for g in s.glued)
    if name in NEEDS_RULE:
        rules = {g.rule for s in rep.sections for g in s.glued}
        assert NEEDS_RULE[name] in rules, (name, rules)


def test_rules_report_counts(tmp_path):
    """The summary counts what each rule kept together."""
    from elflayout.split.api import InputReport, summary
    o, _ = _build(tmp_path, "jt_data")
    _, rep = split_object(o.read_bytes(), o.name)
    tot = summary([InputReport(str(o), "x", False, [rep])])
    assert tot["glued_by_rule"].get("assembler constant", 0) >= 1, tot
    assert sum(tot["glued_by_rule"].values()) == tot["glued"]


COMPILED = r"""
static int h0(int x) { return x + 10; }
static int h1(int x) { return x + 20; }
int (*const tab[])(int) = {h0, h1};
int idiom(int k) { return tab[k & 1](k); }
"""


def test_compiled_code_not_scanned_for_constants(tmp_path):
    """A compiled object (``.comment``) is split function by function: its constants are
    not read as label differences."""
    need_tool("gcc")
    c = tmp_path / "c.c"
    c.write_text(COMPILED)
    o = tmp_path / "c.o"
    subprocess.run(["gcc", "-O2", "-fPIC", "-c", "-o", o, c], check=True)
    _, rep = split_object(o.read_bytes(), "c.o")
    text = next(s for s in rep.sections if s.name == ".text")
    assert text.sections == text.units == 3 and not text.glued, text
