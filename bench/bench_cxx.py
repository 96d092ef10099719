#!/usr/bin/env python3
"""Function order for a C++ runtime relinked from its PIC archive, with lld, gold and GNU ld.

libstdc++.so.6 relinked from Debian's ``libstdc++_pic.a`` (libstdc++-12-pic: 178
objects, -ffunction-sections, many sections in COMDAT groups; the demangler's
cp-demangle.o keeps its code in one plain ``.text``), ``targets.libstdcxx``:

1. the lld relink is profiled with valgrind (``elflayout profile --data``) running
   ``cxxstart`` (iostream, locale, regex, stringstream, exceptions thrown inside the
   library, a demangled type name, filesystem);
2. for each linker, the unordered relink, and the relink by ``elflayout link`` (the
   default ordering of each linker: lld symbol file, gold section file, GNU ld script)
   with and without ``--split``; ``link``'s exit status and its order check are printed
   (and its post-link steps: the code tail, the ``.dynstr`` rewrite of gold and GNU ld),
   and ``check-order`` with the link map says why what is out of order is;
3. pages read from the library, selective (library evicted), read_ahead_kb 128, one
   interleaved measure session (``--runs`` rounds; page counts are deterministic).

Goal: gold and GNU ld cut pages about as much as lld (ordered pages within 5% of lld's).

``--setup nostdlib-pic``: the library linked as a new user links it, the way libstdc++'s
own build does (``g++ -shared -nostdlib`` with the crt files named, no compat object,
``targets.libstdcxx``), profiled as a new user first profiles it (the lld relink, no
``--map``) running its own workload ``cxxwords`` (regex, locale, sstream, map); per
linker the unordered relink and the one by ``elflayout link`` (its defaults), side by side.

Usage: python3 bench/bench_cxx.py [--runs N] [--skip-measure] [--setup nodefaultlibs|nostdlib-pic]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

import bench_pipeline as bp  # noqa: E402

LINKERS = ("lld", "gold", "bfd")


def relink_ordered(prof: Path, linker: str, split: bool, dest: Path, setup: str = "nodefaultlibs") -> dict:
    """``elflayout link`` of libstdc++.so.6 into ``dest``; its exit status and check lines."""
    from elflayout.targets import libstdcxx

    dest.mkdir(parents=True, exist_ok=True)
    cmd = libstdcxx.link_command(linker, dest, setup=setup)
    r = bp.cli("link", *(["--split"] if split else []), "--profile", prof, "--linker", linker,
               "--keep-order-file", dest / "order", "--force", "--", *cmd, check=False)
    check = [ln.removeprefix("elflayout: check: ") for ln in r.stderr.splitlines() if ln.startswith("elflayout: check: ")]
    for ln in r.stderr.splitlines():  # the post-link rewrites gold and GNU ld depend on
        if ln.startswith(("elflayout: link: .dynstr rewrite: ", "elflayout: link: code tail: ")):
            print("    " + ln.removeprefix("elflayout: link: "), flush=True)
    last = (r.stderr.strip().splitlines() or [""])[-1]
    if r.returncode not in (0, 1) or not (dest / libstdcxx.SONAME).exists():
        raise SystemExit(f"bench_cxx: elflayout link --linker {linker} failed (exit {r.returncode}): {last}")
    return {"lib": dest / libstdcxx.SONAME, "map": dest / f"{libstdcxx.SONAME}.map", "exit": r.returncode,
            "check": check, "message": last if r.returncode else "", "order": dest / "order"}


def why(prof: Path, d: dict) -> dict:
    """check-order with the relink's map and ordering file (library call)."""
    from elflayout.order.check import check, ordered_sections_of
    from elflayout.profile import model

    t = model.load(prof).targets[0]
    secs = ordered_sections_of(d["order"].read_text()) if d.get("order") and d["order"].exists() else set()
    return check(d["lib"], t, lib_map=d["map"], ordered_sections=secs or None)


def profile(w: Path, base: dict, setup: str) -> Path:
    """The workload's profile of the lld relink: with its map and data (nodefaultlibs),
    or as a new user first records it, without --map (nostdlib-pic)."""
    out = w / f"{Path(base['launcher']).name}.profile.json"
    extra = ["--map", base["map"], "--data"] if setup == "nodefaultlibs" else []
    return bp.cached_profile(out, base["lib"], ["profile", "--target", base["lib"], *extra, "-o", out, "--force",
                                                "--", base["launcher"]], data=setup == "nodefaultlibs")


