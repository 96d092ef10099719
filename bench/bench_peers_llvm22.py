#!/usr/bin/env python3
"""LLVM 22 peers on CPython 3.11.2 built from source, selective cold start.

    python3 bench/bench_peers.py --llvm22 [--runs 3] [--json OUT]
    (the same as: python3 bench/bench_peers_llvm22.py [--runs 3] [--json OUT])
    python3 bench/bench_peers.py --llvm22 --floor [--runs 3]   (the best recipe against itself
    with --move-symtab and with --strip-all: the read-ahead past the last segment)

The target: ``libpython3.11.so.1.0`` of CPython 3.11.2 (the upstream tarball of Debian's
``python3.11`` source package) compiled once with ``clang-22 -O2 -ffunction-sections
-fdata-sections`` and linked with lld-22 (``elflayout.targets.cpython_src``); every
variant but BOLT's is a relink of the same objects. Workload: the build's ``python -c
"import json, decimal, asyncio, re"``. One interleaved ``elflayout measure`` session (same
counter for all: page-cache insertions of the library, read_ahead_kb 128, the library
alone evicted) over:

- lld-22 default, and ``-z pack-relative-relocs`` (RELR);
- temporal profiling (``-fprofile-generate -mllvm -pgo-temporal-instrumentation``, a
  second full compile; the workload run once; ``llvm-profdata-22 order`` ->
  ``--symbol-ordering-file``), with and without ``-mllvm -disable-preinline`` (a third
  compile); with RELR;
- lld-22 balanced partitioning from the same profiles (``--irpgo-profile
  --bp-startup-sort=function``, with and without ``--bp-compression-sort=both``), RELR;
- BOLT-22 (an ``--emit-relocs`` relink instrumented, run once, optimised with cdsort
  function order, ext-TSP block order and hot/cold splitting; also ``-use-old-text``,
  then ``elflayout pack-relocs``);
- elflayout: ``elflayout link`` with a profile of the default relink (its default path,
  alone and with ``--pack relr``, RELR as the peers have it), and its best recipe
  (``--algorithm hot-last --data-script --dynstr --pack relr``).

Per variant: pages read (median of --runs), seeks, file size, time and peak memory of
the steps that produce it (a cached step shows its cost when it was made: †), and whether
the workload and a self-check print the same through it as through the default link.
The full compile every relink shares is printed once, under the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

import bench_pipeline as bp  # noqa: E402
from bench_split import MEASURED_CONDITIONS  # noqa: E402

from elflayout.errors import ElflayoutError  # noqa: E402
from elflayout.targets import cache_dir  # noqa: E402
from elflayout.targets import cpython_src as cs  # noqa: E402

PY = sys.executable
RELR = ["-Wl,-z,pack-relative-relocs"]
BOLT = Path("/usr/lib/llvm-22/bin/llvm-bolt")  # the versioned symlink's argv[0] picks the tool's mode
BOLT_OPTS = ["-reorder-functions=cdsort", "-reorder-blocks=ext-tsp", "-split-functions", "-split-all-cold",
             "-dyno-stats"]
BEST = "elflayout link, best (hot-last, data script, .dynstr, RELR)"
BEST_OPTS = ["--algorithm", "hot-last", "--data-script", "--dynstr", "--pack", "relr"]
MOVED = "best, --move-symtab"
STRIP = "llvm-strip-22"
PROFILES = {"temporal": "", "temporal-nopreinline": ", -disable-preinline"}


def cost_of(*steps: dict) -> dict:
    """Summed seconds, largest peak, and whether any step came from the cache."""
    return {"seconds": sum(s["seconds"] for s in steps), "peak_mib": max(s["peak_mib"] or 0 for s in steps),
            "cached": any(s.get("cached") for s in steps)}


def relinked(name: str, extra: list, *before: dict) -> tuple[Path, dict]:
    d = cs.relink(extra, tag=name.split(" ")[0].lower())
    print(f"  {name}: {'cached' if d.get('cached') else 'linked'} {d['lib']}", flush=True)
    return Path(d["lib"]), cost_of(*before, d["cost"] | {"cached": d.get("cached", False)})


def peer_variants() -> tuple[dict, dict]:
    """lld-22's own rows: {name: lib}, {name: cost}."""
    libs, cost = {}, {}
    libs["lld-22 default"], cost["lld-22 default"] = relinked("default", [])
    libs["lld-22 RELR"], cost["lld-22 RELR"] = relinked("relr", RELR)
    for fl, tag in PROFILES.items():
        o = cs.order_file(fl)
        p = cs.temporal_profile(fl)
        n = f"temporal order file{tag} + RELR"
        libs[n], cost[n] = relinked(f"order-{fl}", [f"-Wl,--symbol-ordering-file={o['order']}",
                                                    "-Wl,--no-warn-symbol-ordering", *RELR], o["cost"])
        bp_args = [f"-Wl,--irpgo-profile={p['profdata']}", "-Wl,--bp-startup-sort=function"]
        n = f"BP startup{tag} + RELR"
        libs[n], cost[n] = relinked(f"bp-{fl}", [*bp_args, *RELR], p["cost"] | {"cached": p["cached"]})
        n = f"BP startup + compression{tag} + RELR"
        libs[n], cost[n] = relinked(f"bpc-{fl}", [*bp_args, "-Wl,--bp-compression-sort=both", *RELR],
                                    p["cost"] | {"cached": p["cached"]})
    return libs, cost


