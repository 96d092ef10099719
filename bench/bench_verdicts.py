#!/usr/bin/env python3
"""Figures of the time verdicts: false alarms, interval coverage, power (prints figures).

    python3 bench/bench_verdicts.py                 # collect the pool once (cached), then study it
    python3 bench/bench_verdicts.py --rounds 400    # pool size (rounds of 4 variants x 2 states)
    python3 bench/bench_verdicts.py --pool P.json   # study an existing pool (no measuring)

Method: one pool of real runs is collected once, with a CPU hog running beside it (a
loaded machine; ``--no-hog`` for a quiet one): `elflayout measure` of four variants of `llc-16 --version` (libLLVM-16
under test), interleaved, selective and hot, ``--rounds`` rounds:
  a, a2        the same command under two names (A/A),
  slow_hot     a wrapper (bench/spin_exec.c, static) that spins, then execs the command:
               5% of a's hot median wall time (a first session) less the wrapper's
               own cost (paired alternations of the wrapper with no spin and without),
  slow_sel     the same for a's selective median.
The studies then resample *rounds* of the pool (keeping each round's runs together, as
a real session pairs them) instead of hours of fresh runs on a shared machine:
1. coverage of the 95% interval of the ratio b/a (A/A: the truth is 1; A/B: the pool's
   ratio of geometric means) by n per side -> the minimum n (coverage >= 93%);
2. false alarms on A/A files: disjoint blocks of n consecutive rounds (independent
   files, as separate sessions would give), per primary metric and any alarm in a file
   after Holm's correction; also from resampled files;
3. power: detection of the 5% slowdown with the MDE each comparison prints.
Needs root (tracefs, eviction), cc and llc-16.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from _common import cache_dir as bench_cache_dir  # noqa: E402
LLVM = "/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1"
CMD = "llc-16 --version"


def cache_dir() -> Path:
    return bench_cache_dir("bench-verdicts")


def measure(out, *args):
    cmd = [sys.executable, "-m", "elflayout", "measure", *map(str, args), "--census", "none", "-o", str(out),
           "--force", "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    t = time.monotonic()
    subprocess.run(cmd, check=True, env=env)
    print(f"  $ elflayout measure {' '.join(map(str, args))} -o {out}   ({time.monotonic() - t:.0f} s)", flush=True)
    return json.loads(Path(out).read_text())


def spinner(d: Path) -> Path:
    """bench/spin_exec.c, linked statically when libc.a is there (the wrapper's own exec
    then costs less than dynamic loading would; what it still costs is measured)."""
    exe = d / "spin_exec-static"
    if not exe.exists():
        tmp = d / f".spin_exec.{os.getpid()}"
        src = ROOT / "bench" / "spin_exec.c"
        if subprocess.run(["cc", "-O2", "-static", "-o", tmp, src], capture_output=True).returncode:
            subprocess.run(["cc", "-O2", "-o", tmp, src], check=True)
        os.replace(tmp, exe)
    return exe


def median_wall(doc, variant, state):
    """Median wall time of the undisturbed runs of a cell. Disturbed runs are not used: a
    selective run whose eviction left the library resident (another process mapped it)
    times a hot start, and a spin sized from it is a tenth of 5% of a cold start."""
    from elflayout import results as model

    runs = model.as_results(doc).runs_of(variant, state)
    clean = [r.wall_s for r in runs if not r.disturbed]
    if len(clean) < MIN_CLEAN:
        causes = sorted({r.interference for r in runs if r.disturbed})
        raise SystemExit(f"bench_verdicts: {variant}/{state}: {len(clean)} of {len(runs)} runs undisturbed, "
                         f"{MIN_CLEAN} needed to size the spin" + (f" ({causes[0]})" if causes else "")
                         + ": collect with --isolate or on a quieter machine")
    return statistics.median(clean)


MIN_CLEAN = 5  # undisturbed runs per cell of the first session (the spin is sized from them)


def spin_us(pre, cost: float) -> dict:
    """{state: spin in us}: 5% of a's median in the first session less the wrapper's own
    cost (``wrapper_cost``), so the slowdown realised is 5%."""
    return {st: max(0, round((0.05 * median_wall(pre, "a", st) - cost) * 1e6)) for st in ("hot", "selective")}


def wrapper_cost(spin: Path, realtime: bool, pairs: int = 300) -> float:
    """What the wrapper adds with no spin (its own exec, then the PATH search), in s: the
    median of paired differences over ``pairs`` alternations of ``spin 0 true`` and
    ``true``, under the pool's scheduling (``realtime``: SCHED_FIFO 1, as ``measure
    --realtime`` runs the harness and its children). Not from the first session's hot
    medians: under load their difference is noise several times the cost (-3.9 ms seen,
    a hot spin of 16% instead of 5%); nor under SCHED_OTHER beside a CPU hog, where each
    exec waits for a CPU (1.4 ms seen, against 0.3 ms for a real-time child)."""
    true = shutil.which("true")

    def once(argv):
        t = time.perf_counter()
        os.waitpid(os.posix_spawn(argv[0], argv, os.environ), 0)
        return time.perf_counter() - t

    old = os.sched_getscheduler(0), os.sched_getparam(0)
    if realtime:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    try:
        diffs = [once([str(spin), "0", true]) - once([true]) for _ in range(pairs)]
    finally:
        os.sched_setscheduler(0, *old)
    return max(0.0, statistics.median(diffs))


CHUNK = 20  # rounds per measure session: the measurement lock is held per session, so others get turns


def assemble(parts: list[dict], spin: dict, cpu_hog: bool | None = None, load: list | None = None) -> dict:
    """One pool document from the sessions (rounds renumbered after the rounds of the
    sessions before, whatever their size; each run tagged with its session). ``cpu_hog``:
    whether the bench's CPU hog ran beside (None: not recorded); ``load``: the 1-minute
    load average before each session, where recorded."""
    runs, offset = [], 0
    for k, part in enumerate(parts):
        for r in part["runs"]:
            runs.append({**r, "round": r["round"] + offset, "seq": r["seq"] + k * 100000, "session": k})
        offset += part["metadata"]["runs"]
    return {**parts[0], "runs": runs, "summary": [], "comparisons": [],
            "metadata": {**parts[0]["metadata"], "runs": offset, "sessions": len(parts), "spin_us": spin,
                         "cpu_hog": cpu_hog, "load_1min": load or []}}


def spin_of(part: dict) -> dict:
    """{slow variant: spin in us} of a session, read back from the wrapper's commands
    (``spin_exec US CMD``)."""
    return {v["name"]: int(v["command"].split()[1]) for v in part["variants"] if v["name"].startswith("slow_")}


def sized_spin(pre, spin: Path, controls: tuple) -> dict:
    """{slow variant: spin in us}, sized from the first session ``pre`` and the wrapper's
    measured cost (printed)."""
    cost = wrapper_cost(spin, "--realtime" in controls)
    us = spin_us(pre, cost)
    for st in ("hot", "selective"):
        print(f"  {st}: a's median {median_wall(pre, 'a', st) * 1e3:.2f} ms, the wrapper with no spin "
              f"{cost * 1e3:+.3f} ms (median of paired differences); spin {us[st]} us", flush=True)
    return {"slow_hot": us["hot"], "slow_sel": us["selective"]}


def collect(rounds: int, out: Path, seed: int, controls: tuple = (), chunk: int = CHUNK, hog: bool = True) -> dict:
    """The pool: 4 variants x (selective, hot) x ``rounds``, with a CPU hog beside (or none:
    ``hog`` false, for a quiet machine), in sessions of ``chunk`` rounds (each cached: an
    interrupted collection resumes, with the spins of the sessions already collected, so
    every session injects the same slowdown). ``controls``: extra ``measure`` options of
    every session (e.g. --realtime)."""
    d = out.parent / f"{out.stem}.parts"
    d.mkdir(exist_ok=True)
    spin = spinner(out.parent)
    parts = [json.loads(f.read_text()) for f in sorted(d.glob("part*.json"))]
    load_f = d / "load.json"
    loads = json.loads(load_f.read_text()) if load_f.exists() else {}
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if hog else None
    try:
        print(f"CPU hog beside the measurements: pid {hog.pid}" if hog else "no CPU hog (a quiet machine)",
              flush=True)
        if parts:  # resumed: a spin sized anew (another wrapper cost, under other load) would mix slowdowns
            us = spin_of(parts[0])
            print(f"  resuming after {len(parts)} sessions: spin {us} us, as collected", flush=True)
        else:
            pre_f = d / "pre.json"
            pre = json.loads(pre_f.read_text()) if pre_f.exists() else measure(
                pre_f, "--name", "a", CMD, "--files", LLVM, "--state", "selective",
                "--state", "hot", "--runs", 15, "--seed", seed, *controls)
            us = sized_spin(pre, spin, controls)
        while (done := sum(p["metadata"]["runs"] for p in parts)) < rounds:
            k = len(parts)
            loads[f"part{k:03d}"] = os.getloadavg()[0]  # the machine's load is part of the pool's conditions
            load_f.write_text(json.dumps(loads))
            parts.append(measure(
                d / f"part{k:03d}.json", "--name", "a", CMD, "--name", "a2", CMD,
                "--name", "slow_hot", f"{spin} {us['slow_hot']} {CMD}",
                "--name", "slow_sel", f"{spin} {us['slow_sel']} {CMD}", "--files", LLVM, "--state", "selective",
                "--state", "hot", "--runs", min(chunk, rounds - done), "--seed", seed + k, *controls))
    finally:
        if hog:
            hog.kill()
            hog.wait()
    doc = assemble(parts, us, hog is not None, [loads[k] for k in sorted(loads)])
    from elflayout import fileio

    fileio.dump_json(doc, out)
    return doc


# --- studies on the pool --------------------------------------------------------------

def by_round(pool) -> tuple[list[int], dict]:
    """All rounds and {round: [undisturbed runs]} of the pool (``model.Results``): a file of
    n rounds drawn from the pool loses its disturbed runs exactly as a real session's
    statistics do."""
    rounds = {}
    for r in pool.runs:
        rounds.setdefault(r.round, [])
        if not r.disturbed:
            rounds[r.round].append(r)
    return sorted(rounds), rounds


def series(rounds, keys, variant, state, metric):
    return np.array([r.value(metric) for k in keys for r in rounds[k] if r.variant == variant and r.state == state],
                    float)


BCA_NS = (5, 10, 20)  # the replaced method, for reference only at these n


def coverage(pool, ns, trials, rng, stats):
    """Coverage of the 95% interval of b/a: A/A (truth 1) and a vs slow (truth: the pool's
    ratio of geometric means); the method in use (paired t on log ratios), its fallback
    (Welch t on logs) and the BCa bootstrap of the ratio of means it replaced. Files of
    n rounds are drawn from the rounds where both runs of the case are undisturbed."""
    ok, rounds = by_round(pool)
    cases = [("A/A wall selective", "a2", "selective"), ("A/A wall hot", "a2", "hot"),
             ("A/B wall hot (slow_hot)", "slow_hot", "hot"), ("A/B wall selective (slow_sel)", "slow_sel", "selective")]
    data, truth = {}, {}
    for name, b, st in cases:
        pa = {k: r.wall_s for k in ok for r in rounds[k] if r.variant == "a" and r.state == st}
        pb = {k: r.wall_s for k in ok for r in rounds[k] if r.variant == b and r.state == st}
        both = [k for k in ok if k in pa and k in pb]
        xa, xb = np.array([pa[k] for k in both]), np.array([pb[k] for k in both])
        data[name] = (xa, xb)
        truth[name] = 1.0 if name.startswith("A/A") else float(np.exp(np.log(xb).mean() - np.log(xa).mean()))
        truth[name + " (means)"] = 1.0 if name.startswith("A/A") else float(xb.mean() / xa.mean())
    table = {}
    for n in ns:
        table[n] = {}
        for name, _, _ in cases:
            xa, xb = data[name]
            idx = np.array([rng.choice(len(xa), n, replace=False) for _ in range(trials)])
            la, lb = np.log(xa[idx]), np.log(xb[idx])
            lt = np.log(truth[name])
            cov = []
            for paired in (False, True):
                lo, hi, _ = stats.t_intervals(la, lb, paired)
                cov.append(float(np.mean((lo <= lt) & (lt <= hi))))
            bca = None
            if n in BCA_NS:  # the bootstrap is 1000x slower: a tenth of the trials
                k = max(trials // 10, 1)
                hits = 0
                for t in range(k):
                    lo, hi, _ = stats.bootstrap_ci([xa[idx[t]], xb[idx[t]]], stats._ratio, seed=t, n_resamples=999)
                    hits += lo <= truth[name + " (means)"] <= hi
                bca = hits / k
            table[n][name] = (cov[0], cov[1], bca)
        row = "  ".join(f"{v[0] * 100:5.1f} {v[1] * 100:5.1f} " + (f"{v[2] * 100:5.1f}" if v[2] is not None else "    -")
                        for v in table[n].values())
        print(f"  n={n:3d}  {row}", flush=True)
    sizes = ", ".join(f"{k} {len(v[0])}" for k, v in data.items())
    print(f"   rounds with both runs undisturbed: {sizes}")
    return table, truth, [c[0] for c in cases]


def files(pool, n, rng, resampled: int):
    """Files of n rounds: the disjoint blocks of consecutive rounds (independent sessions),
    then ``resampled`` files of n random rounds."""
    ok, rounds = by_round(pool)
    out = [("disjoint", ok[i:i + n]) for i in range(0, len(ok) - n + 1, n)]
    out += [("resampled", sorted(rng.choice(ok, n, replace=False))) for _ in range(resampled)]
    return out, rounds


def runs_of(rounds, keys, variants):
    return [r for k in keys for r in rounds[k] if r.variant in variants]


def false_alarms(pool, n, rng, stats, resampled):
    """A/A files (a vs a2, selective + hot, all metrics): alarms per primary metric, and
    files with any alarm after Holm's correction."""
    fl, rounds = files(pool, n, rng, resampled)
    res = {"disjoint": [], "resampled": []}
    for kind, keys in fl:
        comps, mu = stats.compare_runs(runs_of(rounds, keys, ("a", "a2")), ["a", "a2"], ["selective", "hot"])
        alarm = {(c["metric"], c["state"]): c["verdict"] in ("faster", "slower", "more", "fewer") for c in comps}
        res[kind].append((alarm, mu["comparisons"], mu["tested"]))
    return res