def relinks(w: Path, prof: Path, setup: str) -> tuple[dict, dict]:
    """Per linker the unordered relink and the ordered ones: libraries and link checks."""
    from elflayout.targets import libstdcxx

    splits = (False, True) if setup == "nodefaultlibs" else (False,)
    libs, checks = {}, {}
    for lk in LINKERS:
        print(f"  relink: targets.libstdcxx.prepare({lk!r}, setup={setup!r})", flush=True)
        d = libstdcxx.prepare(lk, setup=setup)
        libs[f"{lk} unordered"] = d["lib"]
        checks[f"{lk} unordered"] = {"lib": d["lib"], "map": d["map"], "exit": None, "check": [], "message": ""}
        for split in splits:
            name = f"{lk} {'split+' if split else ''}ordered"
            checks[name] = relink_ordered(prof, lk, split, w / "libs" / name.replace(" ", "-").replace("+", "-"), setup)
            libs[name] = checks[name]["lib"]
    return libs, checks


def print_checks(prof: Path, checks: dict) -> None:
    print("\n**Order check** (`elflayout link`'s exit status; check-order with the relink's map and ordering file)\n")
    print("| variant | link exit | in profile order | touched code span (KB) | out of order / not placed, by reason |")
    print("|---|---:|---:|---:|---|")
    for name, d in checks.items():
        res = why(prof, d)
        reasons = ", ".join(f"{r['count']} {k}" for k, r in res["reasons"].items()) or "—"
        frac = res["in_order_fraction"]
        print(f"| {name} | {'—' if d['exit'] is None else d['exit']} | {100 * frac:.1f}% | "
              f"{res['span_bytes'] / 1024:,.0f} | {reasons} |")
    for name, d in checks.items():
        if d["exit"]:
            print(f"\n  {name}: {d['message']}")


def print_pages(pg: dict, kinds: tuple) -> None:
    """Per linker: unordered, then each ordered kind with its change and its gap to lld."""
    head = "".join(f" {k} | change | {k} vs lld |" for k in kinds)
    print(f"| linker | unordered |{head}")
    print("|---|---:|" + "---:|---:|---:|" * len(kinds))
    for lk in LINKERS:
        u = pg[f"{lk} unordered"]
        cells = "".join(f" {pg[f'{lk} {k}']:,.0f} | {100 * (pg[f'{lk} {k}'] / u - 1):+.1f}% | "
                        f"{100 * (pg[f'{lk} {k}'] / pg[f'lld {k}'] - 1):+.1f}% |" for k in kinds)
        print(f"| {lk} | {u:,.0f} |{cells}")
    for kind in kinds:
        worst = max(pg[f"{lk} {kind}"] / pg[f"lld {kind}"] - 1 for lk in ("gold", "bfd"))
        print(f"\nGoal, {kind}: gold and GNU ld read at most 5% more pages than lld: "
              f"{'met' if worst <= 0.05 else 'NOT met'} (worst {100 * worst:+.1f}%)")


def main(argv=None) -> int:
    from elflayout.targets import libstdcxx

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="rounds of measure (default 3)")
    ap.add_argument("--skip-measure", action="store_true", help="links and order checks only")
    ap.add_argument("--setup", choices=libstdcxx.SETUPS, default="nodefaultlibs",
                    help="how the library is linked and profiled (default nodefaultlibs)")
    a = ap.parse_args(argv)
    from elflayout.tracefs import tracefs_status

    measure = not a.skip_measure
    reason = tracefs_status() or (None if os.geteuid() == 0 else "not root")
    if measure and reason:
        print(f"bench_cxx: measuring skipped: needs root and tracefs ({reason})")
        measure = False
    shown = argv if argv is not None else sys.argv[1:]
    print(f"# bench_cxx   (python3 bench/bench_cxx.py {shlex.join(shown)})")
    print(f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n", flush=True)
    t0 = time.monotonic()
    w = bp.work_dir() / ("cxx" if a.setup == "nodefaultlibs" else f"cxx-{a.setup}")
    w.mkdir(parents=True, exist_ok=True)
    base = libstdcxx.prepare("lld", setup=a.setup)
    prof = profile(w, base, a.setup)
    libs, checks = relinks(w, prof, a.setup)
    print_checks(prof, checks)
    if measure:
        argv0 = [str(base["launcher"])]
        variants = {n: (lib, bp.variant_cmd(lib.parent, argv0, {})) for n, lib in libs.items()}
        doc = bp.measure(w / "cxx.results.json", variants, a.runs)
        summ = bp.summarise(doc, libs)
        print(f"\n**Pages read from libstdc++.so.6** ({Path(argv0[0]).name}, selective, read_ahead_kb 128, "
              f"median of {a.runs})\n")
        kinds = ("ordered", "split+ordered") if a.setup == "nodefaultlibs" else ("ordered",)
        print_pages({n: (s or {}).get("pages") for n, s in summ.items()}, kinds)
        print(bp.determinism_note([(n, summ.get(n)) for n in libs]))
    print(f"\nbench_cxx: {time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
