"""Shared fixtures. Real targets are fetched once into the cache (ELFLAYOUT_CACHE).

Tests are marked by what they cost (setup.cfg): ``root``, ``valgrind``, ``download``,
``slow``. ``make test-fast`` leaves them out, so a test that needs root and tracefs or the
valgrind profiler without its mark fails here (``need_root_tracefs``, ``tool_status``)
instead of slowing the fast target down; tests/test_marks.py checks the marks statically.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))


def run_cli(*args, check=None, input=None, env=None):
    """Run ``python -m elflayout ARGS`` in a subprocess; return CompletedProcess (text)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "tools") + os.pathsep + e.get("PYTHONPATH", "")
    if env:
        e.update(env)
    r = subprocess.run([sys.executable, "-m", "elflayout", *map(str, args)], capture_output=True, text=True,
                       input=input, env=e)
    if check is not None:
        assert r.returncode == check, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


@pytest.fixture
def cli():
    return run_cli


_running = None  # the test being set up, run or torn down (module fixtures included)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _running
    _running = item
    yield
    _running = None


def require_mark(name: str, what: str) -> None:
    """Fail the running test unless it carries mark NAME (it costs WHAT)."""
    if _running is not None and _running.get_closest_marker(name) is None:
        pytest.fail(f"{_running.nodeid} uses {what} but is not marked @pytest.mark.{name} (setup.cfg)", pytrace=False)


def _valgrind_needs_its_mark():
    from elflayout.profile import valgrind

    status = valgrind.tool_status

    def tool_status():
        require_mark("valgrind", "the valgrind profiler")
        return status()

    valgrind.tool_status = tool_status


_valgrind_needs_its_mark()


def need_root_tracefs():
    """Skip (with the reason) when page-cache tracing is not available."""
    from elflayout.tracefs import tracefs_status

    require_mark("root", "need_root_tracefs()")
    why = tracefs_status()
    if why:
        pytest.skip(why)


def need_tool(name):
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed (run: make bootstrap)")


@pytest.fixture(scope="module")
def firsttouch_tool():
    """build/valgrind with this tree's firsttouch, rebuilt when ft_main.c is newer."""
    if shutil.which("valgrind") is None or shutil.which("make") is None:
        pytest.skip("valgrind/make missing (run: make bootstrap)")
    r = subprocess.run(["make", "-s", "-C", str(ROOT / "tools" / "firsttouch")], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"the firsttouch tool does not build here: {(r.stdout + r.stderr).strip()[-300:]}")
    return ROOT / "build" / "valgrind"