def alarm_rates(rows, tested) -> dict:
    """{(metric, state): (files alarming, files with the row)} over A/A files ``rows``
    [(alarms, comparisons, tested)]. A file whose every run of a cell was disturbed has
    no row there: it is left out of that row's count, not counted as a file without an
    alarm (that would lower the rate by the share of such files)."""
    return {p: (sum(a.get(p, False) for a, _, _ in rows), sum(p in a for a, _, _ in rows)) for p in tested}


def alarm_line(rows, tested) -> str:
    """One line of the A/A study: per row alarms/files with the row, any alarm after Holm."""
    k = len(rows)
    rates = alarm_rates(rows, tested)
    anyf = sum(any(a.values()) for a, _, _ in rows)
    missing = k * len(tested) - sum(n for _, n in rates.values())
    rows_hit = {}  # which rows alarmed (the user/sys split has no test: never here)
    for a, _, _ in rows:
        for (m, s), hit in a.items():
            rows_hit[f"{m}:{s}"] = rows_hit.get(f"{m}:{s}", 0) + hit
    return (f"{k:4d} files ({rows[0][1]} comparisons each, {rows[0][2]} tested): "
            + ", ".join(f"{m}:{s} {x}/{n} ({x / n * 100 if n else 0:.1f}%)" for (m, s), (x, n) in rates.items())
            + f"; any alarm after Holm {anyf}/{k} ({anyf / k * 100:.1f}%)"
            + (f"; {missing} of these rows absent (every run of the cell disturbed), left out of their counts"
               if missing else "")
            + "; alarms by row: " + (", ".join(f"{r} {v}" for r, v in sorted(rows_hit.items()) if v) or "none"))


