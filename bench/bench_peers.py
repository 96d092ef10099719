#!/usr/bin/env python3
"""Peers side by side: libLLVM-16, ``llc-16 --version``, selective cold start.

    python3 bench/bench_peers.py [--runs 3] [--json OUT]
    python3 bench/bench_peers.py --llvm22 [--runs 3] [--json OUT]   (bench_peers_llvm22.py:
        LLVM 22's peers on CPython 3.11.2 built from source with clang-22 and lld-22)

One interleaved ``elflayout measure`` session (same counter for all: page-cache
insertions of the library, read_ahead_kb 128, the library alone evicted) over:

- Debian's library (measured through a byte-identical copy, which no other process maps);
- lld default: the library relinked from LLVM 16's archives (``elflayout.targets.libllvm``);
- lld ``-z pack-relative-relocs`` (RELR; Debian's lld 16, as Debian 12's default lld 14
  predates the option and glibc refuses its ``--pack-dyn-relocs=relr`` output);
- lld ``--call-graph-ordering-file`` (C3; Ottoni and Maher, CGO 2017) from a callgrind
  profile of the same startup (``elflayout.order.callgraph``), with and without RELR;
- BOLT (Debian's ``bolt-16``; Panchenko et al., "BOLT: A Practical Binary Optimizer for
  Data Centers and Beyond", CGO 2019): an ``--emit-relocs`` lld link instrumented
  (``llvm-bolt -instrument``), the instrumented library run once under the same
  startup, then optimised from that profile with ``BOLT_OPTS``; with RELR two ways: BOLT
  on lld's ``-z pack-relative-relocs`` link, and ``elflayout pack-relocs`` on BOLT's
  output (``bolt_variants``). The profile and BOLT's outputs are cached under the
  elflayout cache (``bolt/``), with what producing them cost;
- elflayout's best: order (hot-last, data script, .dynstr names) from a valgrind
  profile of the default relink, relinked, relocations packed.

Per variant: pages read (median of --runs), seeks, file size, time and peak memory of
the steps that produce it in this run (``cached`` when the relink came from the cache),
and whether ``llc-16 --version`` prints the same as with Debian's library.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

import bench_pipeline as bp  # noqa: E402

from elflayout.errors import ElflayoutError  # noqa: E402
from elflayout.fileio import atomic_write_text  # noqa: E402
from elflayout.order import callgraph  # noqa: E402
from elflayout.targets import cache_dir  # noqa: E402
from elflayout.targets import libllvm  # noqa: E402

PY = sys.executable
# Debian 12's default lld is 14, which lacks `-z pack-relative-relocs` (lld 15+), and its
# --pack-dyn-relocs=relr output is refused by glibc 2.36 ("DT_RELR without
# GLIBC_ABI_DT_RELR dependency"): RELR links use Debian's lld 16 (package lld-16; gcc
# finds its ld.lld through -B).
LLD16_DIR = "/usr/lib/llvm-16/bin"
RELR_ARGS = [f"-B{LLD16_DIR}", "-Wl,-z,pack-relative-relocs"]
# Debian's llvm-bolt-16/perf2bolt-16 symlinks misbehave (the tool derives its mode from
# argv[0]): call the binaries in LLVM 16's own directory.
BOLT = Path("/usr/lib/llvm-16/bin/llvm-bolt")
# hfsort+ function order (Ottoni and Maher, CGO 2017), ext-TSP block order (Newell and
# Pupyrev, "Improved Basic Block Reordering", IEEE TC 2020), hot/cold splitting;
# -split-all-cold moves every cold block out, -dyno-stats prints what changed.
BOLT_OPTS = ["-reorder-functions=hfsort+", "-reorder-blocks=ext-tsp", "-split-functions", "-split-all-cold",
             "-dyno-stats"]
BOLT_STEPS = ["BOLT: --emit-relocs link", "BOLT: instrument", "BOLT: instrumented run", "BOLT: optimise"]
EMIT_RELOCS = ["-Wl,--emit-relocs"]  # BOLT's relocation mode (moving functions) needs them


class Step:
    """Wall time and peak RSS of the child processes run inside a block (the peak of any
    one child: ru_maxrss of RUSAGE_CHILDREN, read in a fresh process per step)."""

    def __init__(self, what: str, log: dict):
        self.what, self.log = what, log

    def run(self, argv, env=None, **kw):
        code = ("import resource, subprocess, sys, json; r = subprocess.run(sys.argv[1:]); "
                "print(json.dumps([r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]), "
                "file=sys.stderr)")
        t0 = time.monotonic()
        r = subprocess.run([PY, "-c", code, *map(str, argv)], env=env, stdout=kw.pop("stdout", subprocess.PIPE),
                           stderr=subprocess.PIPE, text=True, **kw)
        dt = time.monotonic() - t0
        rc, rss = json.loads(r.stderr.strip().splitlines()[-1])
        if rc != 0:
            raise SystemExit(f"{self.what}: {' '.join(map(str, argv))} failed ({rc}):\n{r.stderr[-2000:]}")
        e = self.log.setdefault(self.what, {"seconds": 0.0, "peak_mib": 0.0})
        e["seconds"] += dt
        e["peak_mib"] = max(e["peak_mib"], rss / 1024)
        return r


def timed_relink(name: str, log: dict, **kw) -> dict:
    """libllvm.relink("lld", **kw) in a fresh process, so the peak RSS of its children
    (the linker) is this link's alone; a relink served from the cache costs nothing."""
    code = ("import json, resource, sys; from elflayout.targets import libllvm; "
            "d = libllvm.relink('lld', **json.loads(sys.argv[1])); "
            "print(json.dumps([str(d['lib']), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    t0 = time.monotonic()
    r = subprocess.run([PY, "-c", code, json.dumps(kw)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "tools")))
    if r.returncode != 0:
        raise SystemExit(f"{name}: relink failed:\n{r.stderr[-2000:]}")
    dt = time.monotonic() - t0
    lib, rss = json.loads(r.stdout.strip().splitlines()[-1])
    cached = rss == 0 or dt < 20
    log[name] = {"seconds": 0.0 if cached else dt, "peak_mib": None if cached else rss / 1024, "cached": cached}
    return {"lib": lib, "map": lib + ".map"}


