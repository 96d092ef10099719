"""cpython_src: CPython 3.11.2 built from its upstream sources with LLVM 22.

The upstream tarball is the one Debian's ``python3.11`` source package ships
(``python3.11_3.11.2.orig.tar.gz``, fetched with ``apt-get source --download-only``
and checked against its SHA-256). It is configured ``--enable-shared`` and compiled
with ``clang-22 -O2 -ffunction-sections -fdata-sections``, linked with lld-22: the
target is ``libpython3.11.so.1.0``, started by the build's own ``python``.

Builds (``build``), each a full compile cached once:

* ``plain``: the build every relink reuses (``relink``: the same objects, the same
  link command, extra link arguments);
* ``temporal``: instrumented for temporal profiles (``-fprofile-generate -mllvm
  -pgo-temporal-instrumentation``; only ``libpython3.11.so.1.0`` is built, run through
  the plain build's ``python`` and extension modules);
* ``temporal-nopreinline``: the same with ``-mllvm -disable-preinline``.

``temporal_profile`` runs the workload through an instrumented library and merges its
profile (``llvm-profdata-22 merge``); ``order_file`` is ``llvm-profdata-22 order`` of it
(a ``--symbol-ordering-file``). Each step's wall time and peak memory (the largest
child's maximum resident set) are recorded beside its output.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from elflayout.errors import ElflayoutError
from elflayout.targets import cache_dir, debsrc, locked, param_key, run
from elflayout.targets.libpython import CHECK, WORKLOADS

VERSION = "3.11.2"
ORIG = f"python3.11_{VERSION}.orig.tar.gz"
ORIG_SHA256 = "2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849"
SONAME = "libpython3.11.so.1.0"
CC = "clang-22"
PROFDATA = "llvm-profdata-22"
# CPython's OPT without -g (no debug sections after the last segment) and -O2 for -O3.
OPT = "-DNDEBUG -fwrapv -O2 -Wall -ffunction-sections -fdata-sections"
LDFLAGS = "-fuse-ld=lld-22"
TEMPORAL = "-fprofile-generate -mllvm -pgo-temporal-instrumentation"
FLAVOURS = {"plain": "", "temporal": TEMPORAL, "temporal-nopreinline": f"{TEMPORAL} -mllvm -disable-preinline"}
# The run environment: the build tree's own standard library, nothing from the caller.
ENV = {"PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C"}
# Prints the link command of the shared library as the Makefile runs it.
_PRINT_LINK = ("print-link:\n\t@echo $(BLDSHARED) -Wl,-h$(INSTSONAME) -o $(INSTSONAME) $(LIBRARY_OBJS) "
               "$(MODLIBS) $(SHLIBS) $(LIBC) $(LIBM)\n")


def source() -> Path:
    """The unpacked upstream tree (``Python-3.11.2``), downloaded and unpacked once."""
    root = cache_dir("cpython-src")
    tree = root / f"Python-{VERSION}"
    with locked(root / ".source.lock"):
        if (tree / ".unpacked").exists():
            return tree
        tar = root / ORIG
        if not tar.exists():
            # any Debian revision of 3.11.2 ships the same upstream tarball (checked below)
            got = debsrc.tarball("python3.11")
            if got.name != ORIG:
                raise ElflayoutError(f"{got}: apt-get source gave no {ORIG} (Debian's python3.11 is not {VERSION})")
            shutil.copyfile(got, tar)
        if hashlib.sha256(tar.read_bytes()).hexdigest() != ORIG_SHA256:
            raise ElflayoutError(f"{tar}: SHA-256 differs from the upstream {VERSION} tarball's")
        shutil.rmtree(tree, ignore_errors=True)
        run(["tar", "-xzf", tar, "-C", root], what=f"tar -xzf {tar.name}")
        (tree / ".unpacked").write_text(ORIG_SHA256)
    return tree


def timed(cmd: list, *, cwd=None, env=None, what: str) -> dict:
    """Run ``cmd`` in a fresh process that reports its children's peak RSS: {seconds, peak_mib}.
    ``env`` is the command's alone: the reporting interpreter may itself load a libpython."""
    code = ("import resource, subprocess, sys, json; r = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, "
            "stderr=subprocess.PIPE, text=True, env=json.loads(sys.argv[1])); sys.stderr.write(r.stderr[-3000:]); "
            "print(json.dumps([r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code, json.dumps(dict(os.environ if env is None else env)),
                        *map(str, cmd)], cwd=cwd, capture_output=True, text=True)
    if not r.stdout.strip():
        raise ElflayoutError(f"{what}: no report from the timing process: {r.stderr.strip()[-300:]}")
    rc, rss = json.loads(r.stdout.strip().splitlines()[-1])
    if rc != 0:
        tail = " | ".join(r.stderr.strip().splitlines()[-6:])
        raise ElflayoutError(f"{what}: exit {rc}: {tail}")
    return {"seconds": round(time.monotonic() - t0, 1), "peak_mib": round(rss / 1024)}


