"""The package's stages import downwards only, even through imports inside functions.

Every ``import`` of an ``elflayout`` module is read with ``ast`` (module level and inside
functions alike: a lazy import hides a cycle, it does not remove it). A library module
belongs to its stage package (``measure``, ``report``, ...) or to ``core`` (the modules
directly under ``elflayout/``); verb modules (``*cli*``, ``demo``, ``__main__``) are the
top stage, which may import anything. Rules: a stage imports only its own level or
lower ones, stages of one level do not import each other in a cycle, and no library
module imports a verb module.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "tools" / "elflayout"

# Lower levels first. core: the modules directly under elflayout/ (ELF records, files,
# processes, tracefs). targets builds real libraries with split, so it sits beside split.
LEVELS = [
    {"core"},
    {"inspect", "profile"},
    {"order", "split", "relocs", "targets"},
    {"measure", "preload", "storage"},
    {"report"},
    {"cli"},
]
LEVEL = {stage: i for i, group in enumerate(LEVELS) for stage in group}

# Harnesses that run the CLI itself, in-process as a user would (exit status, one-line
# errors): they sit with the verbs at the top stage.
VERB_HARNESSES = {"elflayout.split.fuzz"}


def module_name(path: Path, root: Path = PKG) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PKG) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def is_verb(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return "cli" in last or name in ("elflayout.demo", "elflayout.__main__") or name in VERB_HARNESSES


def stage(name: str, packages: set[str]) -> str:
    if is_verb(name):
        return "cli"
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in packages else "core"


def imports(name: str, path: Path, known: dict[str, Path]):
    """(imported module, line, inside a function) of every elflayout import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    out = []

    def visit(node, in_func):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_func) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    here = name.split(".") if is_pkg else name.split(".")[:-1]
                    here = here[:len(here) - (child.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                for a in child.names:  # `from elflayout.x import y`: y may be a module
                    full = f"{base}.{a.name}"
                    out.append((full if full in known else base, child.lineno, in_func))
            visit(child, in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return [(m, line, f) for m, line, f in out if m == "elflayout" or m.startswith("elflayout.")]


def edges(root: Path = PKG):
    """[(importer, imported, line, inside a function)] over the package."""
    known = modules(root)
    return [(name, m, line, f) for name, path in known.items() for m, line, f in imports(name, path, known)]


def packages(root: Path = PKG) -> set[str]:
    return {p.name for p in root.iterdir() if (p / "__init__.py").exists()}


def package(name: str, packages: set[str]) -> str:
    """The stage package a module lies in, verb modules included (``measure.cli`` is
    ``measure``): stage packages must not form a cycle even through their verbs."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in packages else "core"


def stage_graph(root: Path = PKG, of=stage) -> dict[tuple[str, str], list[str]]:
    pk = packages(root)
    graph: dict[tuple[str, str], list[str]] = {}
    for a, b, line, in_func in edges(root):
        sa, sb = of(a, pk), of(b, pk)
        if sa != sb:
            graph.setdefault((sa, sb), []).append(f"{a}:{line} imports {b}" + (" (in a function)" if in_func else ""))
    return graph


def cycles(graph) -> list[list[str]]:
    """Strongly connected groups of more than one stage (Tarjan)."""
    nodes = sorted({n for e in graph for n in e})
    succ = {n: sorted(b for a, b in graph if a == n) for n in nodes}
    index, low, stack, on, out = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for n in nodes:
        if n not in index:
            strong(n)
    return out


def problems(root: Path = PKG) -> list[str]:
    graph = stage_graph(root)
    out = []
    for (a, b), where in sorted(graph.items()):
        if b != "cli" and LEVEL.get(a, 0) < LEVEL.get(b, 0):  # verb imports: the last rule
            out.append(f"{a} (level {LEVEL.get(a, 0)}) imports {b} (level {LEVEL.get(b, 0)}): {where[0]}")
    found = cycles({e: w for e, w in graph.items() if "cli" not in e})  # verb imports: the last rule
    for comp in found:
        pairs = [f"{a} -> {b}: {graph[a, b][0]}" for a, b in itertools.permutations(comp, 2) if (a, b) in graph]
        out.append(f"import cycle between {', '.join(comp)}: " + "; ".join(pairs))
    whole = stage_graph(root, of=package)
    for comp in cycles({e: w for e, w in whole.items() if "core" not in e}):
        pairs = [f"{a} -> {b}: {whole[a, b][0]}" for a, b in itertools.permutations(comp, 2) if (a, b) in whole]
        out.append(f"import cycle between the packages {', '.join(comp)} (verb modules included): "
                   + "; ".join(pairs))
    for a, b, line, _ in edges(root):
        if not is_verb(a) and is_verb(b):
            out.append(f"library module {a}:{line} imports the verb module {b}")
    return out


def test_every_stage_is_known():
    assert packages() - set(LEVEL) == set(), "a new stage package needs a level in LEVELS"


def test_no_upward_import_no_cycle_no_library_imports_a_verb():
    found = problems()
    assert not found, "\n".join(found)


def _write(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "elflayout"
    for rel, text in files.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return pkg


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "", "errors.py": "",
        "measure/__init__.py": "", "measure/screen.py": "def f():\n    from elflayout.preload import runner\n",
        "preload/__init__.py": "", "preload/runner.py": "from elflayout.measure import screen\n",
        "split/__init__.py": "", "split/check.py": "from elflayout.targets import tools\n",
        "targets/__init__.py": "", "targets/tools.py": "from ..split import check\n",
    })
    found = cycles(stage_graph(pkg))
    assert ["measure", "preload"] in found and ["split", "targets"] in found
    assert stage_graph(pkg)["measure", "preload"] == [
        "elflayout.measure.screen:2 imports elflayout.preload.runner (in a function)"]


def test_upward_and_verb_imports_are_found(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "", "cli.py": "from elflayout.measure import screen_cli\n",
        "profile/__init__.py": "", "profile/record.py": "def f():\n    import elflayout.measure.controls\n",
        "measure/__init__.py": "", "measure/controls.py": "", "measure/screen_cli.py": "",
        "relocs/__init__.py": "", "relocs/fuzz.py": "from elflayout.inspect.cli import render_text\n",
        "inspect/__init__.py": "", "inspect/cli.py": "",
        "split/__init__.py": "", "targets/__init__.py": "",
    })
    got = problems(pkg)
    assert any(p.startswith("profile (level 1) imports measure (level 3): elflayout.profile.record:2") for p in got)
    assert "library module elflayout.relocs.fuzz:1 imports the verb module elflayout.inspect.cli" in got
    assert not any("elflayout.cli" in p for p in got)  # the top-level CLI may import verbs


def test_a_cycle_through_a_verb_module_is_found(tmp_path):
    """A verb module belongs to its package: ``inspect.cli`` loading a profile while
    ``profile`` uses ``inspect`` is a cycle between the two packages."""
    pkg = _write(tmp_path, {
        "__init__.py": "", "errors.py": "",
        "inspect/__init__.py": "", "inspect/cli.py": "def run():\n    from elflayout.profile import model\n",
        "inspect/initializers.py": "",
        "profile/__init__.py": "", "profile/model.py": "from elflayout.inspect import initializers\n",
    })
    got = problems(pkg)
    assert any(p.startswith("import cycle between the packages inspect, profile") for p in got), got