def callgrind_order(base: dict, w: Path, log: dict, argv: list) -> Path:
    out = w / "llc.callgrind.out"
    cg = w / "llc.callgraph.txt"
    # run every time (not cached), so the table's time to produce is this run's
    env = dict(os.environ, LD_LIBRARY_PATH=str(Path(base["lib"]).parent))
    Step("C3: callgrind profile", log).run([*callgraph.callgrind_command(out), *argv], env=env,
                                           stdout=subprocess.DEVNULL)
    rep = callgraph.from_callgrind(out, base["lib"], cg)
    print(f"  callgrind: {rep['edges']:,} call edges ({rep['calls']:,} calls) inside {Path(base['lib']).name}",
          flush=True)
    return bp.hashed_copy(cg)


def elflayout_best(base: dict, w: Path, log: dict, argv: list) -> Path:
    prof = w / "llc.profile.json"
    st = Step("elflayout: profile + order + pack", log)
    st.run([PY, "-m", "elflayout", "profile", "--target", base["lib"], "--map", base["map"], "--data", "--env",
            f"LD_LIBRARY_PATH={Path(base['lib']).parent}", "-o", prof, "--force", "--", *argv],
           env=dict(os.environ, PYTHONPATH=str(ROOT / "tools")), stdout=subprocess.DEVNULL)
    tmp = {k: w / f"best.{k}" for k in ("lld", "ld", "rsp")}
    st.run([PY, "-m", "elflayout", "order", prof, "--format", "lld", "--lib", base["lib"], "--algorithm", "hot-last",
            "--data-script", tmp["ld"], "--dynstr-out", tmp["rsp"], "-o", tmp["lld"], "--force"],
           env=dict(os.environ, PYTHONPATH=str(ROOT / "tools")))
    h = {k: bp.hashed_copy(v) for k, v in tmp.items()}
    full = timed_relink("elflayout: relink", log, extra_link_args=[
        f"--symbol-ordering-file={h['lld']}", "--no-warn-symbol-ordering", f"-Wl,-T,{h['ld']}", f"-Wl,@{h['rsp']}"])
    t0 = time.monotonic()
    packed = bp.pack(Path(full["lib"]), w / "libs" / "best-packed")
    log["elflayout: profile + order + pack"]["seconds"] += time.monotonic() - t0
    return packed


