"""The real-load half of ``--check``: load libraries with the system's own ld.so, in a
child process (loadprobe.py, run as a file by this or a system root's python3; in a root
without a python3 that has ctypes, the same program in C, ``tools/loadprobe``), and
compare what the loader left in memory.

A child that fails without saying why dlopen failed (no interpreter, a missing module,
a crash of the checker itself) is the checker's failure, reported as such, never taken
for the library not loading.

``dlopen_check`` says whether a library loads at all; ``compare_loads`` loads two files
(ASLR off, same name, same environment) and compares their bytes at given link-time
ranges. Which ranges, and which differing bytes no relocation explains, is the
simulated loader's knowledge (simload.real_load_compare).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from elflayout import emulator as emulation
from elflayout.errors import ElflayoutError

ROOT = Path(__file__).resolve().parents[3]
HEAP_PAD = 4096 + 48  # C-heap shift of the control load (not a multiple of any alignment)
PROBE = Path(__file__).with_name("loadprobe.py")
C_SRC = ROOT / "tools" / "loadprobe"
NATIVE_PROBE = "elflayout-loadprobe"
# "c": always the C probe in a root (also when its python3 has ctypes)
ENV_PROBE = "ELFLAYOUT_LOADPROBE"


class CheckerError(ElflayoutError):
    """The loader check could not run (not a verdict on the library)."""


def _make(out: Path, target: str, compiler: str, install: str) -> Path:
    """``out`` built by ``make -C tools/loadprobe TARGET`` when missing or older than its
    sources, under a lock so that concurrent first uses (fuzz workers) build it once."""
    srcs = [C_SRC / "loadprobe.c", C_SRC / "Makefile"]
    if out.exists() and all(out.stat().st_mtime >= s.stat().st_mtime for s in srcs if s.exists()):
        return out
    if not (C_SRC / "Makefile").exists() or shutil.which("make") is None or shutil.which(compiler) is None:
        raise CheckerError(f"{out}: not built; needs make and {compiler} ({install})")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fresh = out.exists() and all(out.stat().st_mtime >= s.stat().st_mtime for s in srcs if s.exists())
        r = None if fresh else subprocess.run(["make", "-s", "-C", str(C_SRC), target], capture_output=True,
                                              text=True)
    if (r is not None and r.returncode != 0) or not out.exists():
        raise CheckerError(f"{out}: build failed ({(r.stderr.strip().splitlines() or ['make failed'])[-1]})")
    return out


def native_probe() -> Path:
    """The C probe for this machine's roots."""
    return _make(ROOT / "build" / "loadprobe" / NATIVE_PROBE, "native", "gcc", "run: make bootstrap")


