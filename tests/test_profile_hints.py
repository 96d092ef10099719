"""``profile`` says what to do when a recording cannot give an ordering what it needs:
a stripped target without its debug file (no names), a wrapper command (``env VAR=x
prog``) the profiler did not follow."""

import subprocess

import pytest

from conftest import need_tool, run_cli
import order_testlib as testlib

pytestmark = pytest.mark.valgrind


@pytest.fixture
def synth(tmp_path):
    from elflayout.profile.valgrind import tool_status

    why = tool_status()
    if why:
        pytest.skip(why)
    need_tool("gcc")
    return testlib.build(tmp_path / "s", n_objects=3, funcs_per_object=4, seed=1)


def test_stripped_target_gets_a_hint(synth, tmp_path):
    r = run_cli("profile", "--target", synth["lib"], "-o", tmp_path / "a.json", "--", synth["driver"], check=0)
    assert "hint:" not in r.stderr
    subprocess.run(["strip", "--strip-all", str(synth["lib"])], check=True)
    r = run_cli("profile", "--target", synth["lib"], "-o", tmp_path / "b.json", "--", synth["driver"], check=0)
    assert "is stripped" in r.stderr and "--debug-file" in r.stderr and "dbgsym" in r.stderr


def test_wrapper_workload_gets_a_hint(synth, tmp_path):
    out = tmp_path / "p.json"
    r = run_cli("profile", "--target", synth["lib"], "-o", out, "--", "env", "X=1", synth["driver"], check=2)
    assert "SIGKILL" not in r.stderr and "--children" in r.stderr and "--env NAME=VALUE" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()
    run_cli("profile", "--target", synth["lib"], "--children", "-o", out, "--", "env", "X=1", synth["driver"], check=0)
