"""What the tests of `split` with debug info share (gcc and clang-22 DWARF, -gsplit-dwarf):
compile one source with -g, split one object, link with lld in an optional symbol order."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import need_tool

from elflayout.split.api import split_object


def compile_g(tmp: Path, src: Path, cc: str, *flags: str, cwd: Path | None = None) -> Path:
    need_tool(cc)
    o = tmp / (src.stem + ".o")
    subprocess.run([cc, "-g", "-O2", *flags, "-c", src, "-o", o], check=True, cwd=cwd)
    return o


def split_one(tmp: Path, o: Path) -> Path:
    """``o`` split (it must change), written beside it as ``split_NAME``."""
    out, rep = split_object(o.read_bytes(), o.name)
    assert rep.changed, rep
    p = tmp / ("split_" + o.name)
    p.write_bytes(out)
    return p


def link_lld(tmp: Path, objs: list[Path], name: str, order: list[str] | None = None, cc: str = "gcc") -> Path:
    need_tool("ld.lld")
    exe = tmp / name
    flags = ["-fuse-ld=lld"]
    if order:
        f = tmp / f"{name}.order"
        f.write_text("\n".join(order) + "\n")
        flags.append(f"-Wl,--symbol-ordering-file={f}")
    subprocess.run([cc, *flags, "-o", exe, *objs], check=True)
    return exe
