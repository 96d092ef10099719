#!/usr/bin/env python3
"""Case study: a browser-class application, Debian's Chromium or Firefox ESR (prints figures).

    python3 bench/bench_chromium.py [--target chromium|firefox] [--runs 10] [--out DIR]

Workload (chromium): ``chromium --headless --no-sandbox --screenshot`` of a one-line page
with a fresh ``--user-data-dir`` per run (a wrapper script makes and removes it). Several
processes (browser, zygotes, renderer, GPU, crashpad), ~150 files read, a 297 MB
stripped main binary. Workload (firefox): ``firefox-esr --headless --screenshot`` of the
same page with a fresh ``--profile`` per run: browser and content processes, more than
a trace event filter holds of files under test, libxul.so (184 MB) the biggest. Steps,
all through the library (``measure.session``) or the CLI:

1. census + selective + hot, interleaved (``measure.session``): files other programs map
   (libc, libstdc++, ...) stay warm and are listed; the selective row must exist for
   >= 90% of runs on a machine where other programs run;
2. per-file pages: median and spread per file, grouped into the application's own files
   (under /usr/lib/chromium) and system files;
3. an independent check: under the same conditions (the measurement lock held,
   read_ahead_kb 128 on the files' device), the files under test evicted, ``--check-runs``
   more runs of the workload outside the harness, each followed by util-linux ``fincore``
   (page-cache residency by mincore, not our code) per file, against the session's
   per-file medians;
4. what a layout change could save in the biggest file: pages read against pages its
   processes faulted on (the touched set; read-ahead and fault-around bring the rest);
5. a trace profile with ``--children`` of the main binary, the access-pattern plot of
   the biggest file and the HTML report.

6. with ``--valgrind``: a valgrind profile (``--data``) of the browser process alone
   (``--single-process``, so the renderer runs in it; no ``--children``) and its static
   initializers with their pages and time (``inspect --initializers --profile``). Costs
   ~2 minutes and ~1 GiB of RAM (about 90x the native start-up).

Needs root (tracefs, eviction) and chromium or firefox-esr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from _common import cache_dir, cli, measure  # noqa: E402
from elflayout.controls import ControlSet, MeasurementLock, ReadAhead  # noqa: E402
from elflayout.measure import cache, session  # noqa: E402
from elflayout import results as model  # noqa: E402

PAGE_HTML = "data:text/html,<h1>x</h1>"


@dataclasses.dataclass(frozen=True)
class Target:
    name: str  # the variant's name and the prefix of every output file
    exe: str  # the program on PATH
    app_dir: str  # the application's own files
    start: str  # shell command line of one start-up; "$d": its fresh profile directory


TARGETS = {
    "chromium": Target("chromium", "chromium", "/usr/lib/chromium",
                       f"chromium --headless --no-sandbox --user-data-dir=\"$d\" --screenshot=\"$d/x.png\" '{PAGE_HTML}'"),
    "firefox": Target("firefox", "firefox-esr", "/usr/lib/firefox-esr",
                      f"firefox-esr --headless --no-remote --profile \"$d\" --screenshot \"$d/x.png\" '{PAGE_HTML}'"),
}
APP = TARGETS["chromium"]  # the target of this run (main() sets it)


def work_dir(out: str | None) -> Path:
    if not out:
        return cache_dir(f"bench-{APP.name}")
    Path(out).mkdir(parents=True, exist_ok=True)
    return Path(out)


def wrapper(w: Path) -> Path:
    """The workload: a fresh profile directory per run, removed afterwards."""
    sh = w / f"{APP.name}-screenshot.sh"
    sh.write_text("#!/bin/sh\n"
                  f"d=$(mktemp -d {w}/profile.XXXXXX)\n"
                  f"{APP.start}"
                  f" >/dev/null 2>\"$d/stderr\"\nrc=$?\n"
                  # a crash (seen once in ~40 runs: SIGSEGV) keeps its stderr for a look
                  f"[ $rc -eq 0 ] || cp \"$d/stderr\" {w}/crash-stderr.txt\n"
                  "rm -rf \"$d\"\nexit $rc\n")
    sh.chmod(0o755)
    return sh


def fincore_pages(path: str) -> int | None:
    if not shutil.which("fincore"):
        return None
    r = subprocess.run(["fincore", "--raw", "--noheadings", "-o", "PAGES", path], capture_output=True, text=True)
    return int(r.stdout.split()[0]) if r.returncode == 0 and r.stdout.strip() else None


def census_and_runs(sh: Path, runs: int, res_path: Path, under: list[str]):
    """Step 1: the measurement session: its results, their metadata and the undisturbed
    selective runs."""
    print(f"1. census + selective + hot, {runs} rounds: {sh}")
    t = time.monotonic()
    doc = measure(session.MeasurePlan(variants=[(APP.name, str(sh))], states=["selective", "hot"], runs=runs,
                                      seed=1, census_under=under), res_path)
    res = model.parse(doc, str(res_path))
    md = res.metadata
    sel = [r for r in res.runs if r.state == "selective"]
    clean = res.cell(APP.name, "selective")
    print(f"  ({time.monotonic() - t:.0f} s; waited {md['lock']['waited_s']:.0f} s for the measurement lock)")
    print(f"  selective runs with a figure: {len(clean)}/{len(sel)} ({100 * len(clean) / len(sel):.0f}%); "
          f"repeated attempts: {sum(r.attempts - 1 for r in res.runs)}")
    for r in sel:
        if r.disturbed:
            print(f"    disturbed run {r.seq}: {r.interference}")
    left = md["census_left_out"]
    print(f"  census: {len(md['files'])} files under test, {len(left)} left warm:")
    why: dict[str, int] = {}
    for f in left:
        key = f["why"].split(":")[0]
        why[key] = why.get(key, 0) + 1
    for k, n in sorted(why.items(), key=lambda kv: -kv[1]):
        print(f"    {n:>3} {k}")
    return res, md, clean


def pages_per_file(res, md) -> tuple[dict, float]:
    """Step 2: pages read per file: {file: spread over the selective runs} and their total."""
    print("2. pages read per file (selective, undisturbed runs): median [min, max]")
    spread = {s["file"]: s for s in md["spread"] if s["state"] == "selective"}
    app = f"application ({APP.app_dir})"
    groups = {app: 0.0, "system and other": 0.0}
    for f, s in sorted(spread.items(), key=lambda kv: -kv[1]["median"]):
        g = app if f.startswith(APP.app_dir + "/") else "system and other"
        groups[g] += s["median"]
    for f, s in sorted(spread.items(), key=lambda kv: -kv[1]["median"])[:12]:
        print(f"  {s['median']:>9,.0f} [{s['min']:,}, {s['max']:,}]{'' if s['identical'] else ' varies'}  {f}")
    total = sum(groups.values())
    for g, n in groups.items():
        print(f"  {g}: {n:,.0f} pages ({100 * n / total:.1f}%)")
    ident = sum(s["identical"] for s in spread.values())
    print(f"  files read identically in every run: {ident}/{len(spread)}; the others vary (multi-process start-up)")
    hot = [r.pages_read for r in res.cell(APP.name, "hot")]
    print(f"  hot runs still read {statistics.median(hot):,.0f} pages (median; range {min(hot):,}..{max(hot):,}): "
          f"parts of files no earlier run needed")
    return spread, total


def fincore_check(sh: Path, md, spread: dict, total: float, runs: int = 3) -> dict[str, list[int]]:
    """Step 3: runs outside the harness under its conditions (measurement lock, the
    session's read_ahead_kb), their pages counted by util-linux fincore; returns the
    counts per file."""
    print(f"3. independent check: lock held, read_ahead_kb {md['read_ahead_kb']}, files evicted, {runs} run(s) of the "
          f"workload outside the harness, util-linux fincore after each")
    got: dict[str, list[int]] = {}
    if fincore_pages("/etc/hostname") is None:
        print("  skipped: fincore not available")
        return got
    files = list(md["files"])
    with contextlib.ExitStack() as stack:
        stack.enter_context(MeasurementLock())
        ra = ReadAhead(files[0], md["read_ahead_kb"])
        stack.enter_context(ControlSet([ra]))
        for _ in range(runs):
            for f in files:
                cache.evict(f, verify=False)
            subprocess.run([str(sh)], check=True)
            changed = ra.check()  # another process changed the read-ahead: this run does not count
            for f in spread:
                n = fincore_pages(f)
                if n is not None and not changed:
                    got.setdefault(f, []).append(n)
            if changed:
                print(f"    run left out: {changed}")
    rows = []
    for f, s in spread.items():
        if got.get(f) and s["median"]:
            m = statistics.median(got[f])
            rows.append((f, s, m, abs(m - s["median"]) / s["median"]))
    within = [x for x in rows if x[3] <= 0.03 or x[1]["min"] <= x[2] <= x[1]["max"]]
    pages_in = sum(x[1]["median"] for x in within)
    print(f"  files whose fincore count (median of the runs) is within 3% of the session's median (or inside its "
          f"range): {len(within)}/{len(rows)}, holding {100 * pages_in / total:.1f}% of the pages")
    big = max(spread, key=lambda f: spread[f]["median"])
    for f, s, m, d in [x for x in rows if x[0] == big] + [x for x in sorted(rows, key=lambda x: -x[3])[:5]
                                                          if x[0] != big]:
        print(f"    {f}: fincore {m:,.0f} {got[f]}, session median {s['median']:,.0f} [{s['min']:,}, {s['max']:,}] "
              f"({100 * (m - s['median']) / s['median']:+.1f}%)")
    return got


def biggest_file(md, spread: dict, clean) -> str:
    """Step 4: pages read vs pages faulted in the biggest file; returns its path."""
    big = max(spread, key=lambda f: spread[f]["median"])
    print(f"4. the biggest file, {big}: pages read vs pages faulted (what a layout could reach)")
    mid = sorted(clean, key=lambda r: r.files[big].pages_read)[len(clean) // 2].files[big]
    touched = len({int(p) for _, p in mid.faults})
    print(f"  read {mid.pages_read:,} pages ({mid.pages_read * 4096 / 2**20:.0f} MiB) at read_ahead_kb "
          f"{md['read_ahead_kb']}; faulted on {touched:,} distinct pages ({100 * touched / mid.pages_read:.1f}% of what "
          f"was read); seeks {mid.seeks}")
    by = model.pages_by_section(md["files"][big].get("sections", []), model.run_pages(mid.reads))
    print("  by section: " + ", ".join(f"{k} {v:,}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])[:6]))
    r = cli("inspect", "--json", big, check=False)
    rel = (json.loads(r.stdout).get("relocations") or {}).get("relative") if r.returncode == 0 else None
    if rel and rel["count"]:
        print(f"  packing its {rel['count']:,} relative relocations into an optimal RELR table would save "
              f"{rel['saved_bytes']:,} bytes of relocation tables ({rel['saved_bytes'] // 4096:,} pages; "
              f"{by.get('.rela.dyn', 0):,} pages of .rela.dyn were read)")
    return big


def profile_and_report(w: Path, sh: Path, big: str, res_path: Path) -> None:
    """Step 5: a trace profile with --children, the access plot and the report."""
    print("5. trace profile with --children, plot, report")
    prof = w / f"{APP.name}.profile.json"
    r = cli("profile", "--backend", "trace", "--children", "--evict", "--read-ahead-kb", 128, "--target", big,
            "-o", prof, "--force", "--", str(sh), check=False)
    if r.returncode == 0:
        p = json.loads(prof.read_text())
        t0 = p["targets"][0]
        print(f"  profile: {len(t0['pages']):,} pages faulted in first-fault order, {len(t0['functions']):,} functions "
              f"named (the binary is stripped: names need its debug file)")
    cli("plot", res_path, "--file", big, "-o", w / f"{APP.name}-access.png", "--force", check=False)
    inputs = [res_path] + ([prof] if prof.exists() else [])
    cli("report", *inputs, "-o", w / f"{APP.name}-report.html", "--force", check=False)


def valgrind_profile(w: Path, big: str) -> None:
    """Step 6: a valgrind profile of the browser process and its static initializers."""
    print("6. valgrind profile of the browser process (--single-process), static initializers")
    ud = w / "vg-profile"
    shutil.rmtree(ud, ignore_errors=True)
    vg = w / "chromium.valgrind.json"
    cli("profile", "--backend", "valgrind", "--data", "--target", big, "-o", vg, "--force", "--", big,
        "--headless", "--no-sandbox", "--single-process", "--disable-gpu", f"--user-data-dir={ud}",
        f"--screenshot={ud}/x.png", PAGE_HTML)
    print(cli("inspect", "--initializers", big, "--profile", vg).stdout, end="")
    cli("report", vg, "-o", w / "chromium-valgrind-report.html", "--force", check=False)
    shutil.rmtree(ud, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=sorted(TARGETS), default="chromium", help="the browser (default chromium)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--check-runs", type=int, default=3, help="runs of the independent fincore check (default 3)")
    ap.add_argument("--census-under", action="append", default=[], metavar="DIR",
                    help="measure only the files under DIR (e.g. the application's own directory: the system's "
                         "libraries stay warm, as other programs on the machine use them too)")
    ap.add_argument("--out", help="output directory (default: the elflayout cache's bench-TARGET)")
    ap.add_argument("--valgrind", action="store_true",
                    help="chromium: also step 6, a valgrind profile (~2 min, ~1 GiB)")
    a = ap.parse_args(argv)
    global APP
    APP = TARGETS[a.target]
    if not shutil.which(APP.exe):
        print(f"skipped: {APP.exe} is not installed")
        return 0
    w = work_dir(a.out)
    sh = wrapper(w)
    res_path = w / f"{APP.name}.results.json"

    res, md, clean = census_and_runs(sh, a.runs, res_path, a.census_under)
    spread, total = pages_per_file(res, md)
    fincore_check(sh, md, spread, total, a.check_runs)
    big = biggest_file(md, spread, clean)
    profile_and_report(w, sh, big, res_path)
    if a.valgrind and APP.name == "chromium":
        valgrind_profile(w, big)
    print(f"  outputs in {w}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
