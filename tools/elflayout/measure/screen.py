"""Screening: which set-up factors move a startup's time, by a 2-level factorial design.

Goal: before trusting an A/B comparison, find the factors of the set-up that change the
measurement itself (Mytkowicz et al. 2009: environment size and link order alone move
timings; Larres et al. 2013 list ASLR, read-ahead, CPU placement). Flater (NIST TN 1855,
2014) screens such factors with 2-level designs, reads them with block plots and shows
every run in violin-scatter plots; this module does the same for ``elflayout measure``.

Definitions:
- a *factor* has a name and two levels (LOW, HIGH), coded -1 and +1. Known names are
  measurement controls: ``aslr`` (on/off), ``read_ahead_kb`` (numbers), ``pin`` (none or
  a CPU number), ``realtime`` (off or a SCHED_FIFO priority), ``storage`` (a preset or
  none: needs --files). Any other name is
  substituted into the command as ``{NAME}`` (a library path, an environment variable,
  a build variant).
- a *design point* is one combination of levels; each runs as one ``elflayout measure``
  session of ``runs`` rounds (session-level controls cannot change within a session).
- the *response* is a metric of one run in one state; times are analysed as log values,
  so an effect is a relative change.

Steps:
1. design: the full 2^k factorial for k <= 4 (or with ``full``), else a 2^(k-p)
   fraction from the standard generators (k = 5: resolution V, every 2-factor
   interaction estimable; k = 6, 7: resolution IV, main effects clear of 2-factor
   interactions, which are aliased in pairs and not estimated);
2. run the points in a random order (seeded), each replicate in a fresh order;
3. fit y = b0 + sum b_i x_i (+ sum b_ij x_i x_j where estimable) by least squares
   (statsmodels OLS); standard errors clustered by session when there are replicates
   (runs of one session share its conditions), heteroscedasticity-robust (HC3)
   otherwise — with one replicate, session-to-session noise is not in the error term,
   and the output says so. An effect is the change from LOW to HIGH: 2 b_i (times:
   exp(2 b_i) - 1), with its 95% interval;
4. plots: a block plot per factor (full designs: each block is one combination of the
   other factors; a bar joins the mean response at LOW and at HIGH), and violin-scatter
   plots of every run per design point.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re

import numpy as np

from elflayout.errors import ElflayoutError
from elflayout.measure import stats
from elflayout.measure.screen_model import Factor, point_name  # noqa: F401 - point_name re-exported

CONTROLS = ("aslr", "read_ahead_kb", "pin", "realtime", "storage")
# generators of the added factors, as products of the basic factors' indices (Box, Hunter
# and Hunter's standard fractions: k=5 -> 2^(5-1) res V, k=6 -> 2^(6-2) res IV, k=7 -> 2^(7-3) res IV)
GENERATORS = {5: [(0, 1, 2, 3)], 6: [(0, 1, 2), (1, 2, 3)], 7: [(0, 1, 2), (1, 2, 3), (0, 2, 3)]}
MAX_FACTORS = 7


def parse_factor(text: str) -> Factor:
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=([^,]*),([^,]*)", text.strip())
    if not m or not m.group(2) or not m.group(3):
        raise ElflayoutError(f"--factor {text!r}: expected NAME=LOW,HIGH (e.g. aslr=on,off)")
    f = Factor(*m.groups())
    if f.low == f.high:
        raise ElflayoutError(f"--factor {text!r}: LOW and HIGH are the same")
    if f.name == "aslr" and {f.low, f.high} != {"on", "off"}:
        raise ElflayoutError(f"--factor {text!r}: aslr levels are on and off")
    if f.name == "read_ahead_kb" and not all(v.isdigit() for v in (f.low, f.high)):
        raise ElflayoutError(f"--factor {text!r}: read_ahead_kb levels are numbers (KiB)")
    if f.name == "pin" and not all(v == "none" or v.isdigit() for v in (f.low, f.high)):
        raise ElflayoutError(f"--factor {text!r}: pin levels are 'none' or a CPU number")
    if f.name == "realtime" and not all(v == "off" or v.isdigit() for v in (f.low, f.high)):
        raise ElflayoutError(f"--factor {text!r}: realtime levels are 'off' or a SCHED_FIFO priority")
    return f


def design(k: int, full: bool = False) -> tuple[np.ndarray, dict]:
    """Coded design matrix (points x k, entries -1/+1) and its properties."""
    if k < 1 or k > MAX_FACTORS:
        raise ElflayoutError(f"screen: 1 to {MAX_FACTORS} factors (got {k})")
    if full or k <= 4:
        x = np.array(list(itertools.product((-1, 1), repeat=k)), dtype=int)[:, ::-1]
        return x, {"kind": "full", "points": len(x), "resolution": None, "generators": [],
                   "interactions": k >= 2}
    gens = GENERATORS[k]
    basic = k - len(gens)
    xb = np.array(list(itertools.product((-1, 1), repeat=basic)), dtype=int)[:, ::-1]
    added = [np.prod(xb[:, list(g)], axis=1) for g in gens]
    x = np.column_stack([xb, *added])
    res = min(len(g) + 1 for g in gens)
    names = "ABCDEFG"
    return x, {"kind": f"2^({k}-{len(gens)}) fraction", "points": len(x), "resolution": res,
               "generators": [f"{names[basic + i]} = {''.join(names[j] for j in g)}" for i, g in enumerate(gens)],
               "interactions": res >= 5}


def point_setup(factors: list[Factor], coded, command: str) -> tuple[str, dict, dict]:
    """(command, control settings of session.MeasurePlan, levels) of one design point."""
    levels = {f.name: (f.high if c > 0 else f.low) for f, c in zip(factors, coded)}
    controls = {}
    cmd = command
    for f in factors:
        v = levels[f.name]
        if f.name == "aslr":
            controls["no_aslr"] = v == "off"
        elif f.name == "read_ahead_kb":
            controls["read_ahead_kb"] = int(v)
        elif f.name == "pin":
            controls["pin"] = None if v == "none" else [int(v)]
        elif f.name == "realtime":
            controls["realtime"] = None if v == "off" else int(v)
        elif f.name == "storage":
            controls["storage"] = None if v == "none" else v
        else:
            cmd = cmd.replace("{" + f.name + "}", v)
    return cmd, controls, levels


def point_plan(base, factors: list[Factor], coded, command: str, name: str, runs: int, states, files, seed: int):
    """The measure session (session.MeasurePlan) of one design point: ``base``'s controls,
    overridden by the factors' levels."""
    cmd, controls, _ = point_setup(factors, coded, command)
    return dataclasses.replace(base, variants=[(name, cmd)], runs=runs, states=list(states),
                               files=list(map(str, files)), seed=seed, **controls)