def power(pool, n, rng, stats, trials, slow, state, factor: float = 1.0):
    """a vs the spinning wrapper: detection of the slowdown on wall_s in ``state``, with
    the MDE the row prints. ``factor``: the wrapper's wall times multiplied by it (each
    run keeps its own noise; the realised slowdown becomes ``factor`` times the pool's)."""
    ok, rounds = by_round(pool)
    if factor != 1.0:
        rounds = scaled(rounds, slow, factor)
    out = []
    for _ in range(trials):
        keys = sorted(rng.choice(ok, n, replace=False))
        comps, _ = stats.compare_runs(runs_of(rounds, keys, ("a", slow)), ["a", slow], ["selective", "hot"])
        c = next((c for c in comps if c["metric"] == "wall_s" and c["state"] == state), None)
        if c is not None:  # else every run of the cell was disturbed: no row, no trial
            out.append((c["verdict"] == "slower", c.get("mde")))
    return out


def scaled(rounds: dict, variant: str, factor: float) -> dict:
    """{round: runs} with ``variant``'s wall times multiplied by ``factor``: the wrapper's
    spin is sized from a first session, and when the pool's own median differs the real
    slowdown is not the 5% asked; scaling the wrapper's runs sets it exactly, with every
    run's noise as measured."""
    import dataclasses

    def one(r):
        if r.variant != variant:
            return r
        return dataclasses.replace(r, wall_s=r.wall_s * factor, raw={**r.raw, "wall_s": r.wall_s * factor})
    return {k: [one(r) for r in v] for k, v in rounds.items()}