def time_v(argv, log: Path, env=None) -> dict:
    """Run ``argv`` under GNU time -v; its output (and time's report) goes to ``log``.
    Returns rc, seconds, peak MiB and, on failure, the error lines."""
    t0 = time.monotonic()
    with open(log, "w") as f:
        r = subprocess.run(["/usr/bin/time", "-v", *map(str, argv)], stdout=f, stderr=subprocess.STDOUT, env=env)
    text = log.read_text(errors="replace")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    rec = {"argv": [str(a) for a in argv], "rc": r.returncode, "seconds": round(time.monotonic() - t0, 1),
           "peak_mib": round(int(peak.group(1)) / 1024) if peak else None}
    if r.returncode:
        errs = [ln for ln in text.splitlines() if "ERROR" in ln or "error" in ln.lower()]
        body = text.split("\tCommand being timed")[0].strip().splitlines()
        rec["error"] = (errs or body or [f"exit {r.returncode}"])[-3:]
    return rec


def bolt_step(d: Path, argv, outputs, env=None, before=None) -> dict:
    """One BOLT step, cached in directory ``d`` with its record (command, seconds, peak
    MiB): later runs reuse the outputs and show the cost paid when they were made. A
    failed step is recorded in the run's log and retried next time."""
    from elflayout.targets import locked

    d.mkdir(parents=True, exist_ok=True)
    rec_path = d / "record.json"
    with locked(d.parent / f".{d.name}.lock"):
        if rec_path.exists() and all((d / o).exists() for o in outputs):
            return json.loads(rec_path.read_text()) | {"cached": True}
        if before:
            before()
        rec = time_v(argv, d / "log.txt", env)
        missing = [o for o in outputs if not (d / o).exists()]
        if not rec["rc"] and missing:
            rec["rc"], rec["error"] = -1, [f"no {missing[0]} written (log: {d / 'log.txt'})"]
        if not rec["rc"]:
            atomic_write_text(rec_path, json.dumps(rec, indent=1))
    return rec | {"cached": False}


def _cost(rec: dict) -> str:
    peak = "?" if rec.get("peak_mib") is None else f"{rec['peak_mib']:,}"
    return f"{rec['seconds']} s, peak {peak} MiB{', cached' if rec.get('cached') else ''}"


def _failed(step: str, rec: dict) -> str:
    """The note printed instead of a row: exit status, cost, command, error lines."""
    return (f"{step} FAILED (exit {rec['rc']}, {_cost(rec)}): `{' '.join(rec['argv'])}`: "
            + " / ".join(rec.get("error", [])))


def bolt_optimise(lib: Path, data: Path, log: dict, step: str, notes: list) -> Path | None:
    """BOLT_OPTS on ``lib`` from profile ``data`` (cached by library, profile and options);
    the result checked with ``libllvm.verify``. None (and a note saying why) on failure."""
    root = cache_dir("bolt", bp.file_sha(lib)[:16])
    key = hashlib.sha256(json.dumps([bp.file_sha(data), BOLT_OPTS]).encode()).hexdigest()[:12]
    od = root / f"opt-{key}"
    rec = bolt_step(od, [BOLT, lib, "-o", od / lib.name, f"-data={data}", *BOLT_OPTS], [lib.name])
    log[step] = rec
    if rec["rc"]:
        notes.append(_failed(step, rec))
        return None
    notes.append(f"{step}: `{' '.join(rec['argv'])}` ({_cost(rec)})")
    try:
        libllvm.verify(od)
        notes.append(f"{step}: llc-16 and opt-16 -O2 outputs identical to Debian's library's (targets.libllvm.verify)")
    except ElflayoutError as e:
        notes.append(f"{step}: {e}")
    return od / lib.name


