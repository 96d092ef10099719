#!/usr/bin/env python3
"""Case study: a browser-class application, Debian's Chromium or Firefox ESR (prints figures).

    python3 bench/bench_chromium.py [--target chromium|firefox] [--runs 10] [--out DIR] [--pack | --pack-only]
                                    [--pack-format relr|self]

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

7. chromium, with ``--pack`` (or ``--pack-only``): the executable packed by
   ``pack-relocs --check`` (wall time and peak memory) into a copy of its directory, the
   screenshot compared with the original's byte for byte, then original (a copy in a
   directory of its own) and packed measured selectively cold, interleaved: pages read
   from the executable and in total.

Needs root (tracefs, eviction) and chromium or firefox-esr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from _common import AS_NOBODY, cache_dir, cli, measure, show_cmd, unprivileged_python  # noqa: E402
from elflayout.controls import ControlSet, MeasurementLock, ReadAhead  # noqa: E402
from elflayout.measure import cache, isolate, session  # noqa: E402
from elflayout import results as model  # noqa: E402

PAGE_HTML = "data:text/html,<h1>x</h1>"
NOBODY = pwd.getpwnam("nobody")


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
APP_DIR = TARGETS["chromium"].app_dir  # step 7 packs Chromium's executable


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


def exe_wrapper(w: Path, exe: Path, name: str) -> Path:
    """The workload run straight from ``exe`` (no /usr/bin/chromium launcher script), for
    the original and the packed executable alike."""
    sh = w / f"chromium-{name}.sh"
    sh.write_text("#!/bin/sh\n"
                  f"d=$(mktemp -d {w}/profile.XXXXXX)\n"
                  f"{exe} --headless --no-sandbox --user-data-dir=\"$d\" --screenshot=\"$d/x.png\" '{PAGE_HTML}'"
                  f" >/dev/null 2>\"$d/stderr\"\nrc=$?\nrm -rf \"$d\"\nexit $rc\n")
    sh.chmod(0o755)
    return sh


def screenshot(w: Path, exe: Path, png: Path) -> bytes:
    d = Path(tempfile.mkdtemp(prefix="profile.", dir=w))
    try:
        subprocess.run([str(exe), "--headless", "--no-sandbox", f"--user-data-dir={d}", f"--screenshot={png}",
                        PAGE_HTML], capture_output=True, timeout=300, check=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return png.read_bytes()


def app_copy(w: Path, name: str) -> Path:
    """A directory like Chromium's: links to its files, but for the executable."""
    app = w / name
    shutil.rmtree(app, ignore_errors=True)
    app.mkdir()
    for f in Path(APP_DIR).iterdir():
        if f.name != "chromium":
            (app / f.name).symlink_to(f)
    return app


def pack_executable(w: Path, form: str = "relr") -> tuple[Path, Path]:
    """Step 7a: pack-relocs --check of the executable (time, peak memory) into a copy of
    its directory (links to the other files); the screenshot must be identical. Returns
    (original, packed): the original copied into a directory of its own too, so that
    both are measured cold even while other programs run /usr/lib/chromium/chromium
    (the census leaves files other processes map warm). ``form``: pack-relocs --format."""
    exe = Path(APP_DIR) / "chromium"
    orig = app_copy(w, "original-app") / exe.name
    shutil.copyfile(exe, orig)
    orig.chmod(0o755)
    out = app_copy(w, "packed-app" if form == "relr" else f"packed-app-{form}") / exe.name
    print(f"7. pack-relocs --format {form} --check of {exe} into {out.parent}")
    t = time.monotonic()
    r = subprocess.run(["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "elflayout", "pack-relocs", str(exe),
                        "-o", str(out), "--format", form, "--check", "--json"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "tools")))
    if r.returncode:
        raise SystemExit(f"bench_chromium: pack-relocs failed: {r.stderr.strip()[-500:]}")
    wall, kb = r.stderr.strip().splitlines()[-1].split()
    st = json.loads(r.stdout)
    print(f"  $ elflayout pack-relocs {exe} -o {out} --format {form} --check   ({time.monotonic() - t:.1f} s)")
    print(f"  {float(wall):.1f} s wall, {int(kb) / 2**20:.2f} GiB peak RSS; .rela.dyn "
          f"{st['rela_dyn_bytes_before']:,} -> {st['rela_dyn_bytes_after']:,} bytes, RELR {st['relr_bytes']:,} bytes; "
          f"{st['cut']['pages']:,} freed pages cut; real start: {st['check']['real_load']}")
    same = screenshot(w, exe, w / "original.png") == screenshot(w, out, w / "packed.png")
    print(f"  screenshot of {PAGE_HTML!r}: {'identical' if same else 'DIFFERENT'} "
          f"({(w / 'original.png').stat().st_size:,} bytes)")
    if not same:
        raise SystemExit("bench_chromium: the packed executable's screenshot differs")
    return orig, out


