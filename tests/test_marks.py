"""Tests are marked by what they cost (setup.cfg: root, valgrind, download, slow), so
``make test-fast`` can leave the costly ones out. A test that needs root and tracefs, runs
the valgrind profiler or downloads Debian packages must carry the mark, whether it does
so itself or through a fixture or helper: this reads every test module to check."""

import ast
from pathlib import Path

import pytest

import conftest

TESTS = Path(__file__).resolve().parent
SHARED = ("conftest.py", "order_testlib.py", "relocs_testlib.py", "oldglibc_root.py")
TARGETS = {"libpython", "libllvm", "libcrypto", "libstdcxx"}
FETCHING = {"prepare", "relink", "archives", "archive", "objects", "split_objects", "version_script"}


def _const(node):
    return node.value if isinstance(node, ast.Constant) else None


def _imports_a_target(fn) -> bool:
    """FN imports a real target's module (a fixture handing it out: ``crypto.prepare``)."""
    return any(isinstance(n, ast.ImportFrom) and n.module == "elflayout.targets"
               and any(a.name in TARGETS for a in n.names) for n in ast.walk(fn))


def _costs_of_call(call: ast.Call, defs) -> set[str]:
    """What one call costs by itself (the name it calls is followed separately)."""
    f = call.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None
    out = set()
    if name in ("need_root_tracefs", "geteuid"):  # geteuid: a test that skips unless root
        out.add("root")
    if name == "tool_status" or (owner == "valgrind" and name == "run"):
        out.add("valgrind")
    if name in ("run_cli", "cli") and call.args and _const(call.args[0]) == "profile":
        words = {_const(a) for a in call.args}
        check = {k.arg: _const(k.value) for k in call.keywords}.get("check")
        if not words & {"trace", "qemu"} and check != 2:  # exit 2: refused before valgrind starts
            out.add("valgrind")
    target = owner in TARGETS or (owner in defs and _imports_a_target(defs[owner]))
    if (target and name in FETCHING) or name in ("bullseye_root", "bullseye_arm64_root", "fetch_debs", "ensure_installed"):
        out.add("download")
    return out


def _functions(tree) -> dict:
    """Module-level functions, and names bound to an expression (as a function of no
    arguments named like the name, so that its calls count where the name is used)."""
    out = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            name = n.targets[0].id
            out.setdefault(name, ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                                                 kw_defaults=[], defaults=[]),
                                                 body=[ast.Expr(n.value)], decorator_list=[]))
    return out


def _costs(fn, defs, seen=None) -> set[str]:
    """Costs of FN and of every fixture (parameter), module function and decorator bound
    at module level (``needs_root = pytest.mark.skipif(os.geteuid() != 0, ...)``) it reaches."""
    seen = set() if seen is None else seen
    if fn.name in seen:
        return set()
    seen.add(fn.name)
    out = set()
    reached = [a.arg for a in fn.args.args] + [d.id for d in fn.decorator_list if isinstance(d, ast.Name)]
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            out |= _costs_of_call(node, defs)
            if isinstance(node.func, ast.Name):
                reached.append(node.func.id)
    for name in reached:
        if name in defs and defs[name] is not fn:
            out |= _costs(defs[name], defs, seen)
    return out


def _marks(decorators) -> set[str]:
    out = set()
    for d in decorators:
        for node in ast.walk(d):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
                out.add(node.attr)
    return out


def _module_marks(tree) -> set[str]:
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets):
            return _marks([n.value])
    return set()


def unmarked() -> list[str]:
    """``file::test: missing marks`` for every test whose costs lack their mark."""
    shared = {}
    for name in SHARED:
        if (TESTS / name).exists():
            shared |= _functions(ast.parse((TESTS / name).read_text()))
    out = []
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        defs = {**shared, **_functions(tree)}
        base = _module_marks(tree)
        tests = [(n, base) for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
        for c in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            tests += [(n, base | _marks(c.decorator_list)) for n in c.body
                      if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
        for fn, marks in tests:
            missing = _costs(fn, defs) - marks - _marks(fn.decorator_list)
            if missing:
                out.append(f"{path.name}::{fn.name}: {', '.join(sorted(missing))}")
    return out


def test_every_costly_test_is_marked():
    missing = unmarked()
    assert not missing, "tests without the mark of what they cost (setup.cfg markers):\n" + "\n".join(missing)


def test_the_check_sees_costs_through_fixtures_and_helpers():
    src = '''
import pytest
from conftest import need_root_tracefs, run_cli

@pytest.fixture
def prof(tmp_path):
    return run_cli("profile", "--target", "x", "-o", tmp_path / "p", "--", "true", check=0)

def helper():
    need_root_tracefs()

def test_a(prof):
    pass

def test_b():
    helper()

@pytest.mark.root
def test_c():
    helper()

def test_d(cli):
    cli("profile", "--target", "x", "-o", "p", check=2)
    cli("profile", "--backend", "trace", "--target", "x", "-o", "p")
    libllvm.system()

def test_e():
    libpython.prepare("lld")

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="root")

@needs_root
def test_g():
    pass

@pytest.fixture
def lib():
    from elflayout.targets import libcrypto
    return libcrypto

def test_f(lib):
    lib.prepare("lld")
'''
    tree = ast.parse(src)
    defs = _functions(tree)
    got = {n: _costs(defs[n], defs) - _marks(defs[n].decorator_list) for n in defs if n.startswith("test_")}
    assert got == {"test_a": {"valgrind"}, "test_b": {"root"}, "test_c": set(), "test_d": set(),
                   "test_e": {"download"}, "test_f": {"download"},
                   "test_g": {"root"}}


def test_an_unmarked_test_fails_when_it_needs_root_or_valgrind():
    """The run-time half: conftest fails a test that reaches need_root_tracefs() or the
    valgrind profiler without the mark (called through other names here, so that the
    static check above does not ask this test to carry the marks)."""
    from elflayout.profile import valgrind

    for call, mark in ((getattr(conftest, "need_root_tracefs"), "root"), (getattr(valgrind, "tool_status"), "valgrind")):
        with pytest.raises(pytest.fail.Exception, match=rf"test_marks.py::\S+ uses .* but is not marked @pytest.mark.{mark}"):
            call()
