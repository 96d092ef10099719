"""python_exe: Debian's ``python3.11`` executable relinked from ``libpython3.11.a``.

Debian's ``/usr/bin/python3.11`` is an executable with the interpreter linked in
(6.8 MB, not position-independent): its build links ``Programs/python.o`` with the
static, non-PIC ``libpython3.11.a`` (package libpython3.11-dev ships both) and
``LINKFORSHARED`` (``-Xlinker -export-dynamic -Wl,-O1 -Wl,-Bsymbolic-functions``, so the
extension modules of ``lib-dynload`` resolve their Python symbols against the
executable), then ``-ldl -lexpat -lz -lm``. We link the same, with a link map, from the
archive's objects in archive order (or after ``elflayout split``: the objects are built
without function sections). The standard library is Debian's installed one
(``PYTHONHOME=/usr``), same 3.11 ABI.
"""

from __future__ import annotations

import os
from pathlib import Path

from elflayout.errors import ElflayoutError
from elflayout.targets import (archives, args_fingerprint, build_slot, ensure_installed, fetch_debs, param_key,
                               record_paths, run, save_record)
from elflayout.targets.libpython import CHECK, DEV_PACKAGES, RUNTIME_PACKAGES, WORKLOADS
from elflayout.toolchain import driver_args, linker_flag

NAME = "python3.11"
ARCHIVE = "usr/lib/x86_64-linux-gnu/libpython3.11.a"
MAIN = "usr/lib/python3.11/config-3.11-x86_64-linux-gnu/python.o"
# Debian's Makefile (config-3.11-x86_64-linux-gnu/Makefile): LINKFORSHARED, LIBS, MODLIBS, SYSLIBS.
LINKFORSHARED = ["-Xlinker", "-export-dynamic", "-Wl,-O1", "-Wl,-Bsymbolic-functions"]
LIBS = ["-ldl", "-lexpat", "-lz", "-lm"]
ENV = {"PYTHONHOME": "/usr", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def _root() -> Path:
    return fetch_debs(DEV_PACKAGES, "libpython3.11")


def objects() -> list[Path]:
    """The non-PIC objects of libpython3.11.a, unpacked once, in archive order."""
    return archives.unpack(_root() / ARCHIVE, "python-exe")


def split_objects() -> list[Path]:
    """The same objects after ``elflayout split``, cached per version of the splitter."""
    return archives.split(objects(), "python-exe")


def prepare(linker: str = "bfd", extra_link_args=(), object_order=None, outdir=None, split: bool = True) -> dict:
    """Link ``python3.11`` with ``linker`` (cached by linker, extra arguments, object
    order). Returns ``dict(exe, map, objects, link_cmd, env, workloads, outdir, linker,
    version)``: run a workload as ``subprocess.run(d["workloads"]["imports"], env=...)``
    with ``d["env"]`` added and no other ``PYTHON*`` variable."""
    flag = linker_flag(linker)
    ensure_installed(RUNTIME_PACKAGES)
    objs = archives.ordered(split_objects() if split else objects(), object_order, "libpython3.11.a")
    main = _root() / MAIN
    extra = driver_args(extra_link_args)
    key = param_key(linker, args_fingerprint(extra), [o.name for o in objs] + ([objs[0].parent.name] if split else []))
    with build_slot("python-exe", linker, key, outdir, outputs=(NAME, f"{NAME}.map")) as (out, done):
        if done:
            return _as_paths(done)
        exe, emap = out / NAME, out / f"{NAME}.map"
        link_cmd = ["gcc", "-no-pie", flag, *LINKFORSHARED, f"-Wl,-Map={emap}", "-o", str(exe), str(main),
                    *map(str, objs), *extra, *LIBS]
        run(link_cmd, what=f"link {NAME} with {linker}")
        renv = clean_env()
        r = run([exe, "-c", CHECK], env=renv, what=f"{exe} self-check")
        if "True True" not in r.stdout:
            raise ElflayoutError(f"{exe}: C accelerators not in use: {r.stdout.strip()}")
        version = run([exe, "-c", "import sys; print(sys.version)"], env=renv).stdout.strip()
        d = dict(exe=str(exe), map=str(emap), objects=[str(o) for o in objs], link_cmd=link_cmd, env=ENV,
                 workloads={k: [str(exe), *v] for k, v in WORKLOADS.items()}, outdir=str(out), linker=linker,
                 key=key, version=version)
        save_record(out, d)
    return _as_paths(d)


def clean_env() -> dict:
    """The caller's environment without its ``PYTHON*`` settings, plus ``ENV``."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "LD_LIBRARY_PATH"} | ENV


def _as_paths(d: dict) -> dict:
    return record_paths(d, ("exe", "map", "outdir"))
