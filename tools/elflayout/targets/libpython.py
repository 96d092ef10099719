"""libpython: Debian's ``libpython3.11.so.1.0`` relinked from ``libpython3.11-pic.a``.

Debian ships the 179 PIC objects its shared libpython is linked from (package
libpython3.11-dev). We unpack them in archive order (the baseline order), link
``libpython3.11.so.1.0`` with GNU ld, gold, lld (or mold), each with a link map,
soname ``libpython3.11.so.1.0`` and NEEDED libm, libz, libexpat like Debian's, and a
launcher ``python3.11`` (``Py_BytesMain``) with RUNPATH ``$ORIGIN``, so the launcher
loads the relinked library (LD_LIBRARY_PATH still overrides RUNPATH, for packed
copies). The standard library and its extension modules (``lib-dynload``: _decimal,
_json, _asyncio ...) come from Debian's installed libpython3.11-stdlib, same 3.11 ABI;
the extension modules resolve their Python symbols against our library.

The objects are extracted as ``NNN-name.o`` (archive position + member name): the
archive has two members named ``token.o`` and two ``getbuildinfo.o``, and the prefix
keeps the archive order visible in link maps.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from elflayout.errors import ElflayoutError
from elflayout.targets import (archives, args_fingerprint, build_slot, ensure_installed, fetch_debs, param_key,
                               record_paths, run, save_record)
from elflayout.toolchain import driver_args, linker_flag

SONAME = "libpython3.11.so.1.0"
ARCHIVE = "usr/lib/python3.11/config-3.11-x86_64-linux-gnu/libpython3.11-pic.a"
DEV_PACKAGES = ["libpython3.11-dev"]
RUNTIME_PACKAGES = ["libpython3.11-stdlib", "libexpat1", "zlib1g"]
LIBS = ["-lexpat", "-lz", "-lm"]
WORKLOADS = {"pass": ["-c", "pass"], "imports": ["-c", "import json, decimal, asyncio, re"]}
# Proves the C accelerators were loaded through our library (not pure-Python fallbacks).
CHECK = ("import sys, json, decimal, asyncio, re, _decimal, _json, _asyncio; "
         "print(sys.version_info[:2], decimal.Decimal is _decimal.Decimal, json.scanner.c_make_scanner is not None)")
LAUNCHER_C = """/* elflayout launcher: the whole of Debian's python3.11 main() */
extern int Py_BytesMain(int argc, char **argv);
int main(int argc, char **argv) { return Py_BytesMain(argc, argv); }
"""


def objects() -> list[Path]:
    """The PIC objects of libpython3.11-pic.a, unpacked once, in archive order."""
    return archives.unpack(fetch_debs(DEV_PACKAGES, "libpython3.11") / ARCHIVE, "libpython")


def split_objects() -> list[Path]:
    """The same objects after ``elflayout split`` (one section per function and data
    object), cached per version of the splitter's code."""
    return archives.split(objects(), "libpython")


def prepare(linker: str = "bfd", extra_link_args=(), object_order=None, outdir=None, split: bool = False) -> dict:
    """Link libpython3.11.so.1.0 (and the launcher) with ``linker``; cached by
    (linker, extra args, object order). Returns ``dict(lib, map, launcher, objects,
    link_cmd, env, workloads={"pass": argv, "imports": argv}, outdir, linker)``;
    run a workload as ``subprocess.run(d["workloads"]["imports"], env=os.environ | d["env"])``.
    ``split``: link the objects after ``elflayout split`` (function and data sections).
    """
    flag = linker_flag(linker)
    ensure_installed(RUNTIME_PACKAGES)
    objs = archives.ordered(split_objects() if split else objects(), object_order, "libpython3.11-pic.a")
    extra = driver_args(extra_link_args)
    key = param_key(linker, args_fingerprint(extra), [o.name for o in objs] + ([objs[0].parent.name] if split else []))
    with build_slot("libpython", linker, key, outdir, outputs=(SONAME, f"{SONAME}.map", "python3.11")) as (out, done):
        if done:
            return _as_paths(done)
        lib, lmap, launcher = out / SONAME, out / f"{SONAME}.map", out / "python3.11"
        link_cmd = ["gcc", "-shared", flag, f"-Wl,-soname,{SONAME}", "-Wl,-z,relro", f"-Wl,-Map={lmap}",
                    "-o", str(lib), *map(str, objs), *extra, *LIBS]
        run(link_cmd, what=f"link {SONAME} with {linker}")
        (out / "launcher.c").write_text(LAUNCHER_C)
        run(["gcc", "-O1", "-o", launcher, out / "launcher.c", f"-L{out}", f"-l:{SONAME}", "-Wl,-rpath,$ORIGIN"],
            what="link python3.11 launcher")
        env = {"PYTHONHOME": "/usr", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        workloads = {k: [str(launcher), *v] for k, v in WORKLOADS.items()}
        renv = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "LD_LIBRARY_PATH"} | env
        r = run([launcher, "-c", CHECK], env=renv, what=f"{launcher} self-check")
        if "True True" not in r.stdout:
            raise ElflayoutError(f"{launcher}: C accelerators not in use: {r.stdout.strip()}")
        r = run([launcher, "-c", "import sys; print(sys.version)"], env=renv)
        d = dict(lib=str(lib), map=str(lmap), launcher=str(launcher), objects=[str(o) for o in objs],
                 link_cmd=link_cmd, env=env, workloads=workloads, outdir=str(out), linker=linker, key=key,
                 version=r.stdout.strip())
        save_record(out, d)
    return _as_paths(d)


def _as_paths(d: dict) -> dict:
    return record_paths(d, ("lib", "map", "launcher", "outdir"))


def system() -> dict:
    """Debian's own libpython3.11.so.1.0 and /usr/bin/python3.11 (not relinkable: no map)."""
    lib = Path("/usr/lib/x86_64-linux-gnu") / SONAME
    exe = shutil.which("python3.11") or "/usr/bin/python3.11"
    if not lib.exists():
        raise ElflayoutError(f"{lib}: not installed (apt-get install libpython3.11)")
    return dict(lib=lib, launcher=Path(exe), workloads={k: [exe, *v] for k, v in WORKLOADS.items()}, env={})