class Host:
    """Where real loads run: this machine, or ``chroot ROOT`` (a root with its own glibc
    and the library's dependencies, e.g. scripts/bullseye-root.sh); the probe runs under
    the root's own python3 (with no python3 that has ctypes, the C probe of tools/loadprobe
    built for this machine). A library of another machine (arm64) loads in the C probe
    (tools/loadprobe) under its emulator, ``qemu-aarch64 -L ROOT`` (ROOT: ``root`` or
    the arm64 root of scripts/arm64-root.sh)."""

    def __init__(self, root=None, lib=None, emulator=None):
        self.emulator = emulator or (emulation.for_library(lib, root) if lib is not None else None)
        self.native_probe: Path | None = None  # the C probe in a root without a usable python3
        if self.emulator is not None:
            # the emulated root's own python3 runs loadprobe.py on any glibc; without one the
            # C probe (built against this machine's cross glibc: 2.34 or later) runs
            self.root = None
            cands = _pythons(Path(self.emulator.root)) if self.emulator.root else []
            self.python = str(cands[0]) if cands else None
            return
        self.root = Path(root).resolve() if root else None
        if self.root is None:
            self.python = sys.executable
            return
        if os.geteuid() != 0:
            raise ElflayoutError(f"--root {self.root}: real loads inside a root need chroot, i.e. root privileges")
        cands = _pythons(self.root)
        self.python = "/" + str(cands[0].relative_to(self.root)) if cands else None
        if os.environ.get(ENV_PROBE) == "c" or not self._has_ctypes():
            try:
                self.native_probe = native_probe()
            except CheckerError as e:
                raise CheckerError(f"--root {self.root}: {self._python_why()}, and the C loader check is not "
                                   f"available either ({e})") from None

    def _has_ctypes(self) -> bool:
        if self.python is None:
            return False
        r = subprocess.run(["chroot", str(self.root), self.python, "-c", "import ctypes"], capture_output=True)
        return r.returncode == 0

    def _python_why(self) -> str:
        if self.python is None:
            return "no python3 inside it to run the loader check"
        return f"its {self.python} has no ctypes (python3-minimal lacks it: install python3 there)"

    def tempdir(self):
        base = None
        if self.root is not None:
            base = self.root / "tmp"
            base.mkdir(exist_ok=True)
        return tempfile.TemporaryDirectory(prefix="elflayout-load-", dir=base)

    def inside(self, p) -> str | None:
        """``p`` as the loaded program sees it (None: not visible inside the root)."""
        p = Path(p).resolve()
        if self.root is None:
            return str(p)
        try:
            return "/" + str(p.relative_to(self.root))
        except ValueError:
            return None

    def probe(self, d: Path, args, env, timeout, setarch=False):
        """Run the probe (copied into ``d``, a ``tempdir()``, so a root sees it) with ``args``."""
        probe = d / PROBE.name
        shutil.copyfile(PROBE, probe)
        if self.emulator is not None:
            # the guest's library path goes through -E: the host's would reach qemu itself
            lp = env.pop("LD_LIBRARY_PATH", None)
            prog = [self.python, str(probe)] if self.python else [str(c_probe())]
            cmd = [*self.emulator.argv, *(["-E", f"LD_LIBRARY_PATH={lp}"] if lp else []), *prog]
        elif self.native_probe is not None:
            native = d / NATIVE_PROBE
            shutil.copy2(self.native_probe, native)
            cmd = (["chroot", str(self.root)] if self.root else []) + [self.inside(native)]
        else:
            cmd = (["chroot", str(self.root)] if self.root else []) + [self.python, self.inside(probe)]
        cmd = (["setarch", "-R"] if setarch else []) + cmd
        try:
            return subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=timeout,
                                  errors="replace")
        except OSError as e:
            raise CheckerError(f"the loader check cannot run {cmd[0]}: {e.strerror}") from None

    def failed(self, r: subprocess.CompletedProcess) -> CheckerError:
        """The checker's own failure (no dlopen verdict in its output), in one line."""
        last = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        where = f" in {self.root}" if self.root else ""
        return CheckerError(f"the loader check itself failed{where} ({last}); the library was not judged")

    def env(self, *dirs) -> dict:
        env = dict(os.environ, PYTHONHASHSEED="0")  # a deterministic interpreter heap
        if self.root is not None or self.emulator is not None:  # another system's interpreter and libraries
            env.pop("PYTHONPATH", None)
            env.pop("PYTHONHOME", None)
            env.pop("LD_LIBRARY_PATH", None)
        ds = [x for x in (self.inside(d) for d in dirs) if x]
        if env.get("LD_LIBRARY_PATH"):
            ds.append(env["LD_LIBRARY_PATH"])
        if ds:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(ds)
        return env


def _pythons(root: Path) -> list[Path]:
    """The python3 interpreters of a system root (usr/bin/python3, python3.N)."""
    cands = sorted(root.glob("usr/bin/python3*"))
    return [c for c in cands if c.name.replace("python3", "").replace(".", "").isdigit() or c.name == "python3"]


def c_probe() -> Path:
    """The arm64 load probe, built on first use with the cross compiler."""
    return _make(ROOT / "build" / "aarch64" / "loadprobe", "aarch64", "aarch64-linux-gnu-gcc",
                 "apt-get install gcc-aarch64-linux-gnu")


def dlopen_check(path, timeout: float = 120, root=None, emulator=None) -> str | None:
    """Load ``path`` with the real glibc loader in a subprocess; None if it loaded, else why not."""
    h = Host(root, path, emulator)
    p = Path(path).resolve()
    with h.tempdir() as d:
        lib = Path(d) / p.name
        shutil.copyfile(p, lib)
        try:
            r = h.probe(Path(d), ["dlopen", h.inside(lib)], h.env(lib.parent, p.parent), timeout)
        except subprocess.TimeoutExpired:
            return f"dlopen did not return within {timeout:.0f} s"
    if r.returncode == 0:
        return None
    if r.returncode < 0:  # the library's own code (a constructor) or the loader crashed on it
        return f"the loading process was killed by signal {-r.returncode}"
    if (why := ld_so_stopped(r)) is not None:
        return why
    if r.returncode != 1 or not r.stdout.strip():  # 1 and a message: dlopen said no
        raise h.failed(r)
    return r.stdout.strip().replace(h.inside(lib), str(p))  # name the user's file, not the temporary copy


# glibc's ld.so stops the whole process on an internal assertion a damaged object can
# trigger (dl-lookup.c's _dl_setup_hash on a bad hash table): a verdict on the library.
LD_SO_ASSERT = "Inconsistency detected by ld.so:"


def ld_so_stopped(r: subprocess.CompletedProcess) -> str | None:
    """ld.so's own assertion message, if the loader stopped on the library."""
    line = next((ln.strip() for ln in r.stderr.splitlines() if LD_SO_ASSERT in ln), None)
    return None if line is None else f"ld.so stopped on it ({line[line.index(LD_SO_ASSERT):]})"


