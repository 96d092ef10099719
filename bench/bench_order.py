#!/usr/bin/env python3
"""Ordering figures: pages read at a cold start, default vs profile-ordered links.

    python3 bench/bench_order.py [llvm] [python] [speed] [model] [--runs N]

- llvm:   libLLVM-16 relinked from LLVM 16's archives with lld (and gold), ``llc-16
          --version``; profile from the valgrind backend of the default relink; ordered
          with lld --symbol-ordering-file (functions + data symbols; first-access and
          hot-last), plus the lld data script (-T: symbol-less data sections, and the
          touched objects' merged strings in a pool of their own) and the .dynstr name
          order (-u/-y response file), and gold --section-ordering-file
          (functions + data sections); the system library and the main variants also
          after ``elflayout pack-relocs``, with pages by section.
- python: libpython3.11 relinked from Debian's PIC objects, import workload, object
          order only (the objects lack -ffunction-sections) with bfd, gold, lld, mold.
- speed:  ``elflayout order`` on a 100k-function profile (target ≤ 5 s).
- model:  the readahead model (simulate) against measured traces: a trace profile of
          one cold run, the pages added measured in another.

Measurement: ``elflayout.measure.session`` in-process, selective state: the library
alone is evicted (posix_fadvise DONTNEED, checked with mincore; a disturbed run is
repeated), read_ahead_kb of its device set to 128 and restored, page-cache insertions
of that file counted with tracefs. Medians of --runs runs (page counts are nearly
deterministic under these controls).
Needs root and tracefs; the relinks are cached by elflayout.targets.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import numpy as np  # noqa: E402

from _common import cache_root  # noqa: E402
from _common import cli as run_cli  # noqa: E402
from elflayout.elfcore import ElfImage  # noqa: E402
from elflayout.order import pipeline  # noqa: E402

RA_KB = 128
WORK = cache_root() / "bench-order"


def cli(*args, check=True):
    """An elflayout verb, not echoed: this bench prints its own summary of each step."""
    return run_cli(*args, check=check, echo=False)


def measure(lib, argv, env=None, runs=3):
    """Median pages read of LIB over RUNS selectively-cold runs (``measure.session``:
    the library alone evicted and verified, read_ahead_kb RA_KB, disturbed runs
    repeated), and pages by section of the median run."""
    from elflayout.measure import session
    from elflayout import results as model

    # output to a pipe, as when the profile was recorded: llc's raw_fd_ostream takes
    # other code paths for /dev/null than for a pipe
    cmd = session.command(argv, env) + " | cat >/dev/null"
    doc = session.measure(session.MeasurePlan(variants=[("v", cmd)], states=["selective"], runs=runs,
                                              files=[str(lib)], read_ahead_kb=RA_KB, census="none", seed=1, retries=4))
    res = model.parse(doc, str(lib))
    clean = sorted(res.cell("v", "selective"), key=lambda r: r.files[str(lib)].pages_read)
    if not clean:
        raise SystemExit(f"{lib}: every run disturbed: {res.runs[0].interference}")
    mid = clean[len(clean) // 2].files[str(lib)]
    return {"pages": mid.pages_read, "runs": [r.files[str(lib)].pages_read for r in clean],
            "disturbed": len(res.runs) - len(clean),
            "by_section": model.pages_by_section(res.files[str(lib)]["sections"], model.run_pages(mid.reads))}


SECTION_COLUMNS = (
    (".text", (".text",)),
    (".rodata", (".rodata", ".rodata.elflayout")),
    (".dynstr", (".dynstr",)),
    (".dynsym+hash+ver", (".dynsym", ".gnu.hash", ".gnu.version")),
    (".rela/.relr", (".rela.dyn", ".relr.dyn")),
    (".data.rel.ro", (".data.rel.ro",)),
)


def columns(by_section):
    out, used = {}, set()
    for col, names in SECTION_COLUMNS:
        out[col] = sum(by_section.get(n, 0) for n in names)
        used.update(names)
    out["other"] = sum(v for k, v in by_section.items() if k not in used)
    return out


def show(name, m, base=None):
    rel = f"  ({100 * (m['pages'] / base - 1):+.1f}%)" if base else ""
    cols = "  ".join(f"{k} {v:,}" for k, v in columns(m["by_section"]).items())
    print(f"  {name:<44} {m['pages']:>7,} pages{rel}   {cols}   runs {m['runs']}", flush=True)


def ordered_file(prof, fmt, lib, hot_strings=True, companions=(), **request):
    """``elflayout order`` output named by its content: the targets cache keys relinks by
    their arguments, so a changed ordering must have a new file name. Ordered in-process
    by ``order.pipeline.order_files`` (what the verb runs); ``request``: the other
    ``pipeline.Request`` fields; ``companions``: suffixes of the lld companions to write
    too (``data.ld``: ``--data-script``, ``dynstr.rsp``: ``--dynstr-out``), named the
    same way; returns the main file, or a tuple (main, *companions)."""
    import hashlib

    tmp = WORK / f".tmp.{fmt}"
    ctmp = {suf: WORK / f".tmp.{suf}" for suf in companions}
    pipeline.order_files(pipeline.Request(prof, fmt, lib=lib, **request), tmp, data_script=ctmp.get("data.ld"),
                         dynstr_out=ctmp.get("dynstr.rsp"), hot_strings=hot_strings)
    outs = []
    for t, suf in [(tmp, fmt)] + [(t, s) for s, t in ctmp.items()]:
        h = hashlib.sha256(t.read_bytes()).hexdigest()[:12]
        out = WORK / f"{Path(prof).stem}-{h}.{suf}"  # same content, same name: the relink stays cached
        t.replace(out)
        outs.append(out)
    return outs[0] if not companions else tuple(outs)


def pack(lib: Path, dest: Path) -> tuple[Path, str]:
    """Packed copy of LIB in DEST (cached), and how it was proved (``targets.pack_verified``)."""
    from elflayout.targets import pack_verified

    out = dest / lib.name
    if out.exists() and (dest / "verified").exists():
        return out, (dest / "verified").read_text()
    how = pack_verified(lib, out)
    (dest / "verified").write_text(how)
    return out, how


# -- libLLVM ---------------------------------------------------------------------------

def bench_llvm(runs):
    import shutil

    from elflayout.targets import libllvm

    WORK.mkdir(parents=True, exist_ok=True)
    print(f"libLLVM-16 relinked from archives, llc-16 --version, selective cold, read_ahead_kb {RA_KB}")
    base = libllvm.relink("lld")
    argv = [str(x) for x in base["workloads"]["version"]]
    prof = WORK / "llc-valgrind.json"
    if not prof.exists() or json.loads(prof.read_text())["targets"][0]["build_id"] != ElfImage(base["lib"]).build_id:
        cli("profile", "--target", base["lib"], "--map", base["map"], "--data", "--env",
            f"LD_LIBRARY_PATH={base['env']['LD_LIBRARY_PATH']}", "-o", prof, "--force", "--", *argv)
    print(f"  profile: {prof} (valgrind backend, --data, of the default lld relink)")
    lld_order = ordered_file(prof, "lld", base["lib"])
    lld_code = ordered_file(prof, "lld", base["lib"], data=False)
    gold_order = ordered_file(prof, "gold", base["lib"])
    lld_hot_last = ordered_file(prof, "lld", base["lib"], algorithm="hot-last")
    hl_all, data_ld, names_rsp = ordered_file(prof, "lld", base["lib"], algorithm="hot-last",
                                              companions=("data.ld", "dynstr.rsp"))
    _hl, data_ld_sec = ordered_file(prof, "lld", base["lib"], algorithm="hot-last", hot_strings=False,
                                    companions=("data.ld",))
    print(f"  order files: elflayout order {prof.name} --format lld --algorithm hot-last --lib {base['lib']} "
          f"--data-script {data_ld.name} --dynstr-out {names_rsp.name} -o {hl_all.name}   (in {WORK})")
    sym = lambda f: [f"-Wl,--symbol-ordering-file={f}", "-Wl,--no-warn-symbol-ordering"]  # noqa: E731
    links = {
        "lld default": ("lld", []),
        "lld ordered (functions)": ("lld", sym(lld_code)),
        "lld ordered (functions+data syms)": ("lld", sym(lld_order)),
        "lld hot-last (functions+data syms)": ("lld", sym(lld_hot_last)),
        "lld hot-last + data script (sections)": ("lld", sym(hl_all) + [f"-Wl,-T,{data_ld_sec}"]),
        "lld hot-last + data script (+hot strings)": ("lld", sym(hl_all) + [f"-Wl,-T,{data_ld}"]),
        "lld hot-last + data script + dynstr names": ("lld", sym(hl_all) + [f"-Wl,-T,{data_ld}", f"-Wl,@{names_rsp}"]),
        "gold default": ("gold", []),
        "gold ordered (sections+data)": ("gold", [f"-Wl,--section-ordering-file={gold_order}"]),
    }
    packed = ("lld default", "lld hot-last (functions+data syms)", "lld hot-last + data script + dynstr names",
              "gold default", "gold ordered (sections+data)")
    out = {}
    # Debian's library through a byte-identical copy (other processes map the system file)
    sysdir = WORK / "system"
    sysdir.mkdir(exist_ok=True)
    s_lib = sysdir / libllvm.SONAME
    if not s_lib.exists() or s_lib.stat().st_size != libllvm.SYSTEM_LIB.stat().st_size:
        shutil.copyfile(libllvm.SYSTEM_LIB, s_lib)
    m = measure(s_lib, argv, {"LD_LIBRARY_PATH": str(sysdir)}, runs)
    out["system (Debian, gold)"] = m
    show("system (Debian, gold)", m)
    p_lib, how = pack(s_lib, WORK / "system-packed")
    print(f"  system + packed: elflayout pack-relocs {s_lib} -o {p_lib} ({how})")
    m = measure(p_lib, argv, {"LD_LIBRARY_PATH": str(p_lib.parent)}, runs)
    out["system + packed"] = m
    show("system + packed", m, out["system (Debian, gold)"]["pages"])
    for name, (linker, extra) in links.items():
        d = libllvm.relink(linker, extra_link_args=extra)
        m = measure(d["lib"], argv, d["env"], runs)
        chk = json.loads(cli("check-order", d["lib"], "--profile", prof, "--json").stdout)
        r = cli("simulate", prof, "--lib", d["lib"], "--map", d["map"], "--read-ahead-kb", RA_KB, "--json", check=False)
        sim = json.loads(r.stdout) if r.returncode == 0 else {"pages": None}
        m["in_order"] = chk["in_order_fraction"]
        m["predicted"] = sim["pages"]
        m["lib"] = str(d["lib"])
        m["link_extra"] = extra
        out[name] = m
        b = out.get(f"{linker} default", {}).get("pages")
        print(f"  {name}: elflayout.targets.libllvm.relink({linker!r}, extra_link_args={extra!r}) -> {d['lib']}")
        show(name, m, b if not name.endswith("default") else None)
        model = f"{sim['pages']:,} pages" if sim["pages"] is not None else "n/a (" + r.stderr.strip()[-80:] + ")"
        print(f"  {'':<44} in profile order {100 * chk['in_order_fraction']:.1f}%, contiguity "
              f"{100 * chk['contiguity']:.1f}%; model predicts {model}", flush=True)
        if name in packed:
            p_lib, how = pack(d["lib"], WORK / "packed" / d["outdir"].name)
            pm = measure(p_lib, argv, {"LD_LIBRARY_PATH": str(p_lib.parent)}, runs)
            pm["packed_with"] = how
            print(f"  {name} + packed: elflayout pack-relocs {d['lib']} -o {p_lib} ({how})")
            out[name + " + packed"] = pm
            show(name + " + packed", pm, out["system (Debian, gold)"]["pages"])
    print(f"  (+packed rows: change against the system library; packed copies in {WORK / 'packed'})")
    return out


# -- libpython ---------------------------------------------------------------------------

def bench_python(runs):
    from elflayout.targets import libpython

    print(f"libpython3.11 relinked from Debian's PIC objects, import workload, object order, read_ahead_kb {RA_KB}")
    base = libpython.prepare("bfd")
    argv = [str(x) for x in base["workloads"]["imports"]]
    prof = WORK / "py-valgrind.json"
    WORK.mkdir(parents=True, exist_ok=True)
    if not prof.exists() or json.loads(prof.read_text())["targets"][0]["build_id"] != ElfImage(base["lib"]).build_id:
        cli("profile", "--target", base["lib"], "--map", base["map"], "-o", prof, "--force",
            *[f"--env={k}={v}" for k, v in base["env"].items()], "--", *argv)
    objs = WORK / "py.objects"
    pipeline.order_files(pipeline.Request(prof, "objects", objects_from=base["map"]), objs)
    print(f"  profile: {prof} (valgrind backend of the default bfd relink); object order: {objs}")
    order = [l for l in objs.read_text().splitlines() if l]
    out = {}
    for linker in ("bfd", "gold", "lld", "mold"):
        d0 = libpython.prepare(linker)
        d1 = libpython.prepare(linker, object_order=order)
        a0 = [str(x) for x in d0["workloads"]["imports"]]
        a1 = [str(x) for x in d1["workloads"]["imports"]]
        m0 = measure(d0["lib"], a0, d0["env"], runs)
        m1 = measure(d1["lib"], a1, d1["env"], runs)
        show(f"{linker} default", m0)
        show(f"{linker} object order", m1, m0["pages"])
        out[linker] = {"default": m0, "ordered": m1}
    return out


# -- speed ---------------------------------------------------------------------------------

def bench_speed():
    n = 100_000
    rng = np.random.default_rng(0)
    funcs = [{"name": f"_ZN4bench8functionILi{i}EEvv", "offset": 4096 + 64 * i, "size": 64, "section": ".text",
              "object": f"lib.a(o{i // 100}.o)", "first": int(f), "phase": "main", "t": 0.0}
             for i, f in enumerate(rng.permutation(n))]
    funcs.sort(key=lambda fn: fn["first"])  # the format lists functions in first-access order
    doc = {"format": "elflayout-profile", "version": 1, "metadata": {"backend": "synthetic"},
           "targets": [{"path": "/nonexistent/libbig.so", "build_id": "00", "size": 0, "sha256": "", "map": None,
                        "functions": funcs, "sections": [], "objects": [], "pages": [], "reads": []}]}
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "big.json"
        p.write_text(json.dumps(doc))
        for fmt in ("lld", "gold", "ld-script", "objects"):
            ts, cpu = [], []
            for _ in range(3):
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                # the verb, not the function: its wall time as a user sees it (start-up included)
                cli("order", p, "--format", fmt, "-o", Path(td) / f"o.{fmt}", "--force")
                ts.append(time.perf_counter() - t0)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
            print(f"  order --format {fmt:<9} on {n:,} functions: median {statistics.median(ts):.2f} s wall, "
                  f"{statistics.median(cpu):.2f} s CPU (wall runs {', '.join(f'{t:.2f}' for t in ts)}; "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; target ≤ 5 s)")


# -- readahead model validation ----------------------------------------------------------------

def trace_profile(lib, argv, env, path):
    """A trace-backend profile (pages faulted, first-fault order) of one selective-cold run,
    at read_ahead_kb RA_KB (``elflayout profile --backend trace --evict --read-ahead-kb``)."""
    cli("profile", "--backend", "trace", "--evict", "--read-ahead-kb", RA_KB, "--target", lib,
        *[f"--env={k}={v}" for k, v in (env or {}).items()], "-o", path, "--force", "--", *argv)


def bench_model(runs):
    from elflayout.targets import libllvm, libpython

    WORK.mkdir(parents=True, exist_ok=True)
    print(f"readahead model vs measurement (profile: faults of one run; measured: median of {runs} other runs)")
    s = libllvm.system()
    py = libpython.prepare("bfd")
    cases = {
        "libLLVM-16 (system), llc-16 --version": (s["lib"], [str(s["llc"]), "--version"], None),
        "libpython3.11 (bfd relink), imports": (py["lib"], [str(x) for x in py["workloads"]["imports"]], py["env"]),
    }
    out = {}
    for name, (lib, argv, env) in cases.items():
        prof = WORK / f"trace-{Path(lib).name}.json"
        trace_profile(lib, argv, env, prof)
        m = measure(lib, argv, env, runs)
        sim = json.loads(cli("simulate", prof, "--lib", lib, "--read-ahead-kb", RA_KB, "--json").stdout)
        err = 100 * (sim["pages"] / m["pages"] - 1)
        print(f"  {name:<40} predicted {sim['pages']:>7,}  measured {m['pages']:>7,}  ({err:+.1f}%; runs {m['runs']})")
        out[name] = {"predicted": sim["pages"], "measured": m["pages"], "error_pct": err}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="*", default=["speed", "model", "llvm", "python"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    from elflayout.tracefs import tracefs_status

    why = tracefs_status()
    res = {}
    for part in a.parts:
        if part != "speed" and why:
            print(f"{part}: skipped: {why}")
            continue
        print(f"== {part}   (python3 bench/bench_order.py {part} --runs {a.runs})")
        res[part] = {"speed": lambda: bench_speed(), "model": lambda: bench_model(a.runs),
                     "llvm": lambda: bench_llvm(a.runs), "python": lambda: bench_python(a.runs)}[part]()
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