def measure_packed(w: Path, original: Path, packed: Path, runs: int) -> None:
    """Step 7b: original and packed executable, selectively cold, interleaved: pages read
    from the executable and in total (median [min, max] over the undisturbed runs)."""
    exe = str(original)
    plan = session.MeasurePlan(variants=[("original", str(exe_wrapper(w, original, "original"))),
                                         ("packed", str(exe_wrapper(w, packed, "packed")))],
                               states=["selective"], runs=runs, seed=1)
    res_path = w / "chromium-packed.results.json"
    for attempt in range(3):
        other_chromium_gone()
        res = model.parse(measure(plan, res_path), str(res_path))
        warm = [f["path"] for f in res.metadata["census_left_out"] if f["path"] in (exe, str(packed))]
        if not warm:
            break
        print(f"  left warm by the census (another process maps it): {', '.join(warm)}; measuring again")
    else:
        raise SystemExit("bench_chromium: another process kept the executable mapped in 3 sessions")
    report_packed(res, exe, str(packed))


def report_packed(res, original: str, packed: str) -> None:
    """Pages read from the executable and in total, per variant: median [min, max] over
    the runs no other process disturbed in the executable (a run disturbed only in a
    shared system library, which other programs on the machine read meanwhile, still
    measures the executable; its total is shown apart)."""
    med = {}
    for name, path in (("original", original), ("packed", packed)):
        rows = [r for r in res.cell(name, "selective", clean=False) if not r.disturbed_for(path)]
        if not rows:
            print(f"  {name}: no run undisturbed in the executable")
            return
        own = [r.files[path].pages_read if path in r.files else 0 for r in rows]
        tot = [r.pages_read for r in rows]
        med[name] = (statistics.median(own), statistics.median(tot))
        other = sum(1 for r in rows if r.disturbed)
        print(f"  {name:<8} executable {med[name][0]:>8,.0f} pages [{min(own):,}, {max(own):,}]   "
              f"all files {med[name][1]:>8,.0f} [{min(tot):,}, {max(tot):,}]   ({len(rows)} runs"
              + (f"; {other} disturbed in other files" if other else "") + ")")
    d_exe, d_tot = (med["original"][i] - med["packed"][i] for i in (0, 1))
    print(f"  packed reads {d_exe:,.0f} fewer pages from the executable ({100 * d_exe / med['original'][0]:.1f}%), "
          f"{d_tot:,.0f} fewer in total")


def other_chromium_gone(limit_s: float = 900) -> None:
    """Wait while another Chromium runs: the census leaves files other processes map
    warm, and the executable would not be measured cold."""
    t = time.monotonic()
    while subprocess.run(["pgrep", "-x", "chromium"], capture_output=True).returncode == 0:
        if time.monotonic() - t > limit_s:
            raise SystemExit("bench_chromium: another chromium kept running for 15 minutes")
        time.sleep(5)


def fincore_pages(path: str) -> int | None:
    if not shutil.which("fincore"):
        return None
    r = subprocess.run(["fincore", "--raw", "--noheadings", "-o", "PAGES", path], capture_output=True, text=True)
    return int(r.stdout.split()[0]) if r.returncode == 0 and r.stdout.strip() else None


