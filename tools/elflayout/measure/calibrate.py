"""Calibration: A/A runs that measure the noise of a startup, and the runs it needs.

Goal: before comparing two builds, know what this machine can resolve. "No change" from
too few runs is not a finding (Mytkowicz et al. 2009 show how much a benchmark's setup
alone moves a timing; Larres et al. 2013 calibrate their alarms on the noise of past runs).

Definitions: an *A/A session* measures the same command under two names, interleaved
round by round, exactly as ``elflayout measure`` would measure two builds. The *noise*
of a time is the sd of its log values (a relative spread); the *MDE* is the relative
change a two-sided Welch test detects with 80% power at that n and noise, at the level
the multiplicity correction of a file of that shape uses (statsmodels.stats.power).

Steps:
1. run the A/A session (``measure.session``, in process, as ``elflayout measure`` would);
2. compare a2 against a exactly as ``elflayout compare`` does (Welch on log times, exact
   or Welch counts, Holm across the file): any alarm is a false alarm, and says the
   machine's noise is not stationary (another job started, thermal state...);
3. per state x metric: the noise, whether counts are deterministic here, the MDE at
   this n, and the runs per side needed for the target effect;
4. recommend n: the largest runs-needed of the primary time comparisons, never below
   the minimum n of a time verdict (stats.MIN_TIME_RUNS).
"""

from __future__ import annotations

import dataclasses

from elflayout.measure import session
from elflayout.measure import stats

A, A2 = "a", "a2"


def aa_plan(base, command: str, runs: int, states, files, seed: int = 0):
    """The A/A session: ``base`` (a session.MeasurePlan carrying the controls) measuring
    ``command`` under two names."""
    return dataclasses.replace(base, variants=[(A, command), (A2, command)], runs=runs, states=list(states),
                               files=list(map(str, files)), seed=seed)


def measure(plan, on_event=None) -> dict:
    """Run the A/A session (measure.session, in process); the results document."""
    return session.measure(plan, on_event)


def analyse(doc: dict, target_effect: float = 0.05, primary=stats.DEFAULT_PRIMARY) -> dict:
    """Noise, MDE and runs needed per state x metric of an A/A results document."""
    names = [v["name"] for v in doc["variants"]]
    if len(names) < 2:
        raise ValueError("an A/A calibration needs two variants running the same command")
    a, b = names[:2]
    states = doc["metadata"].get("states") or sorted({r["state"] for r in doc["runs"]})
    runs = [r for r in doc["runs"] if not r.get("interference") and r["variant"] in (a, b)]
    comps, mu = stats.compare_runs(runs, [a, b], states, seed=doc["metadata"].get("seed", 0),
                                   primary=primary, target_effect=target_effect)
    rows = []
    for c in comps:
        rows.append({"state": c["state"], "metric": c["metric"], "n": min(c["n_a"], c["n_b"]),
                     "primary": c["primary"], "deterministic": c.get("deterministic"),
                     "noise_sd": c.get("noise_sd"), "log_scale": c.get("log_scale"),
                     "mde": c.get("mde"), "runs_needed": c.get("runs_needed"), "verdict": c["verdict"],
                     "false_alarm": c["verdict"] in ("faster", "slower", "more", "fewer")})
    need = [r["runs_needed"] for r in rows if r["primary"] and r["metric"] in stats.TIME_METRICS
            and r["runs_needed"]]
    recommended = max([stats.MIN_TIME_RUNS, *need])
    disturbed = sum(1 for r in doc["runs"] if r.get("interference"))
    return {"variants": [a, b], "states": states, "target_effect": target_effect, "rows": rows,
            "multiplicity": mu, "recommended_runs": recommended, "false_alarms": sum(r["false_alarm"] for r in rows),
            "disturbed_runs": disturbed}


def markdown(cal: dict) -> str:
    """The calibration as a Markdown table and a recommendation."""
    te = cal["target_effect"]
    lines = [f"| state | metric | n | noise (sd of log / sd) | counts | A/A verdict | MDE (80% power) "
             f"| runs for {te * 100:g}% |",
             "|---|---|---:|---:|---|---|---:|---:|"]
    for r in cal["rows"]:
        noise = ("–" if r["noise_sd"] is None else f"{r['noise_sd']:.3f}" if r["log_scale"]
                 else f"sd {r['noise_sd']:.4g}")
        kind = ("exact" if r["deterministic"] else "vary" if r["metric"] not in stats.TIME_METRICS else "")
        mde = "–" if r["mde"] is None else f"{r['mde'] * 100:.1f}%"
        star = " (primary)" if r["primary"] else ""
        lines.append(f"| {r['state']} | {r['metric']}{star} | {r['n']} | {noise} | {kind} | {r['verdict']} "
                     f"| {mde} | {r['runs_needed'] or '–'} |")
    mu = cal["multiplicity"]
    lines += ["", f"{mu['comparisons']} A/A comparisons ({mu['tested']} tested, Holm-corrected); "
                  f"false alarms: {cal['false_alarms']}; disturbed runs left out: {cal['disturbed_runs']}.",
              f"MDE and runs needed at the level a compare of this shape uses (0.05/{max(mu['tested_if_enough'], 1)}).",
              f"Recommended: --runs {cal['recommended_runs']} (to detect a {te * 100:g}% change in the primary "
              f"time comparisons with 80% power; never below {stats.MIN_TIME_RUNS}, the minimum n of a time verdict)."]
    if cal["false_alarms"]:
        lines.append("warning: identical commands were reported different: the machine's noise changed during "
                     "the session (other jobs?); calibrate again on a quieter moment or pin the CPU.")
    return "\n".join(lines) + "\n"