def elflayout_variants(w: Path, base: Path, only: tuple = ()) -> tuple[dict, dict]:
    """``elflayout link`` rows: the default path and the best recipe, from one valgrind
    profile of the default relink under the measured conditions (``only``: those rows;
    default: all but ``MOVED``, measured by ``--floor``)."""
    prof = w / "python.profile.json"
    rec = w / "python.profile.cost.json"
    envs = sum((["--env", f"{k}={v}"] for k, v in cs.ENV.items()), [])
    args = ["profile", "--target", base, "--map", f"{base}.map", "--data", *MEASURED_CONDITIONS, *envs,
            "--env", f"LD_LIBRARY_PATH={base.parent}", "--repeat", "3", "-o", prof, "--force", "--", *cs.workload()]
    sha = bp.file_sha(base)
    done = json.loads(rec.read_text()) if rec.exists() and prof.exists() else {}
    if done.get("lib_sha") == sha:
        pcost = done | {"cached": True}
        print(f"  $ {bp.show_cmd(args)}   (cached)", flush=True)
    else:
        print(f"  $ {bp.show_cmd(args)}", flush=True)
        pcost = cs.timed([PY, "-m", "elflayout", *args], env=dict(os.environ, PYTHONPATH=str(ROOT / "tools")),
                         what="elflayout profile")
        rec.write_text(json.dumps(pcost | {"lib_sha": sha}))
    recipes = {"elflayout link (default)": [], "elflayout link --pack relr": ["--pack", "relr"],
               BEST: BEST_OPTS, MOVED: [*BEST_OPTS, "--move-symtab"]}
    libs, cost = {}, {}
    link_cmd = cs.build("plain")["link_cmd"]
    for i, (name, opts) in enumerate(recipes.items()):
        if name not in (only or set(recipes) - {MOVED}):
            continue
        out = w / f"elflayout-{i}" / cs.SONAME
        out.parent.mkdir(exist_ok=True)
        cmd = [PY, "-m", "elflayout", "link", "--profile", prof, "--lib", base, "--linker", "lld", *opts, "--",
               *cs.output_command(link_cmd, out)]
        print(f"  $ elflayout link --profile {prof} --lib {base} --linker lld {' '.join(opts)} -- "
              f"<the Makefile's link command, -o {out}>", flush=True)
        c = cs.timed(cmd, cwd=cs.build("plain")["dir"], env=dict(os.environ, PYTHONPATH=str(ROOT / "tools")),
                     what=f"elflayout link ({name})")
        libs[name], cost[name] = out, cost_of(pcost, c)
    return libs, cost