def bolt_variants(w: Path, log: dict, argv: list) -> tuple[dict, list[str]]:
    """BOLT's rows: {name: lib} and notes (the exact commands, any failure). An
    ``--emit-relocs`` relink is instrumented, run once under ``argv`` (the profile),
    then optimised with BOLT_OPTS. RELR both ways: lld's ``-z pack-relative-relocs``
    on the ``--emit-relocs`` link BOLT optimises (with the same profile: the code is
    the same), and ``elflayout pack-relocs`` on BOLT's output."""
    emit = timed_relink("BOLT: --emit-relocs link", log, extra_link_args=EMIT_RELOCS)
    lib = Path(emit["lib"])
    root = cache_dir("bolt", bp.file_sha(lib)[:16])
    notes = [f"BOLT input: `{lib}` (lld, `{' '.join(EMIT_RELOCS)}`)"]
    out: dict = {}

    def failed(step: str, rec: dict) -> tuple[dict, list[str]]:
        notes.append(_failed(step, rec))
        return out, notes

    # fdata only names the file the instrumented library writes (baked into it)
    fdata = root / "instr" / "prof.fdata"
    ins = bolt_step(root / "instr", [BOLT, lib, "-instrument", f"-instrumentation-file={fdata}", "-o",
                                     root / "instr" / lib.name], [lib.name])
    log["BOLT: instrument"] = ins
    if ins["rc"]:
        return failed("BOLT: instrument", ins)
    notes.append(f"BOLT: instrument: `{' '.join(ins['argv'])}` ({_cost(ins)})" +
                 (f"; {ins['note']}" if ins.get("note") else ""))
    # the profile's path is baked into the instrumented library: take it from its command
    fdata = Path(next(a.split("=", 1)[1] for a in ins["argv"] if a.startswith("-instrumentation-file=")))
    run_dir = root / ("profile-" + hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:12])
    prof = bolt_step(run_dir, [*argv], [], env=dict(os.environ, LD_LIBRARY_PATH=str(root / "instr")),
                     before=lambda: fdata.unlink(missing_ok=True))
    if not prof["rc"] and not prof.get("cached"):
        if not fdata.exists():
            prof |= {"rc": -1, "error": [f"the instrumented run wrote no {fdata}"]}
            (run_dir / "record.json").unlink(missing_ok=True)
        else:
            shutil.copyfile(fdata, run_dir / "prof.fdata")
    log["BOLT: instrumented run"] = prof
    if prof["rc"] or not (run_dir / "prof.fdata").exists():
        return failed("BOLT: instrumented run", prof)
    data = run_dir / "prof.fdata"
    notes.append(f"BOLT: profile: `LD_LIBRARY_PATH={root / 'instr'} {' '.join(argv)}` ({_cost(prof)})")
    bolted = bolt_optimise(lib, data, log, "BOLT: optimise", notes)
    if bolted is None:
        return out, notes
    out["BOLT (instrumented, hfsort+, ext-tsp, split)"] = bolted
    relr = timed_relink("BOLT: --emit-relocs RELR link", log, extra_link_args=[*EMIT_RELOCS, *RELR_ARGS])
    lld_relr = bolt_optimise(Path(relr["lib"]), data, log, "BOLT: optimise the RELR link", notes)
    if lld_relr is not None:
        out["BOLT on an lld RELR link"] = lld_relr
    t0 = time.monotonic()
    try:
        out["BOLT, then pack-relocs"] = bp.pack(bolted, w / "libs" / "bolt-relr")
        log["BOLT: pack-relocs"] = {"seconds": time.monotonic() - t0, "peak_mib": None}
        notes.append("BOLT, then pack-relocs: `elflayout pack-relocs` on BOLT's output "
                     "(bench_pipeline.pack: --check, or llc/opt output compared)")
    except Exception as e:  # noqa: BLE001 - the bench prints why instead of a row
        notes.append(f"BOLT, then pack-relocs: FAILED: {e}")
    return out, notes


def same_output(lib_dir: Path | None, argv: list, want: str) -> bool:
    env = dict(os.environ)
    if lib_dir is not None:
        env["LD_LIBRARY_PATH"] = str(lib_dir)
    return subprocess.run(argv, capture_output=True, text=True, env=env).stdout == want