def build(flavour: str = "plain") -> dict:
    """Configure and compile (cached). Returns dict(dir, lib, python, flavour, cost)."""
    if flavour not in FLAVOURS:
        raise ElflayoutError(f"{flavour}: unknown build (choose from {', '.join(FLAVOURS)})")
    src = source()
    d = _build_dir(flavour)
    rec = d / "built.json"
    with locked(d.parent / f".{d.name}.lock"):
        if rec.exists():
            return json.loads(rec.read_text())
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["LLVM_PROFILE_FILE"] = str(d / "build-%p.profraw")  # the build's own tools' runs: not the profile
        plain = _build_dir("plain")
        if flavour != "plain" and (plain / "Makefile").exists():
            # configured as the plain build (its answers, once its configure is done); the
            # instrumentation is added as CPython's own PGO build adds it (*_NODIST)
            shutil.copyfile(plain / "config.cache", d / "config.cache")
        cfg = [src / "configure", "-C", f"CC={CC}", "--enable-shared", "--without-ensurepip", f"OPT={OPT}",
               f"LDFLAGS={LDFLAGS}"]
        # an interrupted build resumes: its configure is done, make keeps the objects it wrote
        cost = [] if (d / "Makefile").exists() else [timed(cfg, cwd=d, env=env, what=f"configure ({flavour})")]
        jobs = str(2 * (os.cpu_count() or 1))  # compiles also wait for the disk
        flags = FLAVOURS[flavour]
        targets = ["all"] if flavour == "plain" else [f"CFLAGS_NODIST={flags}", f"LDFLAGS_NODIST={flags}",
                                                       "libpython3.11.so"]
        cost.append(_make(d, [f"-j{jobs}", *targets], env, flavour))
        out = {"dir": str(d), "lib": str(d / SONAME), "python": str(d / "python"), "flavour": flavour,
               "cost": {"seconds": round(sum(c["seconds"] for c in cost), 1),
                        "peak_mib": max(c["peak_mib"] for c in cost)}}
        if flavour == "plain":
            out["link_cmd"] = link_command(d)
            check = run([d / "python", "-c", CHECK], env=run_env(d), what="self-check of the built python").stdout
            if "True True" not in check:
                raise ElflayoutError(f"{d}/python: C accelerators not in use: {check.strip()}")
            # the workload once with bytecode written: every later run reads the same .pyc files
            run([d / "python", *WORKLOADS["imports"]], env={**run_env(d), "PYTHONDONTWRITEBYTECODE": ""})
        rec.write_text(json.dumps(out, indent=1))
    return out


def _make(d: Path, args: list, env: dict, flavour: str) -> dict:
    """``make ARGS`` in ``d``; the time of interrupted earlier attempts (``interrupted.json``) is added."""
    spent = d / "interrupted.json"
    before = json.loads(spent.read_text()) if spent.exists() else {"seconds": 0, "peak_mib": 0}
    t0 = time.monotonic()
    try:
        c = timed(["make", *args], cwd=d, env=env, what=f"make ({flavour})")
    except BaseException:
        spent.write_text(json.dumps(before | {"seconds": before["seconds"] + time.monotonic() - t0}))
        raise
    return {"seconds": c["seconds"] + before["seconds"], "peak_mib": max(c["peak_mib"], before["peak_mib"])}


def _build_dir(flavour: str) -> Path:
    return cache_dir("cpython-src", f"build-{flavour}-{param_key(OPT, LDFLAGS, FLAVOURS[flavour])}")


def link_command(d: Path) -> list[str]:
    """The Makefile's link command of the shared library (run in build directory ``d``)."""
    mk = d / "print-link.mk"
    mk.write_text(_PRINT_LINK)
    r = run(["make", "-s", "-f", "Makefile", "-f", mk, "print-link"], cwd=d, what="make print-link")
    return shlex.split(r.stdout.strip().splitlines()[-1])


