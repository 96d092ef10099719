#!/usr/bin/env python3
"""Accuracy of ``elflayout simulate``: predicted against measured pages read at a cold start.

    python3 bench/bench_simulate.py [--runs N] [--sections] [--json OUT]

For each benchmark library with a cached build (``elflayout.order.accuracy``: libLLVM-16
relinked from LLVM 16's archives, ``llc-16 --version``; libpython3.11 from Debian's objects
split, ``import json, decimal, asyncio, re``; libcrypto.so.3 split, ``openssl dgst``; and,
held out (no model change was tuned on them), libpython3.11 built from CPython's sources with
clang-22 and libzstd built by CMake (unordered only)), the build its valgrind profile was
recorded on (unordered) and the newest cached ordered relink: ``simulate PROFILE --lib LIB [--map LIB.map] --read-ahead-kb 128``
against the pages measured (``measure.session``, selective state: the library alone
evicted, read_ahead_kb 128 set and restored, page-cache insertions counted with tracefs;
page counts are exact, so --runs 1 suffices). ``--sections``: predicted and measured
pages by section for each layout, largest differences first.
Builds are not made here: bench_pipeline.py (libLLVM, libpython, libcrypto, libzstd) and
bench_peers_llvm22.py (CPython from source) make and cache them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from _common import cache_root  # noqa: E402
from elflayout.order import accuracy  # noqa: E402

RA_KB = 128


def measure(case: accuracy.Case, runs: int) -> dict:
    """Median pages read of the case's library over ``runs`` selective-cold runs, and by section."""
    from elflayout import results as model
    from elflayout.measure import session

    cmd = session.command(list(case.argv), case.env) + " >/dev/null"
    doc = session.measure(session.MeasurePlan(variants=[("v", cmd)], states=["selective"], runs=runs,
                                              files=[case.lib], read_ahead_kb=RA_KB, census="none", seed=1,
                                              retries=4))
    res = model.parse(doc, case.lib)
    clean = sorted(res.cell("v", "selective"), key=lambda r: r.files[case.lib].pages_read)
    if not clean:
        raise SystemExit(f"{case.lib}: every run disturbed")
    mid = clean[len(clean) // 2].files[case.lib]
    return {"pages": mid.pages_read,
            "by_section": model.pages_by_section(res.files[case.lib]["sections"], model.run_pages(mid.reads))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--sections", action="store_true", help="print pages by section, predicted vs measured")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    from elflayout.tracefs import tracefs_status

    why = tracefs_status()
    if why:
        print(f"skipped: {why}")
        return 0
    cases = accuracy.cached_cases(cache_root())
    print(f"simulate vs measured, selective cold, read_ahead_kb {RA_KB}, {a.runs} run(s) each")
    print("| Library | Layout | Predicted | Measured | Error |\n|---|---|---|---|---|")
    out = []
    for c in cases:
        sim = accuracy.predict(c, RA_KB)
        m = measure(c, a.runs)
        err = accuracy.error_pct(sim["pages"], m["pages"])
        print(f"| {c.library} | {c.layout} | {sim['pages']:,} | {m['pages']:,} | {err:+.1f}% |", flush=True)
        out.append({"library": c.library, "layout": c.layout, "lib": c.lib, "profile": c.profile,
                    "predicted": sim["pages"], "measured": m["pages"], "error_pct": round(err, 2),
                    "sections": accuracy.section_rows(sim["by_section"], m["by_section"])})
    if a.sections:
        for r in out:
            print(f"\n{r['library']}, {r['layout']} (`{r['lib']}`), largest differences:\n")
            print("| Section | Predicted | Measured | Difference |\n|---|---|---|---|")
            for name, p, m, d in r["sections"][:6]:
                print(f"| {name} | {p:,} | {m:,} | {d:+,} |")
    print("\nCommand per row: `elflayout simulate PROFILE --lib LIB [--map LIB.map] --read-ahead-kb 128 "
          "(the map for the ordered build)`")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
