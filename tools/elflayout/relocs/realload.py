"""The real-load half of ``--check``: load libraries with the system's own ld.so, in a
child process (loadprobe.py, run as a file by this or a system root's python3), and
compare what the loader left in memory.

``dlopen_check`` says whether a library loads at all; ``compare_loads`` loads two files
(ASLR off, same name, same environment) and compares their bytes at given link-time
ranges. Which ranges, and which differing bytes no relocation explains, is the
simulated loader's knowledge (simload.real_load_compare).
"""

from __future__ import annotations

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


class Host:
    """Where real loads run: this machine, or ``chroot ROOT`` (a root with its own glibc
    and the library's dependencies, e.g. scripts/bullseye-root.sh); the probe runs under
    the root's own python3. A library of another machine (arm64) loads in the C probe
    (tools/loadprobe) under its emulator, ``qemu-aarch64 -L ROOT`` (ROOT: ``root`` or
    the arm64 root of scripts/arm64-root.sh)."""

    def __init__(self, root=None, lib=None, emulator=None):
        self.emulator = emulator or (emulation.for_library(lib, root) if lib is not None else None)
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
        if not cands:
            raise ElflayoutError(f"--root {self.root}: no python3 inside it to run the loader check "
                                 "(install python3-minimal there)")
        self.python = "/" + str(cands[0].relative_to(self.root))

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
        """Run loadprobe.py (copied into ``d``, a ``tempdir()``, so a root sees it) with ``args``."""
        probe = d / PROBE.name
        shutil.copyfile(PROBE, probe)
        if self.emulator is not None:
            # the guest's library path goes through -E: the host's would reach qemu itself
            lp = env.pop("LD_LIBRARY_PATH", None)
            prog = [self.python, str(probe)] if self.python else [str(c_probe())]
            cmd = [*self.emulator.argv, *(["-E", f"LD_LIBRARY_PATH={lp}"] if lp else []), *prog, *args]
        else:
            cmd = (["chroot", str(self.root)] if self.root else []) + [self.python, self.inside(probe), *args]
        cmd = (["setarch", "-R"] if setarch else []) + cmd
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, errors="replace")

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
    exe = ROOT / "build" / "aarch64" / "loadprobe"
    src = ROOT / "tools" / "loadprobe" / "loadprobe.c"
    if exe.is_file() and exe.stat().st_mtime >= src.stat().st_mtime:
        return exe
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        raise ElflayoutError("real loads of arm64 libraries need the cross compiler for their probe "
                             "(apt-get install gcc-aarch64-linux-gnu)")
    r = subprocess.run(["make", "-s", "-C", str(src.parent)], capture_output=True, text=True)
    if r.returncode != 0 or not exe.is_file():
        raise ElflayoutError(f"cannot build {exe}: {(r.stderr.strip().splitlines() or ['make failed'])[-1]}")
    return exe


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
    msg = (r.stdout.strip() or r.stderr.strip().splitlines()[-1:] or [f"exit status {r.returncode}"])
    msg = msg if isinstance(msg, str) else msg[0]
    return msg.replace(h.inside(lib), str(p))  # name the user's file, not the temporary copy


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
            doc = dict(error=(r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1])
        if "error" in doc:
            return dict(error=f"{src}: {doc['error']}"), None
        return doc, np.fromfile(out, np.uint8)


def compare_loads(path_a, path_b, ranges, by_code, timeout: float = 300, root=None, emulator=None) -> dict:
    """dlopen both files (ASLR off, RTLD_NOW, each in a fresh process under ``path_a``'s
    name and the same environment; inside ``chroot root`` when given) and compare their
    bytes at the link-time ``ranges``.

    Left out and counted as ``unstable_bytes``: bytes that differ between two loads of
    ``path_a`` itself, the second with the C heap shifted by ``HEAP_PAD`` bytes, and the
    differing bytes at addresses ``by_code(addrs)`` says code stored, not the loader.
    Returns dict(equal, compared_bytes, unstable_bytes, differing_bytes) or
    dict(error=...) when a file does not load.
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
        return dict(res, equal=False, reason="different load addresses with ASLR off")
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