def check_command(factors: list[Factor], command: str) -> None:
    for f in factors:
        if f.name not in CONTROLS and "{" + f.name + "}" not in command:
            raise ElflayoutError(f"--factor {f.name}: not a control ({', '.join(CONTROLS)}) and "
                                 f"{{{f.name}}} does not appear in the command")
    names = [f.name for f in factors]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ElflayoutError(f"--factor {sorted(dup)[0]}: named twice")


def run_order(n_points: int, replicates: int, seed: int) -> list[tuple[int, int]]:
    """(replicate, point) in the order to run: each replicate shuffled afresh."""
    rnd = random.Random(seed)
    out = []
    for r in range(replicates):
        pts = list(range(n_points))
        rnd.shuffle(pts)
        out += [(r, p) for p in pts]
    return out


def fit_effects(runs: list[dict], factors: list[Factor], x: np.ndarray, props: dict, metric: str, state: str,
                clustered: bool) -> dict:
    """Main effects (and 2-factor interactions where the design allows) with 95% intervals."""
    import statsmodels.api as sm  # optional and slow to import: only when effects are fitted

    rows = [r for r in runs if r["state"] == state and stats.run_value(r, metric) is not None
            and not r.get("interference")]
    y = np.array([stats.run_value(r, metric) for r in rows], float)
    log = metric in stats.TIME_METRICS and bool((y > 0).all())
    if log:
        y = np.log(y)
    terms = [(i,) for i in range(len(factors))]
    if props["interactions"]:
        terms += list(itertools.combinations(range(len(factors)), 2))
    cols = [np.array([np.prod([x[r["point"], i] for i in t]) for r in rows], float) for t in terms]
    if len(rows) <= len(terms) + 1 or np.ptp(y) == 0:
        return {"metric": metric, "state": state, "n": len(rows), "log_scale": log, "effects": [],
                "note": "no spread or too few runs to fit" if len(rows) else "no runs"}
    X = sm.add_constant(np.column_stack(cols), has_constant="add")
    model = sm.OLS(y, X)
    if clustered:
        fit = model.fit(cov_type="cluster", cov_kwds={"groups": np.array([r["session"] for r in rows])})
    else:
        fit = model.fit(cov_type="HC3")
    ci = fit.conf_int(0.05)
    effects = []
    for j, t in enumerate(terms, start=1):
        b, lo, hi = 2 * fit.params[j], 2 * ci[j][0], 2 * ci[j][1]
        if log:
            b, lo, hi = np.expm1(b), np.expm1(lo), np.expm1(hi)
        effects.append({"term": " x ".join(factors[i].name for i in t), "order": len(t), "effect": float(b),
                        "ci_low": float(lo), "ci_high": float(hi), "p": float(fit.pvalues[j]),
                        "significant": bool(lo > 0 or hi < 0)})
    return {"metric": metric, "state": state, "n": len(rows), "log_scale": log, "effects": effects,
            "se": "clustered by session" if clustered else
            "HC3 (one replicate: session-to-session noise is not in the error term)"}