def main() -> int:
    if "--llvm22" in sys.argv[1:]:
        import bench_peers_llvm22

        return bench_peers_llvm22.main([a for a in sys.argv[1:] if a != "--llvm22"])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    w = bp.work_dir() / "peers"
    (w / "libs").mkdir(parents=True, exist_ok=True)
    sysd = libllvm.system()
    argv = [str(sysd["llc"]), "--version"]
    log: dict = {}
    print(f"## Peers: libLLVM-16, `{' '.join(argv)}`, selective, read_ahead_kb {bp.RA_KB}\n", flush=True)
    base = timed_relink("lld default", log)
    relr = timed_relink("lld RELR", log, extra_link_args=RELR_ARGS)
    cg = callgrind_order(base, w, log, argv)
    c3 = timed_relink("lld C3", log, extra_link_args=[f"--call-graph-ordering-file={cg}"])
    c3r = timed_relink("lld C3 + RELR", log, extra_link_args=[f"--call-graph-ordering-file={cg}", *RELR_ARGS])
    best = elflayout_best(base, w, log, argv)
    bolt, bolt_notes = bolt_variants(w, log, argv)
    copy = w / "libs" / "system-copy" / Path(sysd["lib"]).name
    copy.parent.mkdir(parents=True, exist_ok=True)
    if not copy.exists() or bp.file_sha(copy) != bp.file_sha(Path(sysd["lib"])):
        shutil.copyfile(sysd["lib"], copy)
    libs = {"Debian's library": copy, "lld default": Path(base["lib"]), "lld RELR": Path(relr["lib"]),
            "lld C3 (callgrind)": Path(c3["lib"]), "lld C3 + RELR": Path(c3r["lib"]),
            **bolt, "elflayout best (ordered + packed)": best}
    want = subprocess.run(argv, capture_output=True, text=True).stdout
    variants = {n: (lib, bp.variant_cmd(lib.parent, argv, {})) for n, lib in libs.items()}
    summ = bp.summarise(bp.measure(w / "peers.results.json", variants, args.runs), {n: v[0] for n, v in variants.items()})
    cost = {"lld default": ["lld default"], "lld RELR": ["lld RELR"], "lld C3 (callgrind)": ["C3: callgrind profile", "lld C3"],
            "lld C3 + RELR": ["C3: callgrind profile", "lld C3 + RELR"],
            "elflayout best (ordered + packed)": ["elflayout: profile + order + pack", "elflayout: relink"],
            "BOLT (instrumented, hfsort+, ext-tsp, split)": BOLT_STEPS,
            "BOLT on an lld RELR link": [*BOLT_STEPS[:3], "BOLT: --emit-relocs RELR link",
                                         "BOLT: optimise the RELR link"],
            "BOLT, then pack-relocs": [*BOLT_STEPS, "BOLT: pack-relocs"]}
    print("| variant | pages read | seeks | file size (MB) | time to produce (s) | peak memory (MiB) | output identical |")
    print("|---|---:|---:|---:|---:|---:|---|")
    rows = {}
    for n, lib in libs.items():
        s = summ.get(n)
        steps = [log[k] for k in cost.get(n, []) if k in log]
        secs = sum(e["seconds"] for e in steps) if steps else None
        # a cached link's cost was paid by an earlier run and not recorded: show what this
        # run measured, say so; a cached BOLT step keeps the cost recorded when it was made (†)
        cached = any(e.get("cached") and not e.get("argv") for e in steps)
        dagger = "†" if any(e.get("cached") and e.get("argv") for e in steps) else ""
        peak = max((e["peak_mib"] or 0) for e in steps) if steps else None
        tp = "—" if secs is None else (f"{secs:,.0f}{dagger}" + (" + link (cached)" if cached else ""))
        pm = "—" if not peak or (cached and len(steps) == 1) else (
            f"{peak:,.0f}{dagger}" + (" + link (cached)" if cached else ""))
        ident = same_output(lib.parent, argv, want)
        pages = "disturbed" if not s else f"{s['pages']:,.0f}"
        seeks = "—" if not s else f"{s['seeks']:,.0f}"
        print(f"| {n} | {pages} | {seeks} | {lib.stat().st_size / 1e6:,.1f} | {tp} | {pm} | {'yes' if ident else 'NO'} |")
        rows[n] = {"lib": str(lib), "summary": s, "size": lib.stat().st_size, "produce": steps, "identical": ident}
    print("\n† includes BOLT steps cached by an earlier run of this bench: their time and peak memory are "
          "as recorded (GNU time -v) when they were made.")
    return finish(bolt_notes, rows, args.json)


def finish(notes: list[str], rows: dict, json_out: str | None) -> int:
    """The lines under a peers table (notes, the wall-time note); the rows as JSON to ``json_out``."""
    for n in notes:
        print(f"- {n}")
    print(bp.NOTE_WALL)
    if json_out:
        Path(json_out).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
