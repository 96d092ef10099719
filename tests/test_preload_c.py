"""The C preloader (tools/preload) when the kernel refuses a read, and its one line on
stderr for every way it starts without preloading."""

import os
import shutil
import subprocess

import pytest

from elflayout.preload import runner

PAGE = 4096

# Makes readahead / posix_fadvise / pread fail (EIO) from byte FAIL_AT on, and reports
# cachestat(2) missing so that every range is read whatever the page cache holds.
SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/types.h>

static int fails(long long off) { const char *s = getenv("FAIL_AT"); return s && off >= atoll(s); }

ssize_t readahead(int fd, off_t off, size_t len) { (void)fd; (void)len; if (fails(off)) { errno = EIO; return -1; } return 0; }
int posix_fadvise(int fd, off_t off, off_t len, int advice) { (void)fd; (void)len; (void)advice; return fails(off) ? EIO : 0; }
int posix_fadvise64(int fd, off_t off, off_t len, int advice) { return posix_fadvise(fd, off, len, advice); }
ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    static ssize_t (*real)(int, void *, size_t, off_t);
    if (fails(off)) { errno = EIO; return -1; }
    if (!real) real = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread64");
    return real(fd, buf, n, off);
}
ssize_t pread64(int fd, void *buf, size_t n, off_t off) { return pread(fd, buf, n, off); }
long syscall(long nr, ...)
{
    static long (*real)(long, ...);
    va_list ap; long a[6];
    va_start(ap, nr);
    for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == 451) { errno = ENOSYS; return -1; }  /* cachestat */
    if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
"""


@pytest.fixture(scope="module")
def bins():
    if shutil.which("make") is None or shutil.which("gcc") is None:
        pytest.skip("make/gcc missing (run: make bootstrap)")
    return runner.binaries()


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    d = tmp_path_factory.mktemp("shim")
    (d / "shim.c").write_text(SHIM)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", d / "shim.so", d / "shim.c", "-ldl"], check=True)
    return d / "shim.so"


def text_plan(tmp_path, f, ranges):
    """A plan in the text form (tools/preload/preload.c) for file F: (offset, length) ranges."""
    st = os.stat(f)
    p = tmp_path / "plan.preload"
    p.write_text(f"elflayout-preload-plan 1\nF {len(ranges)} {st.st_size} {st.st_mtime_ns // 10**9} "
                 f"{st.st_mtime_ns % 10**9} - {f}\n" + "".join(f"{o} {n}\n" for o, n in ranges))
    return p


@pytest.mark.parametrize("method,call", [("pread", "pread"), ("readahead", "readahead"),
                                         ("fadvise", "posix_fadvise")])
def test_refused_read_is_reported_and_not_counted(tmp_path, bins, shim, method, call):
    f = tmp_path / "data.bin"
    f.write_bytes(b"x" * 64 * PAGE)
    pl = text_plan(tmp_path, f, [(0, 4 * PAGE), (20 * PAGE, 2 * PAGE), (40 * PAGE, PAGE)])
    env = dict(os.environ, LD_PRELOAD=str(shim), FAIL_AT=str(16 * PAGE))
    r = subprocess.run(runner.launcher_argv(pl, ["sh", "-c", "exit 5"], method=method, verbose=True),
                       capture_output=True, text=True, env=env)
    assert r.returncode == 5, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2, r.stderr
    assert f"{f}: {call} of bytes {20 * PAGE}-{22 * PAGE} failed (Input/output error)" in lines[0]
    assert "the rest of the file is not preloaded" in lines[0]
    assert f": 0 files (1 skipped), 1 ranges read (cached ones skipped), {4 * PAGE} bytes" in lines[1], lines[1]
    # without the failure: every range counted
    env.pop("FAIL_AT")
    r = subprocess.run(runner.launcher_argv(pl, ["true"], method=method, verbose=True), capture_output=True,
                       text=True, env=env)
    assert r.stderr.strip().endswith(" ms") and f": 1 files (0 skipped), 3 ranges read (cached ones skipped), "\
        f"{7 * PAGE} bytes" in r.stderr, r.stderr


@pytest.mark.parametrize("audit", [True, False], ids=["LD_AUDIT", "LD_PRELOAD"])
def test_plan_path_too_long_costs_one_line(tmp_path, bins, audit):
    env = dict(os.environ, **runner.library_env(tmp_path / "p.preload", audit=audit))
    env["ELFLAYOUT_PRELOAD_PLAN"] = "/" + "x" * 5000
    r = subprocess.run(["sh", "-c", "sh -c 'echo ran'"], env=env, capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, "ran\n")
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr  # and not once more in the child: the variable is removed
    assert "ELFLAYOUT_PRELOAD_PLAN: path of 5001 bytes, longer than 4095; starting without preload" in lines[0]
