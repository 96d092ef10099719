"""Test helpers for a Debian 11 root (glibc 2.31): the root itself and a libpython launcher.

The root is made by the project's scripts/bullseye-root.sh (debootstrap, cached).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER_C = "int Py_BytesMain(int argc, char **argv);\nint main(int argc, char **argv) { return Py_BytesMain(argc, argv); }\n"


def bullseye_root() -> Path:
    """The cached root (built on first use); skips with the reason when it cannot be made."""
    if os.geteuid() != 0:
        pytest.skip("a debootstrap root and chroot need root privileges")
    r = subprocess.run([str(ROOT / "scripts" / "bullseye-root.sh")], capture_output=True, text=True, timeout=1800)
    if r.returncode:
        pytest.skip(f"scripts/bullseye-root.sh failed: {r.stderr.strip()[-300:]}")
    return Path(r.stdout.strip().splitlines()[-1])


def python_launcher(root: Path) -> str:
    """/opt/elflayout/pylaunch inside ``root``: a program that runs Python through the root's
    libpython3.9.so.1.0 (Debian's python3.9 binary links Python statically). Linked on the
    host against the root's own crt files and libc, so it needs nothing newer than 2.31."""
    lib = root / "usr/lib/x86_64-linux-gnu"
    out = root / "opt/elflayout/pylaunch"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        src, obj = out.with_suffix(".c"), out.with_suffix(".o")
        src.write_text(LAUNCHER_C)
        subprocess.run(["gcc", "-O1", "-c", str(src), "-o", str(obj)], check=True)
        subprocess.run(["gcc", "-nostdlib", "-o", str(out), str(lib / "crt1.o"), str(lib / "crti.o"), str(obj),
                        str(lib / "libpython3.9.so.1.0"), str(root / "lib/x86_64-linux-gnu/libc.so.6"),
                        str(lib / "libc_nonshared.a"), str(lib / "crtn.o"),
                        "-Wl,--dynamic-linker=/lib64/ld-linux-x86-64.so.2", "-Wl,--allow-shlib-undefined"],
                       check=True)
    return "/" + str(out.relative_to(root))


def run_in(root: Path, argv: list[str], libdir: str | None = None, timeout: float = 300):
    env = ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "LANG=C"] + ([f"LD_LIBRARY_PATH={libdir}"] if libdir else [])
    return subprocess.run(["chroot", str(root), *env, *argv], capture_output=True, timeout=timeout)