def load_state(h: Host, src: Path, name: str, ranges, dirs, timeout, pad: int = 0) -> tuple[dict, np.ndarray | None]:
    """dlopen a copy of ``src`` named ``name`` (ASLR off) and read its bytes at ``ranges``;
    returns ({"base": B}, bytes) or ({"error": why}, None)."""
    # The same file name in a directory of the same length: identical heap layout. A
    # copy, not a link: a new inode, so ld.so never mistakes it for an object it already
    # has (the interpreter itself may have loaded the input through LD_LIBRARY_PATH).
    with h.tempdir() as d:
        lib, out = Path(d) / name, Path(d) / "state"
        shutil.copyfile(src, lib)
        args = ["state", h.inside(lib), json.dumps(ranges), h.inside(out), str(pad)]
        try:
            r = h.probe(Path(d), args, h.env(*dirs), timeout, setarch=True)
        except subprocess.TimeoutExpired:
            return dict(error=f"{src}: dlopen did not return within {timeout:.0f} s"), None
        try:
            doc = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            if r.returncode < 0:
                return dict(error=f"{src}: the loading process was killed by signal {-r.returncode}"), None
            if (why := ld_so_stopped(r)) is not None:
                return dict(error=f"{src}: {why}"), None
            raise h.failed(r) from None
        if "error" in doc:
            return dict(error=f"{src}: {doc['error']}"), None
        return doc, np.fromfile(out, np.uint8)


def rebased(sa: np.ndarray, sb: np.ndarray, ranges, delta: int, loader_writes) -> np.ndarray:
    """``sb`` with each aligned word that a relocation writes (``loader_writes(addrs)``)
    and that holds ``sa``'s value plus ``delta`` replaced by ``sa``'s: a file whose
    segments span more address space (the self form's routine segment) is mapped
    ``delta`` lower with ASLR off, and so are the dependencies loaded after it."""
    sb = sb.copy()
    at = 0
    for lo, hi in ranges:
        a, b = -(-lo // 8) * 8, hi // 8 * 8
        if b > a:
            i = at + a - lo
            wa, wb = sa[i:i + b - a].view("<u8"), sb[i:i + b - a].view("<u8")
            with np.errstate(over="ignore"):
                hit = (wb == wa + np.uint64(delta % 2**64)) & (wa != wb)
            k = np.flatnonzero(hit)
            if k.size:
                k = k[loader_writes(a + 8 * k.astype(np.int64))]
                wb[k] = wa[k]
        at += hi - lo
    return sb


def compare_loads(path_a, path_b, ranges, by_code, timeout: float = 300, root=None, emulator=None,
                  loader_writes=None) -> dict:
    """dlopen both files (ASLR off, RTLD_NOW, each in a fresh process under ``path_a``'s
    name and the same environment; inside ``chroot root`` when given) and compare their
    bytes at the link-time ``ranges``.

    Left out and counted as ``unstable_bytes``: bytes that differ between two loads of
    ``path_a`` itself, the second with the C heap shifted by ``HEAP_PAD`` bytes, and the
    differing bytes at addresses ``by_code(addrs)`` says code stored, not the loader.
    Returns dict(equal, compared_bytes, unstable_bytes, differing_bytes) or
    dict(error=...) when a file does not load. ``loader_writes(addrs)`` (which word
    addresses a relocation writes), when given, lets a file mapped elsewhere (a larger
    span) compare through ``rebased``.
    """
    h = Host(root, path_a, emulator)
    pa, pb = Path(path_a).resolve(), Path(path_b).resolve()
    dirs = (pa.parent, pb.parent)
    da, sa = load_state(h, pa, pa.name, ranges, dirs, timeout)
    if sa is None:
        return da
    db, sb = load_state(h, pb, pa.name, ranges, dirs, timeout)
    if sb is None:
        return db
    n = int(sa.size)
    res = dict(equal=True, compared_bytes=n, unstable_bytes=0, differing_bytes=0)
    if da["base"] != db["base"]:
        if loader_writes is None:
            return dict(res, equal=False, reason="different load addresses with ASLR off")
        res["rebased_by"] = db["base"] - da["base"]
        sb = rebased(sa, sb, ranges, res["rebased_by"], loader_writes)
    diff = sa != sb
    if diff.any():
        _, sa2 = load_state(h, pa, pa.name, ranges, dirs, timeout, pad=HEAP_PAD)
        stable = sa == sa2 if sa2 is not None else np.ones(n, bool)
        left = np.flatnonzero(diff & stable)
        if left.size:  # index in the concatenated ranges -> address
            lo = np.array([r[0] for r in ranges], np.int64)
            at = np.cumsum([0] + [hi - lo_ for lo_, hi in ranges[:-1]])
            k = np.searchsorted(at, left, side="right") - 1
            stable[left[by_code(lo[k] + (left - at[k]))]] = False
        res.update(unstable_bytes=int(n - np.count_nonzero(stable)),
                   differing_bytes=int(np.count_nonzero(diff & stable)))
        res["equal"] = res["differing_bytes"] == 0
    return res