def run_env(libdir, base: dict | None = None) -> dict:
    """Environment of a run with the library from ``libdir`` and no caller PYTHON* setting."""
    env = {k: v for k, v in (base if base is not None else os.environ).items() if not k.startswith("PYTHON")}
    return env | ENV | {"LD_LIBRARY_PATH": str(libdir)}


def workload(name: str = "imports") -> list[str]:
    """The workload's command through the plain build's ``python``."""
    return [build("plain")["python"], *WORKLOADS[name]]


def relink(extra_args=(), tag: str = "") -> dict:
    """The plain build's library relinked with ``extra_args`` added (cached by the
    arguments, a file argument by its content). Returns dict(lib, map, dir, link_cmd, cost)."""
    from elflayout.targets import args_fingerprint

    b = build("plain")
    extra = [str(a) for a in extra_args]
    d = cache_dir("cpython-src", "links", f"{tag or 'link'}-{param_key(b['link_cmd'], args_fingerprint(extra))}")
    rec = d / "built.json"
    with locked(d.parent / f".{d.name}.lock"):
        if rec.exists():
            return json.loads(rec.read_text()) | {"cached": True}
        cmd = output_command(b["link_cmd"], d / SONAME) + [f"-Wl,-Map={d / (SONAME + '.map')}", *extra]
        cost = timed(cmd, cwd=b["dir"], what=f"relink {tag}")
        out = {"lib": str(d / SONAME), "map": str(d / f"{SONAME}.map"), "dir": str(d), "link_cmd": cmd, "cost": cost}
        rec.write_text(json.dumps(out, indent=1))
    return out | {"cached": False}


def output_command(link_cmd: list[str], out: Path) -> list[str]:
    """``link_cmd`` writing ``out`` instead of the build directory's library."""
    cmd = list(link_cmd)
    i = cmd.index("-o")
    cmd[i + 1] = str(out)
    return cmd


def temporal_profile(flavour: str) -> dict:
    """The workload run once through instrumented build ``flavour``, its raw profile
    merged (cached). Returns dict(profdata, cost) where cost covers the build, the
    run and the merge."""
    b = build(flavour)
    d = Path(b["dir"])
    prof = d / "workload.profdata"
    rec = d / "profile.json"
    with locked(d.parent / f".{d.name}.profile.lock"):
        if rec.exists():
            return json.loads(rec.read_text()) | {"cached": True}
        raw = d / "workload.profraw"
        raw.unlink(missing_ok=True)
        env = run_env(d) | {"LLVM_PROFILE_FILE": str(raw)}
        c1 = timed(workload(), env=env, what=f"workload through the {flavour} build")
        if not raw.exists():
            raise ElflayoutError(f"{raw}: the instrumented run wrote no profile")
        c2 = timed([PROFDATA, "merge", "-o", prof, raw], what="llvm-profdata merge")
        cost = {"seconds": b["cost"]["seconds"] + c1["seconds"] + c2["seconds"],
                "peak_mib": max(b["cost"]["peak_mib"], c1["peak_mib"], c2["peak_mib"])}
        out = {"profdata": str(prof), "cost": cost}
        rec.write_text(json.dumps(out, indent=1))
    return out | {"cached": False}


def order_file(flavour: str) -> dict:
    """``llvm-profdata-22 order`` of ``temporal_profile(flavour)``: dict(order, cost)."""
    p = temporal_profile(flavour)
    out = Path(p["profdata"]).with_suffix(".order.txt")
    c = timed([PROFDATA, "order", p["profdata"], "-o", out], what="llvm-profdata order")
    return {"order": str(out), "cost": {"seconds": p["cost"]["seconds"] + c["seconds"],
                                        "peak_mib": max(p["cost"]["peak_mib"], c["peak_mib"]),
                                        "cached": p["cached"]}}


def same_output(lib_dir, want: str | None = None) -> str:
    """The workload's stdout (plus the self-check's) with the library from ``lib_dir``;
    compared with ``want`` when given (ElflayoutError when it differs)."""
    env = run_env(lib_dir)
    got = "".join(subprocess.run([build("plain")["python"], "-c", c], capture_output=True, text=True,
                                 env=env).stdout for c in (CHECK, WORKLOADS["imports"][1]))
    if want is not None and got != want:
        raise ElflayoutError(f"{lib_dir}: the workload prints {got!r}, not {want!r}")
    return got
