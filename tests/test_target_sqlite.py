"""The SQLite target (``elflayout.targets.sqlite``): libtool's link flags read from the
build's output, and (slow, download) the library built by its own autoconf build, linked as
libtool links it, running the shell's workload."""

from __future__ import annotations

import subprocess

import pytest

from elflayout.errors import ElflayoutError
from elflayout.targets import sqlite

LOG = """\
libtool: compile:  gcc -DPACKAGE_NAME=... -g -O2 -c sqlite3.c  -fPIC -DPIC -o .libs/sqlite3.o
libtool: link: gcc -shared  -fPIC -DPIC  .libs/sqlite3.o   -lm -lz  -g -O2   -Wl,-soname -Wl,libsqlite3.so.0 \
-o .libs/libsqlite3.so.0.8.6
libtool: link: ( cd ".libs" && rm -f "libsqlite3.so.0" && ln -s "libsqlite3.so.0.8.6" "libsqlite3.so.0" )
"""


def test_libtool_link_libraries_are_read_from_the_shared_link_line():
    assert sqlite._libtool_link(LOG) == ["-lm", "-lz"]


def test_no_shared_link_line_is_an_error():
    with pytest.raises(ElflayoutError, match="no libtool shared link line"):
        sqlite._libtool_link(LOG.replace("-shared", ""))


def test_link_command_is_libtools_with_the_soname_and_a_map(tmp_path):
    out = tmp_path / sqlite.SONAME
    cmd = sqlite.link_command(["gcc", "-fuse-ld=lld"], {"libs": ["-lm"]}, ["a.o"], out)
    assert cmd[:6] == ["gcc", "-fuse-ld=lld", "-shared", "-fPIC", "-DPIC", "a.o"]
    assert "-Wl,-soname,libsqlite3.so.0" in cmd and f"-Wl,-Map={out}.map" in cmd and cmd[-2:] == ["-o", str(out)]


@pytest.mark.slow
@pytest.mark.download
def test_built_library_runs_the_shell_workload(tmp_path):
    built = sqlite.build("gcc")
    assert "-g -O2" in built["cflags"] and "function-sections" not in built["cflags"]
    lib = tmp_path / sqlite.SONAME
    subprocess.run(sqlite.link_command(["gcc"], built, built["objects"], lib), check=True)
    r = subprocess.run(sqlite.workload(sqlite.program(built, tmp_path)), capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == sqlite.EXPECTED, r.stderr
