"""The firsttouch valgrind tool (tools/firsttouch) when its log cannot be written."""

import os
import subprocess

import pytest

pytestmark = pytest.mark.valgrind


@pytest.fixture(scope="module")
def tool(firsttouch_tool):
    return firsttouch_tool


def test_header_write_failure_is_reported(tool):
    """A log whose header cannot be written (a full disk) is useless: the tool says so and
    exits non-zero instead of running the workload into an unreadable log."""
    env = dict(os.environ, VALGRIND_LIB=str(tool))
    r = subprocess.run(["valgrind", "-q", "--tool=firsttouch", "--ft-out=/dev/full", "--ft-target=/bin/true",
                        "/bin/true"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0
    assert "firsttouch: cannot write the log header to /dev/full" in r.stderr, r.stderr