def markdown(result: dict) -> str:
    d = result["design"]
    md = result["metadata"]
    lines = [f"Screening of `{md['command']}`: {len(result['factors'])} factors, {d['kind']} design "
             f"({d['points']} points" + (f", resolution {d['resolution']}, {'; '.join(d['generators'])}"
                                         if d.get("resolution") else "")
             + f"), {md['replicates']} replicate(s) x {md['runs']} rounds per point.", "",
             "| factor | LOW (-1) | HIGH (+1) |", "|---|---|---|"]
    lines += [f"| {f['name']} | {f['low']} | {f['high']} |" for f in result["factors"]]
    for a in result["effects"]:
        unit = "relative change LOW -> HIGH" if a["log_scale"] else "change LOW -> HIGH"
        lines += ["", f"**{a['metric']}, {a['state']}** ({a['n']} runs; {unit}; 95% intervals, "
                      f"{a.get('se', '')})", ""]
        if not a["effects"]:
            lines.append(f"no fit: {a.get('note')}")
            continue
        lines += ["| term | effect | 95% CI | p | |", "|---|---:|---|---:|---|"]
        for e in a["effects"]:
            fmt = (lambda v: f"{v * 100:+.2f}%") if a["log_scale"] else (lambda v: f"{v:+.4g}")
            lines.append(f"| {e['term']} | {fmt(e['effect'])} | [{fmt(e['ci_low'])}, {fmt(e['ci_high'])}] "
                         f"| {e['p']:.3g} | {'**matters**' if e['significant'] else ''} |")
        k = len(a["effects"])
        lines.append(f"\n{k} effects estimated (intervals are not corrected for the {k} of them).")
    if not d.get("interactions") and len(result["factors"]) > 1:
        lines.append("\n2-factor interactions are aliased with each other in this fraction: not estimated.")
    return "\n".join(lines) + "\n"
