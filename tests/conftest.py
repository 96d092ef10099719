"""Shared fixtures. Real targets are fetched once into the cache (ELFLAYOUT_CACHE)."""

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


def need_root_tracefs():
    """Skip (with the reason) when page-cache tracing is not available."""
    from elflayout.tracefs import tracefs_status

    why = tracefs_status()
    if why:
        pytest.skip(why)


def need_tool(name):
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed (run: make bootstrap)")
