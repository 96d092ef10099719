"""Real programs through libpython3.11 linked from split objects in a reordered layout
(slow: needs Debian's libpython3.11-pic.a). Reversed order moves every function and data
object away from its neighbours, so a wrongly retargeted reference would show."""

import os
import subprocess

import pytest

from conftest import need_tool

pytestmark = pytest.mark.download

WORK = ("import json, decimal, re, struct; "
        "print(json.dumps({'a': [1, 2.5]}), decimal.Decimal(1) / 7, re.sub(r'(\\w)(\\d)', r'\\2\\1', 'a1 b2'), "
        "struct.pack('<iq', 1, -2).hex())")


def _names(lib_objs, kind):
    out = []
    for o in lib_objs:
        r = subprocess.run(["readelf", "-SW", str(o)] if kind == "sections" else ["nm", "--defined-only", str(o)],
                           capture_output=True, text=True, check=True).stdout
        if kind == "symbols":
            out += [ln.split()[-1] for ln in r.splitlines() if len(ln.split()) == 3 and ln.split()[1] in "tTdDbBrR"]
        else:
            out += [ln.split()[1] for ln in r.splitlines() if "] ." in ln and ".rela" not in ln
                    and ln.split()[1].startswith((".text.", ".data.", ".rodata.", ".bss."))]
    return list(dict.fromkeys(reversed(out)))


@pytest.mark.slow
@pytest.mark.parametrize("linker", ["lld", "gold", "mold"])
def test_reversed_split_libpython_runs(tmp_path, linker):
    need_tool({"lld": "ld.lld", "gold": "ld.gold", "mold": "mold"}[linker])
    from elflayout.targets import libpython

    objs = libpython.split_objects()
    if linker == "lld":
        order = tmp_path / "rev.order"
        order.write_text("\n".join(_names(objs, "symbols")) + "\n")
        extra = [f"--symbol-ordering-file={order}", "--no-warn-symbol-ordering"]
    elif linker == "gold":
        order = tmp_path / "rev.sections"
        order.write_text("\n".join(_names(objs, "sections")) + "\n")
        extra = [f"--section-ordering-file={order}"]
    else:
        # mold has no ordering option: reversed object order
        extra = []
    kw = {"object_order": [o.name for o in reversed(objs)]} if linker == "mold" else {}
    # prepare() itself runs a self-check (C accelerators loaded through the library).
    d = libpython.prepare(linker, split=True, extra_link_args=extra, outdir=tmp_path / "out", **kw)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "LD_LIBRARY_PATH"} | d["env"]
    want = subprocess.run(["/usr/bin/python3.11", "-c", WORK], capture_output=True, text=True, env=env, check=True)
    got = subprocess.run([str(d["launcher"]), "-c", WORK], capture_output=True, text=True, env=env)
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


@pytest.mark.slow
def test_unicodectype_tables_get_sections_of_their_own(tmp_path):
    """unicodectype.o: ``lea index1(%rip)`` is also the end of ``index2``; it is only read
    upward (``index1[c >> 7]``), so the two tables no longer share one 87 KiB section."""
    from elflayout.split.api import split_object
    from elflayout.targets import libpython

    o = next(p for p in libpython.objects() if p.name.endswith("-unicodectype.o"))
    out, rep = split_object(o.read_bytes(), o.name)
    rodata = next(s for s in rep.sections if s.name == ".rodata")
    assert rodata.glued == [] and rodata.sections == rodata.units, rodata
    (tmp_path / o.name).write_bytes(out)
    syms = subprocess.run(["readelf", "-sW", tmp_path / o.name], capture_output=True, text=True, check=True).stdout
    shndx = {ln.split()[-1]: ln.split()[6] for ln in syms.splitlines() if ln.split()[-1:] in (["index1"], ["index2"])}
    assert len(shndx) == 2 and shndx["index1"] != shndx["index2"], syms
