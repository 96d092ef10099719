#!/usr/bin/env python3
"""Startup preloading: cold-start time with and without a preload plan, per storage preset.

Target: Debian's unmodified libLLVM-16 (``llc-16 --version``), and optionally the
profile-ordered + relocation-packed relink of it (``--relink``). For each library:

1. *input*: one ``elflayout measure`` session (``measure.session.measure``) of the
   selectively cold start, served through an emulated disk with no delay (preset
   ``none``: the same pages as any preset, read-ahead 128 KiB), gives the pages read;
2. *plan*: ``preload.plan.make_plan`` for each preset (the gap rule depends on it);
3. *A/B*: one measure session per preset, variants ``as-is``, ``preload`` (the C
   launcher, pread, before exec) and ``preload-bg`` (the launcher's background mode),
   selective and hot, interleaved; the library's directory is served by
   ``elflayout.storage`` (FUSE) and the plan's paths are mapped onto the mount
   (``--map``). ``host`` = no emulation: the development machine's host-cached disk.

Figures: median wall time per variant, the ratio preload/as-is with its 95% BCa interval
(measure's statistics), pages read (the plan's reads included). Last, the launcher's
hot-start overhead: ``/bin/true`` directly vs through the launcher with the libLLVM plan
(all cached), and through the LD_AUDIT library.

    python3 bench/bench_preload.py [--runs 5] [--presets hdd,emmc,sata-ssd,host] [--relink] [--methods] [--chromium]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from _common import cache_dir  # noqa: E402
from elflayout import fileio  # noqa: E402
from elflayout import results as results_model  # noqa: E402
from elflayout.measure.session import MeasurePlan, measure  # noqa: E402
from elflayout.order import pipeline  # noqa: E402
from elflayout.preload import inputs, model, plan, runner  # noqa: E402

SYSTEM_LIB = Path("/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1")
CMD = "llc-16 --version"


def work_dir() -> Path:
    return cache_dir("bench-preload")


def private_copy(lib: Path, name: str) -> Path:
    """A byte-identical copy, alone in a directory (what the storage mount serves). A copy,
    not a hard link: any running llc-16 or opt-16 maps the system library, which
    defeats its eviction on the host-cached disk; copy2 keeps the mtime."""
    d = work_dir() / name
    d.mkdir(exist_ok=True)
    dst = d / lib.name
    st = lib.stat()
    if not (dst.exists() and dst.stat().st_size == st.st_size and dst.stat().st_mtime_ns == st.st_mtime_ns):
        tmp = d / f".{lib.name}.tmp"
        shutil.copy2(lib, tmp)
        os.replace(tmp, dst)
    return dst


def session(out: Path, variants: list[tuple[str, str]], lib: Path, storage: str | None, states, runs: int,
            seed: int = 1) -> results_model.Results:
    mp = MeasurePlan(variants=variants, states=list(states), runs=runs, files=[str(lib)], census="none",
                     storage=storage, retries=4, seed=seed,
                     argv=["bench_preload.py", "(measure.session.measure)", f"storage={storage}"])
    t = time.monotonic()
    doc = measure(mp, on_event=lambda k, i: print(f"    waiting for {i['waiting_for']}", flush=True)
                  if k == "lock" else None)
    fileio.dump_json(doc, out)
    print(f"    ({len(doc['runs'])} runs in {time.monotonic() - t:.0f} s; {out})", flush=True)
    return results_model.parse(doc, str(out))


def make_plans(lib: Path, tag: str, presets: list[str]) -> dict[str, Path]:
    res = work_dir() / f"{tag}.input.results.json"
    print(f"  input: measure {CMD!r}, selective, 2 runs, storage none -> {res}", flush=True)
    session(res, [("as-is", CMD)], lib, "none", ["selective"], 2)
    ins = inputs.load([str(res)])
    plans = {}
    for p in presets:
        pl = plan.make_plan(ins, "none" if p == "host" else p, argv=["bench_preload.py"])
        out = work_dir() / f"{tag}.{p}.plan.json"
        model.save(pl, out)
        t = pl.metadata["totals"]
        print(f"  plan for {p}: {t['ranges']} ranges, {t['bytes'] / 1e6:.1f} MB ({t['needed_pages']:,} needed + "
              f"{t['gap_pages']:,} gap pages), modelled read {pl.metadata['modelled_read_s'] * 1e3:.0f} ms",
              flush=True)
        plans[p] = model.text_path(out)
    return plans


def cell(res, variant, state, metric="wall_s"):
    """Median of a metric over the clean runs of variant x state (``model.Results``)."""
    vals = res.values(variant, state, metric)
    return statistics.median(vals) if vals else float("nan")


def comparison(res, b, state, metric="wall_s"):
    for c in res.comparisons:
        if c["b"] == b and c["state"] == state and c["metric"] == metric:
            return c
    return None


def fmt_ratio(c) -> str:
    if not c or c.get("ratio") is None:
        return "n/a"
    lo, hi = c.get("ci_low"), c.get("ci_high")
    ci = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
    return f"{c['ratio']:.3f}{ci}"


def ab(lib: Path, tag: str, plans: dict, presets: list[str], runs: int) -> list[dict]:
    launcher, _ = runner.binaries()
    rows = []
    for p in presets:
        storage = None if p == "host" else p
        target = "{mount}" if storage else str(lib.parent)
        pre = f"{shlex.quote(str(launcher))} --map {shlex.quote(str(lib.parent))}={target} {plans[p]} -- {CMD}"
        variants = [("as-is", CMD), ("preload", pre),
                    ("preload-bg", pre.replace(" --map ", " --background --map ", 1))]
        if not storage:  # with a mount, measure puts it first in LD_LIBRARY_PATH
            variants = [(n, f"LD_LIBRARY_PATH={lib.parent} {c}") for n, c in variants]
        print(f"  A/B on {p}: {runs} rounds x (selective, hot) x {len(variants)} variants", flush=True)
        doc = session(work_dir() / f"{tag}.{p}.results.json", variants, lib, storage, ["selective", "hot"], runs)
        row = {"preset": p, "doc": doc}
        for v, _ in variants:
            row[v] = (cell(doc, v, "selective") * 1e3, cell(doc, v, "selective", "pages_read"),
                      cell(doc, v, "hot") * 1e3)
        row["ratio"] = comparison(doc, "preload", "selective")
        row["ratio_bg"] = comparison(doc, "preload-bg", "selective")
        row["ratio_hot"] = comparison(doc, "preload", "hot")
        rows.append(row)
        print(f"    as-is {row['as-is'][0]:,.0f} ms, preload {row['preload'][0]:,.0f} ms "
              f"(ratio {fmt_ratio(row['ratio'])}), preload-bg {row['preload-bg'][0]:,.0f} ms", flush=True)
    return rows


def table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    hdr = (f"{'storage':<9} {'as-is ms':>9} {'preload ms':>10} {'ratio [95% CI]':>24} {'bg ms':>7} "
           f"{'bg ratio [95% CI]':>24} {'pages as-is':>11} {'pages preload':>13} {'hot ratio [95% CI]':>24}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['preset']:<9} {r['as-is'][0]:>9,.0f} {r['preload'][0]:>10,.0f} {fmt_ratio(r['ratio']):>24} "
              f"{r['preload-bg'][0]:>7,.0f} {fmt_ratio(r['ratio_bg']):>24} {r['as-is'][1]:>11,.0f} "
              f"{r['preload'][1]:>13,.0f} {fmt_ratio(r['ratio_hot']):>24}")


def overhead(lib: Path, plan_text: Path, runs: int) -> None:
    """Hot start: /bin/true directly, through the launcher, through LD_AUDIT (plan all cached)."""
    launcher, libso = runner.binaries()
    subprocess.run([str(launcher), str(plan_text), "--", "true"], check=True)  # warm the plan's pages
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in runner.library_env(plan_text).items())
    variants = [("direct", "/bin/true"), ("launcher", f"{launcher} {plan_text} -- /bin/true"),
                ("ld-audit", f"{env} /bin/true")]
    print(f"\nlauncher overhead, hot: {runs} rounds, /bin/true with the libLLVM plan "
          f"({plan_text}) already cached", flush=True)
    doc = session(work_dir() / "overhead.results.json", variants, lib, None, ["hot"], runs)
    for v in ("launcher", "ld-audit"):
        c = comparison(doc, v, "hot")
        print(f"  {v:<9} median {cell(doc, v, 'hot') * 1e3:.2f} ms vs direct {cell(doc, 'direct', 'hot') * 1e3:.2f} ms:"
              f" difference of means {c['diff'] * 1e3:+.2f} ms, 95% CI [{c['diff_ci_low'] * 1e3:+.2f}, "
              f"{c['diff_ci_high'] * 1e3:+.2f}] ms")


def relinked_packed() -> Path:
    """libLLVM relinked by lld in the first-access order of the bundled profile, then packed
    (DT_RELR): the pipeline's product, built with the library's own steps (cached)."""
    from elflayout.targets import libllvm

    w = work_dir() / "relink"
    w.mkdir(exist_ok=True)
    base = libllvm.relink("lld")
    prof = ROOT / "profiles" / "libLLVM-16-relink-llc-version.profile.json.gz"
    order = w / "llvm.lld"
    py = [sys.executable, "-m", "elflayout"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    pipeline.order_files(pipeline.Request(prof, "lld", lib=base["lib"]), order)
    ordered = libllvm.relink("lld", extra_link_args=[f"--symbol-ordering-file={order}", "--no-warn-symbol-ordering"])
    out = w / "ordered-packed" / "libLLVM-16.so.1"
    out.parent.mkdir(exist_ok=True)
    if not out.exists() or out.stat().st_mtime < ordered["lib"].stat().st_mtime:
        subprocess.run(py + ["pack-relocs", str(ordered["lib"]), "-o", str(out), "--check", "--force"], check=True,
                       env=env, capture_output=True)
    print(f"  ordered+packed: {out} (relinked {ordered['lib']}, packed with pack-relocs --check)", flush=True)
    return out


def methods(lib: Path, plan_text: Path, runs: int) -> None:
    """hdd, selective: the ways of applying a plan other than the launcher's default."""
    launcher, _ = runner.binaries()
    m = f"--map {shlex.quote(str(lib.parent))}={{mount}}"
    env_of = lambda audit: " ".join(  # noqa: E731
        f"{k}={shlex.quote(v)}" for k, v in runner.library_env(plan_text, audit=audit,
                                                               map_=[f"{lib.parent}={{mount}}"]).items())
    variants = [("as-is", CMD), ("launcher pread", f"{launcher} {m} {plan_text} -- {CMD}"),
                ("launcher readahead", f"{launcher} --method readahead {m} {plan_text} -- {CMD}"),
                ("LD_AUDIT pread", f"{env_of(True)} {CMD}"), ("LD_PRELOAD pread", f"{env_of(False)} {CMD}")]
    print(f"\nmethods on hdd: {runs} rounds, selective", flush=True)
    doc = session(work_dir() / "methods.hdd.results.json", variants, lib, "hdd", ["selective"], runs)
    for v, _ in variants:
        c = comparison(doc, v, "selective")
        print(f"  {v:<20} {cell(doc, v, 'selective') * 1e3:>7,.0f} ms  {cell(doc, v, 'selective', 'pages_read'):>7,.0f} "
              f"pages  ratio {fmt_ratio(c) if c else '-'}")