def bolt_variants(w: Path) -> tuple[dict, dict, list[str]]:
    """BOLT-22's rows from an ``--emit-relocs`` relink: instrumented, run once, optimised."""
    from bench_peers import _failed, bolt_step

    emit = cs.relink(["-Wl,--emit-relocs"], tag="emit-relocs")
    lib = Path(emit["lib"])
    root = cache_dir("bolt22", bp.file_sha(lib)[:16])
    notes = [f"BOLT input: `{lib}` (lld-22, `-Wl,--emit-relocs`); `{BOLT}`"]
    fdata = root / "instr" / "prof.fdata"
    ins = bolt_step(root / "instr", [BOLT, lib, "-instrument", f"-instrumentation-file={fdata}", "-o",
                                     root / "instr" / lib.name], [lib.name])
    if ins["rc"]:
        return {}, {}, [*notes, _failed("BOLT: instrument", ins)]
    env = cs.run_env(root / "instr")
    prof = bolt_step(root / "run", cs.workload(), [], env=env, before=lambda: fdata.unlink(missing_ok=True))
    if not prof["rc"] and not prof.get("cached"):
        if fdata.exists():
            fdata.replace(root / "run" / "prof.fdata")
    if prof["rc"] or not (root / "run" / "prof.fdata").exists():
        (root / "run" / "record.json").unlink(missing_ok=True)
        return {}, {}, [*notes, _failed("BOLT: instrumented run", prof | {"rc": prof["rc"] or -1})]
    base_cost = [emit["cost"], ins, prof]
    libs, cost = {}, {}
    for name, extra in (("BOLT-22 (cdsort, ext-tsp, split)", []),
                        ("BOLT-22 (cdsort, ext-tsp, split, -use-old-text)", ["-use-old-text"])):
        od = root / ("opt-old-text" if extra else "opt")
        rec = bolt_step(od, [BOLT, lib, "-o", od / lib.name, f"-data={root / 'run' / 'prof.fdata'}", *BOLT_OPTS,
                             *extra], [lib.name])
        if rec["rc"]:
            notes.append(_failed(name, rec))
            continue
        notes.append(f"{name}: `{' '.join(rec['argv'])}`")
        libs[name], cost[name] = od / lib.name, cost_of(*base_cost, rec)
    if "BOLT-22 (cdsort, ext-tsp, split, -use-old-text)" in libs:
        t0 = time.monotonic()
        try:
            n = "BOLT-22 -use-old-text, then pack-relocs"
            libs[n] = bp.pack(libs["BOLT-22 (cdsort, ext-tsp, split, -use-old-text)"], w / "bolt-packed")
            cost[n] = cost_of(cost["BOLT-22 (cdsort, ext-tsp, split, -use-old-text)"],
                              {"seconds": time.monotonic() - t0, "peak_mib": 0})
        except ElflayoutError as e:
            notes.append(f"BOLT, then pack-relocs: FAILED: {e}")
    return libs, cost, notes


def floor_variants(w: Path, el: dict) -> dict:
    """The best recipe's output, then each read-ahead lever past its last segment on its own:
    ``--move-symtab`` (``order.tuck``: the unloaded sections into the hole after the first
    PT_LOAD; the start of ``.text`` is cold with hot-last) and ``--strip-all`` (no symbol
    table left)."""
    best = el[BEST]
    out = w / "floor-stripped" / best.name
    out.parent.mkdir(exist_ok=True)
    subprocess.run([STRIP, "--strip-all", "-o", str(out), str(best)], check=True)
    print(f"  $ {STRIP} --strip-all -o {out} {best}", flush=True)
    return {BEST: best, MOVED: el[MOVED], "best, --strip-all": out}