HOG_WORDS = {True: "CPU hog beside", False: "no CPU hog", None: "CPU hog beside (not recorded)"}


def load_words(load: list | None) -> str:
    return f"; load average {min(load):.1f}-{max(load):.1f} before its sessions" if load else ""


def describe_pool(pool, pool_path: Path) -> None:
    """The pool's size, scheduler, and the noise of each cell (the paired test sees the
    per-round log ratios)."""
    ok, rounds = by_round(pool)
    md = pool.metadata
    dist = sum(1 for r in pool.runs if r.disturbed)
    print(f"pool: {pool_path} - {len(ok)} rounds in {md.get('sessions', 1)} sessions, {len(pool.runs)} runs "
          f"({dist} disturbed by other processes, left out as compare does) "
          f"(`llc-16 --version`, libLLVM-16, {HOG_WORDS[md.get('cpu_hog')]}{load_words(md.get('load_1min'))}), "
          f"spin {md.get('spin_us')}; scheduler: "
          f"{(md.get('controls') or {}).get('scheduler', {}).get('applied', 'SCHED_OTHER (not recorded)')}")
    for v in ("a", "a2", "slow_hot", "slow_sel"):
        for st in ("selective", "hot"):
            x = series(rounds, ok, v, st, "wall_s")
            print(f"  {v:9s} {st:9s} wall median {np.median(x) * 1e3:7.2f} ms  CoV {x.std(ddof=1) / x.mean() * 100:5.1f}%"
                  f"  sd(log) {np.log(x).std(ddof=1):.3f}")
    for st in ("selective", "hot"):  # the noise the paired test (and its MDE) sees
        pa = {k: r.wall_s for k in ok for r in rounds[k] if r.variant == "a" and r.state == st}
        pb = {k: r.wall_s for k in ok for r in rounds[k] if r.variant == "a2" and r.state == st}
        lr = np.log([pb[k] / pa[k] for k in pa if k in pb])
        if len(lr) > 1:
            print(f"  A/A {st:9s} per-round log ratio a2/a: sd {lr.std(ddof=1):.3f} over {len(lr)} rounds", flush=True)