def census_and_runs(sh: Path, runs: int, res_path: Path, under: list[str], isolate: bool = False):
    """Step 1: the measurement session: its results, their metadata and the undisturbed
    selective runs."""
    print(f"1. census + selective + hot, {runs} rounds" + (", isolated" if isolate else "") + f": {sh}")
    t = time.monotonic()
    doc = measure(session.MeasurePlan(variants=[(APP.name, str(sh))], states=["selective", "hot"], runs=runs,
                                      seed=1, census_under=under, isolate=isolate), res_path)
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
    session's read_ahead_kb; an isolated session's files served from a private device
    again), their pages counted by util-linux fincore; returns the counts per file."""
    iso = md.get("isolation")
    print(f"3. independent check: lock held, read_ahead_kb {md['read_ahead_kb']}, files evicted"
          + (", served from a private loop device as in the session" if iso else "")
          + f", {runs} run(s) of the workload outside the harness, util-linux fincore after each")
    got: dict[str, list[int]] = {}
    if fincore_pages("/etc/hostname") is None:
        print("  skipped: fincore not available")
        return got
    files = list(md["files"])
    with contextlib.ExitStack() as stack:
        stack.enter_context(MeasurementLock())
        if iso:  # this thread's private mount namespace: the workload and fincore see the copies
            stack.enter_context(isolate.Isolation(files))
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


def rootless_copy(base: Path) -> tuple[Path, list[str]]:
    """A copy of the application's directory owned by user nobody (the kernel shows
    page-cache residency only to a user who could write the file), its start-up script
    (HOME and the profile in a fresh directory nobody owns) and its regular files."""
    app = base / "app"
    shutil.copytree(APP.app_dir, app, symlinks=True)
    (base / "profiles").mkdir()
    sh = base / "start.sh"
    sh.write_text("#!/bin/sh\n"
                  f"d=$(mktemp -d {base}/profiles/p.XXXXXX)\nexport HOME=\"$d\"\n"
                  f"{app}/{APP.exe}{APP.start[len(APP.exe):]} >/dev/null 2>\"$d/stderr\"\nrc=$?\n"
                  "rm -rf \"$d\"\nexit $rc\n")
    sh.chmod(0o755)
    for q in [base, *base.rglob("*")]:
        os.lchown(q, NOBODY.pw_uid, NOBODY.pw_gid)
    return sh, sorted(str(q) for q in app.rglob("*") if q.is_file() and not q.is_symlink())


def method_counts(path: Path, files: list[str]) -> dict:
    """{file or 'total': [pages read per undisturbed selective run]} of one session."""
    res = model.read(path)
    out: dict[str, list[int]] = {}
    for r in res.cell(APP.name, "selective"):
        for f in files:
            out.setdefault(f, []).append(r.files[f].pages_read if f in r.files else 0)
        out.setdefault("total", []).append(r.pages_read)
    return out


def rootless_compare(w: Path, runs: int, blocks: int = 2) -> None:
    """Step 8 (--rootless): the page-cache tracepoint (``measure`` as root) and the
    rootless method (``measure`` as user nobody: residency by cachestat or mincore) on
    the same copy of the application, started by user nobody in both, at the disk's own
    read_ahead_kb (nobody cannot set it), in alternating sessions of runs/blocks runs
    each; per file, the rootless median against the range of the traced runs."""
    py = unprivileged_python()
    if py is None:
        print("8. rootless vs tracefs: skipped (no Python with numpy/scipy/rich runnable by user nobody)")
        return
    base = Path(tempfile.mkdtemp(prefix=f"elflayout-{APP.name}-rootless-", dir="/var/tmp"))
    try:
        sh, files = rootless_copy(base)
        print(f"8. rootless (user nobody) vs tracefs (root), {APP.name} started by nobody from a copy nobody owns "
              f"({len(files)} files), selective, the disk's read_ahead_kb, {blocks} x ({runs // blocks} traced + "
              f"{runs // blocks} rootless runs), alternating")
        # the traced runs start the application as nobody too: as root Chromium skips its
        # Vulkan fallback (libvk_swiftshader, libvulkan: 1,430 pages), a different start-up
        as_nobody = " ".join(AS_NOBODY)
        common = ["--files", *files, "--state", "selective", "--census", "none", "--runs", str(runs // blocks),
                  "--quiet", "--force"]
        got = {"trace": {}, "rootless": {}}
        for b in range(blocks):
            for how in ("trace", "rootless"):
                out = base / f"{how}{b}.json"
                args = ["--name", APP.name, f"{as_nobody} {sh}" if how == "trace" else str(sh), *common,
                        "--seed", str(b), "-o", str(out)]
                if how == "trace":
                    cli("measure", *args, "--read-ahead-kb", "-1", check=False)
                else:
                    print(f"  $ {' '.join(AS_NOBODY)} {show_cmd(['measure', *args])}", flush=True)
                    r = subprocess.run([*py, "-m", "elflayout", "measure", *args], capture_output=True, text=True,
                                       cwd="/")
                    note = next((ln for ln in r.stderr.splitlines() if "without root" in ln), None)
                    if note and b == 0:
                        print(f"    {note.strip()}")
                    if r.returncode not in (0, 1):
                        raise SystemExit(f"bench_chromium: rootless measure failed: {r.stderr.strip()[-400:]}")
                if out.exists():
                    shutil.copyfile(out, w / f"{APP.name}-{how}{b}.results.json")
                    for f, xs in method_counts(out, files).items():
                        got[how].setdefault(f, []).extend(xs)
        report_rootless(got, files, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def report_rootless(got: dict, files: list[str], base: Path) -> None:
    """Per file read by the start-up: traced median [min, max], rootless median [min, max],
    and whether the rootless median lies in the traced range."""
    tr, rl = got["trace"], got["rootless"]
    if not tr.get("total") or not rl.get("total"):
        print(f"  no usable runs: trace {len(tr.get('total', []))}, rootless {len(rl.get('total', []))}")
        return
    print(f"  usable runs: trace {len(tr['total'])}, rootless {len(rl['total'])}")
    inside = 0
    rows = [f for f in files if statistics.median(tr[f]) or statistics.median(rl[f])] + ["total"]
    for f in sorted(rows, key=lambda f: -statistics.median(tr[f])):
        t, r = tr[f], rl[f]
        mt, mr = statistics.median(t), statistics.median(r)
        ok = min(t) <= mr <= max(t)
        inside += ok and f != "total"
        name = os.path.relpath(f, base / "app") if f != "total" else "all files"
        print(f"  {name:<40} trace {mt:>9,.0f} [{min(t):,}, {max(t):,}]   rootless {mr:>9,.0f} [{min(r):,}, "
              f"{max(r):,}]   {100 * (mr - mt) / mt if mt else 0:+.2f}%   {'within' if ok else 'OUTSIDE'} the "
              f"traced range")
    print(f"  files whose rootless median lies within the traced runs' range: {inside}/{len(rows) - 1}")


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
    ap.add_argument("--pack", action="store_true",
                    help="chromium: also step 7, the executable packed (pack-relocs --check), screenshot compared, "
                         "original and packed measured selectively cold")
    ap.add_argument("--pack-only", action="store_true", help="chromium: step 7 alone")
    ap.add_argument("--rootless", action="store_true",
                    help="step 8 alone: the rootless method (user nobody, cachestat/mincore) and the page-cache "
                         "tracepoint on a copy owned by nobody, alternating sessions of --runs runs in all each")
    ap.add_argument("--isolate", action="store_true",
                    help="step 1 with measure --isolate: the files the census finds served from a private loop "
                         "device (other processes cannot read, evict or change the read-ahead of them)")
    ap.add_argument("--pack-format", choices=("relr", "self"), default="relr",
                    help="chromium, step 7: the packed form (self: the routine runs as DT_PREINIT_ARRAY; any glibc)")
    a = ap.parse_args(argv)
    global APP
    APP = TARGETS[a.target]
    if not shutil.which(APP.exe):
        print(f"skipped: {APP.exe} is not installed")
        return 0
    w = work_dir(a.out)
    if (a.pack or a.pack_only) and APP.name == "chromium":
        original, packed = pack_executable(w, a.pack_format)
        measure_packed(w, original, packed, a.runs)
        if a.pack_only:
            return 0
    if a.rootless:
        rootless_compare(w, a.runs)
        return 0
    sh = wrapper(w)
    res_path = w / f"{APP.name}{'-isolated' if a.isolate else ''}.results.json"

    res, md, clean = census_and_runs(sh, a.runs, res_path, a.census_under, a.isolate)
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