CHROMIUM_DIR = Path("/usr/lib/chromium")


def bench_chromium(runs: int, presets: list[str]) -> None:
    """Chromium's own files (the 300 MB executable, .pak resources, ICU data, V8 snapshots)
    served from the emulated disk; a headless start that loads and dumps about:blank. The
    system libraries it links stay on the host disk (a mount per directory would move
    /usr/lib/x86_64-linux-gnu as a whole). Variants through ``measure --preload``."""
    files = sorted(str(f) for f in CHROMIUM_DIR.iterdir()
                   if f.is_file() and (f.name == "chromium" or f.suffix in (".pak", ".dat", ".bin")))
    prof = work_dir() / "chromium-profile"
    prof.mkdir(exist_ok=True)
    cmd = (f"{{mount}}/chromium --headless=new --no-sandbox --disable-gpu --user-data-dir={prof} "
           f"--dump-dom about:blank >/dev/null 2>&1")
    print(f"\n## Chromium, headless start to about:blank ({len(files)} files of {CHROMIUM_DIR} on the emulated disk)",
          flush=True)
    res = work_dir() / "chromium.input.results.json"
    print(f"  input: measure, selective, 2 runs, storage none -> {res}", flush=True)
    mp = MeasurePlan(variants=[("chromium", cmd)], states=["selective"], runs=2, files=files, census="none",
                     storage="none", retries=4, seed=1, argv=["bench_preload.py", "chromium input"])
    fileio.dump_json(measure(mp), res)
    ins = inputs.load([str(res)])
    rows = []
    for p in presets:
        pl = plan.make_plan(ins, p, argv=["bench_preload.py"])
        out = work_dir() / f"chromium.{p}.plan.json"
        model.save(pl, out)
        t = pl.metadata["totals"]
        print(f"  plan for {p}: {t['files']} files, {t['ranges']} ranges, {t['bytes'] / 1e6:.1f} MB, modelled read "
              f"{pl.metadata['modelled_read_s'] * 1e3:.0f} ms", flush=True)
        r = work_dir() / f"chromium.{p}.results.json"
        mp = MeasurePlan(variants=runner.measure_variants([("chromium", cmd)], str(out), files, p),
                         states=["selective", "hot"], runs=runs, files=files, census="none", storage=p, retries=4, seed=1,
                         argv=["bench_preload.py", f"chromium {p}"])
        doc = measure(mp)
        fileio.dump_json(doc, r)
        doc = results_model.parse(doc, str(r))
        c = comparison(doc, "chromium+preload", "selective")
        rows.append((p, cell(doc, "chromium", "selective") * 1e3, cell(doc, "chromium+preload", "selective") * 1e3,
                     fmt_ratio(c), c.get("paired_ratio") if c else None,
                     cell(doc, "chromium", "selective", "pages_read"),
                     cell(doc, "chromium+preload", "selective", "pages_read")))
        print(f"    ({r})", flush=True)
    print(f"\nChromium headless start, selective cold (its {len(files)} files evicted), {runs} rounds, medians; "
          f"ratio = mean with / mean without preload, 95% BCa CI")
    hdr = f"{'storage':<9} {'without ms':>10} {'with ms':>9} {'ratio [95% CI]':>24} {'pages without':>13} {'pages with':>10}"
    print(hdr)
    print("-" * len(hdr))
    for p, a, b, ratio, _, pa, pb in rows:
        print(f"{p:<9} {a:>10,.0f} {b:>9,.0f} {ratio:>24} {pa:>13,.0f} {pb:>10,.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="rounds per A/B session (default 5)")
    ap.add_argument("--presets", default="hdd,emmc,sata-ssd,host",
                    help="storage presets, 'host' = no emulation (default hdd,emmc,sata-ssd,host)")
    ap.add_argument("--relink", action="store_true", help="also the ordered+packed relink (hdd; builds it, cached)")
    ap.add_argument("--relinked", metavar="LIB", type=Path,
                    help="with --relink: measure this ordered+packed libLLVM-16 (e.g. bench_pipeline's best) "
                         "instead of building one")
    ap.add_argument("--only-relink", action="store_true", help="only the relink figures (implies --relink)")
    ap.add_argument("--methods", action="store_true",
                    help="also readahead, LD_AUDIT and LD_PRELOAD on hdd (selective)")
    ap.add_argument("--chromium", action="store_true", help="also Chromium's headless start (hdd, emmc)")
    ap.add_argument("--only-chromium", action="store_true", help="only the Chromium figures")
    ap.add_argument("--overhead-runs", type=int, default=40, help="rounds of the hot-overhead session (default 40)")
    a = ap.parse_args()
    presets = a.presets.split(",")
    if a.only_chromium:
        bench_chromium(a.runs, ["hdd", "emmc"])
        return 0
    print(f"$ python3 bench/bench_preload.py --runs {a.runs} --presets {a.presets}{' --relink' if a.relink else ''}"
          f"{' --only-relink' if a.only_relink else ''}{f' --relinked {a.relinked}' if a.relinked else ''}"
          f"   (load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)", flush=True)
    if a.only_relink:
        a.relink, presets = True, []
    lib = private_copy(SYSTEM_LIB, "system")
    if presets:
        print(f"\n## Debian's libLLVM-16 as shipped ({SYSTEM_LIB}), `{CMD}`", flush=True)
        plans = make_plans(lib, "system", presets)
        rows = ab(lib, "system", plans, presets, a.runs)
        table(f"Debian's libLLVM-16, {CMD}, selective cold (library evicted), read_ahead_kb 128, {a.runs} rounds, "
              f"medians; ratio = mean preload / mean as-is, 95% BCa CI", rows)
    if a.relink:
        print("\n## libLLVM-16 relinked in profile order (lld) and packed (DT_RELR)", flush=True)
        rp = private_copy(a.relinked, "relinked-given") if a.relinked else relinked_packed()
        if a.relinked:
            print(f"  ordered+packed: {a.relinked} (given), measured through a copy {rp}", flush=True)
        tag = "relinked-given" if a.relinked else "ordered-packed"
        rplans = make_plans(rp, tag, ["hdd"])
        rrows = ab(rp, tag, rplans, ["hdd"], a.runs)
        table(f"ordered+packed relink, {CMD}, selective cold, {a.runs} rounds", rrows)
    if a.only_relink:
        return 0
    overhead(lib, plans[presets[0]], a.overhead_runs)
    if a.methods:
        mplans = plans if "hdd" in plans else make_plans(lib, "system", ["hdd"])
        methods(lib, mplans["hdd"], max(2, a.runs // 2))
    if a.chromium:
        bench_chromium(a.runs, ["hdd", "emmc"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