def study_coverage(pool, trials, rng, stats):
    """Study 1; returns the minimum n with coverage >= 93% from there on."""
    ok, _ = by_round(pool)
    t0 = time.monotonic()
    print("\n1. coverage of the 95% interval of b/a (%), per case: Welch-log (fallback)  paired-log (used)  "
          "BCa of the ratio of means (replaced; at n = 5, 10, 20, a tenth of the trials)")
    # n well below the pool's size: resampling most of a finite pool would shrink every
    # interval around the pool's own ratio and bias the coverage
    ns = [n for n in (3, 4, 5, 6, 8, 10, 12, 15, 20, 30) if n <= len(ok) // 5]
    table, truth, names = coverage(pool, ns, trials, rng, stats)
    print("   columns: " + " | ".join(names))
    print("   truths (ratio of geometric means): " + ", ".join(f"{k} {truth[k]:.4f}" for k in names))
    # the paired interval decides when rounds pair; Welch (the fallback) must hold too
    ok_n = [n for n in ns if all(min(table[m][k][:2]) >= 0.93 for k in names for m in ns if m >= n)]
    min_n = max(ok_n[0], stats.MIN_RUNS) if ok_n else None
    print(f"   minimum n with coverage >= 93% for every case, paired and Welch, from there on: {min_n}; "
          f"stats.MIN_TIME_RUNS = {stats.MIN_TIME_RUNS}" + ("" if min_n == stats.MIN_TIME_RUNS else "  <-- DIFFERS"))
    print(f"   ({time.monotonic() - t0:.0f} s)", flush=True)
    return min_n


def study_aa(pool, rng, stats, demo_n, aa_resampled, both_n, aa_n):
    """Study 2: A/A false alarms at the demo's n and ``aa_n``."""
    t0 = time.monotonic()
    for n in sorted({demo_n, *(aa_n or ()), *((stats.MIN_TIME_RUNS,) if both_n else ())}):
        res = false_alarms(pool, n, rng, stats, aa_resampled)
        print(f"\n2. A/A false alarms at n = {n}" + (" (the demo's default)" if n == demo_n else ""))
        for kind, rows in res.items():
            if not rows:
                continue
            print(f"   {kind:9s} " + alarm_line(rows, (*stats.DEFAULT_PRIMARY, ("wall_s", "hot"))), flush=True)
    print(f"   ({time.monotonic() - t0:.0f} s)")


def power_summary(res, real: float, limit: float = 0.05) -> dict:
    """Detection among trials ``res`` [(detected, printed MDE or None)]: overall, among
    the trials whose printed MDE is <= ``limit`` (where the row promises 80% power for a
    ``limit`` change), and among those whose MDE is <= the slowdown realised (``real``,
    a ratio). A trial without an MDE is in no conditional count."""
    mdes = [m for _, m in res if m is not None]
    small = [d for d, m in res if m is not None and m <= limit]
    below = [d for d, m in res if m is not None and m <= real - 1]
    above = [m for m in mdes if m > limit]
    return {"trials": len(res), "detected": sum(d for d, _ in res),
            "mde_within_limit": len(small), "detected_within_limit": sum(small),
            "mde_within_real": len(below), "detected_within_real": sum(below),
            "mde_above_limit": len(above), "median_mde_above_limit": float(np.median(above)) if above else None,
            "median_mde": float(np.median(mdes)) if mdes else None}


def power_line(n: int, s: dict, real: float, limit: float = 0.05) -> str:
    """One line of the power study from ``power_summary``."""
    def rate(k, of):
        return f" ({k / of * 100:.0f}%)" if of else ""

    return (f"     n={n:3d}: detected {s['detected']}/{s['trials']}{rate(s['detected'], s['trials'])}; "
            f"printed MDE <= {limit * 100:g}% in {s['mde_within_limit']} trials, detected in "
            f"{s['detected_within_limit']} of them{rate(s['detected_within_limit'], s['mde_within_limit'])}"
            + (f"; MDE > {limit * 100:g}% in {s['mde_above_limit']} (median MDE {s['median_mde_above_limit'] * 100:.1f}%)"
               if s["mde_above_limit"] else "")
            + f"; MDE <= the realised {(real - 1) * 100:.1f}% in {s['mde_within_real']}, detected in "
              f"{s['detected_within_real']}{rate(s['detected_within_real'], s['mde_within_real'])}"
            + (f"; median printed MDE {s['median_mde'] * 100:.1f}%" if s["median_mde"] is not None else ""))


def study_power(pool, rng, stats, power_trials, power_n, exact: float | None = None):
    """Study 3: detection of the injected slowdown at each n of ``power_n``; with
    ``exact``, also of that slowdown exactly (``scaled``)."""
    ok, rounds = by_round(pool)
    t0 = time.monotonic()
    print("\n3. power: a vs the wrapper spinning 5% of a's median (then exec), wall_s")
    for slow, st in (("slow_hot", "hot"), ("slow_sel", "selective")):
        xa, xb = series(rounds, ok, "a", st, "wall_s"), series(rounds, ok, slow, st, "wall_s")
        real = float(np.exp(np.log(xb).mean() - np.log(xa).mean()))
        print(f"   {slow} ({st}): realised slowdown (pool) geometric {real:.4f}, means {xb.mean() / xa.mean():.4f}")
        for n in power_n:
            if n > len(ok) // 4:
                print(f"     n={n:3d}: skipped (more than a quarter of the pool's {len(ok)} rounds)")
                continue
            res = power(pool, n, rng, stats, power_trials, slow, st)
            if not res:
                print(f"     n={n:3d}: no file had an undisturbed row")
                continue
            print(power_line(n, power_summary(res, real), real), flush=True)
            if exact:
                want = 1 + exact
                res = power(pool, n, rng, stats, power_trials, slow, st, factor=want / real)
                print(f"       the wrapper's runs scaled by {want / real:.4f} to a slowdown of exactly {exact:.0%}:")
                print(power_line(n, power_summary(res, want), want), flush=True)
    print(f"   ({time.monotonic() - t0:.0f} s)")


STUDIES = ("coverage", "aa", "power")


def study(pool_path: Path, trials: int, seed: int, demo_n: int, aa_resampled: int = 50, power_trials: int = 40,
          both_n: bool = False, power_n=None, aa_n=None, studies=STUDIES, power_exact: float | None = None):
    """The ``studies`` of STUDIES, in that order (each A/A or A/B file is a full compare:
    1-3 s on a loaded 2-core machine). Returns the coverage study's minimum n (None
    when it did not run)."""
    from elflayout.measure import stats
    from elflayout import results as model

    pool = model.read(pool_path)
    rng = np.random.default_rng(seed)
    describe_pool(pool, pool_path)
    min_n = study_coverage(pool, trials, rng, stats) if "coverage" in studies else None
    if "aa" in studies:
        study_aa(pool, rng, stats, demo_n, aa_resampled, both_n, aa_n)
    if "power" in studies:
        study_power(pool, rng, stats, power_trials, power_n or (demo_n, 30), power_exact)
    return min_n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--pool", type=Path, help="an existing pool (results file of the four variants)")
    ap.add_argument("--collect-only", action="store_true")
    ap.add_argument("--chunk", type=int, default=CHUNK,
                    help="rounds per measure session (the measurement lock is held per session; default %(default)s)")
    ap.add_argument("--partial", action="store_true", help="study the sessions of the pool collected so far")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--studies", nargs="+", choices=STUDIES, default=list(STUDIES),
                    help="which studies to run (default: all; skipping some saves time on a loaded machine)")
    ap.add_argument("--trials", type=int, default=2000, help="resampled files per n in the coverage study")
    ap.add_argument("--aa-resampled", type=int, default=50, help="resampled A/A files beside the disjoint ones")
    ap.add_argument("--power-trials", type=int, default=40, help="resampled A/B files per n in the power study")
    ap.add_argument("--both-n", action="store_true", help="A/A files also at stats.MIN_TIME_RUNS")
    ap.add_argument("--demo-n", type=int, default=None, help="the demo's default runs (default: read from demo)")
    ap.add_argument("--power-n", type=int, nargs="+", default=None, metavar="N",
                    help="rounds per A/B file in the power study (default: the demo's n and 30)")
    ap.add_argument("--aa-n", type=int, nargs="+", default=None, metavar="N",
                    help="A/A files also at these n (e.g. the power study's)")
    ap.add_argument("--realtime", action="store_true",
                    help="collect with `measure --realtime` (SCHED_FIFO): its own pool, pool-ROUNDS-rt.json")
    ap.add_argument("--isolate", action="store_true",
                    help="collect with `measure --isolate` (libLLVM served from a private loop device: another "
                         "process mapping or reading the library cannot disturb a run): its own pool, *-iso.json")
    ap.add_argument("--power-exact", type=float, default=None, metavar="FRACTION",
                    help="the power study also scales the wrapper's runs to a slowdown of exactly FRACTION "
                         "(e.g. 0.05), each run keeping its measured noise")
    ap.add_argument("--no-hog", action="store_true",
                    help="collect with no CPU hog beside (the power figure is for a quiet machine): its own pool, "
                         "*-quiet.json")
    a = ap.parse_args()
    controls = ("--realtime",) * a.realtime + ("--isolate",) * a.isolate
    stem = f"pool-{a.rounds}" + ("-rt" if a.realtime else "") + ("-iso" if a.isolate else "") + ("-quiet" if a.no_hog else "")
    pool = a.pool or cache_dir() / f"{stem}.json"
    if a.partial:  # study the sessions collected so far (another process may still be collecting)
        parts = sorted((cache_dir() / f"{stem}.parts").glob("part*.json"))
        docs = [json.loads(f.read_text()) for f in parts]
        pool = cache_dir() / f"{stem}-partial.json"
        from elflayout import fileio

        load_f = cache_dir() / f"{stem}.parts" / "load.json"
        loads = json.loads(load_f.read_text()) if load_f.exists() else {}
        fileio.dump_json(assemble(docs, spin_of(docs[0]), not a.no_hog, [loads[k] for k in sorted(loads)]), pool)
    elif not pool.exists():
        print(f"collecting the pool: {a.rounds} rounds -> {pool}", flush=True)
        collect(a.rounds, pool, a.seed, controls, a.chunk, hog=not a.no_hog)
    if a.collect_only:
        return 0
    demo_n = a.demo_n
    if demo_n is None:
        from elflayout import demo

        demo_n = demo.DEFAULT_RUNS
    study(pool, a.trials, a.seed, demo_n, a.aa_resampled, a.power_trials, a.both_n, a.power_n, a.aa_n,
          a.studies, a.power_exact)
    return 0


if __name__ == "__main__":
    sys.exit(main())