def floor_main(w: Path, runs: int, json_out) -> int:
    """Only the best recipe and the floor levers, one short session."""
    from bench_peers import finish

    el, _ = elflayout_variants(w, Path(cs.relink([], tag="default")["lib"]), only=(BEST, MOVED))
    libs = floor_variants(w, el)
    want = cs.same_output(el[BEST].parent)
    variants = {n: (lib, bp.variant_cmd(lib.parent, cs.workload(), cs.ENV)) for n, lib in libs.items()}
    summ = bp.summarise(bp.measure(w / "floor.results.json", variants, runs), dict(libs))
    print("| variant | pages read | .symtab/.strtab pages | seeks | file size (MB) | output identical |")
    print("|---|---:|---:|---:|---:|---|")
    rows = {}
    for n, lib in libs.items():
        s, same = summ.get(n), cs.same_output(lib.parent) == want
        tail = "—" if not s else sum(c for k, c in s["by_section"].items() if k in (".symtab", ".strtab"))
        pages = "disturbed" if not s else f"{s['pages']:,.0f}"
        print(f"| {n} | {pages} | {tail} | {s['seeks'] if s else '—'} | {lib.stat().st_size / 1e6:,.2f} | "
              f"{'yes' if same else 'NO'} |")
        rows[n] = {"lib": str(lib), "summary": s, "size": lib.stat().st_size, "identical": same}
    return finish([], rows, json_out)


def row(name: str, lib: Path, s: dict | None, c: dict, same: bool) -> str:
    pages = "disturbed" if not s else f"{s['pages']:,.0f}"
    seeks = "—" if not s else f"{s['seeks']:,.0f}"
    dag = "†" if c.get("cached") else ""
    return (f"| {name} | {pages} | {seeks} | {lib.stat().st_size / 1e6:,.2f} | {c['seconds']:,.0f}{dag} | "
            f"{c['peak_mib']:,.0f}{dag} | {'yes' if same else 'NO'} |")


def main(argv=None) -> int:
    from bench_peers import finish

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--floor", action="store_true", help="only the best recipe and the read-ahead levers past "
                    "its last segment (moved unloaded sections, --strip-all)")
    args = ap.parse_args(argv)
    w = bp.work_dir() / "peers-llvm22"
    w.mkdir(parents=True, exist_ok=True)
    if args.floor:
        return floor_main(w, args.runs, args.json)
    plain = cs.build("plain")
    print(f"## Peers: LLVM 22 on CPython {cs.VERSION} from source, `python -c \"{bp.IMPORTS}\"`, selective, "
          f"read_ahead_kb {bp.RA_KB}\n", flush=True)
    libs, cost = peer_variants()
    bl, bc, notes = bolt_variants(w)
    el, ec = elflayout_variants(w, libs["lld-22 default"])
    libs |= bl | el
    cost |= bc | ec
    want = cs.same_output(libs["lld-22 default"].parent)
    variants = {n: (lib, bp.variant_cmd(lib.parent, cs.workload(), cs.ENV)) for n, lib in libs.items()}
    summ = bp.summarise(bp.measure(w / "peers.results.json", variants, args.runs), dict(libs))
    print("| variant | pages read | seeks | file size (MB) | time to produce (s) | peak memory (MiB) | "
          "output identical |")
    print("|---|---:|---:|---:|---:|---:|---|")
    rows = {}
    for n, lib in libs.items():
        same = cs.same_output(lib.parent) == want
        print(row(n, lib, summ.get(n), cost[n], same))
        rows[n] = {"lib": str(lib), "summary": summ.get(n), "size": lib.stat().st_size, "cost": cost[n],
                   "identical": same}
    print(f"\nEvery row but BOLT's relinks the objects of one compile (configure + make: "
          f"{plain['cost']['seconds']:,.0f} s, peak {plain['cost']['peak_mib']:,} MiB), not counted in its row; "
          "the temporal and BP rows count their own instrumented compile. † includes steps cached by an "
          "earlier run: their cost as recorded when they were made.")
    return finish(notes, rows, args.json)


if __name__ == "__main__":
    sys.exit(main())
