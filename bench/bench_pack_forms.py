#!/usr/bin/env python3
"""The two packed forms side by side: pages read at a selectively-cold start, relr vs self.

Debian 11's libLLVM-11 and libpython3.9 (from the root made by scripts/bullseye-root.sh)
are packed in both forms (relr: DT_RELR, applied by ld.so; self: the self-applying DT_INIT
routine); Debian 11's llc-11 compiles a small IR file, and a libpython3.9 launcher runs a
small program, on this machine (glibc 2.36 applies both forms) through each copy and
through the original. Before each run only the library is
evicted (measure.cache.evict); pages added to the page cache for it are counted with
tracefs (filemap:mm_filemap_add_to_page_cache), read_ahead_kb 128 (restored afterwards).
Runs are interleaved in a seeded shuffled order. Target: self within 2% of relr.

Run:  python3 bench/bench_pack_forms.py [--runs 5]   (root, tracefs)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import numpy as np  # noqa: E402

from elflayout.measure.cache import evict, expand  # noqa: E402
from elflayout.relocs.pack import pack  # noqa: E402
from elflayout.tracefs import TraceSession, file_key, tracefs_status  # noqa: E402

RA = Path("/sys/block/vda/queue/read_ahead_kb")
RA_KB = 128
LIB = "usr/lib/x86_64-linux-gnu/libLLVM-11.so.1"
IR = "define i32 @f(i32 %x) {\n  %y = mul i32 %x, 7\n  ret i32 %y\n}\n"
HOST_LIBDIRS = (Path("/usr/lib/x86_64-linux-gnu"), Path("/lib/x86_64-linux-gnu"))


def deps_dir(root: Path, lib: Path, d: Path) -> Path:
    """Links to the root's copies of the library's dependencies this machine lacks (libffi.so.7)."""
    out = d / "deps"
    out.mkdir()
    r = subprocess.run(["readelf", "-dW", str(lib)], capture_output=True, text=True, check=True)
    for line in r.stdout.splitlines():
        if "(NEEDED)" in line:
            name = line.split("[", 1)[1].rstrip("]")
            if not any((h / name).exists() for h in HOST_LIBDIRS):
                (out / name).symlink_to(root / "usr/lib/x86_64-linux-gnu" / name)
    return out


def one_run(lib: Path, libdir: Path, argv, deps: Path, env_extra: dict) -> int:
    ev = evict(lib)
    env = dict(os.environ, LD_LIBRARY_PATH=f"{libdir}:{deps}", **env_extra)
    with TraceSession([lib], kinds=("add",)) as ts:
        subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
    e = ts.result.of(file_key(lib), "add")
    if ev["left"]:
        print(f"  note: {ev['left']} pages of {lib} stayed resident ({ev['why']})", file=sys.stderr)
    return int(np.unique(expand(e["page"], e["npages"])).size) if e.size else 0


PROG = "import sys, json, decimal; print(sys.version_info[:2], json.dumps([str(decimal.Decimal(1) / 7)]))"


def measure_target(root: Path, lib_rel: str, argv_for, env_extra: dict, runs: int, seed: int, d: Path) -> dict:
    """Pack one library of the root in both forms and count pages read by its program."""
    src = root / lib_rel
    (d / "original").mkdir()  # a directory of its own: not the root's, whose libc would be picked
    shutil.copy2(src, d / "original" / src.name)
    variants = {"original": d / "original" / src.name}
    for form in ("relr", "self"):
        (d / form).mkdir()
        st = pack(src, d / form / src.name, form=form)
        variants[form] = d / form / src.name
        print(f"# {src.name} {form}: {st['packed']:,} of {st['relative']:,} RELATIVE packed, table "
              f"{st['relr_bytes']:,} bytes, .rela.dyn {st['rela_dyn_bytes_before']:,} -> "
              f"{st['rela_dyn_bytes_after']:,} bytes")
    deps = deps_dir(root, src, d)
    argv = argv_for(d)
    outs = {v: subprocess.run(argv, capture_output=True, check=True,
                              env=dict(os.environ, LD_LIBRARY_PATH=f"{p.parent}:{deps}", **env_extra)).stdout
            for v, p in variants.items()}
    print(f"# {src.name}: program output identical across variants: {len(set(outs.values())) == 1}")
    rng = random.Random(seed)
    order = [v for _ in range(runs) for v in rng.sample(list(variants), len(variants))]
    res = {v: [] for v in variants}
    for v in order:
        res[v].append(one_run(variants[v], variants[v].parent, argv, deps, env_extra))
    return res


@contextlib.contextmanager
def readahead_session():
    """The machine-wide measurement lock (other sessions set read_ahead_kb and evict too),
    read_ahead_kb RA_KB while held; yields the value found, restored afterwards."""
    from elflayout.controls import MeasurementLock

    with MeasurementLock(on_wait=lambda who: print(f"# waiting for the measurement lock ({who})", file=sys.stderr)):
        old = RA.read_text().strip()
        try:
            RA.write_text(str(RA_KB))
            yield old
        finally:
            RA.write_text(old)


def parse_args(doc: str) -> argparse.Namespace:
    """--runs (per variant) and --seed (of the interleaved order)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    return ap.parse_args()


def main() -> int:
    a = parse_args(__doc__)
    why = tracefs_status()
    if why:
        print(f"skipped: {why}")
        return 0
    root = Path(subprocess.run([str(ROOT / "scripts/bullseye-root.sh")], capture_output=True, text=True,
                               check=True).stdout.split()[-1])
    sys.path.insert(0, str(ROOT / "tests"))
    from oldglibc_root import python_launcher  # the launcher the tests use (links the root's libc)

    launcher = root / python_launcher(root).lstrip("/")
    targets = [
        ("usr/lib/x86_64-linux-gnu/libLLVM-11.so.1",
         lambda d: (d / "t.ll").write_text(IR) and [str(root / "usr/bin/llc-11"), "-O2", str(d / "t.ll"), "-o", "-"],
         {}),
        ("usr/lib/x86_64-linux-gnu/libpython3.9.so.1.0", lambda d: [str(launcher), "-c", PROG],
         {"PYTHONHOME": str(root / "usr")}),
    ]
    results = {}
    with readahead_session() as old:
        for lib_rel, argv_for, env_extra in targets:
            with tempfile.TemporaryDirectory(prefix="elflayout-forms-") as d:
                results[Path(lib_rel).name] = measure_target(root, lib_rel, argv_for, env_extra, a.runs, a.seed, Path(d))
    for name, res in results.items():
        print(f"## pages of {name} (Debian 11 build) read at a selectively-cold start of its program on this "
              f"machine, read_ahead_kb {RA_KB} (restored to {old})")
        print_pages(res, "original", "; target within 2%")
    return 0


def print_pages(res: dict, base: str, note: str = "") -> None:
    """Per variant its page counts and median, then self vs relr and both vs ``base``."""
    med = {v: statistics.median(x) for v, x in res.items()}
    for v, x in res.items():
        print(f"  {v:<9} pages {' '.join(f'{n:,}' for n in x)} (median {med[v]:,.0f})")
    r = med["self"] / med["relr"]
    print(f"  self/relr: {med['self']:,.0f}/{med['relr']:,.0f} = {r:.4f} ({(r - 1):+.2%}{note})")
    print(f"  relr/{base}: {med['relr'] / med[base]:.3f}; self/{base}: {med['self'] / med[base]:.3f}")


if __name__ == "__main__":
    sys.exit(main())
